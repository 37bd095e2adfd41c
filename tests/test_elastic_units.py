"""minidl.dist.elastic's pieces in one process, no group: the ElasticSampler's split against a numpy
reference across changes of world size, State/ObjectState commit and restore, Membership rounds of threads
on a HashStore (survivors by old rank then newcomers, a silent member left out and marked dead, a round
below the minimum refused on every member, a newcomer's wait answered once and only by the round that takes
it in, a finished member or a refused round never ending anyone). Races are forced in order, never timed."""
import json
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import minidl
from minidl import nn
from minidl.dist import HashStore, elastic
from minidl.dist.elastic import sampler as sampler_module
from minidl.dist.elastic import state as state_module
from minidl.dist.elastic.membership import PREFIX, Membership, MembershipError
from minidl.dist.run import nodes
from minidl.dist.run.elastic_jobs import tend
from minidl.dist.run.group import WorkerGroup
from minidl.utils.data.distributed import DistributedSampler

DATA = list(range(50))
SEED = 3


# -- ElasticSampler -----------------------------------------------------------------------------------------
class World:
    """Stands in for minidl.dist.state in the sampler's module: a group of ``size`` with this rank."""

    def __init__(self, size, rank):
        self.size, self.rank = size, rank

    def is_initialized(self):
        return True

    def get_world_size(self):
        return self.size

    def get_rank(self):
        return self.rank


def split(monkeypatch, position, size, shuffle=True):
    """Every rank's indices of an ElasticSampler at ``position`` (its state_dict) in a world of ``size``."""
    shares = []
    for rank in range(size):
        monkeypatch.setattr(sampler_module, "dist_state", World(size, rank))
        sampler = elastic.ElasticSampler(DATA, shuffle=shuffle, seed=SEED)
        sampler.load_state_dict(position)
        assert len(sampler) == len(list(sampler))
        shares.append(list(sampler))
    return shares


def epoch_order(epoch, shuffle=True):
    """The epoch's order, as DistributedSampler draws it (one replica: no padding)."""
    reference = DistributedSampler(DATA, num_replicas=1, rank=0, shuffle=shuffle, seed=SEED)
    reference.set_epoch(epoch)
    return list(reference)


def reference_split(order, processed, size):
    """numpy: what is left of ``order``, padded by repeating it cyclically to a multiple of ``size``
    (DistributedSampler's padding), dealt out round-robin."""
    rest = np.asarray(order)[processed:]
    padded = np.resize(rest, math.ceil(len(rest) / size) * size)
    return [padded[rank::size].tolist() for rank in range(size)]


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("shuffle", [True, False])
def test_a_fresh_epoch_is_split_as_distributed_sampler_splits_it(monkeypatch, size, shuffle):
    shares = split(monkeypatch, {"epoch": 2, "processed": 0}, size, shuffle)
    for rank, share in enumerate(shares):
        want = DistributedSampler(DATA, num_replicas=size, rank=rank, shuffle=shuffle, seed=SEED)
        want.set_epoch(2)
        assert share == list(want)


@pytest.mark.parametrize("processed, size", [
    (24, 2), (24, 3), (36, 4), (47, 3), (48, 4), (50, 3), (49, 3), (49, 4),
])
def test_the_rest_of_an_epoch_is_split_as_the_reference(monkeypatch, processed, size):
    """Also where fewer samples are left than ranks: each rank then gets as many as len() says."""
    assert split(monkeypatch, {"epoch": 1, "processed": processed}, size) == \
        reference_split(epoch_order(1), processed, size)


def test_no_sample_is_seen_twice_or_skipped_across_changes_of_world_size(monkeypatch):
    """An epoch of 50: 2 steps at 3 ranks x 4, a step at 2 ranks x 6, then the rest at 4 ranks (14 left,
    padded to 16). What the steps took, in the order of the epoch, is the epoch's order."""
    position = {"epoch": 1, "processed": 0}
    seen = []
    for size, per_rank, steps in ((3, 4, 2), (2, 6, 1)):
        shares = split(monkeypatch, position, size)
        for step in range(steps):
            batch = [share[step * per_rank:(step + 1) * per_rank] for share in shares]
            seen += [batch[rank][i] for i in range(per_rank) for rank in range(size)]   # (dealt out round-robin)
        monkeypatch.setattr(sampler_module, "dist_state", World(size, 0))
        sampler = elastic.ElasticSampler(DATA, seed=SEED)
        sampler.load_state_dict(position)
        for _ in range(steps):
            sampler.record_batch(per_rank)
        position = sampler.state_dict()
    assert position == {"epoch": 1, "processed": 36}
    last = split(monkeypatch, position, 4)
    seen += [last[rank][i] for i in range(len(last[0])) for rank in range(4)]
    order = epoch_order(1)
    assert seen == order + order[36:38]   # (the last split's padding: DistributedSampler's)


