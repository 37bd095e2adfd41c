"""Tutorial 4: writing a CUDA kernel for minidl.

Run it:  python tutorials/04_cuda_kernels.py     (no GPU needed)

minidl's ops are written once, on top of **primitives** (``minidl/kernels/__init__.py``: unary, binary,
reduce, matmul ...), and each device registers its own implementation of every primitive. On
device ``"cuda"`` a primitive is a small Python wrapper around a **kernel**: a function in CUDA C
that thousands of GPU threads run at once, each on a few elements. We write one from scratch,
for a new primitive ``scale_shift`` (``out = a*x + b``), and follow it all the way:

1. its CUDA C source: one thread per element, in a **grid-stride loop**;
2. how the launch's grid and block decide which thread handles which element;
3. how a thread finds its element in memory through a **Layout** (shape, strides, offset), so
   views (transposed, sliced, reversed, broadcast) need no copy;
4. the wrapper registered with ``kernels.register("scale_shift", "cuda")`` next to a CPU one,
   and an op that uses it on tensors of either device.

On a GPU, minidl hands the source to CuPy, which compiles it with **NVRTC** (NVIDIA's runtime
compiler) and launches it. Without one, the same source runs on minidl's **CUDA simulator**
(``minidl/kernels/cuda/sim``): g++ compiles it against a small prelude that defines ``threadIdx``,
``blockIdx``, ``__syncthreads()``..., and every GPU thread runs as a fiber on the CPU. The
simulator is slow, but it executes exactly the index math a GPU would, which is what this
tutorial (and minidl's CUDA tests) need. Every claim is checked with ``assert``.
"""
import argparse
import os
import shutil
import subprocess
import tempfile

import numpy as np

import minidl
import minidl.kernels.cuda.primitives  # registers the built-in CUDA primitives
from minidl import kernels
from minidl.kernels.cuda import runtime
from minidl.layout import Layout
from minidl.ops.core import buf, kernel, new_like_shape

# --help says what this tutorial is and exits before anything runs; it takes no other arguments
argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()


def section(title):
    print()
    print("=" * 78)
    print(title)
    print("=" * 78)


if not runtime.available():
    runtime.sim_enable()
print(f"device 'cuda' runs on: {runtime.get().name} ({'a GPU through CuPy' if runtime.get().name == 'cupy' else 'the CPU simulator'})")

# =============================================================================================
section("1. The kernel source")
# =============================================================================================
# A kernel is a C function marked __global__: the host launches it, every GPU thread runs it.
# extern "C" keeps its name unmangled, so the host can look it up as "scale_shift_f32".
# minidl puts minidl/kernels/cuda/csrc/common.cuh in front of every kernel source; it defines:
#   - struct Layout {ndim, offset, shape[8], strides[8]} and position(layout, i): where the
#     i-th element (in row-major order of the shape) lives in the buffer;
#   - GRID_STRIDE_LOOP(i, n): for (i = blockIdx.x*blockDim.x + threadIdx.x; i < n;
#                                  i += blockDim.x*gridDim.x)
SOURCE = r"""
extern "C" __global__ void scale_shift_f32(const float *x, const Layout xl, float *out, const Layout ol,
                                           float a, float b, long long n) {
    GRID_STRIDE_LOOP(i, n) {
        out[position(ol, i)] = a * x[position(xl, i)] + b;
    }
}

// Which block and which thread of it handled each element: to watch the grid-stride loop work.
extern "C" __global__ void who_f32(float *block_of, float *thread_of, long long n) {
    GRID_STRIDE_LOOP(i, n) {
        block_of[i] = blockIdx.x;
        thread_of[i] = threadIdx.x;
    }
}
"""
# Things to notice, which every minidl kernel follows:
# - Buffers are plain pointers, and a Layout travels *by value* next to each one (a struct
#   of 144 bytes): the kernel never needs a contiguous copy of a view.
# - Scalars have exact C types (float a, long long n); the host must pass values of exactly
#   those types (np.float32, np.int64), because a launch copies raw bytes.
# - The kernel does no bounds check on the buffers: the Python wrapper validates first.
# - One kernel per dtype (here only float32); minidl's sources stamp them out with macros
#   (FOR_COMPUTE_DTYPES in common.cuh).

