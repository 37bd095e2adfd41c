"""Tutorial 2: tape autograd, first from scratch, then minidl's.

Run it:  python tutorials/02_autograd_from_scratch.py

Reverse-mode automatic differentiation ("backprop") rests on two ideas:

1. **Record.** While computing forward, every operation remembers its inputs (its *parents*)
   and how to turn the gradient of its output into gradients of its inputs (its *local
   backward rule*, e.g. for ``z = x * y``: dz/dx = y, dz/dy = x). The records form a graph,
   often called the *tape*.
2. **Replay backwards.** Starting from the output with gradient 1, visit the nodes so that
   each node runs only after *every* node that uses its output has run (a reverse
   topological order), and apply the chain rule: add each node's contributions into its
   parents' gradients.

Part A builds this in about 60 lines for Python floats. Part B shows that minidl's real
autograd (``minidl.autograd``) has the same shape and gives the same numbers, and goes further:
higher-order gradients and user-defined ops. Every claim is checked with ``assert``.
"""
import argparse
import math

import minidl
from minidl import autograd

# --help says what this tutorial is and exits before anything runs; it takes no other arguments
argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()


def section(title):
    print()
    print("=" * 78)
    print(title)
    print("=" * 78)


# =============================================================================================
# Part A: a tiny tape autograd
# =============================================================================================
class Value:
    """A scalar that remembers how it was computed."""

    def __init__(self, data, parents=(), backward=None, op=""):
        self.data = float(data)
        self.grad = 0.0
        self.parents = parents        # the Values this one was computed from
        self.backward_rule = backward  # grad of self -> tuple of grads for the parents
        self.op = op

    # Each op computes its result and records a closure with its local derivative.
    def __add__(self, other):
        other = other if isinstance(other, Value) else Value(other)
        return Value(self.data + other.data, (self, other), lambda g: (g, g), "+")

    __radd__ = __add__

    def __mul__(self, other):
        other = other if isinstance(other, Value) else Value(other)
        return Value(self.data * other.data, (self, other), lambda g: (g * other.data, g * self.data), "*")

    __rmul__ = __mul__

    def exp(self):
        e = math.exp(self.data)
        return Value(e, (self,), lambda g: (g * e,), "exp")

    def tanh(self):
        t = math.tanh(self.data)
        return Value(t, (self,), lambda g: (g * (1 - t * t),), "tanh")

    def backward(self):
        # 1. Topological order WITHOUT recursion: an explicit stack of (node, parents_done).
        #    A node is appended to `order` only after all its parents have been appended.
        order, seen, stack = [], set(), [(self, False)]
        while stack:
            node, parents_done = stack.pop()
            if parents_done:
                order.append(node)
                continue
            if id(node) in seen:
                continue
            seen.add(id(node))
            stack.append((node, True))                   # come back after the parents
            stack.extend((p, False) for p in node.parents if id(p) not in seen)
        # 2. Walk it in reverse: outputs first, so each node's grad is complete when used.
        self.grad = 1.0
        for node in reversed(order):
            if node.backward_rule is not None:
                for parent, g in zip(node.parents, node.backward_rule(node.grad)):
                    parent.grad += g                    # += : a Value used twice gets both parts


def recursive_order(node, seen=None, order=None):
    """The textbook recursive topological sort, for comparison (don't use this one)."""
    seen = set() if seen is None else seen
    order = [] if order is None else order
    if id(node) not in seen:
        seen.add(id(node))
        for p in node.parents:
            recursive_order(p, seen, order)
        order.append(node)
    return order


# ---------------------------------------------------------------------------------------------
section("A1. The from-scratch tape on f(x, y) = tanh(x*y + 1) * x + exp(y)")
x, y = Value(0.5), Value(-1.5)
f = (x * y + 1).tanh() * x + y.exp()
f.backward()

# Check against the derivative worked out by hand:
#   u = x*y + 1,  f = tanh(u) * x + exp(y)
#   df/dx = (1 - tanh(u)^2) * y * x + tanh(u)
#   df/dy = (1 - tanh(u)^2) * x * x + exp(y)
u = 0.5 * -1.5 + 1
dfdx = (1 - math.tanh(u) ** 2) * -1.5 * 0.5 + math.tanh(u)
dfdy = (1 - math.tanh(u) ** 2) * 0.5 * 0.5 + math.exp(-1.5)
print(f"f = {f.data:.6f}   df/dx = {x.grad:.6f} (by hand {dfdx:.6f})   df/dy = {y.grad:.6f} (by hand {dfdy:.6f})")
assert math.isclose(x.grad, dfdx, rel_tol=1e-12) and math.isclose(y.grad, dfdy, rel_tol=1e-12)
# x is used twice (inside tanh and as the right factor): its gradient is the SUM of both paths.


