"""One thread setting, honoured everywhere: where it comes from, and which pools take it when."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np
import pytest
from threadpoolctl import threadpool_info

import minidl
from minidl import threads

ROOT = Path(__file__).resolve().parent.parent


def started_with(env: dict, then: str = "") -> dict:
    """get_num_threads() of a fresh `import minidl` under ``env`` (Numba's cap fixed at 4, whatever the machine's
    cores) after the code ``then``, with the warnings the import gave, and BLAS_PARALLEL_MIN."""
    script = ("import json, warnings\nwith warnings.catch_warnings(record=True) as seen:\n"
              "    warnings.simplefilter('always')\n    import minidl\n" + then + "\n"
              "print(json.dumps({'threads': minidl.get_num_threads(), 'warnings': [str(w.message) for w in seen],"
              " 'blas_min': minidl.threads.BLAS_PARALLEL_MIN}))")
    base = {k: v for k, v in os.environ.items() if k not in ("MINIDL_NUM_THREADS", "OMP_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", script], env={**base, "PYTHONPATH": str(ROOT), "NUMBA_NUM_THREADS": "4",
                                                              **env}, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_environment_sets_the_threads_at_import():
    cores = min(len(os.sched_getaffinity(0)), 4)
    assert started_with({})["threads"] == cores
    assert started_with({"MINIDL_NUM_THREADS": "3"})["threads"] == 3
    assert started_with({"OMP_NUM_THREADS": "1"})["threads"] == 1   # torch's convention
    assert started_with({"OMP_NUM_THREADS": "3,2"})["threads"] == 3  # (OpenMP's nested levels: the first)
    assert started_with({"MINIDL_NUM_THREADS": "2", "OMP_NUM_THREADS": "1"})["threads"] == 2  # minidl's own first
    assert started_with({"MINIDL_NUM_THREADS": "9"})["threads"] == 4  # no more than Numba's pool holds


def test_a_ranks_share_of_the_cores_yields_to_a_count_chosen_by_the_user_or_the_environment():
    share = "from minidl.dist.launch import fit_threads_to_cores\nfit_threads_to_cores(4)  # 4 ranks on this host"
    cores = min(len(os.sched_getaffinity(0)), 4)
    assert started_with({}, share)["threads"] == max(1, cores // 4)
    assert started_with({"OMP_NUM_THREADS": "3"}, share)["threads"] == 3
    assert started_with({}, "minidl.set_num_threads(3)\n" + share)["threads"] == 3


def test_the_blas_cut_off_comes_from_the_environment_where_set():
    assert started_with({})["blas_min"] == 1 << 30
    assert started_with({"MINIDL_BLAS_PARALLEL_MIN": "0"})["blas_min"] == 0
    r = started_with({"MINIDL_BLAS_PARALLEL_MIN": "-5"})
    assert r["blas_min"] == 1 << 30 and any("MINIDL_BLAS_PARALLEL_MIN='-5'" in w for w in r["warnings"])


def test_a_bad_thread_count_in_the_environment_is_named_and_ignored():
    r = started_with({"MINIDL_NUM_THREADS": "zero", "OMP_NUM_THREADS": "1"})
    assert r["threads"] == 1
    assert any("MINIDL_NUM_THREADS='zero' is not a positive number of threads" in w for w in r["warnings"])


@pytest.mark.parametrize("bad, words", [(0, "a positive integer, got 0"), (-1, "a positive integer, got -1"),
                                        (1.5, "an int, but got float"), (True, "an int, but got bool"),
                                        ("2", "an int, but got str")])
def test_set_num_threads_refuses_what_is_not_a_positive_count_as_torch_does(bad, words):
    with pytest.raises(RuntimeError, match=f"set_num_threads expects {words}"):
        minidl.set_num_threads(bad)


def blas_threads() -> set:
    return {pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}


@pytest.fixture
def two_threads(monkeypatch):
    """Two threads set (Numba's pool may hold fewer on a 1-core machine), restored after."""
    before = minidl.get_num_threads()
    minidl.set_num_threads(2)
    yield minidl.get_num_threads()
    minidl.set_num_threads(before)


def test_blas_gets_the_threads_only_for_a_large_product(two_threads, monkeypatch):
    monkeypatch.setattr(threads, "BLAS_PARALLEL_MIN", 16 * 16 * 16)
    a, b = minidl.randn(16, 15), minidl.randn(15, 16)
    expected = (a.numpy() @ b.numpy())
    np.testing.assert_allclose((a @ b).numpy(), expected, rtol=1e-5)
    assert blas_threads() == {1}                # 3,840 multiply-adds: below the cut
    a, b = minidl.randn(16, 16), minidl.randn(16, 16).T
    np.testing.assert_allclose((a @ b).numpy(), a.numpy() @ b.numpy(), rtol=1e-5, atol=1e-6)
    assert blas_threads() == {two_threads}      # 4,096: at it
    batched = minidl.randn(64, 8, 8)            # 64 products of 512 each: each BLAS call is small
    np.testing.assert_allclose((batched @ batched).numpy(), batched.numpy() @ batched.numpy(), rtol=1e-5, atol=1e-5)
    assert blas_threads() == {1}


def test_set_num_threads_caps_the_blas_library_at_once(two_threads):
    minidl.set_num_threads(1)
    assert blas_threads() == {1}                # numpy calls of the user's too


def test_numba_kernels_take_the_setting_from_the_calling_thread(two_threads):
    big = minidl.ones(1 << 22)  # PARALLEL_MIN elements: the parallel kernel
    assert (big + big).sum().item() == 2 * (1 << 22)
    assert numba.get_num_threads() == two_threads
    minidl.set_num_threads(1)
    minidl.set_num_threads(two_threads)
    numba.set_num_threads(1)  # (another library changed Numba's count behind minidl's back)
    assert (big * 3).sum().item() == 3 * (1 << 22)
    assert numba.get_num_threads() == two_threads
