"""minidl.serve under load (issue #60): requests/s and p50/p99 latency of ``POST /v1/predict`` for the digits CNN
(examples/train_digits.py's model as built, one 1x8x8 example a request), run by minidl and, exported to ONNX, by
ONNX Runtime (OnnxRunner) in the same Server; and streamed tokens/s of ``POST /v1/generate`` for char_gpt.py's GPT
at its default size (random weights, a character tokenizer, greedy). Each at 1, 8 and 32 concurrent clients, with
batching on (max_batch_size 32 / max_sequences 32, max_wait_ms 2) and off (max_batch_size 1 / max_sequences 1).

How it measures: each server runs on its ``Server`` thread (uvicorn's own event loop) and the clients run on one
asyncio loop (``httpx.AsyncClient``) in the main thread of the same process, over real loopback HTTP. Each client
sends its requests back to back. A cell warms up for ``--warmup`` s, then counts for ``--duration`` s what completes
inside that window: requests (latency from send to the body's end, p50/p99 over them) and, for generation, every
streamed token that arrives inside it (tokens/s), so long requests straddling the window edges count fairly.
The caveat: clients and server share the process (and its GIL) and the machine's cores (2 on the dev box), so the
client's own JSON and HTTP work is charged to the figures; a loaded machine, or more clients than cores, lowers them
for the client's sake as well as the server's. Read the figures as relative (batching on vs off, minidl vs ONNX
Runtime) more than absolute; the keep-alive ``GET /health`` round trip it logs first is the HTTP floor
under every latency. Before measuring, answers are checked: predict equals the model run directly, and one
prompt's streamed tokens equal greedy decoding of the model by hand.

    python benchmarks/serve.py [--quick] [--duration S] [--warmup S] [--clients 1 8 32] [--json PATH]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from _bench_common import cpu_model, libraries, log, versions  # noqa: E402
from char_gpt import DATA, GPT  # noqa: E402
from train_digits import make_model  # noqa: E402

import minidl  # noqa: E402
from minidl.serve import OnnxRunner, Server  # noqa: E402

NEW_TOKENS = 32
PROMPT_CHARS = 16
TIMEOUT = httpx.Timeout(120.0)


class CharTokenizer:
    """The characters of char_gpt.py's bundled text, as char_gpt.py numbers them."""

    def __init__(self, text: str):
        self.chars = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.chars)}

    def encode(self, text: str) -> list:
        return [self.index[c] for c in text]

    def decode(self, ids) -> str:
        return "".join(self.chars[i] for i in ids)


def digits_cnn():
    minidl.manual_seed(0)
    return make_model("cnn").eval()


def char_gpt(vocab: int):
    """char_gpt.py's defaults: context 64, width 64, 4 heads, 2 layers."""
    minidl.manual_seed(0)
    return GPT(vocab, context=64, width=64, heads=4, layers=2, dropout=0.0).eval()


def export_onnx(model, folder: str) -> str:
    path = os.path.join(folder, "digits-cnn.onnx")
    minidl.onnx.export(model, (minidl.randn(2, 1, 8, 8),), path, input_names=["images"], output_names=["logits"],
                       dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}})
    return path


def client_for(connections: int) -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=TIMEOUT, limits=httpx.Limits(max_connections=connections))


async def health_floor(url: str, rounds: int = 20) -> float:
    """Median ms of a keep-alive ``GET /health``: the HTTP round trip no model is in, for reading the latencies."""
    async with client_for(1) as client:
        await client.get(f"{url}/health")
        times = []
        for _ in range(rounds):
            sent = time.perf_counter()
            (await client.get(f"{url}/health")).raise_for_status()
            times.append(time.perf_counter() - sent)
    return pct(times, 50)


def pct(values: list, q: float) -> float:
    return float(np.percentile(values, q)) * 1e3 if values else float("nan")


