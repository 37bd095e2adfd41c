"""Train a small CNN (or an MLP) on the embedded 8x8 handwritten digits, PyTorch-style.

    python examples/train_digits.py                  # CNN, 98%+ on the 20% hold-out
    python examples/train_digits.py --model mlp      # MLP, 97%+
    python examples/train_digits.py --resume         # continue from the last checkpoint (it must exist)
    python examples/train_digits.py --device cuda    # on a GPU (MINIDL_CUDA_SIM=1: the CPU simulator)
    python examples/train_digits.py --tensorboard runs/digits   # then: tensorboard --logdir runs
    python examples/train_digits.py --compile        # each training step through minidl.compile

The script is written as a PyTorch user would write it: swap `minidl` for `torch` (and
`minidl.vision` for `torchvision`-style code) and it reads the same.
"""
import argparse
import os
import sys
import time

from tqdm import tqdm

import minidl
import minidl.vision
from minidl import nn
from minidl.nn import functional as F
from minidl.optim import Adam
from minidl.optim.lr_scheduler import CosineAnnealingLR
from minidl.utils.data import DataLoader
from minidl.vision.datasets import Digits
from cli import positive_float, positive_int


def make_model(kind: str, nn=nn) -> nn.Module:
    """``nn``: the namespace to build from; the benchmarks pass ``torch.nn`` for their reference runs."""
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, 10))
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),   # 32 x 4 x 4
        nn.Flatten(), nn.Dropout(0.2), nn.Linear(32 * 4 * 4, 10),
    )


def evaluate(model, loader, device="cpu"):
    model.eval()
    correct = total = 0
    with minidl.no_grad():
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            correct += (model(images).argmax(1) == labels).sum().item()
            total += labels.shape[0]
    return correct / total


def training_step(model, optimizer):
    """One step on a batch: the function ``--compile`` hands to ``minidl.compile`` (the batch is its argument,
    so each call's batch reaches the replay)."""
    def step(images, labels):
        loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss
    return step


def train_epoch(model, loader, optimizer, desc, limit=None, show=True, device="cpu", step=None):
    """One pass over ``loader`` (at most ``limit`` batches) with a progress bar; the mean loss. ``step``: the
    training step to call (default: ``training_step``'s, eagerly)."""
    step = step or training_step(model, optimizer)
    model.train()
    total_loss = seen = 0.0
    batches = len(loader) if limit is None else min(len(loader), limit)
    bar = tqdm(loader, total=batches, desc=desc, leave=False, file=sys.stdout, disable=None if show else True)
    for i, (images, labels) in enumerate(bar):
        if i == batches:
            break
        images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        loss = step(images, labels)
        total_loss += loss.item() * labels.shape[0]
        seen += labels.shape[0]
        bar.set_postfix(loss=f"{total_loss / seen:.4f}")
    return total_loss / seen


