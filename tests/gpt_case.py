"""The GPT benchmark's model (benchmarks/gpt_step.py) at test sizes, for the tests that train it compiled."""
import sys
from pathlib import Path

import minidl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
try:
    from gpt_step import VOCAB, gpt_class, initial_weights
finally:
    sys.path.pop(0)

__all__ = ["VOCAB", "tiny_gpt"]


def tiny_gpt():
    """2 layers of width 16, 2 heads, context 8, no dropout, with the benchmark's initial weights."""
    model = gpt_class(minidl)(2, 16, 2, 8, 0.0)
    named = list(model.named_parameters())
    weights = initial_weights([(n, tuple(p.shape)) for n, p in named], 2)
    with minidl.no_grad():
        for n, p in named:
            p.copy_(minidl.from_numpy(weights[n]))
    return model
