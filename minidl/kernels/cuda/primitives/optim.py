"""Fused optimizer updates on the GPU (csrc/optim.cu): one thread per element, one launch per
parameter. Scalars go in the parameters' dtype, as on the CPU."""

from .... import kernels
from .. import runtime
from .common import FLOATS, kernel, require_dtype

FILE = "optim"


def _kernel(name, param, buffers):
    require_dtype(param.dtype, FLOATS, name)
    for b in buffers:
        if b.size != param.size or b.dtype != param.dtype:
            raise ValueError(f"{name}: every buffer must hold {param.size} {param.dtype} elements, got {b.size} "
                             f"{b.dtype}")
    return kernel(FILE, name, param.dtype)


@kernels.register("sgd_step", "cuda")
def sgd_step(param, grad, momentum_buffer, lr, weight_decay, momentum, dampening, nesterov, maximize, first):
    scalar = param.dtype.type
    runtime.launch(_kernel("sgd_step", param, (grad, momentum_buffer)), param.size, param, grad, momentum_buffer,
                   scalar(lr), scalar(weight_decay), scalar(momentum), scalar(1 - dampening),
                   runtime.i32(bool(nesterov)), scalar(-1 if maximize else 1), runtime.i32(bool(first)),
                   runtime.i64(param.size))


@kernels.register("adam_step", "cuda")
def adam_step(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, beta1, beta2, eps, weight_decay, decay,
              amsgrad, maximize, step_size, bias_correction2_sqrt):
    scalar = param.dtype.type
    runtime.launch(_kernel("adam_step", param, (grad, exp_avg, exp_avg_sq, max_exp_avg_sq)), param.size, param,
                   grad, exp_avg, exp_avg_sq, max_exp_avg_sq, scalar(1 - beta1), scalar(beta2), scalar(1 - beta2),
                   scalar(eps), scalar(weight_decay), scalar(decay), runtime.i32(bool(amsgrad)),
                   scalar(-1 if maximize else 1), scalar(step_size), scalar(bias_correction2_sqrt),
                   runtime.i64(param.size))
