"""Multi-tensor optimizer steps and norms: every tensor of a list in one kernel call.

A list of N arrays reaches the kernels as a *pointer table*: an int64 array with one row per
tensor, ``(size, address of operand 0, address of operand 1, ...)``, turned back into arrays here
with ``carray`` over the address; so each kernel compiles once per dtype. The addresses are read by
``fill_addresses`` from tuples of up to 64 arrays, padded to a power of two so that it compiles for
a few lengths only. Measured (one thread, a loaded 2-core machine) for 120 arrays (30 parameters x 4
operands, a GPT-sized group): the tuple fills the table in ~23 us, reading ``__array_interface__``
per array takes ~380 us and building a numba typed List ~270 us (the gradients are new arrays every
step, so neither can be cached); passing the tuple to the update kernel itself would compile it
anew for every count of tensors, and one flat buffer would copy every parameter in and out.

Per-tensor values (a step size per parameter, SGD's ``first``) come in a second table in the
parameters' dtype (rounded once from float64, as the per-parameter kernels' scalars are). Each
tensor is updated by the same element function as the per-parameter kernel, so the two paths give
bit-identical results.
"""
import math

import numpy as np
from numba import carray, njit, prange, types
from numba.extending import intrinsic

from .optim import _adam_range, _sgd_range
from .rows import CHUNK


@intrinsic
def _pointer(typingctx, address, like):
    """The int64 ``address`` as a pointer to elements of ``like``'s dtype."""
    sig = types.CPointer(like.dtype)(address, like)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))
    return sig, codegen


@njit(inline="always")
def _operand(table, j, k, like, lo, hi):
    """Elements [lo, hi) of operand k of tensor j."""
    return carray(_pointer(table[j, 1 + k], like), (table[j, 0],))[lo:hi]


@njit(inline="always")
def _chunk_starts(table):
    """Cumulative counts of CHUNK-sized work items per tensor (item t of all belongs to the tensor j
    with starts[j] <= t < starts[j + 1])."""
    starts = np.zeros(table.shape[0] + 1, np.int64)
    for j in range(table.shape[0]):
        starts[j + 1] = starts[j] + (table[j, 0] + CHUNK - 1) // CHUNK
    return starts


@njit(inline="always")
def _item(starts, table, t):
    j = np.searchsorted(starts, t, side="right") - 1
    lo = (t - starts[j]) * CHUNK
    return j, lo, min(table[j, 0], lo + CHUNK)


@njit(cache=True, nogil=True)
def fill_addresses(arrays, count, column, start, table):
    """table[start + i, column] = the address of arrays[i] for i < count (the padding is not read)."""
    for i in range(count):
        table[start + i, column] = arrays[i].ctypes.data


# ----------------------------------------------------------------------------- SGD
@njit(inline="always")
def _sgd_tensor(table, per, like, lr, wd, momentum, keep, nesterov, sign, j, lo, hi):
    p, g, b = _operand(table, j, 0, like, lo, hi), _operand(table, j, 1, like, lo, hi), \
        _operand(table, j, 2, like, lo, hi)
    _sgd_range(p, g, b, lr, wd, momentum, keep, nesterov, sign, per[j, 0] != 0, 0, hi - lo)


@njit(cache=True, nogil=True)
def sgd_multi_serial(table, per, like, lr, wd, momentum, keep, nesterov, sign):
    for j in range(table.shape[0]):
        _sgd_tensor(table, per, like, lr, wd, momentum, keep, nesterov, sign, j, 0, table[j, 0])


@njit(cache=True, nogil=True, parallel=True)
def sgd_multi_parallel(table, per, like, lr, wd, momentum, keep, nesterov, sign):
    starts = _chunk_starts(table)
    for t in prange(starts[-1]):
        j, lo, hi = _item(starts, table, t)
        _sgd_tensor(table, per, like, lr, wd, momentum, keep, nesterov, sign, j, lo, hi)


