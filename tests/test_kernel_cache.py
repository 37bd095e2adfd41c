"""Kernels compile once and are cached on disk, per user and by source text (so other clones and
virtual environments reuse them, and an edited kernel source recompiles); with the JIT disabled
results stay correct."""
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numba
import pytest

ROOT = Path(__file__).resolve().parent.parent

WORKLOAD = textwrap.dedent("""
    import importlib, json, pkgutil, numba, numpy as np
    import minidl as md
    from minidl.kernels.cpu import jit
    KERNEL_MODULES = [importlib.import_module(f"minidl.kernels.cpu.jit.{m.name}") for m in pkgutil.iter_modules(jit.__path__)]

    for dtype in (md.float32, md.float64, md.int64):
        x = md.arange(24, dtype=dtype).reshape(2, 3, 4)
        y = x.transpose(0, 2)
        (x + 1, x * x, x.abs(), x.sum(1), x.amax(), x.argmax(2), x.cumsum(0), x > 2, x[x > 2], x[:, [0, 2]],
         md.where(x > 3, x, x * 0), y.contiguous(), md.zeros(50000, dtype=dtype) + 1)
        if dtype.is_floating_point:
            (x.exp(), x @ x.transpose(1, 2))
    dispatchers = [obj for module in KERNEL_MODULES
                   for obj in vars(module).values() if isinstance(obj, numba.core.registry.CPUDispatcher)]
    misses = {d.py_func.__name__: sum(d.stats.cache_misses.values()) for d in dispatchers}
    hits = {d.py_func.__name__: sum(d.stats.cache_hits.values()) for d in dispatchers}
    print(json.dumps({"misses": misses, "hits": hits}))
""")


def _run(cache_home):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    out = subprocess.run([sys.executable, "-c", WORKLOAD], capture_output=True, text=True, timeout=600,
                         env={**env, "XDG_CACHE_HOME": str(cache_home)})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_process_compiles_nothing(tmp_path):
    # (a copy of the suite's cache: other test workers may be writing to the suite's own meanwhile)
    from minidl.kernels.cpu import kernel_cache
    versioned = f"cpu-numba-{numba.__version__}"
    if os.path.isdir(os.path.join(kernel_cache.cache_root(), versioned)):
        shutil.copytree(os.path.join(kernel_cache.cache_root(), versioned), tmp_path / "minidl" / versioned)
    _run(tmp_path)  # compiles whatever the cache lacks
    second = _run(tmp_path)
    compiled = {name: n for name, n in second["misses"].items() if n}
    assert not compiled, f"kernels recompiled in a second process: {compiled}"
    assert sum(second["hits"].values()) > 0, "no kernel was loaded from the on-disk cache"


SMALL_WORKLOAD = textwrap.dedent("""
    import json, numba, minidl as md
    from minidl.kernels.cpu.jit import elementwise
    total = (-md.arange(1.0, 7.0)).tolist()
    dispatchers = [obj for obj in vars(elementwise).values() if isinstance(obj, numba.core.registry.CPUDispatcher)]
    print(json.dumps({"misses": sum(sum(d.stats.cache_misses.values()) for d in dispatchers),
                      "hits": sum(sum(d.stats.cache_hits.values()) for d in dispatchers),
                      "file": md.__file__, "total": total}))
""")


