"""0.0 and -0.0 are equal and hash alike, so a call with -0.0 found the graph captured with 0.0 (the
scalar is baked into the graph): eager 1/-0.0 = -inf, compiled +inf. Also complex(0, -0.0), and inside
lists/dicts of arguments."""
import minidl

def f(x, s):
    return x / s

cf = minidl.compile(f)
x = minidl.ones(2)
for s in (0.0, -0.0, 0.0, -0.0):
    print(s, "eager", f(x, s).tolist(), "compiled", cf(x, s).tolist())
