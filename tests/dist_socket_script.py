"""Run by tests/test_dist_socket.py as one process per rank of the "gloo" backend (RANK, WORLD_SIZE,
MINIDL_TEST_STORE: a TCPStore's host:port or a FileStore's file; MINIDL_DIST_HOSTNAME fakes a node). MODE:

suites (comma-joined: cases, ddp, mismatches, pipelining, ps, dcp, dtensor, bench) as tests/dist_mpi_script.py runs
them, printing
"FAIL ..." and "DONE suite rank r: k failures"; bench prints rank 0's loopback round trips.
fault: MINIDL_FAULT makes rank 1 misbehave; ranks 0 and 1 all-reduce in a group of their own, rank
2 waits on a receive from rank 0 (it never exchanges with rank 1); each survivor prints
"CAUGHT <time.time()> <error>" and whether its next operation fails too ("NEXT ...").
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


import minidl  # noqa: E402
import minidl.dist as dist  # noqa: E402
from dist_cases import any_source_failures, run_all  # noqa: E402


mode = sys.argv[1]
rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
where = os.environ["MINIDL_TEST_STORE"]   # a TCPStore's host:port, or a FileStore's file
if ":" in where:
    store = dist.TCPStore(where.rsplit(":", 1)[0], int(where.rsplit(":", 1)[1]))
else:
    store = dist.FileStore(where)


def init(**options):
    dist.init_process_group("gloo", store=store, rank=rank, world_size=size, **options)


def cases():
    failures = []
    dtypes = (minidl.float32, minidl.int64, minidl.bool)
    for algorithm, options in (("ring", dict(segment_bytes=40, chunk_elements=3)),
                               ("recursive_doubling", dict(chunk_elements=7)),
                               ("hierarchical", dict(chunk_elements=5)), ("auto", {})):
        init(algorithm=algorithm, **options)
        failures += [f"{algorithm}/{options}: {f}" for f in run_all(rank, size, dtypes, (0, 1, 7, 301))]
        failures += any_source_failures(rank, size)
        dist.destroy_process_group()
    return failures


def suite(run):
    init()
    failures = run(rank, size)
    dist.destroy_process_group()
    return failures


def ddp():
    import ddp_cases
    return suite(ddp_cases.run_all)


def mismatches():
    import dist_mismatch_cases
    return suite(dist_mismatch_cases.run_all)


def pipelining():
    import pipeline_cases
    return suite(pipeline_cases.run_all)


def ps():
    import ps_cases
    return suite(ps_cases.run_all)


def dcp():
    import dcp_cases
    return suite(dcp_cases.run_all)


def dtensor():
    import dtensor_cases
    return suite(lambda rank, size: dtensor_cases.run_all())


def bench():
    """Rank 0 and 1 ping-pong 4 KiB and 4 MiB messages (the others wait at the barrier)."""
    init()
    for nbytes, reps in ((4096, 300), (4 << 20, 20)):
        t = minidl.zeros(nbytes, dtype=minidl.uint8)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(reps):
            if rank == 0:
                dist.send(t, 1)
                dist.recv(t, 1)
            elif rank == 1:
                dist.recv(t, 0)
                dist.send(t, 0)
        seconds = (time.perf_counter() - start) / reps
        if rank == 0:
            print(f"BENCH {nbytes} bytes: round trip {seconds * 1e6:.0f} us, "
                  f"{2 * nbytes / seconds / 1e9:.2f} GB/s", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return []


def fault():
    init(timeout=60)
    pair = dist.new_group([0, 1])
    try:
        if rank in (0, 1):
            for _ in range(50):
                dist.all_reduce(minidl.ones(1 << 18), group=pair)   # 1 MiB: a "send" fault cuts one
            if rank == 0:   # (an idle fault comes while rank 1 sleeps and rank 0 waits for it)
                dist.recv(minidl.zeros(3), 1)
            else:
                time.sleep(20)
                dist.send(minidl.zeros(3), 0)
        else:
            dist.recv(minidl.zeros(3), 0)
        print("NO ERROR", flush=True)
    except dist.DistError as e:
        print("CAUGHT", time.time(), str(e).replace("\n", " | "), flush=True)
    try:
        dist.send(minidl.zeros(3), (rank + 1) % size)
        print("NEXT OK", flush=True)
    except dist.DistError as e:
        print("NEXT CAUGHT", str(e).replace("\n", " | "), flush=True)


SUITES = {"cases": cases, "ddp": ddp, "mismatches": mismatches, "pipelining": pipelining, "ps": ps, "bench": bench,
          "dcp": dcp, "dtensor": dtensor}
if mode == "fault":
    fault()
else:
    for name in mode.split(","):
        failures = SUITES[name]()
        for f in failures:
            print("FAIL", name, f, flush=True)
        print(f"DONE {name} rank {rank}: {len(failures)} failures", flush=True)
