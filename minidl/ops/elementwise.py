"""Elementwise ops: forward through the unary/binary/compare/where primitives, backward beside it.

Backward formulas are written with differentiable tensor ops, so they can be
differentiated again (``create_graph=True``).
"""
from __future__ import annotations

import math

import numpy as np

from .. import _dtype as dt
from .. import _tracing, formulas, kernels
from .._type_info import finfo
from ..autograd import Function, grad_mode
from ..formulas import expr
from ..layout import broadcast_shapes, expand
from .autocast_mode import autocast_op, listed
from .inplace import assign, check_no_internal_overlap, check_writable, rebased
from .registry import OPS, op
from .core import (
    as_operand,
    broadcast_layouts,
    buf,
    cast,
    check_devices,
    grad_enabled,
    kernel,
    new_like_shape,
    sum_to,
)


# ----------------------------------------------------------------------------- raw launches
def unary_raw(op: str, x, result_dtype, out=None):
    """out = op(x) computed in the kernel dtype of ``result_dtype``, no autograd."""
    cd = dt.compute_dtype(result_dtype)
    xc = cast(x, cd)
    target = out if out is not None and out.dtype is cd else new_like_shape(x.shape, cd, x)
    kernel("unary", x)(op, buf(xc), xc._layout, buf(target), target._layout)
    return _finish(target, result_dtype, out)


def binary_raw(kind: str, op: str, a, b, compute, result_dtype, out=None):
    """out = op(a, b) with broadcasting; ``compute`` is the dtype the kernel runs in."""
    if a._storage.device is not b._storage.device:
        check_devices(op, a, b)
    shape = a._layout.shape
    if b._layout.shape != shape and b._layout.shape:
        shape = broadcast_shapes(shape, b._layout.shape, op=op)
    if out is not None and out.shape != shape:
        raise RuntimeError(f"{op}: output with shape {list(out.shape)} doesn't match the broadcast shape "
                           f"{list(shape)}")
    ac = a if a.dtype is compute else cast(a, compute)
    bc = b if b.dtype is compute else cast(b, compute)
    kernel_out_dtype = dt.bool_ if kind == "compare" else compute
    if out is not None and out.dtype is kernel_out_dtype and not (_overlaps(out, ac) or _overlaps(out, bc)):
        target = out
    else:
        target = new_like_shape(shape, kernel_out_dtype, a if a._layout.shape is shape else b)
    al = ac._layout if ac._layout.shape == shape else expand(ac._layout, shape, op)
    bl = bc._layout if bc._layout.shape == shape else expand(bc._layout, shape, op)
    kernel(kind, a)(op, ac._storage.buf, al, bc._storage.buf, bl, target._storage.buf, target._layout)
    if out is None and target.dtype is result_dtype:
        return target
    return _finish(target, result_dtype, out)


def _overlaps(out, t) -> bool:
    """True when ``t`` reads ``out``'s memory through a different layout (an in-place hazard)."""
    if t._storage is not out._storage:
        return False
    tl, ol = t._layout, out._layout
    return not (tl.strides == ol.strides and tl.offset == ol.offset and tl.shape == ol.shape)


def _finish(result, result_dtype, out):
    if out is not None:
        if result is not out:
            kernel("copy", result)(buf(result), result._layout, buf(out), out._layout)
        return out
    return cast(result, result_dtype)


def _float_result(x):
    return x.dtype if x.dtype.is_floating_point else dt.get_default_dtype()


# ----------------------------------------------------------------------------- unary
_function_apply = Function.__dict__["apply"].__func__   # (the general case of the flattened applies, without super())


class Unary(Function):
    """``op`` applied elementwise (its formula: minidl/formulas/table.py). Integer inputs of
    float-only ops (exp, log, ...) compute in the default float dtype, as in PyTorch. Backward
    is the table's gradient formula, made once into a function of Tensor ops ``grad(x, y, g)``,
    of which only the tensors it reads are saved (``saves``: x, the input, and/or y, the output)."""
    op = ""
    float_only = True
    saves = ()

    @classmethod
    def apply(cls, x):
        """Function.apply, flattened for a float32/float64 operand with no graph to record and no
        exporter watching (as Binary.apply): what forward and unary_raw would do for it."""
        dtype = x.dtype
        if ((dtype is dt.float32 or dtype is dt.float64) and _tracing.active is None
                and not (x._requires_grad and grad_mode.state.enabled)):
            layout, device = x._layout, x._storage.device
            out = new_like_shape(layout.shape, dtype, x)
            kernels.get("unary", device.type)(cls.op, x._storage.buf, layout, out._storage.buf, out._layout)
            return out
        return _function_apply(cls, x)

    @classmethod
    def result_dtype(cls, x):
        return _float_result(x) if cls.float_only else x.dtype

    @classmethod
    def forward(cls, ctx, x):
        y = unary_raw(cls.op, x, cls.result_dtype(x))
        if ctx._recording:
            ctx.save_for_backward(*(x if name == "x" else y for name in cls.saves))
        return y

    @classmethod
    def backward(cls, ctx, g):
        saved = ctx.saved_tensors
        x = saved[0] if "x" in cls.saves else None
        y = saved[-1] if "y" in cls.saves else None
        return cls.grad(x, y, g)


class _GradSyntax(expr.Syntax):
    """A gradient formula as Python over Tensors: calls go through _grad_call, conditionals are where."""

    def call(self, function, args):
        return f"_grad_call({function!r}, {', '.join(args)})"

    def conditional(self, test, body, orelse):
        return f"where({test}, {body}, {orelse})"


def _grad_call(name, *args):
    """A call in a gradient formula: math on plain numbers, else the minidl op of that name."""
    if all(isinstance(a, (int, float)) for a in args):
        return getattr(math, name)(*args)
    return Gate.apply(*args) if name == "gate" else globals()[name](*args)


def _unary(formula):
    tree = expr.parse(formula.grad, ("x", "y", "g"), formulas.table.callable_formulas())
    source = expr.render(tree, _GradSyntax())
    # compiled once, so a backward step runs plain Python (walking the tree each time made
    # temporary objects, and with them more garbage collections, in every step)
    grad = eval(f"lambda x, y, g: {source}", globals())  # names resolve when it runs: where comes later
    cls = type(formula.name.capitalize(), (Unary,), {
        "op": formula.name, "float_only": formula.float_only, "grad_tree": tree, "grad": staticmethod(grad),
        "saves": tuple(name for name in ("x", "y") if name in expr.names_used(tree))})
    globals()[cls.__name__] = cls
    return autocast_op(formula.name)(cls.apply) if listed(formula.name) else cls.apply


