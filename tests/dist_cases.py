"""Collective cases shared by the sim tests and the mpiexec script: each rank builds its inputs
from (rank, case) alone, so every rank can compute the numpy oracle of every other rank's data.

``run_all(rank, size)`` runs every collective over dtypes, sizes and ops on the default group
and returns the list of failures (strings); it is meant to run on every rank at once.
"""
import numpy as np

import minidl
import minidl.dist as dist

DTYPES = (minidl.float32, minidl.float64, minidl.int64, minidl.int32, minidl.uint8, minidl.bool)
SIZES = (0, 1, 7, 1001)
OPS = (dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.AVG)
_ORACLE = {dist.ReduceOp.SUM: np.add, dist.ReduceOp.AVG: np.add, dist.ReduceOp.PRODUCT: np.multiply,
           dist.ReduceOp.MAX: np.maximum, dist.ReduceOp.MIN: np.minimum}


def data(rank, case, numel, dtype):
    """Rank ``rank``'s input for ``case``: small values so int products don't overflow."""
    rng = np.random.default_rng([rank, case, numel])
    np_dtype = minidl.tensor([], dtype=dtype).numpy().dtype
    if np_dtype == np.bool_:
        return rng.random(numel) < 0.7
    if np_dtype.kind == "f":
        return rng.uniform(0.5, 1.5, numel).astype(np_dtype)
    return rng.integers(0, 3, numel).astype(np_dtype)


def reduced(arrays, op):
    out = arrays[0].copy()
    for a in arrays[1:]:
        _ORACLE[op](out, a, out=out)
    return out / len(arrays) if op is dist.ReduceOp.AVG else out


def _close(got, want):
    if got.dtype.kind == "f":
        return got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-6)
    return got.shape == want.shape and np.array_equal(got, want)


def run_all(rank, size, dtypes=DTYPES, sizes=SIZES):
    failures = []
    case = 0

    def expect(name, got, want):
        if not _close(np.asarray(got), np.asarray(want)):
            failures.append(f"rank {rank}: {name}: got {np.asarray(got)[:5]} want {np.asarray(want)[:5]}")

    for dtype in dtypes:
        for numel in sizes:
            case += 1
            label = f"{dtype.name}[{numel}]"
            mine = lambda r, k=0: data(r, case * 100 + k, numel, dtype)  # noqa: E731
            everyone = [mine(r) for r in range(size)]
            for op in OPS:
                if op is dist.ReduceOp.AVG and not dtype.is_floating_point:
                    continue
                t = minidl.from_numpy(mine(rank).copy())
                dist.all_reduce(t, op=op)
                expect(f"all_reduce {op} {label}", t.numpy(), reduced(everyone, op))
                root = case % size
                t = minidl.from_numpy(mine(rank).copy())
                dist.reduce(t, root, op=op)
                expect(f"reduce {op} {label}", t.numpy(), reduced(everyone, op) if rank == root else mine(rank))
                parts = [minidl.from_numpy(mine(rank, k + 1)) for k in range(size)]
                out = minidl.from_numpy(np.zeros(numel, everyone[0].dtype))
                dist.reduce_scatter(out, parts, op=op)
                expect(f"reduce_scatter {op} {label}", out.numpy(),
                       reduced([mine(r, rank + 1) for r in range(size)], op))
                flat = minidl.from_numpy(np.concatenate([mine(rank, k + 1) for k in range(size)]))
                out = minidl.from_numpy(np.zeros(numel, everyone[0].dtype))
                dist.reduce_scatter_tensor(out, flat, op=op)
                expect(f"reduce_scatter_tensor {op} {label}", out.numpy(),
                       reduced([mine(r, rank + 1) for r in range(size)], op))
                expect(f"reduce_scatter_tensor {op} {label} (its input untouched)", flat.numpy(),
                       np.concatenate([mine(rank, k + 1) for k in range(size)]))
            root = (case + 1) % size
            t = minidl.from_numpy(mine(rank).copy())
            dist.broadcast(t, root)
            expect(f"broadcast {label}", t.numpy(), everyone[root])
            outs = [minidl.from_numpy(np.zeros(numel, everyone[0].dtype)) for _ in range(size)]
            dist.all_gather(outs, minidl.from_numpy(mine(rank)))
            for r in range(size):
                expect(f"all_gather {label} [{r}]", outs[r].numpy(), everyone[r])
            stacked = minidl.from_numpy(np.zeros((size, numel), everyone[0].dtype))
            dist.all_gather_into_tensor(stacked, minidl.from_numpy(mine(rank)))
            expect(f"all_gather_into_tensor {label}", stacked.numpy(), np.stack(everyone))
            outs = [minidl.from_numpy(np.zeros(numel, everyone[0].dtype)) for _ in range(size)]
            dist.gather(minidl.from_numpy(mine(rank)), outs if rank == root else None, dst=root)
            if rank == root:
                for r in range(size):
                    expect(f"gather {label} [{r}]", outs[r].numpy(), everyone[r])
            t = minidl.from_numpy(np.zeros(numel, everyone[0].dtype))
            sources = [minidl.from_numpy(mine(rank, k + 1)) for k in range(size)]
            dist.scatter(t, sources if rank == root else None, src=root)
            expect(f"scatter {label}", t.numpy(), mine(root, rank + 1))
            ins = [minidl.from_numpy(mine(rank, k + 1)) for k in range(size)]
            outs = [minidl.from_numpy(np.zeros(numel, everyone[0].dtype)) for _ in range(size)]
            dist.all_to_all(outs, ins)
            for r in range(size):
                expect(f"all_to_all {label} [{r}]", outs[r].numpy(), mine(r, rank + 1))
    dist.barrier()
    return failures


def any_source_failures(rank, size) -> list:
    """Every rank but 0 sends to rank 0, which receives from any source: each sender once."""
    out = minidl.zeros(11)
    if rank != 0:
        dist.send(minidl.full((11,), float(rank)), 0)
        return []
    found = sorted(dist.recv(out) for _ in range(size - 1))
    return [] if found == list(range(1, size)) else [f"recv from any source: {found}"]
