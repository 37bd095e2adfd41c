"""minidl.dist.elastic under the launcher (real processes over the gloo transport), with faults injected by
MINIDL_FAULT: a worker SIGKILLed mid-all-reduce, mid-backward or mid-checkpoint-write, or frozen by SIGSTOP, is
survived in the job; a job that shrinks below its minimum is restarted by the launcher and resumes from its
newest distributed checkpoint; a worker started later joins at a commit. Over two nodes (two launchers, one
worker each), the death of a node's worker is survived in the job by the other node; under --nnodes 2:2 it is
refused by name and both nodes restart from the newest checkpoint, as they do when every node's workers die.
Every way, the [step, world size] log holds each step once (no committed step lost or doubled) and the final weights equal a failure-free run's (the
spec: each step's global batch does not depend on the world size; float64, up to the order of the gradient's
sum). A rank's own error after the others finished still fails the job; workers that finished are not ended by
a newcomer that comes after them. The jobs start together (one module fixture) so that their waits overlap; the
jobs with a newcomer run alone."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import minidl
from minidl import nn
from minidl.dist import checkpoint, elastic
from ps_fault_job import free_port

ROOT = str(Path(__file__).resolve().parents[1])
SCRIPT = str(Path(__file__).with_name("elastic_script.py"))
TWO_LAYERS = {"MODEL": "two", "BUCKET_MB": "1e-6"}   # four parameters, a DDP bucket each: 4 all-reduces a step
SAVING = {"SAVE_EVERY": "4"}                         # (CKPT: a folder of the job's own)

# name -> (workers, steps, environment, launcher flags)
JOBS = {
    "free": (2, 12, SAVING, []),
    "free_two_layers": (2, 12, TWO_LAYERS, []),
    "free60": (2, 60, {}, []),
    "all_reduce": (3, 12, {"MINIDL_FAULT": "rank=2 at=all_reduce:6 do=kill"}, []),
    # step 5's third bucket (b1: layer 2's two buckets are on their way, W1's gradient is not yet reduced)
    "backward": (3, 12, {**TWO_LAYERS, "MINIDL_FAULT": "rank=2 at=all_reduce:23 do=kill"}, []),
    # rank 0 writes every file of a save (the others' tensors are replicas); its 2nd file is commit-8's. (A
    # fault counts per process and names the current rank: the new rank 0's 2nd save would be commit-16.)
    "checkpoint": (3, 12, {**SAVING, "MINIDL_FAULT": "rank=0 at=dcp_write:2 do=kill"}, []),
    "stalled": (3, 12, {"MINIDL_FAULT": "rank=2 at=all_reduce:6 do=stop", "MINIDL_DIST_HEARTBEAT": "4"}, []),
    "below_minimum": (2, 12, {**SAVING, "MINIDL_FAULT": "rank=1 at=all_reduce:7 do=kill restart=0",
                              "MINIDL_ELASTIC_MIN_WORKERS": "2"}, ["--max-restarts", "1"]),
    "error_after_last": (2, 6, {"RAISE_AFTER_LAST": "1"}, []),
    "exit": (2, 12, {"EXIT_AT": "5"}, []),
    "error_after_train": (2, 6, {"RAISE_AFTER_TRAIN": "1"}, []),
}


# name -> (--nnodes, environment, launcher flags): two launchers, one worker each
NODE_JOBS = {
    "nodes": ("1:2", {"MINIDL_FAULT": "rank=1 at=all_reduce:6 do=kill"}, []),
    "nodes_below_minimum": ("2:2", {**SAVING, "MINIDL_FAULT": "rank=1 at=all_reduce:7 do=kill restart=0"},
                            ["--max-restarts", "1"]),
    "nodes_all_die": ("1:2", {**SAVING, "MINIDL_FAULT": "rank=0,1 at=all_reduce:7 do=kill restart=0"},
                      ["--max-restarts", "1"]),
}


def launch(out, nproc, steps, port, env=None, sleep=0.0, flags=(), backend="static"):
    """The launcher running ``nproc`` workers of the script, results into folder ``out``: its Popen."""
    out.mkdir(exist_ok=True)
    env = dict(os.environ, PYTHONPATH=ROOT, OUT=str(out), STEPS=str(steps), SLEEP=str(sleep), **(env or {}))
    where = ["--master-port", str(port), "--rdzv-id", "elastic-test"] if backend == "static" else []
    return subprocess.Popen([sys.executable, "-m", "minidl.dist.run", "--rdzv-backend", backend, *where,
                             "--nproc-per-node", str(nproc), *flags, SCRIPT],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def newcomer(out, port, steps, env=None):
    """The script started by hand (not by the launcher) as a newcomer to the job at ``port``: its result."""
    env = dict(os.environ, PYTHONPATH=ROOT, OUT=str(out), STEPS=str(steps), MINIDL_ELASTIC_JOIN="1",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TORCHELASTIC_USE_AGENT_STORE="True",
               TORCHELASTIC_RUN_ID="elastic-test", TORCHELASTIC_RESTART_COUNT="0", MINIDL_RUN_ATTEMPT="0",
               **(env or {}))
    return subprocess.run([sys.executable, SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def wait_for(condition, proc):
    """Poll until ``condition()`` while the launcher ``proc`` runs (at most 120 s: a hang becomes a failure)."""
    deadline = time.monotonic() + 120
    while not condition() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)


def done(out) -> dict:
    """rank -> what the script wrote (the [step, world size] log, the final weights, the attempt, the step its
    training began at) of every worker that finished."""
    found = [json.loads(p.read_text()) for p in sorted(out.glob("done-*.json"))]
    return {r["rank"]: {**r, "weights": np.array(r["weights"])} for r in found}


class Job:
    """One launched job of JOBS; ``finish()`` waits for it: (the launcher's exit code, its output with the
    workers', rank -> (log, weights) of those that finished)."""

    def __init__(self, folder, nproc, steps, env, flags):
        self.folder, self.ckpt = folder / "out", folder / "ckpt"
        if "SAVE_EVERY" in env:
            env = {**env, "CKPT": str(self.ckpt)}
        self.proc = launch(self.folder, nproc, steps, 0, env, flags=flags)   # (port 0: the launcher picks one)
        self.result = None

    def finish(self):
        if self.result is None:
            text, _ = self.proc.communicate(timeout=240)   # (a hang becomes a failure)
            self.result = self.proc.returncode, text, done(self.folder)
        return self.result


class NodesJob:
    """Two launchers meeting at one rendezvous endpoint (c10d), as on two nodes; ``finish()`` waits for both:
    (rank -> its node's launcher's exit code, the output of both, rank -> what each finished worker wrote)."""

    def __init__(self, folder, nnodes, env, flags):
        self.folder = folder / "out"
        if "SAVE_EVERY" in env:
            env = {**env, "CKPT": str(folder / "ckpt")}
        flags = ["--nnodes", nnodes, "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-id", "elastic-nodes",
                 *flags]
        self.procs = [launch(self.folder, 1, 12, 0, env, flags=flags, backend="c10d") for _ in range(2)]
        self.result = None

    def finish(self):
        if self.result is None:
            texts = [p.communicate(timeout=240)[0] for p in self.procs]
            codes = {int(text.split("ranks ")[1][0]): p.returncode for p, text in zip(self.procs, texts)}
            self.result = codes, "\n".join(texts), done(self.folder)
        return self.result


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    # (the two-node jobs first: their endpoint's port, free when chosen, is bound before the others take ports)
    started = {name: NodesJob(tmp_path_factory.mktemp(name), *spec) for name, spec in NODE_JOBS.items()}
    started.update({name: Job(tmp_path_factory.mktemp(name), *spec) for name, spec in JOBS.items()})
    yield started
    for proc in [p for job in started.values() for p in getattr(job, "procs", [getattr(job, "proc", None)])]:
        if proc.poll() is None:   # (its workers die with it: the launcher asks Linux so)
            proc.kill()
            proc.communicate()


@pytest.fixture(scope="module")
def failure_free(jobs):
    """Final weights of 2 workers that never fail: 12 and 60 steps of the linear model, 12 of two layers."""
    found = {}
    for name in ("free", "free60", "free_two_layers"):
        code, text, finished = jobs[name].finish()
        assert code == 0 and sorted(finished) == [0, 1], text
        found[name] = finished[0]["weights"]
    return found


def survived(job, expected_log, weights):
    """Assert that the launcher ended well, that ranks 0 and 1 finished with ``expected_log`` and ``weights``:
    (the output, what each wrote)."""
    code, text, finished = job.finish()
    assert code == 0, text
    assert sorted(finished) == [0, 1], text
    for r in finished.values():
        assert r["log"] == expected_log, (r["log"], text)   # every step once: none committed lost, none doubled
        np.testing.assert_allclose(r["weights"], weights, rtol=0, atol=1e-13, err_msg=text)
    return text, finished


def shrunk_at(step):
    return [[s, 3] for s in range(step)] + [[s, 2] for s in range(step, 12)]


def test_a_worker_killed_mid_all_reduce_is_survived_in_the_job(jobs, failure_free):
    """Rank 2 of 3 is SIGKILLed in its 6th all-reduce (step 5): ranks 0 and 1 roll back to the commit of
    step 4, rebuild a group of 2, redo step 5 and finish; the launcher ends well."""
    survived(jobs["all_reduce"], shrunk_at(5), failure_free["free"])


def test_a_worker_killed_mid_backward_is_survived_in_the_job(jobs, failure_free):
    """Two layers, a DDP bucket per parameter (4 all-reduces a step, launched as backward reaches each):
    rank 2 of 3 is SIGKILLed as it launches step 5's third bucket, the others having launched theirs. The
    survivors' pending bucket all-reduces fail, their reducers go inert, they roll back to step 4's commit
    and finish at 2 workers on the failure-free weights. (The log pins where it fired: at 4 all-reduces a
    step, the 23rd is step 5's third.)"""
    survived(jobs["backward"], shrunk_at(5), failure_free["free_two_layers"])


def load_commit(path) -> elastic.State:
    """A checkpoint of the script's linear model, loaded here (one process, no group)."""
    model = nn.Linear(5, 1, bias=False).double()
    state = elastic.State(model, minidl.optim.SGD(model.parameters(), lr=0.1),
                          sampler=elastic.ElasticSampler(list(range(96)), shuffle=False), step=0, log=[])
    state.load(str(path))
    return state


@pytest.mark.filterwarnings("ignore:minidl.dist.checkpoint.load. minidl.dist is not initialized")
def test_a_worker_killed_mid_checkpoint_write_is_survived_in_the_job(jobs, failure_free):
    """Every 4th commit is saved. Rank 0 (which writes the save's one file) is SIGKILLed halfway through
    commit-8's file: ranks 1 and 2 (ranks 0 and 1 of the new group) roll back to commit 8 — already kept in
    memory — and finish. commit-8 is left without its .metadata and load refuses it; commit-4 and commit-12
    load, and hold the failure-free run's state at those commits."""
    job = jobs["checkpoint"]
    survived(job, shrunk_at(8), failure_free["free"])
    with pytest.raises(RuntimeError, match="incomplete checkpoint"):
        checkpoint.load({}, checkpoint_id=str(job.ckpt / "commit-8"))
    for n in (4, 12):
        got, want = load_commit(job.ckpt / f"commit-{n}"), load_commit(jobs["free"].ckpt / f"commit-{n}")
        assert got.commits == want.commits == n and got.step == want.step == n
        assert got.log == shrunk_at(8)[:n] and got.sampler.state_dict() == want.sampler.state_dict()
        np.testing.assert_allclose(got.model.weight.detach().numpy(), want.model.weight.detach().numpy(),
                                   rtol=0, atol=1e-13)


def test_a_stalled_worker_is_left_out_and_ended(jobs, failure_free):
    """Rank 2 of 3 stops itself (SIGSTOP) in its 6th all-reduce: with MINIDL_DIST_HEARTBEAT=4 the
    survivors' all-reduce raises once it has been silent that long; its beats have stopped too, so the next
    round closes without it and marks it dead, and the launcher SIGKILLs it (a stopped worker never ends by
    itself: the job would hang). Ranks 0 and 1 finish at 2 workers on the failure-free weights."""
    survived(jobs["stalled"], shrunk_at(5), failure_free["free"])


def test_below_the_minimum_the_launcher_restarts_from_the_newest_checkpoint(jobs, failure_free):
    """MINIDL_ELASTIC_MIN_WORKERS=2 with 2 workers; rank 1 is SIGKILLed in step 6 (first attempt only).
    Rank 0 cannot go on alone: it raises MembershipError naming the minimum, so the attempt fails; the
    launcher (--max-restarts 1) starts both again, they resume from commit-4 (the newest checkpoint),
    redo steps 4 and 5 and finish on the failure-free weights, every step in the log once."""
    text, finished = survived(jobs["below_minimum"], [[s, 2] for s in range(12)], failure_free["free"])
    assert "MembershipError" in text and "fewer than the minimum of 2 worker(s)" in text, text
    assert "restarting the group (restart 1 of 1)" in text, text
    assert all(r["attempt"] == 1 and r["started_at"] == 4 for r in finished.values()), finished


def test_a_node_whose_worker_died_is_survived_by_the_other_node(jobs, failure_free):
    """--nnodes 1:2, two launchers with a worker each; rank 1 (the second node's) is SIGKILLed in step 5.
    Rank 0 rebuilds a group of one in the job and finishes on the failure-free weights; the other node waits
    aside until then, and both launchers end well."""
    codes, text, finished = jobs["nodes"].finish()
    assert codes == {0: 0, 1: 0} and sorted(finished) == [0], text
    assert "this node's workers of the elastic job died" in text, text
    assert "the other nodes finished the elastic job" in text, text
    assert finished[0]["log"] == [[s, 2] for s in range(5)] + [[s, 1] for s in range(5, 12)], text
    np.testing.assert_allclose(finished[0]["weights"], failure_free["free"], rtol=0, atol=1e-13, err_msg=text)


def restarted_from_commit_4(job, failure_free):
    """Both launchers end well; both workers finished in the restarted attempt, which resumed from commit-4
    (the newest checkpoint), with every step in the log once and the failure-free weights: the output."""
    codes, text, finished = job.finish()
    assert codes == {0: 0, 1: 0} and sorted(finished) == [0, 1], text
    for r in finished.values():
        assert r["log"] == [[s, 2] for s in range(12)] and r["attempt"] == 1 and r["started_at"] == 4, (r, text)
        np.testing.assert_allclose(r["weights"], failure_free["free"], rtol=0, atol=1e-13, err_msg=text)
    return text


def test_below_the_launchers_nnodes_minimum_the_nodes_restart_from_the_newest_checkpoint(jobs, failure_free):
    """--nnodes 2:2 and the second node's only worker is killed in step 6: rank 0 cannot go on with one node;
    it raises MembershipError naming --nnodes MIN, its launcher (--max-restarts 1) opens the next round, and
    the other node, waiting aside, joins it: both restart from the newest checkpoint."""
    text = restarted_from_commit_4(jobs["nodes_below_minimum"], failure_free)
    assert ("MembershipError: elastic: the group cannot go on: 1 worker(s) on 1 node(s) are left, fewer than the "
            "minimum of 1 worker(s) (MINIDL_ELASTIC_MIN_WORKERS) on 2 node(s) (the launcher's --nnodes MIN)"
            in text), text


def test_when_every_nodes_workers_die_the_nodes_restart(jobs, failure_free):
    """--nnodes 1:2 and both workers are killed in step 6: nobody goes on in the job, so the launchers, each
    waiting aside, see every node's part over and none finished, and restart (--max-restarts 1) from the newest
    checkpoint."""
    restarted_from_commit_4(jobs["nodes_all_die"], failure_free)


@pytest.mark.parametrize("when", ["elastic_ready:1", "broadcast:1"])
def test_a_newcomer_dying_as_the_group_starts_or_syncs_is_left_out(failure_free, tmp_path, when):
    """A newcomer is SIGKILLed right after it said it is ready to start the rebuilt group of three, or in its
    first broadcast of the state's sync. The two members are then waiting for it in the group's start — whose
    short timeout (a few heartbeats, with MINIDL_DIST_HEARTBEAT=2, not the group's 30 minutes) ends the wait —
    or in the sync, which fails at once; either way (a lost peer, not an error of the script) the round after,
    without it, takes them on: both finish all 60 steps at two workers, on the failure-free weights."""
    fast = {"MINIDL_DIST_HEARTBEAT": "2"}
    proc = launch(tmp_path, 2, 60, 0, env={"HOLD_AT": "10", **fast})
    wait_for((tmp_path / "port").exists, proc)
    joiner = newcomer(tmp_path, (tmp_path / "port").read_text(), 60,
                      env={"MINIDL_FAULT": f"rank=2 at={when} do=kill", **fast})
    text, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and joiner.returncode == -9, text + joiner.stdout + joiner.stderr
    finished = done(tmp_path)
    assert sorted(finished) == [0, 1], text
    for r in finished.values():
        assert r["log"] == [[s, 2] for s in range(60)], (r["log"], text)
        np.testing.assert_allclose(r["weights"], failure_free["free60"], rtol=0, atol=1e-13)


def test_an_error_after_the_others_last_step_fails_the_job(jobs):
    """Rank 1 raises a ValueError in train() after the last step, once rank 0 has finished (past every
    collective: no other worker meets it in a later round): the job fails all the same, naming the error."""
    code, text, finished = jobs["error_after_last"].finish()
    assert code != 0 and "ValueError: elastic_script: a bug after the last step" in text, text
    assert sorted(finished) == [0], text


def test_an_error_after_the_training_function_returned_fails_the_job(jobs):
    """Rank 1 raises after train() returned (its export failed): that worker had finished training, so its
    failure is the script's, not a lost worker's, and the job fails although rank 0 ended well."""
    code, text, finished = jobs["error_after_train"].finish()
    assert code != 0 and "RuntimeError: elastic_script: an export after training failed" in text, text
    assert sorted(finished) == [0], text


def test_sys_exit_in_the_training_function_fails_the_job_by_name(jobs):
    """Rank 1 calls sys.exit(3) in train() after step 5's commit: rank 0, whose all-reduce lost its peer,
    meets no worker to go on with in the round after, which is refused naming the exit (a script that exits
    is not a lost worker), and the job fails."""
    code, text, finished = jobs["exit"].finish()
    assert code != 0 and not finished, text
    assert "a worker raised an error in the training function: SystemExit: 3" in text, text


def test_workers_that_finished_are_not_ended_by_a_newcomer_after_them(tmp_path):
    """Both workers finish, and stay on after train() (as workers saving their model would) until a newcomer
    started then has had its round: the round is refused (nobody holding the job's state is left), and the
    finished workers are left alone, so the job succeeds."""
    proc = launch(tmp_path, 2, 6, 0, env={"LINGER": "1"})
    wait_for(lambda: len(list(tmp_path.glob("done-*.json"))) == 2, proc)
    late = newcomer(tmp_path, (tmp_path / "port").read_text(), 6)
    text, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and sorted(done(tmp_path)) == [0, 1], text + late.stdout + late.stderr
    assert late.returncode != 0 and "no worker holding the job's state is left" in late.stderr, late.stderr


def test_bad_input_is_named():
    with pytest.raises(TypeError, match="model must be a minidl.nn.Module"):
        elastic.State(None)
    state = elastic.ObjectState(epoch=0)
    with pytest.raises(RuntimeError, match=r"commit\(\) is only meaningful inside a function run by"):
        state.commit()
    with pytest.raises(AttributeError, match="has no value 'batch'"):
        state.batch