# ----------------------------------------------------------------------------- clients
async def predict_once(client, url: str, example: list) -> list:
    response = await client.post(f"{url}/v1/predict", json={"inputs": example})
    if response.status_code != 200:
        raise RuntimeError(f"predict: {response.status_code} {response.text}")
    return response.json()["outputs"]


async def generate_once(client, url: str, prompt: str, on_token=None) -> list:
    """The streamed token ids of one greedy request; ``on_token(now)`` at each token's arrival."""
    tokens = []
    async with client.stream("POST", f"{url}/v1/generate",
                             json={"prompt": prompt, "max_tokens": NEW_TOKENS, "temperature": 0}) as response:
        if response.status_code != 200:
            raise RuntimeError(f"generate: {response.status_code} {(await response.aread()).decode()}")
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                event = json.loads(line[len("data: "):])
                if "token" in event:
                    tokens.append(event["token"])
                    if on_token is not None:
                        on_token(time.perf_counter())
                elif "error" in event:
                    raise RuntimeError(event["error"])
    return tokens


async def load(url: str, clients: int, warmup: float, duration: float, request) -> dict:
    """``clients`` loops of back-to-back ``request(client, url, i, on_token)``; what completes in the window."""
    start = time.perf_counter()
    begin, end = start + warmup, start + warmup + duration
    latencies, tokens = [], [0]

    def on_token(now):
        tokens[0] += begin <= now < end

    async def loop(client, c):
        i = c
        while time.perf_counter() < end:
            sent = time.perf_counter()
            await request(client, url, i, on_token)
            done = time.perf_counter()
            if begin <= done < end:
                latencies.append(done - sent)
            i += clients

    async with client_for(clients) as client:
        await asyncio.gather(*(loop(client, c) for c in range(clients)))
    return {"requests_per_s": len(latencies) / duration, "p50_ms": pct(latencies, 50), "p99_ms": pct(latencies, 99),
            "requests": len(latencies), "tokens_per_s": tokens[0] / duration}


# ----------------------------------------------------------------------------- checks
def check_predict(server: Server, model, examples: np.ndarray) -> None:
    """Concurrent single-example answers equal the minidl model run directly on the whole batch."""
    async def ask():
        async with client_for(16) as client:
            return await asyncio.gather(*(predict_once(client, server.url, x.tolist()) for x in examples))
    with minidl.inference_mode():
        want = model(minidl.from_numpy(examples)).numpy()
    np.testing.assert_allclose(asyncio.run(ask()), want, rtol=0, atol=1e-4)


def check_generate(server: Server, model, tokenizer: CharTokenizer, prompt: str) -> None:
    """One prompt's streamed tokens equal greedy decoding by hand (argmax over the last ``context`` characters)."""
    async def ask():
        async with client_for(16) as client:
            return await generate_once(client, server.url, prompt)
    ids = minidl.tensor([tokenizer.encode(prompt)])
    with minidl.inference_mode():
        for _ in range(NEW_TOKENS):
            ids = minidl.cat([ids, model(ids[:, -model.context:])[:, -1].argmax(-1)[:, None]], dim=1)
    got, want = asyncio.run(ask()), ids[0, -NEW_TOKENS:].tolist()
    if got != want:
        raise AssertionError(f"served tokens {tokenizer.decode(got)!r} != greedy {tokenizer.decode(want)!r}")


