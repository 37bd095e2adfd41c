"""Sharded data parallelism measured (issue 56): the char GPT trained under DDP, ZeRO-1, FSDP, tensor parallelism
and their compositions at 2 and 4 ranks, beside torch 2.13's FSDP2 (and DDP) on the same model, all over gloo, on
this machine in one run:

    python benchmarks/fsdp.py [--steps 10] [--quick] [--no-torch] [--ranks 2 4] [--jobs fsdp ...] [--json out]

Each job is ``n`` processes (env://, one thread each) training the same global batches (gpt_3d.py's seeded ones)
with AdamW in float32; the minidl layouts are examples/gpt_3d.py's Trainer (DDP, ZeRO and TP alone are its
one-process GPT wrapped here as its layouts wrap it). Per rank, in one process, two passes:

- memory, traced from just before the model is built: minidl's tensors are numpy buffers, which numpy reports to
  tracemalloc; torch's CPU allocator reports each allocation to torch.profiler (profile_memory: the trace's
  "Total Allocated"). Parameters, gradients and optimizer state are the bytes of the local pieces a rank holds
  after a step (DTensors: ``to_local()``). Before each measured step the gradients are dropped (the step's
  zero_grad would drop them) and gc.collect() run; "before" is then what the allocator has live, "peak" its highest
  point during the step (minidl's figures less the Python objects live before it, which tracemalloc counts too).
  A step on one token per data-parallel rank (activations ~ 0) gives the peak of the model's state itself:
  parameters, gradients, optimizer state and the buffers that move them.
- time, untraced: the median step on rank 0 after warm-ups, each step from a barrier.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

from _bench_common import _reset_peak, _status_kib, cpu_model
from _gloo_ranks import results

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SIZE = {"batch": 8, "context": 64, "width": 256, "heads": 4, "layers": 4}
QUICK = {"batch": 4, "context": 16, "width": 32, "heads": 4, "layers": 2}
JOBS = {2: ("ddp", "zero", "fsdp", "tp", "torch-ddp", "torch-fsdp2"),
        4: ("ddp", "zero", "fsdp", "tp", "dp-tp", "fsdp-tp", "torch-ddp", "torch-fsdp2")}
MB = 1e6


# ----------------------------------------------------------------------------------------------- one rank
def _args(size, tp):
    return SimpleNamespace(batch_size=size["batch"], context=size["context"], width=size["width"],
                           heads=size["heads"], layers=size["layers"], tp=tp, lr=3e-3, weight_decay=0.1, seed=0,
                           meta_init=False)


def _local_bytes(t) -> int:
    t = t.to_local() if hasattr(t, "to_local") else t
    return t.numel() * t.element_size()


def held(params, optimizer) -> dict:
    """Bytes of the parameters, gradients and optimizer state this rank holds (its local pieces)."""
    inner = getattr(optimizer, "optim", optimizer)   # (ZeRO: the local optimizer on this rank's share)
    state = [v for s in inner.state.values() for v in s.values() if hasattr(v, "numel")]
    return {"params": sum(map(_local_bytes, params)),
            "grads": sum(_local_bytes(p.grad) for p in params if p.grad is not None),
            "optim": sum(map(_local_bytes, state))}


def _warm_minidl():
    """A throwaway step of a small GPT in one process, before tracing starts: the modules and compiled kernels a
    first step loads are then not counted as the training's memory."""
    sys.path.insert(0, str(EXAMPLES))
    import gpt_3d
    import minidl
    from char_gpt import param_groups
    model = gpt_3d.gpt(_args(QUICK, 1), 8).float()
    optimizer = minidl.optim.AdamW(param_groups(model, 0.1))
    gpt_3d.lm_loss(model(minidl.zeros(2, 4, dtype=minidl.int64)), minidl.ones(2, 4, dtype=minidl.int64)).backward()
    optimizer.step()


