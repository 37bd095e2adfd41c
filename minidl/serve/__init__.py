"""minidl.serve: models over HTTP, with dynamic batching.

``serve(model)`` blocks; ``Server(model).start()`` runs on a background thread; ``python -m minidl.serve SPEC`` is the
command. Routes: ``POST /v1/predict`` (``{"inputs": ...}`` -> ``{"outputs": ...}``), ``GET /health``,
``GET /metrics`` (Prometheus text), ``GET /v1/models``, and for a causal language model ``POST /v1/generate``
(token by token, as server-sent events).

Built on Starlette and uvicorn. Starlette is the small ASGI toolkit FastAPI is built on (routing, requests, streaming
responses, lifespan) without pydantic's models and validation, which our own checks of nested number lists replace;
uvicorn is the standard ASGI server (HTTP/1.1, graceful shutdown on SIGTERM, worker processes).

Layers: ``runner`` (a batch array -> a batch array: the model, whatever runs it) <- ``batcher`` (queues requests'
examples and runs them together on one worker thread) <- ``app`` (routes, input checks, metrics) <- ``server`` /
``cli`` (uvicorn)."""
from .runner import ModuleRunner, OnnxRunner, Runner
from .server import Server, as_runner, serve

__all__ = ["ModuleRunner", "OnnxRunner", "Runner", "Server", "as_runner", "serve"]
