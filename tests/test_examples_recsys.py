"""The recommender examples (examples/ncf_ps.py, examples/wide_deep_ps.py, examples/recsys/): their data
splits against loops over the ratings, and their runs through the parameter server against the one-process
run. Their models and metrics (minidl.models) are tested in tests/test_models_recsys.py."""
import argparse
import os
import re
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest
from example_runs import ROOT, run_example, run_example_as_ranks, run_in_turn

from minidl.vision.datasets import MovieLens, write_movielens

sys.path.insert(0, str(ROOT / "examples"))
from recsys import data, runner  # noqa: E402

sys.path.pop(0)


# ---------------------------------------------------------------------------------- data
@pytest.fixture(scope="module")
def ratings(tmp_path_factory):
    root = tmp_path_factory.mktemp("movielens")
    write_movielens(root, "ml-1m", users=30, items=60, per_user=12, seed=3)
    return MovieLens(root, "ml-1m")


def test_leave_one_out_holds_out_each_users_latest_rating(ratings):
    train_users, train_items, test = data.leave_one_out(ratings)
    for user in range(ratings.num_users):
        mine = np.flatnonzero(ratings.users == user)
        latest = mine[np.argmax(ratings.timestamps[mine])]
        assert test[user] == ratings.items[latest]
        kept = sorted(ratings.items[i] for i in mine if i != latest)
        assert sorted(train_items[train_users == user]) == kept


def test_ranking_candidates_are_the_held_out_item_then_distinct_unrated_ones(ratings):
    rated = data.rated_matrix(ratings)
    _, _, test = data.leave_one_out(ratings)
    candidates = data.ranking_candidates(rated, test, negatives=40, seed=0)
    assert candidates.shape == (30, 41) and (candidates[:, 0] == test).all()
    for user, row in enumerate(candidates):
        assert len(set(row[1:])) == 40 and not rated[user, row[1:]].any()
    with pytest.raises(ValueError, match="rated all but 48 items; 49 unrated ones are needed"):
        data.ranking_candidates(rated, test, negatives=49)


def test_an_ncf_epoch_pairs_each_interaction_with_four_items_not_trained_on(ratings):
    train_users, train_items, test = data.leave_one_out(ratings)
    trained = data.rated_matrix(ratings, train_users, train_items)
    assert trained.sum() == len(train_users) and not trained[np.arange(len(test)), test].any()
    users, items, labels = data.ncf_epoch(train_users, train_items, trained, epoch=0)
    assert len(users) == 5 * len(train_users) and labels.sum() == len(train_users)
    positives = sorted(zip(users[labels == 1], items[labels == 1]))
    assert positives == sorted(zip(train_users, train_items))
    assert not trained[users[labels == 0], items[labels == 0]].any()
    assert np.bincount(users[labels == 0]).tolist() == (4 * np.bincount(train_users)).tolist()
    again = data.ncf_epoch(train_users, train_items, trained, 0)
    other = data.ncf_epoch(train_users, train_items, trained, 1)
    assert (again[1] == items).all() and not (other[1] == items).all()
    drawn = set()   # (training does not know the held-out items: they come up as negatives too)
    for epoch in range(10):
        u, i, y = data.ncf_epoch(train_users, train_items, trained, epoch)
        drawn |= set(zip(u[y == 0].tolist(), i[y == 0].tolist()))
    assert any((user, int(item)) in drawn for user, item in enumerate(test))


def test_click_split_holds_out_a_fifth_and_clicks_are_ratings_of_four_or_more(ratings):
    (u, i, c), (tu, ti, tc) = data.click_split(ratings)
    assert len(tu) == round(0.2 * len(ratings)) and len(u) + len(tu) == len(ratings)
    every = sorted(zip(np.r_[u, tu], np.r_[i, ti], np.r_[c, tc]))
    assert every == sorted(zip(ratings.users, ratings.items, (ratings.ratings >= 4).astype(np.float32)))


def test_data_path_may_be_the_file_or_its_folder(tmp_path):
    path = write_movielens(tmp_path, "ml-100k", users=5, items=10, per_user=3)
    assert len(data.load(path)) == len(data.load(path.parent)) == 15
    with pytest.raises(FileNotFoundError, match="expected a MovieLens ratings file"):
        data.load(tmp_path)


