"""minidl.dist.pipelining on simulated ranks: pipelined steps equal single-process training
(tests/pipeline_cases.py, also run under mpiexec by test_dist_mpi.py), the schedules as planned
against their closed forms, the checks of bad input, and a failing stage ending every rank."""
import numpy as np
import pytest

import minidl
import minidl.dist as dist
import pipeline_cases
from minidl import nn
from minidl.dist.pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe, actions, picture, pipe_split,
                                    pipeline)
from minidl.nn import functional as F


@pytest.mark.parametrize("size", [1, 2, 4])
def test_pipelined_steps_equal_single_process_training(size):
    failures = dist.sim.run(size, pipeline_cases.run_all, size)
    assert failures == [[]] * size


def _programs(cls, p, m):
    return [actions.with_transfers(s, p, cls.compute_order(s, p, m)) for s in range(p)]


@pytest.mark.parametrize("cls", [ScheduleGPipe, Schedule1F1B])
@pytest.mark.parametrize("p,m", [(2, 2), (2, 8), (3, 5), (4, 4), (4, 16)])
def test_planned_bubble_is_the_closed_form(cls, p, m):
    assert actions.ideal_bubble(_programs(cls, p, m)) == pytest.approx((p - 1) / (m + p - 1))


def test_tables_show_the_schedules():
    assert actions.table(_programs(Schedule1F1B, 2, 3)) == "\n".join([
        "step  stage 0  stage 1",
        "   0  F0       .",
        "   1  F1       F0",
        "   2  .        B0",
        "   3  B0       F1",
        "   4  F2       B1",
        "   5  B1       F2",
        "   6  .        B2",
        "   7  B2       ."])
    gpipe = actions.table(_programs(ScheduleGPipe, 2, 2)).splitlines()
    assert [line.split()[1:] for line in gpipe[1:]] == [["F0", "."], ["F1", "F0"], [".", "F1"], [".", "B0"],
                                                         ["B0", "B1"], ["B1", "."]]


def test_validation_rejects_broken_programs():
    A = actions.Action
    good = _programs(ScheduleGPipe, 2, 1)
    with pytest.raises(ValueError, match="stage 1 runs B0 before F0"):
        actions.validate([good[0], [A("RECV_F", 1, 0), A("B", 1, 0), A("F", 1, 0), A("SEND_B", 1, 0)]])
    with pytest.raises(ValueError, match=r"SEND_F\(0\) has no matching RECV_F\(0\) on stage 1"):
        actions.validate([good[0], [A("F", 1, 0), A("B", 1, 0), A("SEND_B", 1, 0)]])
    # both stages first wait for the other's gradient: a cycle
    cycle = [[A("F", 0, 0), A("RECV_B", 0, 0), A("SEND_F", 0, 0), A("B", 0, 0)],
             [A("RECV_F", 1, 0), A("F", 1, 0), A("B", 1, 0), A("SEND_B", 1, 0)]]
    with pytest.raises(ValueError, match=r"wait on each other forever.*0: 'RECV_B\(0\)', 1: 'RECV_F\(0\)'"):
        actions.validate(cycle)


def _block():
    return nn.Linear(4, 4).double()


def _errors(size, fn, **options):
    """fn(rank) on ``size`` sim ranks (``options`` for init_process_group); each rank's exception
    message (or None)."""
    def wrapped(rank):
        try:
            fn(rank)
        except Exception as e:
            return f"{type(e).__name__}: {e}"
        return None
    return dist.sim.run(size, wrapped, **options)


def test_bad_stages_and_calls_are_clear_errors_on_every_rank():
    errors = _errors(2, lambda r: PipelineStage(_block(), r, 3, "cpu"))
    assert all("num_stages=3 on 2 ranks" in e for e in errors)
    errors = _errors(2, lambda r: PipelineStage(_block(), r + 1, 2, "cpu"))
    assert "stage_index=2 on rank 1 is outside 0..1" in errors[1] and "stage 1 was built on rank 0" in errors[0]

    def too_few(rank):
        Schedule1F1B(PipelineStage(_block(), rank, 2, "cpu"), 1, loss_fn=F.mse_loss)
    assert all("n_microbatches=1" in e and "fewer than the 2 stages" in e for e in _errors(2, too_few))

    def target_on_first(rank):
        schedule = ScheduleGPipe(PipelineStage(_block(), rank, 2, "cpu"), 2, loss_fn=F.mse_loss)
        schedule.step(minidl.zeros(4, 4, dtype=minidl.float64), target=minidl.zeros(4, 4, dtype=minidl.float64))
    errors = _errors(2, target_on_first)
    assert "stage 0 (rank 0): a target is given on a stage that is not the last" in errors[0]
    assert errors[1] is not None  # (rank 1, waiting for rank 0's activations, fails instead of hanging)
    with pytest.raises(NotImplementedError, match="build each rank's stage by hand"):
        pipe_split()
    with pytest.raises(NotImplementedError, match="PipelineStage"):
        pipeline(None)


