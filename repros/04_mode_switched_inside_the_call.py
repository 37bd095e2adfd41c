"""A call that runs a module and then switches it to eval: the guard compared the training mode at
the end of the capture (eval) with the mode at the next call (eval, left by the first), so the replay
ran the train-mode dropout that the eager call no longer runs. Eager: a, b, b; compiled: a, c, d."""
import minidl, minidl.nn as nn

x = minidl.ones(2, 3)
for compiled in (False, True):
    minidl.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5))

    def fwd(x):
        out = model(x)
        model.eval()   # "done training: switch to eval"
        return out

    f = minidl.compile(fwd) if compiled else fwd
    minidl.manual_seed(1)
    with minidl.no_grad():
        print("compiled" if compiled else "eager   ", [f(x).sum().item() for _ in range(3)])
