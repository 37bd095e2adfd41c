"""The training loop of both recommender examples: one process (``--servers 0``), or launched as ranks
(by mpiexec, or one process per rank with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT: the "gloo"
backend) the last ``--servers`` ranks parameter servers and the rest workers (minidl.dist.ps).

``--mode ps`` keeps every parameter on the servers (Downpour SGD: pull, compute, push);
``--mode hybrid`` (Hetu's) keeps only the embedding tables there and replicates the dense layers,
whose gradients the workers average by all-reduce. ``--batch-size`` is the global batch: each
worker takes its slice of every batch of one shared, seeded order (the sizes differ by at most one
when they do not divide it), weights its loss by its share, and ps.DistributedModel averages the
workers' gradients; so under BSP the run is the one-process run's optimisation (its metrics equal
up to rounding), while SSP and ASP let workers run ahead on stale parameters.
Worker 0 prints one line per epoch with the held-out metrics, and at the end the staleness of the
pushes the servers applied, as a histogram picture too, and the workers the servers lost.

``--kill-worker-at STEP`` (over gloo only: under MPI a dead process ends the job) makes the last
worker SIGKILL itself at that global step: the servers drop it and the others train on without its
share of the batches. Once ps.init has run, the workers meet through ps.barrier(), never a process-group
collective, which would fail on the dead rank.

``--checkpoint-dir DIR`` (over gloo only, with ``--servers`` >= 1) makes each server checkpoint to
``DIR/server<k>/`` (every ``--checkpoint-every N`` clocks, else every 60 s) and ``--durable`` logs every
push to disk before it is acknowledged (ps.init's options of those names). A server that dies is then
restarted by hand, while the workers wait for it (``MINIDL_PS_SERVER_TIMEOUT``, 300 s)::

    python -m minidl.dist.ps --resume DIR --server K

(K: 0 for the first of the last ``--servers`` ranks). ``--kill-server-at N`` makes the last server SIGKILL
itself right after its N-th optimizer step (a push applied; under BSP an iteration's summed pushes to one
parameter), to try that: the workers print "parameter server K ... is gone", wait, and go on once it is
restarted; with ``--durable`` the restarted server has lost no acknowledged push, so a BSP run ends as an
uninterrupted one does.
"""
import argparse
import os
import signal
import sys
import textwrap
import time

import numpy as np
from tqdm import tqdm

import minidl
import minidl.dist as dist
import minidl.nn.functional as F
from minidl.dist import ps
from minidl.dist.launch import launch_rank, launched_by_env, launched_by_mpi
from cli.mpi import parse_on_every_rank

from . import data


def arguments(description, epochs, batch_size, lr, optimizer):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data", help="a MovieLens ratings file (u.data, ratings.dat or ratings.csv) or the folder "
                                       "holding it; without it, ratings are generated (see --users)")
    parser.add_argument("--servers", type=int, default=1,
                        help="parameter servers, the last ranks (0: train in one process, without mpiexec)")
    parser.add_argument("--consistency", choices=ps.CONSISTENCIES, default="bsp")
    parser.add_argument("--staleness", type=int, default=2, help="SSP's bound, in clocks")
    parser.add_argument("--mode", choices=("ps", "hybrid"), default="ps",
                        help="ps: every parameter on the servers; hybrid: the embeddings there, the dense layers "
                             "replicated and all-reduced")
    parser.add_argument("--epochs", type=int, default=epochs)
    parser.add_argument("--batch-size", type=int, default=batch_size, help="global batch, split over the workers")
    parser.add_argument("--lr", type=float, default=lr)
    parser.add_argument("--optimizer", choices=("adam", "adagrad", "sgd"), default=optimizer)
    parser.add_argument("--limit-batches", type=int, default=None, help="stop each epoch after this many batches")
    parser.add_argument("--users", type=int, default=600, help="generated ratings: users")
    parser.add_argument("--items", type=int, default=400, help="generated ratings: items")
    parser.add_argument("--per-user", type=int, default=40, help="generated ratings: ratings per user")
    parser.add_argument("--picture", help="where to draw the staleness histogram (default: <model>-staleness.png)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kill-worker-at", type=int, default=None, metavar="STEP",
                        help="the last worker SIGKILLs itself at this global step (counted from 0 over the epochs) "
                             "and the run goes on without it: over gloo only (RANK, WORLD_SIZE, MASTER_ADDR, "
                             "MASTER_PORT; under mpiexec a dead process ends the job), not with --mode hybrid; "
                             "under BSP the servers are told to shrink (ps.init(on_worker_failure='shrink'))")
    parser.add_argument("--checkpoint-dir", metavar="DIR",
                        help="the servers checkpoint to DIR/server<k>/, and one that dies is restarted with "
                             "python -m minidl.dist.ps --resume DIR --server K: over gloo only, with --servers >= 1")
    parser.add_argument("--checkpoint-every", type=int, default=None, metavar="N",
                        help="checkpoint every N clocks of the slowest worker (default: every 60 s)")
    parser.add_argument("--durable", action="store_true",
                        help="log each push to disk (fdatasync) before it is applied and acknowledged, so a "
                             "restarted server loses none")
    parser.add_argument("--kill-server-at", type=int, default=None, metavar="N",
                        help="the last server SIGKILLs itself after its N-th optimizer step (needs "
                             "--checkpoint-dir; restart it by hand as above)")
    return parser


