"""What the tests that start ``python -m minidl.serve`` in a subprocess share: a loopback port, and waiting until
the command answers (or failing with its output if it exits first)."""
import socket
import time

import httpx


def free_port() -> int:
    """A loopback port free now (the subprocess binds it a moment later)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_serving(proc, url: str, seconds: float = 60) -> None:
    """Poll ``url``'s /health until it answers 200; fail with the process's output if it ends, or after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        assert proc.poll() is None, proc.stdout.read().decode()
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"the server at {url} did not come up"
        time.sleep(0.1)
