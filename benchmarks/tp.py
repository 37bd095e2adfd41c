"""Tensor parallelism measured (issue 55): the char GPT (examples/char_gpt_tp.py's model, its default size) trained
tensor-parallel and data-parallel at 2 ranks, minidl beside torch 2.13, all over gloo, on this machine in one run:

    python benchmarks/tp.py [--ranks 2] [--steps 20] [--quick]

Four jobs, each ``--ranks`` processes (env://, one thread each): minidl TP (parallelize_module with
char_gpt_tp.tp_plan, loss_parallel), minidl DDP (the same model whole on each rank, the global batch split),
torch TP (the same model and plan in torch) and torch DDP. Every job trains the same global batch of 16 windows
of 64 characters with AdamW. Timed: the median step on rank 0 after two warm-ups, each from a barrier. Memory:
the peak resident set of each rank's process (everything: interpreter, libraries, tensors), and the bytes of
parameters, gradients and Adam's two moments a rank holds. Bytes: what each minidl rank sent in a step
(``debug.sent_bytes``; torch has no such counter) beside the prediction: ring all-reduces of 2(k-1)/k of their
tensor — for TP an activation (batch x context x width) per split Linear pair forward (and the token embedding's),
one per column-parallel input backward, and loss_parallel's three numbers per position; for DDP every gradient.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _bench_common import cpu_model
from _gloo_ranks import results

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SIZE = {"batch": 16, "context": 64, "width": 64, "heads": 4, "layers": 2}


# ----------------------------------------------------------------------------------------------- one rank
def _data():
    text = (EXAMPLES / "data" / "lighthouse.txt").read_text(encoding="utf-8")
    chars = sorted(set(text))
    return np.array([chars.index(c) for c in text], dtype=np.int64), len(chars)


def _windows(data, rng):
    starts = rng.integers(0, len(data) - SIZE["context"] - 1, SIZE["batch"])
    return (np.stack([data[s:s + SIZE["context"]] for s in starts]),
            np.stack([data[s + 1:s + SIZE["context"] + 1] for s in starts]))


def _rows(parallel, rank, world):
    """The rows of the global batch a rank trains on: all of them under TP, its share under DDP."""
    return slice(None) if parallel == "tp" else slice(rank * SIZE["batch"] // world, (rank + 1) * SIZE["batch"] // world)


def _minidl(parallel, rank, world):
    sys.path.insert(0, str(EXAMPLES))
    import minidl
    import minidl.dist as dist
    from minidl.dist import debug
    from minidl.dist.device_mesh import init_device_mesh
    from minidl.dist.tensor.parallel import parallelize_module
    from minidl.nn.parallel import DistributedDataParallel
    from char_gpt import param_groups
    from char_gpt_tp import split_gpt, step, tp_plan
    dist.init_process_group("gloo")
    data, vocab = _data()
    minidl.manual_seed(0)
    model = split_gpt(vocab, SIZE["context"], SIZE["width"], SIZE["heads"], SIZE["layers"], 0.0)
    group = None
    if parallel == "tp":
        mesh = init_device_mesh("cpu", (world,))
        parallelize_module(model, mesh, tp_plan(False))
        run, group = model, mesh.get_group()
    else:
        run = DistributedDataParallel(model)
    optimizer = minidl.optim.AdamW(param_groups(model, 0.1), lr=3e-3, betas=(0.9, 0.95))
    rows = _rows(parallel, rank, world)

    def one(x, y):
        return step(run, optimizer, minidl.from_numpy(x[rows]), minidl.from_numpy(y[rows]))
    held = sum((p.to_local() if hasattr(p, "to_local") else p).numel() for p in model.parameters()) * 4 * 4
    return data, one, dist.barrier, lambda: debug.sent_bytes(group), held, dist.destroy_process_group


def _torch_model(torch, vocab):
    nn, F = torch.nn, torch.nn.functional
    width, heads = SIZE["width"], SIZE["heads"]

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.out = (nn.Linear(width, width) for _ in range(4))

        def forward(self, x):
            b, t = x.shape[0], x.shape[1]
            q, k, v = (f(x).reshape(b, t, -1, width // heads).transpose(1, 2) for f in (self.q, self.k, self.v))
            return self.out(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, -1))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.attn, self.ln2 = nn.LayerNorm(width), Attention(), nn.LayerNorm(width)
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.ReLU(), nn.Linear(4 * width, width),
                                     nn.Dropout(0.0))

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(SIZE["context"], width)
            self.blocks = nn.ModuleList([Block() for _ in range(SIZE["layers"])])
            self.ln_f, self.head = nn.LayerNorm(width), nn.Linear(width, vocab, bias=False)
            self.head.weight = self.tok.weight
            for p in self.parameters():   # (char_gpt's GPT-2 initialisation of every matrix)
                if p.ndim == 2:
                    nn.init.normal_(p, 0.0, 0.02)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x))
    return GPT()


def _torch(parallel, rank, world):
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, loss_parallel,
                                                   parallelize_module)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    data, vocab = _data()
    torch.manual_seed(0)
    model = _torch_model(torch, vocab)
    if parallel == "tp":
        plan = {"tok": RowwiseParallel(input_layouts=Replicate()), "head": ColwiseParallel(use_local_output=False),
                **{f"blocks.*.attn.{n}": ColwiseParallel() for n in "qkv"}, "blocks.*.attn.out": RowwiseParallel(),
                "blocks.*.mlp.0": ColwiseParallel(), "blocks.*.mlp.2": RowwiseParallel()}
        parallelize_module(model, init_device_mesh("cpu", (world,)), plan)
        model.head.weight = model.tok.weight   # (torch's styles untie it: tie again, as its users do)
        run = model
    else:
        run = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    rows = _rows(parallel, rank, world)

    def one(x, y):
        logits = run(torch.from_numpy(x[rows]))
        with loss_parallel() if parallel == "tp" else _nothing():
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                     torch.from_numpy(y[rows]).reshape(-1))
            optimizer.zero_grad()
            loss.backward()
        optimizer.step()
        return float((loss.full_tensor() if hasattr(loss, "full_tensor") else loss).item())
    held = sum((p.to_local() if hasattr(p, "to_local") else p).numel() for p in model.parameters()) * 4 * 4
    return data, one, dist.barrier, lambda: None, held, dist.destroy_process_group


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def rank_main():
    setting = json.loads(os.environ["TP_BENCH_SETTING"])
    library, parallel = os.environ["TP_BENCH_ROLE"].split("-")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    data, one, barrier, sent, held, close = (_minidl if library == "minidl" else _torch)(parallel, rank, world)
    rng = np.random.default_rng(0)   # (alike on every rank: the same global batches)
    times, losses, step_bytes = [], [], None
    for i in range(setting["warmup"] + setting["steps"]):
        x, y = _windows(data, rng)
        barrier()
        before, start = sent(), time.perf_counter()
        losses.append(one(x, y))
        times.append(time.perf_counter() - start)
        step_bytes = None if before is None else sent() - before
    print("RESULT " + json.dumps({"rank": rank, "time": statistics.median(times[setting["warmup"]:]),
                                  "loss": losses[-1], "sent": step_bytes, "held": held,
                                  "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}), flush=True)
    close()


# --------------------------------------------------------------------------------------------- the launcher
def predicted(parallel, k, vocab) -> float:
    """Bytes a rank sends in one step by ring all-reduces (2(k-1)/k of each tensor)."""
    b, t, w, layers = SIZE["batch"], SIZE["context"], SIZE["width"], SIZE["layers"]
    if parallel == "tp":
        activation = b * t * w * 4
        reduced = (1 + 2 * layers) * activation + (4 * layers + 1) * activation + 3 * b * t * 4
    else:
        reduced = (layers * (12 * w * w + 13 * w) + vocab * w + t * w + 2 * w) * 4
    return 2 * (k - 1) / k * reduced


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 steps")
    args = parser.parse_args(argv)
    setting = {"steps": 2 if args.quick else args.steps, "warmup": 1 if args.quick else 2}
    k, vocab = args.ranks, _data()[1]
    print(f"## Tensor parallelism: char GPT ({SIZE}), {k} ranks over gloo, float32; CPU: {cpu_model()}; load "
          f"average at the start {os.getloadavg()[0]:.2f}; median of {setting['steps']} steps after "
          f"{setting['warmup']} warm-ups\n")
    roles = ("minidl-tp", "minidl-ddp", "torch-tp", "torch-ddp")
    env = {"OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", "TP_BENCH_SETTING": json.dumps(setting)}
    with tempfile.TemporaryDirectory() as folder:
        found = {role: results([sys.executable, os.path.abspath(__file__)], k, folder, role,
                               {**env, "TP_BENCH_ROLE": role}) for role in roles}
    print("| job | step ms (rank 0) | peak RSS per rank (MB) | params + grads + Adam per rank (KB) "
          "| sent per rank per step (KB) | predicted (KB) | last loss |\n|---|---:|---:|---:|---:|---:|---:|")
    for role in roles:
        r = found[role]
        if isinstance(r, str):
            print(f"| {role} | {r} | | | | | |")
            continue
        sent = "/".join(f"{x['sent'] / 1e3:.1f}" for x in r) if r[0]["sent"] is not None else "—"
        rss = "/".join(f"{x['peak_rss'] / 1e6:.0f}" for x in r)
        held = "/".join(f"{x['held'] / 1e3:.0f}" for x in r)
        print(f"| {role} | {r[0]['time'] * 1e3:.1f} | {rss} | {held} | {sent} | "
              f"{predicted(role.split('-')[1], k, vocab) / 1e3:.1f} | {r[0]['loss']:.4f} |")
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    rank_main() if "TP_BENCH_ROLE" in os.environ else main()
