"""One training step of benchmarks/train_step.py's three models on a GPU: minidl 'cuda' beside
PyTorch CUDA (when torch with CUDA is installed), in the same run.

The models, data, losses and optimizers are train_step.build's (MLP + SGD, LeNet + Adam,
TransformerEncoderLayer + Adam), built on device 'cuda'. Each is warmed up, then timed as rounds of
``--steps`` back-to-back steps between CUDA events (the libraries taking turns round by round);
the figure is the median over rounds of ms per step. Target (issue 6 section 6): minidl's step
<= 1.5x PyTorch's.

    python benchmarks/gpu_train_step.py            # on a GPU
    python benchmarks/gpu_train_step.py --sim      # smoke run: minidl only, tiny batches, simulator

Without a GPU (and without --sim) it exits with status 2 and says why.
"""
from __future__ import annotations

import argparse
import statistics

import numpy as np
from gpu_ops import banner, setup, timer
from train_step import MODELS, build

TARGET = 1.5
SIM_BATCH = 2


def torch_cuda():
    """torch, when it is installed with CUDA and sees a GPU; else None."""
    try:
        import torch
    except Exception:  # noqa: BLE001  (not installed or broken: no torch column)
        return None
    return torch if torch.cuda.is_available() else None


def measure(rt, libs: dict, model: str, args) -> dict:
    """Median ms per step for each library (rounds alternate between them)."""
    steps = {name: build(lib, model, batch=args.batch, device="cuda") for name, lib in libs.items()}
    for name, step in steps.items():
        loss = float(step().item())
        if not np.isfinite(loss):
            raise RuntimeError(f"{name} {model}: loss is {loss}")
    per = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            if name == "minidl":
                seconds = timer(rt, step, args.warmup, args.steps, 1)
            else:
                seconds = torch_seconds(libs[name], step, args.warmup, args.steps)
            per[name].append(seconds * 1e3)
    return {name: statistics.median(v) for name, v in per.items()}


def torch_seconds(torch, step, warmup: int, steps: int) -> float:
    for _ in range(warmup):
        step()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    begin.record()
    for _ in range(steps):
        step()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / 1e3 / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sim", action="store_true", help="minidl only, tiny batches, on the CUDA simulator")
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    args.batch = None
    if args.sim:
        args.warmup, args.steps, args.rounds, args.batch = 0, 1, 1, SIM_BATCH
    rt = setup(args.sim)
    import minidl
    libs = {"minidl": minidl}
    torch = None if args.sim else torch_cuda()
    if torch is not None:
        libs["torch"] = torch
    print(banner(rt))
    print(f"PyTorch: {torch.__version__} (CUDA {torch.version.cuda})" if torch is not None else
          "PyTorch CUDA: not available, minidl only")
    print("\n| model | minidl ms/step | torch ms/step | minidl / torch | target |")
    print("|---|---:|---:|---:|---|")
    for model in args.models:
        ms = measure(rt, libs, model, args)
        if "torch" in ms:
            ratio = ms["minidl"] / ms["torch"]
            verdict = f"<= {TARGET}x: {'MET' if ratio <= TARGET else 'MISSED'}"
            print(f"| {MODELS[model]['label']} | {ms['minidl']:.2f} | {ms['torch']:.2f} | {ratio:.2f}x | {verdict} |")
        else:
            print(f"| {MODELS[model]['label']} | {ms['minidl']:.2f} | - | - | - |")
    if rt.name == "sim":
        print("\n(simulator, batch 2: the smoke run checks that every model trains; its numbers are not GPU figures)")


if __name__ == "__main__":
    main()
