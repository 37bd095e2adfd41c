"""DDP scaling: training samples/s of the digits CNN (examples/train_digits.py) with 1 and 2 ranks
(``mpiexec -n N``). Weak scaling keeps the batch per rank fixed; strong scaling (``--global-batch``)
splits one batch over the ranks, as examples/train_digits_ddp.py does. Each rank gets one compute
thread, or with ``--threads default`` the threads minidl gives it by default (the host's cores
shared out over its ranks). ``--framework torch`` runs the same model, steps and threads in PyTorch
(DistributedDataParallel over gloo, launched by the same mpiexec): the reference for what an eager
framework gets from the same ranks and cores.

    python benchmarks/ddp_scaling.py                 # weak scaling, prints a markdown table
    python benchmarks/ddp_scaling.py --batch 128 --steps 60
    python benchmarks/ddp_scaling.py --threads default --global-batch 32 --steps 200
    python benchmarks/ddp_scaling.py --threads default --global-batch 32 --steps 200 --framework torch
    python benchmarks/ddp_scaling.py --backend gloo  # minidl's socket transport instead of MPI's messages

Method: each world size is a fresh ``mpiexec`` launch; every rank builds the model (in
DistributedDataParallel, default buckets), takes ``--warmup`` steps (kernels load, buffers settle),
then a barrier, then ``--steps`` timed steps (forward, loss, zero_grad, backward with the
all-reduces, Adam step) on a fixed random batch; the time is rank 0's, over ``--repeats`` rounds,
the best round reported. Targets: weak, efficiency = samples/s(n=2) / (2 x samples/s(n=1)) >= 0.9;
strong, speed-up = samples/s(n=2) / samples/s(n=1) >= 1.7 (issue 16). On a 2-core machine n=2 is
the ideal case (one core per rank); keep the machine idle.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def start(args):
    """(framework module, its dist module, this rank's samples per step), the process group up."""
    if args.framework == "torch":
        import torch as fw
        import torch.distributed as dist
        from minidl.dist.launch import launch_rank
        dist.init_process_group("gloo", init_method=f"file://{args.rendezvous}", rank=launch_rank(),
                                world_size=int(os.environ["PMI_SIZE"]))
        fw.set_num_threads(1 if args.threads == "one" else minidl_threads(dist.get_world_size()))
    else:
        import minidl as fw
        import minidl.dist as dist
        dist.init_process_group(args.backend)   # (gloo under mpiexec: our sockets, meeting over MPI)
        if args.threads == "one":
            fw.set_num_threads(1)
    world = dist.get_world_size()
    return fw, dist, (args.global_batch // world if args.global_batch else args.batch)


def worker(args):
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import numpy as np
    from train_digits import make_model

    fw, dist, batch = start(args)
    fw.manual_seed(0)
    model = fw.nn.parallel.DistributedDataParallel(make_model("cnn", fw.nn))
    optimizer = fw.optim.Adam(model.parameters(), lr=1e-3)
    rs = np.random.RandomState(dist.get_rank())
    x = fw.from_numpy(rs.randn(batch, 1, 8, 8).astype(np.float32))
    y = fw.from_numpy(rs.randint(0, 10, batch))

    def step():
        loss = fw.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    for _ in range(args.warmup):
        step()
    best = float("inf")
    for _ in range(args.repeats):
        dist.barrier()
        start_time = time.perf_counter()
        for _ in range(args.steps):
            step()
        dist.barrier()
        best = min(best, time.perf_counter() - start_time)
    world = dist.get_world_size()
    if dist.get_rank() == 0:
        print(json.dumps({"n": world, "seconds": best, "samples_per_s": world * batch * args.steps / best,
                          "ms_per_step": best / args.steps * 1e3}))
    dist.destroy_process_group()


def launch(n, args):
    sys.path.insert(0, ROOT)
    from minidl.dist.launch import find_mpiexec
    cmd = [find_mpiexec() or "mpiexec", "-n", str(n), sys.executable, os.path.abspath(__file__), "--worker",
           "--batch", str(args.batch), "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--repeats", str(args.repeats), "--threads", args.threads, "--framework", args.framework,
           "--global-batch", str(args.global_batch or 0)] + (["--backend", args.backend] if args.backend else [])
    with tempfile.TemporaryDirectory() as tmp:  # torch's gloo rendezvous file
        out = subprocess.run(cmd + ["--rendezvous", os.path.join(tmp, "rendezvous")], capture_output=True,
                             env=dict(os.environ, PYTHONPATH=ROOT), text=True, timeout=600)
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
    parser.add_argument("--global-batch", type=int, default=0,
                        help="strong scaling: this batch split over the ranks (0: weak scaling, --batch per rank)")
    parser.add_argument("--framework", choices=("minidl", "torch"), default="minidl")
    parser.add_argument("--backend", choices=("mpi", "gloo"), help="minidl's transport (default: MPI's)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rendezvous", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    results = {n: launch(n, args) for n in (1, 2)}
    base = results[1]["samples_per_s"]
    threads = "1 thread per rank" if args.threads == "one" else f"default threads ({minidl_threads(1)} at n=1)"
    split = (f"a global batch of {args.global_batch} split over the ranks" if args.global_batch
             else f"{args.batch} samples per rank per step")
    print(f"DDP {'strong' if args.global_batch else 'weak'} scaling, {args.framework} ({args.backend or 'mpi'}), "
          f"digits CNN, {split}, {threads}\n")
    print("| ranks | ms per step | samples/s | speed-up | efficiency |")
    print("|---|---|---|---|---|")
    for n, r in results.items():
        sps = r["samples_per_s"]
        print(f"| {n} | {r['ms_per_step']:.2f} | {sps:,.0f} | {sps / base:.2f}x | {sps / (n * base):.0%} |")
    speedup = results[2]["samples_per_s"] / base
    if args.global_batch:
        print(f"\ntarget: speed-up at n=2 >= 1.7x -> {'met' if speedup >= 1.7 else 'NOT met'}")
    else:
        print(f"\ntarget: efficiency at n=2 >= 90% -> {'met' if speedup >= 1.8 else 'NOT met'}")

if __name__ == "__main__":
    main()
