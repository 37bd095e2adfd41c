"""minidl.dist.checkpoint measured (issue 51), beside numpy writing the same bytes and beside
torch.distributed.checkpoint on the same state, machine and run:

    python benchmarks/dcp.py [--part throughput|reshard|all] [--quick]

The state is model-like: 4 float32 weights of 4096 x 1024 and Adam's two moments of each (12 tensors,
201 MB; --quick: 512 x 512, 12.6 MB), the same seeded numbers in minidl and in torch.

throughput: 4 ranks as processes over gloo (env://; minidl's "gloo" and torch's own), each rank holding
            (a) the whole state (replicated, as under DDP) and (b) a quarter of every tensor's rows (minidl:
            ``LocalSlice``; torch: ``DTensor`` with ``Shard(0)`` on a 4-rank CPU mesh). ``save`` then ``load``
            of each, into a fresh folder each time, timed from a barrier to a barrier; the median of the
            repeats after one warm-up. Beside them each rank writes the bytes of its share (a quarter of every
            tensor's rows, in both states: what a deduplicating save writes per rank) with ``ndarray.tofile``
            into one file, fsync of it and of the folder, and reads back with ``np.fromfile`` what the
            state needs (replicated: every rank's file; row-split: its own).
reshard:    the row-split checkpoint of 4 ranks loaded on 2 ranks split by rows, on 2 ranks split by
            columns, and in one process (no_dist, whole tensors): wall time and the bytes each rank read
            against the bytes its boxes need (minidl: ``FileSystemReader.bytes_read``; torch has no such
            counter: the process's ``rchar`` of /proc/self/io, every byte passed to read()).

Every load is checked against the numbers saved. Reads after a save may come from the page cache (the
benchmark drops nothing), so load figures are those of a warm cache, not of the disk. Ranks started here
run this file again, with DCP_BENCH_ROLE saying what to do.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _bench_common import cpu_model
from _gloo_ranks import results

SHAPES = {"full": (4096, 1024), "quick": (512, 512)}
LAYERS = 4
RANKS = 4
MB = 1e6


# ----------------------------------------------------------------------------------------------- the state
def arrays(shape) -> dict:
    """The state's numbers by flat key: each layer's weight and Adam's exp_avg and exp_avg_sq of it."""
    rng = np.random.default_rng(51)
    out = {}
    for i in range(LAYERS):
        out[f"model.layer{i}.weight"] = rng.standard_normal(shape, dtype=np.float32)
        out[f"optim.layer{i}.exp_avg"] = rng.standard_normal(shape, dtype=np.float32) * np.float32(1e-3)
        out[f"optim.layer{i}.exp_avg_sq"] = rng.random(shape, dtype=np.float32) * np.float32(1e-6)
    return out


def box(shape, split: str, parts: int, index: int):
    """(offsets, sizes) of part ``index`` of ``parts`` of a tensor cut along rows or columns ("whole": all)."""
    if split == "whole":
        return (0, 0), tuple(shape)
    dim = {"rows": 0, "cols": 1}[split]
    if shape[dim] % parts:
        raise ValueError(f"{shape} does not split evenly into {parts} along {split}")
    step = shape[dim] // parts
    offsets, sizes = [0, 0], list(shape)
    offsets[dim], sizes[dim] = index * step, step
    return tuple(offsets), tuple(sizes)


def part_of(array, offsets, sizes):
    return array[tuple(slice(o, o + s) for o, s in zip(offsets, sizes))]


