"""``SummaryWriter``, as torch's: one event file per run directory, written in the background by the
tensorboard package's ``EventFileWriter``; ``add_scalars`` and ``add_hparams`` write sub-runs in
sub-directories of ``log_dir`` (how TensorBoard draws several lines on one chart, and one
hyperparameter session per run)."""
from __future__ import annotations

import os
import socket
import time
from datetime import datetime

try:
    from tensorboard.compat.proto.event_pb2 import Event, SessionLog
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
except ImportError as e:
    raise ImportError('minidl.utils.tensorboard writes through the tensorboard package, which is not installed: '
                      'pip install "minidl[tensorboard]"') from e

from . import summary  # noqa: E402


class SummaryWriter:
    """Writes TensorBoard event files into ``log_dir`` (default ``runs/<date>_<host><comment>``).

    ``purge_step``: a run restarted from step T hides its old events from T on. Events wait in a
    queue of ``max_queue`` and reach the disk every ``flush_secs`` seconds, at :meth:`flush` and at
    :meth:`close` (also the end of a ``with`` block)."""

    def __init__(self, log_dir=None, comment="", purge_step=None, max_queue=10, flush_secs=120, filename_suffix=""):
        if not log_dir:
            log_dir = os.path.join("runs", datetime.now().strftime("%b%d_%H-%M-%S") + "_" + socket.gethostname()
                                   + comment)
        self.log_dir = str(log_dir)
        self.purge_step = purge_step
        self.max_queue, self.flush_secs, self.filename_suffix = max_queue, flush_secs, filename_suffix
        self._writers = {}
        self._file(self.log_dir)  # the run directory and its event file exist from the start

    def get_logdir(self):
        return self.log_dir

    def _file(self, logdir) -> EventFileWriter:
        """The event file of a run directory (made on first use, again after close)."""
        writer = self._writers.get(logdir)
        if writer is None:
            writer = self._writers[logdir] = EventFileWriter(logdir, self.max_queue, self.flush_secs,
                                                             self.filename_suffix)
            if logdir == self.log_dir and self.purge_step is not None:
                writer.add_event(Event(step=self.purge_step, file_version="brain.Event:2"))
                writer.add_event(Event(step=self.purge_step, session_log=SessionLog(status=SessionLog.START)))
                self.purge_step = None
        return writer

    def _add(self, proto, global_step=None, walltime=None, logdir=None) -> None:
        event = Event(summary=proto, wall_time=time.time() if walltime is None else walltime)
        if global_step is not None:
            event.step = int(global_step)
        self._file(self.log_dir if logdir is None else logdir).add_event(event)

    def add_scalar(self, tag, scalar_value, global_step=None, walltime=None, new_style=False,
                   double_precision=False) -> None:
        """One value of the series ``tag`` (``new_style`` stores it as a tensor, float64 with
        ``double_precision``)."""
        self._add(summary.scalar(tag, scalar_value, new_style, double_precision), global_step, walltime)

    def add_scalars(self, main_tag, tag_scalar_dict, global_step=None, walltime=None) -> None:
        """Several series on one chart ``main_tag``: each is the run ``<log_dir>/<main_tag>_<tag>``."""
        walltime = time.time() if walltime is None else walltime
        for tag, value in tag_scalar_dict.items():
            run = os.path.join(self.log_dir, main_tag.replace("/", "_") + "_" + tag)
            self._add(summary.scalar(main_tag, value), global_step, walltime, logdir=run)

    def add_histogram(self, tag, values, global_step=None, bins="tensorflow", walltime=None, max_bins=None) -> None:
        self._add(summary.histogram(tag, values, bins, max_bins), global_step, walltime)

    def add_image(self, tag, img_tensor, global_step=None, walltime=None, dataformats="CHW") -> None:
        """An image: (3, H, W) by default, (1, H, W) or (H, W) for grey, other layouts by ``dataformats``;
        floats in [0, 1], uint8 in [0, 255]."""
        self._add(summary.image(tag, img_tensor, dataformats), global_step, walltime)

    def add_images(self, tag, img_tensor, global_step=None, walltime=None, dataformats="NCHW") -> None:
        """A batch of grey or RGB images, shown as one grid of up to 8 columns."""
        self._add(summary.image(tag, img_tensor, dataformats), global_step, walltime)

    def add_text(self, tag, text_string, global_step=None, walltime=None) -> None:
        self._add(summary.text(tag, text_string), global_step, walltime)

    def add_hparams(self, hparam_dict, metric_dict, hparam_domain_discrete=None, run_name=None,
                    global_step=None) -> None:
        """One session for TensorBoard's hyperparameter table: the values of ``hparam_dict`` and the
        metrics of ``metric_dict``, written as the run ``<log_dir>/<run_name>`` (default: the time)."""
        if type(hparam_dict) is not dict or type(metric_dict) is not dict:
            raise TypeError("hparam_dict and metric_dict should be dictionary.")
        protos = summary.hparams(hparam_dict, metric_dict, hparam_domain_discrete)
        with SummaryWriter(os.path.join(self.log_dir, run_name or str(time.time()))) as run:
            for proto in protos:
                run._add(proto, global_step)
            for tag, value in metric_dict.items():
                run.add_scalar(tag, value, global_step)

    def flush(self) -> None:
        """Write every pending event to disk."""
        for writer in self._writers.values():
            writer.flush()

    def close(self) -> None:
        """Flush and close every event file (a later add_* opens new ones)."""
        for writer in self._writers.values():
            writer.close()
        self._writers = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
