"""Every elementwise op's math, once for both devices: the one file to edit to add or change one.

Each entry is a formula in the language of ``expr.py``. From this table ``generate.py`` writes the
op codes (Numba constants and a CUDA header) and each device's op switches, and
``minidl/ops/elementwise.py`` makes the unary ops' autograd Functions, public functions and
Tensor methods. An op's code is its position in its family, so the order here is the order of
the codes.

- ``float_only``: the op is defined for floats only. Its integer inputs are computed in the
  default float dtype by the op layer (as in PyTorch), so an integer never reaches the formula;
  the kernels give integers back unchanged, which keeps every kernel's types exact.
- ``int_only``: the op is defined for integers only (bitwise ops). The op layer refuses floats (as
  PyTorch does); the library functions give a float back unchanged, so float kernels still type.
- ``grad`` (unary ops): the input's gradient from ``x`` (the input), ``y`` (the output) and ``g``
  (the output's gradient), evaluated with Tensor ops, so it can be differentiated again. A call
  there names one of minidl's elementwise ops (or ``gate``), or, on plain numbers, a function of
  Python's ``math``. Backward saves only the tensors the gradient reads.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import expr


@dataclass(frozen=True)
class Formula:
    name: str
    text: str
    params: tuple = ("x",)
    float_only: bool = False
    grad: str = None
    doc: str = ""
    int_only: bool = False


def unary(name, text, grad, float_only=True, doc=""):
    return Formula(name, text, ("x",), float_only, grad, doc)


def binary(name, text, float_only=False, doc="", int_only=False):
    return Formula(name, text, ("x", "y"), float_only, None, doc, int_only)


# Named pieces that formulas call (not ops of their own).
HELPERS = (
    Formula("logistic_of_exp", "e / (1 + e)", ("e",), doc="sigmoid(x) from e = exp(x), for x < 0"),
    Formula("silu_slope", "s * (1 + x * (1 - s))", ("x", "s"), doc="silu's derivative at x, from s = sigmoid(x)"),
    Formula("gelu_tanh_slope", "(1 + t) * 0.5 + x * 0.5 * (1 - t * t) * ((1 + x * x * 0.134145) * 0.7978845608028654)",
            ("x", "t"), doc="gelu_tanh's derivative at x, from t = tanh(sqrt(2 / pi) * (x + 0.044715 x^3))"),
    Formula("divided_by_zero", "nan if x != x or x == 0 else copysign(inf, x) * copysign(1.0, y)", ("x", "y"),
            doc="x / y for y == 0 (either sign), as IEEE says"),
)

UNARY = (
    unary("neg", "-x", "-g", float_only=False),
    unary("abs", "abs(x)", "g * sign(x)", float_only=False),
    unary("sign", "(x > 0) - (x < 0)", "g * 0", float_only=False, doc="0 for NaN, as in PyTorch"),
    unary("exp", "exp(x)", "g * y"),
    unary("log", "log(x) if x > 0 else (-inf if x == 0 else nan)", "g / x"),
    unary("log1p", "log1p(x) if x > -1 else (-inf if x == -1 else nan)", "g / (x + 1)"),
    unary("expm1", "expm1(x)", "g * (y + 1)"),
    unary("sqrt", "sqrt(x) if x >= 0 else nan", "g / (y * 2)"),
    unary("rsqrt", "1 / sqrt(x) if x > 0 else (inf if x == 0 else nan)", "g * y * y * y * -0.5"),
    unary("reciprocal", "1 / x if x != 0 else copysign(inf, x)", "-g * y * y"),
    unary("sin", "sin(x)", "g * cos(x)"),
    unary("cos", "cos(x)", "-g * sin(x)"),
    unary("tan", "tan(x)", "g * (y * y + 1)"),
    unary("tanh", "tanh(x)", "g * (1 - y * y)"),
    unary("sigmoid", "1 / (1 + exp(-x)) if x >= 0 else logistic_of_exp(exp(x))", "g * y * (1 - y)",
          doc="exp of a negative number only, so neither side overflows"),
    unary("relu", "x if not x < 0 else 0", "gate(g, y)", float_only=False,
          doc="keeps NaN; +0 for negatives and -inf (x * 0 would give -0 and NaN)"),
    unary("erf", "erf(x)", "g * exp(-x * x) * (2 / sqrt(pi))"),
    unary("floor", "floor(x)", "g * 0", float_only=False),
    unary("ceil", "ceil(x)", "g * 0", float_only=False),
    unary("round", "rint(x)", "g * 0", float_only=False, doc="half to even"),
    unary("trunc", "trunc(x)", "g * 0", float_only=False),
    unary("square", "x * x", "g * x * 2", float_only=False),
    # activations PyTorch runs as one kernel, with its formulas (so its NaNs and signed zeros at the extremes)
    unary("silu", "x / (1 + exp(-x))", "silu_backward(g, x)", doc="x * sigmoid(x)"),
    unary("gelu", "x * 0.5 * (1 + erf(x * 0.7071067811865476))", "gelu_backward(g, x)",
          doc="x * Phi(x), Phi the standard normal CDF (erf form)"),
    unary("gelu_tanh", "x * 0.5 * (1 + tanh((x + x * x * x * 0.044715) * 0.7978845608028654))",
          "gelu_tanh_backward(g, x)", doc="GELU with Phi(x) ~ (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))) / 2"),
    # torch.nn.functional's activations without parameters: torch's kernels' formulas, and their gradients as
    # torch's backward kernels choose them at the kinks and at NaN (its vectorised loops': its scalar tail differs)
    unary("relu6", "0 if x < 0 else (6 if x > 6 else x)", "(g if x < 6 else 0) if x > 0 else 0", float_only=False,
          doc="hardtanh(x, 0, 6): clamp's values (keeps -0 and NaN)"),
    unary("hardswish", "x * minimum(maximum(x + 3, 0.0), 6.0) / 6",
          "0 if x <= -3 else (g if x >= 3 else g * (x / 3 + 0.5))",
          doc="x * relu6(x + 3) / 6"),
    unary("hardsigmoid", "minimum(maximum(x + 3, 0.0), 6.0) / 6",
          "(g * 0.1666666716337204 if x < 3 else 0) if x > -3 else 0",
          doc="relu6(x + 3) / 6; the slope is torch's, 1/6 rounded to float32"),
    unary("mish", "x * tanh(log1p(exp(x)))",
          "g * (tanh(log1p(exp(x))) + x * sigmoid(x) * (1 - square(tanh(log1p(exp(x))))))",
          doc="x * tanh(softplus(x))"),
    unary("selu", "x * 1.0507009873554805 if x > 0 else expm1(x) * 1.7580993408473766",
          "g * 1.0507009873554805 if x > 0 else g * 1.7580993408473766 * exp(x)",
          doc="scale * elu(x, alpha), scale * alpha = 1.7580993408473766 (torch's constants, multiplied in float64)"),
    unary("softsign", "x / (1 + abs(x))", "g / (1 + abs(x)) - g * (y / (1 + abs(x))) * sign(x)",
          doc="its gradient as torch's autograd composes it (NaN at infinities, as torch's)"),
    unary("tanhshrink", "x - tanh(x)", "g - g * (1 - square(tanh(x)))"),
    # inverse trigonometric and hyperbolic functions, logarithms in other bases: NaN outside their domains
    unary("atan", "atan(x)", "g / (x * x + 1)"),
    unary("asin", "asin(x) if (x >= -1 and x <= 1) else nan", "g / sqrt(1 - x * x)"),
    unary("acos", "acos(x) if (x >= -1 and x <= 1) else nan", "-g / sqrt(1 - x * x)"),
    unary("sinh", "sinh(x)", "g * cosh(x)"),
    unary("cosh", "cosh(x)", "g * sinh(x)"),
    unary("asinh", "asinh(x)", "g / sqrt(x * x + 1)"),
    unary("acosh", "acosh(x) if x >= 1 else nan", "g / (sqrt(x - 1) * sqrt(x + 1))"),
    unary("atanh", "atanh(x) if (x > -1 and x < 1) else (copysign(inf, x) if (x == 1 or x == -1) else nan)",
          "g / (1 - x * x)"),
    unary("erfc", "erfc(x)", "g * exp(-x * x) * (-2 / sqrt(pi))"),
    unary("log2", "log2(x) if x > 0 else (-inf if x == 0 else nan)", "g / (x * 0.6931471805599453)"),
    unary("log10", "log10(x) if x > 0 else (-inf if x == 0 else nan)", "g / (x * 2.302585092994046)"),
    unary("exp2", "exp(x * 0.6931471805599453)", "g * y * 0.6931471805599453", doc="2 ** x"),
    unary("deg2rad", "x * 0.017453292519943295", "g * 0.017453292519943295"),
    unary("rad2deg", "x * 57.29577951308232", "g * 57.29577951308232"),
    # special functions (their methods: minidl/kernels/cpu/jit/scalar_math.py)
    unary("erfinv", "erfinv(x)", "g * exp(y * y) * 0.886226925452758",
          doc="the inverse of erf; d/dx: sqrt(pi)/2 e^(y^2)"),
    unary("lgamma", "lgamma(x)", "g * digamma(x)", doc="log |Gamma(x)|"),
    unary("digamma", "digamma(x)", "g * zeta(2, x)",
          doc="d/dx log Gamma(x); its derivative, trigamma, is zeta(2, x)"),
    unary("i0", "i0(x)", "g * i1(x)", doc="the modified Bessel function of order 0"),
    unary("i0e", "i0e(x)", "g * (i1e(x) - sign(x) * y)", doc="i0(x) exp(-|x|)"),
    unary("i1", "i1(x)", "g * (0.5 if x == 0 else i0(x) - y / x)", doc="the modified Bessel function of order 1"),
    unary("i1e", "i1e(x)", "g * (0.5 if x == 0 else i0e(x) - y * (sign(x) + 1 / x))", doc="i1(x) exp(-|x|)"),
    unary("erfcx", "erfcx(x)", "g * (x * y * 2 - 1.1283791670955126)", doc="exp(x^2) erfc(x)"),
)

BINARY = (
    binary("add", "x + y"),
    binary("sub", "x - y"),
    binary("mul", "x * y"),
    binary("div", "x / y if y != 0 else divided_by_zero(x, y)", float_only=True,
           doc="true division: integer operands are computed in floating point by the op layer"),
    binary("floordiv", "floordiv(x, y)"),
    binary("remainder", "remainder(x, y)"),
    binary("pow", "pow(x, y)"),
    binary("maximum", "x if (x >= y or x != x) else y", doc="propagates NaN"),
    binary("minimum", "x if (x <= y or x != x) else y", doc="propagates NaN"),
    binary("gate", "x if y > 0 else x * 0", doc="x where y > 0, else 0: ReLU's backward (g, y) in one pass"),
    binary("atan2", "atan2(x, y)", float_only=True),
    # the activations' backwards (g, input) in one pass, as torch's kernels compute them
    binary("silu_backward", "x * silu_slope(y, sigmoid(y))", float_only=True),
    binary("gelu_backward", "x * ((1 + erf(y * 0.7071067811865476)) * 0.5"
           " + y * (exp(y * y * -0.5) * 0.3989422804014327))", float_only=True),
    binary("gelu_tanh_backward", "x * gelu_tanh_slope(y, tanh((y + y * y * y * 0.044715) * 0.7978845608028654))",
           float_only=True),
    binary("bitwise_and", "bitand(x, y)", int_only=True),
    binary("bitwise_or", "bitor(x, y)", int_only=True),
    binary("bitwise_xor", "bitxor(x, y)", int_only=True),
    binary("bitwise_left_shift", "shl(x, y)", int_only=True, doc="0 for a shift below 0 or beyond 63, as in PyTorch"),
    binary("bitwise_right_shift", "shr(x, y)", int_only=True,
           doc="arithmetic; a shift below 0 or beyond 63 leaves the sign (0 or -1), as in PyTorch"),
    binary("fmod", "fmod(x, y)", doc="C's remainder: the sign of x"),
    binary("hypot", "hypot(x, y)", float_only=True),
    binary("copysign", "copysign(x, y)", float_only=True),
    binary("xlogy", "nan if y != y else (0.0 if x == 0 else x * (log(y) if y > 0 else (-inf if y == 0 else nan)))",
           float_only=True, doc="x log y, 0 where x == 0 unless y is NaN"),
    binary("xlog1py",
           "nan if y != y else (0.0 if x == 0 else x * (log1p(y) if y > -1 else (-inf if y == -1 else nan)))",
           float_only=True, doc="x log(1 + y), 0 where x == 0 unless y is NaN"),
    binary("zeta", "zeta(x, y)", float_only=True, doc="Hurwitz's zeta of x (the exponent) at y"),
    binary("nextafter", "nextafter(x, y)", float_only=True, doc="the next float after x toward y"),
    binary("gcd", "gcd(x, y)", int_only=True),
    binary("lcm", "abs(floordiv(x, gcd(x, y)) * y) if gcd(x, y) != 0 else 0", int_only=True),
    binary("igamma", "igamma(x, y)", float_only=True, doc="the regularized lower incomplete gamma function P(x, y)"),
    binary("igammac", "igammac(x, y)", float_only=True, doc="the regularized upper one, Q(x, y) = 1 - P(x, y)"),
)

COMPARE = (  # bool results
    binary("eq", "x == y"),
    binary("ne", "x != y"),
    binary("lt", "x < y"),
    binary("le", "x <= y"),
    binary("gt", "x > y"),
    binary("ge", "x >= y"),
    binary("logical_and", "bool(x) and bool(y)"),
    binary("logical_or", "bool(x) or bool(y)"),
    binary("logical_xor", "bool(x) != bool(y)"),
)

# Families whose kernels are written by hand but switch on an op code all the same.
REDUCE = ("sum", "prod", "max", "min")
ARG_REDUCE = ("argmax", "argmin")
SCAN = ("cumsum", "cumprod")
RANDOM = ("uniform", "normal", "integers")

FAMILIES = {"unary": UNARY, "binary": BINARY, "compare": COMPARE}
CODED = {"unary": tuple(f.name for f in UNARY), "binary": tuple(f.name for f in BINARY),
         "compare": tuple(f.name for f in COMPARE), "reduce": REDUCE, "arg_reduce": ARG_REDUCE, "scan": SCAN,
         "random": RANDOM}


def callable_formulas() -> dict:
    """name -> formula, for every formula another may call (helpers first, then the ops)."""
    found = {}
    for f in (*HELPERS, *UNARY, *BINARY, *COMPARE):
        found.setdefault(f.name, f)
    return found


def _check_integer_safe(f, callable_names, caller=None):
    """A formula that integers reach (not float-only) must do integer math only: Numba would send
    int64 values through float64, and CUDA would truncate a float number to 0."""
    tree = expr.parse(f.text, f.params, callable_names, where=f.name)
    found = expr.float_math(tree)
    if found:
        raise expr.FormulaError(f"{caller or f.name}: integers reach it (it is not float_only), but "
                                f"{'its call of ' + f.name + ' uses' if caller else 'it uses'} {found}")
    for node in expr.ast.walk(tree):
        if isinstance(node, expr.ast.Call) and node.func.id not in expr.MATH:
            _check_integer_safe(callable_names[node.func.id], callable_names, caller or f.name)


def _check_table():
    for family, names in CODED.items():
        if len(set(names)) != len(names):
            raise expr.FormulaError(f"{family}: an op name appears twice in {names}")
    callable_names = callable_formulas()
    for f in callable_names.values():
        expr.parse(f.text, f.params, callable_names, where=f.name)
    for f in (*UNARY, *BINARY):
        if not f.float_only:
            _check_integer_safe(f, callable_names)
    for f in UNARY:
        expr.parse(f.grad, ("x", "y", "g"), [n for n in callable_names if n not in expr.MATH], where=f"{f.name}'s grad")


_check_table()
