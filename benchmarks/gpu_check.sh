#!/usr/bin/env bash
# Issue 41's check on a lent GPU, in one call: the CUDA test suite, the examples on 'cuda' (the digits
# CNN beside its CPU run, char-GPT, the nccl backend at world size 1), then the two GPU benchmarks beside
# PyTorch CUDA. Each part's log lands in $OUT as it runs (7 files), so a timeout still returns what finished;
# summary.log holds the versions, each part's verdict and time, and the digits comparison.
#
# The session lent a GPU prepares once, at no device time, in the checkout it was started in (.gitignore
# keeps both folders out of git; only `carry` takes them along):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 -d .whl mpich==5.0.2     # mpiexec + libmpi for the nccl part
#   PY312=/path/to/python3.12 bash benchmarks/gpu_numba_cache.sh   # optional: the CPU kernels compiled here
# then makes this call (first run; the script stops itself at TOTAL=285 s):
#   run(command="bash benchmarks/gpu_check.sh", carry=[".whl", ".numba-cache"], timeout_s=300)
# and, after fixing what it showed, a second run of the failing parts only, e.g.:
#   run(command="PARTS='warm tests' TESTS='tests/test_cuda_streams_graphs.py' TOTAL=170 bash
#       benchmarks/gpu_check.sh", carry=[".whl", ".numba-cache"], timeout_s=180)
# (a fresh machine has empty kernel caches: keep "warm" in PARTS unless the machine is still the warm one)
# Dry run on a machine without a GPU (the simulator stands in, a few test files, tiny examples, the
# benchmarks' --sim paths, no torch CUDA):  DRY_RUN=1 OUT=/tmp/gpu-check bash benchmarks/gpu_check.sh
#
# Knobs (environment): PARTS (any of: warm tests examples benchmarks), TESTS (test files), WORKERS (pytest-xdist
# workers), TOTAL (seconds for the whole script), WHEELS (folder of the mpich wheel), PYTHON.
set -u
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the folder that receives the logs}"
mkdir -p "$OUT"
PY=${PYTHON:-python3}
PARTS=${PARTS:-warm tests examples benchmarks}
WHEELS=${WHEELS:-.whl}
SUMMARY=$OUT/summary.log
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
if [ -d .numba-cache ] && [ "${DRY_RUN:-0}" != 1 ]; then  # gpu_numba_cache.sh's, for any x86-64 CPU (by that name)
    export NUMBA_CACHE_DIR=$PWD/.numba-cache NUMBA_CPU_NAME=generic
fi
if [ "${DRY_RUN:-0}" = 1 ]; then
    export MINIDL_CUDA_SIM=1
    TESTS=${TESTS:-tests/test_cuda_streams_graphs.py tests/test_cuda_device_api.py}
    WORKERS=${WORKERS:-2} SIM=--sim TOTAL=${TOTAL:-900}
    DIGITS="--epochs 1 --limit-batches 2" GPT="--steps 2 --eval-every 1 --sample-length 8 --context 16 --width 16"
else
    TESTS=${TESTS:-$(echo tests/test_cuda_*.py)}
    WORKERS=${WORKERS:-8} SIM= TOTAL=${TOTAL:-285}
    DIGITS="" GPT=""  # the examples' defaults: the CNN's 15 epochs, 600 GPT steps
fi

# step NAME LOG SECONDS COMMAND...: COMMAND's output appended to LOG, stopped after SECONDS or at the deadline
# (SIGINT first: Python prints where it was, pytest its summary), its verdict and time appended to summary.log
step() {
    local name=$1 log=$2 want=$3
    shift 3
    local left=$((TOTAL - SECONDS - 5))
    local limit=$((want < left ? want : left)) began=$SECONDS rc verdict
    if ((limit < 5)); then
        printf '%-34s SKIPPED: out of time\n' "$name" >>"$SUMMARY"
        return 1
    fi
    echo "== $name: $* (limit ${limit} s)" >>"$log"
    timeout -s INT -k 10 "$limit" "$@" >>"$log" 2>&1
    rc=$?
    verdict=ok
    ((rc == 0)) || verdict="FAILED (exit $rc)"
    ((rc == 124)) && verdict="TIMED OUT at ${limit} s"
    printf '%-34s %-24s %4d s\n' "$name" "$verdict" $((SECONDS - began)) >>"$SUMMARY"
    return $rc
}

wants() { [[ " $PARTS " == *" $1 "* ]]; }

versions() {
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || echo "(no nvidia-smi)"
    echo "cores: $(nproc); $(grep -m1 'model name' /proc/cpuinfo)"
    if command -v g++ >/dev/null; then g++ --version | head -1; else echo "no g++: the simulator's tests skip"; fi
    "$PY" -m pip list 2>/dev/null | grep -i -E '^(numpy|numba|llvmlite|cupy-cuda13x|torch|mpi4py|pytest|pytest-xdist|'\
'pytest-timeout|hypothesis|safetensors|tqdm|threadpoolctl|matplotlib) '
}

