"""``python -m minidl.serve ... --workers N``: N uvicorn processes on one port, each building the model from the same
SPEC and weights, so every worker answers alike; SIGTERM stops them all; a bad SPEC fails before any worker starts."""
import os
import signal
import subprocess
import sys
import textwrap

import httpx
import numpy as np

import minidl
from minidl import nn

from serve_processes import free_port, wait_until_serving

FACTORY = textwrap.dedent("""
    from minidl import nn

    def mlp():
        return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
""")


def command(*args):
    """The command in a session of its own, so that a test that fails can end its workers with it."""
    return subprocess.Popen([sys.executable, "-m", "minidl.serve", *map(str, args), "--log-level", "warning"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def end(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_workers_share_a_port_and_answer_alike(tmp_path):
    minidl.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)).eval()
    (tmp_path / "factory.py").write_text(FACTORY)
    minidl.save(model.state_dict(), tmp_path / "w.safetensors")
    port = free_port()
    proc = command(f"{tmp_path / 'factory.py'}:mlp", "--weights", tmp_path / "w.safetensors", "--workers", 2,
                   "--port", port)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(proc, url)
        examples = np.random.default_rng(0).standard_normal((12, 4)).astype(np.float32)
        with minidl.inference_mode():
            want = model(minidl.from_numpy(examples)).numpy()
        for example, row in zip(examples, want):        # a connection each: the workers take turns accepting
            answer = httpx.post(f"{url}/v1/predict", json={"inputs": example.tolist()}, timeout=20,
                                headers={"Connection": "close"})
            assert answer.status_code == 200, answer.text
            np.testing.assert_allclose(answer.json()["outputs"], row, rtol=0, atol=1e-6)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM)
        assert b"Traceback" not in proc.stdout.read()
    finally:
        end(proc)


def test_a_bad_spec_fails_before_workers_start(tmp_path):
    (tmp_path / "factory.py").write_text(FACTORY)
    proc = command(f"{tmp_path / 'factory.py'}:nothing", "--workers", 2, "--port", free_port())
    try:
        code = proc.wait(timeout=20)
        output = proc.stdout.read()
    finally:
        end(proc)
    assert code == 1 and b"has no callable 'nothing'" in output and b"Traceback" not in output
