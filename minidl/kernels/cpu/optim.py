"""Fused optimizer updates on the CPU: each parameter is updated in one pass over its elements."""
from ... import kernels
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