# -- State and ObjectState ------------------------------------------------------------------------------------
@pytest.fixture
def in_run(monkeypatch):
    """commit() as inside elastic.run (with no membership: nobody waits to join): every state made in the test
    is marked running, as run marks its state."""
    made = state_module.ObjectState.__init__

    def running(self, *args, **kwargs):
        made(self, *args, **kwargs)
        object.__setattr__(self, "running", True)
    monkeypatch.setattr(state_module.ObjectState, "__init__", running)


def train_step(model, optimizer, seed):
    rng = np.random.RandomState(seed)
    x, y = minidl.from_numpy(rng.randn(8, 3)), minidl.from_numpy(rng.randn(8, 2))
    optimizer.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    optimizer.step()


def as_numpy(tree):
    """A state dict's tensors as numpy arrays (deep copies), for comparing."""
    if isinstance(tree, dict):
        return {k: as_numpy(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [as_numpy(v) for v in tree]
    return tree.detach().numpy().copy() if isinstance(tree, minidl.Tensor) else tree


def assert_same(got, want):
    if isinstance(want, dict):
        assert sorted(got) == sorted(want)
        for k in want:
            assert_same(got[k], want[k])
    elif isinstance(want, list):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w)
    elif isinstance(want, np.ndarray):
        np.testing.assert_array_equal(got, want)
    else:
        assert got == want


def test_a_state_restored_is_its_last_commit(in_run):
    """Model, optimizer (Adam: moments and step counts), sampler position and values after a step past the
    commit, then restore(), are what they were at the commit, to the bit."""
    minidl.manual_seed(0)
    model = nn.Linear(3, 2).double()
    optimizer = minidl.optim.Adam(model.parameters(), lr=0.01)
    state = elastic.State(model, optimizer, sampler=elastic.ElasticSampler(DATA), epoch=0, log=[])
    train_step(model, optimizer, 0)
    state.sampler.record_batch(8)
    state.log.append("step 0")
    state.commit()
    kept = (as_numpy(model.state_dict()), as_numpy(optimizer.state_dict()), state.sampler.state_dict(),
            list(state.log))

    train_step(model, optimizer, 1)   # (in place: a commit holding views of the live tensors would move too)
    state.sampler.record_batch(8)
    state.log.append("step 1")        # (in place: the commit holds a copy)
    state.epoch = 5
    assert not np.array_equal(model.weight.detach().numpy(), kept[0]["weight"])
    state.restore()
    assert_same(as_numpy(model.state_dict()), kept[0])
    assert_same(as_numpy(optimizer.state_dict()), kept[1])
    assert state.sampler.state_dict() == kept[2] == {"epoch": 0, "processed": 8}
    assert state.log == kept[3] and state.epoch == 0 and state.commits == 1

    train_step(model, optimizer, 1)   # the restored optimizer goes on as the one that was never rolled back
    again = as_numpy(model.state_dict())
    minidl.manual_seed(0)
    model2 = nn.Linear(3, 2).double()
    optimizer2 = minidl.optim.Adam(model2.parameters(), lr=0.01)
    train_step(model2, optimizer2, 0)
    train_step(model2, optimizer2, 1)
    assert_same(again, as_numpy(model2.state_dict()))


def test_an_object_state_restored_is_its_last_commit(in_run):
    state = elastic.ObjectState(epoch=0, seen={"a": [1]})
    state.epoch = 1
    state.commit()
    state.epoch = 2
    state.seen["a"].append(2)
    state.seen = {**state.seen, "b": []}
    state.restore()
    assert (state.epoch, state.seen, state.commits) == (1, {"a": [1]}, 1)
    state.restore()   # (twice: restore hands out a copy, not the commit itself)
    state.seen["a"].append(3)
    state.restore()
    assert state.seen == {"a": [1]}


@pytest.mark.filterwarnings("ignore:minidl.dist.checkpoint.(save|load). minidl.dist is not initialized")
def test_resume_loads_the_newest_complete_checkpoint(in_run, tmp_path):
    """save_every=2: commits 2 and 4 are saved; a folder commit-6 without .metadata (an interrupted save)
    is passed over; a new State resumes at commit 4's model, values and sampler position."""
    minidl.manual_seed(0)
    model = nn.Linear(3, 2).double()
    optimizer = minidl.optim.SGD(model.parameters(), lr=0.1)
    state = elastic.State(model, optimizer, sampler=elastic.ElasticSampler(DATA), save_every=2,
                          checkpoint_dir=str(tmp_path), step=0)
    for step in range(5):
        train_step(model, optimizer, step)
        state.sampler.record_batch(8)
        state.step += 1
        state.commit()
        if step == 3:
            kept = as_numpy(model.state_dict())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["commit-2", "commit-4"]
    (tmp_path / "commit-6").mkdir()
    (tmp_path / "commit-6" / "__0_0.000000070000abcd.safetensors").write_bytes(b"half")

    fresh = nn.Linear(3, 2).double()
    resumed = elastic.State(fresh, minidl.optim.SGD(fresh.parameters(), lr=0.1),
                            sampler=elastic.ElasticSampler(DATA), save_every=2, checkpoint_dir=str(tmp_path), step=0)
    assert resumed.resume()
    assert_same(as_numpy(fresh.state_dict()), kept)
    assert (resumed.step, resumed.commits, resumed.sampler.state_dict()) == (4, 4, {"epoch": 0, "processed": 32})


def test_bad_state_arguments_are_named():
    with pytest.raises(ValueError, match="save_every and checkpoint_dir go together"):
        elastic.State(nn.Linear(1, 1), save_every=2)


# -- Membership ----------------------------------------------------------------------------------------------
TIMEOUT = 60.0   # (turns a round that never closes into a failure; no test waits on it)


def silent(store, uid):
    """A member that never beats (as if it died long ago)."""
    store.set(f"{PREFIX}beat/{uid}", repr(time.time() - 1e6))


def joins(store, r):
    return store.add(f"{PREFIX}round/{r}/joins", 0)


@pytest.fixture
def members():
    made = []

    def make(store, **kwargs):
        m = Membership(store, timeout=TIMEOUT, dead_seconds=TIMEOUT, **kwargs)   # (the live ones stay alive)
        made.append(m)
        return m
    yield make
    for m in made:
        m.close()


def test_a_round_reranks_survivors_by_old_rank_then_newcomers_and_leaves_the_silent_out(members):
    """Round 0 is [a, dead, b]; a newcomer n waits. n joins round 1 first, then b, then a: the round holds
    a, b (their old order) and n; the silent member is left out and marked dead (the launcher ends it)."""
    store = HashStore()
    a, b = members(store), members(store)
    silent(store, "dead")
    for rank, m in ((0, a), (2, b)):
        m.start([a.uid, "dead", b.uid], rank)
    n = members(store)
    n.announce()
    assert not a.stop_at(5) and not b.stop_at(5) and b.stop_at(6)   # (the first to see n fixed commit 6 for all)
    with ThreadPoolExecutor(3) as pool:
        futures = {}
        for name, m in (("n", n), ("b", b), ("a", a)):   # (each joins before the next starts: join order n, b, a)
            before = joins(store, 1)
            futures[name] = pool.submit(m.next_round)
            while joins(store, 1) == before:
                time.sleep(0.01)
        got = {name: f.result(timeout=TIMEOUT) for name, f in futures.items()}
    assert got == {"a": (1, 0, 3), "b": (1, 1, 3), "n": (1, 2, 3)}
    assert a.members == b.members == n.members == [a.uid, b.uid, n.uid]
    assert store.check([f"{PREFIX}dead/dead"]) and not store.check([f"{PREFIX}dead/{a.uid}"])
    assert not a.stop_at(7)   # (n's wait is answered)


def test_a_round_below_the_minimum_is_refused_on_every_member(members):
    store = HashStore()
    a, b = members(store, min_workers=3), members(store, min_workers=3)
    silent(store, "dead")
    for rank, m in ((0, a), (1, b)):
        m.start([a.uid, b.uid, "dead"], rank)
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(m.next_round) for m in (a, b)]
        for f in futures:
            with pytest.raises(MembershipError, match=r"2 worker\(s\) on 1 node\(s\) are left, fewer than the "
                                                      r"minimum of 3 worker\(s\) \(MINIDL_ELASTIC_MIN_WORKERS\)"):
                f.result(timeout=TIMEOUT)



