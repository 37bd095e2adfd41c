"""minidl.dist.tensor.parallel on simulated ranks: the styles' results equal one process's (the spec), the
collectives they call are counted (CommDebugMode), the char GPT trains tensor- and sequence-parallel as one
process does, loss_parallel equals the gathered loss, and bad plans are named. torch's signatures are the
oracle for the names."""
import inspect
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import minidl
import minidl.dist as dist
from minidl import nn
from minidl.dist.device_mesh import init_device_mesh
from minidl.dist.tensor import DTensor, Replicate, Shard, distribute_tensor
from minidl.dist.tensor.debug import CommDebugMode
from minidl.dist.tensor.parallel import (ColwiseParallel, PrepareModuleInput, PrepareModuleInputOutput,
                                         PrepareModuleOutput, RowwiseParallel, SequenceParallel, loss_parallel,
                                         parallelize_module)
from minidl.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from char_gpt import param_groups  # noqa: E402
from char_gpt_tp import split_gpt, step, tp_plan  # noqa: E402

X = np.random.RandomState(0).randn(2, 4, 6)


def _mlp(norm=False):
    minidl.manual_seed(0)
    layers = [nn.LayerNorm(6)] if norm else []
    return nn.Sequential(*layers, nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 6)).double()


def _counts(mode):
    return {f.__name__: n for f, n in mode.get_comm_counts().items()}


def _whole(t):
    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().numpy()


def _grads(model):
    return {name: _whole(p.grad) for name, p in model.named_parameters()}


def _reference(model, x):
    y = model(x)
    y.sum().backward()
    return y.detach().numpy(), _grads(model)


def _run_mlp(rank, plan, needs_grad, norm):
    model = parallelize_module(_mlp(norm), init_device_mesh("cpu", (2,)), plan)
    mine = X[:, 2 * rank:2 * rank + 2] if norm else X   # (sequence parallel: this rank's positions)
    x = minidl.tensor(mine).requires_grad_(needs_grad)
    with CommDebugMode() as forward:
        y = model(x)
    with CommDebugMode() as backward:
        y.sum().backward()
    return _whole(y), _grads(model), None if x.grad is None else x.grad.numpy(), _counts(forward), _counts(backward)


@pytest.mark.parametrize("needs_grad", [False, True])
def test_a_colwise_then_rowwise_mlp_all_reduces_once_forward_and_only_for_its_input_backward(needs_grad):
    x = minidl.tensor(X).requires_grad_(needs_grad)
    want_y, want_grads = _reference(_mlp(), x)
    plan = {"0": ColwiseParallel(), "2": RowwiseParallel()}
    for y, grads, x_grad, forward, backward in dist.sim.run(2, _run_mlp, plan, needs_grad, False):
        np.testing.assert_allclose(y, want_y, rtol=0, atol=1e-13)
        for name in want_grads:
            np.testing.assert_allclose(grads[name], want_grads[name], rtol=0, atol=1e-13, err_msg=name)
        assert forward == {"all_reduce": 1}
        assert backward == ({"all_reduce": 1} if needs_grad else {})
        if needs_grad:
            np.testing.assert_allclose(x_grad, x.grad.numpy(), rtol=0, atol=1e-13)


def test_sequence_parallel_layernorm_then_colwise_then_rowwise_gathers_once_and_reduce_scatters_once():
    """Forward: the all-gather into the column-parallel Linear, the reduce-scatter out of the row-parallel one.
    Backward: their reverses (a reduce-scatter, an all-gather), and the LayerNorm's two parameters' gradients,
    partial sums over the positions, all-reduced (torch leaves them partial until the optimizer's step)."""
    want_y, want_grads = _reference(_mlp(norm=True), minidl.tensor(X))
    plan = {"0": SequenceParallel(), "1": ColwiseParallel(input_layouts=Shard(1)),
            "3": RowwiseParallel(output_layouts=Shard(1), use_local_output=False)}
    for y, grads, _, forward, backward in dist.sim.run(2, _run_mlp, plan, False, True):
        np.testing.assert_allclose(y, want_y, rtol=0, atol=1e-13)
        for name in want_grads:
            np.testing.assert_allclose(grads[name], want_grads[name], rtol=0, atol=1e-13, err_msg=name)
        assert forward == {"all_gather": 1, "reduce_scatter": 1}
        assert backward == {"all_gather": 1, "reduce_scatter": 1, "all_reduce": 2}


