"""Multi-tensor optimizer steps, norms and scaling on the GPU (csrc/multi_tensor.cu): a whole list of
tensors in one launch. The buffers' addresses go to the device as a pointer table (an int64 array,
one row per tensor: size, then one address per operand), with each tensor's own scalars beside it."""
import numpy as np

from .... import kernels
from .. import runtime
from .common import FLOATS, kernel, require_dtype

FILE = "multi_tensor"
_MAX_GRID_Y = 65535  # CUDA's limit on gridDim.y (the kernels step over more tensors)


def _address(buf) -> int:
    """A device buffer's address: a CuPy array's pointer, or the simulator's numpy array's."""
    data = buf.data
    return data.ptr if hasattr(data, "ptr") else buf.ctypes.data


def _table(name, operands):
    """The device pointer table of lists of 1-D buffers (a None list stands for the first, never read)."""
    first = operands[0]
    require_dtype(first[0].dtype, FLOATS, name)
    rows = []
    for j, p in enumerate(first):
        row = [p.size]
        for op in operands:
            b = p if op is None else op[j]
            if b.size != p.size or b.dtype != p.dtype:
                raise ValueError(f"{name}: every buffer of tensor {j} must hold {p.size} {p.dtype} elements, "
                                 f"got {b.size} {b.dtype}")
            row.append(_address(b))
        rows.append(row)
    host = np.array(rows, dtype=np.int64)
    return kernels.get("from_host", "cuda")(host), runtime.i64(host.shape[1]), runtime.i64(host.shape[0])


def _per_tensor(dtype, *columns):
    return kernels.get("from_host", "cuda")(np.array(columns, dtype=dtype).T.copy())


def _launch(name, params, *args):
    """One launch over every tensor: blockIdx.y picks the tensor, x-blocks cover the largest one."""
    longest = max(p.size for p in params)
    if longest == 0:
        return
    blocks_x = min((longest + runtime.BLOCK - 1) // runtime.BLOCK, runtime.get().max_blocks)
    runtime.enqueue(kernel(FILE, name, params[0].dtype), (blocks_x, min(len(params), _MAX_GRID_Y)),
                    (runtime.BLOCK,), args)


@kernels.register("sgd_steps", "cuda")
def sgd_steps(params, grads, momentum_buffers, lr, weight_decay, momentum, dampening, nesterov, maximize, firsts):
    if not params:
        return
    scalar = params[0].dtype.type
    _launch("sgd_multi", params, *_table("sgd_steps", (params, grads, momentum_buffers)),
            _per_tensor(params[0].dtype, [bool(f) for f in firsts]), scalar(lr), scalar(weight_decay),
            scalar(momentum), scalar(1 - dampening), runtime.i32(bool(nesterov)), scalar(-1 if maximize else 1))


@kernels.register("adam_steps", "cuda")
def adam_steps(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, beta1, beta2, eps, weight_decay, decay,
               amsgrad, maximize, step_sizes, bias_correction2_sqrts):
    if not params:
        return
    scalar = params[0].dtype.type
    _launch("adam_multi", params,
            *_table("adam_steps", (params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs)),
            _per_tensor(params[0].dtype, step_sizes, bias_correction2_sqrts), scalar(1 - beta1), scalar(beta2),
            scalar(1 - beta2), scalar(eps), scalar(weight_decay), scalar(decay), runtime.i32(bool(amsgrad)),
            scalar(-1 if maximize else 1))


@kernels.register("adagrad_steps", "cuda")
def adagrad_steps(params, grads, sums, weight_decay, eps, maximize, clrs):
    if not params:
        return
    scalar = params[0].dtype.type
    _launch("adagrad_multi", params, *_table("adagrad_steps", (params, grads, sums)),
            _per_tensor(params[0].dtype, [-c for c in clrs]), scalar(weight_decay), scalar(eps),
            scalar(-1 if maximize else 1))


@kernels.register("norms", "cuda")
def norms(tensors, ord, out):
    if not tensors:
        return
    table, cols, n = _table("norms", (tensors,))
    runtime.launch_rows(kernel(FILE, "norms_multi", tensors[0].dtype), len(tensors), table, cols, n,
                        np.float64(ord), out)


@kernels.register("scale", "cuda")
def scale(tensors, factor):
    if tensors:
        _launch("scale_multi", tensors, *_table("scale", (tensors,)), tensors[0].dtype.type(factor))