def test_a_shape_that_does_not_fit_the_next_stage_names_both():
    def run(rank):
        stage = PipelineStage(nn.Linear(4, 5).double() if rank == 0 else nn.Linear(4, 4).double(), rank, 2, "cpu",
                              input_args=minidl.zeros(2, 4, dtype=minidl.float64) if rank == 1 else None)
        schedule = ScheduleGPipe(stage, 2, loss_fn=F.mse_loss)
        if rank == 0:
            schedule.step(minidl.zeros(4, 4, dtype=minidl.float64))
        else:
            schedule.step(target=minidl.zeros(4, 4, dtype=minidl.float64))
    errors = _errors(2, run)
    assert "stage 0 (rank 0) sends micro-batch 0 as [([2, 5], 'float64')]" in errors[1]
    assert "stage 1 (rank 1) expects input_args [([2, 4], 'float64')]" in errors[1]
    assert errors[0] is not None and "stage 0 (rank 0)" in errors[0]  # (and rank 0 does not hang)


def test_a_stage_that_raises_ends_every_rank_naming_it():
    class Broken(nn.Module):
        def forward(self, x):
            raise ArithmeticError("broken on purpose")

    def run(rank):
        stage = PipelineStage(Broken() if rank == 1 else _block(), rank, 3, "cpu")
        schedule = Schedule1F1B(stage, 3, loss_fn=F.mse_loss)
        x = minidl.zeros(6, 4, dtype=minidl.float64)
        schedule.step(x) if rank == 0 else schedule.step(target=x) if rank == 2 else schedule.step()
    errors = _errors(3, run)
    assert "stage 1 (rank 1) raised in F0: ArithmeticError: broken on purpose" in errors[1]
    assert all(e is not None for e in errors)


def test_timeline_bubble_and_activation_memory():
    def run(rank, cls, m):
        stage = PipelineStage(nn.Sequential(nn.Linear(8, 8), nn.Tanh()).double(), rank, 2, "cpu")
        schedule = cls(stage, m, loss_fn=F.mse_loss)
        x = minidl.zeros(4 * m, 8, dtype=minidl.float64)
        schedule.step(x) if rank == 0 else schedule.step(target=x)
        return schedule.timeline()
    one = dist.sim.run(2, run, ScheduleGPipe, 1)[0]
    gpipe = dist.sim.run(2, run, ScheduleGPipe, 8)[0]
    ofob = dist.sim.run(2, run, Schedule1F1B, 8)[0]
    per_mb = one["peak_activation_bytes"]
    assert min(per_mb) > 0
    assert gpipe["peak_activation_bytes"] == [8 * b for b in per_mb]        # every micro-batch at once
    assert ofob["peak_activation_bytes"] == [2 * per_mb[0], per_mb[1]]      # stage s: at most p - s
    kinds = {(e["stage"], e["kind"]) for e in gpipe["events"]}
    assert {(0, "F"), (0, "SEND_F"), (0, "RECV_B"), (0, "B"), (1, "RECV_F"), (1, "F"), (1, "B"), (1, "SEND_B")} == kinds
    assert all(0 <= e["start"] <= e["end"] for e in gpipe["events"]) and len(gpipe["events"]) == 2 * 8 * 4
    assert 0 <= gpipe["bubble"] < 1 and gpipe["ideal"] == actions.table(_programs(ScheduleGPipe, 2, 8), actions.COSTS)
    assert np.isclose(dist.pipelining.bubble([
        {"rank": 0, "kind": "F", "start": 0.0, "end": 1.0}, {"rank": 1, "kind": "RECV_F", "start": 0.0, "end": 1.0},
        {"rank": 1, "kind": "F", "start": 1.0, "end": 2.0}]), 0.5)