V, T, B, STEPS = 29, 8, 3, 3   # (29 characters: split unevenly over 2 and 4 ranks)
_rs = np.random.RandomState(0)
BATCHES = [(_rs.randint(0, V, (B, T)), _rs.randint(0, V, (B, T))) for _ in range(STEPS)]


def _gpt():
    minidl.manual_seed(0)
    return split_gpt(V, T, 16, 4, 2, 0.0).double()


def _train(model):
    optimizer = minidl.optim.AdamW(param_groups(model, 0.1), lr=1e-2)
    losses = [step(model, optimizer, minidl.tensor(x), minidl.tensor(y), clip=0.5) for x, y in BATCHES]
    return losses, {name: _whole(v) for name, v in model.state_dict().items()}


def _train_parallel(rank, world, sequence_parallel):
    model = parallelize_module(_gpt(), init_device_mesh("cpu", (world,)), tp_plan(sequence_parallel))
    tied = model.tok.weight is model.head.weight
    return (*_train(model), tied, type(model.blocks[0].attn.q.weight).__name__)


@pytest.fixture(scope="module")
def one_process():
    """Three steps in one process; the gradients' norm (about 1) clipped to 0.5 in each."""
    return _train(_gpt())


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("sequence_parallel", [False, True], ids=["tp", "tp+sp"])
def test_the_char_gpt_trains_tensor_parallel_as_one_process(one_process, world, sequence_parallel):
    want_losses, want_state = one_process
    for losses, state, tied, kind in dist.sim.run(world, _train_parallel, world, sequence_parallel):
        assert tied and kind == "_DTensorParameter"   # (the embedding and the head still share one weight)
        np.testing.assert_allclose(losses, want_losses, rtol=0, atol=1e-8)
        assert state.keys() == want_state.keys()
        for name in want_state:
            np.testing.assert_allclose(state[name], want_state[name], rtol=0, atol=1e-8, err_msg=name)


def _losses(rank, options, as_dtensor):
    mesh = init_device_mesh("cpu", (2,))
    rs = np.random.RandomState(1)
    logits = distribute_tensor(minidl.tensor(rs.randn(6, 7)).requires_grad_(), mesh, [Shard(1)])
    target = minidl.tensor(rs.randint(0, 7, 6))
    target[2] = options.get("ignore_index", -100) if "ignore_index" in options else target[2]
    if "weight" in options:
        options = {**options, "weight": minidl.tensor(options["weight"], dtype=minidl.float64)}
    if as_dtensor:
        target = distribute_tensor(target, mesh, [Replicate()])
    with CommDebugMode() as forward, loss_parallel():
        loss = F.cross_entropy(logits, target, **options)
    loss.sum().backward() if loss.ndim else loss.backward()
    gathered = F.cross_entropy(logits.full_tensor().detach(), target.full_tensor() if as_dtensor else target,
                               **options)
    return _whole(loss), gathered.numpy(), _whole(logits.grad), _counts(forward), loss.placements


def _single(options):
    rs = np.random.RandomState(1)
    logits = minidl.tensor(rs.randn(6, 7)).requires_grad_()
    target = minidl.tensor(rs.randint(0, 7, 6))
    if "ignore_index" in options:
        target[2] = options["ignore_index"]
    if "weight" in options:
        options = {**options, "weight": minidl.tensor(options["weight"], dtype=minidl.float64)}
    loss = F.cross_entropy(logits, target, **options)
    (loss.sum() if loss.ndim else loss).backward()
    return logits.grad.numpy()


LOSS_OPTIONS = [{}, {"reduction": "sum"}, {"reduction": "none"}, {"ignore_index": 3},
                {"weight": [0.5, 1, 2, 1, 1, 3, 0.2]}, {"label_smoothing": 0.1},
                {"weight": [0.5, 1, 2, 1, 1, 3, 0.2], "label_smoothing": 0.2, "ignore_index": 1}]


