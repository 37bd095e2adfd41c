"""The formula language: a small expression over named scalars, read with Python's own parser.

A formula is a Python expression restricted to what both devices can say the same way:

- names: the formula's parameters (``x``, ``y``; ``g`` in gradients) and the constants ``inf``,
  ``nan`` and ``pi``; numbers;
- ``+ - * /``, unary ``-``, one comparison at a time (``< <= > >= == !=``), ``and``, ``or``,
  ``not``, and ``a if c else b``;
- calls of a library function (``MATH``: each has one meaning per dtype, written once per device
  in ``minidl/kernels/cpu/jit/scalar_math.py`` and ``minidl/kernels/cuda/csrc/scalar_math.cuh``) or of another
  formula by its name, so formulas compose.

``/`` is division for floats; a formula that may divide by zero says what it gives (Numba would
raise). There is no ``//``, ``%`` or ``**``: their integer and float meanings differ, so they are
the library's ``floordiv``, ``remainder`` and ``pow``; ``& | ^ << >>`` are its ``bitand``, ``bitor``,
``bitxor``, ``shl`` and ``shr``, for integers only (``int_only`` ops: floats never reach them).

``parse`` checks a formula once; ``render`` writes it in a target's syntax (Numba's Python, CUDA C,
Python over Tensors for the gradients); ``evaluate`` reads it on plain numbers, for the tests.
"""
from __future__ import annotations

import ast
import math

# name -> number of arguments; the meanings per dtype are in the libraries' comments
MATH = {
    "exp": 1, "log": 1, "log1p": 1, "expm1": 1, "sqrt": 1, "sin": 1, "cos": 1, "tan": 1, "tanh": 1, "erf": 1,
    "floor": 1, "ceil": 1, "rint": 1, "trunc": 1, "abs": 1, "bool": 1,
    "atan": 1, "asin": 1, "acos": 1, "sinh": 1, "cosh": 1, "asinh": 1, "acosh": 1, "atanh": 1, "erfc": 1,
    "log2": 1, "log10": 1, "lgamma": 1, "digamma": 1, "erfinv": 1,
    "i0": 1, "i1": 1, "i0e": 1, "i1e": 1, "erfcx": 1,
    "copysign": 2, "floordiv": 2, "remainder": 2, "pow": 2, "atan2": 2, "fmod": 2, "hypot": 2, "zeta": 2,
    "nextafter": 2, "gcd": 2, "igamma": 2, "igammac": 2,
    "bitand": 2, "bitor": 2, "bitxor": 2, "shl": 2, "shr": 2,
}
CONSTANTS = {"inf": math.inf, "nan": math.nan, "pi": math.pi}
# what only floats have: a formula that integers reach must not use these
FLOAT_MATH = {"exp", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tan", "tanh", "erf", "copysign", "atan2",
              "atan", "asin", "acos", "sinh", "cosh", "asinh", "acosh", "atanh", "erfc", "log2", "log10",
              "lgamma", "digamma", "erfinv", "hypot", "zeta", "i0", "i1", "i0e", "i1e",
              "erfcx", "nextafter", "igamma", "igammac"}

_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_COMPARE = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_BOOL = {ast.And: "and", ast.Or: "or"}


class FormulaError(ValueError):
    pass


def parse(text: str, params, formulas=(), where: str = "formula") -> ast.expr:
    """The checked tree of ``text``; ``params`` are its variables, ``formulas`` the names it may call
    besides the library's."""
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError as e:
        raise FormulaError(f"{where}: {text!r} is not an expression: {e.msg}") from None
    _check(tree, set(params), set(formulas), text, where)
    return tree


def _check(node, params, formulas, text, where):
    def fail(why):
        raise FormulaError(f"{where}: {why} in {text!r}")

    if isinstance(node, ast.Name):
        if node.id not in params and node.id not in CONSTANTS:
            fail(f"unknown name {node.id!r} (parameters: {sorted(params)}; constants: {sorted(CONSTANTS)})")
    elif isinstance(node, ast.Constant):
        if type(node.value) not in (int, float):
            fail(f"only numbers are constants, not {node.value!r}")
    elif isinstance(node, ast.BinOp):
        if type(node.op) not in _BINARY:
            fail(f"operator {type(node.op).__name__} is not in the language (use floordiv, remainder, pow)")
    elif isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.USub, ast.Not)):
            fail(f"unary {type(node.op).__name__} is not in the language")
    elif isinstance(node, ast.Compare):
        if len(node.ops) != 1 or type(node.ops[0]) not in _COMPARE:
            fail("one comparison (<, <=, >, >=, ==, !=) at a time")
    elif isinstance(node, ast.Call):
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if node.keywords or name is None:
            fail("calls are name(arguments)")
        if name in MATH:
            if len(node.args) != MATH[name]:
                fail(f"{name} takes {MATH[name]} argument(s), got {len(node.args)}")
        elif name not in formulas:
            fail(f"unknown function {name!r} (library: {sorted(MATH)})")
        for arg in node.args:
            _check(arg, params, formulas, text, where)
        return
    elif not isinstance(node, (ast.BoolOp, ast.IfExp)):
        fail(f"{type(node).__name__} is not in the language")
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.expr):
            _check(child, params, formulas, text, where)