def _minidl_trainer(layout, size, rank, world):
    """gpt_3d's Trainer in float32: its own fsdp, dp-tp and fsdp-tp; DDP, ZeRO and TP built on its one-process
    GPT as gpt_3d builds its layouts."""
    sys.path.insert(0, str(EXAMPLES))
    import gpt_3d
    from minidl.dist.device_mesh import init_device_mesh
    from minidl.dist.optim import ZeroRedundancyOptimizer
    from minidl.dist.tensor.parallel import parallelize_module
    from minidl.nn.parallel import DistributedDataParallel
    from minidl.optim import AdamW
    from char_gpt import param_groups
    double = gpt_3d.gpt
    gpt_3d.gpt = lambda args, vocab, meta=False: double(args, vocab).float()   # (gpt_3d checks in float64)
    args = _args(size, 2 if layout in ("dp-tp", "fsdp-tp") else world)
    trainer = gpt_3d.Trainer(layout if layout in gpt_3d.LAYOUTS else "one", args, gpt_3d.read_text()[1])
    if layout in gpt_3d.LAYOUTS:
        return trainer, gpt_3d
    dim = "tp" if layout == "tp" else "dp"
    trainer.mesh = init_device_mesh("cpu", (world,), mesh_dim_names=(dim,))
    if layout == "tp":
        parallelize_module(trainer.model, trainer.mesh["tp"], gpt_3d.plan_for(trainer.model))
    else:
        trainer.dp, trainer.dp_rank = world, rank
        trainer.run = DistributedDataParallel(trainer.model, device_mesh=trainer.mesh["dp"], broadcast_buffers=False)
    groups = param_groups(trainer.model, args.weight_decay)
    trainer.optimizer = (ZeroRedundancyOptimizer(groups, AdamW, lr=args.lr, betas=(0.9, 0.95)) if layout == "zero"
                         else AdamW(groups, lr=args.lr, betas=(0.9, 0.95)))
    return trainer, gpt_3d


class _Traced:
    """minidl's allocator figures: tracemalloc, which numpy's buffers report to."""

    def __init__(self):
        tracemalloc.start()

    def collect(self) -> int:
        """gc.collect(); the bytes it freed (what reference cycles kept after the last step)."""
        before = tracemalloc.get_traced_memory()[0]
        gc.collect()
        return before - tracemalloc.get_traced_memory()[0]

    def objects(self) -> int:
        """Bytes of Python objects live now: all traced but numpy's buffers (its own tracemalloc domain)."""
        import numpy as np
        snap = tracemalloc.take_snapshot()
        buffers = snap.filter_traces([tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)])
        return sum(t.size for t in snap.traces) - sum(t.size for t in buffers.traces)

    def live(self) -> int:
        tracemalloc.reset_peak()
        return tracemalloc.get_traced_memory()[0]

    def peak(self, step):
        """Run ``step``; the highest traced bytes during it."""
        step()
        return tracemalloc.get_traced_memory()[1]

    def stop(self):
        tracemalloc.stop()


def _minidl(layout, size, rank, world):
    import minidl.dist as dist
    dist.init_process_group("gloo")
    _warm_minidl()
    memory = _Traced()
    trainer, gpt_3d = _minidl_trainer(layout, size, rank, world)
    data = gpt_3d.read_text()[0]
    params = list(trainer.model.parameters())

    def step(i, tiny=False):
        x, y = gpt_3d.batch(trainer.args, data, i)
        if tiny:   # (one token per data-parallel rank)
            x, y = x[:trainer.dp, :1], y[:trainer.dp, :1]
            trainer.args.batch_size = trainer.dp
        try:
            return trainer.step(x, y)
        finally:
            trainer.args.batch_size = size["batch"]
    return SimpleNamespace(step=step, held=lambda: held(params, trainer.optimizer), memory=memory,
                           zero_grad=trainer.optimizer.zero_grad, barrier=dist.barrier,
                           close=dist.destroy_process_group)


def _torch_groups(model):
    """char_gpt's parameter groups: weight decay on the Linear matrices only."""
    import torch
    skip = {id(m.weight) for m in model.modules() if isinstance(m, (torch.nn.Embedding, torch.nn.LayerNorm))}
    params = list(model.parameters())
    return [{"params": [p for p in params if p.ndim >= 2 and id(p) not in skip], "weight_decay": 0.1},
            {"params": [p for p in params if p.ndim < 2 or id(p) in skip], "weight_decay": 0.0}]


