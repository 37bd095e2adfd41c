"""A submodule replaced after the capture (a new head, another activation): the guards compare the
modules run at the capture (their mode, hooks, parameters' memory) but not which modules their parents
hold, so compile(model) kept replaying the old head and activation."""
import minidl, minidl.nn as nn
minidl.manual_seed(0)
model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 2))
cm = minidl.compile(model)
x = minidl.ones(1, 3)
with minidl.no_grad():
    cm(x); cm(x)
    model[2] = nn.Linear(3, 4)            # new head
    print("eager", model(x).shape, "compiled", cm(x).shape)
    model[1] = nn.Tanh()
    print("eager", model(x).tolist(), "compiled", cm(x).tolist())
