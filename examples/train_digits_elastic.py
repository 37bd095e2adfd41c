"""Train the digits CNN of train_digits.py data-parallel and elastically: a worker that dies is survived in
the job — the others roll back to the last commit, rebuild the group among themselves and go on.

    python -m minidl.dist.run --standalone --nproc-per-node 3 examples/train_digits_elastic.py
    python -m minidl.dist.run --standalone --nproc-per-node 3 examples/train_digits_elastic.py --kill-at 200
    python -m minidl.dist.run --standalone --nproc-per-node 3 examples/train_digits_elastic.py \\
        --checkpoint-dir digits-elastic --save-every 10      # also a distributed checkpoint every 10 commits

With --kill-at 200 the worker the launcher started as rank 1 (--kill-rank) SIGKILLs itself as the 201st step
begins; the other two see the step's all-reduce fail, go back to the last commit (every --commit-every steps
and at each epoch's end: in memory, no I/O), meet in the next round on the launcher's store and train on as
a group of 2 — every step after that commit is redone, none before it is lost — to the accuracy of a run
without the kill. Rank 0 prints each epoch's loss, test accuracy and world size, and each change of size.

--batch-size is the global batch. When the world size changes, the reset callback keeps it by changing
the per-rank batch (48 = 3 x 16 = 2 x 24): each step then averages the gradient of the same number of
samples, so the learning rate stays as it was (the linear scaling rule would change the lr only if the
global batch changed). The learning rate follows CosineAnnealingLR's curve per epoch, set from the epoch
number, so a rollback needs no scheduler state. Dropout is seeded from (seed, step, rank), so a redone step
draws what any run taking that step at that rank draws: runs are reproducible step by step, failed or not.

With --checkpoint-dir, every --save-every-th commit is also a distributed checkpoint (minidl.dist.checkpoint)
there, and a job started again (by hand or by the launcher's --max-restarts after the world shrank below
--nnodes MIN) resumes from the newest one, at any world size. Rank 0 writes the final weights to --weights.
"""
import argparse
import math
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import minidl  # noqa: E402
import minidl.dist as dist  # noqa: E402
from minidl.dist import elastic  # noqa: E402
from minidl.nn.parallel import DistributedDataParallel  # noqa: E402
from minidl.optim import Adam  # noqa: E402
from minidl.utils.data import DataLoader  # noqa: E402
from minidl.vision.datasets import Digits  # noqa: E402
from cli import positive_float, positive_int  # noqa: E402
from cli.mpi import parse_on_every_rank  # noqa: E402
from train_digits import evaluate, make_model, training_step  # noqa: E402

