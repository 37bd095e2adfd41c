"""The ``Summary`` protos a SummaryWriter logs, built as torch's are so TensorBoard shows them alike:
scalars as ``simple_value``, histograms as ``HistogramProto``, images as PNG, text for the text
plugin, hyperparameters for the hparams plugin."""
from __future__ import annotations

import io
import numbers

import numpy as np
from google.protobuf import struct_pb2
from tensorboard.compat.proto.summary_pb2 import HistogramProto, Summary
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2
from tensorboard.plugins.hparams import metadata as hparams_metadata
from tensorboard.plugins.scalar import metadata as scalar_metadata
from tensorboard.plugins.text import metadata as text_metadata

import minidl


def as_numpy(value) -> np.ndarray:
    """A host array of a minidl tensor (bfloat16 widened to float32, exact), a numpy array or a
    number (as a 1-element array, as torch's writer makes it)."""
    if isinstance(value, minidl.Tensor):
        value = value.detach().cpu()
        return (value.float() if value.dtype is minidl.bfloat16 else value).numpy()
    if isinstance(value, np.ndarray):
        return value
    if np.isscalar(value):
        return np.array([value])
    raise NotImplementedError(f"Got {type(value)}, but numpy array or minidl tensor are expected.")


def scalar(tag, value, new_style=False, double_precision=False) -> Summary:
    array = as_numpy(value).squeeze()
    if array.ndim != 0:
        raise AssertionError(f"Tensor should contain one element (0 dimensions). Was given size: {array.size} "
                             f"and {array.ndim} dimensions.")
    number = float(array)
    if not new_style:
        return Summary(value=[Summary.Value(tag=tag, simple_value=number)])
    proto = (TensorProto(double_val=[number], dtype="DT_DOUBLE") if double_precision
             else TensorProto(float_val=[number], dtype="DT_FLOAT"))
    return Summary(value=[Summary.Value(tag=tag, tensor=proto,
                                        metadata=scalar_metadata.create_summary_metadata("", ""))])


def _tensorflow_bins() -> list:
    """TensorFlow's default histogram edges: ±1e-12 growing by 10% a step up to ±1e20, and 0.
    (Repeated multiplication, as TensorFlow computes them, so the edges equal torch's to the bit.)"""
    positive, edge = [], 1e-12
    while edge < 1e20:
        positive.append(edge)
        edge *= 1.1
    return [-e for e in reversed(positive)] + [0.0] + positive


TENSORFLOW_BINS = _tensorflow_bins()


def histogram(tag, values, bins="tensorflow", max_bins=None) -> Summary:
    """A histogram of ``values`` over ``bins`` (anything ``np.histogram`` takes, or "tensorflow"), cut
    to the buckets from the first non-empty one to the last. TensorBoard reads each bucket's right
    edge (its limit), so one empty bucket goes first to carry the left edge of the data. Where no value
    falls in the bins, torch writes a lone bin as its right edge with count 0 and refuses more."""
    values = as_numpy(values).astype(np.float64).reshape(-1)
    if values.size == 0:
        raise ValueError("The input has no element.")
    counts, edges = np.histogram(values, bins=TENSORFLOW_BINS if isinstance(bins, str) and bins == "tensorflow"
                                 else bins)
    if max_bins is not None and len(counts) > max_bins:  # merge runs of neighbouring buckets
        group = len(counts) // max_bins
        counts = np.pad(counts, (0, -len(counts) % group)).reshape(-1, group).sum(1)
        edges = np.append(edges[:-1:group], edges[-1])
    filled = np.flatnonzero(counts)
    if filled.size == 0 and len(counts) > 1:
        raise ValueError(f"add_histogram: none of the {values.size} values falls inside the bins")
    first, last = (filled[0], filled[-1]) if filled.size else (1, 0)  # (the lone empty bin: edges[1:2], [0])
    proto = HistogramProto(min=values.min(), max=values.max(), num=values.size, sum=values.sum(),
                           sum_squares=values.dot(values), bucket_limit=edges[first:last + 2].tolist(),
                           bucket=[0.0] + counts[first:last + 1].tolist())
    return Summary(value=[Summary.Value(tag=tag, histo=proto)])


