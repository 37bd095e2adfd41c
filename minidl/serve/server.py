"""Running the app under uvicorn: ``serve`` blocks (uvicorn's own signal handling: SIGTERM or Ctrl-C stop accepting
and drain in-flight requests before exit); ``Server`` runs it on a background thread, for tests and for programs
that serve a model beside other work."""
from __future__ import annotations

import socket
import threading
import time

import uvicorn

from .app import build_app
from .runner import ModuleRunner, Runner

__all__ = ["Server", "serve", "as_runner"]


def as_runner(model, example_ndim: int | None = None) -> Runner:
    """``model`` as a runner: a runner as it is, a minidl module in a ``ModuleRunner``."""
    if isinstance(model, Runner):
        return model
    if callable(getattr(model, "eval", None)) and callable(model):
        return ModuleRunner(model, example_ndim=example_ndim)
    raise TypeError(f"serve: expected a minidl module or a Runner, got {type(model).__name__}")


def serve(model, *, host: str = "127.0.0.1", port: int = 8080, max_batch_size: int = 32, max_wait_ms: float = 5,
          max_body_mb: float = 16, preprocess=None, postprocess=None, example_ndim: int | None = None,
          tokenizer=None, max_sequences: int = 32, max_tokens: int | None = None, log_level: str = "info") -> None:
    """Serve ``model`` (a minidl module or a Runner) over HTTP until SIGINT/SIGTERM; blocks. The options are
    ``build_app``'s."""
    app = build_app(as_runner(model, example_ndim), max_batch_size=max_batch_size, max_wait_ms=max_wait_ms,
                    max_body_mb=max_body_mb, preprocess=preprocess, postprocess=postprocess, tokenizer=tokenizer,
                    max_sequences=max_sequences, max_tokens=max_tokens)
    uvicorn.run(app, host=host, port=port, log_level=log_level)


class Server:
    """The same server on a background thread: ``start()`` returns once it accepts connections at ``.url`` (a free
    loopback port unless ``port`` is given); ``stop()`` drains and joins. Also a context manager."""

    def __init__(self, model, *, host: str = "127.0.0.1", port: int = 0, max_batch_size: int = 32,
                 max_wait_ms: float = 5, max_body_mb: float = 16, preprocess=None, postprocess=None,
                 example_ndim: int | None = None, tokenizer=None, max_sequences: int = 32,
                 max_tokens: int | None = None, log_level: str = "warning"):
        self.app = build_app(as_runner(model, example_ndim), max_batch_size=max_batch_size, max_wait_ms=max_wait_ms,
                             max_body_mb=max_body_mb, preprocess=preprocess, postprocess=postprocess,
                             tokenizer=tokenizer, max_sequences=max_sequences, max_tokens=max_tokens)
        self.host, self.port, self.log_level = host, port, log_level
        self._uvicorn: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._thread is None:
            raise RuntimeError("Server.url: the server is not started")
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30) -> "Server":
        if self._thread is not None:
            raise RuntimeError("Server.start: already started")
        # a socket marked TCP, so that asyncio sets TCP_NODELAY on its connections (with protocol 0 it does not, and
        # a kept-alive client's delayed ACK then holds each response back ~40 ms)
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM,
                             socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        self._uvicorn = uvicorn.Server(uvicorn.Config(self.app, log_level=self.log_level, lifespan="on"))
        self._thread = threading.Thread(target=self._uvicorn.run, kwargs={"sockets": [sock]},
                                        name="minidl-serve", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._uvicorn.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"Server.start: the server did not start within {timeout} s")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 30) -> None:
        if self._thread is None:
            return
        self._uvicorn.should_exit = True
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise RuntimeError(f"Server.stop: the server did not stop within {timeout} s")
        self._thread = None

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
