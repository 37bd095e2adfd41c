"""minidl.utils.tensorboard (issue 26): the SummaryWriter writes real event files that TensorBoard's own
EventAccumulator reads back as what was logged, and as torch's SummaryWriter writes for the same calls
(the same run directories, values, histogram buckets, image pixels and hparams protos)."""
import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorboard")
import torch  # noqa: E402
from PIL import Image  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.plugins.hparams import metadata as hparams_metadata  # noqa: E402
from torch.utils.tensorboard import SummaryWriter as TorchWriter  # noqa: E402

import minidl  # noqa: E402
from minidl.kernels.cuda import runtime  # noqa: E402
from minidl.utils.tensorboard import SummaryWriter  # noqa: E402
from tests.cuda_support import sim_cuda_device  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def read(run):
    """Every event of a run directory, as TensorBoard loads it."""
    return EventAccumulator(str(run), size_guidance={"scalars": 0, "histograms": 0, "images": 0,
                                                     "tensors": 0}).Reload()


def runs(log_dir):
    """The run directories (those holding event files) under log_dir, relative to it."""
    return sorted(os.path.relpath(root, log_dir) for root, _, files in os.walk(log_dir)
                  if any(f.startswith("events.out.tfevents") for f in files))


def both(tmp_path, log, torch_log):
    """Run the same logging on minidl's writer and torch's; the two log directories."""
    ours, theirs = tmp_path / "minidl", tmp_path / "torch"
    with SummaryWriter(str(ours)) as w:
        log(w)
    with TorchWriter(str(theirs)) as w:
        torch_log(w)
    return ours, theirs