# --------------------------------------------------------------------------------- runs
SMALL = ["--users", "120", "--items", "150", "--per-user", "20"]


def _final(out, metric):
    assert out.count("final ") == 1, out   # (worker 0 alone prints)
    return float(re.search(rf"final .*{metric} ([\d.]+)", out).group(1))


# (each metric well above chance: AUC 0.5; HR@10 about 0.1, one held-out item among 100 negatives)
@pytest.mark.parametrize("script, metric, learnt, args, workers", [
    # (3 workers: slices of 42 and 43 of a batch of 128)
    ("wide_deep_ps.py", "AUC", 0.7, ["--mode", "ps", "--epochs", "3", "--batch-size", "128"], 3),
    ("ncf_ps.py", "HR@10", 0.2, ["--mode", "hybrid", "--epochs", "2", "--batch-size", "512", "--lr", "0.03"], 2),
])
def test_bsp_through_the_servers_reaches_the_one_process_metric(script, metric, learnt, args, workers, tmp_path):
    code, alone = run_example(script, "--servers", "0", *SMALL, *args, cwd=tmp_path)
    assert code == 0, alone
    code, out = run_example(script, "--servers", "1", "--consistency", "bsp", *SMALL, *args, cwd=tmp_path,
                            ranks=workers + 1)
    assert code == 0, out
    assert f"{workers} worker(s), 1 server(s), BSP" in out and "epoch   1" in out
    assert abs(_final(out, metric) - _final(alone, metric)) <= 0.005 and _final(alone, metric) > learnt
    assert re.search(r"pushes applied by staleness \(clocks ahead of the slowest worker\): 0: \d+\n", out)


def test_asp_learns_with_stale_pushes_and_draws_their_histogram(tmp_path):
    run = [*SMALL, "--batch-size", "128", "--epochs", "4"]
    code, alone = run_example("wide_deep_ps.py", "--servers", "0", *run, cwd=tmp_path)
    assert code == 0, alone
    code, out = run_example("wide_deep_ps.py", "--servers", "1", "--consistency", "asp", "--picture", "hist.png",
                            *run, cwd=tmp_path, ranks=3)
    assert code == 0, out
    assert abs(_final(out, "AUC") - _final(alone, "AUC")) <= 0.02 and _final(alone, "AUC") > 0.75
    counts = re.search(r"pushes applied by staleness[^:]*: (.*)\n", out).group(1)
    by_staleness = {int(k): int(c) for k, c in (pair.split(": ") for pair in counts.split(", "))}
    # (stale for sure: under ASP worker 1 runs on while worker 0 pulls the model and evaluates it after
    # each epoch, so its pushes there are clocks ahead of worker 0's)
    assert by_staleness[0] > 0 and sum(c for k, c in by_staleness.items() if k >= 1) > 0, out
    assert (tmp_path / "hist.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_worker_killed_mid_run_is_dropped_and_the_others_finish_over_gloo(tmp_path):
    """Expected: over gloo (env launch, no MPI) the last of 3 workers SIGKILLs itself at step 20 of 3 epochs
    (15 steps each) under BSP; the servers shrink to the other 2, which finish; worker 0 reports the AUC,
    learnt, and names the lost worker with its clock, 20 (it ended 20 iterations)."""
    results = run_example_as_ranks("wide_deep_ps.py", "--servers", "1", "--consistency", "bsp", *SMALL,
                                   "--batch-size", "128", "--epochs", "3", "--kill-worker-at", "20",
                                   cwd=tmp_path, ranks=4)
    (code0, out), (code1, _), (code2, died), (code3, served) = results
    assert (code0, code1, code2, code3) == (0, 0, -signal.SIGKILL, 0), results
    assert "worker 2: killing itself (SIGKILL) at step 20" in died
    assert "3 worker(s), 1 server(s), BSP" in out and _final(out, "AUC") > 0.7
    assert re.search(r"lost workers: worker 2 at [\d:.]+, clock 20 \(\d+ of its pushes applied; peer 2 closed",
                     out), out
    assert "worker 2 lost at clock 20" in served


def test_a_server_killed_mid_run_is_restarted_by_hand_and_the_run_finishes_over_gloo(tmp_path):
    """Expected: over gloo, 2 workers and 1 server under BSP with --durable; the server SIGKILLs itself after its
    12th optimizer step (in the first of 2 epochs); the workers say it is gone and wait; this test restarts it with
    ``python -m minidl.dist.ps --resume``, which restores its checkpoint and log, and the run ends as usual: the
    final AUC, learnt, the servers' counts, every worker with exit code 0, the restarted server too."""
    ckpt, watched, stop, restarted = tmp_path / "ck", tmp_path / "wide_deep_ps-rank0.out", threading.Event(), []

    def restart_when_gone():
        while not stop.wait(0.05):
            if watched.exists() and "is gone" in watched.read_text():
                with open(tmp_path / "restarted.out", "w") as out:
                    restarted.append(subprocess.Popen(
                        [sys.executable, "-m", "minidl.dist.ps", "--resume", str(ckpt), "--server", "0"], cwd=tmp_path,
                        stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)}))
                return
    thread = threading.Thread(target=restart_when_gone)
    thread.start()
    try:
        results = run_example_as_ranks("wide_deep_ps.py", "--servers", "1", "--consistency", "bsp", *SMALL,
                                       "--batch-size", "128", "--epochs", "2", "--checkpoint-dir", str(ckpt),
                                       "--durable", "--checkpoint-every", "4", "--kill-server-at", "12",
                                       cwd=tmp_path, ranks=3, timeout=120, env={"MINIDL_PS_SERVER_TIMEOUT": "60"})
        assert restarted, results
        restarted[0].wait(timeout=60)
    finally:
        stop.set()
        thread.join()
        for p in restarted:
            if p.poll() is None:
                p.kill()
            p.wait()
    (code0, out), (code1, other), (code2, died) = results
    served = (tmp_path / "restarted.out").read_text()
    assert (code0, code1, code2, restarted[0].returncode) == (0, 0, -signal.SIGKILL, 0), (results, served)
    assert "will SIGKILL itself after its optimizer step 12" in died
    assert "parameter server 0 (127.0.0.1:" in out and "is gone" in other, out
    assert re.search(r"parameter server 0 restarted from checkpoint \d+ and \d+ logged request\(s\)", served), served
    assert "2 worker(s), 1 server(s), BSP" in out and _final(out, "AUC") > 0.7
    assert re.search(r"parameter server: \d+ pushes applied, 0 dropped as stale", out), out


