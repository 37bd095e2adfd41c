"""Time one training step of a GPT-2-style character model in minidl beside PyTorch eager (CPU), in the same run.

The model (written once, below, over ``lib`` = minidl or torch): token + position embeddings, dropout, pre-LayerNorm
blocks (causal ``F.scaled_dot_product_attention(..., is_causal=True, dropout_p=...)`` on a fused q/k/v Linear, an
output projection and dropout; a GELU MLP of 4x the width and dropout), a final LayerNorm and a head without bias whose
weight is the token embedding's. Vocabulary 65, biases on (every Linear but the head, every LayerNorm). GPT-2
initialisation from one numpy generator, the same numbers for both libraries: Linear and Embedding weights
normal(0, 0.02), the residual projections (attention output, the MLP's second Linear) normal(0, 0.02/sqrt(2 n_layer)),
biases 0, LayerNorm gains 1.

A *step* is ``zero_grad`` + forward + ``cross_entropy`` + ``backward`` + ``clip_grad_norm_(params, 1.0)`` +
``AdamW.step`` (lr 6e-4, betas (0.9, 0.95); two groups: weight decay 0.1 on the 2-D parameters, 0 on the rest; the
tied weight counted once), on one of 4 random token batches (fixed seed, the same for both libraries, cycled).

=====  ========  =====  =====  ============  =======  ======================
size   layers    width  heads  batch x seq   dropout  target (minidl / torch)
=====  ========  =====  =====  ============  =======  ======================
tiny   2         64     4      8 x 64        0        <= 2.2x, one thread
small  4         128    4      16 x 128      0.1      none (reported)
=====  ========  =====  =====  ============  =======  ======================

Method as train_step.py's: a check first (a few steps of both libraries with dropout 0 from the same weights and
batches: the losses must agree to 1e-4 relative, or the comparison is not honest), then per thread count (1 and 2,
set in both libraries) and size: warm-up, then rounds of N back-to-back steps, the libraries taking turns round by
round; the figure is the median over rounds of ms/step. Peak memory of training per library in a fresh subprocess
(train_step.py's method). The CPU model (``lscpu``) and the load average are printed at the start and the end; the
report is markdown, ready for benchmarks/README.md.

Usage::

    python benchmarks/gpt_step.py              # full run
    python benchmarks/gpt_step.py --quick      # smoke run
    python benchmarks/gpt_step.py --check      # only the loss check
    python benchmarks/gpt_step.py --profile    # also split minidl's step (1 thread): kernels, Python layers, op counts
    python benchmarks/gpt_step.py --sizes tiny --threads 1 --no-memory
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
import time

import numpy as np
from _bench_common import (add_step_args, cpu_model, fmt_ratio, import_lib, interleaved, libraries, log, log_rounds,
                           memory_child, run_memory_child, set_threads, threading_layer_line, versions)

VOCAB = 65
SEED = 0
N_BATCHES = 4
LR, BETAS, WEIGHT_DECAY, CLIP = 6e-4, (0.9, 0.95), 0.1, 1.0
CHECK_STEPS, CHECK_RTOL = 3, 1e-4
MEM_STEPS = 10
SIZES = {
    "tiny": dict(n_layer=2, width=64, heads=4, batch=8, seq=64, dropout=0.0, target=2.2),
    "small": dict(n_layer=4, width=128, heads=4, batch=16, seq=128, dropout=0.1, target=None),
}


def label(size: str) -> str:
    c = SIZES[size]
    return (f"{size}: {c['n_layer']} layers, width {c['width']}, {c['heads']} heads, batch {c['batch']} x "
            f"{c['seq']}, dropout {c['dropout']}")


# ----------------------------------------------------------------------------- the model, once for both libraries
def gpt_class(lib):
    """The GPT module class over ``lib`` (torch or minidl): the same source for both."""
    nn, F = lib.nn, lib.nn.functional

    class SelfAttention(nn.Module):
        def __init__(self, width, heads, dropout):
            super().__init__()
            self.heads, self.dropout = heads, dropout
            self.qkv = nn.Linear(width, 3 * width)
            self.proj = nn.Linear(width, width)            # a residual projection
            self.drop = nn.Dropout(dropout)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                       for z in self.qkv(x).split(c, dim=2))
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0,
                                               is_causal=True)
            return self.drop(self.proj(y.transpose(1, 2).reshape(b, t, c)))

    class Block(nn.Module):
        def __init__(self, width, heads, dropout):
            super().__init__()
            self.ln1 = nn.LayerNorm(width)
            self.attn = SelfAttention(width, heads, dropout)
            self.ln2 = nn.LayerNorm(width)
            self.fc = nn.Linear(width, 4 * width)
            self.gelu = nn.GELU()
            self.proj = nn.Linear(4 * width, width)        # a residual projection
            self.drop = nn.Dropout(dropout)

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.drop(self.proj(self.gelu(self.fc(self.ln2(x)))))

    class GPT(nn.Module):
        def __init__(self, n_layer, width, heads, seq, dropout):
            super().__init__()
            self.tok = nn.Embedding(VOCAB, width)
            self.pos = nn.Embedding(seq, width)
            self.drop = nn.Dropout(dropout)
            self.blocks = nn.ModuleList([Block(width, heads, dropout) for _ in range(n_layer)])
            self.ln_f = nn.LayerNorm(width)
            self.head = nn.Linear(width, VOCAB, bias=False)
            self.head.weight = self.tok.weight

        def forward(self, idx):
            x = self.drop(self.tok(idx) + self.pos(lib.arange(idx.shape[1])))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x))

    return GPT


def initial_weights(named_shapes, n_layer: int) -> dict:
    """GPT-2 initialisation by parameter name, drawn from one numpy generator (so both libraries get it)."""
    rng = np.random.default_rng(SEED)
    out = {}
    for name, shape in named_shapes:
        if len(shape) == 2:
            std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("proj.weight") else 0.02
            out[name] = (rng.standard_normal(shape) * std).astype(np.float32)
        elif name.endswith("bias"):
            out[name] = np.zeros(shape, np.float32)
        else:                                               # LayerNorm gains
            out[name] = np.ones(shape, np.float32)
    return out


def token_batches(batch: int, seq: int) -> list:
    """N_BATCHES (inputs, next-token targets) pairs of random token ids, fixed seed."""
    rng = np.random.default_rng(SEED + 1)
    tokens = rng.integers(0, VOCAB, size=(N_BATCHES, batch, seq + 1), dtype=np.int64)
    return [(np.ascontiguousarray(t[:, :-1]), np.ascontiguousarray(t[:, 1:])) for t in tokens]


def build(lib, size: str, dropout=None, batch=None, compiled=False):
    """(step closure returning the loss, model) for ``lib``; ``dropout``/``batch`` override the size's;
    ``compiled``: the training step through ``lib.compile`` (the batch is its argument)."""
    c = SIZES[size]
    dropout = c["dropout"] if dropout is None else dropout
    lib.manual_seed(SEED)                                   # dropout masks (each library its own generator)
    model = gpt_class(lib)(c["n_layer"], c["width"], c["heads"], c["seq"], dropout)
    named = list(model.named_parameters())                  # the tied weight once
    weights = initial_weights([(n, tuple(p.shape)) for n, p in named], c["n_layer"])
    with lib.no_grad():
        for name, p in named:
            p.copy_(lib.from_numpy(weights[name]))
    params = [p for _, p in named]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": WEIGHT_DECAY},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = lib.optim.AdamW(groups, lr=LR, betas=BETAS)
    data = itertools.cycle([(lib.from_numpy(x), lib.from_numpy(y))
                            for x, y in token_batches(batch or c["batch"], c["seq"])])
    cross_entropy, clip = lib.nn.functional.cross_entropy, lib.nn.utils.clip_grad_norm_

    def train(x, y):
        opt.zero_grad()
        loss = cross_entropy(model(x).view(-1, VOCAB), y.view(-1))
        loss.backward()
        clip(params, CLIP)
        opt.step()
        return loss

    train = lib.compile(train) if compiled else train

    def step():
        return train(*next(data))

    step.train = train
    return step, model


def check_losses(libs: dict, size: str, steps: int = CHECK_STEPS) -> dict:
    """Each library's losses over ``steps`` steps with dropout 0, from the same weights and batches."""
    out = {}
    for name, lib in libs.items():
        step, _ = build(lib, size, dropout=0.0)
        out[name] = [float(step().item()) for _ in range(steps)]
    return out