def _run_small(package_parent, cache_home, cwd):
    """The small workload with the minidl under ``package_parent`` and caches under ``cache_home``:
    (its counts, its stderr)."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "NUMBA_DISABLE_JIT")}
    env.update(XDG_CACHE_HOME=str(cache_home), PYTHONPATH=str(package_parent))
    out = subprocess.run([sys.executable, "-c", SMALL_WORKLOAD], capture_output=True, text=True, timeout=600,
                         env=env, cwd=cwd)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["file"].startswith(str(package_parent)), found["file"]  # the copy under test was imported
    return found, out.stderr


def test_a_new_clone_reuses_the_per_user_cache_and_an_edited_formula_recompiles(tmp_path):
    from minidl.kernels.cpu import kernel_cache
    from minidl.kernels.cpu.jit import elementwise as jit

    # (the suite's own cache, which this process's kernels were compiled into, seeds the new one: a
    # cold compile of an elementwise kernel takes 8-16 s, and the edited formula below makes one)
    cache = tmp_path / "cache"
    ours = kernel_cache.KernelCacheLocator.from_function(jit.copy_serial.py_func, jit.__file__).get_cache_path()
    seeded = cache / "minidl" / os.path.relpath(ours, kernel_cache.cache_root())
    shutil.copytree(ours, seeded)
    first, _ = _run_small(ROOT, cache, tmp_path)
    assert first["total"] == [-1.0, -2.0, -3.0, -4.0, -5.0, -6.0]

    clone = tmp_path / "clone"   # another path, as a second clone or venv would be
    shutil.copytree(ROOT / "minidl", clone / "minidl", ignore=shutil.ignore_patterns("__pycache__"))
    again, said = _run_small(clone, cache, tmp_path)
    assert again["misses"] == 0 and again["hits"] > 0, again
    assert "compiling" not in said

    # a new formula for neg lands in jit/formulas.py, not in jit/elementwise.py, which holds the
    # unary kernel: the kernel must still be recompiled, or it would keep the old formula
    table = clone / "minidl" / "formulas" / "table.py"
    table.write_text(table.read_text().replace('unary("neg", "-x",', 'unary("neg", "1 - x",'))
    regenerated = subprocess.run([sys.executable, "-m", "minidl.formulas.generate"], capture_output=True, text=True,
                                 env={**os.environ, "PYTHONPATH": str(clone)}, cwd=tmp_path, timeout=300)
    assert regenerated.returncode == 0 and "cpu/jit/formulas.py" in regenerated.stdout, regenerated.stderr
    edited, said = _run_small(clone, cache, tmp_path)
    assert edited["misses"] > 0 and "compiling CPU kernels" in said
    assert len(list((cache / "minidl").glob("cpu-numba-*/elementwise-*/*.nbi"))) > len(list(seeded.glob("*.nbi")))
    assert edited["total"] == [0.0, -1.0, -2.0, -3.0, -4.0, -5.0]  # the new formula, not a stale kernel
    assert len(list((cache / "minidl").glob("cpu-numba-*/elementwise-*"))) == 2  # the old entries stay apart


def test_the_cache_key_covers_every_kernel_source(tmp_path):
    from minidl.kernels.cpu import kernel_cache
    for name in ("elementwise.py", "formulas.py"):
        (tmp_path / name).write_text(f"# {name}\n")
    before = kernel_cache.sources_digest(str(tmp_path))
    kernel_cache.sources_digest.cache_clear()
    (tmp_path / "formulas.py").write_text("# an edited helper\n")
    assert kernel_cache.sources_digest(str(tmp_path)) != before


def test_the_cache_folder_follows_numba_cache_dir_then_xdg_cache_home(tmp_path, monkeypatch):
    from minidl.kernels.cpu import kernel_cache
    from minidl.kernels.cpu.jit import elementwise as jit

    def folder():
        return kernel_cache.KernelCacheLocator.from_function(jit.copy_serial.py_func, jit.__file__).get_cache_path()

    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert folder().startswith(str(tmp_path / "xdg" / "minidl" / "cpu-numba-"))
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))
    assert folder().startswith(str(tmp_path / "numba" / "cpu-numba-"))
    (tmp_path / "locked").mkdir(mode=0o500)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "locked" / "inside"))
    if os.access(tmp_path / "locked", os.W_OK):
        pytest.skip("running as a user who may write anywhere (root)")
    assert kernel_cache.KernelCacheLocator.from_function(jit.copy_serial.py_func, jit.__file__) is None


def test_old_sources_folders_are_pruned_beyond_the_newest_few(tmp_path):
    from minidl.kernels.cpu import kernel_cache
    for i in range(kernel_cache.KEEP + 3):
        (tmp_path / f"jit-{i}").mkdir()
        age = kernel_cache.PRUNE_AFTER + 100 - i  # jit-0 the oldest; every one idle for over a day
        os.utime(tmp_path / f"jit-{i}", (time.time() - age,) * 2)
    (tmp_path / "random-0").mkdir()
    (tmp_path / "jit-recent").mkdir()
    kernel_cache._mark_used(str(tmp_path / "jit-0"))   # the oldest, opened by a process just now
    kernel_cache._prune(str(tmp_path), "jit")
    left = sorted(p.name for p in tmp_path.iterdir())
    newest_idle = [f"jit-{i}" for i in range(kernel_cache.KEEP + 3)][-(kernel_cache.KEEP - 2):]
    assert left == sorted(["jit-0", "jit-recent", "random-0", *newest_idle])


def test_results_correct_with_jit_disabled():
    script = textwrap.dedent("""
        import numpy as np, minidl as md
        a = np.arange(12, dtype=np.float64).reshape(3, 4)
        x = md.tensor(a)
        assert np.allclose((x.t() * 2 + 1).numpy(), a.T * 2 + 1)
        assert np.allclose(x[:, ::-2].sum(1).numpy(), a[:, ::-2].sum(1))
        assert np.allclose(x.exp().amax(0).numpy(), np.exp(a).max(0))
        assert np.allclose(x[[0, 2], 1:].numpy(), a[[0, 2], 1:])
        assert (x.argmax(1).numpy() == a.argmax(1)).all()
        f = md.tensor([65519.0, -1.0, 3e9, float("nan")], dtype=md.float32)
        assert f.to(md.int16).tolist() == [-17, -1, 0, 0] and f.half().to(md.uint8).tolist() == [224, 255, 0, 0]
        w = md.tensor([0.5, -1.0, 2.0], requires_grad=True)
        (w * w).sum().backward()
        assert np.allclose(w.grad.numpy(), [1.0, -2.0, 4.0])
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "NUMBA_DISABLE_JIT": "1"})
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_all_jitted_code_lives_in_the_jit_package():
    """The cache key covers the text of minidl/kernels/cpu/jit/ only, so every jitted function (and every
    helper a kernel inlines) must live there."""
    import importlib
    import pkgutil

    import numba

    import minidl.kernels.cpu

    for info in pkgutil.iter_modules(minidl.kernels.cpu.__path__):
        module = importlib.import_module(f"minidl.kernels.cpu.{info.name}")
        for name, obj in vars(module).items():
            if isinstance(obj, numba.core.dispatcher.Dispatcher):
                assert obj.py_func.__module__.startswith("minidl.kernels.cpu.jit."), \
                    f"{info.name}.{name} is jitted outside minidl/kernels/cpu/jit/"


def test_set_num_threads_before_the_first_op_keeps_the_workqueue_layer():
    """The first numba.set_num_threads() starts the thread pool: the layer must be chosen before it."""
    script = ("import minidl, numba; minidl.set_num_threads(2); x = minidl.randn(1 << 18); x + x; "
              "print(numba.threading_layer())")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0 and out.stdout.strip() == "workqueue", out.stderr