def _check_grad_calls(formula):
    """Every call in a gradient formula names an op here (or gate), or, on plain numbers only, a
    function of Python's math: checked at import, not at the first backward."""
    for node in expr.ast.walk(formula.grad_tree):
        if isinstance(node, expr.ast.Call):
            name = node.func.id
            on_numbers = not any(expr.names_used(arg) for arg in node.args)
            if not (name == "gate" or callable(globals().get(name)) or (on_numbers and hasattr(math, name))):
                raise expr.FormulaError(f"{formula.op}'s grad calls {name!r}, which is not an elementwise op "
                                        f"(nor, on plain numbers, a function of Python's math)")


# test samples of the unary ops (see tests/opinfo.py): the toolkit maker of each op's values, and its
# leading arguments (rn when not listed), away from where the op is not differentiable or not defined
_SAMPLE_VALUES = {"abs": ("nonzero",), "sign": ("nonzero",), "reciprocal": ("nonzero",), "relu": ("nonzero",),
                  "log": ("pos",), "sqrt": ("pos",), "rsqrt": ("pos",), "log1p": ("uniform", -0.5, 2),
                  "tan": ("uniform", -1.2, 1.2), "floor": ("frac",), "ceil": ("frac",), "round": ("frac",),
                  "trunc": ("frac",), "asin": ("uniform", -0.9, 0.9), "acos": ("uniform", -0.9, 0.9),
                  "atanh": ("uniform", -0.9, 0.9), "acosh": ("uniform", 1.1, 3), "log2": ("pos",),
                  "log10": ("pos",), "relu6": ("uniform", -2, 8), "hardswish": ("uniform", -5, 5),
                  "hardsigmoid": ("uniform", -5, 5), "selu": ("nonzero",), "erfinv": ("uniform", -0.9, 0.9),
                  "lgamma": ("pos",), "digamma": ("pos",)}


def _unary_samples(t, name, fn=None):
    """A unary op's samples: contiguous, column-major and negative-stride inputs, and its own
    (``fn``: the op's public function, when it is not the formula's own)."""
    maker, *args = _SAMPLE_VALUES.get(name, ("rn",))
    public = OPS[name] if name in OPS else OPS["_" + name]   # (the registered op: what users call)
    values, fn = (lambda *shape: getattr(t, maker)(*args, *shape)), fn or public.function
    return [t.S(name, fn, values(3, 4)), t.S(f"{name}-fortran", fn, t.NC(values(4, 3), "F")),
            t.S(f"{name}-negstride", lambda x: fn(x).sum(0), t.NC(values(5), "neg"))
            ] + _MORE_UNARY_SAMPLES.get(name, lambda t, fn: [])(t, fn)


def _tanh_of_a_row(x):
    y = x * 2
    y[1].tanh_()
    return y


_MORE_UNARY_SAMPLES = {  # op name -> (t, op) -> its samples beyond those three
    "exp": lambda t, exp: [t.S("exp", exp, t.rn(3, 2), second_order=True)],
    "tanh": lambda t, tanh: [t.S("inplace-unary-on-view", _tanh_of_a_row, t.rn(3, 4)),
                             t.S("tanh", tanh, t.rn(4), second_order=True)],
    "sigmoid": lambda t, sigmoid: [
        t.S("sigmoid-of-matmul-sum", lambda a, b: (a @ b).sigmoid().sum(0), t.rn(3, 4), t.rn(4, 2)),
        t.S("sigmoid", sigmoid, t.NC(t.rn(3, 2), "F"), second_order=True)],
    "silu": lambda t, silu: [t.S("silu", silu, t.rn(4), second_order=True),
                             t.S("silu_backward", SiluBackward.apply, t.rn(3, 4), t.rn(3, 4), second_order=True)],
    "gelu": lambda t, gelu: [t.S("gelu", gelu, t.rn(4), second_order=True),
                             t.S("gelu_backward", GeluBackward.apply, t.rn(3, 4), t.rn(3, 4), second_order=True)],
    "gelu_tanh": lambda t, gelu_tanh: [
        t.S("gelu_tanh", gelu_tanh, t.rn(4), second_order=True),
        t.S("gelu_tanh_backward", GeluTanhBackward.apply, t.rn(3, 4), t.rn(3, 4), second_order=True)],
    "relu": lambda t, relu: [  # Gate, ReLU's backward: a where b > 0, else 0
        t.S("gate", lambda a, b: Gate.apply(a, b), t.rn(3, 4), t.nonzero(3, 4)),
        t.S("gate-broadcast", lambda a, b: Gate.apply(a, b), t.rn(3, 4), t.nonzero(4))],
}

_ALIASES = {"neg": ("negative",), "abs": ("absolute",)}
# (declared below and in activations.py: torch has them in nn.functional, or without Tensor methods)
_ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "relu6", "hardswish", "hardsigmoid", "mish", "selu", "softsign",
                "tanhshrink")
_SPECIAL_ONLY = ("i0e", "i1", "i1e", "erfcx")  # (torch has these in torch.special only)
for _formula in formulas.UNARY:  # neg, abs, exp, ..., relu, ...: one op per table entry, which defines it
    globals()[_formula.name] = _unary(_formula)
    if _formula.name in _SPECIAL_ONLY:
        op(_formula.name, method=False, namespace="special",
           samples=lambda t, name=_formula.name: _unary_samples(t, name))(globals()[_formula.name])
    elif _formula.name not in ("round", *_ACTIVATIONS):  # (round is declared below, with decimals)
        op(_formula.name, aliases=_ALIASES.get(_formula.name, ()), inplace=rebased,
           samples=lambda t, name=_formula.name: _unary_samples(t, name))(globals()[_formula.name])
_round = round  # noqa: F821 (made just above; the public round below adds decimals)

# F.silu and F.gelu (approximate "none" and "tanh") call these
op("_silu", method=False, namespace="nn.functional", samples=lambda t: _unary_samples(t, "silu"))(silu)  # noqa: F821
op("_gelu", method=False, namespace="nn.functional", samples=lambda t: _unary_samples(t, "gelu"))(gelu)  # noqa: F821
op("_gelu_tanh", method=False, namespace="nn.functional",
   samples=lambda t: _unary_samples(t, "gelu_tanh"))(gelu_tanh)  # noqa: F821


@op(inplace=rebased, samples=lambda t: _unary_samples(t, "round") + [
    t.S("round-decimals", lambda x: x.round(decimals=1) * x, t.frac(4) + 0.02)])
