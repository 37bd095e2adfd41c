"""The primitive-kernel contract and the registry that dispatches it per device.

Ops (``minidl/ops``) are written once, device-agnostic, on top of these
primitives; each device registers one implementation per name (the meta device's,
``kernels/meta.py``, compute nothing: its tensors have no data). Kernels see raw
buffers (a flat array of the device) plus :class:`minidl.layout.Layout` objects,
never Tensors. Elementwise/reduce kernels only ever see the *compute* dtypes
(float32, float64, int64, bool); ``copy`` converts between all dtypes.

Contract (``op`` is a name from the matching tuple below; ``OP_CODES`` gives each its kernel code):

===================  ===============================================  ==============================================
name                 signature                                        meaning
===================  ===============================================  ==============================================
alloc                (numel, dtype) -> buf                            uninitialised buffer
from_host            (ndarray) -> buf                                 copy of a 1-D numpy array onto the device
to_host              (buf) -> ndarray                                 1-D numpy array (shares memory on cpu)
share_memory         (buf) -> (buf, handle)                           a copy of buf in memory other processes can
                                                                      map; handle (picklable) names it
open_shared          (handle) -> buf                                  the buffer another process shared (same memory)
copy                 (src, src_layout, dst, dst_layout)               dst[...] = src[...], converting dtype
unary                (op, x, x_layout, out, out_layout)               out = op(x)
binary               (op, a, a_layout, b, b_layout, out, out_layout)  out = op(a, b); layouts already broadcast
compare              (op, a, a_layout, b, b_layout, out, out_layout)  as binary, bool out
where                (c, cl, a, al, b, bl, out, ol)                   out = a if c else b
reduce               (op, x, x_layout, dims, out)                     reduce dims; out is contiguous over the rest
arg_reduce           (op, x, x_layout, dim, out)                      int64 index of max/min along dim
scan                 (op, x, x_layout, dim, out, out_layout)          inclusive scan along dim
argsort              (x, x_layout, dim, descending, out)              stable int64 sort order along dim, NaN largest;
                                                                      out contiguous in x's shape
take                 (src, src_layout, index, out)                    out[i] = src[flat index[i]] (row-major); an
                                                                      index outside [0, numel) is an IndexError,
                                                                      raised at once on cpu, at the next
                                                                      synchronisation on cuda
put                  (dst, dst_layout, index, values, accumulate)     dst[flat index[i]] (+)= values[i], checked
                                                                      as take (cpu then writes nothing)
check_index          (index, size, stride, wrap, out)                 out = stride * index, after adding size to
                                                                      negative ones when wrap (packed int64): the
                                                                      term of a flat index; an index outside
                                                                      [-size, size) (wrap) or [0, size) is an
                                                                      IndexError reported as given, raised as
                                                                      take's (its out is 2**62: beyond any tensor,
                                                                      so the take or put that follows skips it)
nonzero              (x, x_layout) -> int64 buffer                    flat indices of nonzero elements
matmul               (a, al, b, bl, out, ol)                          (...,m,k) @ (...,k,n), batch dims equal
linalg               (op, ins, layouts, outs, options)                the decomposition op (LINALG_OPS) of the
                                                                      batched matrices ins, results packed into
                                                                      outs (see below)
im2col               (x, cols, geom, channels=0)                      cols = every window of x (N,C,h,w), see below
col2im               (cols, x, geom, channels=0)                      x = the adjoint of im2col (overwrites x)
max_pool2d           (x, out, index, geom)                            out = window max; int64 index in the h*w plane
max_pool2d_backward  (g, index, grad_in, geom)                        grad_in = 0, then grad_in[plane][index] += g
sgd_step             (p, g, buf, lr, wd, momentum, dampening,         one fused SGD update of packed 1-D buffers
                      nesterov, maximize, first)                      (``torch.optim.SGD``'s formulas, see below)
adam_step            (p, g, m, v, vmax, beta1, beta2, eps, wd,        one fused Adam/AdamW update (see below)
                      decay, amsgrad, maximize, step_size, bc2)
sgd_steps            (ps, gs, bufs, lr, wd, momentum, dampening,      sgd_step over lists of packed buffers of one
                      nesterov, maximize, firsts)                     dtype, in one launch (firsts: one per tensor)
adam_steps           (ps, gs, ms, vs, vmaxs, beta1, beta2, eps, wd,   adam_step over lists in one launch, with one
                      decay, amsgrad, maximize, step_sizes, bc2s)     step_size and bc2 per tensor
adagrad_steps        (ps, gs, sums, wd, eps, maximize, clrs)          Adagrad's update over lists in one launch
norms                (xs, ord, out)                                   out[j] = the ord-norm (ord > 0 or inf) of
                                                                      buffer j, in float64, in one launch
scale                (xs, factor)                                     every buffer's elements *= factor, in place,
                                                                      in one launch
softmax              (x, out, n, log)                                 (log_)softmax of each packed row of n elements
softmax_backward     (y, g, out, n, log)                              its gradient from the output y (see below)
random               (kind, out, seed, offset, a, b)                  fill the whole 1-D buffer out with draws of a
                                                                      RANDOM_KINDS kind from Philox (see below)
attention            (q, ql, k, kl, v, vl, mask, ml, out, lse,        out = softmax(q k^T * scale + mask) v, and each
                      scale, causal, dropout_p, seed, offset)         row's log-sum-exp, blocked (see below)
attention_backward   (q, ql, k, kl, v, vl, mask, ml, out, lse, g,     dq, dk, dv from the saved out and lse,
                      dq, dk, dv, scale, causal, dropout_p, seed,     recomputing the scores block by block
                      offset)
dropout              (x, out, mask, p, seed, offset)                  mask = 1/(1-p) where kept, else 0; out = x *
                                                                      mask, in one pass (see ``random``)
norm_rows            (x, w, b, out, mean, rstd, n, span, cycle,       layer/RMS/group norm of each packed row of n
                      eps, rms)                                       elements, its mean and 1/std saved (see below)
norm_rows_backward   (x, w, mean, rstd, g, dx, dw, db, n, span,       dx and the parameter gradients dw, db (None:
                      cycle, rms)                                     not wanted) from the saved mean and rstd
batch_norm           (x, out, shape, channels_last, weight, bias,     out = batch norm of x over (N, C, S) with the
                      mean, invstd, running_mean, running_var,        batch's or the running statistics; mean and
                      training, momentum, eps)                        1/sqrt(var + eps) written (see below)
batch_norm_backward  (x, g, shape, channels_last, weight, mean,       dx, dweight, dbias of batch_norm from its
                      invstd, dx, dweight, dbias, training)           saved mean and invstd
rnn_cell             (mode, gx, gh, bh, hx, cx, hy, cy, saved,        one time step's gates of a recurrent layer:
                      hidden)                                         new h (and c), and the activations (see below)
rnn_cell_backward    (mode, dh, dy, dc, hx, cx, hy, cy, saved, dgx,   that step's gate and state gradients
                      dgh, dhx, dcx, hidden)
cross_entropy        (x, target, weight, out, wrow, stats, n,         per packed row of n logits (log-probabilities
                      ignore_index, smoothing, logits)                unless ``logits``): the loss term out, the
                                                                      target's weight wrow, (logits) the row's stats
cross_entropy_       (x, target, weight, stats, g, out, n,            out = the gradient of sum(g * loss terms) by x
backward              ignore_index, smoothing, logits)                (g: one element per row, or one for all)
fused                (program, shape, operands) -> launch             a generated kernel computing ``program`` (a
                                                                      ``formulas.fused_program.Program``) over
                                                                      ``shape``; operands: (buf, offset, strides)
                                                                      per load, then per store; ``launch(*bufs)``
                                                                      runs it on those buffers (see below);
                                                                      ``launch.device_type`` names the device
===================  ===============================================  ==============================================

``geom`` for im2col, col2im and the two max-pool kernels is ``(planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)``: planes =
N*C, image size, kernel size, stride, zero padding, dilation, output size; all buffers are contiguous
from element 0. Window (i, j) tap (ki, kj) reads image row i*sh - ph + ki*dh, column j*sw - pw + kj*dw
(outside the image: zero for im2col, skipped by max_pool2d and col2im). The columns of im2col/col2im
are laid out (C*kh*kw, N, oh*ow) for ``channels`` = C (row c*kh*kw + ki*kw + kj; a convolution is
then one GEMM over all N*oh*ow positions); ``channels`` = 0 means C = planes, N = 1, i.e. the
(N, C*kh*kw, oh*ow) layout of ``unfold``. ``max_pool2d_backward`` takes gradients and indices of
shape (planes, oh*ow) as max_pool2d wrote them and skips indices outside the plane. On the CPU the
four take float32, float64 and int64 buffers (integer convolution and pooling); on cuda float32 and
float64 only.

The optimizer steps update each element in place, with ``d = -g if maximize else g``:

- sgd_step: ``d += wd*p``; with momentum, ``buf = d if first else momentum*buf + (1-dampening)*d``
  and ``d = d + momentum*buf if nesterov else buf``; then ``p -= lr*d``.
- adam_step: ``p *= decay`` (AdamW's decoupled decay, 1 otherwise); ``d += wd*p``;
  ``m += (1-beta1)*(d-m)``; ``v = beta2*v + (1-beta2)*d*d``; with amsgrad ``vmax = max(vmax, v)`` is used
  for v; ``p -= step_size * m / (sqrt(v)/bc2 + eps)`` (step_size = lr / bias correction 1, bc2 = the
  square root of bias correction 2).

The multi-tensor forms (``*_steps``, ``norms``, ``scale``) take lists of packed 1-D buffers, one entry
per tensor (a list of None where the single form takes None), all of one dtype and device, and
update each tensor exactly as the single form would, in one kernel launch: on the CPU through a
pointer table (kernels/cpu/jit/multi_tensor.py), on the GPU through a struct of up to 56 tensors'
addresses passed as a kernel argument (one launch per 56; csrc/multi_tensor.cu).
adagrad_steps: ``d += wd*p``; ``sum += d*d``; ``p += (d / (sqrt(sum) + eps)) * -clr`` (torch.optim.Adagrad's
order of operations; clr = lr / (1 + (step - 1) * lr_decay), one per tensor).

The softmax pair works on packed rows (buffers of rows * n elements from element 0), max-shifted so
that logits of any magnitude stay finite: softmax ``y = exp(x - m) / sum(exp(x - m))``, log-softmax
``y = (x - m) - log(sum(exp(x - m)))``; backward ``y * (g - sum(g*y))``, resp. ``g - exp(y) * sum(g)``.

The attention pair takes q (B, H, L, E), k (B, Hkv, S, E) and v (B, Hkv, S, Ev) as layouts with unit stride
along their last dim (any other strides, 0 for broadcast), float32 or float64; query head h uses key/value
head h // (H // Hkv) (grouped-query attention). ``mask`` is None or an additive mask of q's dtype with a
(B, H, L, S) layout (any strides: broadcast masks are not copied); ``causal`` lets query i see keys 0..i
only (the upper-left aligned triangle, PyTorch's convention). out (B, H, L, Ev), lse (B, H, L) and the
gradient g (like out) are packed, as are dq, dk, dv (q's, k's, v's shapes), which the backward overwrites.
A row no key may take part in gets zeros and lse = -inf, and no gradient. The scores are never stored:
the forward keeps a running max and sum per row (online softmax), the backward recomputes each weight
as exp(score - lse). Dropout (0 <= dropout_p < 1; 0: none) keeps weight (b, h, i, j) when the uniform draw
c = ((b * H + h) * L + i) * S + j of ``random`` at (seed, offset) (u24 for float32, u53 for float64) is below
1 - dropout_p rounded to the dtype, and scales it by 1 / (1 - dropout_p): exactly the elements that
``bernoulli_(1 - p)`` over a (B, H, L, S) tensor drawn from that state keeps. lse and the softmax's sum are
taken before dropout; the backward draws the same elements again.

``dropout`` takes packed float32 or float64 buffers of one size and dtype and keeps element i when the uniform
draw i of ``random`` at (seed, offset) (u24 for float32, u53 for float64) is below 1 - p rounded to the dtype
(0 <= p < 1); mask holds 1 / (1 - p) rounded to the dtype where kept: exactly ``x * (bernoulli_(1 - p) *
(1 / (1 - p)))`` over x drawn from that state, in one pass instead of five.

The norm pair works on packed rows of n elements (x, out, g, dx: rows * n; mean, rstd: one per row), float32
or float64: ``mean`` (0 when ``rms``), ``rstd = 1 / sqrt(mean((x - mean)**2) + eps)`` and
``out = (x - mean) * rstd * w + b``. Element j of row r takes parameter ``(r % cycle) * (n // span) + j // span``
of w and b (cycle * n / span elements each; None: 1 and 0): per column for layer and RMS norm (span = cycle =
1), per channel for group norm over (N, G, C/G, *spatial) rows (span = the spatial size, cycle = G). The
backward gives ``dx = rstd * (gy - mean(gy) - xhat * mean(gy * xhat))`` with ``gy = g * w``, without the
``mean(gy)`` term when ``rms``, and overwrites dw, db with the sums of ``g * xhat``, g over each parameter's
elements.

The rnn_cell pair works on packed rows of a batch of B rows, float32 or float64; mode is RNN_TANH, RNN_RELU,
LSTM or GRU, with G = 1, 1, 4, 3 gates per hidden unit in PyTorch's order (LSTM i, f, g, o; GRU r, z, n). gx and
gh are (B, G*hidden): the step's input and hidden projections (x W_ih^T + b_ih, h W_hh^T); bh (G*hidden) is
b_hh or None (zero). hx, cx: the state before the step; hy, cy: after it; saved (B, 4*hidden) keeps what the
backward reads. A mode's unused buffers are None. RNN: hy = tanh or relu(gx + gh + bh). LSTM (reads cx; writes
hy, cy, saved = i, f, g, o): c = f cx + i g, hy = o tanh(c). GRU (reads hx; writes hy, saved = r, z, n, hn with
hn = gh_n + bh_n): n = tanh(gx_n + r hn), hy = n + z (hx - n). The backward takes dh + dy (dy None: 0) as the
gradient of hy and dc (None: 0) as that of cy, and writes dgx, the gradient of the gate pre-activations (also
that of gh and bh, except GRU's n gate, whose hidden-side gradient is r times it: GRU writes that side to dgh);
GRU writes dhx = the part of hx's gradient that does not go through gh (z times hy's), LSTM dcx = cx's
gradient (dcx may be dc). The matmuls around the step (h W_hh^T, dgh W_hh) are the caller's.

The cross-entropy pair takes x as packed rows of n classes, an int64 target per row, weight None or n
elements (None: all 1) of x's dtype; out, wrow, stats and g are of x's dtype. With lse = log(sum(exp(x))) (0
when x holds log-probabilities, i.e. not ``logits``), class weights w (W their sum) and smoothing e: a row
whose target t is ignore_index gets out = wrow = 0 and no gradient; otherwise wrow = w_t and
``out = (1 - e) w_t (lse - x_t) + e/n sum_c w_c (lse - x_c)`` (e is 0 for log-probabilities), and the
gradient is ``g ((1 - e) w_t + e W / n) softmax(x) - g e w / n - g (1 - e) w_t onehot(t)`` (the softmax term
only for logits). A target outside [0, n) other than ignore_index is an IndexError naming the target and n,
raised at once on cpu, at the next synchronisation on cuda (then the row is left as ignored). stats (None unless
``logits``) holds two per row, the max m and log(sum(exp(x - m))), and lse is taken as their sum only in
differences from x - m: as torch's log_softmax, precise for logits of any magnitude in float32 too.

``linalg`` takes ``ins``, a list of buffers of batched matrices (..., r, c) with their ``layouts`` (any
strides, the same batch dims, float32 or float64 unless said), and writes each result into its buffer of
``outs``, packed from element 0 in the shape given (None: not wanted); ``options`` are the op's keyword pairs.
The ops (``kernels/lapack.py``, written once over the array module: numpy's LAPACK on the CPU and in the
simulator, CuPy's cuSOLVER on a GPU):

- cholesky: A (n, n) -> the lower factor L, int32 info (0, or the order of the first leading minor that is not
  positive-definite);
- lu_factor: A (m, n) -> LU, int32 1-based pivots (min(m, n)), int32 info (the column of the first zero pivot),
  LAPACK getrf's partial pivoting;
- permutation: int32 pivots as (..., 1, k), option m -> int64 perm (m): ``A = P L U`` with ``P[perm[i], i] = 1``;
- triangular_solve: A (n, n), B (n, k), options upper, unitriangular -> X with A X = B, reading one triangle;
- solve: A (n, n), B (n, k) -> X with A X = B, int32 info as lu_factor's;
- slogdet: A (n, n) -> sign, log|det A| (one each);
- qr: A (m, n), option mode "reduced", "complete" or "r" -> Q (None for "r"), R; mode "raw" -> geqrf's
  reflectors-and-R (m, n) and tau (min(m, n));
- eigh: A (n, n), option lower -> ascending eigenvalues (n), eigenvectors as columns;
- svd: A (m, n), options full_matrices, compute_uv -> U, S (min(m, n)), Vh; S only without compute_uv.

``fused`` is how ``minidl.compile`` runs a chain of elementwise launches as one kernel: each device writes the
program from the ops' formulas (CPU: Numba source, GPU: CUDA C), caches it on disk by the program's key
(``kernels/fused_cache.py``), and compiles it before returning, so a kernel that does not compile raises here.
Every operand has ``shape`` (merged dims); values are rounded to each op's dtype as eager's launches stored them.

``random`` is counter-based, so every device gives the same numbers: element i is made from the four
32-bit words w0..w3 of Philox4x32-10 (Salmon et al., SC'11) with key (seed mod 2^32, seed >> 32) and
counter (c mod 2^32, c >> 32, 0, 0), c = offset + i (seed, offset: unsigned 64-bit). With
``u24 = (w0 >> 8) * 2^-24``, ``u53(x, y) = ((y << 32 | x) >> 11) * 2^-53``, all arithmetic in float64
without fused multiply-adds, rounded once to out's dtype:

- uniform (float32, float64 out): ``a + (b - a) * u``, u = u24 for float32, u53(w0, w1) for float64;
- normal (float32, float64): ``a + b * sqrt(-2 log(u53(w0, w1) + 2^-53)) * cos(2 pi u53(w2, w3))``;
- integers (int64 out; a, b integers, a < b): ``a + ((w1 << 32 | w0) mod (b - a))`` in 64-bit
  unsigned arithmetic (the whole 64-bit range when b - a wraps to 0).

The draw kernels (``DRAWS``: random, dropout, attention, attention_backward) take their (seed, offset) in
one of two ways. As numbers, as above. Or ``seed`` is a Philox state buffer, an int64 buffer of two elements
on the kernel's device holding the bits of the unsigned seed and a base offset, and ``offset`` is a delta:
the kernel reads the buffer when it runs (on the GPU, on the device) and draws at (state[0], state[1] +
offset mod 2^64), the numbers the first form gives for those values. A captured CUDA graph keeps its launches'
arguments, so only the second form can draw new numbers at each replay, once the host has rewritten the buffer
(torch's PhiloxCudaState and its offset pointer); a draw in the first form refuses to be captured.

The batch norm pair takes x, out, g and dx packed in (N, C, S) order (S: the spatial elements), or in (N, S, C)
order when ``channels_last`` (an (N, C) input is either), float32 or float64; weight, bias, mean, invstd, the
running statistics, dweight and dbias hold C elements of x's dtype (weight and bias may be None: 1 and 0). In
training, per channel over its M = N * S elements: mean and the biased variance var (two passes: the mean, then the
squared deviations from it), invstd = 1 / sqrt(var + eps), and, when running_mean and running_var are given and
M > 0, ``running = (1 - momentum) * running + momentum * stat`` with the unbiased variance var * M / (M - 1); in eval
mode mean = running_mean, invstd = 1 / sqrt(running_var + eps). ``out = (x - mean) * invstd * weight + bias``.
The backward writes ``dbias = sum(g)``, ``dweight = sum(g * xhat)`` (xhat = (x - mean) * invstd) and
``dx = weight * invstd * (g - dbias / M - xhat * dweight / M)`` in training, ``weight * invstd * g`` in eval.
"""
from __future__ import annotations

