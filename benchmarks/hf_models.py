"""minidl.models' Hugging Face language models beside transformers on torch eager, the same weights in both (a model
transformers builds at random, saved with ``save_pretrained`` and read by ``minidl.models.from_pretrained``):

* GPT-2-small-shaped generation (124 M parameters: 12 layers, 768 wide, 12 heads, 50,257 tokens): a prompt of
  ``--prompt`` tokens continued greedily by ``--new`` tokens, with the key-value cache and without it (each step
  then runs the whole sequence again); tokens per second, the generated tokens compared.
* BERT-base-shaped encoding (110 M parameters: 12 layers, 768 wide, 12 heads, 30,522 tokens): a batch of
  ``--batch`` x ``--tokens``; ms per forward, outputs compared.

float32, eval mode without autograd, ``--threads`` each; the libraries take turns, ``--rounds`` rounds.

Usage::

    python benchmarks/hf_models.py            # a few minutes
    python benchmarks/hf_models.py --quick    # a smoke run: tiny shapes
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench_common import cpu_model, log  # noqa: E402

import minidl  # noqa: E402
import minidl.models  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402


def build(kind: str, quick: bool, folder: str):
    """(transformers model, minidl model) of the same random weights."""
    torch.manual_seed(0)
    if kind == "gpt2":
        size = dict(n_embd=64, n_layer=2, n_head=4) if quick else {}
        theirs = transformers.GPT2LMHeadModel(transformers.GPT2Config(**size))
    else:
        size = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128) if quick else {}
        theirs = transformers.BertModel(transformers.BertConfig(**size))
    theirs.save_pretrained(folder)
    return theirs.eval(), minidl.models.from_pretrained(folder)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def generation(args, tmp: str) -> dict:
    theirs, ours = build("gpt2", args.quick, os.path.join(tmp, "gpt2"))
    prompt = np.random.default_rng(0).integers(0, theirs.config.vocab_size, (1, args.prompt))
    out, runs = {}, {}
    for cache in (True, False):
        def torch_run():
            out["torch", cache] = theirs.generate(torch.from_numpy(prompt), max_new_tokens=args.new, do_sample=False,
                                                  use_cache=cache, pad_token_id=theirs.config.eos_token_id)
        def minidl_run():
            out["minidl", cache] = ours.generate(minidl.from_numpy(prompt), max_new_tokens=args.new, use_cache=cache)
        runs[cache] = {"minidl": minidl_run, "torch": torch_run}
    with torch.inference_mode():
        times = {(lib, cache): [] for cache in runs for lib in runs[cache]}
        for cache in runs:
            for fn in runs[cache].values():
                fn()                                                      # warm up
        for _ in range(args.rounds):
            for cache in runs:
                for lib, fn in runs[cache].items():
                    times[lib, cache].append(args.new / timed(fn))
    same = {cache: bool(np.array_equal(out["minidl", cache].numpy(), out["torch", cache].numpy())) for cache in runs}
    return {"tokens_per_s": {f"{lib} {'cache' if c else 'no cache'}": v for (lib, c), v in times.items()},
            "same_tokens": same}


def encoding(args, tmp: str) -> dict:
    theirs, ours = build("bert", args.quick, os.path.join(tmp, "bert"))
    ids = np.random.default_rng(1).integers(0, theirs.config.vocab_size, (args.batch, args.tokens))
    mask = np.ones_like(ids)
    mask[1::2, args.tokens // 2:] = 0                                    # every other sequence half padding
    results = {}

    def torch_run():
        results["torch"] = theirs(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))

    def minidl_run():
        results["minidl"] = ours(input_ids=minidl.from_numpy(ids), attention_mask=minidl.from_numpy(mask))

    times = {"minidl": [], "torch": []}
    with torch.inference_mode(), minidl.inference_mode():
        torch_run(), minidl_run()
        for _ in range(args.rounds):
            times["minidl"].append(timed(minidl_run) * 1e3)
            times["torch"].append(timed(torch_run) * 1e3)
    keep = mask.astype(bool)
    a = results["minidl"].last_hidden_state.numpy()[keep]
    b = results["torch"].last_hidden_state.numpy()[keep]
    return {"ms": times, "max_difference": float(np.abs(a - b).max()), "scale": float(np.abs(b).max())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.prompt, args.new, args.batch, args.tokens, args.rounds = 4, 4, 2, 8, 1
    torch.set_num_threads(args.threads)
    minidl.set_num_threads(args.threads)
    log(f"{cpu_model()}; minidl {minidl.__version__}, torch {torch.__version__}, transformers "
        f"{transformers.__version__}; {args.threads} threads; load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        gen = generation(args, tmp)
        log(f"GPT-2 generation, prompt {args.prompt}, {args.new} new tokens greedy, tokens/s (median of "
            f"{args.rounds}; rounds):")
        for name, values in gen["tokens_per_s"].items():
            log(f"  {name:18} {statistics.median(values):7.1f}  ({', '.join(f'{v:.1f}' for v in values)})")
        log(f"  the same tokens as transformers: {gen['same_tokens']}")
        enc = encoding(args, tmp)
        log(f"BERT encoding, batch {args.batch} x {args.tokens} tokens (every other sequence half padding), ms "
            f"(median of {args.rounds}; rounds):")
        for name, values in enc["ms"].items():
            log(f"  {name:8} {statistics.median(values):8.1f}  ({', '.join(f'{v:.1f}' for v in values)})")
        ratio = statistics.median(enc["ms"]["minidl"]) / statistics.median(enc["ms"]["torch"])
        log(f"  minidl/torch {ratio:.2f}x; hidden states differ by {enc['max_difference']:.1e} (scale "
            f"{enc['scale']:.1f})")
    log(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
