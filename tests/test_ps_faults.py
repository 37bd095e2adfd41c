"""The parameter server's failure handling with real processes (the "gloo" backend, one process per
rank of tests/ps_fault_script.py): a worker killed, frozen or cut off at a chosen point (MINIDL_FAULT).

Every case checks the ledger: row w of the final parameter counts worker w's applied pushes (each a -1
gradient on that row, SGD with lr 1), so a push applied in part leaves a server's part of the row
uneven, a push applied twice makes it exceed what the worker sent, and each server's part must equal
``stats()["pushes_by"][w] / servers`` (a dense push counts once per server).
"""
import signal

import pytest
from ps_fault_job import Job, check_ledger

DETECT_BOUND = 5.0   # seconds: a killed worker's closed connection is found at once (measured: 10-40 ms)


@pytest.mark.parametrize("consistency, servers", [("asp", 1), ("ssp", 2)])
def test_a_killed_worker_is_dropped_and_the_others_finish(tmp_path, consistency, servers):
    """Worker 1 SIGKILLed at its 5th push: worker 0 does all 12 steps; stats name worker 1 lost at
    clock 4 with its 4 pushes applied (per server), noticed within DETECT_BOUND of its death."""
    with Job(tmp_path, 2, servers, [f"consistency={consistency}", "staleness=1", "steps=12"],
             env={"MINIDL_FAULT": "rank=1 at=ps_push:5 do=kill"}) as job:
        codes = job.finish(victim=1)
        assert codes[1] == -signal.SIGKILL and codes[0] == 0 and codes[2:] == [0] * servers, job.everything()
        result = job.result()
        assert check_ledger(result, servers, {0: 12, 1: 4}) == [12, 4]
        (lost,) = result["stats"]["lost"]
        assert (lost["worker"], lost["clock"], lost["pushes"]) == (1, 4, 4 * servers), lost
        delay = lost["at"] - job.last_step(1)
        print(f"{consistency}: worker 1's death noticed after {delay * 1e3:.1f} ms")
        assert delay < DETECT_BOUND, delay
        assert "worker 1 lost at clock 4, 4 of its pushes applied" in job.out(2), job.everything()


def test_bsp_raises_at_every_survivors_clock_by_default(tmp_path):
    """BSP, worker 1 of 3 SIGKILLed at its 3rd push: workers 0 and 2 end with an error from clock()
    naming worker 1 (exit code 1); the server ends with the same error."""
    with Job(tmp_path, 3, 1, ["consistency=bsp", "steps=8"],
             env={"MINIDL_FAULT": "rank=1 at=ps_push:3 do=kill"}) as job:
        codes = job.finish(victim=1)
        assert codes[1] == -signal.SIGKILL, job.everything()
        for r in (0, 2, 3):
            assert codes[r] == 1, job.everything()
            assert "worker 1 was lost at clock 2" in job.out(r), job.everything()
        for r in (0, 2):
            assert "ps.clock" in job.out(r) and "STEPS DONE" not in job.out(r), job.everything()


def test_bsp_shrinks_on_request(tmp_path):
    """BSP with on_worker_failure="shrink", worker 1 SIGKILLed at its 3rd clock (its 3rd push taken):
    the run finishes without it; that push, of the iteration it never ended, is discarded, not applied."""
    with Job(tmp_path, 2, 1, ["consistency=bsp", "steps=8", "on_worker_failure=shrink"],
             env={"MINIDL_FAULT": "rank=1 at=ps_clock:3 do=kill"}) as job:
        codes = job.finish(victim=1)
        assert codes == [0, -signal.SIGKILL, 0], job.everything()
        result = job.result()
        assert check_ledger(result, 1, {0: 8, 1: 3}) == [8, 2]
        assert result["stats"]["discarded"] == 1, result["stats"]
        assert [(e["worker"], e["clock"], e["pushes"]) for e in result["stats"]["lost"]] == [(1, 2, 2)]


def test_a_push_cut_in_the_middle_is_not_applied(tmp_path):
    """Worker 1 SIGKILLed halfway through writing its 5th push (192 KiB; at=send): the server gets
    half a message and applies nothing of it: row 1 holds its 4 earlier pushes, nothing is rejected."""
    with Job(tmp_path, 2, 1, ["consistency=asp", "steps=10", "send_fault_at=5"],
             env={"MINIDL_SEND_FAULT": "rank=1 at=send do=kill"}) as job:
        codes = job.finish(victim=1)
        assert codes == [0, -signal.SIGKILL, 0], job.everything()
        result = job.result()
        assert check_ledger(result, 1, {0: 10, 1: 5}) == [10, 4]
        assert result["stats"]["rejected"] == 0
        assert [(e["worker"], e["pushes"]) for e in result["stats"]["lost"]] == [(1, 4)]


