"""How long survivors take to learn that a rank died: SIGKILL one rank of a gloo job mid-collective.

    python benchmarks/dead_peer.py              # 4 ranks, 5 kills
    python benchmarks/dead_peer.py --ranks 2 --kills 3

Each trial starts N processes with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set; they call
``init_process_group("gloo")`` and all-reduce 1 MiB tensors in a loop. Once every rank has run 20 of them, the
parent SIGKILLs rank 1 (the wall clock of the kill, ``time.time()``, is taken just before the signal) and each
survivor prints the wall-clock time at which its operation raised the DistError naming rank 1. Reported per
trial: the slowest survivor's delay from the kill, and the median over trials. The machine's clock is shared
by every process, so the delays need no synchronisation.
"""
import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def worker():
    import minidl
    import minidl.dist as dist
    dist.init_process_group("gloo")
    t, done = minidl.ones(1 << 18), 0
    try:
        while True:
            dist.all_reduce(t)
            done += 1
            if done == 20:
                print("READY", flush=True)
    except dist.DistError as e:
        print(f"CAUGHT {time.time()!r} {str(e).splitlines()[0]}", flush=True)


def trial(n):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=ROOT, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(n))
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"], env=dict(env, RANK=str(r)),
                              stdout=subprocess.PIPE, text=True) for r in range(n)]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "READY"
        killed = time.time()
        procs[1].send_signal(signal.SIGKILL)
        delays = []
        for r, p in enumerate(procs):
            if r != 1:
                line = p.stdout.readline().split(" ", 2)
                assert line[0] == "CAUGHT" and "rank 1" in line[2], line
                delays.append(float(line[1]) - killed)
        return max(delays)
    finally:
        for p in procs:
            p.kill()
            p.wait()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--kills", type=int, default=5)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker()
    delays = [trial(args.ranks) for _ in range(args.kills)]
    print(f"{args.ranks} ranks, {args.kills} kills: slowest survivor's error {statistics.median(delays) * 1e3:.1f} ms "
          f"after the SIGKILL (median; trials: {', '.join(f'{d * 1e3:.1f}' for d in delays)} ms)")


if __name__ == "__main__":
    main()
