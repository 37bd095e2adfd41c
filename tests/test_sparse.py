"""Sparse COO tensors and sparse gradients against PyTorch (float64) and numpy: the tensor itself,
an embedding's sparse gradient through autograd, the optimizers that take one (and those that
refuse it), clipping, and the same on the CUDA simulator. DDP's gather of sparse gradients is in
tests/ddp_cases.py (sim and mpiexec)."""
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import minidl
from minidl.nn import functional as F

pytestmark = pytest.mark.filterwarnings("ignore:Sparse invariant checks")   # (torch's, on construction)


def pair(indices, values, size):
    return (minidl.sparse_coo_tensor(minidl.tensor(indices), minidl.tensor(values), size),
            torch.sparse_coo_tensor(torch.tensor(indices), torch.tensor(values), size))


@st.composite
def coo(draw):
    """Random indices (repeats likely) into 1-3 sparse dims, with 0-2 dense dims."""
    sparse = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    dense = draw(st.lists(st.integers(1, 3), max_size=2))
    nnz = draw(st.integers(0, 12))
    seed = draw(st.integers(0, 2 ** 16))
    rs = np.random.RandomState(seed)
    indices = np.stack([rs.randint(0, s, nnz) for s in sparse]) if nnz else np.zeros((len(sparse), 0), np.int64)
    return indices, rs.randn(nnz, *dense), tuple(sparse + dense)


@given(coo())
def test_coalesce_and_to_dense_against_numpy(case):
    indices, values, size = case
    s = minidl.sparse_coo_tensor(minidl.tensor(indices, dtype=minidl.int64), minidl.tensor(values), size)
    want = np.zeros(size)
    np.add.at(want, tuple(indices), values)   # repeats add up
    np.testing.assert_allclose(s.to_dense().numpy(), want, atol=1e-12)
    c = s.coalesce()
    keys = np.ravel_multi_index(tuple(indices), size[:len(indices)]) if indices.shape[1] else np.zeros(0, int)
    assert c.is_coalesced() and c._nnz() == len(np.unique(keys))
    assert np.ravel_multi_index(tuple(c.indices().numpy()), size[:len(indices)]).tolist() == sorted(set(keys.tolist()))
    np.testing.assert_allclose(c.to_dense().numpy(), want, atol=1e-12)
    np.testing.assert_allclose((s + s * 2).to_dense().numpy(), 3 * want, atol=1e-12)


def test_the_tensor_answers_as_torchs():
    mine, theirs = pair([[1, 0, 1, 3], [0, 2, 0, 1]], [[1., 2], [3, 4], [5, 6], [7, 8]], (4, 3, 2))
    for name in ("shape", "ndim"):
        assert getattr(mine, name) == getattr(theirs, name)
    assert (mine.sparse_dim(), mine.dense_dim(), mine._nnz(), mine.is_sparse, mine.is_coalesced()) == \
        (theirs.sparse_dim(), theirs.dense_dim(), theirs._nnz(), theirs.is_sparse, theirs.is_coalesced())
    assert mine.layout is minidl.sparse_coo and minidl.ones(2).layout is minidl.strided and not minidl.ones(2).is_sparse
    assert repr(mine) == repr(theirs).replace("torch.", "minidl.")
    assert repr(mine.double().coalesce()) == repr(theirs.double().coalesce()).replace("torch.", "minidl.")
    empty = minidl.sparse_coo_tensor(minidl.zeros(2, 0, dtype=minidl.int64), minidl.zeros(0), (2, 3))
    assert repr(empty) == repr(torch.sparse_coo_tensor(torch.zeros(2, 0, dtype=torch.long), torch.zeros(0), (2, 3))
                               ).replace("torch.", "minidl.")
    with pytest.raises(RuntimeError, match="Cannot get indices on an uncoalesced tensor"):
        mine.indices()
    c, tc = mine.coalesce(), theirs.coalesce()
    assert c.indices().tolist() == tc.indices().tolist() and c.values().tolist() == tc.values().tolist()
    # dense + sparse is dense; sparse + dense is torch's error; scaling keeps it sparse
    dense = np.arange(24.0).reshape(4, 3, 2)
    np.testing.assert_allclose((minidl.tensor(dense) + mine).numpy(), (torch.tensor(dense) + theirs).numpy())
    added = minidl.tensor(dense)
    added.add_(mine, alpha=-2)
    np.testing.assert_allclose(added.numpy(), torch.tensor(dense).add_(theirs, alpha=-2).numpy())
    with pytest.raises(RuntimeError, match=r"add\(sparse, dense\) is not supported. Use add\(dense, sparse\) instead"):
        mine + minidl.tensor(dense)
    np.testing.assert_allclose((2 * mine).to_dense().numpy(), (2 * theirs).to_dense().numpy())
    np.testing.assert_allclose((-mine / 4).to_dense().numpy(), (-theirs / 4).to_dense().numpy())
    assert mine.clone().zero_()._nnz() == 0
    # to_sparse, whole and by rows
    x = np.array([[0.0, 2, 0], [0, 0, 0], [3, 0, 4]])
    for k in (None, 1):
        m, t = minidl.tensor(x).to_sparse(k), (torch.tensor(x).to_sparse() if k is None else torch.tensor(x).to_sparse(k))
        assert m.indices().tolist() == t.indices().tolist() and m.values().tolist() == t.values().tolist()