def round(x, decimals=0):
    """Round half to even, at ``decimals`` places after the point (before it when negative)."""
    if not decimals:
        return _round(x)
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"round: decimals={decimals} needs a floating point tensor, got {x.dtype.name}")
    if decimals > 0:
        return _round(x * 10.0 ** decimals) / 10.0 ** decimals
    return _round(x / 10.0 ** -decimals) * 10.0 ** -decimals


@op(inplace=rebased, samples=lambda t: [t.S("frac", frac, t.frac(3, 4))])
def frac(x):
    """The fractional part ``x - trunc(x)``, with x's sign; its gradient is the identity."""
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"frac: expected a floating point tensor, got {x.dtype.name}")
    return x - trunc(x)


# ----------------------------------------------------------------------------- binary
def _promote(a, b):
    """dt.result_type for two operands, with the common cases first."""
    da, db = a.dtype, b.dtype
    if da is db:
        return da
    if b._wrapped_number and not a._wrapped_number:
        return da if da.category >= db.category else db
    if a._wrapped_number and not b._wrapped_number:
        return db if db.category >= da.category else da
    return dt.result_type(a, b)


class Binary(Function):
    """Broadcasting ``op(a, b)``; subclasses give ``grad_a(a, b, y, g)`` and ``grad_b`` (None: not
    differentiable in b) before un-broadcasting, each computed only when asked for (``y``, the
    output, is saved only for ops that read it). ``reads`` names the operands each gradient reads:
    only those of the gradients needed are saved, as in torch, so that an operand modified in place
    afterwards (``x.copy_(x * 0.2)`` in an in-place activation) does not spoil a gradient that never reads it."""
    op = ""
    true_division = False
    saves_output = False
    reads = ("ab", "ab")

    @classmethod
    def apply(cls, a, b):
        """Function.apply, with its most common calls flattened: operands of one float dtype on one
        device, of the same shape or b a number (0-d), with no graph to record and no exporter
        watching. That is what forward and binary_raw would do for them, without their layers."""
        if (a._requires_grad or b._requires_grad) and grad_mode.state.enabled or _tracing.active is not None:
            return _function_apply(cls, a, b)
        dtype, layout, device = a.dtype, a._layout, a._storage.device
        if (dtype is dt.float32 or dtype is dt.float64) and b.dtype is dtype and b._storage.device is device:
            b_layout = b._layout
            if b_layout.shape != layout.shape:
                if b_layout.shape:
                    return _function_apply(cls, a, b)
                b_layout = expand(b_layout, layout.shape, cls.op)
            out = new_like_shape(layout.shape, dtype, a)
            kernels.get("binary", device.type)(cls.op, a._storage.buf, layout, b._storage.buf, b_layout,
                                               out._storage.buf, out._layout)
            return out
        return _function_apply(cls, a, b)

    @classmethod
    def forward(cls, ctx, a, b):
        result = _promote(a, b)
        if cls.true_division and not result.is_floating_point:
            result = dt.get_default_dtype()
        y = binary_raw("binary", cls.op, a, b, dt.ARITHMETIC[result], result)
        if ctx._recording:
            need_a, need_b = ctx._needs_input_grad   # (forward's own: only a backward pass narrows them)
            read = (cls.reads[0] if need_a else "") + (cls.reads[1] if need_b else "")
            ctx.save_for_backward(a if "a" in read else None, b if "b" in read else None,
                                  y if cls.saves_output else None)
            ctx.shapes = a.shape, b.shape
        return y

    @classmethod
    def backward(cls, ctx, g):
        a, b, y = ctx.saved_tensors
        need_a, need_b = ctx.needs_input_grad
        return (sum_to(cls.grad_a(a, b, y, g), ctx.shapes[0]) if need_a else None,
                sum_to(cls.grad_b(a, b, y, g), ctx.shapes[1]) if need_b and cls.grad_b is not None else None)


def _check_integer_power(a, b, name="pow"):
    """torch refuses an integer tensor to a negative integer *number*; a tensor of exponents is computed (an integer
    to a negative power is 0, unless it is 1 or -1)."""
    if isinstance(b, (int, np.integer)) and not isinstance(b, bool) and b < 0 and not a.dtype.is_floating_point:
        raise RuntimeError(f"{name}: integers to negative integer powers are not allowed ({a.dtype.name} tensor "
                           f"** {b})")


def _pow_inplace(fn, name):
    dense = binary_inplace(Pow)(fn, name)

    def pow_(self, exponent):
        _check_integer_power(self, exponent, name)
        return dense(self, exponent)
    pow_.__name__ = name
    return pow_


def _pow_grad_a(a, b, y, g):
    return g * (b * a ** (b - 1)).masked_fill(b == 0, 0)  # d(a**0)/da is 0, also at a == 0


def _pow_grad_b(a, b, y, g):
    return g * (y * a.log()).masked_fill((a == 0) & (b >= 0), 0)


def _share(a, b, sign=1):
    """a's share of the gradient of max(a, b) (min with sign -1): 1 unless a loses, 1/2 at a tie
    (a NaN loses to nothing, as in PyTorch)."""
    return 1 - (a * sign < b * sign) - (a == b) * 0.5


def _binary(name, code, grad_a, grad_b, true_division=False, saves_output=False, reads=("ab", "ab")):
    return type(name, (Binary,), {"op": code, "grad_a": staticmethod(grad_a),
                                  "grad_b": None if grad_b is None else staticmethod(grad_b),
                                  "true_division": true_division, "saves_output": saves_output, "reads": reads})


Add = _binary("Add", "add", lambda a, b, y, g: g, lambda a, b, y, g: g, reads=("", ""))
Sub = _binary("Sub", "sub", lambda a, b, y, g: g, lambda a, b, y, g: -g, reads=("", ""))
Mul = _binary("Mul", "mul", lambda a, b, y, g: g * b, lambda a, b, y, g: g * a, reads=("b", "a"))
Div = _binary("Div", "div", lambda a, b, y, g: g / b, lambda a, b, y, g: -g * a / (b * b), true_division=True,
              reads=("b", "ab"))
Pow = _binary("Pow", "pow", _pow_grad_a, _pow_grad_b, saves_output=True)
Maximum = _binary("Maximum", "maximum", lambda a, b, y, g: g * _share(a, b), lambda a, b, y, g: g * _share(b, a))
Minimum = _binary("Minimum", "minimum", lambda a, b, y, g: g * _share(a, b, -1),
                  lambda a, b, y, g: g * _share(b, a, -1))
