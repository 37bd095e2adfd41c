"""Run by tests/test_dist_mpi.py under `mpiexec -n N python tests/dist_mpi_script.py MODE`.

cases: every collective under every algorithm, with small chunks, small ring segments and faked
hosts, then p2p; prints "FAIL ..." lines and "DONE cases rank r: k failures". ddp: tests/ddp_cases.py,
reported alike; pipelining: tests/pipeline_cases.py, and ps: tests/ps_cases.py, reported alike; mismatches:
tests/dist_mismatch_cases.py, reported alike; dcp: tests/dcp_cases.py, reported alike; dtensor: tests/dtensor_cases.py,
reported alike. These suites may be joined by commas (cases,ddp), run in turn.
mismatch (debug mode) / timeout: expect the error and print it. crash: rank 1 raises while rank 0 waits in a
collective (the job must end);
ps_crash: a parameter-server worker raises while the other waits at its clock (the job must end).
ps_exit: a worker returns without ps.shutdown() (the servers end the job naming it). stall: rank 0 logs its stall.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import minidl  # noqa: E402
import minidl.dist as dist  # noqa: E402
import ddp_cases  # noqa: E402
from dist_cases import any_source_failures, run_all  # noqa: E402

mode = sys.argv[1]
rank = int(os.environ.get("PMI_RANK", 0))


def cases():
    failures = []
    dtypes = (minidl.float32, minidl.int64, minidl.bool)
    for algorithm, options in (("ring", {}), ("ring", dict(segment_bytes=24)),
                               ("ring", dict(segment_bytes=40, chunk_elements=3)),
                               ("recursive_doubling", dict(chunk_elements=7)), ("native", {}),
                               ("native", dict(chunk_elements=7)), ("hierarchical", dict(chunk_elements=5)),
                               ("auto", {})):
        if algorithm == "hierarchical":
            os.environ["MINIDL_DIST_HOSTNAME"] = f"node{rank // 2}"  # fake two ranks per host
        dist.init_process_group(algorithm=algorithm, **options)
        size = dist.get_world_size()
        failures += [f"{algorithm}/{options}: {f}" for f in run_all(rank, size, dtypes, (0, 1, 7, 301))]
        failures += any_source_failures(rank, size)
        dist.destroy_process_group()
        os.environ.pop("MINIDL_DIST_HOSTNAME", None)
    return failures


def suite(run_all):
    """A suite of cases in a process group of its own: its failures. (A raise skips the destroy:
    the MPI communicator's excepthook then prints it and aborts the job, where closing the group
    could wait on a collective the other ranks never finish.)"""
    dist.init_process_group()
    failures = run_all(rank, dist.get_world_size())
    dist.destroy_process_group()
    return failures


def ddp():
    return suite(ddp_cases.run_all)


def mismatch():
    os.environ["MINIDL_DIST_DEBUG"] = "1"
    dist.init_process_group()
    try:
        if rank == 0:
            dist.all_reduce(minidl.zeros(3))
        else:
            dist.all_reduce(minidl.zeros(4))
    except dist.DistError as e:
        print("CAUGHT", str(e).replace("\n", " | "), flush=True)


def pipelining():
    import pipeline_cases
    return suite(pipeline_cases.run_all)


def parameter_server():
    import ps_cases
    return suite(ps_cases.run_all)


def parameter_server_crash():
    from minidl.dist import ps
    dist.init_process_group()
    if ps.init(num_servers=1) == "server":
        return
    ps.register("w", minidl.zeros(3), optimizer=ps.SGD(lr=0.1))
    if rank == 1:
        raise ValueError("worker 1 fails on purpose")
    for _ in range(3):   # (under BSP worker 0 waits at its clock for worker 1, which is gone)
        ps.push("w", minidl.ones(3))
        ps.clock()
    ps.shutdown()


def parameter_server_exit():
    """Worker 1 returns without ps.shutdown() while worker 0 waits at its clock under BSP."""
    from minidl.dist import ps
    dist.init_process_group()
    if ps.init(num_servers=1) == "server":
        return
    ps.register("w", minidl.zeros(3), optimizer=ps.SGD(lr=0.1))
    if rank == 1:
        return
    for _ in range(3):
        ps.push("w", minidl.ones(3))
        ps.clock()
    ps.shutdown()


def stall():
    """Rank 1 joins the all-reduce only once rank 0 logged its stall (a file it makes)."""
    import logging
    import tempfile
    flag = os.path.join(tempfile.gettempdir(), f"minidl-stall-{os.getppid()}")   # (one launcher per host)
    dist.init_process_group(timeout=60, stall_seconds=0.2)
    if rank == 0:
        handler = logging.StreamHandler(sys.stdout)
        handler.emit = lambda record, emit=handler.emit: (emit(record), open(flag, "w").close())
        logging.getLogger("minidl.dist").addHandler(handler)
    else:
        deadline = time.monotonic() + 50
        while not os.path.exists(flag) and time.monotonic() < deadline:
            time.sleep(0.01)
    t = minidl.ones(2) * (rank + 1)
    dist.all_reduce(t)
    dist.barrier()
    if rank == 0:
        os.remove(flag)
    print(f"STALL DONE {t.tolist()}", flush=True)


def checkpoints():
    import dcp_cases
    return suite(dcp_cases.run_all)


def dtensors():
    import dtensor_cases
    return suite(lambda rank, size: dtensor_cases.run_all())


def mismatches():
    import dist_mismatch_cases
    return suite(dist_mismatch_cases.run_all)


def timeout():
    dist.init_process_group(timeout=60)   # (a slow start on a loaded machine must not reach the short timeout)
    quick = dist.new_group([0, 1], timeout=0.5)
    if rank == 0:
        try:
            dist.all_reduce(minidl.zeros(3), group=quick, async_op=True).wait()   # rank 1 never joins it
        except dist.DistTimeoutError as e:
            print("CAUGHT", e, flush=True)
        dist.send(minidl.ones(1), 1)   # (on the default group: rank 1 may leave now)
    else:
        dist.recv(minidl.zeros(1), 0)


def crash():
    dist.init_process_group()
    if rank == 1:
        raise ValueError("rank 1 fails on purpose")
    dist.all_reduce(minidl.from_numpy(np.zeros(3)))


SUITES = {"cases": cases, "ddp": ddp, "pipelining": pipelining, "ps": parameter_server, "mismatches": mismatches,
          "dcp": checkpoints, "dtensor": dtensors}
ONE_OFFS = {"ps_crash": parameter_server_crash, "ps_exit": parameter_server_exit, "stall": stall, "mismatch": mismatch,
            "timeout": timeout, "crash": crash}
if mode in ONE_OFFS:
    ONE_OFFS[mode]()
else:
    for name in mode.split(","):   # (several suites in one launch: starting the ranks is the slow part)
        failures = SUITES[name]()
        for f in failures:
            print("FAIL", name, f, flush=True)
        print(f"DONE {name} rank {rank}: {len(failures)} failures", flush=True)