LOCAL_OPTIMIZERS = {"adam": minidl.optim.Adam, "adagrad": minidl.optim.Adagrad, "sgd": minidl.optim.SGD}
SERVER_OPTIMIZERS = {"adam": ps.Adam, "adagrad": ps.Adagrad, "sgd": ps.SGD}


def local_optimizers(module, name, lr):
    """The one-process run's optimizers: those the servers run (ps.Adam is SparseAdam on a table)."""
    if name != "adam":
        return [LOCAL_OPTIMIZERS[name](module.parameters(), lr=lr)]
    tables = [m.weight for m in module.modules() if isinstance(m, minidl.nn.Embedding) and m.sparse]
    dense = [p for p in module.parameters() if all(p is not t for t in tables)]
    return [minidl.optim.SparseAdam(tables, lr=lr), minidl.optim.Adam(dense, lr=lr)]


def fail(message, rank):
    if rank == 0:
        print(f"error: {message}", file=sys.stderr)
    if dist.is_initialized():
        dist.destroy_process_group()
    sys.exit(2)


def check(args):
    """What is wrong with the command line, before any rank starts work (one message, from rank 0)."""
    for flag, value, least in (("--batch-size", args.batch_size, 1), ("--epochs", args.epochs, 1),
                               ("--servers", args.servers, 0), ("--staleness", args.staleness, 0),
                               ("--limit-batches", args.limit_batches, 1),
                               ("--kill-worker-at", args.kill_worker_at, 0),
                               ("--checkpoint-every", args.checkpoint_every, 1),
                               ("--kill-server-at", args.kill_server_at, 1)):
        if value is not None and value < least:
            return f"{flag} {value} must be >= {least}"
    if not args.lr > 0:   # (also NaN)
        return f"--lr {args.lr} must be a positive number"
    if args.kill_worker_at is not None:
        if args.servers == 0:
            return "--kill-worker-at kills a parameter-server worker: give --servers 1 or more"
        if args.mode == "hybrid":
            return ("--kill-worker-at with --mode hybrid: the workers' all-reduce of the dense layers cannot lose a "
                    "rank; use --mode ps")
        if launched_by_mpi() and not launched_by_env():
            return ("--kill-worker-at under mpiexec: MPI ends the whole job when one process dies; launch one process "
                    "per rank with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (the gloo backend)")
    problem = check_recovery(args)
    if problem:
        return problem
    folder = os.path.dirname(args.picture or "") or "."
    if not os.path.isdir(folder):
        return f"--picture {args.picture}: there is no folder {folder}"
    return None


def check_recovery(args):
    """What is wrong with the server-recovery flags (--checkpoint-dir, --durable, --checkpoint-every,
    --kill-server-at), or None."""
    given = [flag for flag, value in (("--durable", args.durable), ("--checkpoint-every", args.checkpoint_every),
                                      ("--kill-server-at", args.kill_server_at)) if value not in (None, False)]
    if args.checkpoint_dir is None:
        return f"{given[0]} needs --checkpoint-dir (where the servers write their checkpoints)" if given else None
    if args.servers == 0:
        return "--checkpoint-dir is where parameter servers checkpoint: give --servers 1 or more"
    if launched_by_mpi() and not launched_by_env():
        return ("--checkpoint-dir under mpiexec: MPI ends the whole job when a server dies, so it cannot be "
                "restarted; launch one process per rank with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT "
                "(the gloo backend)")
    return None


