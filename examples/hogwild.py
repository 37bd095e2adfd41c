"""Hogwild training: several processes update one model's parameters in shared memory, without locks.

The model's parameters move to shared memory (``model.share_memory()``); each worker process gets
the model (by inheritance under fork, as handles to the same memory under spawn), builds its own
optimizer and trains on its own data; every step writes straight into the shared parameters, so
the parent process ends up with the model all of them trained.

    python examples/hogwild.py [--processes 2] [--steps 300] [--start-method spawn]
"""
import argparse

import minidl
import minidl.multiprocessing as mp
import minidl.nn.functional as F
from minidl import nn
from cli import positive_int

TRUE_WEIGHT = [[1.5], [-2.0], [0.5], [3.0]]


def make_data(seed, n=512):
    """A noisy linear problem: y = x @ TRUE_WEIGHT + 1 + noise."""
    g = minidl.Generator().manual_seed(seed)
    x = minidl.randn(n, 4, generator=g)
    y = x @ minidl.tensor(TRUE_WEIGHT) + 1.0 + 0.01 * minidl.randn(n, 1, generator=g)
    return x, y


def train(model, rank, steps, lr=0.05, batch_size=32):
    x, y = make_data(seed=rank + 1)
    optimizer = minidl.optim.SGD(model.parameters(), lr=lr)
    for step in range(steps):
        start = (step * batch_size) % len(x)
        loss = F.mse_loss(model(x[start:start + batch_size]), y[start:start + batch_size])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def test_loss(model):
    x, y = make_data(seed=0)
    with minidl.no_grad():
        return F.mse_loss(model(x), y).item()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=positive_int, default=2)
    parser.add_argument("--steps", type=positive_int, default=300, help="steps of each process")
    parser.add_argument("--start-method", choices=mp.get_all_start_methods(), default="spawn")
    args = parser.parse_args(argv)

    minidl.manual_seed(0)
    model = nn.Linear(4, 1).share_memory()
    print(f"test loss before: {test_loss(model):.4f}")
    context = mp.get_context(args.start_method)
    workers = [context.Process(target=train, args=(model, rank, args.steps)) for rank in range(args.processes)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
        if w.exitcode:
            raise SystemExit(f"a worker failed (exit code {w.exitcode})")
    print(f"test loss after {args.processes} processes x {args.steps} steps ({args.start_method}): "
          f"{test_loss(model):.4f}")
    print("weight", [round(v, 3) for v in model.weight.detach().reshape(-1).tolist()],
          "bias", round(model.bias.item(), 3))


if __name__ == "__main__":
    main()
