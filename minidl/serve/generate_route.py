"""``POST /v1/generate``: a causal language model's continuation of a prompt, streamed token by token as server-sent
events (or answered whole), every request decoding beside the others in one :class:`ContinuousBatcher`.

Which models generate: one with ``generate`` (minidl.models' GPT-2 and LLaMA, decoded with their cache), or one whose
forward takes token ids alone (``forward(idx)``, the examples' char-GPT: whole sequences recomputed each step, only
the last ``model.context`` tokens when it has that). Text goes in and out through a tokenizer (``encode(str) ->
list[int]``, ``decode(list[int]) -> str``): the one given to the server, else the runner's ``tokenizer`` attribute,
else the model's (a factory may set ``model.tokenizer``); without one only token ids are served."""
from __future__ import annotations

import inspect
import json

from starlette.responses import JSONResponse, StreamingResponse

import minidl

from .continuous import ContinuousBatcher
from .generate_request import GenerateRequest, parse_generate
from .inputs import InputError, read_body
from .metrics import Metrics

__all__ = ["Generation", "generation_for"]


def generation_for(runner, *, tokenizer=None, max_sequences: int = 32, max_tokens: int | None = None):
    """A :class:`Generation` for ``runner``'s model when it is a causal language model, else None."""
    model = getattr(runner, "module", None)
    if model is None:
        return None
    if callable(getattr(model, "generate", None)) and hasattr(model, "generation_config"):
        batcher = ContinuousBatcher(model, max_batch_size=max_sequences)
    elif list(inspect.signature(model.forward).parameters) in (["idx"], ["input_ids"]):
        window = getattr(model, "context", None)
        batcher = ContinuousBatcher(model, max_batch_size=max_sequences, use_cache=False,
                                    window=window if isinstance(window, int) else None)
    else:
        return None
    for holder in (runner, model):
        tokenizer = getattr(holder, "tokenizer", None) if tokenizer is None else tokenizer
    return Generation(batcher, _vocabulary(model), tokenizer, max_tokens)


def _vocabulary(model) -> int:
    """The model's vocabulary size: its config's, else its first embedding's rows (the token embedding)."""
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    if size is not None:
        return size
    for module in model.modules():
        if isinstance(module, minidl.nn.Embedding):
            return module.num_embeddings
    raise TypeError(f"{type(model).__name__}: no config.vocab_size and no embedding to read a vocabulary size from")


class Generation:
    """The batcher, the checks a request meets before it joins it, and the route."""

    def __init__(self, batcher: ContinuousBatcher, vocab_size: int, tokenizer, max_tokens: int | None):
        self.batcher, self.vocab_size, self.tokenizer, self.max_tokens = batcher, vocab_size, tokenizer, max_tokens
        self.eos_ids = batcher._stop_ids()

    def describe(self) -> dict:
        """What ``GET /v1/models`` shows of it."""
        config = getattr(self.batcher.model, "config", None)
        field = getattr(self.batcher.model, "positions_field", None)
        return {"vocab_size": self.vocab_size, "tokenizer": self.tokenizer is not None,
                "max_sequences": self.batcher.max_batch_size, "max_tokens": self.max_tokens,
                "max_positions": getattr(config, field) if field else None, "eos_token_ids": self.eos_ids}

    def sequences(self) -> tuple:
        """``(running, queued)`` sequences, for the metrics' gauges."""
        return self.batcher.active, self.batcher.queued

    def route(self, metrics: Metrics, max_bytes: int):
        async def generate(request):
            try:
                job = parse_generate(await read_body(request, max_bytes), tokenizer=self.tokenizer,
                                     vocab_size=self.vocab_size, max_total=self.max_tokens)
                handle = self._submit(job)
            except InputError as error:
                return JSONResponse({"error": error.message}, status_code=error.status)
            if job.stream:
                return StreamingResponse(self._events(handle, metrics), media_type="text/event-stream",
                                         headers={"Cache-Control": "no-cache"})
            return await self._whole(handle, metrics)
        return generate

    def _submit(self, job: GenerateRequest):
        stop_ids = None if job.stop_token_ids is None else [*self.eos_ids, *job.stop_token_ids]
        try:
            return self.batcher.submit(job.prompt, max_tokens=job.max_tokens, temperature=job.temperature,
                                       top_k=job.top_k, top_p=job.top_p, stop_token_ids=stop_ids,
                                       stop_sequences=job.stop_sequences, seed=job.seed)
        except ValueError as error:   # the model's positions, or generate's own checks of the sampling settings
            raise InputError(422, str(error)) from None
        except RuntimeError as error:   # closed: the server is shutting down
            raise InputError(503, str(error)) from None

    def _text(self, tokens: list):
        return None if self.tokenizer is None else self.tokenizer.decode(tokens)

    def _end(self, handle) -> dict:
        completion = len(handle.tokens)
        end = {"finish_reason": handle.finish_reason,
               "usage": {"prompt_tokens": handle.prompt_tokens, "completion_tokens": completion,
                         "total_tokens": handle.prompt_tokens + completion}}
        return end if handle.error is None else {**end, "error": f"generation failed: {handle.error}"}

    async def _events(self, handle, metrics: Metrics):
        """One ``data:`` event a token, then the end (why, and the token counts), then ``[DONE]``. Leaving early (a
        client gone: Starlette cancels the stream) cancels the request, which frees its place in the batch."""
        try:
            try:
                async for token in handle:
                    metrics.count_tokens(1)
                    yield _event({"token": token, "text": self._text([token])})
            except Exception:   # (the model failed: the end event says so)
                pass
            yield _event(self._end(handle))
            yield "data: [DONE]\n\n"
        finally:
            handle.cancel()

    async def _whole(self, handle, metrics: Metrics) -> JSONResponse:
        try:
            async for _ in handle:
                metrics.count_tokens(1)
        except Exception:
            return JSONResponse(self._end(handle), status_code=500)
        finally:
            handle.cancel()
        return JSONResponse({"tokens": handle.tokens, "text": self._text(handle.tokens), **self._end(handle)})


def _event(data: dict) -> str:
    return f"data: {json.dumps(data)}\n\n"