class _Profiled:
    """torch's allocator figures: its CPU allocator's running total, as torch.profiler records it with every
    allocation and free it sees (those made while profiling: from before the model is built)."""

    def __init__(self):
        import torch
        self.torch = torch
        self.prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True)
        self.prof.__enter__()
        self.marks = 0

    def collect(self):
        gc.collect()   # (as for minidl; what it freed is not in the profiler's total until the trace is read)

    def objects(self):
        return 0   # (torch's allocator holds tensors only)

    def live(self):
        return None   # (known once the trace is read: see stop)

    def peak(self, step):
        self.marks += 1
        with self.torch.profiler.record_function(f"fsdp_bench_step_{self.marks}"):
            step()

    def stop(self):
        """[(before, peak)] of each marked step: the total just before its range, its highest within it."""
        self.prof.__exit__(None, None, None)
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            self.prof.export_chrome_trace(f.name)
            events = json.load(open(f.name))["traceEvents"]
        memory = sorted((e["ts"], e["args"]["Total Allocated"]) for e in events if e.get("name") == "[memory]")
        out = []
        for i in range(1, self.marks + 1):
            mark = next(e for e in events if e.get("name") == f"fsdp_bench_step_{i}" and e.get("ph") == "X")
            start, end = mark["ts"], mark["ts"] + mark["dur"]
            before = [total for ts, total in memory if ts < start]
            inside = [total for ts, total in memory if start <= ts <= end]
            out.append((before[-1] if before else 0, max(inside + before[-1:])))
        return out