class Lib:
    """What a rank does with one library: start, barrier, build a state (to save, or zeros to load into),
    save, load, and read a loaded state back as numpy."""

    def __init__(self, name: str, distributed: bool):
        self.name, self.distributed = name, distributed
        if name == "minidl":
            import minidl
            import minidl.dist as dist
            import minidl.dist.checkpoint as dcp
            self.m, self.dist, self.dcp = minidl, dist, dcp
        else:
            import torch
            import torch.distributed as dist
            import torch.distributed.checkpoint as dcp
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.tensor import DTensor, Shard
            self.m, self.dist, self.dcp = torch, dist, dcp
            self.DTensor, self.Shard, self.init_device_mesh = DTensor, Shard, init_device_mesh
        self.rank, self.size = 0, 1
        if distributed:
            self.dist.init_process_group("gloo")
            self.rank, self.size = self.dist.get_rank(), self.dist.get_world_size()
            self.mesh = self.init_device_mesh("cpu", (self.size,)) if name == "torch" else None

    def barrier(self):
        if self.distributed:
            self.dist.barrier()

    def close(self):
        if self.distributed:
            self.dist.destroy_process_group()

    def state(self, numbers: dict, split: str, zeros: bool) -> dict:
        """This rank's state: every tensor whole ("whole"), or its box of a split across the ranks."""
        out = {}
        for key, a in numbers.items():
            offsets, sizes = box(a.shape, split, self.size, self.rank)
            local = np.zeros(sizes, np.float32) if zeros else np.ascontiguousarray(part_of(a, offsets, sizes))
            t = self.m.from_numpy(local)
            if split == "whole":
                out[key] = t
            elif self.name == "minidl":
                out[key] = self.dcp.LocalSlice(t, offsets, a.shape)
            else:
                dim = 0 if split == "rows" else 1
                out[key] = self.DTensor.from_local(t, self.mesh, [self.Shard(dim)], run_check=False,
                                                   shape=self.m.Size(a.shape), stride=(a.shape[1], 1))
        return out

    def save(self, state, folder):
        self.dcp.save(state, checkpoint_id=folder, no_dist=not self.distributed)

    def load(self, state, folder) -> int | None:
        """Load into ``state``; the bytes the reader read (minidl's counter; None for torch)."""
        if self.name == "minidl":
            reader = self.dcp.FileSystemReader(folder)
            self.dcp.load(state, storage_reader=reader, no_dist=not self.distributed)
            return reader.bytes_read
        self.dcp.load(state, checkpoint_id=folder, no_dist=not self.distributed)
        return None

    def numbers(self, value) -> np.ndarray:
        if self.name == "minidl":
            return (value.tensor if isinstance(value, self.dcp.LocalSlice) else value).numpy()
        return (value.to_local() if isinstance(value, self.DTensor) else value).numpy()


def matches(lib: Lib, state: dict, numbers: dict, split: str) -> bool:
    """Whether a loaded state holds this rank's boxes of the saved numbers, exactly."""
    return all(np.array_equal(lib.numbers(state[k]), part_of(a, *box(a.shape, split, lib.size, lib.rank)))
               for k, a in numbers.items())


def rchar() -> int:
    with open("/proc/self/io") as f:
        return int(re.search(r"rchar: (\d+)", f.read()).group(1))


def timed(lib: Lib, fn):
    """(seconds from a barrier to a barrier around ``fn()``, its result)."""
    lib.barrier()
    began = time.perf_counter()
    out = fn()
    lib.barrier()
    return time.perf_counter() - began, out


def held_bytes(numbers: dict, split: str, size: int, rank: int) -> int:
    return sum(np.prod(box(a.shape, split, size, rank)[1]) * a.itemsize for a in numbers.values())


