"""A parameter replaced by a new Parameter (re-initialising a layer, load_state_dict(assign=True)) or set
to None after the capture: the memory guard held the captured tensor objects and compared their own
data_ptr, which never changes, so it passed and the replay kept using the old weight and bias."""
import minidl, minidl.nn as nn
minidl.manual_seed(0)
model = nn.Sequential(nn.Linear(3, 2))
cm = minidl.compile(model)
x = minidl.ones(1, 3)
with minidl.no_grad():
    cm(x); cm(x)
    model[0].weight = nn.Parameter(minidl.zeros(2, 3))      # e.g. re-initialising a layer
    print("eager", model(x).tolist(), "compiled", cm(x).tolist())
    model[0].bias = None
    print("eager", model(x).tolist(), "compiled", cm(x).tolist())
    model.load_state_dict({"0.weight": minidl.ones(2, 3)}, strict=False, assign=True)
    print("eager", model(x).tolist(), "compiled", cm(x).tolist())