@pytest.mark.parametrize("options", LOSS_OPTIONS, ids=[str(o) for o in LOSS_OPTIONS])
@pytest.mark.parametrize("as_dtensor", [False, True], ids=["plain-target", "dtensor-target"])
def test_loss_parallel_equals_the_gathered_loss_without_gathering(options, as_dtensor):
    want_grad = _single(options)
    for loss, gathered, grad, forward, placements in dist.sim.run(2, _losses, options, as_dtensor):
        np.testing.assert_allclose(loss, gathered, rtol=0, atol=1e-13)
        np.testing.assert_allclose(grad, want_grad, rtol=0, atol=1e-13)
        assert placements == (Replicate(),)
        assert forward == {"all_reduce": 4 if options.get("label_smoothing") else 3}   # (numbers per row only)


def _vocab_parallel(rank, padding_idx):
    model = _embedding(padding_idx)
    parallelize_module(model, init_device_mesh("cpu", (2,)), RowwiseParallel(input_layouts=Replicate()))
    ids = minidl.tensor([[0, 4, 2], [4, 1, 3]])
    out = model(ids)
    (out * minidl.arange(out.numel(), dtype=out.dtype).reshape(out.shape)).sum().backward()
    return out.detach().numpy(), model.weight.grad.full_tensor().numpy(), model.weight.placements


def _embedding(padding_idx):
    minidl.manual_seed(0)
    return nn.Embedding(5, 3, padding_idx=padding_idx).double()


@pytest.mark.parametrize("padding_idx", [None, 4, 1])
def test_a_vocabulary_parallel_embedding_looks_up_as_one_table(padding_idx):
    """5 rows over 2 ranks (3 and 2): each rank looks up the ids it holds; the padding row gets no gradient."""
    model = _embedding(padding_idx)
    out = model(minidl.tensor([[0, 4, 2], [4, 1, 3]]))
    (out * minidl.arange(out.numel(), dtype=out.dtype).reshape(out.shape)).sum().backward()
    for got, grad, placements in dist.sim.run(2, _vocab_parallel, padding_idx):
        np.testing.assert_allclose(got, out.detach().numpy(), rtol=0, atol=1e-15)
        np.testing.assert_allclose(grad, model.weight.grad.numpy(), rtol=0, atol=1e-15)
        assert placements == (Shard(0),)


class _TwoInputs(nn.Module):
    def forward(self, a, b, *, scale=None):
        return a, b, scale


def _prepared(rank):
    mesh = init_device_mesh("cpu", (2,))
    inputs = PrepareModuleInput(input_layouts=(Shard(0), None), desired_input_layouts=(Replicate(), None),
                                input_kwarg_layouts={"scale": Replicate()},
                                desired_input_kwarg_layouts={"scale": Replicate()})
    m = parallelize_module(_TwoInputs(), mesh, inputs)
    piece = minidl.tensor([[1.0, 2.0]]) + rank   # (this rank's row of a 2 x 2 tensor)
    a, b, scale = m(piece, "left alone", scale=minidl.tensor([3.0]))
    outputs = PrepareModuleOutput(output_layouts=(Replicate(), None, None),
                                  desired_output_layouts=(Shard(0), None, None))
    both = PrepareModuleInputOutput(input_layouts=(Shard(0), None), desired_input_layouts=(Replicate(), None),
                                    output_layouts=(Replicate(), None, None),
                                    desired_output_layouts=(Shard(1), None, None))
    n = parallelize_module(_TwoInputs(), mesh, outputs)
    o = parallelize_module(_TwoInputs(), mesh, both)
    return (a.placements, a.to_local().numpy().tolist(), b, scale.placements, n(minidl.tensor([[1.0], [2.0]]), 0)[0],
            o(piece, 0)[0].numpy().tolist())


def test_prepare_module_input_and_output_lay_out_what_they_name_and_leave_the_rest():
    got = dist.sim.run(2, _prepared)
    for rank, (placed, a, b, scale, row, column) in enumerate(got):
        assert placed == (Replicate(),) and a == [[1.0, 2.0], [2.0, 3.0]] and b == "left alone"
        assert scale == (Replicate(),)
        assert row.numpy().tolist() == [[1.0 + rank]]          # (a local piece: use_local_output)
        assert column == [[1.0 + rank], [2.0 + rank]]


