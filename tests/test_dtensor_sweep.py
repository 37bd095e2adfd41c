"""Every sharding rule, checked from the registry as the op sweep is (tests/opinfo.py): each op with a "sharding"
rule, each of its samples, each placement combination of the sample's inputs that the rule takes, on simulated
ranks — a 1-D mesh of 2 and of 4 ranks and a (2, 2) mesh — against the sample on whole tensors, forward and
backward, float64. Partial inputs (sum, avg, max) hold unequal pieces. A rule may refuse a combination (NotImplementedError naming the op, or the mixed-tensor error
where a sample passes plain tensors beside DTensors); what it takes must be right, and every rule must take some
combination with a split or partial input.

The oracles: the sample run on plain float64 leaves; the gradient of sum(out * W) for seeded W, whatever lies
where on the way. Where a combination is refused, torch's DTensor would redistribute or refuse too: the sweep
asserts nothing of it beyond the clear error.
"""
import itertools

import numpy as np
import pytest

import minidl
import minidl.dist as dist
from minidl.dist.device_mesh import init_device_mesh
from minidl.dist.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from minidl.formulas import BINARY, COMPARE
from minidl.ops import registry

import opinfo

RULED = sorted(name for name, d in registry.OPS.items() if "sharding" in d.rules)
# per sample: at most this many placement combinations on a mesh of 1 and of 2 dimensions, a seeded choice
# among more (every one where there are fewer; a 2-D mesh's combinations are more, and each costs more)
MOST_COMBINATIONS = {1: 32, 2: 16}

# samples that cannot run on DTensors at all, by what they call beside the op (DTensors take no in-place ops and
# no indexing: their ops make new DTensors; internal Functions take plain tensors only)
CANNOT = {
    ("tanh", "inplace-unary-on-view"): "an in-place op on an indexed view",
    ("mul", "inplace-mul-on-view"): "an in-place op on an indexed view",
    ("relu", "gate"): "ReLU's backward Function (internal)",
    ("relu", "gate-broadcast"): "ReLU's backward Function (internal)",
    ("sum", "unreduce"): "sum's backward Function (internal)",
    ("sum", "unreduce-keepdim"): "sum's backward Function (internal)",
}


# rules checked elsewhere, against training in one process: in-place optimizer steps (no output to compare here)
# and empty_like (no values to compare)
ELSEWHERE = {name: "tests/test_dtensor_optim.py" for name in (
    "_fused_sgd_step_", "_fused_adam_step_", "_fused_sgd_steps_", "_fused_adam_steps_", "_fused_adagrad_steps_",
    "empty_like")}


def _forward_only_samples() -> list:
    """Samples for the ruled ops the registry gives none (comparisons, bitwise and logical ops: nothing to
    differentiate): the op on two (3, 4) inputs of the kind it takes."""
    made = []
    for formula in (*BINARY, *COMPARE):
        name = formula.name
        if name not in RULED or any(n == name for n, _ in opinfo.FIRST_ORDER):
            continue
        rng = np.random.default_rng(len(made))
        kind = "int" if name.startswith("bitwise") or name in ("gcd", "lcm") else \
            "bool" if name.startswith("logical") else "float"
        values = [rng.integers(0, 6, (3, 4)) if kind != "float" else rng.integers(-3, 4, (3, 4)).astype(float)
                  for _ in range(2)]   # (small whole numbers: ties to compare, and partial pieces exact)
        if kind == "bool":
            values = [v % 2 == 0 for v in values]
        made.append((name, opinfo.Sample(name, registry.OPS[name].function, *values)))
    return made


def _alongside(x, values):
    """``values`` as a tensor beside ``x``: a DTensor replicated on x's mesh when x is one (targets, ids, class
    weights: what the registry's samples make as plain constants)."""
    t = minidl.tensor(values)
    return distribute_tensor(t, x.device_mesh, [Replicate()] * x.device_mesh.ndim) if isinstance(x, DTensor) else t