# g where y > 0, else 0: ReLU's backward in one pass (its own gradient is the same gate of gg)
Gate = _binary("Gate", "gate", lambda a, b, y, g: Gate.apply(g, b), None, reads=("b", ""))
# the activations' backwards (g, x) in one pass; their own gradients: in g, the same backward of gg; in x, g * gg
# times the second derivative (composed: needed only for a second-order gradient)
SiluBackward = _binary("SiluBackward", "silu_backward", lambda a, b, y, g: SiluBackward.apply(g, b),
                       lambda a, b, y, g: g * a * _silu_curvature(b), reads=("b", "ab"))
GeluBackward = _binary("GeluBackward", "gelu_backward", lambda a, b, y, g: GeluBackward.apply(g, b),
                       lambda a, b, y, g: g * a * (2 - b * b) * (b * b * -0.5).exp() * 0.3989422804014327,
                       reads=("b", "ab"))
GeluTanhBackward = _binary("GeluTanhBackward", "gelu_tanh_backward", lambda a, b, y, g: GeluTanhBackward.apply(g, b),
                           lambda a, b, y, g: g * a * _gelu_tanh_curvature(b), reads=("b", "ab"))
silu_backward, gelu_backward, gelu_tanh_backward = SiluBackward.apply, GeluBackward.apply, GeluTanhBackward.apply


def _silu_curvature(x):
    """silu'' = s (1 - s) (2 + x (1 - 2 s)), s = sigmoid(x)."""
    s = sigmoid(x)  # noqa: F821 (made from the table above)
    return s * (1 - s) * (2 + x * (1 - 2 * s))


def _gelu_tanh_curvature(x):
    """gelu_tanh'' = (1 - t^2) (u' - x t u'^2 + 3 k c x^2), t = tanh(u), u = k (x + c x^3), u' = k (1 + 3 c x^2)."""
    k, c = 0.7978845608028654, 0.044715
    t = tanh((x + x * x * x * c) * k)  # noqa: F821 (made from the table above)
    slope = (1 + x * x * (3 * c)) * k
    return (1 - t * t) * (slope - x * t * slope * slope + x * x * (3 * k * c))


FloorDivide = _binary("FloorDivide", "floordiv", lambda a, b, y, g: g * 0, lambda a, b, y, g: g * 0, reads=("", ""))
Remainder = _binary("Remainder", "remainder", lambda a, b, y, g: g, lambda a, b, y, g: -g * (a / b).floor(),
                    reads=("", "ab"))
Atan2 = _binary("Atan2", "atan2", lambda a, b, y, g: g * b / (a * a + b * b),
                lambda a, b, y, g: -g * a / (a * a + b * b), true_division=True)


def binary_inplace(op_cls):
    """The maker of ``x.op_(other)`` for a binary op (see ``registry.op``): straight into x's
    memory when no graph is recorded, else rebased."""
    def make(fn, name):
        def method(self, other, *, alpha=None):
            other = as_operand(other, self) if alpha is None else as_operand(other, self) * alpha
            if not grad_enabled() or not (self._requires_grad or other._requires_grad):
                check_writable(self, name)
                check_no_internal_overlap(self, name)
                dtype, storage = self.dtype, self._storage
                if ((dtype is dt.float32 or dtype is dt.float64) and other.dtype is dtype
                        and other._layout.shape == self._layout.shape and other._storage is not storage
                        and other._storage.device is storage.device):   # (binary_raw's call, without its checks)
                    kernels.get("binary", storage.device.type)(op_cls.op, storage.buf, self._layout,
                                                               other._storage.buf, other._layout, storage.buf,
                                                               self._layout)
                    self._bump_version()
                    return self
                result = self.dtype if other.dtype is self.dtype else dt.result_type(self, other)
                if op_cls.true_division and not result.is_floating_point:
                    result = dt.get_default_dtype()  # int /= int is a float result, as in PyTorch: an error
                if result.category > self.dtype.category:
                    raise RuntimeError(f"{name}: result type {result.name} can't be cast to the desired output "
                                       f"type {self.dtype.name}")
                compute = dt.arithmetic_dtype(self.dtype if not op_cls.true_division else result)
                binary_raw("binary", op_cls.op, self, other, compute, self.dtype, out=self)
                self._bump_version()
                return self
            return assign(self, lambda t: op_cls.apply(t, other), name)
        method.__name__ = name
        return method
    return make


def _integer_division_check(a, b, name):
    """torch raises for an integer fmod by zero (the CUDA kernel would give 0)."""
    if not _promote(a, b).is_floating_point and bool((b == 0).any()):
        raise RuntimeError(f"{name}: ZeroDivisionError (an integer divisor is 0; {a.dtype.name} by {b.dtype.name})")


def _divisor_checked_inplace(op_cls):
    """binary_inplace(op_cls), refusing an integer divisor of 0 before anything is written."""
    def make(fn, name):
        dense = binary_inplace(op_cls)(fn, name)

        def method(self, other):
            _integer_division_check(self, as_operand(other, self), op_cls.op)
            return dense(self, other)
        method.__name__ = name
        return method
    return make


def _binary_entry(cls):
    full_precision = cls.op in ("mul", "div")  # numbers at full precision (see as_operand)

    def fn(a, b):
        if not hasattr(a, "_layout"):
            a = as_operand(a, b, full_precision)
        return cls.apply(a, as_operand(b, a, full_precision))
    fn.__name__ = cls.op
    return fn


def _inplace_mul_on_view(x, w):
    y = x.sin()  # saves x, not y: y may be modified
    y[:, 1].mul_(w)
    return y


def _maximum_samples(t, name, fn):
    a = t.rn(3, 4)
    return [t.S(name, fn, a, a + t.nonzero(3, 4)),
            t.S(f"{name}-broadcast", fn, t.distinct(3, 4), t.distinct(4) + 0.1)]


_sub = _binary_entry(Sub)
mul = op(aliases=("multiply",), inplace=binary_inplace(Mul), samples=lambda t: [
    t.S("mul-broadcast", lambda a, b: a * b, t.rn(2, 3, 4), t.rn(3, 1)),
    t.S("mul-same", lambda a: a * a, t.NC(t.rn(3, 3), "F")),
    t.S("mul-scalar", lambda a: a * -3.0, t.rn(4)),
    t.S("mul-function", lambda a, b: mul(a, b) + a.multiply(2.0), t.rn(3, 4), t.rn(4)),
    t.S("inplace-mul-on-view", _inplace_mul_on_view, t.rn(3, 4), t.rn(3)),
    t.S("inplace-chain-nonleaf", lambda x, w: (x * 1).mul_(w).add_(x).exp_().clamp_(max=20.0), t.rn(3, 4), t.rn(4)),
    t.S("mul", lambda a, b: a * b, t.rn(3, 4), t.rn(4), second_order=True)])(_binary_entry(Mul))