class _Layers(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)) for _ in range(2)])
        self.conv = nn.Conv2d(1, 1, 1)


def _wildcards(rank):
    m = parallelize_module(_Layers(), init_device_mesh("cpu", (2,)), {"layers.*.0": ColwiseParallel()})
    return [type(m.layers[i][j].weight).__name__ for i in range(2) for j in range(2)]


def test_plan_keys_match_children_by_shell_patterns():
    assert dist.sim.run(2, _wildcards)[0] == ["_DTensorParameter", "Parameter", "_DTensorParameter", "Parameter"]


def _bad(rank, what):
    if what == "2-D mesh":
        parallelize_module(_Layers(), init_device_mesh("cpu", (1, 2), mesh_dim_names=("dp", "tp")),
                           {"layers.0.0": ColwiseParallel()})
    mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
    if what == "missing mesh dimension":
        mesh["dp"]
    if what == "conv":
        parallelize_module(_Layers(), mesh, {"conv": ColwiseParallel()})
    if what == "no such submodule":
        parallelize_module(_Layers(), mesh, {"layers.*.7": ColwiseParallel(), "head": RowwiseParallel()})
        return "warned"
    if what == "tied differently":
        model = _gpt()
        parallelize_module(model, mesh, {"head": ColwiseParallel(), "tok": ColwiseParallel()})


@pytest.mark.parametrize("what, error, message", [
    ("conv", NotImplementedError, r"ColwiseParallel on conv: ColwiseParallel splits only nn.Linear and "
                                  r"nn.Embedding, not Conv2d"),
    ("2-D mesh", ValueError, r"parallelize_module takes a 1-D device mesh, got a 2-D mesh \('dp', 'tp'\): pass "
                             r"its tensor-parallel dimension"),
    ("missing mesh dimension", KeyError, r"Invalid mesh_dim_names \('dp',\) specified. Valid mesh_dim_names are "
                                         r"\['tp'\]"),
    ("tied differently", ValueError, r"the parameter tied between tok.weight, head.weight is placed differently "
                                     r"by the plan \(tok.weight \[S\(1\)\], head.weight \[S\(0\)\]\)")])
def test_a_bad_plan_is_named(what, error, message):
    with pytest.raises(error, match=message):
        dist.sim.run(2, _bad, what)


def test_a_plan_key_matching_no_submodule_is_skipped_with_a_warning_naming_it():
    """As torch 2.13 does (a warning, not an error: a plan written for a family of models runs on each)."""
    with pytest.warns(UserWarning) as caught:
        assert dist.sim.run(2, _bad, "no such submodule") == ["warned"] * 2
    messages = {str(w.message) for w in caught}
    assert any("'layers.*.7' could not be resolved: no submodule matching token '7' in layers.0 (Sequential: "
               "children ['0', '1'])" in m
               for m in messages), messages
    assert any("'head' could not be resolved: no submodule matching token 'head'" in m for m in messages), messages


@pytest.mark.parametrize("name", ["ColwiseParallel", "RowwiseParallel", "SequenceParallel", "PrepareModuleInput",
                                  "PrepareModuleOutput", "PrepareModuleInputOutput", "parallelize_module",
                                  "loss_parallel"])
def test_the_names_and_arguments_are_torchs(name):
    torch_parallel = pytest.importorskip("torch.distributed.tensor.parallel")
    import minidl.dist.tensor.parallel as ours

    def arguments(fn):
        return [(p.name, p.kind, p.default if p.default is inspect.Parameter.empty or p.default is None
                 or isinstance(p.default, (bool, int, str)) else "object")
                for p in inspect.signature(fn).parameters.values()]
    assert arguments(getattr(ours, name)) == arguments(getattr(torch_parallel, name))


@pytest.mark.parametrize("flags", [[], ["--sequence-parallel"]], ids=["tp", "tp+sp"])
def test_the_example_trains_as_two_processes_over_gloo(flags, tmp_path):
    """examples/char_gpt_tp.py for real (two processes, minidl's socket transport): both end well and rank 0
    prints finite losses."""
    from example_runs import run_example_as_ranks
    runs = run_example_as_ranks("char_gpt_tp.py", "--steps", "4", "--log-every", "2", "--context", "16",
                                "--width", "16", *flags, cwd=tmp_path, ranks=2, timeout=240)
    assert [code for code, _ in runs] == [0, 0], runs
    losses = [float(v) for v in re.findall(r"step\s+\d+\s+loss ([\d.]+)", runs[0][1])]
    assert len(losses) == 2 and all(np.isfinite(losses)), runs[0][1]


