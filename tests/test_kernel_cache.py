"""Kernels compile once and are cached on disk; with the JIT disabled results stay correct."""
import json
import os
import subprocess
import sys
import textwrap

WORKLOAD = textwrap.dedent("""
    import json, numba, numpy as np
    import minidl as md
    from minidl import cpu

    for dtype in (md.float32, md.float64, md.int64):
        x = md.arange(24, dtype=dtype).reshape(2, 3, 4)
        y = x.transpose(0, 2)
        (x + 1, x * x, x.abs(), x.sum(1), x.amax(), x.argmax(2), x.cumsum(0), x > 2, x[x > 2], x[:, [0, 2]],
         md.where(x > 3, x, x * 0), y.contiguous(), md.zeros(50000, dtype=dtype) + 1)
        if dtype.is_floating_point:
            (x.exp(), x @ x.transpose(1, 2))
    dispatchers = [obj for module in (cpu.jit,)
                   for obj in vars(module).values() if isinstance(obj, numba.core.registry.CPUDispatcher)]
    misses = {d.py_func.__name__: sum(d.stats.cache_misses.values()) for d in dispatchers}
    hits = {d.py_func.__name__: sum(d.stats.cache_hits.values()) for d in dispatchers}
    print(json.dumps({"misses": misses, "hits": hits}))
""")


def _run(env=None):
    out = subprocess.run([sys.executable, "-c", WORKLOAD], capture_output=True, text=True, timeout=600,
                         env={**os.environ, **(env or {})})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_process_compiles_nothing():
    _run()  # compiles whatever the cache lacks
    second = _run()
    compiled = {name: n for name, n in second["misses"].items() if n}
    assert not compiled, f"kernels recompiled in a second process: {compiled}"
    assert sum(second["hits"].values()) > 0, "no kernel was loaded from the on-disk cache"


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
        w = md.tensor([0.5, -1.0, 2.0], requires_grad=True)
        (w * w).sum().backward()
        assert np.allclose(w.grad.numpy(), [1.0, -2.0, 4.0])
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "NUMBA_DISABLE_JIT": "1"})
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_all_jitted_code_lives_in_one_module():
    """Numba's cache only notices edits to a kernel's own file, so inlined helpers must share it
    (random_jit.py is the one self-contained exception: it inlines nothing from jit.py)."""
    import importlib
    import pkgutil

    import numba

    import minidl.cpu

    for info in pkgutil.iter_modules(minidl.cpu.__path__):
        module = importlib.import_module(f"minidl.cpu.{info.name}")
        for name, obj in vars(module).items():
            if isinstance(obj, numba.core.dispatcher.Dispatcher):
                assert obj.py_func.__module__ in ("minidl.cpu.jit", "minidl.cpu.random_jit"), \
                    f"{info.name}.{name} is jitted outside jit.py"


def test_set_num_threads_before_the_first_op_keeps_the_workqueue_layer():
    """The first numba.set_num_threads() starts the thread pool: the layer must be chosen before it."""
    script = ("import minidl, numba; minidl.set_num_threads(2); x = minidl.randn(1 << 18); x + x; "
              "print(numba.threading_layer())")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0 and out.stdout.strip() == "workqueue", out.stderr