# ---------------------------------------------------------------------------------------------
section("A2. Why the topological sort avoids recursion")
# A recursive depth-first search uses one Python stack frame per node on the longest path.
# Python caps the stack (sys.getrecursionlimit(), usually 1000), and long chains are ordinary:
# an RNN unrolled over many steps, or ``loss = loss + term`` in a loop. Build a chain of 5000
# steps of two ops each, 10,000 nodes deep:
chain = Value(1.0)
start = chain
for _ in range(5000):
    chain = chain * 1.0001 + 0.0
try:
    recursive_order(chain)
    raise AssertionError("expected the recursive sort to overflow the stack")
except RecursionError:
    print("recursive topological sort on a 10,000-node chain: RecursionError")
chain.backward()                       # the explicit-stack version does not care about depth
print(f"iterative backward on the same chain: d(out)/d(start) = {start.grad:.6f} = 1.0001**5000")
assert math.isclose(start.grad, 1.0001 ** 5000, rel_tol=1e-9)


# =============================================================================================
# Part B: minidl's autograd
# =============================================================================================
section("B1. The same function with minidl tensors")
# requires_grad=True marks leaves whose gradient we want. Every op on them runs through a
# ``minidl.autograd.Function``; the instance that ran it becomes a node of the graph, reachable
# from the result as ``.grad_fn``.
mx = minidl.tensor(0.5, dtype=minidl.float64, requires_grad=True)
my = minidl.tensor(-1.5, dtype=minidl.float64, requires_grad=True)
mf = (mx * my + 1).tanh() * mx + my.exp()
print("f =", mf)
assert math.isclose(mf.item(), f.data, rel_tol=1e-12)


def show_graph(tensor):
    """Print the graph below ``tensor.grad_fn`` (iteratively, of course)."""
    stack, seen = [(tensor.grad_fn, 0)], set()
    while stack:
        node, depth = stack.pop()
        label = node.name() if node is not None else "None (input without grad)"
        if type(node).__name__ == "AccumulateGrad":
            label += f"  -> .grad of the leaf with value {node.variable.item()}"
        print("    " + "  " * depth + label)
        if node is None or node in seen:
            continue
        seen.add(node)
        # next_functions: one (node, output index) edge per forward input; None for inputs that
        # need no gradient (here: the Python number 1, wrapped as a constant tensor).
        for edge in reversed(node.next_functions):
            stack.append((None if edge is None else edge[0], depth + 1))


print("the recorded graph (f.grad_fn and its next_functions, recursively):")
show_graph(mf)
assert mf.grad_fn.name() == "AddBackward0"
assert [e[0].name() for e in mf.grad_fn.next_functions] == ["MulBackward0", "ExpBackward0"]
assert mx.is_leaf and mx.grad_fn is None and not mf.is_leaf

# .backward() runs the engine (minidl/autograd/engine.py): it discovers the graph with an
# explicit stack, counts how many edges lead into each node, and runs a node once all of them
# have delivered their gradient: the same two steps as Part A, in dependency-count form.
mf.backward()
print(f"minidl:       df/dx = {mx.grad.item():.6f}   df/dy = {my.grad.item():.6f}")
print(f"from scratch: df/dx = {x.grad:.6f}   df/dy = {y.grad:.6f}")
assert math.isclose(mx.grad.item(), x.grad, rel_tol=1e-12)
assert math.isclose(my.grad.item(), y.grad, rel_tol=1e-12)

# The same deep chain is no problem either.
leaf = minidl.tensor(1.0, dtype=minidl.float64, requires_grad=True)
out = leaf
for _ in range(5000):
    out = out * 1.0001
out.backward()
assert math.isclose(leaf.grad.item(), 1.0001 ** 5000, rel_tol=1e-9)
print(f"5000-op chain in minidl: d(out)/d(leaf) = {leaf.grad.item():.6f}")


# ---------------------------------------------------------------------------------------------
section("B2. autograd.grad: gradients as return values, and gradients of gradients")
# autograd.grad returns the gradients instead of adding them into .grad. With
# create_graph=True the backward pass itself is recorded (minidl's backward rules are written
# with ordinary differentiable tensor ops), so the result can be differentiated again.
a = minidl.tensor(0.5, dtype=minidl.float64, requires_grad=True)
b = minidl.tensor(-1.5, dtype=minidl.float64, requires_grad=True)
fa = (a * b + 1).tanh() * a + b.exp()
dfda, dfdb = autograd.grad(fa, (a, b), create_graph=True)
print("df/da =", dfda, "  (it has a grad_fn, so it can be differentiated)")
assert a.grad is None                                  # grad() leaves .grad alone
assert dfda.grad_fn is not None
assert math.isclose(dfda.item(), dfdx, rel_tol=1e-12) and math.isclose(dfdb.item(), dfdy, rel_tol=1e-12)

