"""Train the char GPT tensor-parallel (Megatron's split, written with torch's parallel styles), optionally with
sequence parallelism.

    python -m minidl.dist.run --nproc-per-node 2 examples/char_gpt_tp.py
    python -m minidl.dist.run --nproc-per-node 2 examples/char_gpt_tp.py --sequence-parallel
    mpiexec -n 2 python examples/char_gpt_tp.py --steps 100

The model is char_gpt.py's GPT with blocks whose attention is four Linear maps (query, key, value, output), so
that it splits by heads. Every rank holds all layers but a 1/tp share of each matrix:

- attention: q, k and v column-parallel (each rank computes its heads, whole), the output map row-parallel;
- MLP: the first Linear column-parallel, the second row-parallel (one all-reduce forward for each pair, one
  backward for the gradient of its input);
- the token embedding split by vocabulary (each rank looks up the characters it holds) and the output head,
  which shares its weight, by output classes: its logits go split into loss_parallel's cross-entropy, never
  gathered.

With --sequence-parallel the LayerNorms and the embeddings' sum run on each rank's share of the positions:
the all-reduces become a reduce-scatter into the next LayerNorm and an all-gather out of it, so the
activations between blocks are 1/tp as large. The optimisation is the single process's: the same seeds, the
same batches on every rank, AdamW with weight decay on the matrices, the gradients' norm clipped (over the split and
whole gradients together); the losses are the single process's.
"""
import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import minidl  # noqa: E402
import minidl.dist as dist  # noqa: E402
from minidl import nn  # noqa: E402
from minidl.dist.device_mesh import init_device_mesh  # noqa: E402
from minidl.dist.tensor import Replicate, Shard  # noqa: E402
from minidl.dist.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,  # noqa: E402
                                         SequenceParallel, loss_parallel, parallelize_module)
from minidl.nn import functional as F  # noqa: E402
from minidl.optim import AdamW  # noqa: E402
from minidl.optim.lr_scheduler import LambdaLR  # noqa: E402
from char_gpt import GPT, batches, param_groups, training_arguments  # noqa: E402
from cli import positive_int  # noqa: E402
from cli.mpi import parse_on_every_rank, require_launch  # noqa: E402


class SplitAttention(nn.Module):
    """Causal self-attention of four Linear maps. The heads are counted from the width q gives: after a
    column-parallel split each rank's q, k and v compute its heads only, and the code is the same."""

    def __init__(self, width, heads, dropout):
        super().__init__()
        self.q, self.k, self.v, self.out = (nn.Linear(width, width) for _ in range(4))
        self.head_dim, self.dropout = width // heads, dropout

    def forward(self, x):
        b, t = x.shape[0], x.shape[1]
        q, k, v = (f(x).reshape(b, t, -1, self.head_dim).transpose(1, 2) for f in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, t, -1))