def _grid(images: np.ndarray, columns: int = 8) -> np.ndarray:
    """N images (N, C, H, W) tiled row by row into one (C, rows*H, columns*W), as torch's add_images."""
    n, c, h, w = images.shape
    columns = min(n, columns)
    rows = -(-n // columns)
    canvas = np.zeros((c, rows * h, columns * w), images.dtype)
    for i in range(n):
        row, column = divmod(i, columns)
        canvas[:, row * h:(row + 1) * h, column * w:(column + 1) * w] = images[i]
    return canvas


def to_hwc(array: np.ndarray, dataformats: str) -> np.ndarray:
    """``array`` laid out as ``dataformats`` (letters N, C, H, W) as (H, W, C) with 3 or 4 channels:
    grey images (one channel, or none) become RGB, a batch (N; grey or RGB, as torch's) becomes a grid."""
    fmt = dataformats.upper()
    if len(set(fmt)) != len(fmt):
        raise AssertionError(f"You can not use the same dimension shorthand twice. input_format: {dataformats}")
    if array.ndim != len(fmt):
        raise AssertionError(f"size of input tensor and input format are different. tensor shape: {array.shape}, "
                             f"input_format: {dataformats}")
    if len(fmt) == 4:
        batch = array.transpose([fmt.index(c) for c in "NCHW"])
        if batch.shape[1] == 1:
            batch = np.repeat(batch, 3, axis=1)
        if batch.shape[1] != 3:  # (torch's grid has no alpha)
            raise AssertionError("Input should be a 4D numpy array with 3 channels")
        return _grid(batch).transpose(1, 2, 0)
    if len(fmt) == 3:
        image = array.transpose([fmt.index(c) for c in "HWC"])
        return np.repeat(image, 3, axis=2) if image.shape[2] == 1 else image
    return np.repeat(array.transpose([fmt.index(c) for c in "HW"])[:, :, None], 3, axis=2)


def image(tag, value, dataformats="CHW") -> Summary:
    """A PNG of the image: uint8 values as they are, any other dtype scaled from [0, 1] by 255;
    both clipped to [0, 255] and truncated to uint8, as torch's writer does."""
    from PIL import Image
    array = to_hwc(as_numpy(value), dataformats)
    scale = 1 if array.dtype == np.uint8 else 255
    pixels = (array.astype(np.float32) * scale).clip(0, 255).astype(np.uint8)
    png = io.BytesIO()
    Image.fromarray(pixels).save(png, format="PNG")
    height, width, channels = pixels.shape
    return Summary(value=[Summary.Value(tag=tag, image=Summary.Image(
        height=height, width=width, colorspace=channels, encoded_image_string=png.getvalue()))])


def text(tag, text_string) -> Summary:
    proto = TensorProto(dtype="DT_STRING", string_val=[text_string.encode("utf-8")],
                        tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]))
    return Summary(value=[Summary.Value(tag=tag + "/text_summary", tensor=proto,
                                        metadata=text_metadata.create_summary_metadata("", ""))])


def _hparams_summary(tag, **data) -> Summary:
    content = plugin_data_pb2.HParamsPluginData(**data)
    return Summary(value=[Summary.Value(tag=tag, metadata=hparams_metadata.create_summary_metadata(content))])


def hparams(hparam_dict, metric_dict, hparam_domain_discrete=None):
    """The hparams plugin's three summaries: the experiment (which hyperparameters and metrics
    there are), this session's values, and its end. Numbers (bools too, as in torch) and one-element
    tensors are numbers; strings are strings; None is left out."""
    if not isinstance(hparam_dict, dict):
        raise TypeError("parameter: hparam_dict should be a dictionary, nothing logged.")
    if not isinstance(metric_dict, dict):
        raise TypeError("parameter: metric_dict should be a dictionary, nothing logged.")
    domains = hparam_domain_discrete or {}
    if not isinstance(domains, dict):
        raise TypeError("parameter: hparam_domain_discrete should be a dictionary, nothing logged.")
    for name, domain in domains.items():
        if name not in hparam_dict or not isinstance(domain, list) or \
                not all(isinstance(d, type(hparam_dict[name])) for d in domain):
            raise TypeError(f"parameter: hparam_domain_discrete[{name}] should be a list of same type as "
                            f"hparam_dict[{name}].")
    session = plugin_data_pb2.SessionStartInfo()
    infos = []
    for name, value in hparam_dict.items():
        if value is None:
            continue
        if isinstance(value, minidl.Tensor):
            value = value.item()
        if isinstance(value, numbers.Real):
            session.hparams[name].number_value = float(value)
            field, kind = "number_value", "DATA_TYPE_FLOAT64"
        elif isinstance(value, str):
            session.hparams[name].string_value = value
            field, kind = "string_value", "DATA_TYPE_STRING"
        else:
            raise ValueError(f"hparam {name!r}: value should be one of int, float, str, bool, or minidl.Tensor "
                             f"(got {type(value).__name__})")
        domain = (struct_pb2.ListValue(values=[struct_pb2.Value(**{field: d}) for d in domains[name]])
                  if name in domains else None)
        infos.append(api_pb2.HParamInfo(name=name, type=api_pb2.DataType.Value(kind), domain_discrete=domain))
    experiment = api_pb2.Experiment(hparam_infos=infos, metric_infos=[
        api_pb2.MetricInfo(name=api_pb2.MetricName(tag=tag)) for tag in metric_dict])
    return (_hparams_summary(hparams_metadata.EXPERIMENT_TAG, experiment=experiment),
            _hparams_summary(hparams_metadata.SESSION_START_INFO_TAG, session_start_info=session),
            _hparams_summary(hparams_metadata.SESSION_END_INFO_TAG, session_end_info=plugin_data_pb2.SessionEndInfo(
                status=api_pb2.Status.Value("STATUS_SUCCESS"))))
