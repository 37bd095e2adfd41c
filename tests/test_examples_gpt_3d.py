"""examples/gpt_3d.py: the char GPT trained as FSDP, data x tensor parallel, FSDP x tensor parallel, pipeline x
tensor parallel and all three trains as one process does (float64: the same losses and weights to 1e-8), and a
checkpoint saved in one layout loads in another — and in one process — to continue the same run. The layouts
run on simulated ranks (the example's own functions); one launch under mpiexec and one under the launcher run it
as a user does."""
import sys
from pathlib import Path

import pytest
from example_runs import ROOT, run_example

import minidl.dist as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import gpt_3d  # noqa: E402

DATA, VOCAB = gpt_3d.read_text()
STEPS = 3


@pytest.fixture(scope="module")
def single():
    return gpt_3d.single_process(gpt_3d.arguments(["--steps", str(STEPS)]), DATA, VOCAB)


def _train(layout, ranks, *options):
    args = gpt_3d.arguments(["--steps", str(STEPS), *options])
    return dist.sim.run(ranks, lambda rank: gpt_3d.train(layout, args, DATA, VOCAB))


@pytest.mark.parametrize("layout, ranks", [("fsdp", 4), ("dp-tp", 4), ("fsdp-tp", 4), ("pp-tp", 4),
                                           ("dp-pp-tp", 8)])
def test_every_layout_trains_as_one_process(layout, ranks, single):
    results = _train(layout, ranks)
    for result in results:
        loss, weight, odd = gpt_3d.differences(result, single)
        assert not odd and len(result[1]) == STEPS
        assert loss <= 1e-8 and weight <= 1e-8, (loss, weight)


def test_a_checkpoint_reshards_from_fsdp_to_tensor_parallel_to_one_process(tmp_path):
    """4 ranks FSDP (step 1) -> 4 ranks FSDP x TP (step 2) -> 2 ranks TP (step 3) -> one process (step 4): after
    each, the losses and weights of one process that trained straight through as many steps."""
    runs = [("fsdp", 4, 1), ("fsdp-tp", 4, 2), ("dp-tp", 2, 3), ("one", 1, 4)]   # (dp-tp on 2 ranks: 1 x 2)
    for i, (layout, ranks, steps) in enumerate(runs):
        args = gpt_3d.arguments(["--steps", str(steps), "--save", str(tmp_path / layout)]
                                + (["--load", str(tmp_path / runs[i - 1][0])] if i else []))
        if layout == "one":
            result = gpt_3d.train(layout, args, DATA, VOCAB)
        else:
            result = dist.sim.run(ranks, lambda rank: gpt_3d.train(layout, args, DATA, VOCAB))[0]
        assert result[0] == (runs[i - 1][2] if i else 0) and len(result[1]) == 1   # (resumed where it was saved)
        straight = gpt_3d.single_process(gpt_3d.arguments(["--steps", str(steps)]), DATA, VOCAB)
        loss, weight, odd = gpt_3d.differences(result, straight)
        assert not odd and loss <= 1e-8 and weight <= 1e-8, (layout, loss, weight)


def test_under_mpiexec_fsdp_x_tensor_parallel_checks_itself_against_one_process():
    code, out = run_example("gpt_3d.py", "--layout", "fsdp-tp", "--steps", "2", "--check", cwd=ROOT, ranks=4,
                            timeout=240)
    assert code == 0, out
    assert "layout fsdp-tp {'dp': 2, 'tp': 2} on 4 rank(s)" in out and "against one process" in out, out


def test_a_layout_the_ranks_cannot_hold_is_refused_once():
    code, out = run_example("gpt_3d.py", "--layout", "pp-tp", "--tp", "3", cwd=ROOT, ranks=2, timeout=120)
    assert code == 2 and out.count("error: --layout pp-tp needs a multiple of 6 ranks\n") == 1, out


def test_without_a_launcher_it_says_how_to_launch():
    code, out = run_example("gpt_3d.py", "--layout", "fsdp", cwd=ROOT, timeout=60)
    assert code != 0 and "mpiexec -n 4 python examples/gpt_3d.py --layout fsdp" in out, out


@pytest.mark.parametrize("layout", ["fsdp", "fsdp-tp", "dp-tp"])
def test_a_gpt_built_on_the_meta_device_and_initialised_shard_by_shard_trains_as_one_process(layout, single):
    for result in _train(layout, 4, "--meta-init"):
        loss, weight, odd = gpt_3d.differences(result, single)
        assert not odd and loss <= 1e-8 and weight <= 1e-8, (loss, weight)
