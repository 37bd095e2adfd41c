"""minidl.compile(net.forward): the module itself runs without its __call__, so the recorder never saw
it: no guard on its training mode (eval() after the capture replayed train-mode dropout) nor on its
parameters' memory (.data replaced after the capture: the replay read the old weight)."""
import minidl, minidl.nn as nn, minidl.nn.functional as F
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(minidl.ones(3, 3))
    def forward(self, x):
        x = x @ self.w
        return F.dropout(x, 0.5, training=self.training)
for compiled in (False, True):
    minidl.manual_seed(0); net = Net()
    f = minidl.compile(net.forward) if compiled else net.forward
    with minidl.no_grad():
        a = f(minidl.ones(1, 3)).tolist(); net.eval(); b = f(minidl.ones(1, 3)).tolist()
        net.w.data = minidl.full((3, 3), 2.0)
        c = f(minidl.ones(1, 3)).tolist()
    print("compiled" if compiled else "eager   ", a, b, c)
