#!/usr/bin/env bash
# Fills .numba-cache with minidl's CPU kernels as the GPU machine will ask for them, so that gpu_check.sh does not
# compile them there (the CUDA tests' CPU references alone took 330 s of Numba compiling on the loaded 2-core VM,
# in every test worker). Numba's cache is keyed by the Python version (the bytecode), the numba release and the
# CPU; with NUMBA_CPU_NAME=generic the code is built for any x86-64 and the key holds no host CPU, so a cache made
# here with the GPU image's Python (3.12) and numba serves there. gpu_check.sh uses it when the call carries it
# (.gitignore keeps it out of git):
#   PY312=/path/to/python3.12 bash benchmarks/gpu_numba_cache.sh        # about 7 minutes on 2 cores
#   run(command="bash benchmarks/gpu_check.sh", carry=[".whl", ".numba-cache"], timeout_s=300)
# PY312 needs numpy, numba (the image's release: gpu_check.sh's summary.log names it), threadpoolctl, safetensors,
# tqdm, pytest, pytest-xdist and hypothesis; without torch the three CUDA test files that import it are left out and
# their few kernels compile there. Build it from the tree that will run: an edit under minidl/kernels/cpu/jit/
# changes the cache's key, and a stale cache is only unused, never wrong.
set -eu
cd "$(dirname "$0")/.."
PY312=${PY312:?set PY312 to a Python 3.12 with numba (see the header)}
export NUMBA_CACHE_DIR=$PWD/.numba-cache NUMBA_CPU_NAME=generic MINIDL_CUDA_SIM=1 PYTHONPATH=$PWD
"$PY312" -c "import sys, numba; assert sys.version_info[:2] == (3, 12), sys.version; print('numba', numba.__version__)"
"$PY312" -m pytest -o addopts=-q -q -p no:cacheprovider --continue-on-collection-errors tests/test_cuda_*.py || true
"$PY312" examples/train_digits.py --device cpu --epochs 1 --limit-batches 2 \
    --checkpoint /tmp/minidl-digits-cache.safetensors
du -sh "$NUMBA_CACHE_DIR"