# ----------------------------------------------------------------------------- Adam / AdamW
@njit(inline="always")
def _adam_tensor(table, per, like, c1, beta2, c2, eps, wd, decay, amsgrad, sign, j, lo, hi):
    _adam_range(_operand(table, j, 0, like, lo, hi), _operand(table, j, 1, like, lo, hi),
                _operand(table, j, 2, like, lo, hi), _operand(table, j, 3, like, lo, hi),
                _operand(table, j, 4, like, lo, hi), c1, beta2, c2, eps, wd, decay, amsgrad, sign,
                per[j, 0], per[j, 1], 0, hi - lo)


@njit(cache=True, nogil=True)
def adam_multi_serial(table, per, like, c1, beta2, c2, eps, wd, decay, amsgrad, sign):
    for j in range(table.shape[0]):
        _adam_tensor(table, per, like, c1, beta2, c2, eps, wd, decay, amsgrad, sign, j, 0, table[j, 0])


@njit(cache=True, nogil=True, parallel=True)
def adam_multi_parallel(table, per, like, c1, beta2, c2, eps, wd, decay, amsgrad, sign):
    starts = _chunk_starts(table)
    for t in prange(starts[-1]):
        j, lo, hi = _item(starts, table, t)
        _adam_tensor(table, per, like, c1, beta2, c2, eps, wd, decay, amsgrad, sign, j, lo, hi)


# ----------------------------------------------------------------------------- Adagrad
@njit(inline="always")
def _adagrad_tensor(table, per, like, wd, eps, sign, j, lo, hi):
    """torch's Adagrad update: d = sign*g (+ wd*p); sum += d*d; p += (d / (sqrt(sum) + eps)) * -clr."""
    ps, gs, ss = _operand(table, j, 0, like, lo, hi), _operand(table, j, 1, like, lo, hi), \
        _operand(table, j, 2, like, lo, hi)
    neg_clr = per[j, 0]
    if wd == 0:
        for i in range(ps.size):
            d = gs[i] * sign
            s = ss[i] + d * d
            ss[i] = s
            ps[i] = ps[i] + d / (math.sqrt(s) + eps) * neg_clr
    else:
        for i in range(ps.size):
            d = gs[i] * sign + ps[i] * wd
            s = ss[i] + d * d
            ss[i] = s
            ps[i] = ps[i] + d / (math.sqrt(s) + eps) * neg_clr


@njit(cache=True, nogil=True)
def adagrad_multi_serial(table, per, like, wd, eps, sign):
    for j in range(table.shape[0]):
        _adagrad_tensor(table, per, like, wd, eps, sign, j, 0, table[j, 0])


@njit(cache=True, nogil=True, parallel=True)
def adagrad_multi_parallel(table, per, like, wd, eps, sign):
    starts = _chunk_starts(table)
    for t in prange(starts[-1]):
        j, lo, hi = _item(starts, table, t)
        _adagrad_tensor(table, per, like, wd, eps, sign, j, lo, hi)


# ----------------------------------------------------------------------------- norms and scaling
@njit(cache=True, nogil=True)
def norms_multi(table, like, ord, out):
    """out[j] = the ord-norm of tensor j, accumulated in float64 (ord = inf: the largest |x|)."""
    for j in range(table.shape[0]):
        x = _operand(table, j, 0, like, 0, table[j, 0])
        acc = 0.0
        if math.isinf(ord):
            for i in range(x.size):
                a = abs(np.float64(x[i]))
                if a > acc or a != a:
                    acc = a
        elif ord == 2:
            for i in range(x.size):
                a = np.float64(x[i])
                acc += a * a
            acc = math.sqrt(acc)
        elif ord == 1:
            for i in range(x.size):
                acc += abs(np.float64(x[i]))
        else:
            for i in range(x.size):
                acc += abs(np.float64(x[i])) ** ord
            acc = acc ** (1.0 / ord)
        out[j] = acc


@njit(cache=True, nogil=True)
def scale_multi(table, like, factor):
    """Every element of every tensor times ``factor`` (``like``'s dtype), in place."""
    for j in range(table.shape[0]):
        x = _operand(table, j, 0, like, 0, table[j, 0])
        for i in range(x.size):
            x[i] = x[i] * factor