def test_bad_input_and_ops_that_refuse_sparse_tensors_are_named():
    with pytest.raises(RuntimeError, match="index 5 in sparse dim 0 is out of bounds for size 4"):
        minidl.sparse_coo_tensor([[5]], [[1.0, 2.0]], (4, 2))
    with pytest.raises(RuntimeError, match="values of shape \\[2, 2\\] for 1 indices"):
        minidl.sparse_coo_tensor([[1]], [[1.0, 2.0], [3.0, 4.0]], (4, 2))
    with pytest.raises(RuntimeError, match="indices must be an int64 tensor of shape \\(sparse_dim, nnz\\)"):
        minidl.sparse_coo_tensor(minidl.tensor([1.0]), [1.0], (4,))
    s = minidl.sparse_coo_tensor([[1, 2]], [1.0, 2.0], (4,))
    for call, name in ((lambda: s.exp(), "exp"), (lambda: minidl.matmul(s, minidl.ones(4)), "matmul"),
                       (lambda: minidl.cat([s, s]), "cat"), (lambda: s.sum(), "sum")):
        with pytest.raises(NotImplementedError, match=f"^{name}: sparse COO tensors are not supported .*to_dense"):
            call()
    with pytest.raises(RuntimeError, match="expected 'self' and 'other' to have same size"):
        s + minidl.sparse_coo_tensor([[1]], [1.0], (5,))


def _embedding_grads(lib, rows, **options):
    w = lib.nn.Parameter(lib.tensor(np.random.RandomState(0).randn(6, 3)))
    out = lib.nn.functional.embedding(lib.tensor(rows), w, **options)
    (out * lib.tensor(np.random.RandomState(1).randn(*out.shape))).sum().backward()
    return w


@pytest.mark.parametrize("options", [{}, {"padding_idx": 2}, {"scale_grad_by_freq": True},
                                     {"padding_idx": -1, "scale_grad_by_freq": True}, {"max_norm": 1.0}])
def test_embedding_gradients_dense_and_sparse_are_torchs(options):
    rows = [[1, 2, 1], [5, 1, 2]]
    for sparse in (False, True):
        if sparse and options.get("scale_grad_by_freq"):
            for lib in (minidl, torch):
                with pytest.raises(RuntimeError, match="scale_grad_by_freq not supported with sparse gradients"):
                    _embedding_grads(lib, rows, sparse=sparse, **options)
            continue
        mine, theirs = _embedding_grads(minidl, rows, sparse=sparse, **options), \
            _embedding_grads(torch, rows, sparse=sparse, **options)
        assert mine.grad.is_sparse == theirs.grad.is_sparse == sparse
        if sparse:   # the same entries, uncoalesced as torch's
            assert mine.grad._indices().tolist() == theirs.grad._indices().tolist()
            np.testing.assert_allclose(mine.grad._values().numpy(), theirs.grad._values().numpy(), rtol=1e-12)
        grad = mine.grad.to_dense() if sparse else mine.grad
        np.testing.assert_allclose(grad.numpy(), theirs.grad.to_dense().numpy(), rtol=1e-12)
        np.testing.assert_allclose(mine.detach().numpy(), theirs.detach().numpy(), rtol=1e-12)   # (max_norm)
    module = minidl.nn.Embedding(5, 2, padding_idx=0, max_norm=1.0, norm_type=1.0, scale_grad_by_freq=True)
    assert repr(module) == repr(torch.nn.Embedding(5, 2, padding_idx=0, max_norm=1.0, norm_type=1.0,
                                                   scale_grad_by_freq=True))
    assert repr(minidl.nn.Embedding(5, 2, sparse=True)) == repr(torch.nn.Embedding(5, 2, sparse=True))


