"""The CPU's generated sources: ``minidl/kernels/cpu/jit/op_codes.py`` and ``minidl/kernels/cpu/jit/formulas.py``.

Each family gets an element switch (``apply_unary``) for strided loops, with every formula
written out in place, and, for unary and binary ops, run switches over packed runs, where the op
is picked outside the loop so that LLVM can vectorise it. A family's float-only ops sit in a
second switch that the library's ``float_only`` wraps, so integer kernels never type float math.
Numbers are written as Python writes them, so Numba types them as it always has (an integer
literal beside a float32 makes a float64).
"""
from __future__ import annotations

import textwrap

from . import codegen, expr, table

# Ops whose packed runs the CPU computes with a function of its own (minidl/kernels/cpu/jit/vector_math.py)
RUNS = {"exp": "exp_run"}
# Ops whose float32 packed runs a vectorised function of minidl/kernels/cpu/jit/vector_activations.py computes;
# it returns False for the other dtypes, which then take the formula's own loop
FLOAT32_RUNS = {name: f"{name}_run" for name in ("gelu", "gelu_backward", "gelu_tanh", "gelu_tanh_backward", "silu",
                                                 "silu_backward")}
# Ops whose packed runs get a loop of their own (see _own_loop)
OWN_LOOPS = {"neg", "abs", "relu", "square", "add", "sub", "mul", "gate"}


class NumbaSyntax(codegen.FormulaSyntax):
    """Python for Numba. Each op's formula is written out inside the switches (a function per op
    would cost Numba a full compile per dtype); a formula that others call is an inlined function,
    so its arguments are evaluated once."""

    def __init__(self, bindings):
        self.bindings = bindings  # parameter -> the text it stands for

    def name(self, ident):
        return self.bindings[ident]

    def library(self, function, args):
        if function == "bool":
            return f"bool({args[0]})"
        return f"sm.{function}({', '.join(args)})"


def expression(formula, args=None) -> str:
    """The formula's text with its parameters replaced by ``args`` (default: their own names)."""
    args = formula.params if args is None else args
    return expr.render(codegen.tree_of(formula), NumbaSyntax(dict(zip(formula.params, args))))


def _called_function(f) -> list:
    doc = [f'    """{f.doc}"""'] if f.doc else []
    return ["", "", '@njit(inline="always")', f"def {codegen.function_name(f)}({', '.join(f.params)}):", *doc,
            f"    return {expression(f)}"]


def op_codes() -> str:
    lines = [f'"""Op codes, the number each kernel switches on. {codegen.HEADER}"""', ""]
    lines += [f"{name} = {value}" for name, value in codegen.codes()]
    return "\n".join(lines) + "\n"


def _own_loop(f) -> bool:
    """Whether packed runs of ``f`` get a loop of their own (vectorised by LLVM), or go element by
    element through the element switch. Every such loop is compiled for each dtype and costs
    first-use compile time (a loop for each plain-arithmetic op took it from 34 s to 44 s), so
    only the ops that fill training steps have one."""
    return f.name in RUNS or f.name in FLOAT32_RUNS or f.name in OWN_LOOPS


def _switch(name, params, family, case, doc, members, otherwise) -> list:
    lines = ["", "", '@njit(inline="always")', f"def {name}({', '.join(params)}):", f'    """{doc}"""']
    for i, f in enumerate(members):
        lines.append(f"    {'if' if i == 0 else 'elif'} op == {codegen.code_name(family, f.name)}:")
        lines += [f"        {line}" for line in case(f)]
    lines += ["    else:", *(f"        {line}" for line in otherwise)]
    return lines


def _unknown_code(family) -> list:
    """The switches' default: a call, not an inlined raise, which would give a prange loop a second
    exit and keep Numba from parallelising it."""
    return ["", "", "@njit", f"def unknown_{family}_code(op, x):",
            f'    """Raises: {family} kernels never get a code that is not in the table."""',
            "    if op == op:  # always: a bare raise would leave the function without a return type",
            f'        raise ValueError("unknown {family} op code")', "    return x"]


