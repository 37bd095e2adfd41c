"""minidl.compile beside minidl.dist (sim backend: each rank a thread of this process): a compiled DDP step
is a graph break (its gradient hook and all-reduce cannot be replayed) that still equals the single-process
step, and each rank's capture is its own thread's (the sim ranks capture at the same time)."""
import pytest

import minidl
import minidl.dist as dist
from ddp_cases import batch, differs, make, mine
from minidl.nn import functional as F


def compiled_ddp_matches_single_process(rank, size):
    ddp, ref = make(rank)
    opt, ref_opt = (minidl.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (ddp, ref))

    def step(x, y):
        opt.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        opt.step()

    compiled = minidl.compile(step)
    failures = []
    for i in range(3):
        x, y = batch(size, i)
        compiled(mine(x, rank), mine(y, rank))
        ref_opt.zero_grad()
        F.cross_entropy(ref(x), y).backward()
        ref_opt.step()
        failures += differs(ddp, ref, f"compiled DDP step {i}")
    breaks = list(compiled._minidl_compiled.eager.values())
    if compiled._minidl_compiled.graphs or not breaks:
        failures.append(f"a compiled DDP step should be a graph break; graphs {compiled._minidl_compiled.graphs}")
    return failures


def fullgraph_ddp_step_raises(rank, size):
    ddp, _ = make(rank)
    x, y = batch(size)
    step = minidl.compile(lambda x, y: F.cross_entropy(ddp(x), y).backward(), fullgraph=True)
    try:
        step(mine(x, rank), mine(y, rank))
    except minidl.compiler.GraphBreakError as e:
        # (DDP's forward broadcasts its buffers first: the break names that collective and the line)
        expected = "broadcast: a collective or message of minidl.dist" in str(e) and "test_compile_dist.py:" in str(e)
        return [] if expected else [f"unexpected reason: {e}"]
    return ["fullgraph=True did not raise on a DDP step"]


@pytest.mark.parametrize("case", [compiled_ddp_matches_single_process, fullgraph_ddp_step_raises])
def test_compiled_ddp_is_a_graph_break(case):
    failures = dist.sim.run(2, case, 2)
    assert not any(failures), "\n".join(f for per_rank in failures for f in per_rank)
