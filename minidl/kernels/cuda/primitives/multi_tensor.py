"""Multi-tensor optimizer steps, norms and scaling on the GPU (csrc/multi_tensor.cu): a list of tensors
in one launch per MULTI_MAX of them. Each launch's tensors travel as a ``TensorList`` struct passed by
value (sizes, buffer addresses, per-tensor scalars): no copy to the device before the launch, so a
training step makes no host transfer and can be captured in a CUDA graph."""
import numpy as np

from .... import kernels
from .. import runtime
from .common import FLOATS, kernel, require_dtype

FILE = "multi_tensor"
MULTI_MAX, OPERANDS = 56, 5  # as in csrc/multi_tensor.cu
_LIST = np.dtype([("n", "<i8"), ("size", "<i8", (MULTI_MAX,)), ("addr", "<i8", (MULTI_MAX, OPERANDS)),
                  ("per", "<f8", (MULTI_MAX, 2))])
_MAX_GRID_Y = 65535  # CUDA's limit on gridDim.y (the kernels step over more tensors)


def _address(buf) -> int:
    """A device buffer's address: a CuPy array's pointer, or the simulator's numpy array's."""
    data = buf.data
    return data.ptr if hasattr(data, "ptr") else buf.ctypes.data


def _lists(name, operands, per=()):
    """(TensorList struct, first index, count) per launch for lists of 1-D buffers of one dtype (a None
    list stands for the first, never read); ``per``: up to two lists of per-tensor scalars."""
    first = operands[0]
    for j, p in enumerate(first):
        for op in operands[1:]:
            if op is not None and (op[j].size != p.size or op[j].dtype != p.dtype):
                raise ValueError(f"{name}: every buffer of tensor {j} must hold {p.size} {p.dtype} elements, "
                                 f"got {op[j].size} {op[j].dtype}")
    for start in range(0, len(first), MULTI_MAX):
        count = min(MULTI_MAX, len(first) - start)
        table = np.zeros(1, _LIST)
        table["n"] = count
        for j in range(count):
            p = first[start + j]
            table["size"][0, j] = p.size
            table["addr"][0, j, :len(operands)] = [_address(p if op is None else op[start + j]) for op in operands]
            for k, values in enumerate(per):
                table["per"][0, j, k] = values[start + j]
        yield table, start, count


def _launch(name, kernel_name, operands, per, *scalars):
    params = operands[0]
    if not params:
        return
    require_dtype(params[0].dtype, FLOATS, name)
    function = kernel(FILE, kernel_name, params[0].dtype)
    for table, start, count in _lists(name, operands, per):
        longest = max(p.size for p in params[start:start + count])
        if longest:
            blocks_x = min((longest + runtime.BLOCK - 1) // runtime.BLOCK, runtime.get().max_blocks)
            runtime.enqueue(function, (blocks_x, min(count, _MAX_GRID_Y)), (runtime.BLOCK,), (table, *scalars))


@kernels.register("sgd_steps", "cuda")
def sgd_steps(params, grads, momentum_buffers, lr, weight_decay, momentum, dampening, nesterov, maximize, firsts):
    scalar = params[0].dtype.type if params else float
    _launch("sgd_steps", "sgd_multi", (params, grads, momentum_buffers), ([float(bool(f)) for f in firsts],),
            scalar(lr), scalar(weight_decay), scalar(momentum), scalar(1 - dampening), runtime.i32(bool(nesterov)),
            scalar(-1 if maximize else 1))


@kernels.register("adam_steps", "cuda")
def adam_steps(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, beta1, beta2, eps, weight_decay, decay,
               amsgrad, maximize, step_sizes, bias_correction2_sqrts):
    scalar = params[0].dtype.type if params else float
    _launch("adam_steps", "adam_multi", (params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs),
            (step_sizes, bias_correction2_sqrts), scalar(1 - beta1), scalar(beta2), scalar(1 - beta2), scalar(eps),
            scalar(weight_decay), scalar(decay), runtime.i32(bool(amsgrad)), scalar(-1 if maximize else 1))


@kernels.register("adagrad_steps", "cuda")
def adagrad_steps(params, grads, sums, weight_decay, eps, maximize, clrs):
    scalar = params[0].dtype.type if params else float
    _launch("adagrad_steps", "adagrad_multi", (params, grads, sums), ([-c for c in clrs],), scalar(weight_decay),
            scalar(eps), scalar(-1 if maximize else 1))


@kernels.register("norms", "cuda")
def norms(tensors, ord, out):
    if not tensors:
        return
    require_dtype(tensors[0].dtype, FLOATS, "norms")
    function = kernel(FILE, "norms_multi", tensors[0].dtype)
    for table, start, count in _lists("norms", (tensors,)):
        runtime.launch_rows(function, count, table, np.float64(ord), out[start:start + count])


@kernels.register("scale", "cuda")
def scale(tensors, factor):
    if tensors:
        _launch("scale", "scale_multi", (tensors,), (), tensors[0].dtype.type(factor))