# ------------------------------------------------------------------------------------------------ the ranks
def rank_throughput(setting):
    """Save and load the replicated, then the row-split, state; then numpy writing and reading the same bytes."""
    lib = Lib(setting["lib"], True)
    numbers, base, runs = arrays(tuple(setting["shape"])), setting["dir"], setting["warmup"] + setting["repeats"]
    result = {"rank": lib.rank}
    for split, label in (("whole", "replicated"), ("rows", "row-split")):
        state = lib.state(numbers, split, zeros=False)
        saves, loads, written, ok = [], [], [], True
        for i in range(runs):
            folder = os.path.join(base, f"{lib.name}-{split}-{i}")
            seconds, _ = timed(lib, lambda: lib.save(state, folder))
            saves.append(seconds)
            written.append(sum(p.stat().st_size for p in Path(folder).glob(f"__{lib.rank}_*")))
            target = lib.state(numbers, split, zeros=True)
            seconds, _ = timed(lib, lambda: lib.load(target, folder))
            loads.append(seconds)
            ok = ok and matches(lib, target, numbers, split)
            lib.barrier()
            if lib.rank == 0:
                shutil.rmtree(folder)
        skip = setting["warmup"]
        result[label] = {"save": saves[skip:], "load": loads[skip:], "written": written[-1], "ok": ok,
                         "held": int(held_bytes(numbers, split, lib.size, lib.rank))}
    if lib.name == "minidl":
        for label, everyone in (("replicated", True), ("row-split", False)):
            result["numpy " + label] = numpy_baseline(lib, numbers, base, runs, setting["warmup"], everyone)
    print("RESULT " + json.dumps(result), flush=True)
    lib.close()


def numpy_baseline(lib: Lib, numbers: dict, base: str, runs: int, skip: int, everyone: bool) -> dict:
    """Each rank writes its quarter of every tensor's rows with tofile (fsync of the file and the folder), then
    reads back with fromfile every rank's file (``everyone``: the replicated state) or its own."""
    share = [np.ascontiguousarray(part_of(a, *box(a.shape, "rows", lib.size, lib.rank))) for a in numbers.values()]
    saves, loads, ok = [], [], True
    for i in range(runs):
        folder = os.path.join(base, f"numpy-{everyone:d}-{i}")
        if lib.rank == 0:
            os.makedirs(folder)
        lib.barrier()

        def write():
            with open(os.path.join(folder, f"rank{lib.rank}.bin"), "wb") as f:
                for a in share:
                    a.tofile(f)
                f.flush()
                os.fsync(f.fileno())
            fd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

        def read():
            ranks = range(lib.size) if everyone else [lib.rank]
            return {r: np.fromfile(os.path.join(folder, f"rank{r}.bin"), np.float32) for r in ranks}
        saves.append(timed(lib, write)[0])
        seconds, got = timed(lib, read)
        loads.append(seconds)
        ok = ok and np.array_equal(got[lib.rank], np.concatenate([a.ravel() for a in share]))
        lib.barrier()
        if lib.rank == 0:
            shutil.rmtree(folder)
    written = sum(a.nbytes for a in share)
    return {"save": saves[skip:], "load": loads[skip:], "written": written, "ok": ok,
            "held": written * (lib.size if everyone else 1)}


def rank_save(setting):
    """Reshard, step 1: the row-split state saved once on every rank."""
    lib = Lib(setting["lib"], True)
    lib.save(lib.state(arrays(tuple(setting["shape"])), "rows", zeros=False), setting["dir"])
    print("RESULT " + json.dumps({"rank": lib.rank}), flush=True)
    lib.close()


def rank_reshard(setting):
    """Reshard, step 2: the checkpoint loaded in each split of ``setting["splits"]``, timed, bytes counted."""
    lib = Lib(setting["lib"], setting["distributed"])
    numbers = arrays(tuple(setting["shape"]))
    result = {"rank": lib.rank}
    for split in setting["splits"]:
        times, read, counted, ok = [], [], [], True
        for _ in range(setting["warmup"] + setting["repeats"]):
            target = lib.state(numbers, split, zeros=True)
            before = rchar()
            seconds, by_reader = timed(lib, lambda: lib.load(target, setting["dir"]))
            times.append(seconds)
            read.append(rchar() - before)
            counted.append(by_reader)
            ok = ok and matches(lib, target, numbers, split)
        result[split] = {"time": times[setting["warmup"]:], "rchar": read[-1], "bytes_read": counted[-1], "ok": ok,
                         "needed": int(held_bytes(numbers, split, lib.size, lib.rank))}
    print("RESULT " + json.dumps(result), flush=True)
    lib.close()


