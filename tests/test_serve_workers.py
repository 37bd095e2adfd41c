"""``python -m minidl.serve ... --workers N``: N uvicorn processes on one port, each building the model from the same
SPEC and weights, so every worker answers alike; SIGTERM stops them all; a bad SPEC fails before any worker starts."""
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import httpx
import numpy as np

import minidl
from minidl import nn

FACTORY = textwrap.dedent("""
    from minidl import nn

    def mlp():
        return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
""")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stdout.read().decode()
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the workers did not come up"
            time.sleep(0.1)
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
