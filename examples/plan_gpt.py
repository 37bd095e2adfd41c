"""Let the planner lay the char GPT out over N ranks: every plan's predicted step time, memory and bytes, then
training with the best.

    python examples/plan_gpt.py --world-size 2               # the table, then the best plan trained on 2 processes
    python examples/plan_gpt.py --world-size 2 --no-run      # the table only
    python examples/plan_gpt.py --world-size 4 --tp 2        # semi-automatic: tensor parallel over 2, the rest planned

``minidl.dist.plan`` measures the GPT's blocks (at every shape a plan would run them), the optimizer and the links
on ``--world-size`` processes it starts, predicts each layout — data parallel (DDP, ZeRO, FSDP), tensor parallel
(the Megatron plan below), pipeline (GPipe, 1F1B, interleaved 1F1B, zero bubble) and their products — ranks them,
and returns the best, whose ``apply`` makes the calls a user would have written. The GPT is written as an
``nn.Sequential`` (embeddings, the blocks, the head) because the planner cuts pipeline stages between children.
"""
import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import minidl  # noqa: E402
import minidl.dist as dist  # noqa: E402
from minidl import nn  # noqa: E402
from minidl.dist.tensor import Replicate  # noqa: E402
from minidl.dist.tensor.parallel import ColwiseParallel, RowwiseParallel  # noqa: E402
from char_gpt import DATA, batches  # noqa: E402
from char_gpt_tp import split_gpt  # noqa: E402
from cli import positive_int  # noqa: E402
from gpt_pipeline import lm_loss  # noqa: E402


class Embed(nn.Module):
    """Token and position embeddings (the GPT's own modules)."""

    def __init__(self, gpt):
        super().__init__()
        self.tok, self.pos, self.drop = gpt.tok, gpt.pos, gpt.drop

    def forward(self, idx):
        return self.drop(self.tok(idx) + self.pos(minidl.arange(idx.shape[1])))


class Layer(nn.Module):
    """One transformer block (its attention masks causally by itself)."""

    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, x):
        return self.block(x, None)


class Head(nn.Module):
    """The final LayerNorm and the head (tied to the token embedding)."""

    def __init__(self, gpt):
        super().__init__()
        self.ln_f, self.head = gpt.ln_f, gpt.head

    def forward(self, x):
        return self.head(self.ln_f(x))


def sequential_gpt(vocab, args):
    """char_gpt's GPT (split attention, seeded) as the chain of its parts."""
    minidl.manual_seed(args.seed)
    gpt = split_gpt(vocab, args.context, args.width, args.heads, args.layers, 0.0)
    return nn.Sequential(Embed(gpt), *[Layer(b) for b in gpt.blocks], Head(gpt))


def tp_plan(layers):
    """Megatron's split of the Sequential: heads and the MLP's hidden units over the tensor-parallel ranks, the
    vocabulary of the tied embedding and head too (the logits gathered whole for the plain cross-entropy)."""
    return {"0.tok": RowwiseParallel(input_layouts=Replicate()),
            "*.block.attn.q": ColwiseParallel(), "*.block.attn.k": ColwiseParallel(),
            "*.block.attn.v": ColwiseParallel(), "*.block.attn.out": RowwiseParallel(),
            "*.block.mlp.0": ColwiseParallel(), "*.block.mlp.2": RowwiseParallel(),
            f"{layers + 1}.head": ColwiseParallel(output_layouts=Replicate())}


def read_text():
    text = DATA.read_text(encoding="utf-8")
    chars = sorted(set(text))
    return np.array([chars.index(c) for c in text], dtype=np.int64), len(chars)


def batch(args, data, step):
    return batches(data, args.context, args.batch_size, np.random.default_rng((args.seed, step)), "cpu")


def train(rank, world_size, meet, best, args):
    """One rank of the chosen plan's training (started by minidl.multiprocessing.spawn; the ranks meet through
    the file ``meet``)."""
    dist.init_process_group("gloo", init_method=meet, rank=rank, world_size=world_size)
    data, vocab = read_text()
    trainer = best.apply(sequential_gpt(vocab, args))
    for step in range(args.steps):
        x, y = batch(args, data, step)
        loss = trainer.step(x, target=y)
        if loss is not None and (rank == 0 or trainer.schedule is not None):
            print(f"rank {rank} step {step + 1:3d}  loss {loss:.4f}", flush=True)
    dist.destroy_process_group()


def arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=positive_int, default=2)
    parser.add_argument("--no-run", action="store_true", help="print the plans only")
    parser.add_argument("--memory-limit-mb", type=float, help="the most bytes a rank may hold at its peak")
    for name in ("dp", "tp", "pp", "microbatches"):
        parser.add_argument(f"--{name}", type=positive_int, help=f"fix {name} (the planner chooses the rest)")
    parser.add_argument("--shard", choices=("ddp", "zero", "fsdp"), help="fix how the data-parallel ranks hold it")
    parser.add_argument("--schedule", choices=("gpipe", "1f1b", "interleaved-1f1b", "zero-bubble"),
                        help="fix the pipeline schedule")
    parser.add_argument("--steps", type=positive_int, default=5)
    parser.add_argument("--batch-size", type=positive_int, default=8)
    parser.add_argument("--context", type=positive_int, default=64)
    parser.add_argument("--width", type=positive_int, default=128)
    parser.add_argument("--heads", type=positive_int, default=4)
    parser.add_argument("--layers", type=positive_int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv=None):
    args = arguments(argv)
    data, vocab = read_text()
    model = sequential_gpt(vocab, args)
    x, y = batch(args, data, 0)
    limit = None if args.memory_limit_mb is None else args.memory_limit_mb * 1e6
    try:
        best = dist.plan(model, x, args.world_size, loss_fn=lm_loss, target=y, tp_plan=tp_plan(args.layers),
                         memory_limit=limit, dp=args.dp, tp=args.tp, pp=args.pp, shard=args.shard,
                         schedule=args.schedule, microbatches=args.microbatches)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"best: {best}")
    if args.no_run:
        return
    with tempfile.TemporaryDirectory() as folder:
        meet = f"file://{os.path.join(folder, 'store')}"
        minidl.multiprocessing.spawn(train, args=(args.world_size, meet, best, args), nprocs=args.world_size)


if __name__ == "__main__":
    main()