def test_the_staleness_picture_is_readable_at_any_range_and_explains_a_lone_bar():
    wide = runner.staleness_figure(list(range(10, 49)), "ncf")   # staleness 0..38
    ticks = wide.axes[0].get_xticks()
    shown = [t for t in ticks if -0.6 <= t <= 38.6]
    assert 3 <= len(shown) <= 11 and all(t == int(t) for t in shown) and max(shown) >= 30
    lone = runner.staleness_figure([7], "ncf", why="a reason")
    assert [t.get_text() for t in lone.axes[0].texts] == ["every push at staleness 0: a reason"]
    assert not wide.axes[0].texts
    setup = dict(consistency="asp", mode="ps", staleness=2)
    for changes, workers, reason in (({}, 1, "a single worker"), ({"consistency": "bsp"}, 2, "BSP applies"),
                                     ({"consistency": "ssp", "staleness": 0}, 2, "--staleness 0"),
                                     ({"mode": "hybrid"}, 2, "hybrid mode all-reduces"), ({}, 2, "happened")):
        assert reason in runner.why_none_stale(argparse.Namespace(**{**setup, **changes}), workers)


def test_bad_input_ends_every_rank_with_one_message(tmp_path):
    bad = tmp_path / "ml-1m" / "ratings.dat"
    bad.parent.mkdir()
    bad.write_text("1::2::3::4\n1::2::x::5\n")
    code, out = run_example("ncf_ps.py", "--data", str(bad.parent), cwd=tmp_path, ranks=3)
    assert code != 0 and out.count(f"error: {bad}, line 2: expected user::item::rating::timestamp") == 1, out
    code, out = run_example("wide_deep_ps.py", "--servers", "1", "--batch-size", "1", cwd=tmp_path, ranks=3)
    assert code == 2 and out.count("error: --batch-size 1 leaves some of the 2 workers no sample") == 1, out
    code, out = run_example("wide_deep_ps.py", "--servers", "1", "--kill-worker-at", "5", cwd=tmp_path, ranks=3)
    assert code == 2 and out.count("error: --kill-worker-at under mpiexec: MPI ends the whole job") == 1, out
    code, out = run_example("ncf_ps.py", "--servers", "1", "--checkpoint-dir", "ck", cwd=tmp_path, ranks=3)
    assert code == 2 and out.count("error: --checkpoint-dir under mpiexec: MPI ends the whole job when a server "
                                   "dies") == 1, out


