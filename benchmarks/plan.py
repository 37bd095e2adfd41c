"""The planner's cost model against measurement (issue 57): every plan it ranks for the char GPT on 2 ranks is also
run and timed, and each prediction — step time, order, bytes per rank, peak memory — is compared with what the
run measured, on this machine, in one run:

    python benchmarks/plan.py [--steps 10] [--rounds 2] [--quick] [--json out.json] [--picture plan.png]

The GPT is examples/plan_gpt.py's (width 128, 4 blocks, context 64, batch 8; --quick: width 32, 2 blocks, batch 4).
Each plan runs as 2 processes over gloo (minidl.multiprocessing.spawn): two warm-up steps, then ``--steps`` steps,
each started from a barrier and timed on every rank (the slowest rank's time is the step's); every plan runs once
per round, ``--rounds`` rounds. The noise of a plan is the standard deviation of all its steps (the machine's drift
between rounds included); a pair of plans is "resolved" when their mean times differ by more than twice
the larger noise, and the predicted order must be right for every resolved pair. Bytes: ``Parallelized.sent_bytes``
around one step, per rank (debug.sent_bytes on the plan's groups). Memory: the plan built again under tracemalloc
(numpy's buffers report to it), one step to make the optimizer's state, the gradients dropped, then the peak of one
more step less the Python objects live before it.
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

from _bench_common import cpu_model

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))

SIZE = dict(batch_size=8, context=64, width=128, heads=4, layers=4, seed=0)
QUICK = dict(batch_size=4, context=16, width=32, heads=4, layers=2, seed=0)


def _objects() -> int:
    """Bytes of Python objects tracemalloc sees live now (all but numpy's buffers)."""
    import numpy as np
    snap = tracemalloc.take_snapshot()
    buffers = snap.filter_traces([tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)])
    return sum(t.size for t in snap.traces) - sum(t.size for t in buffers.traces)


def run_plan(rank, world, meet, best, args, steps, out):
    """One rank: build the plan, time its steps, count its bytes, trace its peak; rank's results to ``out``."""
    import minidl.dist as dist
    import plan_gpt
    dist.init_process_group("gloo", init_method=meet, rank=rank, world_size=world)
    data, vocab = plan_gpt.read_text()
    trainer = best.apply(plan_gpt.sequential_gpt(vocab, args))
    x, y = plan_gpt.batch(args, data, 0)
    seconds = []
    for step in range(steps + 2):
        dist.barrier()
        start = time.perf_counter()
        trainer.step(x, target=y)
        seconds.append(time.perf_counter() - start)
    dist.barrier()
    before = trainer.sent_bytes()
    trainer.step(x, target=y)
    sent = trainer.sent_bytes() - before
    del trainer   # (memory: a second one, traced from before it is built, after a step that makes its state)
    gc.collect()
    tracemalloc.start()
    trainer = best.apply(plan_gpt.sequential_gpt(vocab, args))
    trainer.step(x, target=y)
    trainer.optimizer.zero_grad()
    gc.collect()
    objects = _objects()
    tracemalloc.reset_peak()
    trainer.step(x, target=y)
    peak = tracemalloc.get_traced_memory()[1] - objects
    tracemalloc.stop()
    found = [None] * world
    dist.all_gather_object(found, {"seconds": seconds[2:], "sent": sent, "peak": peak})
    if rank == 0:
        Path(out).write_text(json.dumps(found))
    dist.destroy_process_group()


def measured(best, args, steps):
    """Every rank's results of ``best`` run for real."""
    import minidl
    with tempfile.TemporaryDirectory() as folder:
        out, meet = os.path.join(folder, "result.json"), f"file://{os.path.join(folder, 'store')}"
        minidl.multiprocessing.spawn(run_plan, args=(2, meet, best, args, steps, out), nprocs=2)
        return json.loads(Path(out).read_text())


