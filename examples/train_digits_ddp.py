"""Train the digits CNN of train_digits.py data-parallel: one process per rank, each on its own
shard of every epoch, gradients averaged by DistributedDataParallel.

    mpiexec -n 2 python examples/train_digits_ddp.py          # 98%+ on the hold-out
    mpiexec -n 8 python examples/train_digits_ddp.py          # fine oversubscribed (1 thread a rank)
    mpiexec -n 2 python examples/train_digits_ddp.py --epochs 1 --limit-batches 5   # smoke run

or without MPI, one process per rank as torch's launchers start them (minidl's gloo transport):

    for r in 0 1; do RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \
        python examples/train_digits_ddp.py & done; wait

--batch-size is the global batch (split evenly over the ranks), so the optimisation, lr and
epochs are those of the single-process run whatever the world size. Every rank seeds alike; rank
0 alone prints, evaluates and writes the checkpoint (ddp.module's state_dict, without the
``module.`` prefix, so it loads into a plain model under any world size).
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import minidl  # noqa: E402
import minidl.dist as dist  # noqa: E402
from minidl.nn.parallel import DistributedDataParallel  # noqa: E402
from minidl.optim import Adam  # noqa: E402
from minidl.optim.lr_scheduler import CosineAnnealingLR  # noqa: E402
from minidl.utils.data import DataLoader, DistributedSampler  # noqa: E402
from minidl.vision.datasets import Digits  # noqa: E402
from cli import positive_float, positive_int  # noqa: E402
from cli.mpi import parse_on_every_rank, require_launch  # noqa: E402
from train_digits import evaluate, make_model, train_epoch  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=positive_int, default=15)
    parser.add_argument("--batch-size", type=positive_int, default=32, help="global batch, split over the ranks")
    parser.add_argument("--lr", type=positive_float, default=3e-3)
    parser.add_argument("--limit-batches", type=positive_int, default=None,
                        help="stop each epoch after this many batches")
    parser.add_argument("--checkpoint", default="digits-cnn-ddp.safetensors")
    parser.add_argument("--resume", action="store_true",
                        help="continue from --checkpoint (under minidl.dist.run, a restarted group always does)")
    parser.add_argument("--seed", type=int, default=0)
    args = parse_on_every_rank(parser, argv)
    require_launch("train_digits_ddp.py runs one rank per process", "mpiexec -n 2 python examples/train_digits_ddp.py")

    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.batch_size % world:
        if rank == 0:
            print(f"error: --batch-size {args.batch_size} does not split evenly over {world} ranks", file=sys.stderr)
        dist.destroy_process_group()
        sys.exit(2)
    minidl.manual_seed(args.seed)
    train = Digits(train=True)
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(train, batch_size=args.batch_size // world, sampler=sampler)
    test_loader = DataLoader(Digits(train=False), batch_size=256)
    model = DistributedDataParallel(make_model("cnn"))
    optimizer = Adam(model.parameters(), lr=args.lr)
    scheduler = CosineAnnealingLR(optimizer, T_max=args.epochs)
    say = print if rank == 0 else (lambda *a, **k: None)
    say(f"{world} rank(s), {args.batch_size // world} samples per rank per step")
    first = resume(args, model, optimizer, scheduler)
    if first:
        say(f"resumed from {args.checkpoint} after epoch {first}")

    began = time.perf_counter()
    accuracy = evaluate(model.module, test_loader) if rank == 0 and first >= args.epochs else float("nan")
    for epoch in range(first, args.epochs):
        sampler.set_epoch(epoch)
        loss = train_epoch(model, loader, optimizer, f"epoch {epoch + 1}/{args.epochs}", args.limit_batches,
                           show=rank == 0)
        scheduler.step()
        if rank == 0:
            accuracy = evaluate(model.module, test_loader)
            say(f"epoch {epoch + 1:3d}  rank-0 loss {loss:.4f}  test accuracy {accuracy:.4f}  "
                f"({time.perf_counter() - began:.1f} s)")
            minidl.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                         "scheduler": scheduler.state_dict(), "epoch": epoch + 1}, args.checkpoint + ".tmp")
            os.replace(args.checkpoint + ".tmp", args.checkpoint)   # (a kill mid-save leaves the last one whole)
        dist.barrier()   # (every rank's next epoch starts after the snapshot a restart would resume from)
    if rank == 0:
        say(f"final test accuracy {accuracy:.4f} ({world} ranks, {time.perf_counter() - began:.1f} s); "
            f"checkpoint: {args.checkpoint}")
    dist.destroy_process_group()


def resume(args, model, optimizer, scheduler) -> int:
    """The epoch to start from: the checkpoint's, with --resume (which needs one) or when the launcher restarted
    the group (TORCHELASTIC_RESTART_COUNT > 0, torchrun's snapshot-resume pattern), else 0."""
    restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0
    if not (args.resume or restarted and os.path.exists(args.checkpoint)):
        return 0
    if not os.path.exists(args.checkpoint):
        if dist.get_rank() == 0:
            print(f"error: --resume: no checkpoint at {args.checkpoint}", file=sys.stderr)
        dist.destroy_process_group()
        sys.exit(2)
    state = minidl.load(args.checkpoint)
    model.module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    return state["epoch"]


if __name__ == "__main__":
    main()
