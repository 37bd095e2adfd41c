"""scaler.unscale_(opt) inside the compiled call (unscale, then clip, as torch's docs show), step()
and update() outside: the replay unscaled the gradients but not the scaler's per-optimizer stage (Python
state set at the capture only), so scaler.step() unscaled them a second time: that update is ~1/1024
of the eager one (the third call's gradients differ)."""
import minidl, minidl.nn as nn, minidl.nn.functional as F
x = minidl.ones(4, 3); y = minidl.tensor([0, 1, 2, 0])
for compiled in (False, True):
    minidl.manual_seed(0)
    m = nn.Linear(3, 3); opt = minidl.optim.SGD(m.parameters(), lr=0.1)
    scaler = minidl.amp.GradScaler("cpu", init_scale=1024.0)
    def fwd_bwd(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        nn.utils.clip_grad_norm_(m.parameters(), 10.0)
        return loss.detach()
    f = minidl.compile(fwd_bwd) if compiled else fwd_bwd
    out = []
    for i in range(3):
        f(x, y)
        out.append(m.weight.grad.abs().sum().item())
        scaler.step(opt); scaler.update()
    print("compiled" if compiled else "eager   ", out, m.weight.sum().item())