def _loss_2d(rank, reduction):
    """Logits (8 rows, 7 classes) on a (dp 2, tp 2) mesh: rows split over dp, classes over tp."""
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    rs = np.random.RandomState(2)
    logits = distribute_tensor(minidl.tensor(rs.randn(8, 7)).requires_grad_(), mesh, [Shard(0), Shard(1)])
    target = distribute_tensor(minidl.tensor(rs.randint(0, 7, 8)), mesh, [Shard(0), Replicate()])
    with loss_parallel():
        loss = F.cross_entropy(logits, target, reduction=reduction)
    (loss.sum() if loss.ndim else loss).backward()
    return _whole(loss), _whole(logits.grad), loss.placements


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_loss_parallel_on_a_2d_mesh_splits_rows_over_data_parallel_ranks(reduction):
    rs = np.random.RandomState(2)
    logits = minidl.tensor(rs.randn(8, 7)).requires_grad_()
    loss = F.cross_entropy(logits, minidl.tensor(rs.randint(0, 7, 8)), reduction=reduction)
    (loss.sum() if loss.ndim else loss).backward()
    placed = (Shard(0), Replicate()) if reduction == "none" else (dist.tensor.Partial(), Replicate())
    for got, grad, placements in dist.sim.run(4, _loss_2d, reduction):
        np.testing.assert_allclose(got, loss.detach().numpy(), rtol=0, atol=1e-13)
        np.testing.assert_allclose(grad, logits.grad.numpy(), rtol=0, atol=1e-13)
        assert placements == placed


def _counted_apart(rank, shared):
    alone = dist.new_group([0])
    mode = shared if shared is not None else CommDebugMode()
    with mode:
        dist.all_reduce(minidl.ones(2))
        if rank == 0:
            dist.barrier(group=alone)
    return mode.get_total_counts()


def test_one_comm_debug_mode_entered_by_several_ranks_counts_each_ranks_own():
    assert dist.sim.run(2, _counted_apart, CommDebugMode()) == [2, 1]


def _partial_input(rank):
    model = parallelize_module(_mlp(), init_device_mesh("cpu", (2,)),
                               {"0": ColwiseParallel(input_layouts=dist.tensor.Partial()), "2": RowwiseParallel()})
    with CommDebugMode() as forward:
        y = model(minidl.tensor(X) / 2)   # (each rank's half of the sum)
    return _whole(y), _counts(forward)


def test_a_partial_input_to_a_column_parallel_linear_is_reduced_first_as_torchs():
    want = _mlp()(minidl.tensor(X)).detach().numpy()
    for y, forward in dist.sim.run(2, _partial_input):
        np.testing.assert_allclose(y, want, rtol=0, atol=1e-13)
        assert forward == {"all_reduce": 2}


def _looked_up(rank):
    w = distribute_tensor(minidl.tensor(np.arange(15.0).reshape(5, 3)), init_device_mesh("cpu", (2,)), [Shard(0)])
    ids = distribute_tensor(minidl.tensor([1, 4, 1]), w.device_mesh, [Replicate()])
    return [_whole(F.embedding(ids, w, padding_idx=1)), _whole(F.embedding(ids, w, 1)),
            _whole(F.embedding(ids, w, None, None))]


def test_a_split_embedding_takes_its_options_by_keyword_or_position():
    want = np.arange(15.0).reshape(5, 3)[[1, 4, 1]]
    for got in dist.sim.run(2, _looked_up):
        for g in got:
            np.testing.assert_array_equal(g, want)


def _norms(rank, placements):
    mesh = init_device_mesh("cpu", (2, 2) if len(placements) == 2 else (4,))
    x = distribute_tensor(minidl.tensor(np.random.RandomState(3).randn(5, 6)).requires_grad_(), mesh, placements)
    found = []
    for p in (1, 2, 3, "fro", 0, float("inf"), float("-inf")):
        n = x.norm(p)
        n.backward()
        found.append((float(n), _whole(x.grad)))
        x.grad = None
    return found


