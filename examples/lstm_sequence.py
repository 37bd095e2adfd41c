"""Train a small LSTM on the adding problem, a sequence task that needs memory, PyTorch-style.

    python examples/lstm_sequence.py                 # 20 epochs, test MSE ~0.002 (guessing: 0.167)
    python examples/lstm_sequence.py --epochs 5

Each sequence has --length steps of two channels: a value drawn from U(0, 1) and a marker that is 1 at
exactly two steps (one in each half) and 0 elsewhere. The target is the sum of the two marked values, so
the model must notice the markers and remember what it saw. Always answering the mean, 1, scores the
variance of a sum of two U(0, 1), 2/12 = 0.167: that is the mean squared error to beat.
"""
import argparse
import time

import numpy as np

import minidl
from minidl import nn
from minidl.nn import functional as F
from minidl.optim import Adam
from cli import positive_float, positive_int

GUESS_MSE = 2 / 12   # Var(U(0,1) + U(0,1)): the error of always predicting the mean sum


def adding_problem(count, length, rng):
    """(count, length, 2) float32 inputs and (count,) targets."""
    values = rng.random((count, length))
    markers = np.zeros((count, length))
    half = length // 2
    first, second = rng.integers(0, half, count), rng.integers(half, length, count)
    markers[np.arange(count), first] = markers[np.arange(count), second] = 1.0
    x = np.stack([values, markers], axis=-1).astype(np.float32)
    return minidl.from_numpy(x), minidl.from_numpy((values * markers).sum(1).astype(np.float32))


class Adder(nn.Module):
    """LSTM over the sequence, a linear read-out of its last hidden state."""

    def __init__(self, hidden=32):
        super().__init__()
        self.lstm = nn.LSTM(2, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x):
        _, (h_n, _) = self.lstm(x)
        return self.head(h_n[-1]).squeeze(-1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=positive_int, default=20)
    parser.add_argument("--length", type=positive_int, default=12, help="steps per sequence (at least 2)")
    parser.add_argument("--train-size", type=positive_int, default=2048)
    parser.add_argument("--batch-size", type=positive_int, default=64)
    parser.add_argument("--hidden", type=positive_int, default=32)
    parser.add_argument("--lr", type=positive_float, default=1e-2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.length < 2:
        parser.error(f"--length {args.length}: a sequence needs a marked step in each half, so at least 2 steps")

    minidl.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    x_train, y_train = adding_problem(args.train_size, args.length, rng)
    x_test, y_test = adding_problem(1024, args.length, rng)
    model = Adder(args.hidden)
    optimizer = Adam(model.parameters(), lr=args.lr)
    print(f"{model}\nadding problem, {args.length} steps; always guessing the mean scores {GUESS_MSE:.4f}")

    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        model.train()
        order = minidl.randperm(args.train_size)
        total = 0.0
        for i in range(0, args.train_size, args.batch_size):
            idx = order[i:i + args.batch_size]
            loss = F.mse_loss(model(x_train[idx]), y_train[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * idx.shape[0]
        model.eval()
        with minidl.no_grad():
            test_loss = F.mse_loss(model(x_test), y_test).item()
        print(f"epoch {epoch:3d}  train loss {total / args.train_size:.4f}  test loss {test_loss:.4f}  "
              f"{time.perf_counter() - start:5.1f} s")
    print(f"final test loss {test_loss:.4f} ({test_loss / GUESS_MSE:.1%} of guessing the mean) after "
          f"{args.epochs} epochs in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