# --------------------------------------------------------------------------------------------- the launcher
def launch(folder, n, role, setting, tag):
    """Every rank's RESULT (in rank order), or a string saying what failed."""
    env = {"DCP_BENCH_ROLE": role, "DCP_BENCH_SETTING": json.dumps(setting)}
    return results([sys.executable, os.path.abspath(__file__)], n, folder, tag, env)


def rate(nbytes, seconds):
    return f"{nbytes / MB / seconds:,.0f}"


def part_throughput(folder, sizes, libs):
    shape, warmup, repeats = sizes
    total = LAYERS * 3 * np.prod(shape) * 4
    print(f"### throughput: {RANKS} ranks, state {total / MB:.1f} MB ({LAYERS * 3} float32 tensors of "
          f"{shape[0]} x {shape[1]}); median of {repeats} after {warmup} warm-up\n")
    print("save: each rank writes its share; MB/s per rank = a quarter of the state / time, total = the state / "
          "time. load: MB/s per rank = what the rank holds (replicated: all of it) / time, total = the sum over "
          "ranks / time. Time: from a barrier before to a barrier after, all ranks.\n")
    print("| state | library | save s | save MB/s per rank | save MB/s total | written per rank MB | load s | "
          "load MB/s per rank | load MB/s total | values | save / numpy | load / numpy |\n"
          "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    found = {}
    for name in libs:
        setting = {"lib": name, "shape": shape, "dir": folder, "warmup": warmup, "repeats": repeats}
        found[name] = launch(folder, RANKS, "throughput", setting, f"throughput-{name}")
    rows, medians = [], {}
    for label in ("replicated", "row-split"):
        for name in [*libs, "numpy"]:
            source = found["minidl" if name == "numpy" else name]
            per = source if isinstance(source, str) else [r[label if name != "numpy" else "numpy " + label]
                                                          for r in source]
            if not isinstance(per, str):
                medians[(label, name)] = [statistics.median(max(r[op][i] for r in per) for i in range(repeats))
                                          for op in ("save", "load")]
            rows.append((label, name, per))
    for label, name, per in rows:
        if isinstance(per, str):
            print(f"| {label} | {name} | {per} |")
            continue
        (save, load), vs = medians[(label, name)], medians.get((label, "numpy"))
        held, written = per[0]["held"], [r["written"] for r in per]
        print(f"| {label} | {name} | {save:.3f} | {rate(total / RANKS, save)} | {rate(total, save)} | "
              f"{spread(written)} | {load:.3f} | {rate(held, load)} | {rate(held * RANKS, load)} | "
              f"{'ok' if all(r['ok'] for r in per) else '**differ**'} | "
              f"{'' if vs is None else f'{save / vs[0]:.2f}x'} | {'' if vs is None else f'{load / vs[1]:.2f}x'} |")
    print("\nevery repeat (s; the slowest rank): " + "; ".join(
        f"{name} {label} save/load " + ", ".join(f"{max(r[key]['save'][i] for r in found[src]):.3f}/"
                                                 f"{max(r[key]['load'][i] for r in found[src]):.3f}"
                                                 for i in range(repeats))
        for label in ("replicated", "row-split") for name in [*libs, "numpy"]
        for src, key in [("minidl" if name == "numpy" else name, label if name != "numpy" else "numpy " + label)]
        if not isinstance(found[src], str)))


def part_reshard(folder, sizes, libs):
    shape, warmup, repeats = sizes
    print(f"\n### reshard: the row-split checkpoint of {RANKS} ranks loaded elsewhere; median of {repeats} after "
          f"{warmup} warm-up\n")
    print("read per rank: minidl's FileSystemReader.bytes_read; torch's: rchar of /proc/self/io (bytes passed to "
          "read(), all threads of the process, a few KB of it not the checkpoint's). needed: the bytes of the "
          "rank's boxes. Ranges are the min-max over the ranks.\n")
    print("| library | loaded on | split | load s (repeats min-max) | read per rank MB | needed per rank MB | "
          "read / needed | values |\n|---|---|---|---:|---:|---:|---:|---|")
    for name in libs:
        ck = os.path.join(folder, f"reshard-{name}")
        saved = launch(folder, RANKS, "save", {"lib": name, "shape": shape, "dir": ck}, f"save-{name}")
        if isinstance(saved, str):
            print(f"| {name} | | saving on {RANKS} ranks {saved} | | | | | |")
            continue
        for n, splits in ((2, ["rows", "cols"]), (1, ["whole"])):
            setting = {"lib": name, "shape": shape, "dir": ck, "splits": splits, "distributed": n > 1,
                       "warmup": warmup, "repeats": repeats}
            found = launch(folder, n, "reshard", setting, f"reshard-{name}-{n}")
            for split in splits:
                where = f"{n} ranks" if n > 1 else "1 process (no_dist)"
                if isinstance(found, str):
                    print(f"| {name} | {where} | {split} | {found} | | | | |")
                    continue
                per = [r[split] for r in found]
                rounds = [max(p["time"][i] for p in per) for i in range(repeats)]
                read = [p["bytes_read"] if name == "minidl" else p["rchar"] for p in per]
                needed = [p["needed"] for p in per]
                ratio = [r / n_ for r, n_ in zip(read, needed)]
                print(f"| {name} | {where} | {split} | {statistics.median(rounds):.3f} ({min(rounds):.3f}-"
                      f"{max(rounds):.3f}) | {spread(read)} | {spread(needed)} | "
                      f"{min(ratio):.2f}-{max(ratio):.2f} | {'ok' if all(p['ok'] for p in per) else '**differ**'} |")
        shutil.rmtree(ck, ignore_errors=True)


def spread(values):
    low, high = min(values) / MB, max(values) / MB
    return f"{low:.1f}" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}-{high:.1f}"


