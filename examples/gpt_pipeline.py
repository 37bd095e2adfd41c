"""Train char_gpt.py's GPT pipelined over MPI ranks, optionally times data parallel.

    mpiexec -n 4 python examples/gpt_pipeline.py --schedule {gpipe,1f1b,interleaved,zb} [--dp 2]
    mpiexec -n 4 python examples/gpt_pipeline.py --schedule 1f1b --check   # and against one process

Ranks: with --dp D on W ranks there are D replicas of one pipeline of pp = W / D ranks, and rank
``replica * pp + j`` is rank j of its replica's pipeline. gpipe and 1f1b give pipeline rank j
stage j (pp stages); interleaved and zb (interleaved zero bubble) give it stages j and j + pp
(2 pp stages). The stages are cut at module boundaries: stage 0 holds the token and position
embeddings, every stage an equal share of the blocks, the last one the final LayerNorm and the head.

The head's weight is tied to the token embedding, and stage 0 and the last stage sit on different
ranks, so each of the two holds a copy (equal at the start: every rank builds the same model from
the same seed and keeps its stages). After each backward those two ranks all-reduce (sum) the
copies' gradients over a group of the two, as Megatron's embedding group does, so both take the
same step. Gradients are clipped by their global norm: each rank's squared norm, the tied weight
counted once, summed over its pipeline. With --dp each stage module is wrapped in
DistributedDataParallel over the ranks holding that stage in the other replicas, and each replica
pipelines its share of every batch. Dropout is 0, so --check can demand that the whole model
trained in one process on the same batches (by rank 0, after the pipelined run) gives the same
loss curve to 1e-5; it exits with 1 where it does not.
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import minidl  # noqa: E402
import minidl.dist as dist  # noqa: E402
from minidl import nn  # noqa: E402
from minidl.dist import pipelining  # noqa: E402
from minidl.nn import functional as F  # noqa: E402
from minidl.nn.parallel import DistributedDataParallel  # noqa: E402
from minidl.optim import AdamW  # noqa: E402
from char_gpt import DATA, GPT, batches  # noqa: E402
from cli import non_negative_float, positive_float, positive_int  # noqa: E402
from cli.mpi import parse_on_every_rank, require_launch  # noqa: E402

# --schedule: (the schedule, stages per rank)
SCHEDULES = {"gpipe": (pipelining.ScheduleGPipe, 1), "1f1b": (pipelining.Schedule1F1B, 1),
             "interleaved": (pipelining.ScheduleInterleaved1F1B, 2),
             "zb": (pipelining.ScheduleInterleavedZeroBubble, 2)}
TOLERANCE = 1e-5


class GPTStage(nn.Module):
    """Stage ``index`` of ``num_stages`` cut from ``gpt``: the embeddings on the first, an equal
    share of the blocks, the final LayerNorm and the head on the last. Between stages travel the
    (batch, context, width) activations."""

    def __init__(self, gpt, index, num_stages):
        super().__init__()
        per_stage = len(gpt.blocks) // num_stages
        self.is_first, self.is_last = index == 0, index == num_stages - 1
        if self.is_first:
            self.tok, self.pos = gpt.tok, gpt.pos
        self.blocks = nn.ModuleList(gpt.blocks[index * per_stage:(index + 1) * per_stage])
        if self.is_last:
            self.ln_f, self.head = gpt.ln_f, gpt.head
        self.register_buffer("causal", gpt.causal, persistent=False)

    def forward(self, x):
        t = x.shape[1]
        if self.is_first:
            x = self.tok(x) + self.pos(minidl.arange(t))
        causal = self.causal[:t, :t]
        for block in self.blocks:
            x = block(x, causal)
        return self.head(self.ln_f(x)) if self.is_last else x


def lm_loss(logits, targets):
    """Cross entropy over the vocabulary of every position of the (micro-)batch."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def make_optimizer(params, args):
    """AdamW, weight decay on the matrices only (both copies of the tied weight alike)."""
    params = list(params)
    return AdamW([{"params": [p for p in params if p.ndim >= 2], "weight_decay": args.weight_decay},
                  {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95))


def group_of(rank, rank_lists):
    """Make a group of each list (every rank makes every group, in the same order) and return the
    one that holds ``rank``."""
    mine = dist.GroupMember.NON_GROUP_MEMBER
    for ranks in rank_lists:
        group = dist.new_group(ranks)
        if rank in ranks:
            mine = group
    return mine


def clip_global_norm(params, counted, group, max_norm):
    """clip_grad_norm_ over a whole pipeline: the squared norms of ``counted`` (this rank's
    gradients, the tied copy left out on one of its two ranks) summed over ``group``, then every
    gradient of ``params`` scaled by the same factor. Returns the norm."""
    with minidl.no_grad():
        squares = minidl.tensor([sum(float(p.grad.norm()) ** 2 for p in counted)], dtype=minidl.float64)
        dist.all_reduce(squares, group=group)
        norm = math.sqrt(squares.item())
        scale = max_norm / (norm + 1e-6)
        if scale < 1.0:
            for p in params:
                p.grad.mul_(scale)
    return norm


def problem_with(args, world):
    """What makes the command line unusable on ``world`` ranks, or None."""
    if world % args.dp:
        return f"--dp {args.dp} does not divide the {world} ranks"
    pp = world // args.dp
    per_rank = SCHEDULES[args.schedule][1]
    if pp < 2:
        return f"{world} rank(s) with --dp {args.dp} leave {pp} per pipeline; a pipeline needs at least 2"
    if args.width % args.heads:
        return f"--heads {args.heads} does not divide --width {args.width}"
    if args.layers % (pp * per_rank):
        return f"--layers {args.layers} does not split evenly over {pp * per_rank} stages"
    if args.batch_size % (args.dp * args.microbatches):
        return f"--batch-size {args.batch_size} does not split into {args.dp} x {args.microbatches} equal micro-batches"
    return None


class PipelinedGPT:
    """This rank's stages of the GPT, the schedule that runs them, the groups it talks over, and
    its optimizer."""

    def __init__(self, args, vocab, rank, world):
        self.args, self.pp = args, world // args.dp
        pp, (schedule_cls, per_rank) = self.pp, SCHEDULES[args.schedule]
        self.num_stages = num_stages = pp * per_rank
        self.replica, pipe_rank = divmod(rank, pp)
        self.pipe = group_of(rank, [[r * pp + k for k in range(pp)] for r in range(args.dp)])
        same_stages = group_of(rank, [[r * pp + k for r in range(args.dp)] for k in range(pp)])
        self.embedding = group_of(rank, [[r * pp, r * pp + pp - 1] for r in range(args.dp)])
        minidl.manual_seed(args.seed)
        gpt = GPT(vocab, args.context, args.width, args.heads, args.layers, 0.0)
        indices = [pipe_rank + k * pp for k in range(per_rank)]
        modules = [GPTStage(gpt, s, num_stages) for s in indices]
        stages = [pipelining.PipelineStage(
            DistributedDataParallel(m, process_group=same_stages, broadcast_buffers=False) if args.dp > 1 else m,
            s, num_stages, "cpu", group=self.pipe) for m, s in zip(modules, indices)]
        self.schedule = schedule_cls(stages[0] if per_rank == 1 else stages, args.microbatches, loss_fn=lm_loss)
        self.holds_first, self.holds_last = 0 in indices, num_stages - 1 in indices
        # the GPT's tied matrix: the embedding on stage 0's rank, the head on the last stage's (never both)
        self.tied = modules[0].tok.weight if self.holds_first else modules[-1].head.weight if self.holds_last else None
        self.params = [p for m in modules for p in m.parameters()]
        self.counted = [p for p in self.params if not (self.holds_last and p is self.tied)]
        self.optimizer = make_optimizer(self.params, args)

    def train_step(self, x, y):
        """One step on the global batch (x, y), of which this replica pipelines its share. Returns
        the batch's mean loss and the gradient norm before clipping (on every rank)."""
        share = self.args.batch_size // self.args.dp
        mine = slice(self.replica * share, (self.replica + 1) * share)
        self.optimizer.zero_grad()
        losses = []
        if self.holds_first:
            self.schedule.step(x[mine])
        elif self.holds_last:
            self.schedule.step(target=y[mine], losses=losses)
        else:
            self.schedule.step()
        if self.tied is not None:
            dist.all_reduce(self.tied.grad, group=self.embedding)
        norm = clip_global_norm(self.params, self.counted, self.pipe, self.args.clip)
        self.optimizer.step()
        loss = minidl.tensor([sum(l.item() for l in losses)], dtype=minidl.float64)
        dist.all_reduce(loss)   # (the last stages' sums, over every replica's micro-batches)
        return loss.item() / (self.args.dp * self.args.microbatches), norm

    def tied_difference(self):
        """max |embedding - the head's copy| on stage 0's rank, which gets the copy from the last
        stage's rank (None elsewhere). Collective over the ranks holding the two."""
        if self.tied is None:
            return None
        copy = self.tied.detach().clone()
        dist.broadcast(copy, src=self.replica * self.pp + self.pp - 1, group=self.embedding)
        return float((copy - self.tied).abs().max()) if self.holds_first else None


def single_process_curve(args, vocab, data):
    """The same training in one process on the whole model (its head and embedding one parameter)."""
    minidl.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    model = GPT(vocab, args.context, args.width, args.heads, args.layers, 0.0)
    optimizer = make_optimizer(model.parameters(), args)
    curve = []
    for _ in range(args.steps):
        x, y = batches(data, args.context, args.batch_size, rng, "cpu")
        loss = lm_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optimizer.step()
        curve.append(loss.item())
    return curve


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedule", choices=SCHEDULES, default="1f1b")
    parser.add_argument("--dp", type=positive_int, default=1, help="data-parallel replicas of the pipeline")
    parser.add_argument("--microbatches", type=positive_int, default=4, help="micro-batches per replica and step")
    parser.add_argument("--steps", type=positive_int, default=20)
    parser.add_argument("--batch-size", type=positive_int, default=16, help="global batch, split over the replicas")
    parser.add_argument("--context", type=positive_int, default=16)
    parser.add_argument("--width", type=positive_int, default=32)
    parser.add_argument("--heads", type=positive_int, default=4)
    parser.add_argument("--layers", type=positive_int, default=8, help="blocks, split evenly over the stages")
    parser.add_argument("--lr", type=positive_float, default=3e-3)
    parser.add_argument("--weight-decay", type=non_negative_float, default=0.1)
    parser.add_argument("--clip", type=positive_float, default=0.5, help="max global gradient norm")
    parser.add_argument("--check", action="store_true", help="also train in one process and compare the losses")
    parser.add_argument("--seed", type=int, default=0)
    args = parse_on_every_rank(parser, argv)
    require_launch("gpt_pipeline.py runs one pipeline rank per process",
                "mpiexec -n 4 python examples/gpt_pipeline.py --schedule 1f1b")

    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    problem = problem_with(args, world)
    if problem:
        if rank == 0:
            print(f"error: {problem}", file=sys.stderr)
        dist.destroy_process_group()
        sys.exit(2)

    text = DATA.read_text(encoding="utf-8")
    chars = sorted(set(text))
    data = np.array([chars.index(c) for c in text], dtype=np.int64)
    model = PipelinedGPT(args, len(chars), rank, world)
    rng = np.random.default_rng(args.seed)
    say = print if rank == 0 else (lambda *a, **k: None)
    say(f"GPT of {args.layers} blocks in {model.num_stages} stages, {args.schedule} over {model.pp} ranks x "
        f"{args.dp} replica(s), {args.microbatches} micro-batches of "
        f"{args.batch_size // args.dp // args.microbatches} per replica")
    curve = []
    for step in range(1, args.steps + 1):
        loss, norm = model.train_step(*batches(data, args.context, args.batch_size, rng, "cpu"))
        curve.append(loss)
        say(f"step {step:3d}  loss {loss:.6f}  grad norm {norm:.4f}", flush=True)
    bubble = model.schedule.timeline()["bubble"]
    difference = model.tied_difference()
    if rank == 0:
        print(f"measured bubble of the last step: {bubble:.0%}")
        print(f"tied weight: the embedding and the head's copy differ by {difference:.3g}")
    dist.destroy_process_group()
    if rank == 0 and args.check:
        single = single_process_curve(args, len(chars), data)
        print("step  pipelined   one process  |difference|")
        for step, (a, b) in enumerate(zip(curve, single), 1):
            print(f"{step:4d}  {a:.6f}  {b:.6f}  {abs(a - b):.2e}")
        worst = max(abs(a - b) for a, b in zip(curve, single))
        print(f"max |loss difference| {worst:.3g} (tolerance {TOLERANCE:g})")
        if worst > TOLERANCE:
            sys.exit(1)


if __name__ == "__main__":
    main()