import importlib

from .. import _tracing, formulas

# op names per kernel family, in the order of their codes (the math: minidl/formulas/table.py)
UNARY_OPS = formulas.CODED["unary"]
BINARY_OPS = formulas.CODED["binary"]  # gate: a where b > 0, else 0 (ReLU's backward in one pass)
COMPARE_OPS = formulas.CODED["compare"]
REDUCE_OPS = formulas.CODED["reduce"]
ARG_REDUCE_OPS = formulas.CODED["arg_reduce"]
SCAN_OPS = formulas.CODED["scan"]
RANDOM_KINDS = formulas.CODED["random"]


class _Codes(dict):
    """op name -> the code a family's kernels switch on; an unknown name is a clear error."""

    def __init__(self, family, names):
        super().__init__((name, i) for i, name in enumerate(names))
        self.family = family

    def __missing__(self, name):
        raise ValueError(f"{self.family}: unknown op {name!r}; the {self.family} ops are {', '.join(self)}")


OP_CODES = {family: _Codes(family, names) for family, names in formulas.CODED.items()}

PRIMITIVES = ("alloc", "from_host", "to_host", "share_memory", "open_shared", "copy", "unary", "binary",
              "compare", "where", "reduce", "arg_reduce", "scan", "argsort", "take", "put", "check_index",
              "nonzero", "matmul", "linalg", "im2col", "col2im", "max_pool2d", "max_pool2d_backward", "sgd_step",
              "adam_step",
              "sgd_steps", "adam_steps", "adagrad_steps", "norms", "scale",
              "softmax", "softmax_backward", "random", "attention", "attention_backward", "dropout",
              "norm_rows", "norm_rows_backward", "batch_norm", "batch_norm_backward",
              "rnn_cell", "rnn_cell_backward", "cross_entropy",
              "cross_entropy_backward", "fused")