def machine_line(when: str) -> str:
    return f"{when}: {cpu_model()}, {os.cpu_count()} cores, 1-minute load average {os.getloadavg()[0]:.2f}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("throughput", "reshard", "all"), default="all")
    parser.add_argument("--quick", action="store_true", help="a 12.6 MB state, one repeat: to check the script")
    parser.add_argument("--no-torch", action="store_true", help="leave out the torch rows")
    args = parser.parse_args(argv)
    libs = ["minidl"] + ([] if args.no_torch else ["torch"])
    sizes = (SHAPES["quick"], 1, 1) if args.quick else (SHAPES["full"], 1, 5)
    versions = subprocess.run([sys.executable, "-c", "import numpy, torch; print(numpy.__version__, "
                               "torch.__version__)"], capture_output=True, text=True).stdout.split()
    print(machine_line("machine at the start"))
    print(f"numpy {versions[0] if versions else '?'}, torch {versions[1] if len(versions) > 1 else 'not importable'}"
          f"; folders under {tempfile.gettempdir()}; sync_files=True (the default) in both libraries")
    print("note: loads follow saves of the same files, so their reads may come from the page cache; the "
          "benchmark drops nothing\n")
    with tempfile.TemporaryDirectory(prefix="dcp-bench-") as folder:
        if args.part in ("throughput", "all"):
            part_throughput(folder, sizes, libs)
        if args.part in ("reshard", "all"):
            part_reshard(folder, sizes, libs)
    print("\n" + machine_line("at the end"))


def rank_main():
    setting = json.loads(os.environ["DCP_BENCH_SETTING"])
    {"throughput": rank_throughput, "save": rank_save, "reshard": rank_reshard}[os.environ["DCP_BENCH_ROLE"]](setting)


if __name__ == "__main__":
    rank_main() if "DCP_BENCH_ROLE" in os.environ else main()