def _element_switch(name, family, doc) -> list:
    """op(x(, y)) by its code. A family's float-only ops go to a second switch wrapped by the
    library's ``float_only``, so that integer kernels type only integer math. (Checking for the
    float-only codes in the first switch instead added 40% to the unary kernels' compile time.)"""
    members = table.FAMILIES[family]
    params = ("op", *members[0].params)
    # the default's value only gives the branch a type: the switch's own (bool for compare)
    unknown = [f"return unknown_{family}_code(op, {'False' if family == 'compare' else params[1]})"]

    def case(f):
        return [f"return {expression(f)}"]
    floats = [f for f in members if f.float_only]
    if not floats:
        return _switch(name, params, family, case, doc, members, unknown)
    float_switch = f"float_{family}"
    lines = _switch(name, params, family, case, doc, [f for f in members if not f.float_only],
                    [f"return {float_switch}({', '.join(params)})"])
    lines += _switch(float_switch, params, family, case, f"The float-only {family} ops.", floats, unknown)
    codes = ", ".join(codegen.code_name(family, f.name) for f in floats)
    at = lines.index(f"def {float_switch}({', '.join(params)}):") - 1  # its decorator
    lines[at:at + 1] = textwrap.wrap(f"@sm.float_only(({codes},), unknown_{family}_code)", 110,
                                     subsequent_indent="                ")
    return lines


def _run_switch(name, family, element, scalar_y, doc) -> list:
    """out[j] = op(x[j](, y[j])) over packed runs (``scalar_y``: y is one number), the op picked
    outside the loop so that LLVM can vectorise the loop body."""
    members = table.FAMILIES[family]
    unary = len(members[0].params) == 1
    params = ("op", "x", "out") if unary else ("op", "x", "y", "out")
    args = "x[j]" if unary else ("x[j], y" if scalar_y else "x[j], y[j]")

    def case(f):
        if f.name in RUNS:
            return [f"{RUNS[f.name]}(x, out)"]
        loop = ["for j in range(out.size):", f"    out[j] = {expression(f, args.split(', '))}"]
        if f.name in FLOAT32_RUNS and not scalar_y:
            return [f"if not {FLOAT32_RUNS[f.name]}({', '.join(params[1:])}):", *("    " + line for line in loop)]
        return loop
    return _switch(name, params, family, case, doc, [f for f in members if _own_loop(f)],
                   ["for j in range(out.size):  # the other ops, through the element switch",
                    f"    out[j] = {element}(op, {args})"])


def formulas() -> str:
    used = [code for code, _ in codegen.codes() if code.split("_")[0] in ("UNARY", "BINARY", "COMPARE")]
    lines = ['"""Every elementwise op\'s formula, written out in the switches over op codes.', "",
             codegen.HEADER, '"""', "import math  # noqa: F401 (inf, nan and pi, when formulas use them)", "",
             "from numba import njit", "", "from . import scalar_math as sm",
             *textwrap.wrap("from .op_codes import (" + ", ".join(used) + ")", 110, subsequent_indent="    "),
             "from .vector_math import " + ", ".join(sorted(set(RUNS.values()))),
             *textwrap.wrap("from .vector_activations import (" + ", ".join(sorted(FLOAT32_RUNS.values())) + ")", 110,
                            subsequent_indent="    ")]
    called = codegen.called_names()
    for f in codegen.ordered_formulas():
        if f.name in called:
            lines += _called_function(f)
    for family in table.FAMILIES:
        lines += _unknown_code(family)
    lines += _element_switch("apply_unary", "unary", "op(x), the op picked by its code.")
    lines += _element_switch("apply_binary", "binary", "op(x, y), the op picked by its code.")
    lines += _element_switch("apply_compare", "compare", "op(x, y) (a bool) by its code.")
    lines += _run_switch("unary_run", "unary", "apply_unary", False, "out[j] = op(x[j]) over packed runs.")
    lines += _run_switch("binary_run", "binary", "apply_binary", False, "out[j] = op(x[j], y[j]) over packed runs.")
    lines += _run_switch("binary_scalar_run", "binary", "apply_binary", True,
                         "out[j] = op(x[j], y) over a packed run and one number.")
    return "\n".join(lines) + "\n"
