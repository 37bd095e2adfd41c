"""DDP weak scaling: training samples/s of the digits CNN (examples/train_digits.py) at a fixed
per-rank batch, with 1 and 2 ranks of one thread each (``mpiexec -n N``), or with the threads
minidl gives each rank by default (``--threads default``: the host's cores shared out over its ranks).

    python benchmarks/ddp_scaling.py                 # both world sizes, prints a markdown table
    python benchmarks/ddp_scaling.py --batch 128 --steps 60
    python benchmarks/ddp_scaling.py --threads default

Method: each world size is a fresh ``mpiexec`` launch; every rank builds the model (in
DistributedDataParallel, default buckets), takes ``--warmup`` steps (kernels load, buffers settle),
then a barrier, then ``--steps`` timed steps (forward, loss, zero_grad, backward with the
all-reduces, Adam step) on a fixed random batch; the time is rank 0's, over ``--repeats`` rounds,
the best round reported. Target: efficiency = samples/s(n=2) / (2 x samples/s(n=1)) >= 0.9.
On a 2-core machine n=2 is the ideal case (one core per rank); keep the machine idle.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def worker(args):
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import numpy as np

    import minidl
    import minidl.dist as dist
    from minidl.nn import functional as F
    from minidl.nn.parallel import DistributedDataParallel
    from train_digits import make_model

    dist.init_process_group()
    if args.threads == "one":
        minidl.set_num_threads(1)
    minidl.manual_seed(0)
    model = DistributedDataParallel(make_model("cnn"))
    optimizer = minidl.optim.Adam(model.parameters(), lr=1e-3)
    rs = np.random.RandomState(dist.get_rank())
    x = minidl.from_numpy(rs.randn(args.batch, 1, 8, 8).astype(np.float32))
    y = minidl.from_numpy(rs.randint(0, 10, args.batch))

    def step():
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    for _ in range(args.warmup):
        step()
    best = float("inf")
    for _ in range(args.repeats):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        dist.barrier()
        best = min(best, time.perf_counter() - start)
    world = dist.get_world_size()
    if dist.get_rank() == 0:
        print(json.dumps({"n": world, "seconds": best, "samples_per_s": world * args.batch * args.steps / best}))
    dist.destroy_process_group()


def launch(n, args):
    sys.path.insert(0, ROOT)
    from minidl.dist.launch import find_mpiexec
    cmd = [find_mpiexec() or "mpiexec", "-n", str(n), sys.executable, os.path.abspath(__file__), "--worker",
           "--batch", str(args.batch), "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--repeats", str(args.repeats), "--threads", args.threads]
    out = subprocess.run(cmd, env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit(f"mpiexec -n {n} failed:\n{out.stdout}\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def minidl_threads(n: int) -> int:
    """The compute threads minidl gives each of n ranks on this machine by default."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // n)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64, help="samples per rank per step")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", choices=("one", "default"), default="one",
                        help="one compute thread per rank, or minidl's default share of the cores")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    results = {n: launch(n, args) for n in (1, 2)}
    base = results[1]["samples_per_s"]
    threads = "1 thread per rank" if args.threads == "one" else f"default threads ({minidl_threads(1)} at n=1)"
    print(f"DDP weak scaling, digits CNN, {args.batch} samples per rank per step, {threads}\n")
    print("| ranks | samples/s | speed-up | efficiency |")
    print("|---|---|---|---|")
    for n, r in results.items():
        sps = r["samples_per_s"]
        print(f"| {n} | {sps:,.0f} | {sps / base:.2f}x | {sps / (n * base):.0%} |")
    print(f"\ntarget: efficiency at n=2 >= 90% -> {'met' if results[2]['samples_per_s'] >= 1.8 * base else 'NOT met'}")


if __name__ == "__main__":
    main()