def start(args):
    """(rank among the workers, number of workers), or None on a server once it has served."""
    over_env = launched_by_env()
    if args.servers == 0:
        if launched_by_mpi() or over_env:
            fail("--servers 0 trains in one process: run it without mpiexec or RANK/WORLD_SIZE", 0)
        return 0, 1
    if not launched_by_mpi() and not over_env:
        fail(f"--servers {args.servers} needs workers beside the servers: "
             f"mpiexec -n {args.servers + 2} python {sys.argv[0]} --servers {args.servers} ..., or one process per "
             f"rank with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (the gloo backend)", 0)
    dist.init_process_group("gloo" if over_env else None)
    rank, world = dist.get_rank(), dist.get_world_size()
    workers = world - args.servers
    if workers < 1:
        fail(f"--servers {args.servers} leaves no worker among {world} ranks", rank)
    if args.batch_size < workers:
        fail(f"--batch-size {args.batch_size} leaves some of the {workers} workers no sample", rank)
    if args.kill_worker_at is not None and workers < 2:
        fail(f"--kill-worker-at kills the last worker: {world} ranks with --servers {args.servers} leave "
             f"{workers}, and at least 2 are needed for the run to go on", rank)
    shrink = "shrink" if args.kill_worker_at is not None else None   # (BSP's default would raise)
    if args.kill_server_at is not None and rank == world - 1:   # (minidl.dist.faults: read by the server)
        os.environ["MINIDL_FAULT"] = f"rank={rank} at=ps_apply:{args.kill_server_at} do=kill"
        print(f"server {args.servers - 1} (rank {rank}): will SIGKILL itself after its optimizer step "
              f"{args.kill_server_at}; restart it with python -m minidl.dist.ps --resume {args.checkpoint_dir} "
              f"--server {args.servers - 1}", file=sys.stderr, flush=True)
    if ps.init(num_servers=args.servers, consistency=args.consistency, staleness=args.staleness,
               on_worker_failure=shrink, checkpoint_dir=args.checkpoint_dir, checkpoint_every=args.checkpoint_every,
               durable=args.durable) == "server":
        dist.destroy_process_group()
        return None
    return ps.worker_rank(), workers


def run(task_class, parser, argv=None):
    args = parse_on_every_rank(parser, argv)
    problem = check(args)
    if problem:
        fail(problem, launch_rank())
    try:   # (on every rank, servers too: a bad file ends them all with one message)
        ratings = data.load(args.data, args.users, args.items, args.per_user, args.seed)
        task = task_class(ratings, args)
    except (OSError, ValueError) as e:
        fail(str(e), launch_rank())
    if task.train_size < args.batch_size:
        fail(f"--batch-size {args.batch_size}: the ratings give {task.train_size} training examples, not one batch",
             launch_rank())
    roles = start(args)
    if roles is None:
        return
    rank, workers = roles
    say = print if rank == 0 else (lambda *a, **k: None)
    minidl.manual_seed(args.seed)   # (every worker the same initial model: the servers check)
    module = task.model()
    distributed = args.servers > 0
    if distributed:
        make = SERVER_OPTIMIZERS[args.optimizer]
        model = ps.DistributedModel(module, optimizer=make(lr=args.lr), hybrid=args.mode == "hybrid",
                                    dense_optimizer=lambda params: LOCAL_OPTIMIZERS[args.optimizer](params, lr=args.lr))
        setup = f"{workers} worker(s), {args.servers} server(s), {args.consistency.upper()}" + \
                (f"({args.staleness})" if args.consistency == "ssp" else "") + f", mode {args.mode}"
    else:
        model, optimizers = module, local_optimizers(module, args.optimizer, args.lr)
        setup = "one process, no parameter server"
    source = ratings.version if args.data else "generated ratings (write_movielens, no --data)"
    say(f"{task.name} on {source} ({len(ratings)} ratings, {ratings.num_users} users, "
        f"{ratings.num_items} items): {setup}, {args.optimizer} lr {args.lr}, global batch {args.batch_size}")

    lo, hi = rank * args.batch_size // workers, (rank + 1) * args.batch_size // workers   # (this worker's slice)
    weight = (hi - lo) * workers / args.batch_size   # (its share: the averaged gradients are the batch's mean)
    victim = args.kill_worker_at is not None and rank == workers - 1
    began, step = time.perf_counter(), 0
    for epoch in range(args.epochs):
        users, items, labels = task.epoch(epoch)
        batches = len(users) // args.batch_size
        if args.limit_batches is not None:
            batches = min(batches, args.limit_batches)
        bar = tqdm(range(batches), desc=f"epoch {epoch + 1}/{args.epochs}", leave=False, file=sys.stdout,
                   disable=None if rank == 0 else True)
        total = 0.0
        for b in bar:
            if victim and step == args.kill_worker_at:
                die(rank, step)
            step += 1
            mine = slice(b * args.batch_size + lo, b * args.batch_size + hi)
            logits = model(minidl.from_numpy(users[mine]), minidl.from_numpy(items[mine]))
            loss = F.binary_cross_entropy_with_logits(logits, minidl.from_numpy(labels[mine]))
            (loss * weight if weight != 1 else loss).backward()
            if distributed:
                model.step()
            else:
                for opt in optimizers:
                    opt.step()
                    opt.zero_grad()
            total += loss.item()
            bar.set_postfix(loss=f"{total / (b + 1):.4f}", refresh=False)
        if distributed and epoch == args.epochs - 1:
            ps.barrier()   # (every surviving worker's pushes are in: the final model)
        if rank == 0:
            if distributed:
                model.pull_parameters()
            with minidl.no_grad():
                metrics = task.evaluate(module)
            shown = "  ".join(f"{name} {value:.4f}" for name, value in metrics.items())
            say(f"epoch {epoch + 1:3d}  loss {total / max(batches, 1):.4f}  {shown}  "
                f"({time.perf_counter() - began:.1f} s)")
    if rank == 0:
        say(f"final {shown} ({setup}, {time.perf_counter() - began:.1f} s)")
    if distributed:
        if rank == 0:
            stats = ps.stats()
            report_staleness(stats, args.picture or f"{task.name}-staleness.png", task.name, setup, args, workers)
            print(f"parameter server: {stats['pushes']} pushes applied, {stats['dropped_stale']} dropped as stale, "
                  f"{stats['duplicates']} duplicates, {stats['discarded']} discarded; lost workers: {lost(stats)}")
        ps.shutdown()
        dist.destroy_process_group()