def run_check(libs: dict, sizes) -> None:
    print(f"Check (dropout 0, {CHECK_STEPS} steps from the same weights and batches; losses must agree to "
          f"{CHECK_RTOL:g} relative):\n")
    for size in sizes:
        losses = check_losses(libs, size)
        a, b = np.array(losses["minidl"]), np.array(losses["torch"])
        worst = float(np.max(np.abs(a - b) / np.abs(b)))
        print(f"- {size}: minidl " + ", ".join(f"{v:.6f}" for v in a) + "; torch " +
              ", ".join(f"{v:.6f}" for v in b) + f"; largest relative difference {worst:.1e}")
        if not worst <= CHECK_RTOL:
            raise SystemExit(f"gpt_step: {size}: minidl and torch losses differ by {worst:.1e} relative "
                             f"(> {CHECK_RTOL:g}); the two libraries do not compute the same step")
    print()


# ----------------------------------------------------------------------------- memory
def mem_child(libname: str, size: str, threads: int, warmup: int) -> None:
    lib = import_lib(libname)
    lib.set_num_threads(threads)
    res = memory_child(lambda small: build(lib, size, batch=2 if small else None)[0], warmup, MEM_STEPS)
    print(json.dumps(res))


# ----------------------------------------------------------------------------- report
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_step_args(ap, "split minidl's step (1 thread) after the timings")
    ap.add_argument("--check", action="store_true", help="only check that both libraries compute the same losses")
    ap.add_argument("--sizes", nargs="*", choices=list(SIZES), default=list(SIZES))
    args = ap.parse_args()

    if args.mem_child:
        libname, size, threads, warmup = args.mem_child
        mem_child(libname, size, int(threads), int(warmup))
        return

    t0 = time.perf_counter()
    libs = libraries()
    have_torch = "torch" in libs
    if args.quick:
        rounds, warmup, steps = 3, 2, {"tiny": 3, "small": 1}
    else:
        rounds, warmup, steps = 7, 5, {"tiny": 10, "small": 3}

    print("## GPT step (minidl vs PyTorch eager, CPU)\n")
    print(versions(libs))
    print(f"CPU: {cpu_model()}, {os.cpu_count()} CPUs; load average at start: {os.getloadavg()[0]:.2f}; "
          f"{rounds} rounds per case, warm-up {warmup} steps" + (" (--quick)" if args.quick else "") + "\n")

    if args.check and not have_torch:
        return "gpt_step: --check needs torch, which cannot be imported here"
    if have_torch:
        set_threads(libs, 1)
        run_check(libs, args.sizes)
    if args.check:
        return None

    verdicts = []
    for n in args.threads:
        set_threads(libs, n)
        print(f"### {n} thread{'s' if n > 1 else ''} (minidl and torch)\n")
        hdr, sep = "| model | steps/round | minidl ms/step |", "|---|---:|---:|"
        if have_torch:
            hdr += " torch ms/step | minidl / torch | target | verdict |"
            sep += "---:|---:|---|---|"
        print(hdr + "\n" + sep)
        for size in args.sizes:
            log(f"[{time.perf_counter() - t0:6.1f}s] timing {size}, {n} thread(s)")
            r = interleaved({name: build(lib, size)[0] for name, lib in libs.items()}, rounds, steps[size],
                            warmup, size)
            row = f"| {label(size)} | {steps[size]} | {r['minidl']:.2f} |"
            if have_torch:
                ratio, target = r["minidl"] / r["torch"], SIZES[size]["target"]
                if target is None:
                    rs, verdict = f"{ratio:.2f}x", "(no target)"
                else:
                    rs, verdict = fmt_ratio(ratio, target)
                    if n == 1:
                        verdicts.append(f"{size} GPT step time, 1 thread: {rs} (target <= {target}x) -> "
                                        f"{verdict.strip('*').upper()}")
                row += f" {r['torch']:.2f} | {rs} | {'-' if target is None else f'<= {target}x'} | {verdict} |"
            print(row, flush=True)
            log_rounds(r, libs)
        print()
    print(threading_layer_line())

    if not args.no_memory:
        mem_threads = max(args.threads)
        print(f"### Peak memory of training ({MEM_STEPS} steps after warm-up, {mem_threads} "
              f"thread{'s' if mem_threads > 1 else ''}, one subprocess each)\n")
        print("| model | " + " | ".join(f"{k} peak MiB" for k in libs) + (" | minidl / torch |" if have_torch
                                                                           else " |"))
        print("|---|" + "---:|" * (len(libs) + have_torch))
        for size in args.sizes:
            log(f"[{time.perf_counter() - t0:6.1f}s] memory {size}")
            m = {k: run_memory_child(__file__, [k, size, mem_threads, warmup]) for k in libs}
            w = {k: v["working"] / 1024 for k, v in m.items()}
            print(f"| {label(size)} | " + " | ".join(f"{w[k]:.1f}" for k in libs) + " |" +
                  (f" {w['minidl'] / max(w['torch'], 1e-9):.2f}x |" if have_torch else ""), flush=True)
            log("    " + json.dumps(m))
        print("\npeak = highest RSS during warm-up and the timed steps - RSS once the model and batches exist "
              "(gradients, optimizer state, activations, workspace, allocator slack); train_step.py's method.\n")

    if verdicts:
        print("### Targets\n\n" + "\n".join(f"- {v}" for v in verdicts) + "\n")

    if args.profile:
        from gpt_profile import profile
        set_threads(libs, 1)
        for size in args.sizes:
            profile(libs, size, build, steps=10 if size == "tiny" else 3)

    print(f"load average at end: {os.getloadavg()[0]:.2f}; wall time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
