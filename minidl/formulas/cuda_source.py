"""The GPU's generated sources: ``minidl/kernels/cuda/csrc/op_codes.cuh`` and ``minidl/kernels/cuda/csrc/formulas.cuh``.

A formula becomes a ``__device__`` template over the element type T, numbers cast to T (so a
float kernel computes in float). A float-only formula also gets an overload for ``long long``
that returns its argument: integer kernels compile every case of a switch, and the float math
would not compile for them (nor ever run: the op layer computes such ops in floating point, and
an in-place one into an integer tensor is an error there).
"""
from __future__ import annotations

from . import codegen, expr, table

_CONSTANTS = {"inf": "inf_of<T>()", "nan": "nan_of<T>()", "pi": "(T)3.141592653589793"}


class CudaSyntax(codegen.FormulaSyntax):
    c = True

    def constant(self, ident):
        return _CONSTANTS[ident]

    def number(self, text):
        return f"(T){text}"

    def library(self, function, args):
        if function == "bool":
            return f"({args[0]} != 0)"
        return f"m_{function}({', '.join(args)})"


def op_codes() -> str:
    lines = [f"// Op codes, the number each kernel switches on. {codegen.HEADER}", ""]
    lines += [f"#define {name} {value}" for name, value in codegen.codes()]
    lines.append("")
    lines.append("// FOR_<FAMILY>_OPS(X) expands X(code) for every op of the family (the packed kernels' cases).")
    for family in ("unary", "binary"):
        names = table.CODED[family]
        lines.append(f"#define FOR_{family.upper()}_OPS(X) " + " ".join(f"X({codegen.code_name(family, n)})"
                                                                   for n in names))
    return "\n".join(lines) + "\n"


def _function(f) -> list:
    name = codegen.function_name(f)
    body = expr.render(codegen.tree_of(f), CudaSyntax())
    result = "bool" if codegen.family_of(f) == "compare" else "T"
    params = ", ".join(f"T {p}" for p in f.params)
    doc = [f"// {f.name}: {f.doc}"] if f.doc else []
    lines = ["", *doc, f"template <class T> __device__ __forceinline__ {result} {name}({params}) {{",
             f"    return ({result})({body});", "}"]
    if f.float_only:
        int_params = ", ".join(f"long long {p}" for p in f.params)
        lines.append(f"__device__ __forceinline__ long long {name}({int_params}) {{ return {f.params[0]}; }}")
    return lines


def _switch(name, family, result) -> list:
    members = table.FAMILIES[family]
    params = ", ".join(f"T {p}" for p in members[0].params)
    args = ", ".join(members[0].params)
    lines = ["", f"template <class T> __device__ __forceinline__ {result} {name}(int op, {params}) {{",
             "    switch (op) {"]
    lines += [f"        case {codegen.code_name(family, f.name)}: return {codegen.function_name(f)}({args});"
              for f in members]
    lines += ["        default: __trap(); return {};  // an unknown code is a bug: stop the kernel", "    }", "}"]
    return lines


def formulas() -> str:
    lines = ["// Every elementwise formula as a device function, and the switches over op codes.",
             f"// {codegen.HEADER}", '#include "op_codes.cuh"', '#include "scalar_math.cuh"']
    for f in codegen.ordered_formulas():
        lines += _function(f)
    lines += _switch("apply_unary", "unary", "T")
    lines += _switch("apply_binary", "binary", "T")
    lines += _switch("apply_compare", "compare", "bool")
    return "\n".join(lines) + "\n"