maximum = op(samples=lambda t: _maximum_samples(t, "maximum", maximum))(_binary_entry(Maximum))
minimum = op(samples=lambda t: _maximum_samples(t, "minimum", minimum))(_binary_entry(Minimum))
remainder = op(inplace=binary_inplace(Remainder), samples=lambda t: [
    t.S("remainder", lambda a, b: a % b, (d := t.pos(3, 4)) * t.frac(3, 4), d),
    t.S("remainder-scalar", lambda a: remainder(a, 1.0), t.frac(5))])(_binary_entry(Remainder))
_add = _binary_entry(Add)
_div = _binary_entry(Div)
true_divide = op("true_divide", inplace=binary_inplace(Div), samples=lambda t: [
    t.S("true_divide", true_divide, t.NC(t.rn(4, 3), "F"), t.nonzero(3))])(_div)
_pow = _binary_entry(Pow)
atan2 = op(aliases=("arctan2",), inplace=binary_inplace(Atan2), samples=lambda t: [
    t.S("atan2-broadcast", atan2, t.rn(3, 4), t.nonzero(4)),
    t.S("atan2-noncontig-scalar", lambda y: atan2(y, -0.5), t.NC(t.rn(3, 2), "F")),
    t.S("atan2", atan2, t.rn(3), t.nonzero(3), second_order=True),
])(autocast_op("atan2")(_binary_entry(Atan2)))


# ----------------------------------------------------------------------------- binary math of the table's end
def _copysign_grad_a(a, b, y, g):
    return g * (y / a).masked_fill(a == 0, 0)  # +-1: whether the sign flipped (0 at a == 0, as torch)


def _xlogy_grad_a(a, b, y, g):
    return Xlogy.apply(g, b).masked_fill((a == 0) & (b <= 0), 0)


Fmod = _binary("Fmod", "fmod", lambda a, b, y, g: g, lambda a, b, y, g: -g * div(a, b, rounding_mode="trunc"),
               reads=("", "ab"))
Hypot = _binary("Hypot", "hypot", lambda a, b, y, g: g * a / y, lambda a, b, y, g: g * b / y, true_division=True,
                saves_output=True)
Copysign = _binary("Copysign", "copysign", _copysign_grad_a, lambda a, b, y, g: g * 0, true_division=True,
                   saves_output=True, reads=("a", ""))
Xlogy = _binary("Xlogy", "xlogy", _xlogy_grad_a, lambda a, b, y, g: g * a / b, true_division=True)
Xlog1py = _binary("Xlog1py", "xlog1py", lambda a, b, y, g: Xlog1py.apply(g, b).masked_fill((a == 0) & (b <= -1), 0),
                  lambda a, b, y, g: g * a / (b + 1), true_division=True)
# d/dq zeta(s, q) = -s zeta(s + 1, q); torch has no gradient in s
Zeta = _binary("Zeta", "zeta", None, lambda a, b, y, g: -g * a * Zeta.apply(a + 1, b), true_division=True,
               reads=("", "ab"))


def _fmod_entry(a, b):
    a, b = _operands(a, b)
    _integer_division_check(a, b, "fmod")
    return Fmod.apply(a, b)


fmod = op("fmod", inplace=_divisor_checked_inplace(Fmod), samples=lambda t: [
    t.S("fmod", fmod, (d := t.nonzero(3, 4)) * t.frac(3, 4), d),
    t.S("fmod-scalar", lambda a: a.fmod(-0.7), t.NC(t.frac(3, 2) * -0.7, "F"))
    ])(_fmod_entry)
hypot = op(inplace=binary_inplace(Hypot), samples=lambda t: [
    t.S("hypot", hypot, t.rn(3, 4), t.nonzero(4)),
    t.S("hypot-noncontig", lambda a, b: a.hypot(b), t.NC(t.nonzero(3, 3), "F"), t.rn(3, 3))])(_binary_entry(Hypot))
copysign = op(inplace=binary_inplace(Copysign), samples=lambda t: [
    t.S("copysign", copysign, t.nonzero(3, 4), t.nonzero(4)),
    t.S("copysign-scalar", lambda a: a.copysign(-1.0), t.NC(t.nonzero(3, 2), "F"))])(_binary_entry(Copysign))
xlogy = op(inplace=binary_inplace(Xlogy), samples=lambda t: [
    t.S("xlogy", xlogy, t.rn(3, 4), t.pos(4)),
    t.S("xlogy-scalar-first", lambda b: xlogy(2.0, b), t.NC(t.pos(3, 2), "F"))])(_binary_entry(Xlogy))
xlog1py = op(method=False, namespace="special", samples=lambda t: [
    t.S("xlog1py", xlog1py, t.rn(3, 4), t.uniform(-0.5, 2, 4))])(_binary_entry(Xlog1py))


def _igamma_samples(name):
    def samples(t):
        a = t.uniform(0.5, 3, 3, 4)  # (a constant: torch has no gradient in a)
        return [t.S(name, lambda x: OPS[name].function(t.const(a), x), t.uniform(0.3, 4, 3, 4))]
    return samples


def _no_input_derivative(name):
    def grad(a, b, y, g):
        raise RuntimeError(f"the derivative for '{name}: input' is not implemented (as in torch)")
    return grad


def _incomplete_gamma_slope(a, b, sign):
    """d/dx P(a, x) = x^(a-1) e^-x / Gamma(a) (Q's: its negative)."""
    return (Xlogy.apply(a - 1, b) - b - lgamma(a)).exp() * sign  # noqa: F821 (made from the table above)


Igamma = _binary("Igamma", "igamma", _no_input_derivative("igamma"),
                 lambda a, b, y, g: g * _incomplete_gamma_slope(a, b, 1), true_division=True, reads=("", "ab"))
Igammac = _binary("Igammac", "igammac", _no_input_derivative("igammac"),
                  lambda a, b, y, g: g * _incomplete_gamma_slope(a, b, -1), true_division=True, reads=("", "ab"))
igamma = op(inplace=binary_inplace(Igamma), samples=_igamma_samples("igamma"))(_binary_entry(Igamma))
igammac = op(inplace=binary_inplace(Igammac), samples=_igamma_samples("igammac"))(_binary_entry(Igammac))


def _integer_binary(name):
    """``name(a, b)`` of integer tensors (numbers promote as in arithmetic); floats and bools are refused,
    as torch's."""
    def fn(a, b):
        a, b = _operands(a, b)
        result = _promote(a, b)
        if result.is_floating_point or result is dt.bool_:
            raise RuntimeError(f"{name}: expected integer tensors, got {a.dtype.name} and {b.dtype.name}")
        return binary_raw("binary", name, a, b, dt.ARITHMETIC[result], result)
    fn.__name__ = name
    return fn