def test_sparse_gradients_accumulate_as_torchs():
    """sparse + sparse stays sparse (entries concatenated), + dense becomes dense, either order;
    hooks see the sparse tensor; zero_grad(set_to_none=False) empties it."""
    w = minidl.nn.Parameter(minidl.ones(5, 2))
    seen = []
    w.register_hook(lambda g: seen.append(g.layout))
    F.embedding(minidl.tensor([1, 2]), w, sparse=True).sum().backward()
    F.embedding(minidl.tensor([1, 3]), w, sparse=True).sum().backward()
    assert w.grad.is_sparse and w.grad._nnz() == 4 and seen == [minidl.sparse_coo] * 2
    (w * 2).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [[2, 2], [4, 4], [3, 3], [3, 3], [2, 2]])
    w.grad = None
    (w * 2).sum().backward()
    F.embedding(minidl.tensor([1]), w, sparse=True).sum().backward()
    assert not w.grad.is_sparse and w.grad[1].tolist() == [3.0, 3.0]
    # one backward where both kinds meet at the table (the engine sums them, sparse first or last)
    for order in (1, -1):
        w.grad = None
        parts = [F.embedding(minidl.tensor([4]), w, sparse=True).sum(), (w * 3).sum()][::order]
        (parts[0] + parts[1]).backward()
        assert w.grad[4].tolist() == [4.0, 4.0] and w.grad[0].tolist() == [3.0, 3.0]
    w.grad = None
    opt = minidl.optim.SGD([w], lr=0.1)
    F.embedding(minidl.tensor([1]), w, sparse=True).sum().backward()
    opt.zero_grad(set_to_none=False)
    assert w.grad.is_sparse and w.grad._nnz() == 0


OPTIMIZERS = {
    "sgd": lambda lib, w: lib.optim.SGD([w], lr=0.1),
    "sgd-momentum": lambda lib, w: lib.optim.SGD([w], lr=0.1, momentum=0.9, dampening=0.1),
    "sgd-nesterov-maximize": lambda lib, w: lib.optim.SGD([w], lr=0.1, momentum=0.9, nesterov=True, maximize=True),
    "adagrad": lambda lib, w: lib.optim.Adagrad([w], lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1),
    "adagrad-maximize": lambda lib, w: lib.optim.Adagrad([w], lr=0.1, maximize=True),
    "sparse-adam": lambda lib, w: lib.optim.SparseAdam([w], lr=0.1),
    "sparse-adam-maximize": lambda lib, w: lib.optim.SparseAdam([w], lr=0.05, betas=(0.8, 0.9), maximize=True),
}


def _trajectory(lib, make, device="cpu", steps=5):
    rs = np.random.RandomState(0)
    w = lib.nn.Parameter(lib.tensor(rs.randn(10, 3), device=device))
    opt = make(lib, w)
    for _ in range(steps):   # each batch touches a few rows, some twice
        opt.zero_grad()
        (lib.nn.functional.embedding(lib.tensor(rs.randint(0, 10, size=(4,)), device=device), w, sparse=True) ** 2
         ).sum().backward()
        opt.step()
    return w.detach().cpu().numpy()


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizers_on_sparse_gradients_follow_torchs_trajectory(name):
    np.testing.assert_allclose(_trajectory(minidl, OPTIMIZERS[name]), _trajectory(torch, OPTIMIZERS[name]),
                               rtol=1e-10, atol=1e-12)