def resume(checkpoint, device, model, optimizer, scheduler, generator) -> int:
    """Load a checkpoint main() wrote into the run's objects; the number of epochs it had trained."""
    state = minidl.load(checkpoint, map_location=device)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    minidl.set_rng_state(state["rng"])
    generator.set_state(state["loader_rng"])
    if "cuda_rng" in state:
        minidl.cuda.set_rng_state(state["cuda_rng"], device)
    return state["epoch"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["cnn", "mlp"], default="cnn")
    parser.add_argument("--epochs", type=positive_int, default=None, help="default: 15 (cnn), 60 (mlp)")
    parser.add_argument("--batch-size", type=positive_int, default=32)
    parser.add_argument("--lr", type=positive_float, default=3e-3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--checkpoint", default=None, help="default: digits-<model>.safetensors")
    parser.add_argument("--resume", action="store_true", help="continue from the checkpoint, which must exist")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compile", action="store_true",
                        help="run each training step through minidl.compile (captured once, then replayed)")
    parser.add_argument("--limit-batches", type=positive_int, default=None,
                        help="train on at most this many batches an epoch")
    parser.add_argument("--tensorboard", metavar="DIR", default=None,
                        help="log each epoch's training loss and test accuracy for TensorBoard into DIR "
                             "(needs pip install 'minidl[tensorboard]')")
    args = parser.parse_args(argv)
    device = minidl.device(args.device)
    if device.type == "cuda" and not minidl.cuda.is_available():
        sys.exit(f"error: device '{args.device}': device 'cuda' is not available here (it needs CuPy and an "
                 f"NVIDIA GPU; MINIDL_CUDA_SIM=1 runs it on the CPU simulator); use --device cpu")
    epochs = args.epochs or (15 if args.model == "cnn" else 60)
    checkpoint = args.checkpoint or f"digits-{args.model}.safetensors"
    if args.resume and not os.path.exists(checkpoint):
        # a fresh run in its place would overwrite nothing yet silently lose the work the user meant to continue
        parser.error(f"--resume: there is no checkpoint {checkpoint} to resume from (run without --resume to "
                     f"start afresh)")

    minidl.manual_seed(args.seed)
    generator = minidl.Generator().manual_seed(args.seed)
    train_loader = DataLoader(Digits(train=True), batch_size=args.batch_size, shuffle=True, generator=generator)
    test_loader = DataLoader(Digits(train=False), batch_size=256)
    model = make_model(args.model).to(device)
    optimizer = Adam(model.parameters(), lr=args.lr)
    scheduler = CosineAnnealingLR(optimizer, T_max=epochs)
    start_epoch = 0
    if args.resume:
        try:
            start_epoch = resume(checkpoint, device, model, optimizer, scheduler, generator)
        except (RuntimeError, KeyError, ValueError) as e:  # a damaged file, or another model's checkpoint
            parser.error(f"--resume: cannot resume from {checkpoint}: {e}")
        if start_epoch >= epochs:
            # exit 0: re-running a finished job's command (as a preempted job is re-run) is no mistake
            print(f"checkpoint {checkpoint} is at epoch {start_epoch}; --epochs {epochs} has nothing to train "
                  f"(the checkpoint is left as it is)")
            return None
        print(f"resumed from {checkpoint} at epoch {start_epoch}")
    writer = None
    if args.tensorboard:
        try:
            from minidl.utils.tensorboard import SummaryWriter
        except ImportError as e:
            sys.exit(f"error: --tensorboard: {e}")
        # a resumed run hides what an interrupted one logged after its checkpoint
        writer = SummaryWriter(args.tensorboard, purge_step=start_epoch + 1 if start_epoch else None)

    step = training_step(model, optimizer)
    if args.compile:
        step = minidl.compile(step)
    began = time.perf_counter()
    accuracy = evaluate(model, test_loader, device)
    for epoch in range(start_epoch, epochs):
        loss = train_epoch(model, train_loader, optimizer, f"epoch {epoch + 1}/{epochs}", args.limit_batches,
                           device=device, step=step)
        scheduler.step()
        accuracy = evaluate(model, test_loader, device)
        print(f"epoch {epoch + 1:3d}  loss {loss:.4f}  test accuracy {accuracy:.4f}  "
              f"({time.perf_counter() - began:.1f} s)")
        if writer is not None:
            writer.add_scalar("loss/train", loss, epoch + 1)
            writer.add_scalar("accuracy/test", accuracy, epoch + 1)
            writer.flush()  # (TensorBoard shows each epoch as it ends)
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                 "scheduler": scheduler.state_dict(), "epoch": epoch + 1, "rng": minidl.get_rng_state(),
                 "loader_rng": generator.get_state()}
        if device.type == "cuda":
            state["cuda_rng"] = minidl.cuda.get_rng_state(device)  # dropout draws on the GPU
        minidl.save(state, checkpoint)
    if writer is not None:
        writer.close()
    print(f"final test accuracy {accuracy:.4f} ({args.model}, {time.perf_counter() - began:.1f} s); "
          f"checkpoint: {checkpoint}")
    return accuracy


if __name__ == "__main__":
    main()
