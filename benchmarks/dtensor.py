"""DTensor measured (issue 54): the transitions between placements and a sharded matmul, minidl.dist.tensor beside
torch.distributed.tensor, both over gloo (minidl's socket transport and torch's own), on this machine in one run:

    python benchmarks/dtensor.py [--ranks 2] [--size 1024] [--repeats 20] [--quick]

Each library runs in ``--ranks`` processes (env://) on a 1-D CPU mesh; the tensors are float32, ``size`` x
``size``. Timed: each step from a barrier to its end on rank 0 (the collectives end together), the median of
the repeats after two warm-ups. Bytes: what each rank sent in the step (minidl's ``debug.sent_bytes``; torch
has no such counter), beside the prediction of the algorithm (ring all-gather and reduce-scatter: (k-1)/k of
the tensor; ring all-reduce: twice that; all-to-all: (k-1)/k of a rank's piece; a split of a whole tensor:
nothing). Every result is checked against the whole tensor on every rank. Ranks started here run this file
again, with DTENSOR_BENCH_ROLE naming the library.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

from _bench_common import cpu_model
from _gloo_ranks import results

# step -> (what it does, predicted bytes sent per rank as a fraction of the tensor's bytes, for k ranks)
STEPS = {
    "S(0) -> R": ("all-gather", lambda k: (k - 1) / k),
    "P(sum) -> R": ("all-reduce", lambda k: 2 * (k - 1) / k),
    "P(sum) -> S(0)": ("reduce-scatter", lambda k: (k - 1) / k),
    "S(0) -> S(1)": ("all-to-all", lambda k: (k - 1) / k / k),
    "R -> S(0)": ("local slice", lambda k: 0.0),
    "S(0) @ R -> S(0)": ("matmul, no communication", lambda k: 0.0),
    "S(1) @ S(0) -> P(sum)": ("matmul, no communication", lambda k: 0.0),
    "S(1) @ S(0) -> R": ("matmul + all-reduce", lambda k: 2 * (k - 1) / k),
}


# ----------------------------------------------------------------------------------------------- one rank
class Minidl:
    name = "minidl"

    def __init__(self):
        import minidl
        import minidl.dist as dist
        from minidl.dist import debug
        from minidl.dist.device_mesh import init_device_mesh
        from minidl.dist.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
        dist.init_process_group("gloo")
        self.lib, self.dist, self.debug = minidl, dist, debug
        self.mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        self.DTensor, self.distribute = DTensor, distribute_tensor
        self.S, self.R, self.P = Shard, Replicate, Partial
        self.rank, self.size = dist.get_rank(), dist.get_world_size()

    def tensor(self, array):
        return self.lib.from_numpy(array)

    def numpy(self, t):
        return t.numpy()

    def sent(self):
        return self.debug.sent_bytes(self.mesh.get_group())

    def done(self, d):
        return d

    def barrier(self):
        self.dist.barrier()

    def close(self):
        self.dist.destroy_process_group()


class Torch(Minidl):
    name = "torch"

    def __init__(self):
        import torch
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
        torch.set_num_threads(1)
        dist.init_process_group("gloo")
        self.lib, self.dist = torch, dist
        self.mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        self.DTensor, self.distribute = DTensor, distribute_tensor
        self.S, self.R, self.P = Shard, Replicate, Partial
        self.rank, self.size = dist.get_rank(), dist.get_world_size()

    def sent(self):
        return None

    def done(self, d):
        local = d.to_local()
        return local.wait() if hasattr(local, "wait") else local


def _steps(lib, a, b):
    """step -> (a callable doing it, the whole tensor its result must be)."""
    S, R, P, mesh, size = lib.S, lib.R, lib.P, lib.mesh, lib.size
    ta, tb = lib.tensor(a), lib.tensor(b)
    s0 = lib.distribute(ta, mesh, [S(0)])
    whole = lib.distribute(ta, mesh, [R()])
    partial = lib.DTensor.from_local(lib.tensor(a / size), mesh, [P()])
    x1, w0, wr = lib.distribute(ta, mesh, [S(1)]), lib.distribute(tb, mesh, [S(0)]), lib.distribute(tb, mesh, [R()])
    return {
        "S(0) -> R": (lambda: s0.redistribute(mesh, [R()]), a),
        "P(sum) -> R": (lambda: partial.redistribute(mesh, [R()]), a),
        "P(sum) -> S(0)": (lambda: partial.redistribute(mesh, [S(0)]), a),
        "S(0) -> S(1)": (lambda: s0.redistribute(mesh, [S(1)]), a),
        "R -> S(0)": (lambda: whole.redistribute(mesh, [S(0)]), a),
        "S(0) @ R -> S(0)": (lambda: s0 @ wr, a @ b),
        "S(1) @ S(0) -> P(sum)": (lambda: x1 @ w0, a @ b),
        "S(1) @ S(0) -> R": (lambda: (x1 @ w0).redistribute(mesh, [R()]), a @ b),
    }


def rank_main():
    setting = json.loads(os.environ["DTENSOR_BENCH_SETTING"])
    lib = {"minidl": Minidl, "torch": Torch}[os.environ["DTENSOR_BENCH_ROLE"]]()
    rng = np.random.default_rng(54)
    n = setting["size"]
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    result = {"rank": lib.rank}
    for name, (step, want) in _steps(lib, a, b).items():
        times, sent = [], None
        for i in range(setting["warmup"] + setting["repeats"]):
            lib.barrier()
            before = lib.sent()
            start = time.perf_counter()
            out = step()
            lib.done(out)
            times.append(time.perf_counter() - start)
            if before is not None:
                sent = lib.sent() - before
        ok = bool(np.allclose(lib.numpy(out.full_tensor()), want, rtol=1e-4, atol=1e-3))
        result[name] = {"time": statistics.median(times[setting["warmup"]:]), "sent": sent, "ok": ok}
    print("RESULT " + json.dumps(result), flush=True)
    lib.close()


# --------------------------------------------------------------------------------------------- the launcher
def launch(folder, ranks, role, setting):
    env = {"DTENSOR_BENCH_ROLE": role, "DTENSOR_BENCH_SETTING": json.dumps(setting), "OMP_NUM_THREADS": "1",
           "NUMBA_NUM_THREADS": "1"}
    return results([sys.executable, os.path.abspath(__file__)], ranks, folder, role, env)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 128 x 128, 3 repeats")
    args = parser.parse_args(argv)
    setting = {"size": 128 if args.quick else args.size, "repeats": 3 if args.quick else args.repeats, "warmup": 2}
    k, n = args.ranks, setting["size"]
    print(f"## DTensor: {k} ranks over gloo, float32 {n} x {n} ({n * n * 4 / 1e6:.1f} MB); CPU: {cpu_model()}; "
          f"load average at the start {os.getloadavg()[0]:.2f}; median of {setting['repeats']} after "
          f"{setting['warmup']} warm-ups\n")
    with tempfile.TemporaryDirectory() as folder:
        results = {role: launch(folder, k, role, setting) for role in ("minidl", "torch")}
    for role, found in results.items():
        if isinstance(found, str):
            print(f"{role}: {found}\n")
    print("| step | what moves | minidl ms | torch ms | minidl / torch | sent per rank, minidl (KB) | predicted (KB) "
          "| values |\n|---|---|---:|---:|---:|---:|---:|---|")
    tensor_bytes = n * n * 4
    for name, (what, fraction) in STEPS.items():
        row = {role: (found[0][name] if not isinstance(found, str) else None) for role, found in results.items()}
        ms = {role: (f"{r['time'] * 1e3:.2f}" if r else "—") for role, r in row.items()}
        ratio = (f"{row['minidl']['time'] / row['torch']['time']:.2f}" if row["minidl"] and row["torch"] else "—")
        sent = [f[name]["sent"] for f in results["minidl"]] if not isinstance(results["minidl"], str) else None
        ok = all(f[name]["ok"] for found in results.values() if not isinstance(found, str) for f in found)
        print(f"| {name} | {what} | {ms['minidl']} | {ms['torch']} | {ratio} | "
              f"{'/'.join(f'{s / 1e3:.1f}' for s in sent) if sent else '—'} | "
              f"{fraction(k) * tensor_bytes / 1e3:.1f} | {'right' if ok else 'WRONG'} |")
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    rank_main() if "DTENSOR_BENCH_ROLE" in os.environ else main()