@pytest.mark.parametrize("placements", [[Shard(0)], [Shard(1)], [Shard(0), Shard(1)], [Replicate(), Shard(0)]],
                         ids=str)
def test_the_norm_of_a_split_tensor_is_the_whole_ones(placements):
    """Its value and gradient against numpy's (the rows of 5 split unevenly)."""
    x = np.random.RandomState(3).randn(5, 6)
    a = np.abs(x)
    want = {1: (a.sum(), np.sign(x)), 2: (np.sqrt((a ** 2).sum()), x / np.sqrt((a ** 2).sum())),
            3: ((a ** 3).sum() ** (1 / 3), np.sign(x) * a ** 2 / (a ** 3).sum() ** (2 / 3)),
            0: (float((x != 0).sum()), np.zeros_like(x)),
            float("inf"): (a.max(), np.sign(x) * (a == a.max())), float("-inf"): (a.min(), np.sign(x) * (a == a.min()))}
    want["fro"] = want[2]
    for found in dist.sim.run(4, _norms, placements):
        for (value, grad), p in zip(found, (1, 2, 3, "fro", 0, float("inf"), float("-inf"))):
            np.testing.assert_allclose(value, want[p][0], rtol=1e-13, err_msg=str(p))
            np.testing.assert_allclose(grad, want[p][1], rtol=0, atol=1e-13, err_msg=str(p))


def _clipped(rank, foreach):
    w = distribute_tensor(minidl.ones(4, 2, dtype=minidl.float64), init_device_mesh("cpu", (2,)), [Shard(0)])
    w.requires_grad_()
    (w * 3.0).sum().backward()
    return float(nn.utils.clip_grad_norm_([w], 1.0, foreach=foreach)), _whole(w.grad)


def test_clip_grad_norm_scales_split_gradients_by_the_whole_norm_and_foreach_declines_them():
    for norm, grad in dist.sim.run(2, _clipped, None):
        assert norm == pytest.approx(3.0 * np.sqrt(8), rel=1e-14)
        np.testing.assert_allclose(grad, np.full((4, 2), 3.0 / (3.0 * np.sqrt(8) + 1e-6)), rtol=1e-14)
    with pytest.raises(RuntimeError, match=r"foreach=True cannot handle global \(DTensor\) gradients"):
        dist.sim.run(2, _clipped, True)


def _refusal(rank, what):
    mesh = init_device_mesh("cpu", (2, 2))
    x = distribute_tensor(minidl.tensor(np.ones((4, 6))), mesh, [Shard(0), Shard(1)])
    if what == "plain targets of split rows":
        with loss_parallel():
            F.cross_entropy(x, minidl.tensor([0, 1, 2, 3]))
    if what == "classes split twice":
        with loss_parallel():
            F.cross_entropy(distribute_tensor(minidl.tensor(np.ones((4, 6))), mesh, [Shard(1), Shard(1)]),
                            minidl.tensor([0, 1, 2, 3]))
    if what == "norm along a dimension":
        x.norm(2, dim=1)
    if what == "embedding with max_norm":
        ids = distribute_tensor(minidl.tensor([0, 1]), mesh, [Replicate(), Replicate()])
        F.embedding(ids, x, max_norm=1.0)


@pytest.mark.parametrize("what, message", [
    ("plain targets of split rows", r"loss_parallel: logits placed \[S\(0\), S\(1\)\] split their rows; pass the "
                                    r"targets as a DTensor split by rows alike"),
    ("classes split twice", r"loss_parallel: the logits \(rows, classes\) must be split on the class dimension by "
                            r"exactly one mesh dimension"),
    ("norm along a dimension", r"minidl.norm's sharding rule takes the whole tensor's norm \(dim=None"),
    ("embedding with max_norm", r"minidl.embedding's sharding rule takes the ids as a DTensor, and neither "
                                r"max_norm")])
def test_what_the_rules_do_not_take_is_refused_by_name(what, message):
    with pytest.raises(NotImplementedError, match=message):
        dist.sim.run(4, _refusal, what)