def _hand_samples() -> list:
    """Samples for the rules whose registry samples pass plain tensors beside the op's input (always refused
    here), with those tensors made DTensors too; and ops differentiable in one argument only, forward alone."""
    rng = np.random.default_rng(54)
    ce, ids = registry.OPS["_cross_entropy_rows"].function, np.array([2, 0, -100, 3, 1])
    weights = np.array([0.5, 1.0, 2.0, 1.5])
    made = [opinfo.Sample(f"cross_entropy-{reduction}", lambda x, r=reduction: ce(
        x, _alongside(x, ids), None, -100, 0.0, True, r), rng.standard_normal((5, 4))) for reduction in
        ("mean", "sum", "none")]
    made.append(opinfo.Sample("cross_entropy-weighted-smoothed", lambda x: ce(
        x, _alongside(x, ids), _alongside(x, weights), -100, 0.2, True, "mean"), rng.standard_normal((5, 4))))
    made.append(opinfo.Sample("nll_loss", lambda x: ce(x, _alongside(x, ids), None, -100, 0.0, False, "mean"),
                              rng.standard_normal((5, 4))))
    embedding = registry.OPS["embedding"].function
    made.append(opinfo.Sample("embedding", lambda w: embedding(_alongside(w, np.array([[3, 0], [2, 2]])), w),
                              rng.standard_normal((5, 3))))
    for name, low in (("igamma", 0.5), ("igammac", 0.5), ("zeta", 1.5)):
        op = registry.OPS[name].function
        made.append(opinfo.Sample(name, lambda a, b, op=op: op(a, b).detach(), rng.uniform(low, 3, (3, 4)),
                                  rng.uniform(0.5, 2, (3, 4))))
    for name, fill in (("zeros_like", ()), ("ones_like", ()), ("full_like", (2.5,))):
        op = registry.OPS[name].function
        made.append(opinfo.Sample(name, lambda x, op=op, fill=fill: op(x, *fill) * x, rng.standard_normal((3, 4))))
    where, clamp_max = registry.OPS["where"].function, registry.OPS["clamp_max"].function
    made.append(opinfo.Sample("where", lambda c, a, b: where(c, a, b), rng.standard_normal((3, 4)) > 0,
                              rng.standard_normal((3, 4)), rng.standard_normal((3, 4))))
    made.append(opinfo.Sample("clamp_max-number", lambda x: clamp_max(x, 0.3), rng.standard_normal((3, 4))))
    names = ["_cross_entropy_rows"] * 5 + ["embedding", "igamma", "igammac", "zeta", "zeros_like", "ones_like",
                                           "full_like", "where", "clamp_max"]
    return list(zip(names, made))


CASES = ([(n, s) for n, s in opinfo.FIRST_ORDER if n in RULED and (n, s.name) not in CANNOT] + _forward_only_samples()
         + _hand_samples())


def _leaf(values):
    values = opinfo.values_of(values) if isinstance(values, opinfo.NC) else np.asarray(values)
    t = minidl.tensor(values)
    return t.requires_grad_() if t.is_floating_point() else t


def _outputs(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _weights(outs) -> list:
    return [np.random.RandomState(5 + i).randn(*o.shape) for i, o in enumerate(outs)]


def _reference(sample):
    """(outputs, gradients of sum(out * W) per input or None) of the sample on whole tensors."""
    leaves = [_leaf(v) for v in sample.inputs]
    outs = _outputs(sample.fn(*leaves))
    ws = _weights(outs)
    differentiable = [(o, w) for o, w in zip(outs, ws) if o.requires_grad]
    if differentiable:
        sum((o * minidl.tensor(w)).sum() for o, w in differentiable).backward()
    return ([o.detach().numpy() for o in outs],
            [None if x.grad is None else x.grad.numpy() for x in leaves if x.is_floating_point()])


REFERENCES = {(n, s.name): _reference(s) for n, s in CASES}


PARTIALS = [Partial("sum"), Partial("avg"), Partial("max")]


def _choices(values, mesh_ndim, float_input):
    per_dim = [Shard(d) for d in range(np.ndim(values))] + [Replicate()] + (PARTIALS if float_input else [])
    return [c for c in itertools.product(per_dim, repeat=mesh_ndim)   # (torch refuses max beside sum or avg)
            if len(kinds := {p.reduce_op for p in c if p.is_partial()}) <= 1 or kinds == {"sum", "avg"}]


def _placed(values, mesh, placements):
    """A DTensor leaf of ``values`` placed so, its partial pieces unequal (a sum's and an average's pieces in
    unequal shares, a max's below the whole on all ranks but one), as a computation would leave them."""
    whole = [Replicate() if p.is_partial() else p for p in placements]
    piece = distribute_tensor(_leaf(values).detach(), mesh, whole).to_local()
    for d, p in enumerate(placements):
        c, k = mesh.get_local_rank(d), mesh.size(d)
        if p.is_partial():
            share = (2 * c + 1) / (k * k)   # (dyadic for k = 2, 4: whole numbers split exactly)
            piece = {"sum": piece * share, "avg": piece * (k * share), "max": piece - c}[p.reduce_op]
    shape = np.shape(values)
    d = DTensor.from_local(piece, mesh, placements, shape=shape,
                           stride=tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape))))
    return d.detach().requires_grad_() if d.dtype.is_floating_point else d