def round_of(*ms):
    """Each of ``ms`` (threads) joins the next round: their (round, rank, world size), in the order given."""
    with ThreadPoolExecutor(len(ms)) as pool:
        futures = [pool.submit(m.next_round) for m in ms]
        return [f.result(timeout=TIMEOUT) for f in futures]


def started(store, members, n):
    """Round 0 of ``n`` members on ``store``."""
    ms = [members(store) for _ in range(n)]
    for rank, m in enumerate(ms):
        m.start([m.uid for m in ms], rank)
    return ms


def marked_dead(store, *ms):
    return [m for m in ms if store.check([f"{PREFIX}dead/{m.uid}"])]


def test_a_newcomer_announcing_as_a_round_closes_is_stopped_for(members, monkeypatch):
    """n announces after round 1 of a and b has closed, before it is settled (forced: as the first joiner
    starts to settle it). The round did not take n in, so its wait is still open: the members stop for it at
    their next commit and round 2 takes it in. (Counted as answered, n would join round 2 alone, no member
    would ever stop for it, and at its deadline it would close that round alone.)"""
    store = HashStore()
    a, b = started(store, members, 2)
    n = members(store)
    settle, announced = Membership._settle, threading.Lock()

    def announce_then_settle(self, *args):
        if announced.acquire(blocking=False):
            n.announce()
        return settle(self, *args)
    with monkeypatch.context() as patch:
        patch.setattr(Membership, "_settle", announce_then_settle)
        assert round_of(a, b) == [(1, 0, 2), (1, 1, 2)]
    assert announced.locked()
    assert not a.stop_at(5) and a.stop_at(6) and b.stop_at(6)
    assert round_of(a, b, n) == [(2, 0, 3), (2, 1, 3), (2, 2, 3)]
    assert not a.stop_at(7) and not marked_dead(store, a, b, n)


