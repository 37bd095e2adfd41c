"""An argument written in place before a replay raises (the embedding's index check, rerun at the
replay) keeps its old values: the replay copies written arguments back only when it completes. The
capture does copy them back in a `finally`, and eager obviously keeps the write. Eager x: [1, 1];
compiled x: [0, 0]."""
import minidl, minidl.nn.functional as F

W = minidl.randn(4, 2)
def step(x, idx):
    x.add_(1)
    return F.embedding(idx, W)

for fn in (step, minidl.compile(step)):
    fn(minidl.zeros(2), minidl.tensor([1])); fn(minidl.zeros(2), minidl.tensor([2]))   # capture, replay
    x = minidl.zeros(2)
    try:
        fn(x, minidl.tensor([9]))   # out of range: raises
    except IndexError:
        pass
    print("compiled" if fn is not step else "eager   ", x.tolist())
