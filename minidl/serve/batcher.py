"""Dynamic batching: concurrent requests' examples queue on the event loop and run together, up to
``max_batch_size`` examples or ``max_wait_ms`` after the first, in one runner call on a single worker thread (so the
event loop never blocks and the model never runs twice at once). Examples of different shapes run in separate calls.

The batcher only sees arrays and a runner; a route awaits ``submit`` and gets its own rows back. Another kind of
scheduler (continuous batching for generation) can live beside it as its own object with its own route."""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures

import numpy as np

from .metrics import Metrics
from .runner import Runner

__all__ = ["Batcher", "ModelError"]


class ModelError(Exception):
    """The runner refused or failed on a request's examples; the message is the runner's own."""


class Batcher:
    """Queue, collector task and worker thread for one runner. ``start`` and ``stop`` run on the serving loop."""

    def __init__(self, runner: Runner, *, max_batch_size: int = 32, max_wait_ms: float = 5,
                 metrics: Metrics | None = None):
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be >= 0, got {max_wait_ms}")
        self.runner, self.max_batch_size, self.max_wait = runner, max_batch_size, max_wait_ms / 1000
        self.metrics = metrics or Metrics()
        self._pending: collections.deque = collections.deque()   # (examples, future, arrival time), in order
        self._arrived: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._worker: concurrent.futures.ThreadPoolExecutor | None = None

    def start(self) -> None:
        self._arrived = asyncio.Event()
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="minidl-serve-model")
        self._task = asyncio.get_running_loop().create_task(self._collect())

    async def stop(self) -> None:
        """Called after the server has drained its requests: whatever still waits is refused, not dropped."""
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        while self._pending:
            _settle(self._pending.popleft()[1], exception=RuntimeError("the server is shutting down"))
        self._worker.shutdown(wait=True)

    async def submit(self, examples: np.ndarray) -> np.ndarray:
        """The runner's rows for ``examples`` (shape (n, ...), n >= 1), batched with whatever else is waiting."""
        if self._task is None or self._task.done():
            raise RuntimeError("the batcher is not running")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._pending.append((examples, future, loop.time()))
        self.metrics.queue_length += len(examples)
        self._arrived.set()
        return await future

    async def _collect(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self._pending:
                self._arrived.clear()
                await self._arrived.wait()
            deadline = self._pending[0][2] + self.max_wait     # (the oldest may have waited out a model call)
            while self._rows() < self.max_batch_size and (left := deadline - loop.time()) > 0:
                self._arrived.clear()
                try:
                    await asyncio.wait_for(self._arrived.wait(), left)
                except asyncio.TimeoutError:
                    break
            await self._run(self._take())

    def _rows(self) -> int:
        return sum(len(item[0]) for item in self._pending)

    def _take(self) -> list:
        """Requests from the front of the queue up to max_batch_size examples (at least one request, which may be
        larger: it is run in chunks)."""
        taken, rows = [], 0
        while self._pending and (not taken or rows + len(self._pending[0][0]) <= self.max_batch_size):
            examples, future, _ = self._pending.popleft()
            taken.append((examples, future))
            rows += len(examples)
        self.metrics.queue_length -= rows
        return taken

    async def _run(self, taken: list) -> None:
        groups: dict = {}
        for examples, future in taken:
            if not future.cancelled():                        # (its client went away)
                groups.setdefault((examples.shape[1:], examples.dtype), []).append((examples, future))
        for group in groups.values():
            try:
                await self._run_group(group)
            except asyncio.CancelledError:
                raise
            except BaseException as error:  # noqa: BLE001  (a fault here must answer its requests, not strand them)
                for _, future in group:
                    _settle(future, exception=error)

    async def _run_group(self, group: list) -> None:
        """One runner call for a same-shape group; if it fails, each request alone, so that one bad request does not
        fail the others batched with it."""
        try:
            outputs = await self._call(np.concatenate([examples for examples, _ in group]))
        except ModelError as error:
            if len(group) == 1:
                _settle(group[0][1], exception=error)
            else:
                for request in group:
                    await self._run_group([request])
            return
        start = 0
        for examples, future in group:
            _settle(future, result=outputs[start:start + len(examples)])
            start += len(examples)

    async def _call(self, batch: np.ndarray) -> np.ndarray:
        loop, outs = asyncio.get_running_loop(), []
        for start in range(0, len(batch), self.max_batch_size):
            chunk = batch[start:start + self.max_batch_size]
            self.metrics.observe_batch(len(chunk))
            try:
                out = np.asarray(await loop.run_in_executor(self._worker, self.runner, chunk))
            except asyncio.CancelledError:
                raise
            except BaseException as error:  # noqa: BLE001  (the model's error, SystemExit too, is the client's answer)
                raise ModelError(f"{type(error).__name__}: {error}") from error
            if out.ndim == 0 or len(out) != len(chunk):
                got = "a scalar" if out.ndim == 0 else f"{len(out)} rows"
                raise ModelError(f"{self.runner.name} returned {got} for {len(chunk)} examples")
            outs.append(out)
        return np.concatenate(outs)


def _settle(future: asyncio.Future, *, result=None, exception=None) -> None:
    if future.done():
        return
    if exception is not None:
        future.set_exception(exception)
    else:
        future.set_result(result)