(d2fda2,) = autograd.grad(dfda, a, retain_graph=True)
# Check the second derivative with a central finite difference of the first derivative.
h = 1e-5


def first_derivative_at(value):
    t = minidl.tensor(value, dtype=minidl.float64, requires_grad=True)
    (g,) = autograd.grad((t * b.detach() + 1).tanh() * t + b.detach().exp(), t)
    return g.item()


numeric = (first_derivative_at(0.5 + h) - first_derivative_at(0.5 - h)) / (2 * h)
print(f"d2f/da2 = {d2fda2.item():.8f}   finite difference of df/da: {numeric:.8f}")
assert math.isclose(d2fda2.item(), numeric, rel_tol=1e-6)

# A classic: third derivative of x**3 is 6, everywhere.
t = minidl.tensor(2.0, dtype=minidl.float64, requires_grad=True)
(g1,) = autograd.grad(t ** 3, t, create_graph=True)     # 3 t^2 = 12
(g2,) = autograd.grad(g1, t, create_graph=True)         # 6 t   = 12
(g3,) = autograd.grad(g2, t)                            # 6
print(f"x**3 at x=2: first {g1.item()}, second {g2.item()}, third {g3.item()}")
assert (g1.item(), g2.item(), g3.item()) == (12.0, 12.0, 6.0)


# ---------------------------------------------------------------------------------------------
section("B3. A custom op: numerically stable softplus as a minidl.autograd.Function")
# softplus(x) = log(1 + exp(x)). Written naively, exp(x) overflows for large x. The stable form
#   softplus(x) = max(x, 0) + log1p(exp(-|x|))
# never exponentiates a positive number. Its derivative is sigmoid(x).
#
# A Function subclass gives forward and backward as static methods. ``ctx`` is the graph node
# itself: forward stores what backward needs with ctx.save_for_backward (minidl records each
# saved tensor's version, so modifying it in place later is caught), and backward returns one
# gradient per forward input. Forward runs with gradient recording off; backward uses ordinary
# tensor ops, so with create_graph=True the custom op is twice differentiable too.
class Softplus(autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0) + (-x.abs()).exp().log1p()

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * x.sigmoid()


def softplus(x):
    return Softplus.apply(x)


z = minidl.tensor([-1000.0, -1.0, 0.0, 1.0, 1000.0], dtype=minidl.float64, requires_grad=True)
naive = (1 + z.detach().exp()).log()
stable = softplus(z)
print("naive  log(1 + exp(z)) =", naive)
print("stable softplus(z)     =", stable)
assert math.isinf(naive[4].item())                       # exp(1000) overflowed
assert stable[4].item() == 1000.0 and stable[0].item() == 0.0
assert math.isclose(stable[2].item(), math.log(2), rel_tol=1e-15)
assert stable.grad_fn.name() == "SoftplusBackward0" and isinstance(stable.grad_fn, Softplus)
print("stable.grad_fn =", stable.grad_fn.name(), " next_functions:",
      [e[0].name() for e in stable.grad_fn.next_functions])

(dz,) = autograd.grad(stable.sum(), z, create_graph=True)
print("d softplus/dz =", dz, " (= sigmoid(z))")
for xi, gi in zip(z.tolist(), dz.tolist()):
    sig = 1 / (1 + math.exp(-xi)) if xi >= 0 else math.exp(xi) / (1 + math.exp(xi))
    assert math.isclose(gi, sig, rel_tol=1e-12, abs_tol=1e-300)
# Finite-difference check of backward at moderate inputs.
for xi in (-3.0, -0.2, 0.7, 4.0):
    p = softplus(minidl.tensor(xi + 1e-6, dtype=minidl.float64)).item()
    m = softplus(minidl.tensor(xi - 1e-6, dtype=minidl.float64)).item()
    zi = minidl.tensor(xi, dtype=minidl.float64, requires_grad=True)
    softplus(zi).backward()
    assert math.isclose(zi.grad.item(), (p - m) / 2e-6, rel_tol=1e-7)

(d2z,) = autograd.grad(dz.sum(), z)                       # sigmoid'(z) = s (1 - s)
print("d2 softplus/dz2 =", d2z)
assert math.isclose(d2z[2].item(), 0.25, rel_tol=1e-12)

# save_for_backward's version check: changing a saved tensor in place before backward is an error.
w = z * 1.0
out = softplus(w)
w.add_(1.0)
try:
    out.sum().backward()
    raise AssertionError("expected an in-place modification error")
except RuntimeError as err:
    print("in-place change of a saved tensor is caught:", str(err).split(":")[0])

print()
print("All claims checked: the from-scratch tape and minidl.autograd agree.")