def die(rank, step):
    """--kill-worker-at: this worker ends as a crash does, with no goodbye to anyone."""
    print(f"worker {rank}: killing itself (SIGKILL) at step {step}", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def lost(stats):
    """The workers the servers lost, one phrase each, or "none"."""
    def when(at):
        return time.strftime("%H:%M:%S", time.localtime(at)) + f".{int(at % 1 * 1000):03d}"
    return "; ".join(f"worker {e['worker']} at {when(e['at'])}, clock {e['clock']} ({e['pushes']} of its pushes "
                     f"applied; {e['why']})" for e in stats["lost"]) or "none"


def report_staleness(stats, path, name, setup, args, workers):
    """Print the applied pushes' staleness histogram and draw it to ``path``."""
    hist = stats["staleness"]
    counts = [hist.get(k, 0) for k in range(max(hist, default=0) + 1)]
    print(f"pushes applied by staleness (clocks ahead of the slowest worker): "
          f"{', '.join(f'{k}: {c}' for k, c in enumerate(counts))}")
    fig = staleness_figure(counts, f"{name}: staleness of the applied pushes\n{setup}",
                           why_none_stale(args, workers) if len(counts) == 1 else "")
    fig.savefig(path, dpi=100)
    print(f"staleness histogram: {path}")


def staleness_figure(counts, title, why=""):
    """The histogram of ``counts[k]`` pushes at staleness k, its ticks readable at any range; ``why``
    written on it explains a histogram whose only bar is at 0."""
    from matplotlib.figure import Figure   # (no pyplot: nothing global to open or close)
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(6, 3.4))
    ax = fig.subplots()
    ax.bar(range(len(counts)), counts, color="tab:blue")
    ax.xaxis.set_major_locator(MaxNLocator(nbins=10, integer=True))
    ax.set_xlim(-0.6, max(len(counts) - 1, 1) + 0.6)
    ax.set_xlabel("staleness (clocks ahead of the slowest worker)")
    ax.set_ylabel("pushes applied")
    ax.set_title(title, fontsize=9)
    if why:
        ax.text(0.98, 0.95, "\n".join(textwrap.wrap(f"every push at staleness 0: {why}", 40)),
                transform=ax.transAxes, ha="right", va="top", fontsize=8)
    fig.tight_layout()
    return fig


def why_none_stale(args, workers):
    """Why a run's pushes were all applied at staleness 0, from how it was set up."""
    if workers == 1:
        return "a single worker is always the slowest one"
    if args.consistency == "bsp":
        return "BSP applies an iteration's pushes only once every worker has clocked past it"
    if args.consistency == "ssp" and args.staleness == 0:
        return "SSP with --staleness 0 lets no worker run a clock ahead"
    if args.mode == "hybrid":
        return ("hybrid mode all-reduces the dense layers' gradients every step, which keeps the workers "
                "in step with each other")
    return "no worker happened to run ahead of the slowest while pushing"


def batched_scores(module, users, items, size=8192):
    """The module's logits for many (user, item) pairs, in batches, as numpy."""
    return np.concatenate([module(minidl.from_numpy(users[i:i + size]), minidl.from_numpy(items[i:i + size])).numpy()
                           for i in range(0, len(users), size)])