def test_import_minidl_does_not_import_tensorboard_and_a_missing_package_is_named():
    code = ("import sys, minidl, minidl.utils.dlpack; assert 'tensorboard' not in sys.modules\n"
            "sys.modules['tensorboard'] = None\n"
            "try:\n    import minidl.utils.tensorboard\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert out.returncode == 0, out.stderr[-2000:]
    assert 'pip install "minidl[tensorboard]"' in out.stdout


def test_scalars_from_tensors_arrays_and_numbers_read_back(tmp_path):
    values = [minidl.tensor(0.25), minidl.tensor([1.5], requires_grad=True), minidl.tensor(2.5).bfloat16(),
              np.float64(3.75), np.array([[4.5]]), 5, 6.125, True]
    with SummaryWriter(str(tmp_path)) as w:
        for step, value in enumerate(values):
            w.add_scalar("loss", value, step, walltime=1000.0 + step)
        w.add_scalar("precise", 1 / 3, 0, new_style=True, double_precision=True)
        w.add_scalar("tensor-style", minidl.tensor(0.75), 0, new_style=True)
    events = read(tmp_path).Scalars("loss")
    assert [e.step for e in events] == list(range(8))
    assert [e.value for e in events] == [0.25, 1.5, 2.5, 3.75, 4.5, 5.0, 6.125, 1.0]
    assert [e.wall_time for e in events] == [1000.0 + s for s in range(8)]
    precise = read(tmp_path).Tensors("precise")[0].tensor_proto
    assert precise.double_val == [1 / 3]
    assert read(tmp_path).Tensors("tensor-style")[0].tensor_proto.float_val == [0.75]


def test_scalars_match_torchs_writer(tmp_path):
    steps = [(0, 1.25), (3, -0.5), (7, 1e-3)]
    ours, theirs = both(tmp_path, lambda w: [w.add_scalar("a/b", minidl.tensor(v), s) for s, v in steps],
                        lambda w: [w.add_scalar("a/b", torch.tensor(v), s) for s, v in steps])
    assert [(e.step, e.value) for e in read(ours).Scalars("a/b")] == \
        [(e.step, e.value) for e in read(theirs).Scalars("a/b")]


def test_add_scalars_writes_one_sub_run_per_series_as_torch(tmp_path):
    def log(w, tensor):
        for step in range(3):
            w.add_scalars("train/loss", {"mlp": tensor(step * 0.5), "cnn": step * 0.25}, step)
    ours, theirs = both(tmp_path, lambda w: log(w, minidl.tensor), lambda w: log(w, torch.tensor))
    assert runs(ours) == runs(theirs) == [".", "train_loss_cnn", "train_loss_mlp"]
    for series, scale in (("mlp", 0.5), ("cnn", 0.25)):
        ours_events = read(ours / f"train_loss_{series}").Scalars("train/loss")
        assert [(e.step, e.value) for e in ours_events] == [(s, s * scale) for s in range(3)]
        assert [(e.step, e.value) for e in ours_events] == \
            [(e.step, e.value) for e in read(theirs / f"train_loss_{series}").Scalars("train/loss")]


@pytest.mark.parametrize("bins,max_bins", [("tensorflow", None), ("auto", None), (12, None), (40, 7),
                                           ("tensorflow", 50)])
def test_histograms_are_torchs(tmp_path, bins, max_bins):
    data = np.random.default_rng(0).normal(size=(30, 7)) * 3
    ours, theirs = both(tmp_path, lambda w: w.add_histogram("w", minidl.tensor(data), 5, bins=bins, max_bins=max_bins),
                        lambda w: w.add_histogram("w", torch.tensor(data), 5, bins=bins, max_bins=max_bins))
    ours_h, theirs_h = read(ours).Histograms("w")[0], read(theirs).Histograms("w")[0]
    assert ours_h.step == theirs_h.step == 5
    assert ours_h.histogram_value == theirs_h.histogram_value
    h = ours_h.histogram_value
    assert (h.min, h.max, h.num) == (data.min(), data.max(), data.size)
    assert h.sum == pytest.approx(data.sum()) and h.sum_squares == pytest.approx((data ** 2).sum())
    assert sum(h.bucket) == data.size and h.bucket[0] == 0 and h.bucket_limit[0] <= data.min()


def test_histogram_of_an_empty_tensor_is_refused_as_torch(tmp_path):
    for writer, empty in ((SummaryWriter(str(tmp_path / "a")), minidl.zeros(0)),
                          (TorchWriter(str(tmp_path / "b")), torch.zeros(0))):
        with writer, pytest.raises(ValueError, match="The input has no element"):
            writer.add_histogram("h", empty)


def test_a_histogram_no_value_falls_in_is_torchs(tmp_path):
    """torch writes one empty bin as an empty histogram (its right edge, count 0); more, it refuses."""
    data = np.array([1.0, 2.0, 3.0])
    ours, theirs = both(tmp_path, lambda w: w.add_histogram("h", minidl.tensor(data), 1, bins=[10.0, 20.0]),
                        lambda w: w.add_histogram("h", torch.tensor(data), 1, bins=[10.0, 20.0]))
    h = read(ours).Histograms("h")[0].histogram_value
    assert h == read(theirs).Histograms("h")[0].histogram_value
    assert (list(h.bucket_limit), list(h.bucket), h.num, h.sum) == ([20.0], [0.0], 3, 6.0)
    with SummaryWriter(str(tmp_path / "a")) as ours, TorchWriter(str(tmp_path / "b")) as theirs:
        for w, t in ((ours, minidl.tensor), (theirs, torch.tensor)):
            with pytest.raises(ValueError):
                w.add_histogram("h", t(data), bins=[10.0, 20.0, 30.0])


def pixels(event):
    return np.asarray(Image.open(io.BytesIO(event.encoded_image_string)))


@pytest.mark.parametrize("shape,dataformats,dtype", [
    ((3, 4, 5), "CHW", "float32"), ((4, 5, 3), "HWC", "float64"), ((1, 4, 5), "CHW", "float32"),
    ((4, 5), "HW", "float32"), ((5, 4), "WH", "float32"), ((4, 5, 4), "HWC", "uint8"), ((3, 4, 5), "CHW", "uint8")])
def test_images_decode_to_the_pixels_logged(tmp_path, shape, dataformats, dtype):
    rng = np.random.default_rng(1)
    data = (rng.integers(0, 256, shape) if dtype == "uint8" else rng.uniform(-0.2, 1.2, shape)).astype(dtype)
    ours, theirs = both(tmp_path, lambda w: w.add_image("img", minidl.tensor(data), 2, dataformats=dataformats),
                        lambda w: w.add_image("img", torch.tensor(data), 2, dataformats=dataformats))
    got = pixels(read(ours).Images("img")[0])
    hwc = data.transpose([dataformats.index(c) for c in "HWC"]) if "C" in dataformats else \
        data.transpose([dataformats.index(c) for c in "HW"])[:, :, None]
    want = hwc if dtype == "uint8" else (hwc.astype(np.float32) * 255).clip(0, 255).astype(np.uint8)
    if want.shape[2] == 1:
        want = np.repeat(want, 3, axis=2)  # grey is written as RGB
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, pixels(read(theirs).Images("img")[0]))
    event = read(ours).Images("img")[0]
    assert (event.step, event.height, event.width) == (2, want.shape[0], want.shape[1])


