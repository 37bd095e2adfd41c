"""DistributedDataParallel on the sim backend (tests/ddp_cases.py): N-rank steps equal the
single-process step on the whole batch, no_sync, unused parameters, comm hooks, fp16,
buffers, state_dict keys, bucketing and the overlap timeline."""
import pytest

import minidl.dist as dist
from cuda_support import sim_cuda_device
from ddp_cases import run_all, steps_match_single_process
from minidl.dist.reducer import assign_buckets
import minidl


@pytest.mark.parametrize("size", [2, 3, 4])
def test_ddp_equals_single_process(size):
    failures = dist.sim.run(size, run_all, size)
    assert not any(failures), "\n".join(f for per_rank in failures for f in per_rank[:10])


@pytest.mark.parametrize("options", [{}, {"gradient_as_bucket_view": True, "bucket_cap_mb": 1e-4}])
def test_ddp_on_cuda_tensors_equals_single_process(options):
    """The reducer's buckets live on the parameters' device; the sim world passes CUDA-simulator
    buffers (host memory) as it passes CPU ones, so the device-generic path runs without a GPU."""
    sim_cuda_device()  # the sim world moves host arrays, even where a GPU is
    failures = dist.sim.run(2, lambda rank: steps_match_single_process(rank, 2, "cuda", **options))
    assert not any(failures), "\n".join(f for per_rank in failures for f in per_rank[:10])


def test_device_ids_must_name_the_module_device():
    from minidl.dist.ddp import _check_device_ids
    cpu_model = minidl.nn.Linear(2, 2)
    _check_device_ids(cpu_model, None, None)
    _check_device_ids(cpu_model, ["cpu"], "cpu")
    with pytest.raises(ValueError, match="device_ids names cuda:0, but the module is on cpu"):
        _check_device_ids(cpu_model, [0], None)
    with pytest.raises(ValueError, match="one device per process"):
        _check_device_ids(cpu_model, [0, 1], None)


def test_buckets_are_reverse_order_with_a_small_first_bucket():
    params = [minidl.zeros(n) for n in (1000, 300_000, 300_000, 10)]  # float32: 4 bytes each
    assert assign_buckets(params, cap_bytes=2_000_000, first_cap_bytes=1_000_000) == [[3, 2], [1, 0]]
    assert assign_buckets(params, cap_bytes=1) == [[3], [2], [1], [0]]
    mixed = [minidl.zeros(4), minidl.zeros(4, dtype=minidl.float64)]
    assert assign_buckets(mixed, cap_bytes=10**6) == [[1], [0]]


def test_ddp_outside_a_process_group_is_refused():
    from minidl.nn.parallel import DistributedDataParallel
    with pytest.raises(RuntimeError, match="not initialized"):
        DistributedDataParallel(minidl.nn.Linear(2, 2))