class SplitBlock(nn.Module):
    """char_gpt's Block with SplitAttention: x + attention(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, width, heads, dropout):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = SplitAttention(width, heads, dropout)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.ReLU(), nn.Linear(4 * width, width),
                                 nn.Dropout(dropout))

    def forward(self, x, causal):   # (causal: the GPT's mask; the split attention masks by is_causal)
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def tp_plan(sequence_parallel: bool) -> dict:
    """The GPT's plan. Without sequence parallelism the activations between the split layers are whole (and
    plain tensors); with it they are each rank's positions (Shard(1)), laid out by the styles' layouts."""
    if not sequence_parallel:
        return {"tok": RowwiseParallel(input_layouts=Replicate()),
                "blocks.*.attn.q": ColwiseParallel(), "blocks.*.attn.k": ColwiseParallel(),
                "blocks.*.attn.v": ColwiseParallel(), "blocks.*.attn.out": RowwiseParallel(),
                "blocks.*.mlp.0": ColwiseParallel(), "blocks.*.mlp.2": RowwiseParallel(),
                "head": ColwiseParallel(use_local_output=False)}
    return {"tok": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
            "pos": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(0)),
            "drop": SequenceParallel(use_local_output=True),
            "blocks.*.ln1": SequenceParallel(), "blocks.*.ln2": SequenceParallel(),
            "blocks.*.attn": PrepareModuleInput(input_layouts=Shard(1), desired_input_layouts=Replicate()),
            "blocks.*.attn.q": ColwiseParallel(), "blocks.*.attn.k": ColwiseParallel(),
            "blocks.*.attn.v": ColwiseParallel(), "blocks.*.attn.out": RowwiseParallel(output_layouts=Shard(1)),
            "blocks.*.mlp.0": ColwiseParallel(input_layouts=Shard(1)),
            "blocks.*.mlp.2": RowwiseParallel(output_layouts=Shard(1)),
            "blocks.*.mlp.3": SequenceParallel(use_local_output=True),
            "ln_f": SequenceParallel(),
            "head": ColwiseParallel(input_layouts=Shard(1), use_local_output=False)}


def split_gpt(vocab, context, width, heads, layers, dropout):
    """The GPT with SplitBlocks, made alike on every rank (seeded by the caller)."""
    return GPT(vocab, context, width, heads, layers, dropout, block=SplitBlock)


def step(model, optimizer, x, y, clip=None):
    """One training step; the loss as a float. The logits are a DTensor split by class where the head is
    column-parallel: the cross-entropy then runs under loss_parallel, on the pieces. ``clip``: the largest
    gradient norm (the norm of every gradient, split or whole, as one vector)."""
    logits = model(x)
    with loss_parallel():
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    if clip is not None:
        nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    return float((loss.full_tensor() if hasattr(loss, "full_tensor") else loss).item())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    training_arguments(parser, steps=300)
    parser.add_argument("--sequence-parallel", action="store_true",
                        help="run LayerNorms and dropouts on each rank's share of the positions")
    parser.add_argument("--log-every", type=positive_int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parse_on_every_rank(parser, argv)
    require_launch("char_gpt_tp.py trains on several ranks",
                   "python -m minidl.dist.run --nproc-per-node 2 examples/char_gpt_tp.py")
    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.heads % world or args.width % args.heads:
        if rank == 0:
            print(f"error: --heads {args.heads} must divide --width {args.width} and be a multiple of the "
                  f"{world} ranks (each rank computes whole heads)", file=sys.stderr)
        dist.destroy_process_group()
        sys.exit(2)
    text = args.data.read_text(encoding="utf-8")
    chars = sorted(set(text))
    data = np.array([chars.index(c) for c in text], dtype=np.int64)
    minidl.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)   # (alike on every rank: every rank sees the whole batch)
    model = split_gpt(len(chars), args.context, args.width, args.heads, args.layers, args.dropout)
    parallelize_module(model, init_device_mesh("cpu", (world,)), tp_plan(args.sequence_parallel))
    optimizer = AdamW(param_groups(model, args.weight_decay), lr=args.lr, betas=(0.9, 0.95))
    warmup = max(1, args.steps // 20)
    schedule = LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup) * 0.5
                        * (1 + math.cos(math.pi * s / args.steps)))   # (char_gpt's warm-up and cosine decay)
    if rank == 0:
        mode = "tensor + sequence parallel" if args.sequence_parallel else "tensor parallel"
        print(f"GPT over {world} ranks, {mode}: {args.layers} layers, width {args.width}, {args.heads} heads "
              f"({args.heads // world} a rank), vocabulary {len(chars)}")
    start = time.perf_counter()
    for s in range(1, args.steps + 1):
        loss = step(model, optimizer, *batches(data, args.context, args.batch_size, rng, "cpu"), args.clip)
        schedule.step()
        if rank == 0 and (s % args.log_every == 0 or s == args.steps):
            print(f"step {s:5d}  loss {loss:.4f}  ({time.perf_counter() - start:.0f} s)", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