LINALG_OPS = ("cholesky", "lu_factor", "permutation", "triangular_solve", "solve", "slogdet", "qr", "eigh", "svd")

# What each primitive writes, by the contract's argument names (a list argument: every buffer in it); the
# kernels that return a buffer (alloc, from_host, nonzero, share_memory, open_shared) write none of their
# arguments. minidl.compile's recorder reads this to tell a call that updates state it cannot undo.
WRITES = {
    "copy": ("dst",), "unary": ("out",), "binary": ("out",), "compare": ("out",), "where": ("out",),
    "reduce": ("out",), "arg_reduce": ("out",), "scan": ("out",), "argsort": ("out",), "take": ("out",),
    "put": ("dst",), "check_index": ("out",), "matmul": ("out",), "linalg": ("outs",), "im2col": ("out",),
    "col2im": ("out",),
    "max_pool2d": ("out", "index"), "max_pool2d_backward": ("grad_in",),
    "sgd_step": ("param", "momentum_buffer"), "adam_step": ("param", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"),
    "sgd_steps": ("params", "momentum_buffers"), "adam_steps": ("params", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs"),
    "adagrad_steps": ("params", "sums"), "norms": ("out",), "scale": ("tensors",),
    "softmax": ("out",), "softmax_backward": ("out",), "random": ("out",),
    "attention": ("out", "lse"), "attention_backward": ("dq", "dk", "dv"), "dropout": ("out", "mask"),
    "norm_rows": ("out", "mean", "rstd"), "norm_rows_backward": ("dx", "dw", "db"),
    "batch_norm": ("out", "mean", "invstd", "running_mean", "running_var"),
    "batch_norm_backward": ("dx", "dweight", "dbias"), "rnn_cell": ("hy", "cy", "saved"),
    "rnn_cell_backward": ("dgx", "dgh", "dhx", "dcx"), "cross_entropy": ("out", "wrow", "stats"),
    "cross_entropy_backward": ("out",),
}
# The primitives that draw from a generator, by the names of their (seed, offset) arguments.
DRAWS = {"random": ("seed", "offset"), "dropout": ("seed", "offset"), "attention": ("seed", "offset"),
         "attention_backward": ("seed", "offset")}

# device type -> module whose import registers that device's kernels
_DEVICE_MODULES = {"cpu": "minidl.kernels.cpu", "cuda": "minidl.kernels.cuda.primitives",
                   "meta": "minidl.kernels.meta"}
_registry: dict = {}


def register(name: str, device_type: str = "cpu"):
    """Decorator: make ``fn`` the ``name`` kernel of ``device_type``.

    Any module may call this, so users can add kernels for new primitives (or
    replace built-in ones) from their own code and use them in their own ops.
    """
    def deco(fn):
        _registry[(device_type, name)] = fn
        return fn
    return deco


def get(name: str, device_type: str):
    """The ``name`` kernel for ``device_type``, importing that device's kernels on first use; while
    ``minidl.compile`` captures a call on this thread, the kernel as its recorder launches it (a meta one breaks
    the graph: there is nothing to replay)."""
    if _tracing.captures:
        recorder = _tracing.recording()
        if recorder is not None:
            if device_type == "meta":   # (nothing runs: nothing to capture and replay)
                recorder.graph_break("an op runs on meta tensors")
                return lookup(name, device_type)
            return recorder.kernel(name, device_type, lookup(name, device_type))
    return lookup(name, device_type)


def lookup(name: str, device_type: str):
    """The registered ``name`` kernel itself, never a recorder's (``get`` without the capture)."""
    try:
        return _registry[(device_type, name)]
    except KeyError:
        pass
    module = _DEVICE_MODULES.get(device_type)
    if module is not None:
        importlib.import_module(module)
    try:
        return _registry[(device_type, name)]
    except KeyError:
        raise RuntimeError(f"no '{name}' kernel is registered for device type '{device_type}'") from None


def device_of(name: str, fn):
    """The device type whose registered ``name`` kernel is ``fn`` (None: none is)."""
    return next((d for (d, n), f in _registry.items() if n == name and f is fn), None)


def registered(device_type: str) -> list:
    return sorted(n for d, n in _registry if d == device_type)
