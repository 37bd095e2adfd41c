"""The parameter server's failure cases too slow for the suite (about 2 minutes on 2 busy cores):
``python tests/ps_fault_cases_slow.py [kills] [stall] [silent]`` (all three by default). Each case
states its expected outcome, checks every applied push whole and once (ps_fault_job.check_ledger),
prints what it measured, and the script exits 1 if any case failed.

- kills: worker 1 SIGKILLed before its 5th push, pull or clock, or halfway through writing its 5th
  push, under ASP, SSP and BSP (on_worker_failure="shrink"): worker 0 finishes; the stats name worker
  1 lost at clock 4 with its pushes before the 5th applied (and the 5th too when it died at the
  clock under ASP/SSP; under BSP that one is discarded). Prints the time to notice each death.
- stall: SSP (staleness 1), worker 1 SIGSTOPped at clock 2, the default MINIDL_PS_STALL_LOG (60 s):
  worker 0 waits at its 4th clock all along, nobody is lost, and the server's log names worker 1
  about 60 s after it froze (prints when).
- silent: SSP, worker 1 SIGSTOPped with MINIDL_PS_WORKER_TIMEOUT=15 (beyond the world's 10 s
  heartbeat): the server drops it as silent after about 15 s, worker 0 goes on alone, and after
  SIGCONT worker 1 comes back (stats "resumed") and both finish with every push applied once.
"""
import os
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ps_fault_job import Job, check_ledger  # noqa: E402

POINTS = ("ps_push", "ps_pull", "ps_clock", "send")
MODES = (("asp", []), ("ssp", ["staleness=1"]), ("bsp", ["on_worker_failure=shrink"]))


def kills(tmp):
    for consistency, extra in MODES:
        for point in POINTS:
            env = ({"MINIDL_SEND_FAULT": "rank=1 at=send do=kill"} if point == "send"
                   else {"MINIDL_FAULT": f"rank=1 at={point}:5 do=kill"})
            args = [f"consistency={consistency}", "steps=10", *extra] + (["send_fault_at=5"] if point == "send" else [])
            path = Path(tmp) / f"kill-{consistency}-{point}"
            path.mkdir()
            with Job(path, 2, 1, args, env=env) as job:
                codes = job.finish(victim=1)
                assert codes == [0, -signal.SIGKILL, 0], job.everything()
                result = job.result()
                sent = 5 if point in ("ps_clock", "send") else 4
                expected = 5 if point == "ps_clock" and consistency != "bsp" else 4
                assert check_ledger(result, 1, {0: 10, 1: sent}) == [10, expected], result
                (lost,) = result["stats"]["lost"]
                assert (lost["worker"], lost["clock"], lost["pushes"]) == (1, 4, expected), lost
                assert result["stats"]["discarded"] == (1 if point == "ps_clock" and consistency == "bsp" else 0)
                print(f"kill {consistency} at {point}:5: noticed after "
                      f"{(lost['at'] - job.last_step(1)) * 1e3:.1f} ms; {expected} of its pushes applied", flush=True)


def stall(tmp):
    with Job(Path(tmp), 2, 1, ["consistency=ssp", "staleness=1", "steps=8"],
             env={"MINIDL_FAULT": "rank=1 at=ps_clock:3 do=stop"}) as job:
        job.until("worker 1 to stop", lambda: job.stopped(1))
        frozen = time.monotonic()
        job.until("the stall log", lambda: "frozen, or very slow" in job.out(2), timeout=120)
        named = time.monotonic() - frozen
        held = "STEP 5 " not in job.out(0)   # (worker 0 at most 1 clock ahead of worker 1's 2)
        job.procs[1].send_signal(signal.SIGCONT)
        assert held, f"worker 0 went past SSP's bound while worker 1 was frozen:\n{job.everything()}"
        assert job.finish() == [0, 0, 0], job.everything()
        assert check_ledger(job.result(), 1, {0: 8, 1: 8}) == [8, 8]
        line = next(x for x in job.out(2).splitlines() if "frozen, or very slow" in x)
        assert "for worker(s) [1]" in line, line
        assert job.result()["stats"]["lost"] == [], job.everything()   # (no worker was lost, none reconnected)
        print(f"stall: named {named:.1f} s after worker 1 froze: {line}", flush=True)


def silent(tmp):
    with Job(Path(tmp), 2, 1, ["consistency=ssp", "staleness=1", "steps=3000", "cols=16"],
             env={"MINIDL_FAULT": "rank=1 at=ps_clock:3 do=stop", "MINIDL_PS_WORKER_TIMEOUT": "15"}) as job:
        job.until("worker 1 to stop", lambda: job.stopped(1))
        frozen = time.monotonic()
        job.until("the server to drop worker 1", lambda: "worker 1 lost" in job.out(2), timeout=60)
        dropped = time.monotonic() - frozen
        ahead = job.out(0).count("STEP ")
        time.sleep(1.0)   # (worker 0 goes on alone meanwhile)
        alone = job.out(0).count("STEP ") - ahead
        job.procs[1].send_signal(signal.SIGCONT)
        assert job.finish(timeout=300) == [0, 0, 0], job.everything()
        result = job.result()
        assert check_ledger(result, 1, {0: 3000, 1: 3000}) == [3000, 3000]
        stats = result["stats"]
        assert [e["worker"] for e in stats["lost"]] == [1] and [e["worker"] for e in stats["resumed"]] == [1], stats
        assert "worker 0 lost" not in job.out(2), job.out(2)
        print(f"silent: dropped {dropped:.1f} s after worker 1 froze ({stats['lost'][0]['why']}); worker 0 "
              f"made {alone} steps alone in the next second; worker 1 resumed at clock "
              f"{stats['resumed'][0]['clock']}", flush=True)


def main(names):
    failed = []
    for name in names or ("kills", "stall", "silent"):
        started = time.monotonic()
        try:
            with tempfile.TemporaryDirectory() as tmp:
                globals()[name](tmp)
            print(f"PASS {name} ({time.monotonic() - started:.0f} s)", flush=True)
        except Exception:   # noqa: BLE001 (each case reports and the others still run)
            failed.append(name)
            print(f"FAIL {name} ({time.monotonic() - started:.0f} s)\n{traceback.format_exc()}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