class SettlingInLockstep(HashStore):
    """A HashStore on which the joiners settling a round (Membership._settle, patched by ``patch``) make
    their store operations in lockstep, until the first has settled: each reads what it reads before any
    writes what it writes (the worst interleaving, forced)."""

    def __init__(self, joiners):
        super().__init__()
        self.settling, self.turn = threading.local(), threading.Barrier(joiners, timeout=TIMEOUT)

    def patch(self, monkeypatch):
        settle = Membership._settle

        def in_lockstep(member, *args):
            self.settling.on = True
            try:
                return settle(member, *args)
            finally:
                self.settling.on = False
                self.turn.abort()   # (one joiner has settled: the others go on freely)
        monkeypatch.setattr(Membership, "_settle", in_lockstep)

    def _step(self):
        if getattr(self.settling, "on", False):
            try:
                self.turn.wait()
            except threading.BrokenBarrierError:
                pass

    def _run(self, op, *args):
        self._step()
        return super()._run(op, *args)

    def _wait_get(self, keys, seconds, read):
        self._step()
        return super()._wait_get(keys, seconds, read)


def test_joiners_settling_a_round_at_once_answer_its_newcomer_once(members, monkeypatch):
    """Round 1 takes newcomer n1 in, and its three joiners settle it at once, in lockstep (none can have
    settled before the others check whether the round still needs settling). n1's wait is answered once:
    the members do not stop for it again, and they do stop for the next newcomer n2, whom round 2 takes in.
    (Answered twice or more, the next newcomers would never be seen.)"""
    store = SettlingInLockstep(joiners=3)
    a, b = started(store, members, 2)
    n1 = members(store)
    n1.announce()
    with monkeypatch.context() as patch:
        store.patch(patch)
        assert round_of(a, b, n1) == [(1, 0, 3), (1, 1, 3), (1, 2, 3)]
    assert not a.stop_at(5) and not b.stop_at(6)
    n2 = members(store)
    n2.announce()
    assert not a.stop_at(6) and a.stop_at(7) and n1.stop_at(7)
    assert round_of(a, b, n1, n2) == [(2, 0, 4), (2, 1, 4), (2, 2, 4), (2, 3, 4)]


def test_a_member_that_finished_is_never_marked_dead(members):
    """c finished (leave()) while a and b go on; a newcomer n joins them: round 1 leaves c out but does not
    mark it dead (the launcher would end it while it still saves its model or exits). Then a, b and n finish
    too, and a newcomer n2 comes after the job: its round is refused, and marks none of them dead."""
    store = HashStore()
    a, b, c = started(store, members, 3)
    c.leave()
    n = members(store)
    n.announce()
    assert round_of(a, b, n) == [(1, 0, 3), (1, 1, 3), (1, 2, 3)]
    assert not marked_dead(store, c)
    for m in (a, b, n):
        m.leave()
    n2 = members(store)
    n2.announce()
    with pytest.raises(MembershipError, match="no worker holding the job's state is left"):
        n2.next_round()
    assert not marked_dead(store, a, b, c, n)


