"""The CUDA kernels' contract with the rest of minidl: every primitive exists on both devices, and
every kernel source compiles for a real GPU (nvcc --ptx, and NVRTC when CuPy's bindings load)."""
import os
import shutil
import subprocess

import pytest

from minidl import kernels
from minidl.kernels.cuda import runtime

ARCH = "sm_90"  # the H100/H200 the GPU machines carry; CUDA 13 has dropped the oldest targets


def test_every_primitive_exists_on_both_devices():
    kernels.get("copy", "cpu"), kernels.get("copy", "cuda")  # import both backends
    def builtin(device):  # (other tests register kernels of their own)
        return {n for n in kernels.registered(device) if kernels.get(n, device).__module__.startswith("minidl.")}
    cpu, cuda = builtin("cpu"), builtin("cuda")
    assert cpu - cuda == set(), f"primitives without a CUDA kernel: {sorted(cpu - cuda)}"
    assert cuda - cpu == set(), f"primitives without a CPU kernel: {sorted(cuda - cpu)}"
    assert cpu >= set(kernels.PRIMITIVES)


@pytest.mark.parametrize("name", runtime.kernel_files())
def test_kernel_source_compiles_with_nvcc(name, tmp_path):
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc")
                                    else None)
    if nvcc is None:
        pytest.skip("no CUDA compiler (nvcc) on this machine")
    src = tmp_path / f"{name}.cu"
    src.write_text(runtime.source(name))
    # (-Xcicc -O0: the check is that nvcc accepts the source for this target; optimising the PTX would
    # double its time and is the GPU driver's work at load time anyway)
    done = subprocess.run([nvcc, "--ptx", f"-arch={ARCH}", "--std=c++17", "-Xcicc", "-O0",
                           "-o", str(tmp_path / f"{name}.ptx"), str(src)], capture_output=True, text=True)
    assert done.returncode == 0, f"nvcc rejected csrc/{name}.cu:\n{done.stderr[-4000:]}"
    assert (tmp_path / f"{name}.ptx").stat().st_size > 0


@pytest.mark.parametrize("name", runtime.kernel_files())
def test_kernel_source_compiles_with_nvrtc(name):
    nvrtc = pytest.importorskip("cupy_backends.cuda.libs.nvrtc", reason="CuPy's NVRTC bindings are not installed")
    try:
        nvrtc.getVersion()
    except Exception as e:  # libnvrtc itself missing: its loader's errors vary by CuPy version
        pytest.skip(f"NVRTC could not be loaded: {e}")
    program = nvrtc.createProgram(runtime.source(name), f"{name}.cu", [], [])
    try:
        nvrtc.compileProgram(program, [f"--gpu-architecture=compute_{ARCH[3:]}", "--std=c++17"])
    except nvrtc.NVRTCError:
        pytest.fail(f"NVRTC rejected csrc/{name}.cu:\n{nvrtc.getProgramLog(program)}")
    finally:
        nvrtc.destroyProgram(program)
