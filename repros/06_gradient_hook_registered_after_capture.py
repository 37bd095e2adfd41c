"""A gradient hook (register_hook, register_post_accumulate_grad_hook) registered on a parameter after
the capture: the replay runs no backward Python, and no guard looked at the leaves' hooks (forward
hooks are guarded), so the hooks were skipped. Eager: weight and bias stay; compiled: both move."""
import minidl, minidl.nn as nn, minidl.nn.functional as F
x = minidl.ones(4, 3); y = minidl.tensor([0, 1, 2, 0])
for compiled in (False, True):
    minidl.manual_seed(0)
    m = nn.Linear(3, 3); opt = minidl.optim.SGD(m.parameters(), lr=0.1)
    def step(x, y):
        opt.zero_grad(); loss = F.cross_entropy(m(x), y); loss.backward(); opt.step(); return loss
    f = minidl.compile(step) if compiled else step
    f(x, y); f(x, y)
    m.weight.register_hook(lambda g: g * 0)          # freeze the weight by zeroing its gradient
    m.bias.register_post_accumulate_grad_hook(lambda p: p.grad.zero_())
    w, b = m.weight.clone(), m.bias.clone()
    f(x, y)
    print("compiled" if compiled else "eager   ", "weight moved:", (m.weight - w).abs().sum().item(), "bias moved:", (m.bias - b).abs().sum().item())
