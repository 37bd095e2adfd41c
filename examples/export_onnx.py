"""Export the digits CNN and the char-GPT to ONNX and run them in ONNX Runtime.

    python examples/train_digits.py      # (optional) train the CNN: digits-cnn.safetensors
    python examples/export_onnx.py       # writes digits-cnn.onnx and char-gpt.onnx, runs both

The CNN (examples/train_digits.py's, BatchNorm included) is exported with a dynamic batch axis:
its checkpoint if there is one (else a few training batches first), then ONNX Runtime classifies
the hold-out digits in one batch of any size and agrees with minidl. The char-GPT
(examples/char_gpt.py's model, untrained here: the point is that both runtimes agree) is exported
with dynamic batch and sequence axes: its forward reads ``t = idx.shape[1]`` and cuts its causal mask to
``[:t, :t]``, both traced, so one graph serves every prompt length; ONNX Runtime and minidl then
continue a prompt greedily and must write the same characters. Needs ``pip install "minidl[onnx]"``.
"""
import argparse
import os
import sys
import warnings

import numpy as np

import minidl
from char_gpt import DATA, GPT
from cli import positive_int
from minidl.utils.data import DataLoader
from minidl.vision.datasets import Digits
from train_digits import make_model, train_epoch


def digits_cnn(checkpoint):
    model = make_model("cnn")
    if os.path.exists(checkpoint):
        model.load_state_dict(minidl.load(checkpoint)["model"])
        print(f"digits CNN: loaded {checkpoint}")
    else:
        loader = DataLoader(Digits(train=True), batch_size=32, shuffle=True)
        train_epoch(model, loader, minidl.optim.Adam(model.parameters(), lr=3e-3), "training", limit=20, show=False)
        print(f"digits CNN: no {checkpoint}; trained on 20 batches first")
    return model.eval()


def onnx_runtime(path):
    import onnxruntime
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return lambda x: session.run(None, {name: x.numpy()})[0]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default="digits-cnn.safetensors", help="the CNN's (from train_digits.py)")
    parser.add_argument("--out", default=".", help="folder for the .onnx files")
    parser.add_argument("--prompt", default="The light")
    parser.add_argument("--length", type=positive_int, default=40, help="characters to generate")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        sys.exit('export_onnx.py runs the models in ONNX Runtime: pip install "minidl[onnx]"')
    minidl.manual_seed(args.seed)
    # MultiheadAttention checks its inputs' sizes in Python and skips masking work when no row is
    # fully masked: the tracer warns that those checks are fixed at export. Both hold for any
    # length of a causal mask, so the warnings are expected here.
    warnings.filterwarnings("ignore", category=minidl.onnx.TracerWarning)

    cnn = digits_cnn(args.checkpoint)
    path = os.path.join(args.out, "digits-cnn.onnx")
    minidl.onnx.export(cnn, (minidl.randn(2, 1, 8, 8),), path, input_names=["images"], output_names=["logits"],
                       dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}})
    test = Digits(train=False)
    images = minidl.stack([test[i][0] for i in range(len(test))])
    labels = np.array([test[i][1] for i in range(len(test))])
    got = onnx_runtime(path)(images)
    with minidl.no_grad():
        want = cnn(images).numpy()
    print(f"{path}: ONNX Runtime on {len(labels)} hold-out digits in one batch: accuracy "
          f"{(got.argmax(1) == labels).mean():.4f} (minidl {(want.argmax(1) == labels).mean():.4f}), "
          f"largest logit difference {np.abs(got - want).max():.1e}")

    text = DATA.read_text(encoding="utf-8")
    vocab = sorted(set(text))
    gpt = GPT(len(vocab), context=64, width=64, heads=4, layers=2, dropout=0.0).eval()
    path = os.path.join(args.out, "char-gpt.onnx")
    minidl.onnx.export(gpt, (minidl.zeros(1, 8, dtype=minidl.int64),), path, input_names=["idx"],
                       output_names=["logits"], dynamic_axes={"idx": {0: "batch", 1: "time"},
                                                              "logits": {0: "batch", 1: "time"}})
    run = onnx_runtime(path)
    ids = [vocab.index(c) for c in args.prompt if c in vocab]
    theirs, ours, worst = list(ids), list(ids), 0.0
    for _ in range(args.length):   # greedy: each step one longer prompt through the same graph
        window = minidl.tensor([theirs[-64:]])
        logits = run(window)[0, -1]
        with minidl.no_grad():
            mine = gpt(minidl.tensor([ours[-64:]]))[0, -1].numpy()
        worst = max(worst, float(np.abs(logits - mine).max()))
        theirs.append(int(logits.argmax()))
        ours.append(int(mine.argmax()))
    print(f"{path}: greedy continuation of {args.prompt!r}, prompt lengths {len(ids)} to {len(ids) + args.length - 1}")
    print(f"  ONNX Runtime: {''.join(vocab[i] for i in theirs)!r}")
    print(f"  minidl:       {''.join(vocab[i] for i in ours)!r}")
    print(f"  same text: {theirs == ours}; largest logit difference {worst:.1e}")
    if theirs != ours:
        sys.exit("ONNX Runtime and minidl disagree")


if __name__ == "__main__":
    main()