# ----------------------------------------------------------------------------- main
def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: short windows")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds counted per cell")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds before each cell's window")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--max-wait-ms", type=float, default=2.0)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
    if args.quick:
        args.duration, args.warmup = 0.5, 0.2

    load_start = os.getloadavg()
    log(f"CPU: {cpu_model()} ({os.cpu_count()} logical cores; clients and server share them, and one process)")
    import onnxruntime
    import starlette
    import uvicorn
    stack = (versions(libraries()) + f", onnxruntime {onnxruntime.__version__}, starlette {starlette.__version__}, "
             f"uvicorn {uvicorn.__version__}, httpx {httpx.__version__}")
    log(stack)
    log(f"load average at start: {' '.join(f'{v:.2f}' for v in load_start)}")

    text = DATA.read_text(encoding="utf-8")
    tokenizer = CharTokenizer(text)
    step = (len(text) - PROMPT_CHARS) // 64
    prompts = [text[i * step:i * step + PROMPT_CHARS] for i in range(64)]
    examples = np.random.default_rng(0).standard_normal((256, 1, 8, 8)).astype(np.float32)
    cnn, gpt = digits_cnn(), char_gpt(len(tokenizer.chars))

    async def predict(client, url, i, on_token):
        await predict_once(client, url, examples[i % len(examples)].tolist())

    async def generate(client, url, i, on_token):
        await generate_once(client, url, prompts[i % len(prompts)], on_token)

    results, floor = [], None
    with tempfile.TemporaryDirectory() as folder:
        onnx_path = export_onnx(cnn, folder)
        setups = [("cnn predict", "minidl", lambda: cnn, predict), ("cnn predict", "onnxruntime",
                                                                      lambda: OnnxRunner(onnx_path), predict),
                  ("gpt generate", "minidl", lambda: gpt, generate)]
        for task, engine, build, request in setups:
            for batching, size in (("on", 32), ("off", 1)):
                options = dict(max_sequences=size, tokenizer=tokenizer) if task == "gpt generate" else dict(
                    max_batch_size=size, max_wait_ms=args.max_wait_ms, example_ndim=3)
                with Server(build(), **options) as server:
                    if task == "gpt generate":
                        check_generate(server, gpt, tokenizer, prompts[0])
                    else:
                        check_predict(server, cnn, examples[:16])
                    if floor is None:
                        floor = asyncio.run(health_floor(server.url))
                        log(f"keep-alive GET /health round trip (no model): {floor:.2f} ms")
                    for clients in args.clients:
                        before = server.app.state.metrics.batch_size
                        runs, examples_run = before.count, before.sum
                        row = asyncio.run(load(server.url, clients, args.warmup, args.duration, request))
                        after = server.app.state.metrics.batch_size
                        mean_batch = (after.sum - examples_run) / max(after.count - runs, 1)
                        results.append({"task": task, "engine": engine, "batching": batching, "clients": clients,
                                        **row, "mean_batch": mean_batch if task != "gpt generate" else None})
                        log(f"  {task:12s} {engine:11s} batching {batching:3s} {clients:3d} clients: "
                            f"{row['requests_per_s']:8.1f} req/s  p50 {row['p50_ms']:7.1f} ms  "
                            f"p99 {row['p99_ms']:7.1f} ms" + (f"  {row['tokens_per_s']:8.1f} tokens/s"
                                                              if task == "gpt generate" else ""))
    load_end = os.getloadavg()
    log(f"load average at end: {' '.join(f'{v:.2f}' for v in load_end)}")
    log_table(results, args)
    if args.json:
        args.json.write_text(json.dumps(
            {"cpu": cpu_model(), "versions": stack, "load_start": load_start, "load_end": load_end, "health_ms": floor,
             "duration_s": args.duration, "warmup_s": args.warmup, "max_wait_ms": args.max_wait_ms,
             "new_tokens": NEW_TOKENS, "results": results}, indent=1))


def log_table(results: list, args) -> None:
    log("\n| task | engine | batching | clients | req/s | p50 ms | p99 ms | tokens/s | mean batch |\n"
        "|---|---|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        tokens = f"{r['tokens_per_s']:.0f}" if r["task"] == "gpt generate" else ""
        batch = f"{r['mean_batch']:.1f}" if r["mean_batch"] is not None else ""
        log(f"| {r['task']} | {r['engine']} | {r['batching']} | {r['clients']} | {r['requests_per_s']:.1f} | "
            f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {tokens} | {batch} |")
    log(f"\n({args.duration:g} s counted per cell after {args.warmup:g} s warm-up; generation: {NEW_TOKENS} new "
        f"tokens greedy a request, streamed, {PROMPT_CHARS}-character prompts)")


if __name__ == "__main__":
    main()