def test_add_images_tiles_a_batch_as_torch(tmp_path):
    data = np.random.default_rng(2).uniform(0, 1, (10, 1, 3, 2)).astype(np.float32)
    ours, theirs = both(tmp_path, lambda w: w.add_images("batch", minidl.tensor(data)),
                        lambda w: w.add_images("batch", torch.tensor(data)))
    got = pixels(read(ours).Images("batch")[0])
    assert got.shape == (2 * 3, 8 * 2, 3)  # 8 columns, 2 rows
    grey = (data[:, 0] * 255).astype(np.uint8)
    np.testing.assert_array_equal(got[3:6, 2:4, 0], grey[9])  # image 9: second row, second column
    np.testing.assert_array_equal(got[3:6, 4:, :], 0)       # no image 10 or later
    np.testing.assert_array_equal(got, pixels(read(theirs).Images("batch")[0]))


def test_text_reads_back_as_torchs(tmp_path):
    ours, theirs = both(tmp_path, lambda w: w.add_text("notes", "lr **3e-3**, é", 4),
                        lambda w: w.add_text("notes", "lr **3e-3**, é", 4))
    for run in (ours, theirs):
        event = read(run).Tensors("notes/text_summary")[0]
        assert event.step == 4 and event.tensor_proto.string_val == ["lr **3e-3**, é".encode()]
        assert "notes/text_summary" in read(run).PluginTagToContent("text")


def test_hparams_write_their_own_run_as_torch(tmp_path):
    hparams = {"lr": 0.1, "layers": 3, "optimizer": "adam", "amp": True, "skipped": None}
    domains = {"optimizer": ["adam", "sgd"], "layers": [2, 3]}
    ours, theirs = both(
        tmp_path,
        lambda w: w.add_hparams(hparams, {"hp/accuracy": minidl.tensor(0.875)}, domains, run_name="trial"),
        lambda w: w.add_hparams(hparams, {"hp/accuracy": torch.tensor(0.875)}, domains, run_name="trial"))
    assert runs(ours) == runs(theirs) == [".", "trial"]
    contents = [read(run / "trial").PluginTagToContent("hparams") for run in (ours, theirs)]
    tags = [hparams_metadata.EXPERIMENT_TAG, hparams_metadata.SESSION_START_INFO_TAG,
            hparams_metadata.SESSION_END_INFO_TAG]
    assert sorted(contents[0]) == sorted(contents[1]) == sorted(tags)
    experiments = [hparams_metadata.parse_experiment_plugin_data(c[hparams_metadata.EXPERIMENT_TAG]) for c in contents]
    sessions = [hparams_metadata.parse_session_start_info_plugin_data(c[hparams_metadata.SESSION_START_INFO_TAG])
                for c in contents]
    assert experiments[0] == experiments[1] and sessions[0] == sessions[1]
    assert [i.name for i in experiments[0].hparam_infos] == ["lr", "layers", "optimizer", "amp"]
    assert [v.string_value for v in experiments[0].hparam_infos[2].domain_discrete.values] == ["adam", "sgd"]
    assert sessions[0].hparams["lr"].number_value == 0.1 and sessions[0].hparams["optimizer"].string_value == "adam"
    assert sessions[0].hparams["amp"].number_value == 1.0  # (a bool is a number to torch's writer too)
    assert [(e.step, e.value) for e in read(ours / "trial").Scalars("hp/accuracy")] == [(0, 0.875)]


