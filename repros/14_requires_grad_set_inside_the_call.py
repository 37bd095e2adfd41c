"""requires_grad_(False) inside the call after the backward ("warm-up done: freeze the backbone"): the
guard kept the flags as the capture left them (False), so the next call, entering with the backbone
frozen, replayed the backward and the update of the backbone that the eager call no longer does. (The
flag set inside the call was also a Python side effect that a replay did not redo.)"""
import minidl, minidl.nn as nn, minidl.nn.functional as F
x, y = minidl.ones(4, 3), minidl.tensor([0, 1, 0, 1])
for compiled in (False, True):
    minidl.manual_seed(0)
    backbone, head = nn.Linear(3, 3), nn.Linear(3, 2)
    opt = minidl.optim.SGD([*backbone.parameters(), *head.parameters()], lr=0.1)
    def step(x, y, freeze_after):
        opt.zero_grad()
        loss = F.cross_entropy(head(backbone(x)), y)
        loss.backward()
        opt.step()
        if freeze_after:                      # warm-up done: train the head only from now on
            backbone.requires_grad_(False)
        return loss
    f = minidl.compile(step) if compiled else step
    f(x, y, False); f(x, y, True)
    w = backbone.weight.clone()
    f(x, y, True); f(x, y, True)
    print("compiled" if compiled else "eager   ", "backbone moved after freezing:", (backbone.weight - w).abs().sum().item(), "requires_grad", backbone.weight.requires_grad)
