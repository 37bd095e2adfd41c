"""The formula table (minidl/formulas/table.py): its language, the generated files, op codes, and
the CPU kernels against the formulas themselves, evaluated by a plain-Python reading of the same
text (the ops' math is checked against numpy and PyTorch in the op tests)."""
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import minidl as md
from minidl import formulas, kernels
from minidl.formulas import expr, generate

SPECIALS = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.5, -3.0, 7.0, 1e-300, 700.0, -700.0, math.inf, -math.inf, math.nan]
INTEGERS = [0, 1, -1, 2, -3, 7, 10, -10, 2 ** 31]



def _int64(v):
    """v wrapped to int64, as the kernels' integers are."""
    return (v + 2 ** 63) % 2 ** 64 - 2 ** 63


def _torch_function(name):
    """torch's function ``name`` (dotted: torch.special's) on float64 numbers, as a number."""
    import torch
    function = torch
    for part in name.split("."):
        function = getattr(function, part)
    return lambda *values: function(*(torch.tensor(v, dtype=torch.float64) for v in values)).item()


def _incomplete_gamma(a, x, upper):
    """The regularized incomplete gamma function by mpmath; torch's values at the edges (NaN, 0, inf)."""
    if not (0 < a < math.inf and 0 < x < math.inf):
        return _torch_function("igammac" if upper else "igamma")(a, x)
    import mpmath
    with mpmath.workdps(40):
        return float(mpmath.gammainc(a, x, mpmath.inf, regularized=True) if upper else
                     mpmath.gammainc(a, 0, x, regularized=True))


# the library's meaning per dtype, written with numpy's float64 functions (PyTorch's for the special functions)
LIBRARY = {"exp": np.exp, "log": np.log, "log1p": np.log1p, "expm1": np.expm1, "sqrt": np.sqrt, "sin": np.sin,
           "cos": np.cos, "tan": np.tan, "tanh": np.tanh, "erf": lambda v: math.erf(v), "floor": np.floor,
           "ceil": np.ceil, "rint": np.rint, "trunc": np.trunc, "abs": abs, "bool": bool, "copysign": np.copysign,
           "floordiv": np.floor_divide, "remainder": np.remainder, "atan2": np.arctan2,
           "pow": lambda x, y: np.power(np.array([x]), np.array([y]))[0],  # (numpy's scalar power has (-inf) ** 0.5 NaN)
           "bitand": lambda x, y: x & y, "bitor": lambda x, y: x | y, "bitxor": lambda x, y: x ^ y,
           # shifts beyond the width: 0 to the left, the sign to the right (Python's ints have no width)
           "shl": lambda x, y: int(np.left_shift(np.int64(x), y)) if 0 <= y <= 63 else 0,
           "shr": lambda x, y: x >> (y if 0 <= y <= 63 else 63),
           "atan": np.arctan, "asin": np.arcsin, "acos": np.arccos, "sinh": np.sinh, "cosh": np.cosh,
           "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "erfc": lambda v: math.erfc(v),
           "log2": np.log2, "log10": np.log10, "hypot": np.hypot, "nextafter": np.nextafter,
           "gcd": lambda x, y: _int64(math.gcd(x, y)),
           "fmod": lambda x, y: np.fmod(x, y) if isinstance(x, float) else int(np.fmod(x, y)),
           # the special functions as PyTorch computes them (its own methods: Cephes' and others)
           **{name: _torch_function(name) for name in ("lgamma", "digamma", "erfinv", "i0")},
           **{name: _torch_function("special." + name) for name in ("i1", "i0e", "i1e", "erfcx", "zeta")},
           "igamma": lambda a, x: _incomplete_gamma(a, x, False), "igammac": lambda a, x: _incomplete_gamma(a, x, True)}
# formulas held to less than 1e-14 (rtol, atol): the incomplete gamma's factor x^a e^-x / Gamma(a), the exp of a
# difference of large logarithms, keeps a few digits less for large a or x (here 700), and Q = 1 - P where P's
# series is used is accurate to 1e-13 absolutely, not relatively (Q(1e-300, 0.5) ~ 6e-301 gives 0)
TOLERANCE = {"igamma": (1e-11, 1e-13), "igammac": (1e-11, 1e-13)}


def _reference(formula, *values):
    """The formula's value for Python numbers, read from its text by expr.evaluate (formula calls
    followed by name; a comparison is a Python bool, which counts as 0 or 1, as in both kernels)."""
    named = formulas.table.callable_formulas()

    def call(name, args):
        if name in LIBRARY:
            got = LIBRARY[name](*args)
            return got.item() if hasattr(got, "item") else got
        return _reference(named[name], *args)
    tree = expr.parse(formula.text, formula.params, named)
    with np.errstate(all="ignore"):
        return expr.evaluate(tree, dict(zip(formula.params, values)), call)


