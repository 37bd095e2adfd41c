"""Train a small GPT on characters of a text file and sample from it, PyTorch-style.

    python examples/char_gpt.py                      # the bundled story, ~1 minute on 2 cores
    python examples/char_gpt.py --data my.txt --steps 2000 --layers 4

The model is a decoder-only transformer: token and position embeddings, blocks of causal
self-attention and an MLP, each behind a LayerNorm (pre-norm) with a residual connection, a final
LayerNorm and a linear head that shares its weight with the token embedding. It is trained with
AdamW, weight decay only on the matrices of the linear maps, gradient clipping and a cosine
learning-rate schedule after a short warm-up, then asked to continue a prompt (temperature and
top-k sampling). The losses are cross-entropies in nats per character; a model that knew only how
often each character occurs would score the text's unigram entropy, printed for comparison.
"""
import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

import minidl
from minidl import nn
from minidl.nn import functional as F
from minidl.optim import AdamW
from minidl.optim.lr_scheduler import LambdaLR
from cli import non_negative_float, positive_float, positive_int, probability

DATA = Path(__file__).resolve().parent / "data" / "lighthouse.txt"


class Block(nn.Module):
    """x + attention(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, width, heads, dropout):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, dropout=dropout, batch_first=True)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.ReLU(), nn.Linear(4 * width, width),
                                 nn.Dropout(dropout))

    def forward(self, x, causal):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=causal, need_weights=False, is_causal=True)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """``block``: the class of its blocks (``char_gpt_tp.py`` gives one whose attention splits by heads)."""

    def __init__(self, vocab, context, width, heads, layers, dropout, block=Block):
        super().__init__()
        self.context = context
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(context, width)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([block(width, heads, dropout) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tok.weight        # weight tying: one matrix reads and writes characters
        # True above the diagonal: position i may not attend to j > i
        self.register_buffer("causal", minidl.empty(context, context, dtype=minidl.bool), persistent=False)
        self.init_weights()

    def init_weights(self):
        """GPT-2's small initialisation of every matrix, and the causal mask (after each module's own
        initialisation: a model built on the meta device runs its modules' reset_parameters(), then this)."""
        with minidl.no_grad():
            for p in self.parameters():
                if p.ndim == 2:
                    nn.init.normal_(p, 0.0, 0.02)
            self.causal.copy_(minidl.ones(self.context, self.context, dtype=minidl.bool).triu(1))

    def forward(self, idx):
        t = idx.shape[1]
        x = self.drop(self.tok(idx) + self.pos(minidl.arange(t, device=idx.device)))
        causal = self.causal[:t, :t]
        for block in self.blocks:
            x = block(x, causal)
        return self.head(self.ln_f(x))


def param_groups(model, weight_decay):
    """Decay the matrices of linear maps; not biases, LayerNorm gains or embeddings (the tied head
    is the token embedding), whose shrinking would only bias the model."""
    skip = {id(m.weight) for m in model.modules() if isinstance(m, (nn.Embedding, nn.LayerNorm))}
    decay = [p for p in model.parameters() if p.ndim >= 2 and id(p) not in skip]
    rest = [p for p in model.parameters() if p.ndim < 2 or id(p) in skip]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


def batches(data, context, batch_size, rng, device):
    """Random windows of the text: inputs and the same windows shifted by one character."""
    starts = rng.integers(0, len(data) - context - 1, batch_size)
    x = np.stack([data[s:s + context] for s in starts])
    y = np.stack([data[s + 1:s + context + 1] for s in starts])
    return minidl.from_numpy(x).to(device), minidl.from_numpy(y).to(device)


def lm_loss(model, x, y):
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def estimate_loss(model, data, args, rng, device, rounds=4):
    model.eval()
    with minidl.no_grad():
        total = sum(lm_loss(model, *batches(data, args.context, args.batch_size, rng, device)).item()
                    for _ in range(rounds))
    model.train()
    return total / rounds


def sample(model, prompt, length, temperature, top_k, device):
    """Continue ``prompt`` (token ids) one character at a time: the last position's logits,
    divided by the temperature, cut to the ``top_k`` most likely characters, then sampled."""
    model.eval()
    ids = minidl.tensor([list(prompt)], device=device)
    with minidl.no_grad():
        for _ in range(length):
            logits = model(ids[:, -model.context:])[:, -1, :] / temperature
            if top_k is not None and top_k < logits.shape[-1]:
                kth = minidl.topk(logits, top_k).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            nxt = minidl.multinomial(F.softmax(logits, dim=-1), num_samples=1)
            ids = minidl.cat([ids, nxt], dim=1)
    model.train()
    return ids[0].tolist()


