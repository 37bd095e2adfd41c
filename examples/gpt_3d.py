"""Train the char GPT sharded in 2-D and 3-D — FSDP, data x tensor parallel, pipeline x tensor parallel, FSDP x
tensor parallel, and all three — and check that it trains as one process does.

    mpiexec -n 4 python examples/gpt_3d.py --layout fsdp --check
    python -m minidl.dist.run --nproc-per-node 4 examples/gpt_3d.py --layout fsdp-tp --check
    mpiexec -n 8 python examples/gpt_3d.py --layout dp-pp-tp --check      # 2 x 2 x 2

The layouts, each a device mesh (``init_device_mesh``) whose dimensions are named by the layout:

- ``fsdp``: every rank a data-parallel rank; ``fully_shard`` on each block, then on the GPT (its embeddings,
  final LayerNorm and tied head): every parameter, gradient and optimizer state 1/n per rank.
- ``dp-tp``: tensor parallel (char_gpt_tp.py's Megatron plan) over "tp", replicated over "dp" by
  DistributedDataParallel on the mesh's "dp" dimension.
- ``fsdp-tp``: the same tensor-parallel model, ``fully_shard`` over "dp" (torch's FSDP + TP recipe): a
  column-parallel matrix's shard is a part of its tensor-parallel piece (a _StridedShard).
- ``pp-tp``: two pipeline stages (gpt_pipeline.py's cut, 1F1B over micro-batches), each tensor parallel; the tied
  embedding and head, on different stages, add their gradients' pieces over "pp".
- ``dp-pp-tp``: pp-tp replicated over "dp" (DistributedDataParallel on each stage).
- ``one``: one process, no launcher (to continue a checkpoint alone).

``--save DIR`` writes a checkpoint at the end (each rank the boxes it holds) and ``--load DIR`` continues one saved
by any unpipelined layout, resharded to this one (the batches are seeded per step, so the run goes on as if
unbroken). ``--meta-init`` builds the GPT on the meta device, shards it, then gives each rank its pieces' storage
and the values the whole GPT would have had (no rank ever holds a whole parameter).

Everything runs in float64 with dropout 0, so ``--check`` can demand that one process training the same GPT on
the same global batches gives the same losses and the same weights to 1e-8 (exit status 1 where it does not).
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import minidl  # noqa: E402
import minidl.dist as dist  # noqa: E402
import minidl.dist.checkpoint as dcp  # noqa: E402
from minidl.dist import pipelining  # noqa: E402
from minidl.dist.checkpoint.state_dict import get_state_dict, set_state_dict  # noqa: E402
from minidl.dist.device_mesh import init_device_mesh  # noqa: E402
from minidl.dist.fsdp import fully_shard  # noqa: E402
from minidl.dist.tensor import DTensor, Replicate  # noqa: E402
from minidl.dist.tensor.parallel import ColwiseParallel, parallelize_module  # noqa: E402
from minidl.nn.parallel import DistributedDataParallel  # noqa: E402
from minidl.optim import AdamW  # noqa: E402
from char_gpt import DATA, batches, param_groups  # noqa: E402
from char_gpt_tp import split_gpt, tp_plan  # noqa: E402
from cli import non_negative_float, positive_float, positive_int  # noqa: E402
from cli.mpi import parse_on_every_rank, require_launch  # noqa: E402
from gpt_pipeline import GPTStage, lm_loss  # noqa: E402

# layout: its mesh's dimension names (the sizes: tp and pp from the options, dp the ranks left); "one": one process
LAYOUTS = {"one": (), "fsdp": ("dp",), "dp-tp": ("dp", "tp"), "fsdp-tp": ("dp", "tp"), "pp-tp": ("pp", "tp"),
           "dp-pp-tp": ("dp", "pp", "tp")}
TOLERANCE = 1e-8


def mesh_shape(layout, world, tp, pp) -> tuple:
    """The mesh's sizes, in the order of the layout's names."""
    sizes = {"tp": tp, "pp": pp}
    rest = world // math.prod(sizes[n] for n in LAYOUTS[layout] if n != "dp")
    return tuple(sizes.get(n, rest) for n in LAYOUTS[layout])


def problem_with(args, world):
    """What makes the command line unusable on ``world`` ranks, or None."""
    names = LAYOUTS[args.layout]
    if "pp" in names and (args.load or args.save or args.meta_init):
        return "--load, --save and --meta-init take the unpipelined layouts (a stage holds a part of the GPT)"
    fixed = math.prod({"tp": args.tp, "pp": 2}[n] for n in names if n != "dp")
    if world % fixed or ("dp" in names and world == fixed and args.layout != "fsdp"):
        return f"--layout {args.layout} needs a multiple of {fixed} ranks{' (dp >= 2)' if 'dp' in names else ''}"
    if args.heads % args.tp or args.width % args.heads:
        return f"--heads {args.heads} must divide --width {args.width} and be a multiple of --tp {args.tp}"
    dp = mesh_shape(args.layout, world, args.tp, 2)[0] if names[0] == "dp" else 1
    micro = args.microbatches if "pp" in names else 1
    if args.batch_size % (dp * micro):
        return f"--batch-size {args.batch_size} does not split into {dp} x {micro} equal (micro-)batches"
    if "pp" in names and args.layers % 2:
        return f"--layers {args.layers} does not split over 2 pipeline stages"
    return None


def gpt(args, vocab, meta=False):
    """The GPT made from the seed in float32, in float64; with ``meta``, its shapes only (on the meta device,
    still float32: ``materialise`` draws its numbers)."""
    minidl.manual_seed(args.seed)
    if meta:
        with minidl.device("meta"):
            return split_gpt(vocab, args.context, args.width, args.heads, args.layers, 0.0)
    return split_gpt(vocab, args.context, args.width, args.heads, args.layers, 0.0).double()


def materialise(model, seed):
    """A GPT built on the meta device and sharded, given its storage and the values it would have had built
    whole under ``seed``: each module's own initialisation in the order they were made, then the GPT's, in
    float32, then float64. Every rank fills only its pieces (the random fills of DTensors draw the whole
    tensor's numbers there)."""
    model.to_empty(device="cpu")
    if model.head.weight is not model.tok.weight:   # (to_empty gives a plain tied parameter two new ones)
        model.head.weight = model.tok.weight
    minidl.manual_seed(seed)
    for module in model.modules():
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
    model.init_weights()
    model.double()


def plan_for(module):
    """char_gpt_tp's plan (without sequence parallelism) for the parts ``module`` holds; the head's logits
    gathered whole, so that every layout takes the same plain cross-entropy."""
    plan = {**tp_plan(False), "head": ColwiseParallel(output_layouts=Replicate())}
    return {k: v for k, v in plan.items() if hasattr(module, k.split(".")[0])}


class Trainer:
    """This rank's part of the GPT in ``layout``, its optimizer, and one training step on a global batch."""

    def __init__(self, layout, args, vocab):
        self.args, self.layout, names = args, layout, LAYOUTS[layout]
        self.mesh = names and init_device_mesh("cpu", mesh_shape(layout, dist.get_world_size(), args.tp, 2),
                                               mesh_dim_names=names)
        coordinate = dict(zip(names, self.mesh.get_coordinate())) if names else {}
        self.dp_rank, self.dp = coordinate.get("dp", 0), self.mesh.size(names.index("dp")) if "dp" in names else 1
        model = gpt(args, vocab, meta=args.meta_init)
        self.model, self.run, self.schedule = model, model, None
        if "pp" in names:
            self._pipeline(model, coordinate["pp"])
            return
        if "tp" in names:
            parallelize_module(model, self.mesh["tp"], plan_for(model))
        if layout.startswith("fsdp"):
            dp_mesh = self.mesh["dp"]
            for block in model.blocks:
                fully_shard(block, mesh=dp_mesh)
            fully_shard(model, mesh=dp_mesh)
        if args.meta_init:
            materialise(model, args.seed)
        if layout == "dp-tp":
            self.run = DistributedDataParallel(model, device_mesh=self.mesh["dp"], broadcast_buffers=False)
        self.names = {id(p): n for n, p in model.named_parameters()}
        self.optimizer = AdamW(param_groups(model, args.weight_decay), lr=args.lr, betas=(0.9, 0.95))

    def _pipeline(self, model, stage_index):
        args = self.args
        stage = GPTStage(model, stage_index, 2)
        parallelize_module(stage, self.mesh["tp"], plan_for(stage))
        per = args.layers // 2
        self.names = {id(p): _global_name(n, stage_index * per) for n, p in stage.named_parameters()}
        run = DistributedDataParallel(stage, device_mesh=self.mesh["dp"], broadcast_buffers=False) \
            if "dp" in self.mesh.mesh_dim_names else stage
        self.pipe_group = self.mesh["pp"].get_group()
        self.schedule = pipelining.Schedule1F1B(
            pipelining.PipelineStage(run, stage_index, 2, "cpu", group=self.pipe_group), args.microbatches,
            loss_fn=lm_loss)
        self.is_first, self.is_last = stage_index == 0, stage_index == 1
        self.tied = stage.tok.weight if self.is_first else stage.head.weight
        self.model = stage
        decay, rest = param_groups(stage, args.weight_decay)
        if self.is_last:   # (the head's matrix is the embedding's copy: not decayed, as the embedding is not)
            decay["params"] = [p for p in decay["params"] if p is not self.tied]
            rest["params"].append(self.tied)
        self.optimizer = AdamW([decay, rest], lr=args.lr, betas=(0.9, 0.95))

    def step(self, x, y) -> float:
        """One step on the global batch (x, y), this rank's data-parallel share; the batch's mean loss."""
        share = self.args.batch_size // self.dp
        x, y = x[self.dp_rank * share:(self.dp_rank + 1) * share], y[self.dp_rank * share:(self.dp_rank + 1) * share]
        self.optimizer.zero_grad()
        if self.schedule is None:
            loss = lm_loss(self.run(x), y)
            loss.backward()
            total = loss.item()
        else:
            losses = []
            if self.is_first:
                self.schedule.step(x)
            else:
                self.schedule.step(target=y, losses=losses)
            grad = self.tied.grad   # (the tied matrix's two copies, on the two stages, take one step)
            dist.all_reduce(grad.to_local() if isinstance(grad, DTensor) else grad, group=self.pipe_group)
            total = sum(l.item() for l in losses) / self.args.microbatches
            held = minidl.tensor([total], dtype=minidl.float64)   # (the last stage's, sent to the first)
            dist.all_reduce(held, group=self.pipe_group)
            total = held.item()
        self.optimizer.step()
        if self.dp > 1:
            mean = minidl.tensor([total / self.dp], dtype=minidl.float64)
            dist.all_reduce(mean, group=self.mesh["dp"].get_group())
            total = mean.item()
        return total

    def _state(self, step) -> dict:
        """The model's and optimizer's state dicts (the live tensors: DTensors where sharded) and the step."""
        model, optim = get_state_dict(self.model, self.optimizer)
        return {"model": model, "optim": optim, "step": step}

    def save(self, path, step) -> None:
        """A checkpoint any other layout (or one process) loads: each rank writes the boxes it holds."""
        dcp.save(self._state(step), checkpoint_id=path, no_dist=not self.mesh)

    def load(self, path) -> int:
        """The checkpoint's model and optimizer state, resharded to this layout; the step it was saved at."""
        state = self._state(0)
        dcp.load(state, checkpoint_id=path, no_dist=not self.mesh)
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        return state["step"]

    def weights(self) -> dict:
        """Every parameter of the GPT by name, whole (a collective: every rank calls it)."""
        mine = {self.names[id(p)]: (p.full_tensor() if isinstance(p, DTensor) else p).detach().numpy().copy()
                for p in self.model.parameters()}
        if not self.mesh:
            return mine
        parts = [None] * dist.get_world_size()
        dist.all_gather_object(parts, mine)
        return {name: value for part in parts for name, value in part.items()}


def _global_name(name, first_block) -> str:
    """A stage's parameter name as the whole GPT's (its blocks numbered from the stage's first)."""
    if name.startswith("blocks."):
        _, index, rest = name.split(".", 2)
        return f"blocks.{int(index) + first_block}.{rest}"
    return "tok.weight" if name == "head.weight" else name   # (the tied head is the embedding, as in the GPT)


def batch(args, data, step):
    """Step ``step``'s global batch (its own seed: a run resumed from a checkpoint draws the same ones)."""
    return batches(data, args.context, args.batch_size, np.random.default_rng((args.seed, step)), "cpu")


def train(layout, args, data, vocab):
    """(first step, losses, weights) of ``layout`` on this rank's process group: from step 0, or from the
    checkpoint ``args.load``, up to ``args.steps``; saved to ``args.save`` at the end if given."""
    trainer = Trainer(layout, args, vocab)
    start = trainer.load(args.load) if args.load else 0
    losses = [trainer.step(*batch(args, data, step)) for step in range(start, args.steps)]
    if args.save:
        trainer.save(args.save, args.steps)
    return start, losses, trainer.weights()


def single_process(args, data, vocab):
    """The same training in one process: the whole GPT, the whole batches."""
    model = gpt(args, vocab)
    optimizer = AdamW(param_groups(model, args.weight_decay), lr=args.lr, betas=(0.9, 0.95))
    losses = []
    for step in range(args.steps):
        x, y = batch(args, data, step)
        loss = lm_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, {n: p.detach().numpy().copy() for n, p in model.named_parameters()}


def differences(got, want) -> tuple:
    """(the largest loss difference, the largest weight difference, names missing or extra)."""
    (start, losses, weights), (want_losses, want_weights) = got, want
    want_losses = want_losses[start:]
    odd = sorted(set(weights) ^ set(want_weights))
    loss = max((abs(a - b) for a, b in zip(losses, want_losses)), default=0.0)
    weight = max(float(np.abs(weights[n] - want_weights[n]).max()) for n in want_weights if n in weights)
    return loss, weight, odd


def read_text():
    text = DATA.read_text(encoding="utf-8")
    chars = sorted(set(text))
    return np.array([chars.index(c) for c in text], dtype=np.int64), len(chars)


def arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layout", choices=LAYOUTS, default="fsdp")
    parser.add_argument("--tp", type=positive_int, default=2, help="tensor-parallel ranks")
    parser.add_argument("--microbatches", type=positive_int, default=2, help="per pipeline and step")
    parser.add_argument("--steps", type=positive_int, default=5)
    parser.add_argument("--batch-size", type=positive_int, default=8, help="the global batch")
    parser.add_argument("--context", type=positive_int, default=16)
    parser.add_argument("--width", type=positive_int, default=32)
    parser.add_argument("--heads", type=positive_int, default=4)
    parser.add_argument("--layers", type=positive_int, default=2)
    parser.add_argument("--lr", type=positive_float, default=3e-3)
    parser.add_argument("--weight-decay", type=non_negative_float, default=0.1)
    parser.add_argument("--check", action="store_true", help="also train in one process and compare")
    parser.add_argument("--load", help="continue from this checkpoint (saved by any layout but the pipelined)")
    parser.add_argument("--save", help="save a checkpoint here at the end")
    parser.add_argument("--meta-init", action="store_true",
                        help="build the GPT on the meta device, shard it, then initialise each rank's pieces only")
    parser.add_argument("--seed", type=int, default=0)
    return parse_on_every_rank(parser, argv)


def main(argv=None):
    args = arguments(argv)
    alone = args.layout == "one"
    if not alone:
        require_launch("gpt_3d.py trains on several ranks", "mpiexec -n 4 python examples/gpt_3d.py --layout fsdp")
        dist.init_process_group()
    rank, world = (0, 1) if alone else (dist.get_rank(), dist.get_world_size())
    problem = problem_with(args, world)
    if problem:
        if rank == 0:
            print(f"error: {problem}", file=sys.stderr)
        if not alone:
            dist.destroy_process_group()
        sys.exit(2)
    data, vocab = read_text()
    result = train(args.layout, args, data, vocab)
    if not alone:
        dist.destroy_process_group()
    if rank != 0:
        return
    shape = dict(zip(LAYOUTS[args.layout], mesh_shape(args.layout, world, args.tp, 2)))
    print(f"GPT of {args.layers} blocks, layout {args.layout} {shape} on {world} rank(s)")
    start, losses, _ = result
    for step, loss in enumerate(losses, start + 1):
        print(f"step {step:3d}  loss {loss:.10f}")
    if args.check:
        loss, weight, odd = differences(result, single_process(args, data, vocab))
        print(f"against one process: losses differ by {loss:.2e}, weights by {weight:.2e} (tolerance {TOLERANCE})")
        if odd or max(loss, weight) > TOLERANCE:
            print(f"error: not the single process's training{f' (names {odd})' if odd else ''}", file=sys.stderr)
            sys.exit(1)


if __name__ == "__main__":
    main()
