"""The model zoo beside PyTorch eager: ResNet-50 inference (batch 8, 3 x 224 x 224, float32, eval mode, no
autograd; the same synthetic weights in both, outputs checked equal), and reading a ~100 MB checkpoint (ResNet-50's
state dict as ``torch.save`` writes it) with and without ``mmap``: wall time and memory, each load in a fresh
process.

torch's ResNet-50 is torchvision's own, which cannot import beside the suite's CPU torch 2.13; give this script an
interpreter that has it (``--torch-python``, e.g. a venv made by ``pip install torch==2.14.1 torchvision==0.29.1``):
it runs there as a worker process, and the two libraries take turns round by round. Without it, the torch column is
left out.

Usage::

    python benchmarks/model_zoo.py --torch-python /tmp/tv/bin/python     # a few minutes
    python benchmarks/model_zoo.py --quick                                 # a smoke run
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from _bench_common import _status_kib, cpu_model, log  # noqa: E402
import torchvision_reference as ref  # noqa: E402  (synthetic weights for a state dict, as the tests draw them)

RECORDED = os.path.join(HERE, "..", "tests", "data", "torchvision.json")


def resnet50_shapes() -> dict:
    with open(RECORDED) as f:
        return {key: tuple(shape) for key, shape, _ in json.load(f)["models"]["resnet50"]["state_dict"]}


def images(batch: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((batch, 3, 224, 224), dtype=np.float32)


# ----------------------------------------------------------------------------- inference
class TorchWorker:
    """torchvision's ResNet-50 in another interpreter: ``run(steps)`` -> ms per forward."""

    def __init__(self, python: str, batch: int, threads: int, out: str):
        cmd = [python, os.path.abspath(__file__), "--torch-worker", str(batch), str(threads), out]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.version = self.proc.stdout.readline().strip()

    def run(self, steps: int) -> float:
        self.proc.stdin.write(f"{steps}\n")
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline())

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def torch_worker(batch: int, threads: int, out: str) -> None:
    import torch
    import torchvision
    torch.set_num_threads(threads)
    model = torchvision.models.resnet50()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in ref.synthetic_state(resnet50_shapes()).items()})
    model.eval()
    x = torch.from_numpy(images(batch))
    with torch.inference_mode():
        np.save(out, model(x).numpy())
        print(f"torch {torch.__version__}, torchvision {torchvision.__version__}", flush=True)
        for line in sys.stdin:
            start = time.perf_counter()
            for _ in range(int(line)):
                model(x)
            print((time.perf_counter() - start) / int(line) * 1e3, flush=True)


def inference(args) -> dict:
    import minidl
    from minidl.vision import models
    minidl.set_num_threads(args.threads)
    model = models.resnet50()
    model.load_state_dict({k: minidl.from_numpy(v) for k, v in ref.synthetic_state(resnet50_shapes()).items()})
    model.eval()
    x = minidl.from_numpy(images(args.batch))

    def forward():
        with minidl.inference_mode():
            return model(x)

    ours = forward().numpy()
    result = {"minidl": []}
    worker = None
    if args.torch_python:
        with tempfile.TemporaryDirectory() as tmp:
            worker = TorchWorker(args.torch_python, args.batch, args.threads, os.path.join(tmp, "out.npy"))
            theirs = np.load(os.path.join(tmp, "out.npy"))
        result |= {"torch": [], "torch_version": worker.version,
                   "max_difference": float(np.abs(ours - theirs).max()), "output_scale": float(np.abs(theirs).max())}
    forward()
    for _ in range(args.rounds):
        start = time.perf_counter()
        for _ in range(args.steps):
            forward()
        result["minidl"].append((time.perf_counter() - start) / args.steps * 1e3)
        if worker:
            result["torch"].append(worker.run(args.steps))
    if worker:
        worker.close()
    return result