def test_optimizers_that_refuse_sparse_gradients_say_what_torch_says():
    cases = {lambda lib, w: lib.optim.Adam([w]): "Adam does not support sparse gradients, please consider SparseAdam",
             lambda lib, w: lib.optim.AdamW([w]): "Adam does not support sparse gradients",
             lambda lib, w: lib.optim.RMSprop([w]): "RMSprop does not support sparse gradients",
             lambda lib, w: lib.optim.Adadelta([w]): "Adadelta does not support sparse gradients",
             lambda lib, w: lib.optim.SGD([w], lr=0.1, weight_decay=0.1): r"add\(sparse, dense\) is not supported",
             lambda lib, w: lib.optim.Adagrad([w], weight_decay=0.1): "weight_decay option is not compatible with sparse"}
    for make, message in cases.items():
        for lib in (minidl, torch):
            with pytest.raises(RuntimeError, match=message):
                _trajectory(lib, make, steps=1)
    w = minidl.nn.Parameter(minidl.ones(3, 2))
    w.grad = minidl.ones(3, 2)
    with pytest.raises(RuntimeError, match="SparseAdam does not support dense gradients, please consider Adam instead"):
        minidl.optim.SparseAdam([w]).step()


def test_clipping_counts_a_sparse_gradient_by_its_entries():
    """torch 2.13 raises on a sparse gradient here; the oracle is torch's clipping of the same
    gradients made dense."""
    rows = [[1, 2, 1], [5, 1, 2]]
    mine = _embedding_grads(minidl, rows, sparse=True)
    lin, tlin = minidl.nn.Linear(3, 2).double(), torch.nn.Linear(3, 2).double()
    tlin.load_state_dict({k: torch.tensor(v.numpy()) for k, v in lin.state_dict().items()})
    lin(minidl.ones(4, 3, dtype=minidl.float64)).sum().backward()
    tlin(torch.ones(4, 3, dtype=torch.float64)).sum().backward()
    theirs = _embedding_grads(torch, rows, sparse=True)
    theirs.grad = theirs.grad.to_dense()
    for norm_type in (2.0, 1.0, float("inf")):
        params, tparams = [mine, *lin.parameters()], [theirs, *tlin.parameters()]
        saved = [(p.grad.clone(), q.grad.clone()) for p, q in zip(params, tparams)]
        total = minidl.nn.utils.clip_grad_norm_(params, 0.5, norm_type)
        want = torch.nn.utils.clip_grad_norm_(tparams, 0.5, norm_type)
        assert float(total) == pytest.approx(float(want), rel=1e-12)
        assert mine.grad.is_sparse
        for p, q in zip(params, tparams):
            got = p.grad.to_dense() if p.grad.is_sparse else p.grad
            np.testing.assert_allclose(got.numpy(), q.grad.numpy(), rtol=1e-12)
        for (p, q), (g, h) in zip(zip(params, tparams), saved):
            p.grad, q.grad = g, h


def test_on_the_cuda_simulator_as_on_the_cpu():
    from cuda_support import sim_cuda_device
    sim_cuda_device()
    rs = np.random.RandomState(3)
    indices, values = rs.randint(0, 5, size=(2, 9)), rs.randn(9, 2)
    cpu = minidl.sparse_coo_tensor(minidl.tensor(indices), minidl.tensor(values), (5, 5, 2))
    gpu = cpu.to("cuda")
    assert gpu.device.type == "cuda" and "device='cuda:0'" in repr(gpu)
    c, gc = cpu.coalesce(), gpu.coalesce()
    assert gc.indices().cpu().tolist() == c.indices().tolist()
    np.testing.assert_allclose(gc.values().cpu().numpy(), c.values().numpy(), rtol=1e-12)
    np.testing.assert_allclose(gpu.to_dense().cpu().numpy(), cpu.to_dense().numpy(), rtol=1e-12)
    for name in ("sgd-momentum", "adagrad", "sparse-adam"):
        np.testing.assert_allclose(_trajectory(minidl, OPTIMIZERS[name], "cuda"), _trajectory(torch, OPTIMIZERS[name]),
                                   rtol=1e-10, atol=1e-12)


