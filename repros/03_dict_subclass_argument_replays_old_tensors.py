"""An OrderedDict (or list subclass) argument: call_key describes its tensors (so a new batch of the
same shapes gets the same key) but _substitute only swaps them in exact dicts/lists, so the capture
reads the caller's own tensors and every replay reads the first batch's. Eager: 0,2,4; compiled 0,0,0."""
import collections, minidl

@minidl.compile
def f(batch):
    return batch["x"] * 2

for i in range(3):
    b = collections.OrderedDict(x=minidl.full((2,), float(i)))
    print(i, "eager", (b["x"] * 2).tolist(), "compiled", f(b).tolist())
