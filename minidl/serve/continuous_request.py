"""One generation request of a :class:`~minidl.serve.continuous.ContinuousBatcher`: its settings, the tokens it has
made, when it ends, and the handle through which its caller receives them one by one, from another thread (plain
iteration) or from an asyncio event loop (``async for``) while the batcher's worker thread produces them."""
from __future__ import annotations

import asyncio
import collections
import threading

import minidl
from minidl.models.generation import sample, warp

__all__ = ["Request", "RequestHandle"]

_END = object()   # the stream's last item (then the handle's finish_reason or error says why)


class RequestHandle:
    """What ``submit`` returns: iterate it (``for`` or ``async for``) for the request's new token ids as they come;
    after the last one, ``finish_reason`` is "stop" (a stop token or sequence), "length" (``max_tokens``),
    "cancelled" or "error" (the iteration then raises ``error``). ``cancel()`` (e.g. on a client's disconnect) frees
    the request's place in the batch at the next step; ``tokens`` holds those delivered so far."""

    def __init__(self, request_id: int, prompt_tokens: int):
        self.id, self.prompt_tokens = request_id, prompt_tokens
        self.tokens: list[int] = []
        self.finish_reason: str | None = None
        self.error: BaseException | None = None
        self.cancelled = threading.Event()
        self._items = collections.deque()
        self._lock = threading.Condition()
        self._loop = self._wakeup = None   # the event loop iterating asynchronously, and its wake-up event

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def cancel(self) -> None:
        """Ask the batcher to drop the request (no effect once it has finished)."""
        self.cancelled.set()

    def _push(self, item) -> None:
        """Hand ``item`` (a token id, or _END) to the iterating side; called by the worker thread."""
        with self._lock:
            self._items.append(item)
            self._lock.notify_all()
            loop, wakeup = self._loop, self._wakeup
        if loop is not None:
            try:
                loop.call_soon_threadsafe(wakeup.set)
            except RuntimeError:   # the loop has closed: nobody is listening any more
                pass

    def _deliver(self, tokens) -> None:
        for token in tokens:
            self.tokens.append(token)
            self._push(token)

    def _finish(self, reason: str, error: BaseException | None = None) -> None:
        if self.finish_reason is None:
            self.finish_reason, self.error = reason, error
            self._push(_END)

    def _next(self, item):
        if item is not _END:
            return item
        self._items.append(_END)   # later calls end too
        if self.error is not None:
            raise self.error
        return None

    def __iter__(self):
        return self

    def __next__(self) -> int:
        with self._lock:
            while not self._items:
                self._lock.wait()
            token = self._next(self._items.popleft())
        if token is None:
            raise StopIteration
        return token

    def __aiter__(self):
        with self._lock:
            if self._loop is None:
                self._loop, self._wakeup = asyncio.get_running_loop(), asyncio.Event()
        return self

    async def __anext__(self) -> int:
        while True:
            with self._lock:
                if self._items:
                    token = self._next(self._items.popleft())
                    if token is None:
                        raise StopAsyncIteration
                    return token
                self._wakeup.clear()   # (a push after this point schedules a set after it)
            await self._wakeup.wait()


class Request:
    """A request's settings and decoding state inside the batcher. Stop token ids end it and are delivered (as
    generate keeps an end-of-sequence token); a stop sequence ends it and is not: tokens that might begin one are held
    back until it is clear they do not."""

    def __init__(self, handle: RequestHandle, prompt: list[int], max_tokens: int, temperature: float, top_k: int,
                 top_p: float, stop_token_ids, stop_sequences, generator):
        self.handle, self.prompt, self.max_tokens = handle, prompt, max_tokens
        self.temperature, self.top_k, self.top_p, self.generator = temperature, top_k, top_p, generator
        self.stop_token_ids = frozenset(stop_token_ids)
        self.stop_sequences = [tuple(s) for s in stop_sequences]
        self.generated: list[int] = []

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def check_settings(self) -> None:
        """Refuse bad sampling settings when submitted, with generate's own messages."""
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0: greedy), got {self.temperature}")
        if not self.greedy:
            warp(minidl.zeros(1, 2), self.temperature, self.top_k, self.top_p)
        if any(not s for s in self.stop_sequences):
            raise ValueError("stop_sequences must not hold an empty sequence")

    def choose(self, scores, best: int) -> int:
        """The next token: ``best`` (the argmax of this request's row of scores (1, vocab)) when greedy, else one
        drawn from the row."""
        if self.greedy:
            return best
        return int(sample(scores, self.temperature, self.top_k, self.top_p, self.generator))

    def add(self, token: int) -> bool:
        """Record a new token, deliver what is certain, and say whether the request has finished."""
        self.generated.append(token)
        out, sent = self.generated, len(self.handle.tokens)
        if token in self.stop_token_ids:
            return self._end(out[sent:], "stop")
        for stop in self.stop_sequences:
            if tuple(out[-len(stop):]) == stop:
                return self._end(out[sent:len(out) - len(stop)], "stop")
        if len(out) >= self.max_tokens:
            return self._end(out[sent:], "length")
        self.handle._deliver(out[sent:len(out) - self._held()])
        return False

    def _held(self) -> int:
        """How many last tokens could begin a stop sequence (the longest such tail)."""
        out = self.generated
        return max((k for stop in self.stop_sequences for k in range(1, min(len(stop) - 1, len(out)) + 1)
                    if tuple(out[-k:]) == stop[:k]), default=0)

    def _end(self, tokens, reason: str) -> bool:
        self.handle._deliver(tokens)
        self.handle._finish(reason)
        return True