def compare(rows) -> dict:
    """The verdicts: resolved pairs in the right order, the predicted best against the measured best, bytes and
    memory."""
    pairs = right = 0
    wrong = []
    for i, a in enumerate(rows):
        for b in rows[i + 1:]:
            if abs(a["measured"] - b["measured"]) <= 2 * max(a["noise"], b["noise"]):
                continue
            pairs += 1
            if (a["predicted"] < b["predicted"]) == (a["measured"] < b["measured"]):
                right += 1
            else:
                wrong.append((a["plan"], b["plan"]))
    fastest = min(r["measured"] for r in rows)
    chosen = min(rows, key=lambda r: r["predicted"])
    return {"resolved_pairs": pairs, "in_order": right, "out_of_order": wrong,
            "best_within": chosen["measured"] / fastest - 1, "chosen": chosen["plan"],
            "bytes_exact": all(r["sent"] == r["sent_predicted"] for r in rows),
            "memory_worst": max(abs(m / p - 1) for r in rows for m, p in zip(r["peak"], r["peak_predicted"]))}


def picture(rows, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.5, 5))
    for r in rows:
        ax.errorbar(r["predicted"] * 1e3, r["measured"] * 1e3, yerr=2 * r["noise"] * 1e3, fmt="o", capsize=3)
        ax.annotate(r["plan"], (r["predicted"] * 1e3, r["measured"] * 1e3), fontsize=7, xytext=(4, 2),
                    textcoords="offset points")
    top = max(max(r["predicted"], r["measured"]) for r in rows) * 1e3 * 1.1
    ax.plot([0, top], [0, top], "k:", lw=1, label="measured = predicted")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("predicted step (ms)")
    ax.set_ylabel("measured step (ms, ± 2 noise)")
    ax.set_title(title, fontsize=9)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2, help="runs of every plan, in turn")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    parser.add_argument("--picture")
    opts = parser.parse_args(argv)
    import minidl.dist as dist
    import plan_gpt
    args = SimpleNamespace(**(QUICK if opts.quick else SIZE))
    data, vocab = plan_gpt.read_text()
    x, y = plan_gpt.batch(args, data, 0)
    started = time.perf_counter()
    best = dist.plan(plan_gpt.sequential_gpt(vocab, args), x, 2, loss_fn=plan_gpt.lm_loss, target=y,
                     tp_plan=plan_gpt.tp_plan(args.layers))
    print(f"planned in {time.perf_counter() - started:.1f} s on {cpu_model()}; load {os.getloadavg()[0]:.2f}")
    rows, runs = [], {str(p.layout): [] for p in best.ranking}
    for _ in range(opts.rounds):   # (every plan once per round: drift over the run counts as noise too)
        for p in best.ranking:
            runs[str(p.layout)].append(measured(p, args, opts.steps))
    for p in best.ranking:
        ranks = runs[str(p.layout)][-1]
        steps = [max(s) for run in runs[str(p.layout)] for s in zip(*(r["seconds"] for r in run))]
        rows.append({"plan": str(p.layout), "predicted": p.prediction.seconds, "measured": statistics.mean(steps),
                     "noise": statistics.stdev(steps), "sent": [r["sent"] for r in ranks],
                     "sent_predicted": p.prediction.sent, "peak": [r["peak"] for r in ranks],
                     "peak_predicted": p.prediction.memory})
        r = rows[-1]
        print(f"{r['plan']:<20} predicted {r['predicted'] * 1e3:7.2f} ms  measured {r['measured'] * 1e3:7.2f} "
              f"± {r['noise'] * 1e3:5.2f} ms   sent {r['sent']} predicted {r['sent_predicted']}   peak MB "
              f"{[round(v / 1e6, 2) for v in r['peak']]} predicted {[round(v / 1e6, 2) for v in r['peak_predicted']]}",
              flush=True)
    verdict = compare(rows)
    print(f"load {os.getloadavg()[0]:.2f}; {len(rows)} plans ranked and run; {verdict}")
    if opts.picture:
        picture(rows, opts.picture, f"char GPT on 2 ranks, {cpu_model()}")
    if opts.json:
        Path(opts.json).write_text(json.dumps({"rows": rows, "verdict": verdict, "cpu": cpu_model()}, indent=1))


if __name__ == "__main__":
    main()