# ----------------------------------------------------------------------------- loading
def load_child(library: str, path: str, mmap: bool, touch: str) -> dict:
    """One load in this fresh process: seconds, and KiB above the RSS before it: the peak (VmHWM, resident pages of
    the file included) and the anonymous memory after (what the process holds that the kernel cannot drop)."""
    if library == "torch":
        import torch as lib
    else:
        import minidl as lib
        from minidl.vision import models
    model = models.resnet50() if touch == "model" else None
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    rss, anon = _status_kib("VmRSS"), _status_kib("RssAnon")
    start = time.perf_counter()
    state = lib.load(path, mmap=mmap, weights_only=True)
    if touch == "read":
        sum(float(t.sum()) for t in state.values())
    elif touch == "model":
        model.load_state_dict(state, strict=True)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "peak": _status_kib("VmHWM") - rss, "anon": _status_kib("RssAnon") - anon}


def loading(args, path: str) -> list:
    rows = []
    cases = [("minidl", touch) for touch in ("none", "read", "model")] + [("torch", "none"), ("torch", "read")]
    for library, touch in cases:
        for mmap in (False, True):
            runs = []
            for _ in range(args.load_runs):
                cmd = [sys.executable, os.path.abspath(__file__), "--load-child", library, path, str(int(mmap)), touch]
                runs.append(json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True)
                                       .stdout.strip().splitlines()[-1]))
            row = {"library": library, "then": touch, "mmap": mmap,
                   **{key: statistics.median(run[key] for run in runs) for key in runs[0]}}
            log(f"  {library:6} load{'' if touch == 'none' else ' + ' + touch:8} mmap={mmap!s:5}: "
                f"{row['seconds'] * 1e3:7.1f} ms, peak +{row['peak'] / 1024:6.1f} MB, "
                f"anonymous +{row['anon'] / 1024:6.1f} MB")
            rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--torch-python", help="an interpreter with torch and torchvision (the torch column)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--load-runs", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="batch 1, 2 rounds of 1 step, 1 load run each")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--torch-worker", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--load-child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_worker:
        return torch_worker(int(args.torch_worker[0]), int(args.torch_worker[1]), args.torch_worker[2])
    if args.load_child:
        library, path, mmap, touch = args.load_child
        print(json.dumps(load_child(library, path, bool(int(mmap)), touch)))
        return None
    if args.quick:
        args.batch, args.rounds, args.steps, args.load_runs = 1, 2, 1, 1
    import minidl
    import torch
    log(f"{cpu_model()}; Python {sys.version.split()[0]}, minidl {minidl.__version__}, torch {torch.__version__} "
        f"(checkpoint writer and loader), load average {os.getloadavg()[0]:.2f}")
    log(f"ResNet-50 inference, batch {args.batch}, 224 x 224, float32, {args.threads} threads, {args.rounds} rounds "
        f"of {args.steps} forwards")
    result = {"cpu": cpu_model(), "inference": inference(args)}
    inf = result["inference"]
    line = f"  minidl {statistics.median(inf['minidl']):.1f} ms ({', '.join(f'{v:.0f}' for v in inf['minidl'])})"
    if "torch" in inf:
        ratio = statistics.median(inf["minidl"]) / statistics.median(inf["torch"])
        line += (f"; {inf['torch_version']} {statistics.median(inf['torch']):.1f} ms "
                 f"({', '.join(f'{v:.0f}' for v in inf['torch'])}); minidl/torch {ratio:.2f}x; outputs differ by "
                 f"{inf['max_difference']:.1e} (scale {inf['output_scale']:.1f})")
    log(line)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "resnet50.pth")
        torch.save({k: torch.from_numpy(v) for k, v in ref.synthetic_state(resnet50_shapes()).items()}, path)
        log(f"Loading {os.path.getsize(path) / 1e6:.1f} MB ({path}), median of {args.load_runs} fresh processes")
        result["loading"] = loading(args, path)
    result["load_average_end"] = os.getloadavg()[0]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