def test_the_generated_files_are_current():
    assert generate.stale() == [], "run: python -m minidl.formulas.generate"


@pytest.mark.parametrize("formula", formulas.UNARY, ids=lambda f: f.name)
def test_unary_kernels_compute_their_formula(formula):
    x = np.array(SPECIALS)
    got = getattr(md.ops.elementwise, formula.name)(md.tensor(x)).numpy()
    want = np.array([_reference(formula, float(v)) for v in x], dtype=np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=0, equal_nan=True)
    assert (np.signbit(got) == np.signbit(want))[want == 0].all()  # -0.0 where the formula says so
    if not formula.float_only:
        i = np.array(INTEGERS)
        got = getattr(md.ops.elementwise, formula.name)(md.tensor(i)).numpy()
        assert got.tolist() == [int(_reference(formula, int(v))) for v in i]


BINARY_CALLS = {"add": md.add, "sub": md.sub, "mul": md.mul, "div": md.div, "floordiv": md.floor_divide,
                "remainder": md.remainder, "pow": md.pow, "maximum": md.maximum, "minimum": md.minimum,
                "gate": lambda a, b: md.ops.elementwise.Gate.apply(a, b), "atan2": md.atan2,
                "silu_backward": md.ops.elementwise.silu_backward, "gelu_backward": md.ops.elementwise.gelu_backward,
                "gelu_tanh_backward": md.ops.elementwise.gelu_tanh_backward,
                "bitwise_and": md.bitwise_and, "bitwise_or": md.bitwise_or, "bitwise_xor": md.bitwise_xor,
                "bitwise_left_shift": md.bitwise_left_shift, "bitwise_right_shift": md.bitwise_right_shift,
                "fmod": md.fmod, "hypot": md.hypot, "copysign": md.copysign, "xlogy": md.xlogy,
                "xlog1py": md.special.xlog1py, "zeta": md.special.zeta, "nextafter": md.nextafter, "gcd": md.gcd,
                "lcm": md.lcm, "igamma": md.igamma, "igammac": md.igammac}


@pytest.mark.parametrize("formula", formulas.BINARY, ids=lambda f: f.name)
def test_binary_kernels_compute_their_formula(formula):
    if not formula.int_only:  # (the op layer refuses floats for the others)
        a, b = (np.array(v) for v in zip(*[(p, q) for p in SPECIALS for q in SPECIALS]))
        got = BINARY_CALLS[formula.name](md.tensor(a), md.tensor(b)).numpy()
        want = np.array([_reference(formula, float(p), float(q)) for p, q in zip(a, b)], dtype=np.float64)
        rtol, atol = TOLERANCE.get(formula.name, (1e-14, 0))
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    if formula.float_only:
        return
    if formula.int_only:  # shifts past the width too
        pairs = [(p, q) for p in INTEGERS + [-2 ** 63] for q in INTEGERS[:8] + [5, 63, 64, 70]]
    else:
        pairs = [(p, q) for p in INTEGERS[:8] for q in INTEGERS[:8] if q != 0 and (formula.name != "pow" or q >= 0)]
    a, b = (np.array(v) for v in zip(*pairs))
    got = BINARY_CALLS[formula.name](md.tensor(a), md.tensor(b)).numpy()
    assert got.tolist() == [_int64(int(_reference(formula, int(p), int(q)))) for p, q in pairs]  # (int64 wraps)


@pytest.mark.parametrize("formula", formulas.COMPARE, ids=lambda f: f.name)
def test_compare_kernels_compute_their_formula(formula):
    a, b = (np.array(v) for v in zip(*[(p, q) for p in SPECIALS for q in SPECIALS]))
    got = getattr(md, formula.name)(md.tensor(a), md.tensor(b)).numpy()
    assert got.tolist() == [bool(_reference(formula, float(p), float(q))) for p, q in zip(a, b)]


def test_op_codes_name_every_op_of_every_family():
    for family, names in formulas.CODED.items():
        assert [kernels.OP_CODES[family][n] for n in names] == list(range(len(names)))
    with pytest.raises(ValueError, match="unary: unknown op 'cube'; the unary ops are neg, abs"):
        kernels.OP_CODES["unary"]["cube"]


