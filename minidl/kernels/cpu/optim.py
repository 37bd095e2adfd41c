"""Fused optimizer updates on the CPU: each parameter is updated in one pass over its elements, and
the multi-tensor forms update (or measure) a whole list of tensors in one kernel call."""
import numpy as np

from ... import kernels
from .jit.multi_tensor import (adagrad_multi_parallel, adagrad_multi_serial, adam_multi_parallel,
                               adam_multi_serial, fill_addresses, norms_multi, scale_multi, sgd_multi_parallel,
                               sgd_multi_serial)
from .jit.optim import adam_parallel, adam_serial, sgd_parallel, sgd_serial
from .strided import launch, work_items


@kernels.register("sgd_step")
def sgd_step(param, grad, momentum_buffer, lr, weight_decay, momentum, dampening, nesterov, maximize, first):
    scalar = param.dtype.type
    launch(sgd_serial, sgd_parallel, param.size, param, grad, momentum_buffer, scalar(lr), scalar(weight_decay),
           scalar(momentum), scalar(1 - dampening), bool(nesterov), scalar(-1 if maximize else 1), bool(first),
           work_items((param.size,)))


@kernels.register("adam_step")
def adam_step(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, beta1, beta2, eps, weight_decay, decay,
              amsgrad, maximize, step_size, bias_correction2_sqrt):
    scalar = param.dtype.type
    launch(adam_serial, adam_parallel, param.size, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq,
           scalar(1 - beta1), scalar(beta2), scalar(1 - beta2), scalar(eps), scalar(weight_decay), scalar(decay), bool(amsgrad),
           scalar(-1 if maximize else 1), scalar(step_size), scalar(bias_correction2_sqrt), work_items((param.size,)))


_PIECE = 64  # arrays per tuple handed to fill_addresses (a long tuple compiles slowly; Numba caps them)


def pointer_table(*operands):
    """The int64 table (size, address per operand) of lists of same-length 1-D buffers of one dtype
    (see jit/multi_tensor.py); a None list stands for the first (never read by the kernel)."""
    first = operands[0]
    n = len(first)
    for a in (a for op in operands for a in (op if op is not None else first)):
        if a.dtype != first[0].dtype or a.ndim != 1 or not a.flags.c_contiguous:
            raise ValueError(f"multi-tensor kernel: every buffer must be a packed 1-D {first[0].dtype} array, "
                             f"got {a.dtype} {a.shape}")
    for op in operands[1:]:
        if op is not None and [a.size for a in op] != [a.size for a in first]:
            raise ValueError("multi-tensor kernel: each list must hold buffers of the parameters' sizes")
    table = np.empty((n, len(operands) + 1), np.int64)
    table[:, 0] = [a.size for a in first]
    for k, op in enumerate(operands):
        for start in range(0, n, _PIECE):
            piece = (op if op is not None else first)[start:start + _PIECE]
            padded = 8
            while padded < len(piece):
                padded *= 2
            fill_addresses(tuple(piece) + (piece[0],) * (padded - len(piece)), len(piece), k + 1, start, table)
    return table


def _per_tensor(dtype, *columns):
    return np.array(columns, dtype=dtype).T.copy()


def _multi(serial, parallel, params, *args):
    launch(serial, parallel, sum(p.size for p in params), *args)


@kernels.register("sgd_steps")
def sgd_steps(params, grads, momentum_buffers, lr, weight_decay, momentum, dampening, nesterov, maximize, firsts):
    if not params:
        return
    dtype = params[0].dtype
    scalar = dtype.type
    _multi(sgd_multi_serial, sgd_multi_parallel, params, pointer_table(params, grads, momentum_buffers),
           _per_tensor(dtype, [bool(f) for f in firsts]), params[0], scalar(lr), scalar(weight_decay),
           scalar(momentum), scalar(1 - dampening), bool(nesterov), scalar(-1 if maximize else 1))


@kernels.register("adam_steps")
def adam_steps(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, beta1, beta2, eps, weight_decay, decay,
               amsgrad, maximize, step_sizes, bias_correction2_sqrts):
    if not params:
        return
    dtype = params[0].dtype
    scalar = dtype.type
    _multi(adam_multi_serial, adam_multi_parallel, params,
           pointer_table(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs),
           _per_tensor(dtype, step_sizes, bias_correction2_sqrts), params[0], scalar(1 - beta1), scalar(beta2),
           scalar(1 - beta2), scalar(eps), scalar(weight_decay), scalar(decay), bool(amsgrad),
           scalar(-1 if maximize else 1))


@kernels.register("adagrad_steps")
def adagrad_steps(params, grads, sums, weight_decay, eps, maximize, clrs):
    if not params:
        return
    dtype = params[0].dtype
    scalar = dtype.type
    _multi(adagrad_multi_serial, adagrad_multi_parallel, params, pointer_table(params, grads, sums),
           _per_tensor(dtype, [-c for c in clrs]), params[0], scalar(weight_decay), scalar(eps),
           scalar(-1 if maximize else 1))


@kernels.register("norms")
def norms(tensors, ord, out):
    if tensors:
        norms_multi(pointer_table(tensors), tensors[0], float(ord), out)


@kernels.register("scale")
def scale(tensors, factor):
    if tensors:
        scale_multi(pointer_table(tensors), tensors[0], tensors[0].dtype.type(factor))