LAUNCH = "python -m minidl.dist.run --standalone --nproc-per-node 3 examples/train_digits_elastic.py"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=positive_int, default=15)
    parser.add_argument("--batch-size", type=positive_int, default=48,
                        help="global batch, split over the workers whatever their number")
    parser.add_argument("--lr", type=positive_float, default=3e-3)
    parser.add_argument("--limit-batches", type=positive_int, default=None,
                        help="stop each epoch after this many steps")
    parser.add_argument("--max-steps", type=positive_int, default=None, help="stop training after this many steps")
    parser.add_argument("--commit-every", type=positive_int, default=10,
                        help="commit in memory every this many steps (what a failure rolls back to)")
    parser.add_argument("--checkpoint-dir", default=None,
                        help="save distributed checkpoints here, and resume from the newest one found")
    parser.add_argument("--save-every", type=positive_int, default=10,
                        help="with --checkpoint-dir: a checkpoint every this many commits")
    parser.add_argument("--kill-at", type=int, default=None, metavar="STEP",
                        help="the worker started as rank --kill-rank SIGKILLs itself as step STEP (from 0) begins")
    parser.add_argument("--kill-rank", type=int, default=1)
    parser.add_argument("--weights", default="digits-cnn-elastic.safetensors",
                        help="where rank 0 writes the final weights")
    parser.add_argument("--seed", type=int, default=0)
    args = parse_on_every_rank(parser, argv)
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        # (an elastic job's store must outlive its workers: the launcher's)
        print(f"error: train_digits_elastic.py runs under minidl's launcher, e.g.\n    {LAUNCH}", file=sys.stderr)
        sys.exit(2)

    minidl.manual_seed(args.seed)
    train_set = Digits(train=True)
    test_loader = DataLoader(Digits(train=False), batch_size=256)
    model = make_model("cnn")
    optimizer = Adam(model.parameters(), lr=args.lr)
    state = elastic.State(model, optimizer, sampler=elastic.ElasticSampler(train_set, seed=args.seed),
                          checkpoint_dir=args.checkpoint_dir,
                          save_every=args.save_every if args.checkpoint_dir else None,
                          epoch=0, batch=0, step=0, loss_sum=0.0, seen=0)
    # (only the process the launcher started as --kill-rank, in its first attempt: after the rebuild another
    # process has that rank, and a restarted job is not to die again)
    doomed = (args.kill_at is not None and os.environ.get("MINIDL_ELASTIC_JOIN") != "1"
              and int(os.environ.get("RANK", "-1")) == args.kill_rank
              and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0")
    split = {}   # the per-rank batch and its loader at the current world size

    def keep_global_batch():
        """Reset callback (the group changed size; the state is the synced commit): split the same global
        batch over the new number of workers, so every step still averages --batch-size samples' gradients
        and the learning rate need not change."""
        world = dist.get_world_size()
        per_rank = max(1, args.batch_size // world)
        if dist.get_rank() == 0:
            was = f"world size {split['world']} -> {world}: back to the commit at step {state.step} " \
                  f"(epoch {state.epoch + 1}), " if split else f"{world} workers, "
            note = "" if per_rank * world == args.batch_size else \
                f" (--batch-size {args.batch_size} does not split over {world}: {per_rank * world})"
            print(f"{was}{per_rank} samples per rank per step, global batch {args.batch_size}{note}", flush=True)
        split.update(world=world, loader=DataLoader(train_set, batch_size=per_rank, sampler=state.sampler))

    state.register_reset_callbacks([keep_global_batch])
    began = time.perf_counter()

    def finished():
        return state.epoch >= args.epochs or state.step == args.max_steps

    @elastic.run
    def train(state):
        if not split:                                   # (the first call: the group just formed)
            keep_global_batch()
            if state.step and args.checkpoint_dir and dist.get_rank() == 0:
                print(f"resumed from {args.checkpoint_dir} at step {state.step} (epoch {state.epoch + 1})",
                      flush=True)
        ddp = DistributedDataParallel(state.model)      # (on this call's group)
        step = training_step(ddp, state.optimizer)
        while not finished():
            for group in state.optimizer.param_groups:  # CosineAnnealingLR(T_max=epochs)'s curve
                group["lr"] = args.lr * (1 + math.cos(math.pi * state.epoch / args.epochs)) / 2
            ddp.train()
            for images, labels in split["loader"]:
                if state.batch == args.limit_batches or state.step == args.max_steps:
                    break
                if doomed and state.step == args.kill_at:
                    print(f"rank {dist.get_rank()} SIGKILLs itself at step {state.step}", flush=True)
                    os.kill(os.getpid(), signal.SIGKILL)
                minidl.manual_seed(hash((args.seed, state.step, dist.get_rank())) % 2 ** 63)
                loss = step(images, labels)
                state.sampler.record_batch(len(labels))
                state.loss_sum += loss.item() * len(labels)
                state.seen += len(labels)
                state.batch += 1
                state.step += 1
                if state.step % args.commit_every == 0:
                    state.commit()
            if state.step == args.max_steps:
                state.commit()
                break
            if dist.get_rank() == 0:
                print(f"epoch {state.epoch + 1:3d}  world size {dist.get_world_size()}  rank-0 loss "
                      f"{state.loss_sum / state.seen:.4f}  test accuracy {evaluate(state.model, test_loader):.4f}  "
                      f"({time.perf_counter() - began:.1f} s)", flush=True)
            state.epoch, state.batch, state.loss_sum, state.seen = state.epoch + 1, 0, 0.0, 0
            state.sampler.set_epoch(state.epoch)
            state.commit()
        return state

    train(state)
    if dist.get_rank() == 0:
        accuracy = evaluate(state.model, test_loader)
        minidl.save(state.model.state_dict(), args.weights)
        print(f"final test accuracy {accuracy:.4f} after {state.step} steps ({dist.get_world_size()} workers at "
              f"the end, {time.perf_counter() - began:.1f} s); weights: {args.weights}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