def test_a_round_no_member_joined_marks_no_member_dead(members):
    """Newcomer n waits, but the live members never come to a commit (a long evaluation): n closes a round
    alone at its deadline, which is refused, and marks none of the members dead (they are alive: the
    launcher would end the whole job)."""
    store = HashStore()
    a, b = started(store, members, 2)
    n = Membership(store, timeout=0.5, dead_seconds=TIMEOUT)
    try:
        n.announce()
        with pytest.raises(MembershipError, match="no worker holding the job's state is left"):
            n.next_round()
    finally:
        n.close()
    assert not marked_dead(store, a, b)


def test_a_joiner_dying_before_it_wrote_its_uid_does_not_stall_the_round():
    """A joiner takes round 1's first join index and dies before writing its uid (never written here). a and
    b close the round without it once that index has waited dead_seconds, long before their own deadline."""
    store = HashStore()
    a, b = (Membership(store, timeout=10 * TIMEOUT, dead_seconds=1.0) for _ in range(2))
    try:
        for rank, m in enumerate((a, b)):
            m.start([a.uid, b.uid], rank)
        store.add(f"{PREFIX}round/1/joins", 1)   # (the ghost's index)
        assert round_of(a, b) == [(1, 0, 2), (1, 1, 2)]
    finally:
        a.close()
        b.close()


class _EndsAfterOneLook:
    """A worker process that is still running the first time the launcher looks, and has failed ever after."""

    def __init__(self, pid, code):
        self.pid, self.code, self.looks, self.returncode = pid, code, 0, None

    def poll(self):
        self.looks += 1
        self.returncode = None if self.looks == 1 else self.code
        return self.returncode


def test_a_worker_failing_after_training_as_the_launcher_looks_fails_the_job():
    """Rank 0 ended well; rank 1 finished its training function and then raised, ending just as the launcher's
    look began: the job fails (the launcher counts its error), on that look or the next — never ends well."""
    store = HashStore()
    group = WorkerGroup.__new__(WorkerGroup)
    group.procs = [_EndsAfterOneLook(100, 0), _EndsAfterOneLook(101, 1)]
    group.procs[0].looks = 1   # (rank 0 ended before this look)
    group.envs = [{"RANK": str(r), "TORCHELASTIC_ERROR_FILE": ""} for r in range(2)]
    store.set(f"{PREFIX}pid/node/101", "uid1")
    store.set(f"{PREFIX}left/uid1", "1")   # (its training function returned)
    marked = set()
    outcomes = [tend(group, store, marked, "node") for _ in range(2)]
    assert outcomes[0] is None and [f.rank for f in outcomes[1]] == [1]


class _FailsAfterLooks:
    """A worker process still running for the launcher's first ``looks`` looks, then failed (exit code 1)."""

    def __init__(self, pid, looks):
        self.pid, self.left, self.returncode = pid, looks, None

    def poll(self):
        self.left -= 1
        self.returncode = None if self.left >= 0 else 1
        return self.returncode


class _NewRoundBegun:
    """The launchers' rendezvous as a node sees it once another node opened the next round."""
    keep_alive = 60.0

    def beat(self):
        pass

    def changed(self, elastic):
        return "another node began a new rendezvous round"


def test_a_node_whose_survivor_is_ending_in_a_refused_job_restarts_by_its_failure():
    """The elastic job's round was refused (too few nodes) and another node already opened the next round while
    this node's worker — which raises MembershipError — still runs: the launcher waits for it and reports its
    failure (a restart, as on every node), not a membership change (no restart: the nodes' counts would differ)."""
    store = HashStore()
    store.set(f"{PREFIX}in_job", "1")
    store.set(f"{PREFIX}latest", "1")
    store.set(f"{PREFIX}round/1/closed", json.dumps({"order": ["uid0"], "refused": "1 worker(s) on 1 node(s)"}))
    group = WorkerGroup.__new__(WorkerGroup)
    group.procs = [_FailsAfterLooks(100, 3)]
    group.envs = [{"RANK": "0", "TORCHELASTIC_ERROR_FILE": ""}]
    outcome = nodes._watch(group, _NewRoundBegun(), 0.001, store, "node")
    assert [f.rank for f in outcome] == [0]