@pytest.mark.parametrize("cls,want", [
    # by hand, a backward two time steps: GPipe's backwards wait for the last forward; 1F1B's B0 on stage 1 at once
    (ScheduleGPipe, {(0, "F", 0, 0, 1), (0, "F", 1, 1, 1), (0, "B", 0, 5, 2), (0, "B", 1, 7, 2),
                     (1, "F", 0, 1, 1), (1, "F", 1, 2, 1), (1, "B", 0, 3, 2), (1, "B", 1, 5, 2)}),
    (Schedule1F1B, {(0, "F", 0, 0, 1), (0, "F", 1, 1, 1), (0, "B", 0, 4, 2), (0, "B", 1, 7, 2),
                    (1, "F", 0, 1, 1), (1, "B", 0, 2, 2), (1, "F", 1, 4, 1), (1, "B", 1, 5, 2)})])
def test_the_picture_plans_each_action_in_its_time_steps(cls, want):
    cells = picture.planned(actions.table(_programs(cls, 2, 2), actions.COSTS))
    assert {(c.rank, c.kind, c.mb, c.start, c.steps) for c in cells} == want
    assert all(c.stage == c.rank and c.label == f"{c.kind}{c.mb}" for c in cells)
    assert picture.planned_bubble(cells) == pytest.approx(1 / 3)    # 12 busy of 2 x 9 steps
    assert picture.step_lengths(cells) == "F 1, B 2"


def test_the_picture_names_the_stage_of_each_cell_when_a_rank_holds_several():
    ideal = "\n".join(["step  rank 0  rank 1", "   0  0F0     .", "   1  2F0     1F0", "   2  .       3F0",
                       "   3  .       3I0", "   4  2I0     3W0", "   5  2W0     1I0"])
    cells = picture.planned(ideal)
    assert [(c.rank, c.stage, c.kind, c.start, c.label) for c in cells if c.rank == 0] == [
        (0, 0, "F", 0, "F0\ns0"), (0, 2, "F", 1, "F0\ns2"), (0, 2, "I", 4, "I0\ns2"), (0, 2, "W", 5, "W0\ns2")]
    assert picture.step_lengths(cells) == "F 1, I 1, W 1" and picture.planned_bubble(cells) == pytest.approx(3 / 12)


def test_the_picture_hides_labels_wider_than_their_cells():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cells = picture.planned(actions.table(_programs(ScheduleGPipe, 2, 2), actions.COSTS))
    shown = {}
    for inches in (0.5, 20.0):   # 9 steps: a cell of 0.05 or 0.1 inch cannot hold "F0" or "B0", of 2 inches can
        fig, ax = plt.subplots(figsize=(inches, 1))
        ax.set_xlim(0, 9)
        labels = [(c, ax.text(c.start + c.steps / 2, c.rank, c.label, fontsize=picture.FONT_SIZE)) for c in cells]
        picture._drop_labels_that_do_not_fit(fig, ax, labels)
        shown[inches] = sum(text.get_visible() for _, text in labels)
        plt.close(fig)
    assert shown == {0.5: 0, 20.0: len(cells)}