def float_math(tree):
    """The first float-only piece of a formula (a float number or constant, ``/``, a float-only
    library function, or a call of another formula, named for the caller to check), or None."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, float):
            return f"the float {node.value!r}"
        if isinstance(node, ast.Name) and node.id in CONSTANTS:
            return node.id
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            return "/"
        if isinstance(node, ast.Call) and node.func.id in FLOAT_MATH:
            return f"{node.func.id}()"
    return None


def names_used(tree) -> set:
    """The variables a formula reads (a gradient saves only those)."""
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id not in CONSTANTS}


def evaluate(tree, values: dict, call):
    """The formula's value for plain Python numbers in ``values``; ``call(name, args)`` runs a
    library function or formula. (A reading of the text independent of the code generators: the
    tests hold the generated kernels to it.)"""
    def ev(node):
        if isinstance(node, ast.Name):
            return values[node.id] if node.id in values else CONSTANTS[node.id]
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            op = type(node.op)
            return a + b if op is ast.Add else a - b if op is ast.Sub else a * b if op is ast.Mult else a / b
        if isinstance(node, ast.UnaryOp):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else not v
        if isinstance(node, ast.Compare):
            return _compare(type(node.ops[0]), ev(node.left), ev(node.comparators[0]))
        if isinstance(node, ast.BoolOp):
            got = [ev(v) for v in node.values]
            out = got[0]
            for v in got[1:]:
                out = (out and v) if isinstance(node.op, ast.And) else (out or v)
            return out
        if isinstance(node, ast.IfExp):
            return ev(node.body) if ev(node.test) else ev(node.orelse)
        return call(node.func.id, [ev(a) for a in node.args])
    return ev(tree)


def _compare(op, a, b):
    if op is ast.Lt:
        return a < b
    if op is ast.LtE:
        return a <= b
    if op is ast.Gt:
        return a > b
    if op is ast.GtE:
        return a >= b
    return a == b if op is ast.Eq else a != b


class Syntax:
    """How a target language writes the pieces of a formula (Python's spelling by default)."""
    c = False  # C's operators (&&, ||, !, ?:) instead of Python's

    def name(self, ident):
        return ident

    def constant(self, ident):
        return f"math.{ident}"

    def number(self, text):
        return text

    def call(self, function, args):
        return f"{function}({', '.join(args)})"

    def conditional(self, test, body, orelse):
        return f"({test} ? {body} : {orelse})" if self.c else f"({body} if {test} else {orelse})"


def render(tree, syntax: Syntax) -> str:
    """Source text of a formula in ``syntax``'s language. Every operation is parenthesised, so no
    target's precedence rules matter."""
    c = syntax.c

    def r(node):
        if isinstance(node, ast.Name):
            return syntax.name(node.id) if node.id not in CONSTANTS else syntax.constant(node.id)
        if isinstance(node, ast.Constant):
            return syntax.number(repr(node.value))
        if isinstance(node, ast.BinOp):
            return f"({r(node.left)} {_BINARY[type(node.op)]} {r(node.right)})"
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.USub):
                return f"(-{r(node.operand)})"
            return f"(!{r(node.operand)})" if c else f"(not {r(node.operand)})"
        if isinstance(node, ast.Compare):
            return f"({r(node.left)} {_COMPARE[type(node.ops[0])]} {r(node.comparators[0])})"
        if isinstance(node, ast.BoolOp):
            word = _BOOL[type(node.op)]
            joiner = (" && " if word == "and" else " || ") if c else f" {word} "
            return "(" + joiner.join(r(v) for v in node.values) + ")"
        if isinstance(node, ast.IfExp):
            return syntax.conditional(r(node.test), r(node.body), r(node.orelse))
        return syntax.call(node.func.id, [r(a) for a in node.args])
    return r(tree)
