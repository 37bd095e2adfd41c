"""Continuous batching for generation: requests join a running batch between decoding steps and leave it as soon as
they finish or are cancelled, so a long request never holds short ones back and a new one never waits for the whole
batch to end. Each request gets its tokens one by one through its :class:`RequestHandle` (``async for`` on an event
loop, e.g. a route streaming server-sent events), while one worker thread runs the model under
``minidl.inference_mode`` (the event loop never blocks; the model never runs twice at once).

Greedy requests get exactly the tokens ``model.generate(prompt, max_new_tokens=..., do_sample=False)`` gives the
prompt alone, whatever runs beside them (up to floating-point ties); a sampled request draws from its own generator,
so a seed reproduces it."""
from __future__ import annotations

import collections
import inspect
import itertools
import numbers
import threading

import minidl

from .continuous_batch import CachedBatch, RecomputedBatch
from .continuous_request import Request, RequestHandle

__all__ = ["ContinuousBatcher", "RequestHandle"]


class ContinuousBatcher:
    """Schedules generation requests on ``model`` (in eval mode), at most ``max_batch_size`` decoding at once, the rest
    queued in order. ``use_cache`` (default: whether the model's forward takes a ``cache``) picks cached decoding
    (one token a step a sequence) or recomputing the whole sequences each step, for a model whose forward takes token
    ids only and returns logits; ``window``: then feed only the last that many tokens (a model's context length).

    ``start()`` runs the loop on a worker thread (``close()`` ends it); without it, ``step()`` runs one step by hand."""

    def __init__(self, model, *, max_batch_size: int = 32, use_cache: bool | None = None, window: int | None = None):
        if max_batch_size < 1:
            raise ValueError(f"ContinuousBatcher: max_batch_size must be at least 1, got {max_batch_size}")
        if use_cache is None:
            use_cache = "cache" in inspect.signature(model.forward).parameters
        if use_cache and window is not None:
            raise ValueError("ContinuousBatcher: window applies to recomputed decoding (use_cache=False) only; a "
                             "cached model's positions bound the sequences instead")
        self.model, self.max_batch_size = model, max_batch_size
        self.device = next(model.parameters()).device
        self.batch = CachedBatch(self.device) if use_cache else RecomputedBatch(self.device, window)
        self._queue: collections.deque[Request] = collections.deque()
        self._lock = threading.Condition()
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, prompt, *, max_tokens: int = 16, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
               stop_token_ids=None, stop_sequences=(), seed: int | None = None, generator=None) -> RequestHandle:
        """Queue a request (thread-safe): ``prompt`` (token ids: a list or a 1-D tensor) continued by up to
        ``max_tokens`` tokens; ``temperature`` 0 decodes greedily, else samples (then ``top_k``, 0: all, and
        ``top_p``, as generate warps) from ``generator`` or a new one seeded with ``seed`` (neither: minidl's default
        one, not reproducible across runs). ``stop_token_ids`` (default: the model's end-of-sequence ids, as generate
        stops; ``()``: none) end the request and are delivered; ``stop_sequences`` (token id lists) end it and are
        not."""
        prompt = prompt.tolist() if isinstance(prompt, minidl.Tensor) else list(prompt)
        if not prompt or not all(isinstance(t, numbers.Integral) for t in prompt):
            raise ValueError("ContinuousBatcher.submit: prompt must be a non-empty list (or 1-D tensor) of token ids")
        prompt = [int(t) for t in prompt]
        if max_tokens < 1:
            raise ValueError(f"ContinuousBatcher.submit: max_tokens must be at least 1, got {max_tokens}")
        if isinstance(self.batch, CachedBatch) and hasattr(self.model, "_check_positions"):
            self.model._check_positions(len(prompt), max_tokens)
        if seed is not None:
            if generator is not None:
                raise ValueError("ContinuousBatcher.submit: pass seed or generator, not both")
            generator = minidl.Generator(device=self.device)
            generator.manual_seed(seed)
        request = Request(RequestHandle(next(self._ids), len(prompt)), prompt, max_tokens, temperature, top_k, top_p,
                          self._stop_ids() if stop_token_ids is None else stop_token_ids, stop_sequences, generator)
        request.check_settings()
        with self._lock:
            if self._closed:
                raise RuntimeError("ContinuousBatcher.submit: the batcher is closed")
            self._queue.append(request)
            self._lock.notify_all()
        return request.handle

    def _stop_ids(self) -> list[int]:
        """The model's end-of-sequence ids, as its generate reads them (none for a model without generate)."""
        eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        return [] if eos is None else minidl.as_tensor(eos).flatten().tolist()

    @property
    def active(self) -> int:
        """How many requests are decoding (in the batch)."""
        return len(self.batch.rows)

    @property
    def queued(self) -> int:
        """How many requests wait for a place in the batch."""
        return len(self._queue)

    def step(self) -> bool:
        """One scheduling step: drop finished and cancelled requests, let queued ones join (each prefilled, which gives
        its first token), then decode one token for every request in the batch. Returns whether any work was done.
        A request whose prefill fails ends with the error alone; if a batch step fails, every request in the batch
        ends with the error, which is raised."""
        if self._thread is not None and threading.current_thread() is not self._thread:
            raise RuntimeError("ContinuousBatcher.step: the worker thread runs the steps (start() was called)")
        with minidl.inference_mode():
            joining = []
            try:
                self.batch.keep([not row.handle.done and not self._cancelled(row) for row in self.batch.rows])
                admitted = self._admit()
                joining = [request for request in admitted if self._prefill(request)]
                if joining:
                    self.batch.join(joining)
                if not self.batch.rows:
                    return bool(admitted)
                scores = self.batch.decode(self.model)
                best = scores.argmax(-1).tolist()   # (the greedy rows' tokens, in one transfer from the device)
                for i, row in enumerate(self.batch.rows):
                    row.add(row.choose(scores[i:i + 1], best[i]))
                return True
            except BaseException as error:   # (a model's SystemExit too: its requests end, never left waiting)
                for request in [*self.batch.rows, *joining]:   # (ending one twice changes nothing)
                    request.handle._finish("error", error)
                self.batch.keep([False] * len(self.batch.rows))
                raise

    def _prefill(self, request: Request) -> bool:
        """Run ``request``'s prompt and deliver its first token; whether it goes on (to join the batch)."""
        try:
            scores = self.batch.prefill(self.model, request)
            return not request.add(request.choose(scores, int(scores.argmax(-1))))
        except BaseException as error:  # noqa: BLE001  (the request's answer, whatever the model raised)
            request.handle._finish("error", error)
            return False

    def _cancelled(self, request: Request) -> bool:
        if request.handle.cancelled.is_set():
            request.handle._finish("cancelled")
            return True
        return False

    def _admit(self) -> list[Request]:
        """Queued requests for the free places, in order (cancelled ones ended on the way)."""
        admitted = []
        with self._lock:
            while self._queue and len(self.batch.rows) + len(admitted) < self.max_batch_size:
                request = self._queue.popleft()
                if not self._cancelled(request):
                    admitted.append(request)
        return admitted

    def start(self) -> ContinuousBatcher:
        """Run the scheduling loop on a daemon worker thread until :meth:`close`."""
        with self._lock:
            if self._closed or self._thread is not None:
                raise RuntimeError("ContinuousBatcher.start: already started or closed")
            self._thread = threading.Thread(target=self._run, name="minidl-continuous-batcher", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._closed and not self._queue and not self.batch.rows:
                    self._lock.wait()
                if self._closed:
                    return
            try:
                self.step()
            except Exception:   # already delivered to the requests it ended; the loop goes on with the others
                pass
            except BaseException as error:   # (SystemExit, KeyboardInterrupt: the worker ends, no request waits)
                with self._lock:
                    self._closed = True
                    for request in self._queue:
                        request.handle._finish("error", error)
                    self._queue.clear()
                return

    def close(self) -> None:
        """Stop the loop (after its current step) and end every unfinished request as cancelled."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            for request in [*self.batch.rows, *self._queue]:
                request.handle._finish("cancelled")
            self._queue.clear()
        self.batch.keep([False] * len(self.batch.rows))

    def __enter__(self) -> ContinuousBatcher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
