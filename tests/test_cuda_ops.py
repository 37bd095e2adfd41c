"""The op and gradient suite on device 'cuda', checked against the CPU: every sample of every op
(opinfo.SAMPLES, first- and second-order ones alike, and the generated strided variants: each op's
forward, and its backward for a fixed cotangent) runs on both devices from the same leaves — the same values in the same memory layout —
and must agree to float64 rounding.
On a machine without a GPU this runs on the CUDA simulator (see cuda_support.py)."""
import numpy as np
import pytest

import minidl
import opinfo
from minidl import kernels
from minidl._tensor_base import Storage, make
from opinfo import SAMPLES, STRIDED, make_leaf, sample_id, values_of

from cuda_support import cuda_device

MOVES_TO_CPU = {"to-cpu"}  # samples whose op itself copies to the host


@pytest.fixture(scope="module", autouse=True)
def cuda():
    return cuda_device()


def on_cuda(leaf):
    """The same buffer and layout as ``leaf``, on 'cuda' (a non-contiguous leaf stays non-contiguous)."""
    storage = Storage(kernels.get("from_host", "cuda")(leaf._storage.buf), minidl.device("cuda"))
    return make(storage, leaf._layout, leaf.dtype).requires_grad_(leaf.requires_grad)


def outputs(result):
    items = result if isinstance(result, (tuple, list)) else (result,)
    return [r for r in items if isinstance(r, minidl.Tensor)]


def run(sample, leaves, device):
    opinfo.DEVICE = device
    try:
        outs = outputs(sample.fn(*leaves))
        live = [o for o in outs if o.requires_grad]
        rng = np.random.default_rng(0)
        cotangents = [minidl.tensor(rng.standard_normal(o.shape), dtype=o.dtype, device=device) for o in live]
        grads = minidl.autograd.grad(live, leaves, cotangents, allow_unused=True) if live else [None] * len(leaves)
    finally:
        opinfo.DEVICE = "cpu"
    return ([o.detach().cpu().numpy() for o in outs],
            [None if g is None else g.cpu().numpy() for g in grads],
            [o.device for o in outs] + [g.device for g in grads if g is not None])


ALL = SAMPLES + STRIDED  # (with the generated column-major and negatively strided variants)


@pytest.mark.parametrize("op,sample", ALL, ids=[sample_id(*p) for p in ALL])
def test_sample_matches_cpu(op, sample):
    leaves = [make_leaf(spec, values_of(spec)) for spec in sample.inputs]
    expected_outs, expected_grads, _ = run(sample, leaves, "cpu")
    got_outs, got_grads, devices = run(sample, [on_cuda(leaf) for leaf in leaves], "cuda")
    assert sample.name in MOVES_TO_CPU or all(d.type == "cuda" for d in devices), f"results left the device: {devices}"
    assert len(got_outs) == len(expected_outs)
    for i, (got, want) in enumerate(zip(got_outs, expected_outs)):
        assert got.dtype == want.dtype and got.shape == want.shape, f"output {i}"
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, equal_nan=True, err_msg=f"output {i}")
    for i, (got, want) in enumerate(zip(got_grads, expected_grads)):
        assert (got is None) == (want is None), f"gradient {i}"
        if got is not None:
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, err_msg=f"gradient of input {i}")
