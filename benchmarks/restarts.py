"""Restarts of `python -m minidl.dist.run`: a worker SIGKILLed mid-training, the group restarted, staggered starts.

    python benchmarks/restarts.py              # 10 runs
    python benchmarks/restarts.py --runs 3

Each run launches ``python -m minidl.dist.run --standalone --nproc-per-node 2 --max-restarts 1
--monitor-interval 0.1`` on this file's worker (and, for the comparison, torchrun with the same flags on the same
worker written with torch: only the import differs): a data-parallel step loop (a small MLP under
DistributedDataParallel, on the gloo transport) that prints each step's wall-clock time. Once the first attempt
has taken 20 steps, this script SIGKILLs rank 1 (its pid, printed by the worker) and notes the time. In the
restarted attempt rank 1 sleeps 2 s before ``init_process_group`` (the staggered start PyTorch 2.13's own launcher
failed on here). A run succeeds when the launcher exits 0 after the restarted group's 30 steps; one still going
after 90 s is a hang, killed and counted as a failure. Reported: the
successes, and the time from the SIGKILL to the restarted group's first step (median and range).
"""
import argparse
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HANG_SECONDS = 90   # a run still going after this long is a hang: killed, and counted as a failed restart


def say(line):
    """One write per line (print writes the newline apart: two ranks' lines would interleave on the pipe)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def worker(framework):
    attempt, rank = int(os.environ["TORCHELASTIC_RESTART_COUNT"]), int(os.environ["RANK"])
    if attempt == 1 and rank == 1:
        time.sleep(2.0)
    if framework == "torch":
        import torch as minidl
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
    else:
        import minidl
        import minidl.dist as dist
        from minidl.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("gloo")
    say(f"PID {os.getpid()} RANK {rank} ATTEMPT {attempt}")
    minidl.manual_seed(0)
    model = DDP(minidl.nn.Sequential(minidl.nn.Linear(32, 64), minidl.nn.ReLU(), minidl.nn.Linear(64, 1)))
    opt = minidl.optim.SGD(model.parameters(), lr=0.01)
    x, y = minidl.randn(64, 32), minidl.randn(64, 1)
    for step in range(100000 if attempt == 0 else 30):
        opt.zero_grad()
        minidl.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        if rank == 0:
            say(f"STEP {time.time()!r} ATTEMPT {attempt} {step}")
    dist.destroy_process_group()


def end(launcher):
    """Kill the launcher's process group and the workers it leaves behind (torchrun's live on in process groups
    of their own, holding the output pipe open)."""
    if launcher.poll() is None:
        os.killpg(launcher.pid, signal.SIGKILL)
    subprocess.run(["pkill", "-9", "-f", f"{os.path.abspath(__file__)} --worker"], check=False)
    launcher.wait()


def run_once(framework):
    """(succeeded, seconds from the SIGKILL to the restarted group's first step, or None)."""
    launcher = "torch.distributed.run" if framework == "torch" else "minidl.dist.run"
    command = [sys.executable, "-m", launcher, "--standalone", "--nproc-per-node", "2", "--max-restarts",
               "1", "--monitor-interval", "0.1", os.path.abspath(__file__), "--worker", framework]
    launcher = subprocess.Popen(command, env=dict(os.environ, PYTHONPATH=ROOT), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
    pids, killed, first, steps = {}, None, None, 0
    watchdog = threading.Timer(HANG_SECONDS, end, (launcher,))   # (a hang: a failure)
    watchdog.start()
    try:
        for line in launcher.stdout:
            words = line.split()
            if words[:1] == ["PID"]:
                pids[(int(words[3]), int(words[5]))] = int(words[1])
            elif words[:1] == ["STEP"] and words[3] == "0":
                steps += 1
                if steps == 20 and killed is None:
                    killed = time.time()
                    os.kill(pids[(1, 0)], signal.SIGKILL)
            elif words[:1] == ["STEP"] and words[3] == "1" and first is None:
                first = float(words[1])
        launcher.wait(timeout=120)
    finally:
        watchdog.cancel()
        end(launcher)
    ok = launcher.returncode == 0 and first is not None
    return ok, (first - killed) if ok else None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--frameworks", nargs="+", default=["minidl", "torch"], choices=["minidl", "torch"],
                   help="minidl's launcher and workers, and torchrun with torch's (the same script)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args.worker)
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    for framework in args.frameworks:
        results = [run_once(framework) for _ in range(args.runs)]
        delays = [d for ok, d in results if ok]
        print(f"{framework}: restarts that succeeded: {len(delays)} of {args.runs}")
        if delays:
            print(f"{framework}: SIGKILL to the restarted group's first step: median {statistics.median(delays):.2f} s "
                  f"(range {min(delays):.2f}-{max(delays):.2f} s; includes rank 1's 2 s staggered start)")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