def test_a_partitioned_worker_reconnects_and_each_push_counts_once(tmp_path):
    """Worker 1's link to server 1 (rank 3) is cut without a goodbye at its 3rd push: it connects
    again and sends its unanswered requests anew; every one of its 8 pushes is applied exactly once
    on both servers, and server 1 records it back on a new link."""
    with Job(tmp_path, 2, 2, ["consistency=ssp", "staleness=1", "steps=8"],
             env={"MINIDL_FAULT": "rank=1 at=ps_push:3 do=partition peer=3"}) as job:
        assert job.finish() == [0] * 4, job.everything()
        result = job.result()
        assert check_ledger(result, 2, {0: 8, 1: 8}) == [8, 8]
        stats = result["stats"]
        assert [e["worker"] for e in stats["resumed"]] == [1], stats
        # (lost first only when the server saw the old link end before the new link's hello)
        assert [e["worker"] for e in stats["lost"]] in ([], [1]), stats
        assert "worker 1 is back on a new link at clock 2" in job.out(3), job.everything()


def freeze_then_thaw(job, wait_for):
    """Worker 1 stops itself (MINIDL_FAULT do=stop); once ``wait_for(job)`` holds, SIGCONT; returns
    whether worker 1 was still stopped when it held, and worker 0's output then."""
    job.until("worker 1 to stop", lambda: job.stopped(1))
    job.until("the frozen worker's effect", lambda: wait_for(job))
    still, before = job.stopped(1), job.out(0)
    job.procs[1].send_signal(signal.SIGCONT)
    return still, before


@pytest.mark.parametrize("drop", [None, 0])
def test_a_frozen_worker_under_ssp_is_named_and_its_stale_pushes_dropped_if_asked(tmp_path, drop):
    """SSP (staleness 1), worker 1 SIGSTOPped before its 4th clock: worker 0 waits at clock 5 and
    the server's stall log (MINIDL_PS_STALL_LOG=1) names worker 1; after SIGCONT both finish 12
    steps. Without drop_stale_after every push is applied. With drop_stale_after=0 the pushes made
    behind the newest worker's clock are dropped, not applied: at least worker 1's first push after
    the thaw (made at clock 4 while worker 0 is at 5); every applied push is of age 0."""
    args = ["consistency=ssp", "staleness=1", "steps=12"] + ([] if drop is None else [f"drop_stale_after={drop}"])
    with Job(tmp_path, 2, 1, args, env={"MINIDL_FAULT": "rank=1 at=ps_clock:4 do=stop",
                                        "MINIDL_PS_STALL_LOG": "1"}) as job:
        still, before = freeze_then_thaw(job, lambda j: "frozen, or very slow" in j.out(2))
        assert still and "STEP 6 " not in before, before   # (worker 0 held at its 5th clock: 2 ahead of 3)
        assert job.finish() == [0, 0, 0], job.everything()
        assert "have waited" in job.out(2) and "for worker(s) [1] at clock 3" in job.out(2), job.out(2)
        stats = job.result()["stats"]
        applied = check_ledger(job.result(), 1, {0: 12, 1: 12})
        assert max(map(int, stats["staleness"])) <= 1, stats   # (SSP's bound held for every applied push)
        if drop is None:
            assert applied == [12, 12] and stats["dropped_stale"] == 0, stats
        else:
            assert stats["dropped_stale"] >= 1 and sum(applied) + stats["dropped_stale"] == 24, stats
            assert applied[1] < 12, stats
            assert set(stats["age"]["applied"]) == {"0"} and min(map(int, stats["age"]["dropped"])) > 0, stats
        assert stats["lost"] == [], stats   # (frozen for seconds, far below MINIDL_PS_WORKER_TIMEOUT)


def test_a_frozen_worker_under_asp_holds_nothing_up(tmp_path):
    """ASP, worker 1 SIGSTOPped before its 3rd clock: worker 0 does all 12 steps while worker 1 is
    still stopped; after SIGCONT worker 1 finishes too and every push of both is applied."""
    with Job(tmp_path, 2, 1, ["consistency=asp", "steps=12"],
             env={"MINIDL_FAULT": "rank=1 at=ps_clock:3 do=stop"}) as job:
        assert freeze_then_thaw(job, lambda j: "STEPS DONE" in j.out(0))[0]
        assert job.finish() == [0, 0, 0], job.everything()
        assert check_ledger(job.result(), 1, {0: 12, 1: 12}) == [12, 12]
