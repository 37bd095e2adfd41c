"""A word-level LSTM language model trained for an epoch in minidl and in PyTorch eager, in the same run, on one
thread: embedding -> 2-layer LSTM -> linear decoder -> cross-entropy, truncated backpropagation through time
(the hidden state carried from batch to batch, detached), SGD with clip_grad_norm_. Zaremba et al.'s "small"
model by default (vocabulary 10000, 200 units, 20 sequences of 35 steps), as PyTorch's word_language_model
example trains it (lr 20, clip 0.25).

The corpus is GENERATED, not a real text (none of usable size is available offline here): a first-order Markov
chain over the vocabulary, each word followed by one of a few dozen successors drawn with Zipf-like weights, so
that there is word-level structure for the model to learn (its loss falls well below log(vocab)). Both
libraries start from the same weights and see the same batches, taking turns batch by batch (so a load on the
machine hits both alike); the first ``--warmup`` batches (Numba's compilation) are run but not timed. Prints
each library's epoch time, the ratio and the CPU model; ``--profile`` adds where minidl's time goes by kernel.

Usage::

    python benchmarks/lstm_lm.py                    # an epoch of 100 batches (70000 tokens)
    python benchmarks/lstm_lm.py --batches 20 --profile
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench_common import cpu_model, import_lib, kernel_times, libraries, versions  # noqa: E402


def corpus(tokens: int, vocab: int, successors: int = 32, seed: int = 0) -> np.ndarray:
    """``tokens`` word ids of a Markov chain: word w is followed by one of ``successors`` words chosen for it,
    with weights 1/rank (Zipf); the successor sets themselves favour frequent (low) ids."""
    rng = np.random.default_rng(seed)
    popularity = 1.0 / np.arange(1, vocab + 1)
    nexts = rng.choice(vocab, size=(vocab, successors), p=popularity / popularity.sum())
    weights = 1.0 / np.arange(1, successors + 1)
    cumulative = np.cumsum(weights / weights.sum())
    picks = np.minimum(np.searchsorted(cumulative, rng.random(tokens)), successors - 1)
    out = np.empty(tokens, np.int64)
    w = 0
    for i in range(tokens):
        w = nexts[w, picks[i]]
        out[i] = w
    return out


def build(lib, vocab, hidden, layers, weights=None):
    """(model parameters, step(inputs, targets) -> loss) for minidl or torch; ``weights``: a state dict (numpy)
    to start from."""
    nn = lib.nn

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, hidden)
            self.lstm = nn.LSTM(hidden, hidden, layers)
            self.decoder = nn.Linear(hidden, vocab)

        def forward(self, x, state):
            out, state = self.lstm(self.embed(x), state)
            return self.decoder(out), state

    model = Model()
    if weights is not None:
        model.load_state_dict({k: lib.tensor(v) for k, v in weights.items()})
    opt = lib.optim.SGD(model.parameters(), lr=20.0)
    carried = [None]

    def step(x, y):
        logits, state = model(x, carried[0])
        carried[0] = tuple(s.detach() for s in state)          # truncated BPTT
        loss = nn.functional.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        opt.step()
        return float(loss.item())

    return model, step


def batches(data: np.ndarray, batch: int, bptt: int):
    """(input, target) pairs of shape (bptt, batch), the corpus cut into ``batch`` streams as in
    word_language_model's batchify."""
    streams = data[:len(data) // batch * batch].reshape(batch, -1).T      # (length, batch)
    for i in range(0, streams.shape[0] - 1 - bptt + 1, bptt):
        yield streams[i:i + bptt], streams[i + 1:i + 1 + bptt]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", type=int, default=10000)
    ap.add_argument("--hidden", type=int, default=200)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--bptt", type=int, default=35)
    ap.add_argument("--batches", type=int, default=100, help="batches in the timed epoch")
    ap.add_argument("--warmup", type=int, default=2, help="batches run first, untimed")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--profile", action="store_true", help="also time minidl's kernels over a few batches")
    args = ap.parse_args()

    libs = libraries()
    torch = libs.get("torch") or import_lib("torch")
    if torch is None:
        sys.exit("lstm_lm.py compares with PyTorch, which cannot be imported here")
    for lib in libs.values():
        lib.set_num_threads(args.threads)
    torch.manual_seed(0)
    t_model, t_step = build(torch, args.vocab, args.hidden, args.layers)
    weights = {k: v.detach().numpy().copy() for k, v in t_model.state_dict().items()}
    _, m_step = build(libs["minidl"], args.vocab, args.hidden, args.layers, weights)
    steps = {"torch": t_step, "minidl": m_step}

    tokens = (args.warmup + args.batches) * args.batch * args.bptt + args.batch
    pairs = list(batches(corpus(tokens, args.vocab), args.batch, args.bptt))
    feeds = {"torch": [(torch.tensor(x), torch.tensor(y)) for x, y in pairs],
             "minidl": [(libs["minidl"].tensor(x), libs["minidl"].tensor(y)) for x, y in pairs]}
    seconds = {name: 0.0 for name in steps}
    losses = {name: [] for name in steps}
    for i in range(len(pairs)):
        for name, step in steps.items():
            start = time.perf_counter()
            losses[name].append(step(*feeds[name][i]))
            if i >= args.warmup:
                seconds[name] += time.perf_counter() - start

    print(f"# Word-level LSTM LM, one epoch of {args.batches} batches ({args.batches * args.batch * args.bptt} "
          f"tokens, generated corpus), vocab {args.vocab}, {args.layers} x {args.hidden} LSTM, batch {args.batch} x "
          f"bptt {args.bptt}, {args.threads} thread(s)")
    print(f"CPU: {cpu_model()}; {versions(libs)}")
    for name in steps:
        print(f"{name:>7}: {seconds[name]:.2f} s/epoch ({seconds[name] / args.batches * 1e3:.1f} ms/batch), loss "
              f"{losses[name][0]:.3f} -> {np.mean(losses[name][-10:]):.3f} (mean of the last 10)")
    print(f"minidl / torch: {seconds['minidl'] / seconds['torch']:.2f}x (issue 40's target: <= 1.5x)")
    if args.profile:
        it = iter(feeds["minidl"] * 2)
        kernel_times(libs["minidl"], lambda: m_step(*next(it)), "LSTM LM batch", min(10, len(pairs)))


if __name__ == "__main__":
    main()
