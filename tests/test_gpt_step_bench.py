"""benchmarks/gpt_step.py stays runnable and honest: its tiny GPT computes the same losses in minidl and in torch
from the same weights and batches, and starts from GPT-2's initialisation."""
import importlib
import math
import pathlib
import re

import numpy as np
import pytest

import minidl

torch = pytest.importorskip("torch")
BENCH = pathlib.Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))          # the scripts import their shared module as a top-level one
    return importlib.import_module("gpt_step")


def test_tiny_gpt_losses_agree_with_torch(bench):
    losses = bench.check_losses({"minidl": minidl, "torch": torch}, "tiny", steps=2)
    np.testing.assert_allclose(losses["minidl"], losses["torch"], rtol=1e-4)
    # weights of std 0.02 give nearly uniform predictions: the first loss is close to ln(vocabulary)
    assert abs(losses["torch"][0] - math.log(bench.VOCAB)) < 0.1
    assert losses["minidl"][1] < losses["minidl"][0]


def test_gpt2_initialisation_and_groups(bench):
    _, model = bench.build(minidl, "tiny")
    assert model.head.weight is model.tok.weight
    named = dict(model.named_parameters())
    w = {n: p.detach().numpy() for n, p in named.items()}
    n_layer = bench.SIZES["tiny"]["n_layer"]
    assert np.std(w["blocks.0.proj.weight"]) == pytest.approx(0.02 / math.sqrt(2 * n_layer), rel=0.05)
    assert np.std(w["blocks.1.attn.proj.weight"]) == pytest.approx(0.02 / math.sqrt(2 * n_layer), rel=0.05)
    assert np.std(w["blocks.0.fc.weight"]) == pytest.approx(0.02, rel=0.05)
    assert np.std(w["tok.weight"]) == pytest.approx(0.02, rel=0.05)
    assert not w["blocks.0.fc.bias"].any() and (w["ln_f.weight"] == 1).all()
    _, tmodel = bench.build(torch, "tiny")
    for name, p in tmodel.named_parameters():
        np.testing.assert_array_equal(p.detach().numpy(), w[name])


def test_profile_splits_the_step(bench, capsys):
    profile = importlib.import_module("gpt_profile")
    profile.profile({"minidl": minidl, "torch": torch}, "tiny", bench.build, steps=1)
    out = capsys.readouterr().out
    shares = {layer: float(m.group(1)) for layer in profile.LAYERS
              if (m := re.search(re.escape(f"| {layer} | ") + r"([\d.]+)%", out))}
    assert set(shares) == set(profile.LAYERS)
    assert shares[profile.COMPILED] > 0 and shares["autograd (minidl/autograd)"] > 0
    assert re.search(r"\| autograd nodes .*\| (\d+) \| (\d+) \|", out)