gcd = op(inplace=rebased)(_integer_binary("gcd"))
lcm = op(inplace=rebased)(_integer_binary("lcm"))


# torch's gradient: the identity in a (the step is taken as constant), zero in b
NextAfter = _binary("NextAfter", "nextafter", lambda a, b, y, g: g, lambda a, b, y, g: g * 0, reads=("", ""))


@op(inplace=rebased, samples=lambda t: [t.S("nextafter", nextafter, t.rn(3, 4), t.rn(4))])
def nextafter(a, b):
    """The next float after a toward b."""
    a, b = _operands(a, b)
    if not _promote(a, b).is_floating_point:
        raise RuntimeError(f"nextafter: expected floating point tensors, got {a.dtype.name} and {b.dtype.name}")
    return NextAfter.apply(a, b)




def _zeta_samples(t):
    s = t.uniform(1.5, 4, 3, 4)  # (a constant: torch has no gradient in s)
    return [t.S("zeta", lambda q: zeta(t.const(s), q), t.uniform(0.5, 3, 3, 4)),
            t.S("zeta-negative-q", lambda q: zeta(3.0, q), t.uniform(-2.9, -2.1, 4))]


zeta = op(method=False, namespace="special", samples=_zeta_samples)(_binary_entry(Zeta))


def _add_inplace(fn, name):
    """x.add_(other): the binary in-place twin, and a sparse ``other`` added into x by add's rule."""
    dense = binary_inplace(Add)(fn, name)

    def add_(self, other, *, alpha=1):
        if getattr(other, "is_sparse", False):
            return OPS["add"].rules["sparse_input"](self, other, alpha, True)
        return dense(self, other, alpha=None if alpha == 1 else alpha)
    add_.__name__ = name
    return add_


@op(inplace=_add_inplace, samples=lambda t: [
    t.S("add-broadcast", lambda a, b: a + b, t.rn(3, 4), t.rn(4)),
    t.S("add-broadcast-3d-noncontig", lambda a, b: add(a, b, alpha=2), t.rn(2, 1, 3), t.NC(t.rn(4, 3), "F")),
    t.S("add-scalar", lambda a: 2.5 + a, t.rn(3)),
    t.S("add-0d", lambda a, b: a + b, t.rn(), t.rn(2, 3))])
def add(a, b, alpha=1):
    """A sparse COO ``b`` is added by the rule its module attaches (``sparse_input``: dense + sparse
    is dense, as in torch)."""
    if getattr(b, "is_sparse", False):
        return OPS["add"].rules["sparse_input"](a, b, alpha, False)
    return _add(a, b if alpha == 1 else b * alpha)


@op(aliases=("subtract",), inplace=binary_inplace(Sub), samples=lambda t: [
    t.S("sub-broadcast", lambda a, b: a - b, t.rn(3, 1), t.rn(1, 4)),
    t.S("rsub-scalar", lambda a: 1.5 - a, t.NC(t.rn(3, 2), "gap")),
    t.S("sub-alpha", lambda a, b: sub(a, b, alpha=0.5), t.rn(3, 4), t.rn(4))])
def sub(a, b, alpha=1):
    return _sub(a, b if alpha == 1 else b * alpha)



@op(aliases=("divide",), inplace=binary_inplace(Div), samples=lambda t: [
    t.S("div-broadcast", lambda a, b: a / b, t.rn(3, 4), t.nonzero(4)),
    t.S("div-noncontig", lambda a, b: a / b, t.NC(t.rn(3, 3), "F"), t.NC(t.nonzero(3, 3), "neg")),
    t.S("rdiv-scalar", lambda b: 2.0 / b, t.NC(t.nonzero(3, 2), "gap")),  # b.reciprocal() * 2.0, as PyTorch
    t.S("div-trunc", lambda a, b: div(a, b, rounding_mode="trunc"), t.frac(4) * 2, [2.0] * 4),
    t.S("div", lambda a, b: a / b, t.rn(3), t.nonzero(3), second_order=True)])
def div(a, b, rounding_mode=None):
    if rounding_mode is None:
        return _div(a, b)
    if rounding_mode == "floor":
        return floor_divide(a, b)
    if rounding_mode == "trunc":
        q = _div(a, b).trunc()
        result = dt.result_type(*(x for x in (a, b)))
        return q if result.is_floating_point else q.to(result)
    raise ValueError(f"div: expected rounding_mode to be one of None, 'trunc' or 'floor', got '{rounding_mode}'")


