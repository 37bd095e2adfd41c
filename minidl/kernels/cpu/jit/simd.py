"""Explicit 256-bit vectors (8 float32 or 4 float64 lanes) for register-blocked products.

LLVM vectorises a loop over memory, but it cannot keep a tile of sums in registers across a loop
that also reads other arrays: it cannot prove they do not alias, so every multiply-add loads and
stores its sum. A value of the ``Vec`` type here is an LLVM vector, which lives in a register like
any scalar local: a few of them hold a whole tile of sums while a product runs (``tile_product.py``).

Each function is a plain-Python twin (numpy arrays of ``lanes`` elements, run only with
NUMBA_DISABLE_JIT=1) overloaded by an intrinsic. Indices are flat element positions in a
C-contiguous array, unchecked: the callers keep them in bounds.
"""
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, models, overload, register_model

VECTOR_BYTES = 32


class Vec(types.Type):
    def __init__(self, dtype):
        self.dtype = dtype
        self.lanes = VECTOR_BYTES * 8 // dtype.bitwidth
        super().__init__(name=f"Vec({dtype}, {self.lanes})")


@register_model(Vec)
class _VecModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        element = dmm.lookup(fe_type.dtype).get_value_type()
        super().__init__(dmm, fe_type, ir.VectorType(element, fe_type.lanes))


def _contiguous_float(x):
    return isinstance(x, types.Array) and x.layout == "C" and isinstance(x.dtype, types.Float)


def _address(context, builder, arrty, arr, i):
    data = context.make_array(arrty)(context, builder, arr).data
    return builder.gep(data, [i], inbounds=True)


def _reader(read):
    """An intrinsic (x, i) -> Vec whose code is read(builder, address of x[i], vector type, element alignment)."""
    @intrinsic
    def reader(typingctx, x, i):
        if not _contiguous_float(x):
            return None
        vec = Vec(x.dtype)

        def codegen(context, builder, sig, args):
            address = _address(context, builder, sig.args[0], *args)
            return read(builder, address, context.get_value_type(vec), x.dtype.bitwidth // 8)
        return vec(x, types.intp), codegen
    return reader


def _read_vector(builder, address, ty, align):
    return builder.load(builder.bitcast(address, ty.as_pointer()), align=align, typ=ty)


def _read_broadcast(builder, address, ty, align):
    one = builder.insert_element(ir.Constant(ty, ir.Undefined), builder.load(address, align=align),
                                 ir.Constant(ir.IntType(32), 0))
    everywhere = ir.Constant(ir.VectorType(ir.IntType(32), ty.count), [0] * ty.count)
    return builder.shuffle_vector(one, ir.Constant(ty, ir.Undefined), everywhere)


_load, _splat = _reader(_read_vector), _reader(_read_broadcast)


@intrinsic
def _store(typingctx, x, i, v):
    if not _contiguous_float(x):
        return None

    def codegen(context, builder, sig, args):
        address = _address(context, builder, sig.args[0], args[0], args[1])
        builder.store(args[2], builder.bitcast(address, args[2].type.as_pointer()), align=x.dtype.bitwidth // 8)
    return types.void(x, types.intp, Vec(x.dtype)), codegen


@intrinsic
def _fma(typingctx, a, b, c):
    if not (isinstance(a, Vec) and a == b == c):
        return None

    def codegen(context, builder, sig, args):
        ty = context.get_value_type(a)
        name = f"llvm.fmuladd.v{a.lanes}f{a.dtype.bitwidth}"
        return builder.call(cgutils.get_or_insert_function(builder.module, ir.FunctionType(ty, [ty] * 3), name), args)
    return a(a, a, a), codegen


@intrinsic
def _add(typingctx, a, b):
    if not (isinstance(a, Vec) and a == b):
        return None
    return a(a, a), lambda context, builder, sig, args: builder.fadd(args[0], args[1])


@intrinsic
def _maximum(typingctx, a, b):
    if not (isinstance(a, Vec) and a == b):
        return None

    def codegen(context, builder, sig, args):
        return builder.select(builder.fcmp_ordered(">", args[0], args[1]), args[0], args[1])
    return a(a, a), codegen


@intrinsic
def _largest(typingctx, a):
    if not isinstance(a, Vec):
        return None

    def codegen(context, builder, sig, args):
        ty = context.get_value_type(a)
        name = f"llvm.vector.reduce.fmax.v{a.lanes}f{a.dtype.bitwidth}"
        function = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ty.element, [ty]), name)
        return builder.call(function, args)
    return a.dtype(a), codegen


@intrinsic
def _zeros(typingctx, x):
    if not _contiguous_float(x):
        return None
    vec = Vec(x.dtype)
    return vec(x), lambda context, builder, sig, args: ir.Constant(context.get_value_type(vec), None)


def lanes(x):
    """Elements of ``x``'s dtype in one vector."""
    return VECTOR_BYTES // x.itemsize


def load(x, i):
    """Elements i .. i + lanes - 1 of ``x``."""
    return x.reshape(-1)[i:i + lanes(x)].copy()


def store(x, i, v):
    """Elements i .. i + lanes - 1 of ``x`` = v."""
    x.reshape(-1)[i:i + lanes(x)] = v


def splat(x, i):
    """Element i of ``x`` in every lane."""
    return np.full(lanes(x), x.reshape(-1)[i])


def fma(a, b, c):
    """a * b + c, fused where the CPU has it."""
    return a * b + c


def add(a, b):
    return a + b


def maximum(a, b):
    """Lanewise a if a > b else b (b where either is nan)."""
    return np.where(a > b, a, b)


def largest(a):
    """The largest lane of a, nan lanes left out."""
    return np.fmax.reduce(a)


def zeros(x):
    """A vector of zeros of ``x``'s dtype."""
    return np.zeros(lanes(x), x.dtype)


@overload(lanes)
def _lanes_impl(x):
    count = VECTOR_BYTES // (x.dtype.bitwidth // 8)
    return lambda x: count


overload(load)(lambda x, i: lambda x, i: _load(x, i))
overload(store)(lambda x, i, v: lambda x, i, v: _store(x, i, v))
overload(splat)(lambda x, i: lambda x, i: _splat(x, i))
overload(fma)(lambda a, b, c: lambda a, b, c: _fma(a, b, c))
overload(add)(lambda a, b: lambda a, b: _add(a, b))
overload(maximum)(lambda a, b: lambda a, b: _maximum(a, b))
overload(largest)(lambda a: lambda a: _largest(a))
overload(zeros)(lambda x: lambda x: _zeros(x))