def test_a_cpu_switch_rejects_an_unknown_code():
    from minidl.kernels.cpu.jit import elementwise, reduce
    from minidl.kernels.cpu.strided import i64
    x, out = np.arange(4.0), np.empty(4)
    shape = i64([4])
    for code in (len(formulas.UNARY), -1):
        with pytest.raises(ValueError, match="unknown unary op code"):
            elementwise.unary_serial(code, x, 0, i64([1]), out, 0, i64([1]), shape, 1)
        with pytest.raises(ValueError, match="unknown unary op code"):
            elementwise.unary_serial(code, x, 0, i64([2]), out, 0, i64([1]), i64([2]), 1)  # strided path
    with pytest.raises(ValueError, match="unknown unary op code"):  # integers too (float-only ops pass them)
        elementwise.unary_serial(len(formulas.UNARY), np.arange(4), 0, i64([1]), np.empty(4, np.int64), 0,
                                 i64([1]), shape, 1)
    with pytest.raises(ValueError, match="unknown binary op code"):
        elementwise.binary_serial(len(formulas.BINARY), x, 0, i64([1]), x, 0, i64([1]), out, 0, i64([1]), shape, 1)
    with pytest.raises(ValueError, match="unknown scan op code"):
        reduce.scan_kernel(7, x, 0, i64([0, 0]), out, 0, i64([0, 0]), i64([1, 1]), 4, 1, 1)


def test_a_cuda_switch_traps_on_an_unknown_code(tmp_path):
    """A kernel cannot raise: an unknown code stops it (here, in the simulator, the process)."""
    script = textwrap.dedent("""
        import numpy as np
        import minidl as md
        from minidl.kernels.cuda import runtime
        from minidl.kernels.cuda.primitives.common import kernel
        x = md.arange(4.0, dtype=md.float64, device="cuda")
        buf = x._storage.buf
        runtime.launch(kernel("elementwise", "unary_packed", np.float64), 4, runtime.i32(99), buf, runtime.i64(0),
                       buf, runtime.i64(0), runtime.i64(4))
        runtime.synchronize()
        print("no trap")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "MINIDL_CUDA_SIM": "1"}, cwd=tmp_path)
    assert done.returncode != 0 and "__trap" in done.stderr, (done.stdout, done.stderr[-2000:])


@pytest.mark.parametrize("text, why", [
    ("x // 2", "operator FloorDiv is not in the language"),
    ("z + 1", "unknown name 'z'"),
    ("exp(x, x)", "exp takes 1 argument"),
    ("cube(x)", "unknown function 'cube'"),
    ("0 < x < 1", "one comparison"),
    ("x[0]", "Subscript is not in the language"),
    ("'a'", "only numbers are constants"),
])
def test_the_language_rejects_what_a_device_could_not_say_the_same_way(text, why):
    with pytest.raises(expr.FormulaError, match=why):
        expr.parse(text, ("x",), where="test")


def test_a_cycle_of_formulas_is_an_error(monkeypatch):
    from minidl.formulas import codegen, table
    loop = (table.Formula("ping", "pong(x)"), table.Formula("pong", "ping(x)"))
    monkeypatch.setattr(table, "HELPERS", table.HELPERS + loop)
    with pytest.raises(expr.FormulaError, match="cycle: ping -> pong -> ping"):
        codegen.ordered_formulas()


@pytest.mark.parametrize("formula", formulas.UNARY, ids=lambda f: f.name)
def test_cuda_unary_kernels_compute_their_formula(formula):
    """The generated CUDA (on the simulator where there is no GPU) against the same reading of the
    formula, signs of zeros included, so both devices are held to one text."""
    from cuda_support import cuda_device
    cuda_device()
    x = np.array(SPECIALS)
    got = getattr(md.ops.elementwise, formula.name)(md.tensor(x, device="cuda")).cpu().numpy()
    want = np.array([_reference(formula, float(v)) for v in x], dtype=np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=0, equal_nan=True)
    assert (np.signbit(got) == np.signbit(want))[want == 0].all()


@pytest.mark.parametrize("text, why", [("x / 2", "uses /"), ("x * 0.5", "uses the float 0.5"),
                                       ("exp(x)", "uses exp()"), ("x if x > 0 else nan", "uses nan"),
                                       ("logistic_of_exp(x)", "its call of logistic_of_exp uses /")])
def test_a_formula_that_integers_reach_does_integer_math(text, why):
    from minidl.formulas import table
    with pytest.raises(expr.FormulaError, match=f"integers reach it .* {why}"):
        table._check_integer_safe(table.Formula("half", text), table.callable_formulas())
