"""Train a two-layer perceptron on a spiral data set with nothing but minidl tensors and autograd.

Run: python examples/train_mlp.py   (--help lists the options)
The model, the loss and the SGD update are written out by hand; minidl supplies the
tensors, the kernels and the gradients.
"""
import argparse
import math
import time

import numpy as np

import minidl
from cli import positive_float, positive_int


def spiral(points_per_class=200, classes=3, seed=0):
    """The classic 2-D spiral: ``classes`` interleaved arms, hard for a linear model."""
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for c in range(classes):
        r = np.linspace(0.0, 1.0, points_per_class)
        t = np.linspace(c * 4.0, (c + 1) * 4.0, points_per_class) + rng.normal(0, 0.2, points_per_class)
        xs.append(np.stack([r * np.sin(t), r * np.cos(t)], 1))
        ys.append(np.full(points_per_class, c))
    return np.concatenate(xs).astype(np.float32), np.concatenate(ys).astype(np.int64)


def main(epochs=300, hidden=64, lr=1.0):
    minidl.manual_seed(0)
    x_np, y_np = spiral()
    x, y = minidl.from_numpy(x_np), minidl.from_numpy(y_np)
    n, classes = x.shape[0], int(y.max()) + 1

    w1 = (minidl.randn(2, hidden) * math.sqrt(2 / 2)).requires_grad_()
    b1 = minidl.zeros(hidden, requires_grad=True)
    w2 = (minidl.randn(hidden, classes) * math.sqrt(1 / hidden)).requires_grad_()
    b2 = minidl.zeros(classes, requires_grad=True)
    params = [w1, b1, w2, b2]

    start = time.perf_counter()
    for epoch in range(epochs):
        logits = (x @ w1 + b1).relu() @ w2 + b2
        # cross-entropy: mean of -log softmax at the true class
        loss = -logits.log_softmax(1)[minidl.arange(n), y].mean()
        for p in params:
            p.grad = None
        loss.backward()
        with minidl.no_grad():
            for p in params:
                p -= lr * p.grad
        if epoch % 50 == 0 or epoch == epochs - 1:
            accuracy = (logits.argmax(1) == y).float().mean().item()
            print(f"epoch {epoch:4d}  loss {loss.item():.4f}  accuracy {accuracy:.3f}")
    elapsed = time.perf_counter() - start
    accuracy = (((x @ w1 + b1).relu() @ w2 + b2).argmax(1) == y).float().mean().item()
    print(f"final accuracy {accuracy:.3f} after {epochs} epochs in {elapsed:.2f} s")
    assert accuracy > 0.9, "the spiral should be learned"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=positive_int, default=300)
    parser.add_argument("--hidden", type=positive_int, default=64, help="width of the hidden layer")
    parser.add_argument("--lr", type=positive_float, default=1.0)
    args = parser.parse_args()
    main(args.epochs, args.hidden, args.lr)