def test_review_cases_behave_as_torch():
    """Gradients own their memory (a reused index buffer), an index changed before backward is
    caught, one gradient reaching two leaves is two tensors, a sparse gradient flowing into an
    ordinary op's backward becomes dense, a dense momentum buffer takes a sparse gradient."""
    for lib in (minidl, torch):
        w = lib.nn.Parameter(lib.zeros(5, 2, dtype=lib.float64))
        buf = lib.zeros(2, dtype=lib.int64)
        for rows in ([0, 1], [2, 3]):
            buf.copy_(lib.tensor(rows))
            lib.nn.functional.embedding(buf, w, sparse=True).sum().backward()
        assert w.grad.to_dense().sum(1).tolist() == [2.0, 2.0, 2.0, 2.0, 0.0]
        idx = lib.tensor([1, 2])
        out = lib.nn.functional.embedding(idx, w)
        idx[0] = 4
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.sum().backward()
    x = minidl.arange(4.0, dtype=minidl.float64)   # (values overlapping what is written: read first;
    x.index_put_((minidl.tensor([1, 2, 3]),), x[0:3], accumulate=True)   # torch refuses outright)
    assert x.tolist() == [0.0, 1.0, 3.0, 5.0]
    a, b = (minidl.nn.Parameter(minidl.ones(4, 3, dtype=minidl.float64)) for _ in range(2))
    F.embedding(minidl.tensor([1]), a + b, sparse=True).sum().backward()
    assert a.grad is not b.grad and a.grad[1].tolist() == [1.0] * 3   # (through add: dense here)
    w = minidl.nn.Parameter(minidl.ones(6, 2, dtype=minidl.float64))
    F.embedding(minidl.tensor([1, 3]), w[1:5], sparse=True).pow(2).sum().backward()
    assert w.grad.tolist() == [[0, 0], [0, 0], [2, 2], [0, 0], [2, 2], [0, 0]]
    trajectories = []
    for lib in (minidl, torch):
        w = lib.nn.Parameter(lib.ones(4, 2, dtype=lib.float64))
        opt = lib.optim.SGD([w], lr=0.1, momentum=0.9)
        (w * w).sum().backward()
        opt.step()
        opt.zero_grad()
        lib.nn.functional.embedding(lib.tensor([2]), w, sparse=True).sum().backward()
        opt.step()
        trajectories.append(w.detach().numpy().copy())
    np.testing.assert_allclose(*trajectories, rtol=1e-12)


def test_review_cases_of_the_tensor():
    s = minidl.sparse_coo_tensor(minidl.tensor([[0, 2]], dtype=minidl.int32), minidl.tensor([1, 2]), (3,))
    t = torch.sparse_coo_tensor(torch.tensor([[0, 2]], dtype=torch.int32), torch.tensor([1, 2]), (3,))
    assert s._indices().dtype is minidl.int64 and repr(s) == repr(t).replace("torch.", "minidl.")
    c, tc = s.coalesce(), t.coalesce()
    assert (c + c).is_coalesced() == (tc + tc).is_coalesced() and (c + c).values().tolist() == [2, 4]
    with pytest.raises(RuntimeError, match="result type float32 can't be cast to the desired output type int64"):
        minidl.zeros(3, dtype=minidl.int64).add_(minidl.sparse_coo_tensor([[1]], [0.5], (3,)))
    with pytest.raises(IndexError, match="index out of range in self"):
        F.embedding(minidl.tensor([-1, 2]), minidl.ones(3, 2))
    w = minidl.nn.Parameter(minidl.ones(3, 2))
    F.embedding(minidl.tensor([1]), w, sparse=True).sum().backward()
    w.grad.zero_()
    assert float(minidl.nn.utils.clip_grad_norm_([w], 1.0, float("inf"))) == 0.0
    assert (s * np.float32(2)).to_dense().tolist() == [2, 0, 4]


def test_to_sparse_keeps_requires_grad_and_the_gradient_flows_like_torch():
    x, w = np.array([[0.0, 2.0], [3.0, 0.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])
    grads = []
    for m in (minidl, torch):
        t = m.tensor(x, requires_grad=True)
        s = t.to_sparse()
        assert s.requires_grad and not s.is_leaf and not s.detach().requires_grad
        (s.to_dense() * m.tensor(w)).sum().backward()
        t.to_sparse().values().sum().backward()
        grads.append(t.grad.numpy())
    np.testing.assert_array_equal(*grads)