def _torch(layout, size, rank, world):
    import torch
    import torch.distributed as dist
    import tp as tp_bench
    sys.path.insert(0, str(EXAMPLES))
    import gpt_3d
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    memory = _Profiled()
    data, vocab = gpt_3d.read_text()
    tp_bench.SIZE.update(size)   # (tp.py's torch GPT, at this benchmark's size)
    torch.manual_seed(0)
    model = tp_bench._torch_model(torch, vocab)
    if layout == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (world,))
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        run = model
    else:
        run = torch.nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)
    optimizer = torch.optim.AdamW(_torch_groups(model), lr=3e-3, betas=(0.9, 0.95))
    params, args = list(model.parameters()), _args(size, 1)

    def step(i, tiny=False):
        x, y = (torch.from_numpy(t.numpy()) for t in gpt_3d.batch(args, data, i))
        share = 1 if tiny else size["batch"] // world
        x, y = x[rank * share:(rank + 1) * share], y[rank * share:(rank + 1) * share]
        if tiny:
            x, y = x[:, :1], y[:, :1]
        optimizer.zero_grad()
        logits = run(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        optimizer.step()
        mean = loss.detach().reshape(1) / world
        dist.all_reduce(mean)
        return float(mean.item())
    return SimpleNamespace(step=step, held=lambda: held(params, optimizer), memory=memory,
                           zero_grad=optimizer.zero_grad, barrier=dist.barrier, close=dist.destroy_process_group)


def _measured(job, first) -> dict:
    """The memory pass: steps ``first`` and ``first + 1`` of the workload, then two of one token each; of each
    kind, the step whose peak rose most above what was live before it."""
    marks = []
    for i, tiny in enumerate((False, False, True, True), first):
        state = job.held()
        job.zero_grad()
        garbage, objects = job.memory.collect(), job.memory.objects()
        before, loss = job.memory.live(), []
        peak = job.memory.peak(lambda: loss.append(job.step(i, tiny)))
        marks.append({"loss": loss[0], **state, "before": before, "peak": peak, "objects": objects,
                      "garbage": garbage})
    for mark, (before, peak) in zip(marks, job.memory.stop() or ()):   # (torch: read from its trace)
        mark.update(before=before, peak=peak)
    for m in marks:   # (minidl: the Python objects out)
        m["before"], m["peak"] = m["before"] - m["objects"], m["peak"] - m["objects"]
    work, probe = (max(pair, key=lambda m: m["peak"] - m["before"]) for pair in (marks[:2], marks[2:]))
    return {**work, "loss": marks[0]["loss"], "loss_step": first + 1, "state_peak": probe["peak"],
            "garbage": None if marks[0]["garbage"] is None else max(m["garbage"] for m in marks[:3])}


def rank_main():
    setting = json.loads(os.environ["FSDP_BENCH_SETTING"])
    role, size, warmup = os.environ["FSDP_BENCH_ROLE"], setting["size"], setting["warmup"]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    job = (_torch if role.startswith("torch-") else _minidl)(role.removeprefix("torch-"), size, rank, world)
    for i in range(warmup):
        job.step(i)
    found = _measured(job, warmup)
    gc.collect()
    reset, times = _reset_peak(), []
    for i in range(warmup + 4, 2 * warmup + 4 + setting["steps"]):
        job.barrier()
        start = time.perf_counter()
        job.step(i)
        times.append(time.perf_counter() - start)
    rss = _status_kib("VmHWM") * 1024 if reset else None   # (the timed steps' peak resident set, untraced)
    print("RESULT " + json.dumps({"rank": rank, "time": statistics.median(times[warmup:]), **found,
                                  "peak_rss": rss}), flush=True)
    job.close()


# --------------------------------------------------------------------------------------------- the launcher
def counts(size, vocab) -> dict:
    """Parameters: of one block, of the rest (embeddings, final LayerNorm; the head is the token embedding), and
    of each block's split Linear maps (their matrices and the column-parallel biases) that TP divides by tp."""
    w, t = size["width"], size["context"]
    return {"block": 12 * w * w + 13 * w, "root": vocab * w + t * w + 2 * w, "split": 12 * w * w + 7 * w,
            "vocab": vocab * w, "layers": size["layers"]}


def predicted(job, n, size, vocab) -> tuple:
    """(params + grads + AdamW's two moments per rank, their peak in a step) in bytes, from the formulas:
    DDP P + G + 2P; ZeRO P + G + 2P/n; FSDP (P + G + 2P)/n, plus at its peak the full parameters and gradients
    of the root group (kept through the step) and of one block; TP 1/tp of the split maps and of the vocabulary,
    the rest whole; DP x TP as TP at tp 2; FSDP x TP as TP at tp 2, over dp = n/2."""
    c = counts(size, vocab)
    job = job.removeprefix("torch-").replace("fsdp2", "fsdp")
    tp = 1 if job in ("ddp", "zero", "fsdp") else n if job == "tp" else 2
    block = c["block"] - c["split"] + c["split"] / tp          # (a rank's piece of a block, of the rest)
    root = c["root"] - c["vocab"] + c["vocab"] / tp
    whole, dp = c["layers"] * block + root, n // tp
    per = {"ddp": 4 * whole, "zero": 2 * whole + 2 * whole / n, "fsdp": 4 * whole / dp, "tp": 4 * whole,
           "dp-tp": 4 * whole, "fsdp-tp": 4 * whole / dp}[job]
    extra = 2 * (block + root) if job.startswith("fsdp") else 0
    return per * 4, (per + extra) * 4


def _mb(x) -> str:
    return f"{x / MB:.2f}"


def _rss(r) -> str:
    return "—" if None in (x["peak_rss"] for x in r) else f"{max(x['peak_rss'] for x in r) / MB:.0f}"


def table(found, size, vocab) -> list:
    """The markdown rows: per job, each figure on the rank where it is largest (the time: rank 0's)."""
    step = next((r[0]["loss_step"] for r in found.values() if isinstance(r, list)), "?")
    lines = ["| ranks | job | step ms | params / grads / AdamW | P+G+O | predicted | live before a step "
             "| rise: peak - before | peak in a step | state's peak (1-token step) | predicted | peak RSS, timed "
             f"| loss at step {step} |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (n, job), r in found.items():
        if isinstance(r, str):
            lines.append(f"| {n} | {job} | {r} |" + " |" * 10)
            continue
        state, peak = predicted(job, n, size, vocab)
        top = max(r, key=lambda x: x["params"] + x["grads"] + x["optim"])
        most = {k: _mb(max(x[k] for x in r)) for k in ("before", "peak", "state_peak")}
        parts = " / ".join(_mb(top[k]) for k in ("params", "grads", "optim"))
        lines.append(
            f"| {n} | {job} | {r[0]['time'] * 1e3:.0f} | {parts} | {_mb(top['params'] + top['grads'] + top['optim'])} "
            f"| {_mb(state)} | {most['before']} "
            f"| {_mb(max(x['peak'] - x['before'] for x in r))} | {most['peak']} | {most['state_peak']} | {_mb(peak)} "
            f"| {_rss(r)} | {r[0]['loss']:.5f} |")
    return lines


def held_beside(found) -> list:
    """What else a rank holds: live before a step beyond its parameters and AdamW's state; and, for minidl, the
    Python objects tracemalloc counts (left out of the table above) and what reference cycles keep after a step
    until gc.collect() frees it."""
    lines = ["| ranks | job | live before a step beyond P + AdamW (MB) | Python objects (MB) "
             "| kept by reference cycles after a step (MB) |", "|---:|---|---:|---:|---:|"]
    for (n, job), r in found.items():
        if isinstance(r, str):
            continue
        beyond = max(x["before"] - x["params"] - x["optim"] for x in r)
        minidl = r[0]["garbage"] is not None
        lines.append(f"| {n} | {job} | {_mb(beyond)} | {_mb(max(x['objects'] for x in r)) if minidl else '—'} | "
                     f"{_mb(max(x['garbage'] for x in r)) if minidl else '—'} |")
    return lines


def checks(found, size, vocab) -> list:
    """FSDP's share of DDP's parameters + gradients + AdamW between steps, and its peak of them in a step (the
    1-token step's) against DDP's / n + one block's full parameters and gradients (also against DDP's own
    measured peak / n + the block, buffers on both sides)."""
    lines, block = [], 2 * counts(size, vocab)["block"] * 4
    for lib in ("", "torch-"):
        for n in sorted({n for n, _ in found}):
            ddp, fsdp = found.get((n, lib + "ddp")), found.get((n, lib + ("fsdp2" if lib else "fsdp")))
            if not isinstance(ddp, list) or not isinstance(fsdp, list):
                continue
            state, kept = (max(x["params"] + x["grads"] + x["optim"] for x in r) for r in (ddp, fsdp))
            top, ddp_top = (max(x["state_peak"] for x in r) for r in (fsdp, ddp))
            bound, loose = state / n + block, ddp_top / n + block
            lines.append(f"- {lib or 'minidl '}FSDP at {n} ranks: holds {_mb(kept)} MB between steps = "
                         f"{kept / state:.3f} of DDP's {_mb(state)} MB (1/n = {1 / n:.3f}); its peak in a step "
                         f"{_mb(top)} MB against DDP's / {n} + one block's parameters and gradients = "
                         f"{_mb(state / n)} + {_mb(block)} = {_mb(bound)} MB: **{'met' if top <= bound else 'missed'}**"
                         f" ({top / bound:.2f}x); against DDP's own peak / {n} + the block = {_mb(loose)} MB: "
                         f"{'met' if top <= loose else 'missed'} ({top / loose:.2f}x)")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="a smoke run: tiny GPT, 2 ranks, 2 timed steps")
    parser.add_argument("--no-torch", action="store_true", help="leave out torch's jobs")
    parser.add_argument("--json", help="write every rank's figures here")
    parser.add_argument("--ranks", type=int, nargs="*", choices=(2, 4), help="only these (default: 2 and 4)")
    parser.add_argument("--jobs", nargs="*", help="only these jobs (default: all of each rank count's)")
    args = parser.parse_args(argv)
    size = QUICK if args.quick else SIZE
    setting = {"steps": 2 if args.quick else args.steps, "warmup": 1 if args.quick else 2, "size": size}
    sys.path.insert(0, str(EXAMPLES))
    from gpt_3d import read_text
    vocab = read_text()[1]
    print(f"## FSDP, ZeRO, DDP and TP: char GPT ({size}, vocabulary {vocab}), float32, over gloo; CPU: "
          f"{cpu_model()}, {os.cpu_count()} cores; started {time.strftime('%Y-%m-%d %H:%M')}, load average "
          f"{os.getloadavg()[0]:.2f}; median of {setting['steps']} steps after {setting['warmup']} warm-ups\n")
    env = {"OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", "FSDP_BENCH_SETTING": json.dumps(setting)}
    found = {}
    with tempfile.TemporaryDirectory() as folder:
        for n in args.ranks or ((2,) if args.quick else (2, 4)):
            for job in JOBS[n]:
                if args.no_torch and job.startswith("torch-") or args.jobs and job not in args.jobs:
                    continue
                start = time.perf_counter()
                found[(n, job)] = results([sys.executable, os.path.abspath(__file__)], n, folder, f"{job}-{n}",
                                          {**env, "FSDP_BENCH_ROLE": job})
                print(f"({n} ranks, {job}: {time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
    print("\n".join(table(found, size, vocab)) + "\n")
    print("\n".join(held_beside(found)) + "\n")
    print("\n".join(checks(found, size, vocab)))
    print(f"\nended {time.strftime('%Y-%m-%d %H:%M')}, load average {os.getloadavg()[0]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"size": size, "vocab": vocab, "jobs": [
            {"ranks": n, "job": job, "result": r} for (n, job), r in found.items()]}, indent=1))


if __name__ == "__main__":
    rank_main() if "FSDP_BENCH_ROLE" in os.environ else main()
