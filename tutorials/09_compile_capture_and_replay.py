"""Tutorial 9: compiling a training step by capture and replay (``minidl.compile``).

Run it:  python tutorials/09_compile_capture_and_replay.py

An eager framework pays Python for every op: argument checks, type promotion, the autograd node, the
registry. For a small model that is most of a step. But a training step does the same work every time:
the same ops on the same shapes, only the numbers differ. So:

1. **Capture.** Run the step once, eagerly, and write down every kernel it launched with the buffers it
   gave each one (the forward, the backward and the optimizer's update alike: they all end in kernels).
2. **Replay.** Next time, copy the new inputs into the buffers the capture used and call the kernels
   in order. No op code, no autograd, no registry: only the kernels.
3. **Guard.** A replay is right only if the step would have done the same thing. Key the capture on
   what decides that (shapes, dtypes, modes), check it before each replay, and capture again when it
   differs. What a list of kernels cannot express (sizes that depend on values, Python side effects)
   is a *graph break*: that call runs eagerly.

Part A builds capture and replay in a few lines over numpy. Part B shows minidl's: the same idea,
with guards, graph breaks and the optimizer. Every claim is checked with ``assert``.
"""
import argparse
import logging
import time

import numpy as np

import minidl
from minidl import nn
from minidl.nn import functional as F

# --help says what this tutorial is and exits before anything runs; it takes no other arguments
argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()


def section(title):
    print()
    print("=" * 78)
    print(title)
    print("=" * 78)


# =============================================================================================
# Part A: capture and replay in twenty lines
# =============================================================================================
section("Part A: a recorder over three numpy 'kernels'")

TAPE = None   # while capturing: the list of (kernel, buffers) launched


def launch(kernel, *buffers):
    """Every op ends here: run the kernel, and write it down if a capture is on."""
    kernel(*buffers)
    if TAPE is not None:
        TAPE.append((kernel, buffers))


def k_matmul(a, b, out):
    np.matmul(a, b, out=out)


def k_relu(x, out):
    np.maximum(x, 0, out=out)


def k_sum(x, out):
    out[...] = x.sum()


def model(x, w):
    """An 'eager' function: allocates its results and launches kernels."""
    h = np.empty((x.shape[0], w.shape[1]))
    launch(k_matmul, x, w, h)
    launch(k_relu, h, h)
    s = np.empty(())
    launch(k_sum, h, s)
    return s


rng = np.random.default_rng(0)
w = rng.standard_normal((4, 3))
static_x = np.empty((5, 4))            # the capture's own input buffer
TAPE = []
static_x[...] = rng.standard_normal((5, 4))
captured_out = model(static_x, w)      # the capture: an ordinary eager run, written down
tape, TAPE = TAPE, None
print("captured launches:", [kernel.__name__ for kernel, _ in tape])

x_new = rng.standard_normal((5, 4))
static_x[...] = x_new                  # replay: new input into the captured buffer ...
for kernel, buffers in tape:           # ... and the kernels, in order: no model code runs
    kernel(*buffers)
assert captured_out == model(x_new, w), "the replay computes what the eager function computes"
print("replayed output", float(captured_out), "== eager output", float(model(x_new, w)))

# =============================================================================================
# Part B: minidl.compile
# =============================================================================================
section("Part B: minidl.compile on a training step")

minidl.manual_seed(0)
net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 4))
start = {k: v.clone() for k, v in net.state_dict().items()}
opt = minidl.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)


def step(x, y):
    opt.zero_grad()
    loss = F.cross_entropy(net(x), y)
    loss.backward()
    opt.step()
    return loss


batches = [(minidl.randn(8, 16), minidl.randint(0, 4, (8,))) for _ in range(5)]
minidl.manual_seed(1)
eager_losses = [step(x, y).item() for x, y in batches]

net.load_state_dict(start)
opt = minidl.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
compiled = minidl.compile(step)
minidl.manual_seed(1)
compiled_losses = [compiled(x, y).item() for x, y in batches]
print("eager losses:   ", [f"{v:.6f}" for v in eager_losses])
print("compiled losses:", [f"{v:.6f}" for v in compiled_losses])
assert compiled_losses == eager_losses, "bit for bit: a replay runs the very kernels the eager step ran"

graph = next(iter(compiled._minidl_compiled.graphs.values()))[0]
print(f"one graph of {len(graph.kinds)} steps:", ", ".join(sorted(set(graph.kinds))))
assert "dropout" in graph.kinds and "matmul" in graph.kinds, "forward, backward and update are all in the list"
# optimizer.step() is a *host step*: its Python runs at each replay, reading the step counts and lr afresh;
# 'grad' steps set each p.grad as the backward (and zero_grad) did
assert "host" in graph.kinds and "grad" in graph.kinds

section("Guards: a new shape is a new capture")
logging.basicConfig(format="  log: %(message)s")
minidl.compiler.set_logs(recompiles=True, graph_breaks=True)
compiled(minidl.randn(3, 16), minidl.randint(0, 4, (3,)))     # batch 3, not 8: captured again
assert compiled._minidl_compiled.captures == 2

section("Graph breaks: what a replay cannot redo runs eagerly")


def positives(x):
    return x[x > 0].sum()      # boolean-mask indexing: the result's size depends on the values


broken = minidl.compile(positives)
x = minidl.randn(10)
assert broken(x).item() == positives(x).item(), "never a wrong answer: the call ran eagerly"
try:
    minidl.compile(positives, fullgraph=True)(x)
    raise AssertionError("fullgraph=True should have raised")
except minidl.compiler.GraphBreakError as e:
    print("fullgraph=True raised:", str(e)[:110], "...")
minidl.compiler.set_logs(recompiles=False, graph_breaks=False)

section("What is left of Python per launch")


def chain(x):
    for _ in range(100):
        x = x * 1.0001 + 0.5
    return x


one = minidl.ones(1)
fast = minidl.compile(chain)
fast(one)
for name, fn in (("eager", chain), ("replayed", fast)):
    began = time.perf_counter()
    for _ in range(50):
        fn(one)
    print(f"  {name:9s}: {(time.perf_counter() - began) / 50 / 200 * 1e6:5.1f} µs per op")
assert fast(one).item() == chain(one).item()
print("\n(a replay still calls each kernel's device wrapper, which reads the layouts and picks the kernel;"
      "\n fusing kernels and planning memory is the next step: generated kernels, a buffer plan, CUDA graphs)")

print("\nAll claims checked.")
