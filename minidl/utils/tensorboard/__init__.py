"""``torch.utils.tensorboard``: ``SummaryWriter`` logs scalars, histograms, images, text and
hyperparameters as TensorBoard event files, from minidl tensors, numpy arrays or Python numbers.

The files are written by the ``tensorboard`` package itself (its ``EventFileWriter`` and summary
protos), an optional extra: ``pip install "minidl[tensorboard]"``. That package and not
``tensorboardX`` because anyone who logs for TensorBoard installs it anyway to look at the logs, it
is the reference reader and writer of the format (kept by TensorBoard's own team), and it is what
``torch.utils.tensorboard`` writes through, so the files are those torch writes. ``import minidl``
does not import it; this module does.
"""
from .writer import SummaryWriter

__all__ = ["SummaryWriter"]
