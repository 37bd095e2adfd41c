"""GradScaler with the backward compiled and step()/update() outside (the scale is made lazily by the
first scaler.scale(), inside the capture): the scale tensor was the graph's own buffer, and every
replay filled it with init_scale again, undoing update(). Eager grads grow with the scale (1024, 2048,
4096, ...); compiled stay at init_scale, and get_scale() ends at 2048 instead of 16384."""
import minidl, minidl.nn as nn, minidl.nn.functional as F
x = minidl.ones(4, 3); y = minidl.tensor([0, 1, 2, 0])
for compiled in (False, True):
    minidl.manual_seed(0)
    m = nn.Linear(3, 3); opt = minidl.optim.SGD(m.parameters(), lr=0.1)
    scaler = minidl.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=1)
    def fwd_bwd(x, y):
        loss = F.cross_entropy(m(x), y)
        scaler.scale(loss).backward()
        return loss.detach()
    f = minidl.compile(fwd_bwd) if compiled else fwd_bwd
    out = []
    for i in range(4):
        opt.zero_grad()
        f(x, y)
        out.append(m.weight.grad.abs().sum().item())
        scaler.step(opt); scaler.update()
    print("compiled" if compiled else "eager   ", out, scaler.get_scale())