def test_the_picture_draws_the_measured_timeline(tmp_path):
    def run(rank):
        stage = PipelineStage(_block(), rank, 2, "cpu")
        schedule = Schedule1F1B(stage, 4, loss_fn=F.mse_loss)
        x = minidl.zeros(8, 4, dtype=minidl.float64)
        schedule.step(x) if rank == 0 else schedule.step(target=x)
        return schedule.timeline()
    timeline = dist.sim.run(2, run)[0]
    path = dist.pipelining.draw(timeline, str(tmp_path / "pipeline.png"), title="1F1B", note="a caption")
    assert (tmp_path / "pipeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.endswith("pipeline.png")


def test_batches_of_any_size_and_new_schedules_on_one_stage():
    """Shapes travel with every micro-batch: a smaller last batch, eval on another size and a second
    schedule with more micro-batches on the same stage all run (and agree with one process)."""
    def run(rank):
        full = pipeline_cases.model(2)
        stage = PipelineStage(full[rank], rank, 2, "cpu")
        results = []
        for cls, m, batch, training in ((ScheduleGPipe, 2, 8, True), (ScheduleGPipe, 2, 5, True),
                                        (ScheduleGPipe, 2, 3, False), (Schedule1F1B, 4, 12, True)):
            schedule = cls(stage, m, loss_fn=F.mse_loss)
            x, y = pipeline_cases.data(batch)
            losses = [0.0]  # (cleared by the step, as in torch)
            call = schedule.step if training else schedule.eval
            out = call(x) if rank == 0 else call(target=y, losses=losses)
            if rank == 1:
                want = pipeline_cases.model(2)(x).detach().numpy()
                results.append((np.allclose(out.numpy(), want, rtol=1e-12), len(losses) == m))
            for p in stage.submod.parameters():
                p.grad = None
        return results
    assert dist.sim.run(2, run)[1] == [(True, True)] * 4


def test_keyword_inputs_and_step_without_autograd():
    class Keyword(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = _block()

        def forward(self, features=None):
            return self.inner(features)

    def run(rank):
        stage = PipelineStage(Keyword() if rank == 0 else _block(), rank, 2, "cpu")
        schedule = ScheduleGPipe(stage, 2, loss_fn=F.mse_loss)
        x = minidl.ones(4, 4, dtype=minidl.float64)
        out = schedule.step(features=x) if rank == 0 else schedule.step(target=x)
        with minidl.no_grad():
            try:
                schedule.step(features=x) if rank == 0 else schedule.step(target=x)
            except RuntimeError as e:
                return out, str(e)
    results = dist.sim.run(2, run)
    assert results[1][0] is not None and tuple(results[1][0].shape) == (4, 4)
    assert all("under no_grad use eval()" in message for _, message in results)


def test_schedules_as_text_round_trip_and_run():
    from minidl.dist.pipelining import ScheduleFromText, text
    for cls, p, m in ((ScheduleGPipe, 3, 4), (Schedule1F1B, 4, 6)):
        programs = _programs(cls, p, m)
        assert text.loads(text.dumps(programs)) == programs
        assert text.loads(text.dumps(programs, transfers=True)) == programs
    assert text.dumps(_programs(Schedule1F1B, 2, 3)) == ("rank 0: 0F0 0F1 0B0 0F2 0B1 0B2\n"
                                                         "rank 1: 1F0 1B0 1F1 1B1 1F2 1B2\n")
    # a hand-written order that is neither built-in schedule: both stages' backwards in reverse
    handmade = """
        # F in order, B last micro-batch first
        rank 0: 0F0 0F1 0F2 0B2 0B1 0B0
        rank 1: 1F0 1F1 1F2 1B2 1B1 1B0   # (transfers implied)
    """

    def run(rank, schedule_text):
        full = pipeline_cases.model(2)
        schedule = ScheduleFromText(PipelineStage(full[rank], rank, 2, "cpu"), schedule_text, loss_fn=F.mse_loss)
        x, y = pipeline_cases.data(6)
        losses = []
        schedule.step(x) if rank == 0 else schedule.step(target=y, losses=losses)
        return [p.grad.numpy().copy() for p in full[rank].parameters()], losses
    got = dist.sim.run(2, run, handmade)
    want = dist.sim.run(2, run, text.dumps(_programs(ScheduleGPipe, 2, 3)))
    for (g, losses), (w, want_losses) in zip(got, want):
        assert all(np.allclose(a, b, rtol=1e-12) for a, b in zip(g, w))
        assert [l.item() for l in losses] == [l.item() for l in want_losses]


def test_bad_schedule_texts_name_the_first_offending_action():
    from minidl.dist.pipelining import text
    cases = {
        "rank 0: 0F0 0B0 0B1\nrank 1: 1F0 1B0 1F1 1B1": "stage 0 runs B1 before F1",
        "rank 0: 0F0 0F0 0B0\nrank 1: 1F0 1B0": "stage 0 runs F0 twice",
        "rank 0: 0F0 0F1 0B0": "stage 0 never runs B1",
        "rank 0: 0F0 0F1 0B0\nrank 1: 1F0 1B0 1F1 1B1": r"stage 1's SEND_B\(1\) has no matching RECV_B\(1\)",
        "rank 0: 0F0 0B0\nrank 1: 1RECV_F0 1F0 1B0": r"stage 0's RECV_B\(0\) has no matching SEND_B\(0\) on stage 1",
        "rank 0: 0F0 0B0 0F1 0B1\nrank 1: 1F1 1F0 1B0 1B1": r"wait on each other forever.*0: 'RECV_B\(0\)'",
        "rank 0: 0F0 1B0\nrank 1: 1F0 1B0": "1B0 is stage 1's, on rank 0",
        "rank 0: 0F0 0W0 0I0\nrank 1: 1F0 1B0": "stage 0 runs W0 before I0",
        "rank 0: 0F0 0I0\nrank 1: 1F0 1B0": "stage 0 never runs W0",
        "rank 0: 0F0 0B0 0W0\nrank 1: 1F0 1B0": "stage 0 runs W0 without I0",
        "rank 0: 0F0 0SEND_F0 0RECV_B0 0I0 0W0 0B0\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0":
            "stage 0 runs both B0 and its split halves",
        "rank 0: 0F0 0X0": "'0X0' is not an action",
        "rank 1: 0F0": "rank 1 where rank 0 comes next",
    }
    for source, message in cases.items():
        with pytest.raises(ValueError, match=message):
            text.loads(source)


def test_best_cut_is_the_best_contiguous_split():
    import itertools
    from minidl.dist.pipelining import best_cut
    rng = np.random.default_rng(3)
    for n, p in ((5, 2), (7, 3), (8, 4), (6, 6), (4, 1)):
        costs = list(rng.uniform(0.1, 5.0, n))
        brute = min(max(sum(costs[a:b]) for a, b in zip((0,) + cut, cut + (n,)))
                    for cut in itertools.combinations(range(1, n), p - 1))   # every cut, by brute force
        bounds = best_cut(costs, p)
        assert bounds[0] == 0 and bounds[-1] == n and len(bounds) == p + 1 and all(a < b for a, b in zip(bounds, bounds[1:]))
        assert max(sum(costs[a:b]) for a, b in zip(bounds, bounds[1:])) == pytest.approx(brute)
    with pytest.raises(ValueError, match="3 blocks cannot make 4 non-empty stages"):
        best_cut([1, 2, 3], 4)


def test_split_by_cost_balances_the_measured_blocks():
    """Each block advances an injected clock by a known cost during its forward, so the measured
    costs are those: the heavy blocks (5 each) must not share a stage, [5] | [5, 1, 1, 1, 1]."""
    from minidl.dist.pipelining import split_by_cost
    clock = [0.0]

    class Costly(nn.Module):
        def __init__(self, cost):
            super().__init__()
            self.cost, self.linear = cost, nn.Linear(4, 4)

        def forward(self, x):
            clock[0] += self.cost
            return self.linear(x).tanh()
    blocks = [Costly(5.0), Costly(5.0)] + [Costly(1.0) for _ in range(4)]
    lines = []
    stages = split_by_cost(blocks, 2, minidl.randn(8, 4), log=lines.append, timer=lambda: clock[0])
    assert [len(s) for s in stages] == [1, 5] and stages[0][0] is blocks[0] and stages[1][0] is blocks[1]
    assert lines[0] == "split_by_cost: 6 blocks into 2 stages, cut before blocks [1]"
    assert lines[1].startswith("  stage 0: blocks 0..0, forward + backward 5000.00 ms, activations ")
    assert lines[2].startswith("  stage 1: blocks 1..5, forward + backward 9000.00 ms, activations ")
    assert all(p.grad is None or not p.grad.abs().sum().item() for s in stages for p in s.parameters())


def test_split_by_cost_measures_with_the_real_clock():
    """The real timer gives every block a positive time and the activation bytes it keeps (no
    assertion on their ratio: that depends on the machine)."""
    from minidl.dist.pipelining.cost import measure
    blocks = [nn.Sequential(nn.Linear(16, 16), nn.Tanh()) for _ in range(3)]
    found = measure(blocks, minidl.randn(8, 16))
    assert len(found) == 3 and all(seconds > 0 for seconds, _ in found)
    assert all(held >= 8 * 16 * 4 for _, held in found), found   # (at least each block's float32 output)


def _interleaved_schedules(p, v, m, cls=None):
    """Rank 0's schedule of ``cls`` (ScheduleInterleaved1F1B) with v stages on each of p sim ranks."""
    from minidl.dist.pipelining import ScheduleInterleaved1F1B
    cls = cls or ScheduleInterleaved1F1B

    def run(rank):
        return cls([PipelineStage(_block(), rank + k * p, v * p, "cpu") for k in range(v)], m, loss_fn=F.mse_loss)
    return dist.sim.run(p, run)[0]


def _interleaved_programs(p, v, m, cls=None):
    return _interleaved_schedules(p, v, m, cls).programs


def _torch_order(name, p, v, m):
    """Each rank's order in torch's own planner for schedule ``name`` (torch is pinned in the dev
    dependencies; its planner is private, so this reads its internals)."""
    from torch.distributed.pipelining import schedules as theirs
    kinds = {theirs._ComputationType.FORWARD: "F", theirs._ComputationType.FULL_BACKWARD: "B",
             theirs._ComputationType.BACKWARD_INPUT: "I", theirs._ComputationType.BACKWARD_WEIGHT: "W"}
    planner = getattr(theirs, name).__new__(getattr(theirs, name))
    planner.pp_group_size, planner.n_local_stages, planner._n_microbatches = p, v, m
    planner.number_of_rounds = max(1, m // p)
    planner.microbatches_per_round = m // planner.number_of_rounds
    return [[(kinds[a.computation_type], a.stage_index, a.microbatch_index)
             for a in planner._calculate_single_rank_operations(r) if a is not None] for r in range(p)]


@pytest.mark.parametrize("name", ["ScheduleInterleaved1F1B", "ScheduleInterleavedZeroBubble"])
@pytest.mark.parametrize("p,v,m", [(2, 2, 2), (2, 2, 3), (2, 2, 8), (4, 2, 4), (4, 2, 16), (2, 3, 4), (2, 1, 4)])
def test_interleaved_orders_are_torchs(name, p, v, m):
    schedule = _interleaved_schedules(p, v, m, getattr(dist.pipelining, name))
    assert [list(schedule.rank_order(r)) for r in range(p)] == _torch_order(name, p, v, m)


@pytest.mark.parametrize("p,v,m", [(2, 2, 2), (2, 2, 8), (4, 2, 4), (4, 2, 16), (2, 3, 4), (4, 1, 8)])
def test_zero_bubble_planned_bubble_is_a_third_of_interleaved_1f1bs(p, v, m):
    """With F, I and W one unit each (B two), a ZB1P rank idles p - 1 units where interleaved 1F1B
    idles 3 (p - 1): (p - 1) / (3 v m + p - 1) against (p - 1) / (v m + p - 1)."""
    from minidl.dist.pipelining import ScheduleInterleavedZeroBubble
    zb = actions.ideal_bubble(_interleaved_programs(p, v, m, ScheduleInterleavedZeroBubble))
    assert zb == pytest.approx((p - 1) / (3 * v * m + p - 1))
    assert zb < actions.ideal_bubble(_interleaved_programs(p, v, m))


def test_zero_bubble_runs_split_backwards_and_dw_builder():
    """The timeline holds I and W; a stage given torch's dw_builder runs a full backward at I and
    the built function at W, once per micro-batch; the text format carries I and W."""
    from minidl.dist.pipelining import ScheduleFromText, ScheduleInterleavedZeroBubble

    def run(rank, with_builder):
        full = pipeline_cases.model(4)
        built = []
        stages = [PipelineStage(full[s], s, 4, "cpu", dw_builder=(lambda: lambda: built.append(1)) if with_builder
                                else None) for s in (rank, rank + 2)]
        schedule = ScheduleInterleavedZeroBubble(stages, 4, loss_fn=F.mse_loss)
        x, y = pipeline_cases.data(8)
        schedule.step(x) if rank == 0 else schedule.step(target=y)
        grads = [p.grad.numpy().copy() for s in (rank, rank + 2) for p in full[s].parameters()]
        return schedule.timeline(), grads, len(built), schedule.dumps()
    (timeline, split, _, dumped), (_, split1, _, _) = dist.sim.run(2, run, False)
    (_, built, calls, _), (_, built1, calls1, _) = dist.sim.run(2, run, True)
    kinds = {e["kind"] for e in timeline["events"]}
    assert {"F", "I", "W", "SEND_B", "RECV_B"} <= kinds and "B" not in kinds
    assert calls == calls1 == 2 * 4   # 2 stages x 4 micro-batches
    assert all(np.allclose(a, b, rtol=1e-12) for a, b in zip(split + split1, built + built1))
    assert " 2I0 " in dumped and " 2W0" in dumped
    loaded = dist.sim.run(2, lambda r: ScheduleFromText(
        [PipelineStage(_block(), s, 4, "cpu") for s in (r, r + 2)], dumped, loss_fn=F.mse_loss).programs)[0]
    assert loaded == _interleaved_programs(2, 2, 4, ScheduleInterleavedZeroBubble)


def test_a_dw_builder_runs_after_every_full_backward_too():
    """As torch's: a schedule of full backwards (B) calls the built runner right after each."""
    def run(rank):
        calls = []
        stage = PipelineStage(_block(), rank, 2, "cpu", dw_builder=lambda: lambda: calls.append(1))
        schedule = Schedule1F1B(stage, 4, loss_fn=F.mse_loss)
        x = minidl.zeros(8, 4, dtype=minidl.float64)
        schedule.step(x) if rank == 0 else schedule.step(target=x)
        return len(calls)
    assert dist.sim.run(2, run) == [4, 4]


def test_a_weight_pass_without_its_input_pass_is_refused():
    def run(rank):
        stage = PipelineStage(_block(), 0, 1, "cpu")
        stage.backward_weight_one_chunk(3)
    errors = _errors(1, run)
    assert "stage 0 (rank 0) runs W3 without its input pass I3" in errors[0]


@pytest.mark.parametrize("p,v,m", [(2, 2, 2), (2, 2, 8), (4, 2, 4), (4, 2, 16), (2, 3, 4)])
def test_interleaved_planned_bubble_is_the_closed_form(p, v, m):
    """(p - 1) / (v m + p - 1): v stages per rank shrink 1F1B's bubble v-fold."""
    assert actions.ideal_bubble(_interleaved_programs(p, v, m)) == pytest.approx((p - 1) / (v * m + p - 1))


def test_interleaved_refuses_what_torch_refuses():
    from minidl.dist.pipelining import ScheduleInterleaved1F1B

    def run(rank, m, per_rank):
        stages = [PipelineStage(_block(), rank + k * 2, 4, "cpu") for k in range(per_rank)]
        ScheduleInterleaved1F1B(stages, m, loss_fn=F.mse_loss)
    errors = _errors(2, lambda r: run(r, 5, 2))
    assert all("requires the number of microbatches to be a multiple of the number of rounds (2), but got 5" in e
               for e in errors)
    zero_bubble = _errors(2, lambda r: dist.pipelining.ScheduleInterleavedZeroBubble(
        [PipelineStage(_block(), r + k * 2, 4, "cpu") for k in range(2)], 5, loss_fn=F.mse_loss))
    assert all("Zero bubble requires the number of microbatches to be a multiple of the number of rounds (2), but "
               "got 5." in e for e in zero_bubble)
    errors = _errors(2, lambda r: run(r, 4, 1))
    assert all("1 stages of 4 on rank" in e for e in errors)
    errors = _errors(2, lambda r: ScheduleGPipe(PipelineStage(_block(), r + 2, 4, "cpu"), 2, loss_fn=F.mse_loss))
    assert all("this schedule runs one stage per rank (ScheduleInterleaved1F1B runs several)" in e for e in errors)


@pytest.mark.parametrize("differ", ["n_microbatches", "schedule"])
def test_ranks_with_different_schedules_fail_alike_before_any_transfer(differ):
    """Rank 1 plans 2 micro-batches where rank 0 plans 4, or GPipe where rank 0 plans 1F1B: every
    rank raises the same error naming each rank's schedule (before, a misleading broadcast error,
    or one rank succeeding while the other hung)."""
    def run(rank):
        cls = ScheduleGPipe if differ == "schedule" and rank == 1 else Schedule1F1B
        m = 2 if differ == "n_microbatches" and rank == 1 else 4
        schedule = cls(PipelineStage(_block(), rank, 2, "cpu"), m, loss_fn=F.mse_loss)
        x = minidl.zeros(4, 4, dtype=minidl.float64)
        schedule.step(x) if rank == 0 else schedule.step(target=x)
    errors = _errors(2, run, timeout=5)
    assert errors[0] == errors[1] and errors[0].startswith("PipelineError: pipelining: the ranks of the pipeline "
                                                           "group run different schedules"), errors
    second = "ScheduleGPipe of 2 stages, 4" if differ == "schedule" else "Schedule1F1B of 2 stages, 2"
    assert "stage 0 (rank 0): Schedule1F1B of 2 stages, 4 micro-batches" in errors[0], errors
    assert f"stage 1 (rank 1): {second} micro-batches" in errors[0], errors

