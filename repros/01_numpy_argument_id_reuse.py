"""A numpy array argument is keyed by id(): a new array that reuses a freed one's id replays the
first call's values (minidl.tensor(a) copied at capture). Expected 0,2,4,6; compiled gives 0,0,0,0."""
import numpy as np, minidl

@minidl.compile
def f(a):
    return minidl.tensor(a) * 2

def eager(a):
    return minidl.tensor(a) * 2

for i in range(4):
    arr = np.full(3, float(i), dtype=np.float32)
    print(i, "eager", eager(arr).tolist(), "compiled", f(arr).tolist())
    del arr   # (a data loader yielding fresh arrays frees each one the same way)
