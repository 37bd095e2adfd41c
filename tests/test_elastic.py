"""minidl.dist.elastic under the launcher (real processes over the gloo transport): a worker killed
mid-all-reduce is survived in the job and a worker started later joins at a commit; either way the final
weights equal a failure-free run's (the spec: each step's global batch does not depend on the world size)."""
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from minidl.dist import elastic

ROOT = str(Path(__file__).resolve().parents[1])
SCRIPT = str(Path(__file__).with_name("elastic_script.py"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(out, nproc, steps, port, env=None, sleep=0.0):
    """The launcher running ``nproc`` workers of the script, results into folder ``out``: its Popen."""
    out.mkdir(exist_ok=True)
    env = dict(os.environ, PYTHONPATH=ROOT, OUT=str(out), STEPS=str(steps), SLEEP=str(sleep), **(env or {}))
    return subprocess.Popen([sys.executable, "-m", "minidl.dist.run", "--rdzv-backend", "static", "--master-port",
                             str(port), "--rdzv-id", "elastic-test", "--nproc-per-node", str(nproc), SCRIPT],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def done(out) -> dict:
    """rank -> (the [step, world size] log, the final weights) of every worker that finished."""
    found = [json.loads(p.read_text()) for p in sorted(out.glob("done-*.json"))]
    return {r["rank"]: (r["log"], np.array(r["weights"])) for r in found}


@pytest.fixture(scope="module")
def failure_free(tmp_path_factory):
    """The weights of 12 and of 60 steps on 2 workers that never fail."""
    found = {}
    for steps in (12, 60):
        out = tmp_path_factory.mktemp(f"free{steps}")
        proc = launch(out, 2, steps, free_port())
        text, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, text
        found[steps] = done(out)[0][1]
    return found


def test_a_worker_killed_mid_all_reduce_is_survived_in_the_job(failure_free, tmp_path):
    """Rank 2 of 3 is SIGKILLed in its 6th all-reduce (step 5): ranks 0 and 1 roll back to the commit of
    step 4, rebuild a group of 2, redo step 5 and finish; the launcher ends well."""
    proc = launch(tmp_path, 3, 12, free_port(), env={"MINIDL_FAULT": "rank=2 at=all_reduce:6 do=kill"})
    text, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, text
    finished = done(tmp_path)
    assert sorted(finished) == [0, 1], text
    for log, weights in finished.values():
        assert log == [[s, 3] for s in range(5)] + [[s, 2] for s in range(5, 12)], log   # no step lost or doubled
        np.testing.assert_allclose(weights, failure_free[12], rtol=0, atol=1e-13)


def test_a_worker_started_later_joins_at_a_commit(failure_free, tmp_path):
    """A third worker started by hand while two train joins them at their next commit; all three finish
    with the weights of the failure-free run."""
    port = free_port()
    proc = launch(tmp_path, 2, 60, port, sleep=0.05)
    time.sleep(1.5)
    joiner_env = dict(os.environ, PYTHONPATH=ROOT, OUT=str(tmp_path), STEPS="60", SLEEP="0.05",
                      MINIDL_ELASTIC_JOIN="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RUN_ID="elastic-test",
                      TORCHELASTIC_RESTART_COUNT="0", MINIDL_RUN_ATTEMPT="0")
    joiner = subprocess.run([sys.executable, SCRIPT], cwd=ROOT, env=joiner_env, capture_output=True, text=True,
                            timeout=120)
    text, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and joiner.returncode == 0, text + joiner.stdout + joiner.stderr
    finished = done(tmp_path)
    assert sorted(finished) == [0, 1, 2], text + joiner.stdout
    for log, weights in finished.values():
        sizes = [w for _, w in log]
        assert [s for s, _ in log] == list(range(60)) and sizes == sorted(sizes) and {2, 3} <= set(sizes), log
        np.testing.assert_allclose(weights, failure_free[60], rtol=0, atol=1e-13)


def test_bad_input_is_named():
    with pytest.raises(TypeError, match="model must be a minidl.nn.Module"):
        elastic.State(None)
    state = elastic.ObjectState(epoch=0)
    with pytest.raises(RuntimeError, match=r"commit\(\) is only meaningful inside a function run by"):
        state.commit()
    with pytest.raises(AttributeError, match="has no value 'batch'"):
        state.batch