def test_bad_input_in_one_process_exits_with_one_message(tmp_path):
    """The checks every rank makes, each run as `python examples/<script> args` runs it (in turn, in one
    Python process: tests/example_runs.run_in_turn)."""
    ncf, wide_deep = ROOT / "examples" / "ncf_ps.py", ROOT / "examples" / "wide_deep_ps.py"
    picture = tmp_path / "nowhere" / "h.png"
    two = tmp_path / "two" / "u.data"   # (a file too small to split, as the models need)
    two.parent.mkdir()
    two.write_text("1\t1\t5\t1\n2\t2\t3\t2\n")
    fives = tmp_path / "fives" / "ratings.dat"
    fives.parent.mkdir()
    fives.write_text("".join(f"{u}::{i}::5::{i}\n" for u in range(1, 9) for i in range(1, 9)))
    expected = [
        (ncf, ("--servers", "1"), "--servers 1 needs workers beside the servers: mpiexec -n 3"),
        (ncf, ("--servers", "0", "--kill-worker-at", "3"), "--kill-worker-at kills a parameter-server worker"),
        (ncf, ("--servers", "1", "--mode", "hybrid", "--kill-worker-at", "3"),
         "--kill-worker-at with --mode hybrid: the workers' all-reduce of the dense layers cannot lose a rank"),
        (ncf, ("--servers", "1", "--kill-worker-at", "-1"), "--kill-worker-at -1 must be >= 0"),
        (ncf, ("--servers", "0", "--lr", "nan"), "--lr nan must be a positive number"),
        (ncf, ("--servers", "1", "--durable"), "--durable needs --checkpoint-dir (where the servers write"),
        (ncf, ("--servers", "1", "--checkpoint-every", "5"), "--checkpoint-every needs --checkpoint-dir"),
        (ncf, ("--servers", "1", "--kill-server-at", "3"), "--kill-server-at needs --checkpoint-dir"),
        (ncf, ("--servers", "0", "--checkpoint-dir", "ck"),
         "--checkpoint-dir is where parameter servers checkpoint: give --servers 1 or more"),
        (ncf, ("--servers", "1", "--checkpoint-dir", "ck", "--checkpoint-every", "0"),
         "--checkpoint-every 0 must be >= 1"),
        (ncf, ("--servers", "1", "--checkpoint-dir", "ck", "--kill-server-at", "0"), "--kill-server-at 0 must be >= 1"),
        (ncf, ("--servers", "0", "--staleness", "-1"), "--staleness -1 must be >= 0"),
        (ncf, ("--servers", "0", "--limit-batches", "0"), "--limit-batches 0 must be >= 1"),
        (ncf, ("--servers", "0", "--users", "20", "--per-user", "10", "--batch-size", "901"),   # 20 x 9 x (1 + 4)
         "--batch-size 901: the ratings give 900 training examples, not one batch"),
        (ncf, ("--servers", "0", "--picture", str(picture)),
         f"--picture {picture}: there is no folder {picture.parent}"),
        (ncf, ("--servers", "0", "--data", str(two)), f"{two}: each of the 2 users has one rating, which is held out"),
        (wide_deep, ("--servers", "0", "--data", str(two)),
         f"{two}: 2 ratings, of which a fifth (rounded) is held out: none"),
        (wide_deep, ("--servers", "0", "--data", str(fives)),
         f"{fives}: every held-out rating is a click (rating >= 4): AUC needs both")]
    results = run_in_turn([(script, args) for script, args, _ in expected], cwd=tmp_path)
    for script, args, error in expected:
        code, out = results[str(script), args]
        assert code == 2 and f"error: {error}" in out and "Traceback" not in out, out
