"""The LSTM example learns the adding problem it sets itself."""
import re

from test_examples import ROOT, _run


def test_lstm_learns_the_adding_problem(tmp_path):
    out = _run(str(ROOT / "examples" / "lstm_sequence.py"), "--epochs", "8", "--train-size", "1024", "--length", "8",
               "--batch-size", "32", "--lr", "0.02", cwd=tmp_path)
    # The target is the sum of two U(0, 1) values: guessing its mean scores Var = 2/12, and remembering only
    # one of the two values at best 1/12. A tenth of the guess is reached only by using both.
    assert float(re.search(r"final test loss ([\d.]+)", out).group(1)) < (2 / 12) / 10
    losses = [float(v) for v in re.findall(r"train loss ([\d.]+)", out)]
    assert len(losses) == 8 and losses[-1] < losses[0] / 10
