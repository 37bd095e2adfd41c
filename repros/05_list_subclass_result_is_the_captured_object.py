"""A result in a list (or tuple) subclass passes `rebuildable` (isinstance) but `_plan` keeps it as a
plain value: every replay returns the captured object itself, whose tensor is the graph's own buffer,
so what an earlier call returned changes under the caller. Eager: [[0,0],[2,2],[4,4]];
compiled: [[4,4],[4,4],[4,4]] (and all three are the same object)."""
import minidl

class Outputs(list):
    pass

def fwd(x):
    return Outputs([x * 2])

for f in (fwd, minidl.compile(fwd)):
    kept = [f(minidl.full((2,), float(i))) for i in range(3)]
    print("compiled" if f is not fwd else "eager   ", [o[0].tolist() for o in kept])