@op(inplace=binary_inplace(FloorDivide), samples=lambda t: [
    t.S("floor_divide", lambda a, b: a // b, (d := t.pos(3, 4)) * t.frac(3, 4), d),
    t.S("floor_divide-function", floor_divide, (d := t.pos(4)) * t.frac(4), d)])
def floor_divide(a, b):
    return _binary_entry(FloorDivide)(a, b)


@op(inplace=_pow_inplace, samples=lambda t: [
    t.S("pow-tensors", lambda a, b: a ** b, t.pos(3, 4), t.rn(3, 4)),
    t.S("pow-broadcast", lambda a, b: pow(a, b), t.pos(2, 3), t.rn(3)),
    t.S("pow-scalar-exponent", lambda a: a ** 3, t.rn(3, 2)),
    t.S("pow-scalar-base", lambda b: 2.0 ** b, t.rn(4)),
    t.S("pow", lambda a, b: a ** b, t.pos(3), t.rn(3), second_order=True)])
@autocast_op("pow")
def pow(a, b):
    if hasattr(a, "_layout"):
        _check_integer_power(a, b)
    if type(b) in (int, float) and b == 2 and hasattr(a, "_layout") and a.dtype.is_floating_point:
        return square(a)  # the commonest power (variances, squared errors): one multiply, and no log in backward
    return _pow(a, b)



# ----------------------------------------------------------------------------- comparisons (no grad)
def _compare(name):
    def fn(a, b):
        if not hasattr(a, "_layout"):
            a = as_operand(a, b)
        b = as_operand(b, a)
        compute = dt.compute_dtype(dt.result_type(a, b))
        if name.startswith("logical"):
            compute = dt.bool_
        return binary_raw("compare", name, a, b, compute, dt.bool_)
    fn.__name__ = name
    return fn


eq = op()(_compare("eq"))
ne = op(aliases=("not_equal",))(_compare("ne"))
lt = op(aliases=("less",))(_compare("lt"))
le = op(aliases=("less_equal",))(_compare("le"))
gt = op(aliases=("greater",))(_compare("gt"))
ge = op(aliases=("greater_equal",))(_compare("ge"))
logical_and = op()(_compare("logical_and"))
logical_or = op()(_compare("logical_or"))
logical_xor = op()(_compare("logical_xor"))


@op()
def logical_not(x):
    return eq(x, False) if x.dtype is dt.bool_ else eq(x, 0)


# ----------------------------------------------------------------------------- bitwise (integers, bool)
def _bitwise(name, logical=None):
    """``name(a, b)`` as torch's: on integer tensors (numbers promote as in arithmetic); bool with bool is
    ``logical`` (shifts have none: torch refuses bool shifts); floats are refused (NotImplementedError, as torch)."""
    def fn(a, b):
        if not hasattr(a, "_layout"):
            a = as_operand(a, b)
        b = as_operand(b, a)
        result = _promote(a, b)
        if result.is_floating_point or (result is dt.bool_ and logical is None):
            raise NotImplementedError(f"{name}: not implemented for {result.name} tensors (it takes integer"
                                      f"{' and bool' if logical else ''} tensors)")
        if result is dt.bool_:
            return logical(a, b)
        return binary_raw("binary", name, a, b, dt.ARITHMETIC[result], result)
    fn.__name__ = name
    return fn


bitwise_and = op(inplace=rebased)(_bitwise("bitwise_and", logical_and))
bitwise_or = op(inplace=rebased)(_bitwise("bitwise_or", logical_or))
bitwise_xor = op(inplace=rebased)(_bitwise("bitwise_xor", logical_xor))
bitwise_left_shift = op(inplace=rebased)(_bitwise("bitwise_left_shift"))
bitwise_right_shift = op(inplace=rebased)(_bitwise("bitwise_right_shift"))


@op(inplace=rebased)
def bitwise_not(x):
    if x.dtype.is_floating_point:
        raise NotImplementedError(f"bitwise_not: not implemented for {x.dtype.name} tensors (it takes integer and "
                                  f"bool tensors)")
    return logical_not(x) if x.dtype is dt.bool_ else bitwise_xor(x, -1)


@op()
def isnan(x):
    return ne(x, x)


@op()
def isinf(x):
    return abs(x) == math.inf if x.dtype.is_floating_point else x != x


@op()
def isfinite(x):
    return logical_not(isnan(x) | isinf(x)) if x.dtype.is_floating_point else x == x


# ----------------------------------------------------------------------------- where / clamp
class Where(Function):
    @staticmethod
    def forward(ctx, cond, a, b):
        check_devices("where", cond, a, b)
        if cond.dtype is not dt.bool_:
            raise TypeError(f"where: expected condition to be a bool tensor, got {cond.dtype}")
        result = dt.result_type(a, b)
        compute = dt.compute_dtype(result)
        shape, (cl, _, _) = broadcast_layouts("where", cond, a, b)
        ac, bc = cast(a, compute), cast(b, compute)
        al, bl = expand(ac._layout, shape), expand(bc._layout, shape)
        out = new_like_shape(shape, compute, a)
        kernel("where", a)(buf(cond), cl, buf(ac), al, buf(bc), bl, buf(out), out._layout)
        ctx.save_for_backward(cond)
        ctx.shapes = (a.shape, b.shape)
        return cast(out, result)

    @staticmethod
    def backward(ctx, g):
        (cond,) = ctx.saved_tensors
        zero = g.new_zeros(())
        ga = sum_to(where(cond, g, zero), ctx.shapes[0]) if ctx.needs_input_grad[1] else None
        gb = sum_to(where(cond, zero, g), ctx.shapes[1]) if ctx.needs_input_grad[2] else None
        return None, ga, gb


def _where_method(self, condition, other):
    """x.where(condition, y) is where(condition, x, y), as in PyTorch."""
    return where(condition, self, other)


_where_method.__name__ = _where_method.__qualname__ = "where"


def _where_samples(t):
    mask = t.rn(3, 4) > 0
    return [t.S("where-broadcast", lambda a, b: where(t.const(mask), a, b), t.rn(3, 4), t.rn(4)),
            t.S("where-scalar", lambda a: where(t.const([[True, False, True]]), a, 0.0), t.NC(t.rn(2, 3), "F"))]


@op(method=_where_method, samples=_where_samples)
def where(cond, a=None, b=None):
    if a is None and b is None:
        return cond.nonzero(as_tuple=True)  # (the one-argument form is nonzero's, documented as such)
    like = cond if not hasattr(a, "_layout") and not hasattr(b, "_layout") else (a if hasattr(a, "_layout") else b)
    a, b = as_operand(a, like), as_operand(b, like)
    return Where.apply(cond, a, b)


class Clamp(Function):
    @staticmethod
    def forward(ctx, x, lo, hi):
        y = x
        if lo is not None:
            y = binary_raw("binary", "maximum", y, lo, dt.compute_dtype(dt.result_type(x, lo)), dt.result_type(x, lo))
        if hi is not None:
            y = binary_raw("binary", "minimum", y, hi, dt.compute_dtype(dt.result_type(y, hi)), dt.result_type(y, hi))
        ctx.save_for_backward(x, lo, hi)
        return y if y is not x else x.clone()

    @staticmethod
    def backward(ctx, g):
        x, lo, hi = ctx.saved_tensors
        keep = None
        if lo is not None:
            keep = x >= lo
        if hi is not None:
            keep = (x <= hi) if keep is None else keep & (x <= hi)
        gx = sum_to(g * keep, x.shape) if ctx.needs_input_grad[0] else None
        # where min > max the result is max (as torch's), so max takes all of the gradient there
        to_lo, to_hi = (x < lo) if lo is not None else None, (x > hi) if hi is not None else None
        if lo is not None and hi is not None:
            to_lo, to_hi = to_lo & (lo < hi), to_hi | (hi < lo)
        glo = sum_to(g * to_lo, lo.shape) if lo is not None and ctx.needs_input_grad[1] else None
        ghi = sum_to(g * to_hi, hi.shape) if hi is not None and ctx.needs_input_grad[2] else None
        return gx, glo, ghi


def _clamp_samples(t):
    lo = t.rn(4) - 1
    return [t.S("clamp-scalars", lambda x: x.clamp(-0.5, 0.5), t.avoid((3, 4), [-0.5, 0.5])),
            t.S("clamp-min-tensor", lambda x, lo: clamp(x, min=lo), lo + t.nonzero(3, 4), lo),
            t.S("clamp-tensors", lambda x, lo, hi: clamp(x, lo, hi), lo + t.avoid((3, 4), [0.0, 1.0], -1, 2), lo,
                lo + 1),
            t.S("clamp-max-only", lambda x: x.clamp(max=0.3), t.NC(t.avoid((4, 3), [0.3]), "F"))]


@op(aliases=("clip",), inplace=rebased, samples=_clamp_samples)
def clamp(x, min=None, max=None):
    if min is None and max is None:
        raise RuntimeError("clamp: at least one of 'min' or 'max' must not be None")
    lo = None if min is None else as_operand(min, x)
    hi = None if max is None else as_operand(max, x)
    return Clamp.apply(x, lo, hi)



@op(inplace=rebased, samples=lambda t: [  # clamp_max too
    t.S("clamp_min-clamp_max", lambda x: clamp_min(x, -0.5) + x.clamp_max(0.5), t.avoid((3, 4), [-0.5, 0.5]))])
def clamp_min(x, min):
    return clamp(x, min=min)


@op(inplace=rebased)
def clamp_max(x, max):
    return clamp(x, max=max)


# ----------------------------------------------------------------------------- composites
def _operands(a, b):
    if not hasattr(a, "_layout"):
        a = as_operand(a, b)
    return a, as_operand(b, a)


@op(samples=lambda t: [  # fmin too
    t.S("fmax-fmin", lambda a, b: fmax(a, b) + b.fmin(a) * 2, t.distinct(3, 4), t.distinct(4) + 0.1)])
def fmax(a, b):
    """maximum that ignores NaN (NaN only when both are); ties send the gradient to ``a``."""
    a, b = _operands(a, b)
    return where((a >= b) | isnan(b), a, b)


@op()
def fmin(a, b):
    a, b = _operands(a, b)
    return where((a <= b) | isnan(b), a, b)


@op(inplace=rebased, samples=lambda t: [
    t.S("lerp-scalar-weights", lambda s, e: s.lerp(e, 0.3) + lerp(s, e, 0.8), t.rn(3, 4), t.rn(4)),
    t.S("lerp-tensor-weight", lerp, t.rn(3, 4), t.rn(3, 4), t.avoid((3, 4), [-0.5, 0.5])),
    t.S("inplace-twins-nonleaf", lambda x, w: (x * 1).sin_().lerp_(w, 0.25).addcmul_(w, x).atan2_(w).square_(),
        t.rn(3, 4), t.pos(4))])
def lerp(start, end, weight):
    """start + weight * (end - start), computed from the nearer end so that weight 1 gives ``end``."""
    end = as_operand(end, start)
    diff = end - start
    if not hasattr(weight, "_layout"):
        return start + weight * diff if -0.5 < weight < 0.5 else end - diff * (1 - weight)
    return where(weight.abs() < 0.5, start + weight * diff, end - diff * (1 - weight))


@op(inplace=rebased, samples=lambda t: [  # addcdiv too
    t.S("addcmul-addcdiv", lambda x, a, b: addcmul(x, a, b, value=2) + x.addcdiv(a, b, value=-0.5), t.rn(3, 4),
        t.rn(4), t.nonzero(3, 4))])
@autocast_op("addcmul")
def addcmul(x, tensor1, tensor2, value=1):
    return x + tensor1 * tensor2 * value if value != 1 else x + tensor1 * tensor2


@op(inplace=rebased)
@autocast_op("addcdiv")
def addcdiv(x, tensor1, tensor2, value=1):
    return x + tensor1 / tensor2 * value if value != 1 else x + tensor1 / tensor2


@op(inplace=rebased, samples=lambda t: [
    t.S("nan_to_num", lambda x: nan_to_num(x, posinf=2.0), [[1.5, math.nan], [math.inf, -0.3]])])
def nan_to_num(x, nan=0.0, posinf=None, neginf=None):
    """NaN and infinities replaced by finite values (by default the dtype's extremes); the gradient
    passes where x is finite."""
    if not x.dtype.is_floating_point:
        return x.clone()
    info = finfo(x.dtype)
    out = where(isnan(x), nan, x)
    out = where(x == math.inf, float(info.max) if posinf is None else posinf, out)
    return where(x == -math.inf, float(info.min) if neginf is None else neginf, out)


class LogAddExp(Function):
    """log(exp(a) + exp(b)) without overflow."""

    @staticmethod
    def forward(ctx, a, b):
        check_devices("logaddexp", a, b)
        result = _promote(a, b)
        if not result.is_floating_point:
            result = dt.get_default_dtype()
        a, b = cast(a, result), cast(b, result)
        top = maximum(a, b)
        out = top + (-(a - b).abs()).exp().log1p()
        ctx.save_for_backward(a, b)
        return where(isinf(top) & (a == b), top, out)  # inf + inf is inf, not inf - inf's NaN

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        ga = sum_to(g * (a - b).sigmoid(), a.shape) if ctx.needs_input_grad[0] else None
        gb = sum_to(g * (b - a).sigmoid(), b.shape) if ctx.needs_input_grad[1] else None
        return ga, gb


@op(samples=lambda t: [
    t.S("logaddexp-broadcast", logaddexp, t.rn(3, 4), t.NC(t.rn(4), "neg")),
    t.S("logaddexp-far-apart", lambda a, b: a.logaddexp(b * 30), t.rn(5), t.rn(5)),
    t.S("logaddexp", logaddexp, t.rn(2, 3), t.rn(3), second_order=True)])
@autocast_op("logaddexp")
def logaddexp(a, b):
    return LogAddExp.apply(*_operands(a, b))


@op()
def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """|a - b| <= atol + rtol * |b| for finite values; equal infinities are close too."""
    if rtol < 0 or atol < 0:
        raise RuntimeError(f"isclose: rtol ({rtol}) and atol ({atol}) must be non-negative")
    a, b = (t.detach() for t in _operands(a, b))
    result = dt.result_type(a, b)
    if not result.is_floating_point:
        result = dt.float64
    a, b = a.to(result), b.to(result)
    error = (a - b).abs()
    close = (a == b) | (isfinite(error) & (error <= atol + rtol * b.abs()))
    return close | (isnan(a) & isnan(b)) if equal_nan else close


@op()
def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False) -> bool:
    return bool(isclose(a, b, rtol, atol, equal_nan).all())


@op()
def equal(a, b) -> bool:
    """Same shape and the same values."""
    return tuple(a.shape) == tuple(b.shape) and bool((a == b).all())


for _formula in formulas.UNARY:  # now that every op of this module exists
    _check_grad_calls(globals()[_formula.name.capitalize()])