def test_hparams_default_run_is_named_by_the_time(tmp_path):
    with SummaryWriter(str(tmp_path)) as w:
        w.add_hparams({"lr": 0.1}, {"acc": 0.5})
    (run,) = [r for r in runs(tmp_path) if r != "."]
    assert float(run) == pytest.approx(__import__("time").time(), abs=60)


def test_flush_makes_events_readable_and_close_reopens_on_the_next_add(tmp_path):
    w = SummaryWriter(str(tmp_path), flush_secs=3600)
    w.add_scalar("x", 1.0, 0)
    w.flush()
    assert [e.value for e in read(tmp_path).Scalars("x")] == [1.0]
    w.close()
    w.close()  # (twice is fine)
    w.add_scalar("x", 2.0, 1)  # a new event file
    w.close()
    assert [(e.step, e.value) for e in read(tmp_path).Scalars("x")] == [(0, 1.0), (1, 2.0)]
    assert w.get_logdir() == str(tmp_path)


def test_purge_step_hides_what_a_crashed_run_logged_past_its_restart(tmp_path):
    with SummaryWriter(str(tmp_path)) as w:
        for step in range(1, 6):
            w.add_scalar("loss", float(step), step)
    with SummaryWriter(str(tmp_path), purge_step=3) as w:
        for step in (3, 4):
            w.add_scalar("loss", 10.0 * step, step)
    assert [(e.step, e.value) for e in read(tmp_path).Scalars("loss")] == [(1, 1.0), (2, 2.0), (3, 30.0), (4, 40.0)]


def test_default_log_dir_is_under_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with SummaryWriter(comment="-lr0.1") as w:
        assert w.get_logdir().startswith("runs" + os.sep) and w.get_logdir().endswith("-lr0.1")
    assert runs(tmp_path / "runs") == [os.path.basename(w.get_logdir())]


def test_cuda_tensors_are_logged(tmp_path):
    saved = runtime._sim_requested
    sim_cuda_device()
    try:
        with SummaryWriter(str(tmp_path)) as w:
            w.add_scalar("s", minidl.tensor(1.5, device="cuda"), 0)
            w.add_histogram("h", minidl.arange(10., device="cuda"), 0)
    finally:
        runtime.sim_enable(saved)
    assert read(tmp_path).Scalars("s")[0].value == 1.5
    assert read(tmp_path).Histograms("h")[0].histogram_value.sum == 45.0


def test_bad_arguments_fail_as_torchs(tmp_path):
    with SummaryWriter(str(tmp_path / "a")) as ours, TorchWriter(str(tmp_path / "b")) as theirs:
        for w, t in ((ours, minidl.tensor), (theirs, torch.tensor)):
            with pytest.raises(AssertionError, match="Tensor should contain one element"):
                w.add_scalar("x", t([1.0, 2.0]))
            with pytest.raises(AssertionError, match="size of input tensor and input format are different"):
                w.add_image("img", t(np.zeros((2, 2))))
            with pytest.raises(AssertionError, match="same dimension shorthand twice"):
                w.add_image("img", t(np.zeros((2, 2))), dataformats="HH")
            with pytest.raises(AssertionError, match="Input should be a 4D numpy array with 3 channels"):
                w.add_images("rgba", t(np.zeros((2, 4, 3, 3))))
            with pytest.raises(TypeError, match="should be dictionary"):
                w.add_hparams([("lr", 0.1)], {})
            with pytest.raises(TypeError, match=r"hparam_domain_discrete\[lr\] should be a list"):
                w.add_hparams({"lr": 0.1}, {}, {"lr": ["a"]})
        with pytest.raises(NotImplementedError, match="numpy array or minidl tensor are expected"):
            ours.add_scalar("x", [1.0])
        with pytest.raises(ValueError, match="hparam 'f': value should be one of"):
            ours.add_hparams({"f": [1]}, {})