def _combinations(sample, mesh_ndim, seed):
    """Placements per input: every combination, or a seeded choice of MOST_COMBINATIONS[mesh_ndim] of them."""
    inputs = [opinfo.values_of(v) if isinstance(v, opinfo.NC) else np.asarray(v) for v in sample.inputs]
    per_input = [_choices(v, mesh_ndim, v.dtype.kind == "f") for v in inputs]
    count = int(np.prod([len(c) for c in per_input]))
    most = MOST_COMBINATIONS[mesh_ndim]
    if count <= most:
        return list(itertools.product(*per_input))
    rng = np.random.default_rng(seed)
    picks = rng.choice(count, most, replace=False)
    return [tuple(c[int(i) // int(np.prod([len(x) for x in per_input[k + 1:]])) % len(c)]
                  for k, c in enumerate(per_input)) for i in picks]


def _close(got, want) -> bool:
    if want.dtype.kind in "biu":
        return np.array_equal(got, want)
    return np.allclose(got, want, rtol=1e-9, atol=1e-9, equal_nan=True)


REFUSED = "refused"


def _check(sample, reference, mesh, placements) -> str | None:
    """None where the DTensor op agrees with the whole one, REFUSED where the op's rule refused, else what
    differs."""
    leaves = [_placed(opinfo.values_of(v) if isinstance(v, opinfo.NC) else np.asarray(v), mesh, p)
              for v, p in zip(sample.inputs, placements)]
    try:
        outs = _outputs(sample.fn(*leaves))
    except NotImplementedError:
        return REFUSED
    except RuntimeError as e:
        if "got mixed minidl.Tensor and DTensor" in str(e):
            return REFUSED
        raise
    want_outs, want_grads = reference
    if not all(isinstance(o, DTensor) for o in outs):
        return "an output is not a DTensor"
    fulls = [o.full_tensor() for o in outs]
    if not all(_close(f.detach().numpy(), w) for f, w in zip(fulls, want_outs)):
        return "forward"
    differentiable = [(f, w) for f, w in zip(fulls, _weights(fulls)) if f.requires_grad]
    if differentiable:
        sum((f * minidl.tensor(w)).sum() for f, w in differentiable).backward()
    floats = [d for d in leaves if d.dtype.is_floating_point]
    for d, want in zip(floats, want_grads):
        got = d.grad
        if (got is None) != (want is None) or (got is not None and not _close(got.full_tensor().numpy(), want)):
            return "backward"
        if got is not None and got.placements != tuple(Replicate() if p.is_partial() else p for p in d.placements):
            return f"the gradient lies as {got.placements}"
    return None


def _sweep(rank, mesh_shape, cases):
    mesh = init_device_mesh("cpu", mesh_shape)
    failures, covered = [], set()
    for number, (name, sample) in enumerate(cases):
        for placements in _combinations(sample, mesh.ndim, number):
            try:
                wrong = _check(sample, REFERENCES[(name, sample.name)], mesh, placements)
            except Exception as e:   # noqa: BLE001 -- any other error is a failure, named
                wrong = f"{type(e).__name__}: {e}"
            label = f"{name} [{sample.name}] {[[str(p) for p in ps] for ps in placements]}"
            if wrong not in (None, REFUSED):
                failures.append(f"{label}: {wrong}")
            elif wrong is None and any(not p.is_replicate() for ps in placements for p in ps):
                covered.add(name)
    return failures, covered


MESHES = {"1-D mesh of 2": (2, (2,)), "1-D mesh of 4": (4, (4,)), "(2, 2) mesh": (4, (2, 2))}


@pytest.mark.parametrize("mesh", list(MESHES))
def test_every_rule_agrees_with_the_op_on_whole_tensors(mesh):
    world, shape = MESHES[mesh]
    results = dist.sim.run(world, _sweep, shape, CASES)
    failures, covered = results[0]
    assert failures == [], "\n".join(failures[:40])
    assert all(r == results[0] for r in results)
    assert sorted(set(RULED) - covered - set(ELSEWHERE)) == [], "rules no sample ran with a split or partial input"
