"""benchmarks/compile_step.py's torch.compile figures stay honest: its check tells a step Inductor compiled from one
run eagerly, and its cold and warm children really start from an empty cache and then reuse it."""
import importlib
import os
import pathlib

import pytest

torch = pytest.importorskip("torch")
BENCH = pathlib.Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))          # the scripts import their shared modules as top-level ones
    return importlib.import_module("_compile_bench")


def tiny_step(compile_with):
    """A training step (zero_grad, forward, backward, SGD) through ``compile_with``."""
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x, y = torch.randn(8, 4), torch.randn(8, 3)

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        opt.step()
        return loss

    return compile_with(step)


def test_check_sees_inductor_run_the_whole_step(bench, monkeypatch):
    monkeypatch.setattr(torch._inductor.config, "compile_threads", 1)   # no pool of compile workers to start
    try:
        res = bench.check_torch_compiled(torch, tiny_step(torch.compile), warm_calls=2, more_calls=1)
    except Exception as err:  # noqa: BLE001  (no C++ compiler, or a broken one: nothing to check here)
        why = bench.inductor_works(torch)
        if why:
            pytest.skip(f"torch.compile cannot compile here: {why}")
        raise err
    assert res["whole"] and res["forward"] and res["backward"] and res["recompiled_late"] == 0
    assert res["inductor_graphs"] >= 3 and res["graphs"] >= 2      # forward + backward, the optimizer's step
    eager = tiny_step(lambda f: f)
    assert res["losses"] == pytest.approx([float(eager().item()) for _ in res["losses"]], rel=1e-5)


def test_check_refuses_a_step_run_eagerly(bench):
    assert not bench.check_torch_compiled(torch, tiny_step(lambda f: f))["whole"]
    # Dynamo without Inductor: frames are captured, but no Inductor graph runs
    res = bench.check_torch_compiled(torch, tiny_step(lambda f: torch.compile(f, backend="aot_eager")))
    assert res["forward"] and res["inductor_graphs"] == 0 and not res["whole"]


CHILD = """
import json, os, sys
numba_dir = os.environ["NUMBA_CACHE_DIR"]
found = os.path.isdir(numba_dir) and os.listdir(numba_dir)
os.makedirs(numba_dir, exist_ok=True)
open(os.path.join(numba_dir, "kernel.nbc"), "w").close()
print("a line before the figures")
print(json.dumps(dict(found=bool(found), argv=sys.argv[1:], compile_cache=os.environ["MINIDL_COMPILE_CACHE"],
                      xdg=os.environ["XDG_CACHE_HOME"], tmp=os.environ["TMPDIR"])))
"""


def test_cold_child_starts_empty_and_warm_child_reuses_its_cache(bench, tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    res = bench.run_first_calls(str(script), "minidl", "gpt_tiny")
    assert res["cold"]["found"] is False and res["warm"]["found"] is True
    assert res["cold"]["argv"] == ["--first-calls-child", "minidl", "gpt_tiny"]
    assert res["cold"]["cache_files"] == res["warm"]["cache_files"] == 1
    root = os.path.dirname(res["cold"]["compile_cache"])
    assert root == os.path.dirname(res["warm"]["compile_cache"]) == os.path.dirname(res["cold"]["xdg"])
    assert os.path.dirname(res["cold"]["tmp"]) == root
    assert not os.path.exists(root)                  # the caches are removed afterwards


def test_torch_children_get_their_own_inductor_cache_and_no_remote_one(bench, tmp_path, monkeypatch):
    from torch._inductor.runtime.cache_dir_utils import cache_dir
    env = bench.cache_env("torch", str(tmp_path))
    assert env["TORCHINDUCTOR_FX_GRAPH_CACHE"] == env["TORCHINDUCTOR_AUTOGRAD_CACHE"] == "1"
    remote = [k for k in env if k.endswith("REMOTE_CACHE")]
    assert len(remote) == 4 and all(env[k] == "0" for k in remote)
    # torch reads every one of these names (a misspelt one would be silently ignored) ...
    sources = "".join(pathlib.Path(m.__file__).read_text() for m in (torch._inductor.config, torch._functorch.config))
    assert all(f'"{k}"' in sources for k in [*remote, "TORCHINDUCTOR_FX_GRAPH_CACHE", "TORCHINDUCTOR_AUTOGRAD_CACHE"])
    # ... and puts its cache where the child is told
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", env["TORCHINDUCTOR_CACHE_DIR"])
    assert cache_dir() == env["TORCHINDUCTOR_CACHE_DIR"] and cache_dir().startswith(str(tmp_path))