# mpiexec and libmpi for the nccl part: the mpich wheel unpacked under a prefix (pip's --target leaves its lib/ out)
mpich() {
    local wheel mpiexec
    wheel=$(ls "$WHEELS"/mpich-*.whl 2>/dev/null | head -1)
    if [ -z "$wheel" ]; then
        echo "no mpich wheel in $WHEELS: the nccl test at world size 1 will skip (no mpiexec)"
        return 0
    fi
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --ignore-installed \
        --prefix /tmp/minidl-mpich "$wheel" || return 1
    # found, not assumed: a patched Python may lay a prefix out as prefix/local/...
    mpiexec=$(find /tmp/minidl-mpich -name mpiexec -type f | head -1)
    export PATH=${mpiexec%/mpiexec}:$PATH MPI4PY_LIBMPI=$(find /tmp/minidl-mpich -name libmpi.so.12 | head -1)
    echo "mpiexec: $mpiexec; libmpi: $MPI4PY_LIBMPI"
    "$PY" -c "from mpi4py import MPI; print('mpi4py', MPI.Get_library_version().splitlines()[0])"
}

examples() {
    step "train_digits --device cuda" "$OUT/examples.log" 90 \
        "$PY" examples/train_digits.py --device cuda $DIGITS --checkpoint /tmp/minidl-digits-cuda.safetensors
    step "char_gpt --device cuda" "$OUT/examples.log" 90 "$PY" examples/char_gpt.py --device cuda $GPT
    step "nccl at world size 1 (pytest)" "$OUT/examples.log" 90 \
        "$PY" -m pytest -o addopts= -p no:cacheprovider -v -rfEs tests/test_dist_nccl.py
    local passed
    passed=$(grep -c 'test_collectives_on_a_gpu_at_world_size_1.*PASSED' "$OUT/examples.log")
    echo "nccl on the GPU (auto, native): $passed of 2 passed$([ "${DRY_RUN:-0}" != 1 ] && ((passed < 2)) &&
        echo ' (MISSED)')" >>"$SUMMARY"
}

digits_verdict() {
    local cpu cuda
    cpu=$(grep -o 'final test accuracy [0-9.]*' "$OUT/digits_cpu.log" | tail -1 | awk '{print $4}')
    cuda=$(grep -o 'final test accuracy [0-9.]*' "$OUT/examples.log" | tail -1 | awk '{print $4}')
    if [ "${DRY_RUN:-0}" = 1 ]; then
        echo "digits CNN accuracy: cpu $cpu, cuda $cuda (dry run: two batches, not judged)"
    elif [ -n "$cpu" ] && [ -n "$cuda" ]; then
        awk -v a="$cpu" -v b="$cuda" 'BEGIN { d = (b - a) * 100; if (d < 0) d = -d;
            printf "digits CNN accuracy: cpu %.2f%%, cuda %.2f%%, %.2f points apart: %s\n", a * 100, b * 100, d,
                   d <= 0.5 ? "within 0.5 (MET)" : "MORE THAN 0.5 (MISSED)" }'
    else
        echo "digits CNN accuracy: cpu '${cpu:-none}', cuda '${cuda:-none}': a run did not finish"
    fi
}

: >"$SUMMARY"
versions >>"$SUMMARY" 2>&1
mpich >>"$SUMMARY" 2>&1
if [ -n "${NUMBA_CACHE_DIR:-}" ]; then
    echo "Numba cache carried: $(ls "$NUMBA_CACHE_DIR" | tr '\n' ' ')(used with NUMBA_CPU_NAME=generic)"
else
    echo "Numba cache: none carried, the CPU kernels compile here"
fi >>"$SUMMARY"
echo "parts: $PARTS; deadline ${TOTAL} s" >>"$SUMMARY"

if wants examples; then  # the CPU run needs no GPU: it trains beside everything until the benchmarks
    step "train_digits --device cpu" "$OUT/digits_cpu.log" 200 \
        "$PY" examples/train_digits.py --device cpu $DIGITS --checkpoint /tmp/minidl-digits-cpu.safetensors &
    cpu_run=$!
fi
wants warm && step "compile the CUDA sources" "$SUMMARY" 70 "$PY" benchmarks/gpu_warm.py $SIM
if wants tests; then
    per_test=$("$PY" -c "import pytest_timeout" 2>/dev/null && echo --timeout=120)  # the GPU image has it
    # shellcheck disable=SC2086  (TESTS and per_test are word lists)
    step "CUDA tests ($WORKERS workers)" "$OUT/tests.log" 130 \
        "$PY" -m pytest -o addopts=-q -p no:cacheprovider -n "$WORKERS" --dist worksteal $per_test -rfEs \
        --junitxml="$OUT/tests.xml" $TESTS &
    tests_run=$!
fi
wants examples && examples
[ -n "${tests_run:-}" ] && wait "$tests_run"
[ -n "${cpu_run:-}" ] && wait "$cpu_run"
wants examples && digits_verdict >>"$SUMMARY"
if wants benchmarks; then  # last, alone on the GPU
    step "gpu_ops.py" "$OUT/gpu_ops.log" 45 "$PY" benchmarks/gpu_ops.py $SIM
    step "gpu_train_step.py" "$OUT/gpu_train_step.log" 70 "$PY" benchmarks/gpu_train_step.py $SIM
fi
echo "whole check: $SECONDS s" >>"$SUMMARY"
cat "$SUMMARY"
grep -h -E '^[0-9]+ (passed|failed)|^=+ .*(passed|failed|error).* =+$' "$OUT/tests.log" 2>/dev/null | tail -2
for log in gpu_ops gpu_train_step; do [ -f "$OUT/$log.log" ] && tail -n 40 "$OUT/$log.log"; done
! grep -q -E 'FAILED|TIMED OUT|SKIPPED|\(MISSED\)|did not finish' "$SUMMARY"