def unigram_entropy(data, vocab):
    p = np.bincount(data, minlength=vocab) / len(data)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def training_arguments(parser, steps):
    """The model's and its training's options (char_gpt_tp.py takes them too)."""
    parser.add_argument("--data", type=Path, default=DATA, help="a UTF-8 text file (default: the bundled story)")
    parser.add_argument("--steps", type=positive_int, default=steps)
    parser.add_argument("--batch-size", type=positive_int, default=16)
    parser.add_argument("--context", type=positive_int, default=64, help="characters the model sees at once")
    parser.add_argument("--width", type=positive_int, default=64)
    parser.add_argument("--heads", type=positive_int, default=4)
    parser.add_argument("--layers", type=positive_int, default=2)
    parser.add_argument("--dropout", type=probability, default=0.0)
    parser.add_argument("--lr", type=positive_float, default=3e-3)
    parser.add_argument("--weight-decay", type=non_negative_float, default=0.1)
    parser.add_argument("--clip", type=positive_float, default=1.0, help="max gradient norm")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    training_arguments(parser, steps=600)
    parser.add_argument("--eval-every", type=positive_int, default=100)
    parser.add_argument("--prompt", default="The light")
    parser.add_argument("--sample-length", type=positive_int, default=300)
    parser.add_argument("--temperature", type=positive_float, default=0.8)
    parser.add_argument("--top-k", type=positive_int, default=10)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.width % args.heads:
        parser.error(f"--heads {args.heads} does not divide --width {args.width}")
    device = minidl.device(args.device)
    if device.type == "cuda" and not minidl.cuda.is_available():
        sys.exit(f"error: device '{args.device}': device 'cuda' is not available here (it needs CuPy and an "
                 f"NVIDIA GPU; MINIDL_CUDA_SIM=1 runs it on the CPU simulator); use --device cpu")

    text = args.data.read_text(encoding="utf-8")
    chars = sorted(set(text))
    code = {c: i for i, c in enumerate(chars)}
    data = np.array([code[c] for c in text], dtype=np.int64)
    split = int(0.9 * len(data))
    train, val = data[:split], data[split:]
    if len(val) <= args.context + 1:
        sys.exit(f"error: {args.data} is too short for a context of {args.context} characters")
    minidl.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    model = GPT(len(chars), args.context, args.width, args.heads, args.layers, args.dropout).to(device)
    optimizer = AdamW(param_groups(model, args.weight_decay), lr=args.lr, betas=(0.9, 0.95))
    warmup = max(1, args.steps // 20)     # linear warm-up, then a cosine decay to zero

    def lr_factor(step):
        return min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * step / args.steps))

    schedule = LambdaLR(optimizer, lr_factor)
    print(f"{args.data.name}: {len(text)} characters, {len(chars)} distinct; unigram entropy "
          f"{unigram_entropy(data, len(chars)):.3f} nats/char")
    print(f"GPT: {args.layers} layers, width {args.width}, {args.heads} heads, context {args.context}, "
          f"{sum(p.numel() for p in model.parameters())} parameters")

    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        loss = lm_loss(model, *batches(train, args.context, args.batch_size, rng, device))
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optimizer.step()
        schedule.step()
        if step % args.eval_every == 0 or step == args.steps:
            print(f"step {step:5d}  train loss {estimate_loss(model, train, args, rng, device):.4f}  "
                  f"val loss {estimate_loss(model, val, args, rng, device):.4f}  "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)
    print(f"final train loss {estimate_loss(model, train, args, rng, device, 16):.4f}  "
          f"val loss {estimate_loss(model, val, args, rng, device, 16):.4f}  "
          f"in {time.perf_counter() - start:.0f} s")
    prompt = [code[c] for c in args.prompt if c in code] or [0]
    out = sample(model, prompt, args.sample_length, args.temperature, args.top_k, device)
    print("sample:\n" + "".join(chars[i] for i in out))


if __name__ == "__main__":
    main()
