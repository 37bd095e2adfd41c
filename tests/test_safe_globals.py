"""minidl.nn.modules (torch's submodule layout) and weights-only loading of whole models with safe_globals:
the word-level language-model pattern, where a trained model is saved whole and reloaded by naming its classes."""
import functools
import pickle

import numpy as np
import pytest

import minidl
import minidl.nn as nn
from minidl import serialization

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:enable_nested_tensor")


def test_every_class_sits_where_torch_keeps_it_as_the_same_object():
    classes = [getattr(nn, name) for name in nn.__all__ if isinstance(getattr(nn, name), type)]
    for cls in classes:
        if cls is nn.Parameter:  # torch.nn.parameter, not a modules submodule; minidl.nn.parameter already
            continue
        where = getattr(torch.nn, cls.__name__).__module__
        assert where.startswith("torch.nn.modules."), where
        assert getattr(getattr(nn.modules, where.rsplit(".", 1)[1]), cls.__name__) is cls, where
    from minidl.nn.modules.linear import NonDynamicallyQuantizableLinear  # importable by the dotted path
    assert issubclass(NonDynamicallyQuantizableLinear, nn.Linear)
    assert type(nn.MultiheadAttention(4, 2).out_proj) is NonDynamicallyQuantizableLinear  # as torch's
    assert type(torch.nn.MultiheadAttention(4, 2).out_proj).__name__ == "NonDynamicallyQuantizableLinear"


class WordLM(nn.Module):
    """A word-level language model of the kind examples/word_language_model trains."""

    def __init__(self, ntoken=13, d=8):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, d)
        self.drop = nn.Dropout(0.2)
        self.transformer = nn.TransformerEncoder(nn.TransformerEncoderLayer(d, 2, 16, 0.1), 2)
        self.lstm, self.gru, self.rnn = nn.LSTM(d, d, 2), nn.GRU(d, d), nn.RNN(d, d)
        self.decoder = nn.Linear(d, ntoken)

    def forward(self, tokens):
        x = self.transformer(self.drop(self.encoder(tokens)))
        x = self.rnn(self.gru(self.lstm(x)[0])[0])[0]
        return self.decoder(x)


# the script's list, by torch-like module paths (functional.relu: TransformerEncoderLayer keeps its activation)
LM_GLOBALS = [WordLM, nn.modules.activation.MultiheadAttention, nn.modules.container.ModuleList,
              nn.modules.dropout.Dropout, nn.modules.linear.Linear, nn.modules.linear.NonDynamicallyQuantizableLinear,
              nn.modules.normalization.LayerNorm, nn.modules.sparse.Embedding,
              nn.modules.transformer.TransformerEncoder, nn.modules.transformer.TransformerEncoderLayer,
              nn.modules.rnn.LSTM, nn.modules.rnn.GRU, nn.modules.rnn.RNN, nn.functional.relu]


def _saved_lm(path):
    minidl.manual_seed(0)
    model = WordLM().eval()
    minidl.save(model, path)
    return model


def test_a_whole_language_model_reloads_under_weights_only_with_its_classes_listed(tmp_path):
    model = _saved_lm(tmp_path / "model.pt")
    with serialization.safe_globals(LM_GLOBALS):
        assert serialization.get_safe_globals() == LM_GLOBALS
        back = minidl.load(tmp_path / "model.pt")  # weights_only=True by default
    assert serialization.get_safe_globals() == []  # the block's globals are gone after it
    assert type(back) is WordLM and type(back.lstm) is nn.LSTM
    assert [n for n, _ in back.named_parameters()] == [n for n, _ in model.named_parameters()]
    tokens = minidl.tensor([[1, 5, 7], [12, 0, 3]])
    np.testing.assert_array_equal(back(tokens).detach().numpy(), model(tokens).detach().numpy())


def test_the_names_torch_asks_for_load_the_same_minidl_model(tmp_path):
    """The oracle: torch lists the globals its weights-only load of a model needs; the same names, read as paths
    under minidl, load minidl's model of the same layers."""
    t = torch.nn
    torch.save(t.Sequential(t.Embedding(13, 8), t.TransformerEncoder(t.TransformerEncoderLayer(8, 2, 16), 1),
                            t.LSTM(8, 8)), tmp_path / "torch.pt")
    names = torch.serialization.get_unsafe_globals_in_checkpoint(str(tmp_path / "torch.pt"))
    listed = [functools.reduce(getattr, name.split(".")[1:], minidl) for name in names]  # torch.nn.X -> minidl.nn.X
    model = nn.Sequential(nn.Embedding(13, 8), nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 1),
                          nn.LSTM(8, 8))
    minidl.save(model, tmp_path / "minidl.pt")
    with serialization.safe_globals(listed):
        back = minidl.load(tmp_path / "minidl.pt")
    assert [type(m) for m in back.modules()] == [type(m) for m in model.modules()]


def test_an_unlisted_class_is_refused_by_name(tmp_path):
    _saved_lm(tmp_path / "model.pt")
    for missing in (nn.modules.rnn.GRU, nn.functional.relu, WordLM):
        with serialization.safe_globals([g for g in LM_GLOBALS if g is not missing]):
            with pytest.raises(pickle.UnpicklingError) as info:
                minidl.load(tmp_path / "model.pt")
        name = f"{missing.__module__}.{missing.__qualname__}"
        message = str(info.value)
        assert name in message and "model.pt" in message and "weights_only=False" in message
    with pytest.raises(pickle.UnpicklingError, match="WordLM"):
        minidl.load(tmp_path / "model.pt")  # nothing listed
    assert type(minidl.load(tmp_path / "model.pt", weights_only=False)) is WordLM


def test_add_safe_globals_lasts_until_cleared_and_accepts_named_entries(tmp_path):
    minidl.save(nn.Sequential(nn.Linear(2, 2)), tmp_path / "s.pt")
    try:
        serialization.add_safe_globals([(nn.Sequential, "minidl.nn.container.Sequential"), nn.Linear])
        serialization.add_safe_globals([nn.Linear])  # once only
        assert serialization.get_safe_globals() == [(nn.Sequential, "minidl.nn.container.Sequential"), nn.Linear]
        assert type(minidl.load(tmp_path / "s.pt")[0]) is nn.Linear
    finally:
        serialization.clear_safe_globals()
    with pytest.raises(pickle.UnpicklingError, match="minidl.nn.container.Sequential"):
        minidl.load(tmp_path / "s.pt")
    with pytest.raises(TypeError, match="module.qualname"):
        serialization.add_safe_globals([(nn.Linear, 3)])


def test_a_numpy_array_is_refused_by_name(tmp_path):
    minidl.save({"x": np.arange(3)}, tmp_path / "arr.pt")
    with pytest.raises(pickle.UnpicklingError, match="numpy") as info:
        minidl.load(tmp_path / "arr.pt")
    assert "arbitrary code" in str(info.value)
