"""The CUDA simulator itself (minidl/kernels/cuda/sim): the kernel tests trust it, so it is checked here
against closed forms — barriers, warp shuffles, struct arguments, dynamic shared memory — and it
must expose the bugs a GPU would: a missing barrier, shared memory read before it is written, and
threads that can never meet at a barrier."""
import shutil

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the simulator needs g++")

SOURCE = r'''
struct Pair { long long n; float scale; };

extern "C" __global__ void block_sums(const float *x, float *out, Pair p) {
    __shared__ float warp_totals[32];
    float v = 0;
    for (long long i = threadIdx.x; i < p.n; i += blockDim.x) v += x[i];
    for (int d = 16; d > 0; d /= 2) v += __shfl_down_sync(0xffffffffu, v, d);
    if (threadIdx.x % 32 == 0) warp_totals[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0;
        for (int w = 0; w < (int)blockDim.x / 32; ++w) t += warp_totals[w];
        out[blockIdx.x] = t * p.scale;
    }
}

extern "C" __global__ void xor_butterfly(long long *out) {
    long long v = threadIdx.x;
    for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
    out[threadIdx.x] = v;  // every lane of a warp ends with its warp's sum
}

extern "C" __global__ void reverse(const long long *x, long long *out) {
    DYNAMIC_SHARED(long long, tile);
    tile[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    out[threadIdx.x] = tile[blockDim.x - 1 - threadIdx.x];
}

extern "C" __global__ void racy_reverse(const long long *x, long long *out) {
    __shared__ long long tile[256];
    tile[threadIdx.x] = x[threadIdx.x];
    out[threadIdx.x] = tile[blockDim.x - 1 - threadIdx.x];  // no barrier: a data race
}

extern "C" __global__ void divergent_barrier(long long *out) {
    if (threadIdx.x < 16) __syncthreads();  // half the warp waits for the block, half for the warp:
    else __syncwarp();                       // neither barrier can open (a GPU hangs)
    out[threadIdx.x] = 1;
}
'''


@pytest.fixture(scope="module")
def module():
    from minidl.kernels.cuda import runtime
    from minidl.kernels.cuda.sim import SimModule
    with open(f"{runtime.CSRC}/common.cuh") as f:  # (DYNAMIC_SHARED)
        return SimModule(f.read() + SOURCE)


def test_barriers_shuffles_and_struct_arguments(module):
    x = np.arange(1000, dtype=np.float32)
    out = np.zeros(3, np.float32)
    pair = np.zeros(1, np.dtype([("n", "<i8"), ("scale", "<f4")], align=True))
    pair["n"], pair["scale"] = 1000, 0.5
    module.function("block_sums")((3,), (256,), (x, out, pair))
    np.testing.assert_array_equal(out, [x.sum() * 0.5] * 3)


def test_xor_shuffle_gives_every_lane_the_warp_sum(module):
    out = np.zeros(64, np.int64)
    module.function("xor_butterfly")((1,), (64,), (out,))
    np.testing.assert_array_equal(out, [sum(range(32))] * 32 + [sum(range(32, 64))] * 32)


def test_dynamic_shared_memory(module):
    x = np.arange(128, dtype=np.int64)
    out = np.zeros(128, np.int64)
    module.function("reverse")((1,), (128,), (x, out), shared_mem=128 * 8)
    np.testing.assert_array_equal(out, x[::-1])


def test_a_missing_barrier_is_caught(module):
    """Threads run in a shuffled order between barriers and shared memory starts as 0xff bytes,
    so reading a neighbour's slot before the barrier gives wrong values, as it may on a GPU."""
    x = np.arange(256, dtype=np.int64)
    wrong = 0
    for _ in range(5):
        out = np.zeros(256, np.int64)
        module.function("racy_reverse")((1,), (256,), (x, out))
        wrong += not np.array_equal(out, x[::-1])
    assert wrong == 5


def test_a_barrier_some_threads_never_reach_is_an_error(module):
    with pytest.raises(RuntimeError, match="divergent_barrier deadlocked"):
        module.function("divergent_barrier")((1,), (32,), (np.zeros(32, np.int64),))


def test_wrong_argument_count_is_refused(module):
    with pytest.raises(TypeError, match="takes 1 arguments, got 2"):
        module.function("xor_butterfly")((1,), (32,), (np.zeros(32, np.int64), np.int64(1)))


def test_arguments_a_gpu_would_misread_are_refused(module):
    """CuPy passes a numpy scalar's bytes as they are: an int32 where the kernel takes a long long,
    or a float64 buffer for a float*, would be misread on a GPU without an error."""
    x, out = np.arange(4, dtype=np.float32), np.zeros(1, np.float32)
    pair = np.zeros(1, np.dtype([("n", "<i8"), ("scale", "<f4")], align=True))
    with pytest.raises(TypeError, match="argument 0: expects a buffer of a floating-point value of 4 bytes"):
        module.function("block_sums")((1,), (32,), (x.astype(np.float64), out, pair))
    with pytest.raises(TypeError, match="argument 2: expects a struct of 16 bytes"):
        module.function("block_sums")((1,), (32,), (x, out, np.int64(4)))
    with pytest.raises(TypeError, match="argument 0: expects a pointer"):
        module.function("xor_butterfly")((1,), (32,), (np.int64(0),))
