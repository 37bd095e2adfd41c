"""The character-level GPT example learns more than character frequencies."""
import math
import re
from collections import Counter

from test_examples import ROOT, _run

TEXT = ROOT / "examples" / "data" / "lighthouse.txt"


def unigram_entropy(text):
    """Nats per character of the best model that ignores context: the text's own frequencies."""
    counts = Counter(text)
    return -sum(c / len(text) * math.log(c / len(text)) for c in counts.values())


def test_char_gpt_beats_the_unigram_entropy(tmp_path):
    out = _run(str(ROOT / "examples" / "char_gpt.py"), "--data", str(TEXT), "--steps", "90", "--eval-every", "30",
               "--context", "32", "--lr", "0.006", "--sample-length", "40", cwd=tmp_path)
    bound = unigram_entropy(TEXT.read_text(encoding="utf-8"))
    train, val = map(float, re.search(r"final train loss ([\d.]+)\s+val loss ([\d.]+)", out).groups())
    # a model that only learned the frequencies would sit at the bound; using the context goes below it
    assert train < bound - 0.4 and val < bound - 0.2, (train, val, bound)
    evals = [float(v) for v in re.findall(r"step +\d+ +train loss ([\d.]+)", out)]
    assert len(evals) == 3 and evals[-1] < evals[0]
    assert re.search(r"sample:\nThe light", out)
