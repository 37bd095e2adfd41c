"""The launchers' rendezvous rounds on a HashStore, in one process: races a job of launchers only hits now and
then, made to happen every time."""
import threading

import pytest

from minidl.dist import HashStore
from minidl.dist.run.rounds import Rendezvous, RendezvousClosedError

JOINED, FIRST_RECORD = "minidl_run/job/0/joined", "minidl_run/job/0/node/0"


def test_a_round_that_closes_before_a_joiner_wrote_its_record_waits_for_it():
    """Another launcher took its place in round 0 (index 0) and writes its record only 0.3 s later: this node's
    join fills the round, which closes in between."""
    store = HashStore()
    store.add(JOINED, 1)
    late = threading.Timer(0.3, lambda: store.set(FIRST_RECORD, '{"nproc": 3, "node_rank": null}'))
    late.start()
    try:
        rnd = Rendezvous(store, "job", nproc=2, min_nodes=2, max_nodes=2, join_timeout=10).join()
    finally:
        late.join()
    assert (rnd.index, rnd.group_rank, rnd.rank_offset, rnd.world_size) == (1, 1, 3, 5)


def test_a_joiner_that_never_writes_its_record_times_the_round_out_by_name():
    store = HashStore()
    store.add(JOINED, 1)
    with pytest.raises(RendezvousClosedError, match="node 0 of round 0 took its place but never said who it is"):
        Rendezvous(store, "job", nproc=2, min_nodes=2, max_nodes=2, join_timeout=0.3).join()