with open(os.path.join(runtime.CSRC, "common.cuh")) as f:
    COMMON = f.read()
get_kernel = runtime.get().compile(COMMON + SOURCE)  # NVRTC on a GPU, g++ on the simulator
scale_shift_f32, who_f32 = get_kernel("scale_shift_f32"), get_kernel("who_f32")
print("compiled scale_shift_f32 and who_f32")

# =============================================================================================
section("2. Grid, block, and the grid-stride loop")
# =============================================================================================
# A launch names a grid of blocks and a block of threads: kernel(grid, block, args). Inside,
# blockIdx.x is the block's number, threadIdx.x the thread's number in its block, gridDim.x
# and blockDim.x their counts. Threads of one block run on the same multiprocessor (they can
# share memory and __syncthreads()); blocks are independent and may run in any order.
#
# Thread (b, t) starts at element b*blockDim + t and steps by the whole grid's thread count,
# so any grid covers any n: a small grid just gives each thread more elements. minidl's
# launcher (runtime.launch) uses 256 threads a block and caps the grid (32 blocks per
# multiprocessor on a GPU, 2 on the simulator): past that, more blocks only cost scheduling.
n, grid, block = 19, 2, 4
xp = runtime.get().xp  # cupy on a GPU, numpy on the simulator
block_of, thread_of = xp.full(n, -1, np.float32), xp.full(n, -1, np.float32)
who_f32((grid,), (block,), (block_of, thread_of, np.int64(n)))
block_of, thread_of = runtime.get().to_numpy(block_of), runtime.get().to_numpy(thread_of)
print(f"n={n}, grid={grid}, block={block}: 8 threads, so thread (b, t) takes elements b*4+t, b*4+t+8, ...")
print("element:", " ".join(f"{i:2d}" for i in range(n)))
print("block:  ", " ".join(f"{int(b):2d}" for b in block_of))
print("thread: ", " ".join(f"{int(t):2d}" for t in thread_of))
i = np.arange(n)
assert (block_of == (i % (grid * block)) // block).all()
assert (thread_of == i % block).all()
# Neighbouring threads (t, t+1) touch neighbouring elements at every step: on a GPU the 32
# threads of a warp then read one contiguous 128-byte line together ("coalesced" access),
# which is what lets an elementwise kernel run at the memory's full bandwidth.

# =============================================================================================
section("3. Layouts: the same kernel on views")
# =============================================================================================
# position(layout, i) splits i into per-dimension indices (row-major over the shape) and dots
# them with the strides. A transposed view swaps strides, a broadcast dimension has stride 0,
# a reversed one has a negative stride and its offset at the first element it reads. Each
# view below shares base's buffer; only the Layout passed to the kernel differs.
def launch_scale_shift(x, xl, out, ol, a, b):
    runtime.launch(scale_shift_f32, ol.numel, x, runtime.layout_arg(ol.shape, xl.strides, xl.offset),
                   out, runtime.layout_arg(ol.shape, ol.strides, ol.offset), np.float32(a), np.float32(b),
                   runtime.i64(ol.numel))


base = minidl.arange(12, dtype=minidl.float32, device="cuda").reshape(3, 4)
host = base.cpu().numpy()
views = [("transposed", base.t()._layout, host.T), ("every other column", base[:, ::2]._layout, host[:, ::2]),
         ("broadcast row", base[1].expand(3, 4)._layout, np.broadcast_to(host[1], (3, 4))),
         # tensors' views never reverse (flip copies, as in PyTorch), but primitives take any
         # Layout: rows in reverse order start at the last row and step back 4 elements
         ("reversed rows", Layout((3, 4), (-4, 1), offset=8), host[::-1])]
for name, layout, want in views:
    out = minidl.empty(tuple(layout.shape), device="cuda")
    launch_scale_shift(buf(base), layout, buf(out), out._layout, 2.0, 1.0)
    assert np.array_equal(out.cpu().numpy(), 2 * want + 1)
    print(f"{name:>20}: shape {tuple(layout.shape)}, strides {layout.strides}, offset {layout.offset}: matches numpy")
# (minidl's own wrappers first merge dimensions that are contiguous with each other in every
# operand, with common.joint_layouts, so most views reach the kernel as one or two dimensions.)

# =============================================================================================
section("4. A primitive in the registry, and an op that uses it")
# =============================================================================================
# kernels.register(name, device_type) files a function under (device_type, name); ops call
# kernels.get(name, tensor's device type) and never ask which device they are on. A primitive
# gets raw buffers and Layouts, never tensors. The CUDA wrapper checks what the kernel can't.
@kernels.register("scale_shift", "cuda")
def scale_shift_cuda(x, xl, out, ol, a, b):
    if x.dtype != np.float32 or out.dtype != np.float32:
        raise TypeError(f"scale_shift: the CUDA kernel takes float32, got {x.dtype} -> {out.dtype}")
    if ol.numel:
        launch_scale_shift(x, xl, out, ol, a, b)


@kernels.register("scale_shift", "cpu")
def scale_shift_cpu(x, xl, out, ol, a, b):
    """The same primitive on the CPU, with numpy's strided views standing in for position()."""
    def view(data, layout):
        return np.lib.stride_tricks.as_strided(data[layout.offset:], layout.shape,
                                               [s * data.itemsize for s in layout.strides])
    view(out, ol)[...] = a * view(x, xl) + b


def scale_shift(x, a, b):
    """The op: allocate the output on x's device, run that device's primitive."""
    out = new_like_shape(x.shape, x.dtype, x)
    kernel("scale_shift", x)(buf(x), x._layout, buf(out), out._layout, a, b)
    return out


x_cpu = minidl.randn(5, 7).t()
x_cuda = x_cpu.to("cuda")
on_cpu, on_cuda = scale_shift(x_cpu, 0.5, -3.0), scale_shift(x_cuda, 0.5, -3.0)
assert on_cuda.device.type == "cuda" and on_cpu.device.type == "cpu"
assert np.allclose(on_cuda.cpu().numpy(), on_cpu.numpy(), rtol=1e-6, atol=1e-6)
print("scale_shift(x, 0.5, -3) on 'cpu' and on 'cuda' agree, for a transposed x")
# For gradients, wrap the op in an autograd Function as minidl/ops does (tutorial 2): its
# backward is another op, scale_shift(grad, a, 0), so the CUDA side needs nothing more.

# =============================================================================================
section("5. On a GPU: the same source through NVRTC")
# =============================================================================================
# With CuPy and a GPU, runtime.get().compile is cupy.RawModule(code=...): NVRTC compiles the
# text at run time for the GPU it finds, and kernel(grid, block, args) is cuLaunchKernel with
# a pointer to each argument's bytes, exactly what the simulator unpacks. Nothing in sections
# 1-4 changes. Where CUDA's compiler is installed (nvcc; no GPU needed), we can at least
# compile the source to PTX, the GPU's portable assembly, to see that it is valid CUDA.
nvcc = shutil.which("nvcc")
if nvcc:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "scale_shift.cu")
        with open(path, "w") as f:
            f.write(COMMON + SOURCE)
        subprocess.run([nvcc, "--ptx", "-arch=sm_90", "-o", path + ".ptx", path], check=True)
        with open(path + ".ptx") as f:
            ptx = f.read()
    assert ".entry scale_shift_f32" in ptx and ".entry who_f32" in ptx
    print("nvcc --ptx -arch=sm_90 compiled both kernels to PTX")
else:
    print("(no nvcc here: the PTX step is skipped)")

print()
print("All claims checked: a grid-stride kernel maps threads to elements as computed, reads any")
print("view through its Layout, and plugs into the registry so one op runs on 'cpu' and 'cuda'.")
