"""The Starlette application: routes, the request-metrics middleware, and the batchers' lives on the serving loop."""
from __future__ import annotations

import contextlib
import time

import numpy as np
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from .batcher import Batcher, ModelError
from .generate_route import generation_for
from .inputs import InputError, as_examples, parse_inputs, read_body, to_array
from .metrics import Metrics
from .runner import Runner

__all__ = ["build_app"]

ROUTES = ("/v1/predict", "/v1/generate", "/v1/models", "/health", "/metrics")


def build_app(runner: Runner, *, max_batch_size: int = 32, max_wait_ms: float = 5, max_body_mb: float = 16,
              preprocess=None, postprocess=None, tokenizer=None, max_sequences: int = 32,
              max_tokens: int | None = None) -> Starlette:
    """An ASGI app serving ``runner``. ``preprocess(inputs)`` maps a request's ``inputs`` value to nested lists or an
    array before it is checked; ``postprocess(outputs)`` maps a request's output rows (an array) to a JSON-able list
    of as many items. Both run in Starlette's thread pool, off the event loop. A causal language model also gets
    ``POST /v1/generate`` (see ``generate_route``): ``tokenizer`` for text, ``max_sequences`` decoding at once,
    ``max_tokens`` bounding a request's prompt plus new tokens. ``app.state.batcher``, ``app.state.generation``
    (None for other models) and ``app.state.metrics`` are there for routes a program adds (``app.add_route``) before
    the server starts."""
    metrics = Metrics()
    batcher = Batcher(runner, max_batch_size=max_batch_size, max_wait_ms=max_wait_ms, metrics=metrics)
    max_bytes = int(max_body_mb * 1024 * 1024)
    generation = generation_for(runner, tokenizer=tokenizer, max_sequences=max_sequences, max_tokens=max_tokens)

    async def predict(request):
        try:
            value = parse_inputs(await read_body(request, max_bytes))
            if preprocess is not None:
                value = await run_in_threadpool(preprocess, value)
            examples, single = as_examples(to_array(value, runner.input_dtype), runner.example_ndim)
            rows = await batcher.submit(examples)
        except InputError as error:
            return _error(error.status, error.message)
        except ModelError as error:
            return _error(422, str(error))
        outputs = await run_in_threadpool(postprocess, rows) if postprocess is not None else _plain(rows)
        return JSONResponse({"outputs": outputs[0] if single else outputs})

    async def models(request):
        return JSONResponse({"models": [{**runner.describe(), "max_batch_size": max_batch_size,
                                         "max_wait_ms": max_wait_ms, "max_body_mb": max_body_mb,
                                         "generation": None if generation is None else generation.describe()}]})

    async def health(request):
        return JSONResponse({"status": "ok"})

    async def scrape(request):
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4")

    @contextlib.asynccontextmanager
    async def lifespan(app):
        batcher.start()
        if generation is not None:
            generation.batcher.start()
        yield
        if generation is not None:
            await run_in_threadpool(generation.batcher.close)   # (joins its worker thread)
        await batcher.stop()

    routes = [Route("/v1/predict", predict, methods=["POST"]), Route("/v1/models", models), Route("/health", health),
              Route("/metrics", scrape)]
    if generation is not None:
        routes.append(Route("/v1/generate", generation.route(metrics, max_bytes), methods=["POST"]))
        metrics.sequences = generation.sequences
    app = Starlette(routes=routes, lifespan=lifespan)
    app.add_middleware(_RequestMetrics, metrics=metrics)
    app.state.metrics, app.state.batcher, app.state.generation = metrics, batcher, generation
    return app


def _plain(rows: np.ndarray) -> list:
    """Rows as JSON lists, non-finite floats as null: JSON has no NaN or Infinity (Starlette refuses to write them)."""
    if np.issubdtype(rows.dtype, np.floating) and not np.isfinite(rows).all():
        return np.where(np.isfinite(rows), rows.astype(object), None).tolist()
    return rows.tolist()


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


class _RequestMetrics:
    """Pure ASGI middleware counting each HTTP request by route and status, and timing it to its response's end."""

    def __init__(self, app, metrics: Metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        route = scope["path"] if scope["path"] in ROUTES else "other"
        start, status = time.perf_counter(), [500]

        async def recording_send(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        finally:
            self.metrics.observe_request(route, status[0], time.perf_counter() - start)
