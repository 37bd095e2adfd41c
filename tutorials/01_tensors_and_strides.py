"""Tutorial 1: a tensor is storage + shape + strides + offset.

Run it:  python tutorials/01_tensors_and_strides.py

A minidl tensor (like a PyTorch tensor) does not own a 2-D or 3-D block of numbers. It owns
a *view* of a flat, 1-D buffer (the "storage"), described by three things:

* ``shape``   - how many elements along each dimension,
* ``strides`` - how far to move in the buffer (in elements, not bytes) to step by one along
                each dimension; any integer, negative or zero included,
* ``offset``  - where element ``(0, 0, ..., 0)`` lives in the buffer.

The element at multi-index ``(i0, i1, ..., ik)`` sits at buffer position::

    offset + i0 * strides[0] + i1 * strides[1] + ... + ik * strides[k]

That single formula is the whole trick. Transposing, slicing with a step, reversing,
broadcasting and taking a diagonal never move data: each just computes a new
(shape, strides, offset) over the same storage. ``minidl.layout`` holds this index math as
pure Python; ``minidl.layout.Layout.position`` is the formula above.

Every claim below is checked with ``assert``, so if this script finishes, it is true.
"""
import argparse

import minidl
from minidl.layout import Layout

# --help says what this tutorial is and exits before anything runs; it takes no other arguments
argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()


def section(title):
    print()
    print("=" * 78)
    print(title)
    print("=" * 78)


def layout_of(t):
    """The (shape, strides, offset) triple of a tensor, as a ``minidl.layout.Layout``."""
    return Layout(t.shape, t.stride(), t.storage_offset())


def by_hand(t, index):
    """Buffer position of ``t[index]``, computed the long way: offset + sum of i_k * stride_k."""
    position = t.storage_offset()
    for i, stride in zip(index, t.stride()):
        position += i * stride
    return position


def check_every_element(t, buffer):
    """Each element of the view equals the buffer element the index math points at."""
    layout = layout_of(t)
    for index in _all_indices(t.shape):
        pos = layout.position(index)
        assert pos == by_hand(t, index)
        assert t[index].item() == buffer[pos].item(), (index, pos)


def _all_indices(shape):
    if not shape:
        yield ()
        return
    for i in range(shape[0]):
        for rest in _all_indices(shape[1:]):
            yield (i,) + rest


# ---------------------------------------------------------------------------------------------
section("1. The buffer and a contiguous view of it")
# ``buffer`` is a plain 1-D tensor: buffer position p holds the value p. That makes it easy to
# read a view's index math off its values: an element's value *is* its buffer position.
buffer = minidl.arange(12, dtype=minidl.float32)
x = buffer.view(3, 4)            # a 3x4 view of the same 12 numbers: no copy
print("buffer =", buffer)
print("x = buffer.view(3, 4) =\n", x)
print("x.shape =", x.shape, " x.stride() =", x.stride(), " x.storage_offset() =", x.storage_offset())

# Row-major ("C-contiguous"): moving one column steps 1 element, one row steps 4 (a row's length).
assert x.stride() == (4, 1) and x.storage_offset() == 0
assert x.is_contiguous()
# Both tensors look at the very same memory: same storage, same first-element address.
assert x.untyped_storage_id() == buffer.untyped_storage_id()
assert x.data_ptr() == buffer.data_ptr()

# The index math, by hand: x[2, 3] lives at 0 + 2*4 + 3*1 = 11.
index = (2, 3)
pos = by_hand(x, index)
print(f"x[2, 3] sits at position {x.storage_offset()} + 2*{x.stride(0)} + 3*{x.stride(1)} = {pos}")
assert pos == 11 == layout_of(x).position(index)
assert x[2, 3].item() == buffer[11].item() == 11.0
check_every_element(x, buffer)


# ---------------------------------------------------------------------------------------------
section("2. Transpose: swap the strides")
xt = x.t()
print("x.t() =\n", xt)
print("x.t().stride() =", xt.stride(), " is_contiguous:", xt.is_contiguous())
# Transposing swaps the shape *and* the strides. The data does not move, so the elements are no
# longer packed row-major: xt is not contiguous.
assert xt.shape == (4, 3) and xt.stride() == (1, 4)
assert not xt.is_contiguous()
assert xt.data_ptr() == x.data_ptr()
# xt[i, j] is x[j, i], and both land on the same buffer position.
assert layout_of(xt).position((3, 1)) == layout_of(x).position((1, 3)) == 7
check_every_element(xt, buffer)


# ---------------------------------------------------------------------------------------------
section("3. Slicing with a step: multiply the stride, move the offset")
every_other = x[:, 1::2]         # columns 1 and 3
print("x[:, 1::2] =\n", every_other)
print("stride =", every_other.stride(), " storage_offset =", every_other.storage_offset())
# Starting at column 1 moves the offset by 1*stride(1) = 1; a step of 2 doubles the column stride.
assert every_other.stride() == (4, 2) and every_other.storage_offset() == 1
# The data pointer moved by offset * element size bytes.
assert every_other.data_ptr() == buffer.data_ptr() + 1 * buffer.element_size()
check_every_element(every_other, buffer)


# ---------------------------------------------------------------------------------------------
section("4. Negative steps: negative strides")
# (PyTorch refuses negative steps and offers flip(), which copies; minidl just negates a stride.)
reversed_rows = x[::-1, 1:]
print("x[::-1, 1:] =\n", reversed_rows)
print("stride =", reversed_rows.stride(), " storage_offset =", reversed_rows.storage_offset())
# Element (0, 0) is x[2, 1], at position 2*4 + 1 = 9; stepping "down" a row now goes back 4.
assert reversed_rows.stride() == (-4, 1) and reversed_rows.storage_offset() == 9
i, j = 1, 2
pos = by_hand(reversed_rows, (i, j))
print(f"x[::-1, 1:][{i}, {j}] sits at 9 + {i}*(-4) + {j}*1 = {pos}")
assert pos == 7 and reversed_rows[i, j].item() == 7.0
check_every_element(reversed_rows, buffer)


# ---------------------------------------------------------------------------------------------
section("5. expand: a zero stride repeats an element without storing it again")
column = minidl.arange(3, dtype=minidl.float32).view(3, 1)
wide = column.expand(3, 4)
print("arange(3).view(3, 1).expand(3, 4) =\n", wide)
print("stride =", wide.stride())
# Stride 0 along dim 1: every column index lands on the same position. Broadcasting in
# ``a + b`` works exactly like this, so a bias is never physically copied to every row.
assert wide.stride() == (1, 0)
assert {layout_of(wide).position((2, j)) for j in range(4)} == {2}
assert wide.numel() == 12 and column.numel() == 3
check_every_element(wide, column.view(3))


# ---------------------------------------------------------------------------------------------
section("6. diagonal: one stride that is the sum of two")
d = x.diagonal()
d1 = x.diagonal(1)               # the diagonal one above the main one
print("x.diagonal() =", d, " stride =", d.stride())
print("x.diagonal(1) =", d1, " stride =", d1.stride(), " offset =", d1.storage_offset())
# Moving one step along the diagonal moves one row AND one column: 4 + 1 = 5 elements.
assert d.stride() == (5,) and d.storage_offset() == 0
assert d1.stride() == (5,) and d1.storage_offset() == 1
assert d.tolist() == [0.0, 5.0, 10.0] and d1.tolist() == [1.0, 6.0, 11.0]
check_every_element(d1, buffer)

# A Layout is just the triple; minidl.layout can also build views without any tensor at all.
from minidl import layout as L

packed = Layout((3, 4))
assert L.transpose(packed, 0, 1).strides == (1, 4)
assert L.diagonal(packed).strides == (5,)
assert L.slice_dim(packed, 1, None, None, -1).strides == (4, -1)
assert L.slice_dim(packed, 1, None, None, -1).offset == 3
print("Layout((3, 4)) transposed:", L.transpose(packed, 0, 1))


# ---------------------------------------------------------------------------------------------
section("7. Writes go through views")
# Since views share storage, writing through one is visible through all the others.
scratch = minidl.arange(12, dtype=minidl.float32)
grid = scratch.view(3, 4)
grid.t()[3, 0] = 100.0               # x.t()[3, 0] is x[0, 3], buffer position 3
print("after grid.t()[3, 0] = 100:  scratch =", scratch)
assert scratch[3].item() == 100.0 and grid[0, 3].item() == 100.0

grid.diagonal().mul_(10)             # in place, through a view with stride 5
print("after grid.diagonal().mul_(10): scratch =", scratch)
assert scratch[0].item() == 0.0 and scratch[5].item() == 50.0 and scratch[10].item() == 100.0

grid[::-1, 0].fill_(-7.0)            # negative stride, in place: buffer positions 8, 4, 0
assert [scratch[p].item() for p in (0, 4, 8)] == [-7.0, -7.0, -7.0]
print("after grid[::-1, 0].fill_(-7): scratch =", scratch)


# ---------------------------------------------------------------------------------------------
section("8. contiguous() copies (only when it has to)")
xt = x.t()
packed_copy = xt.contiguous()
print("x.t().contiguous().stride() =", packed_copy.stride())
# A non-contiguous tensor gets a fresh, row-major buffer; values are equal, memory is not shared.
assert packed_copy.is_contiguous() and packed_copy.stride() == (3, 1)
assert packed_copy.tolist() == xt.tolist()
assert packed_copy.untyped_storage_id() != x.untyped_storage_id()
packed_copy[0, 0] = 42.0
assert x[0, 0].item() == 0.0         # the copy is independent
# An already contiguous tensor is returned as is: no copy.
assert x.contiguous().data_ptr() == x.data_ptr()


# ---------------------------------------------------------------------------------------------
section("9. view() never copies; reshape() copies only when a view is impossible")
# view() asks for new strides over the same storage. x is contiguous, so any shape with 12
# elements works.
v = x.view(2, 6)
assert v.data_ptr() == x.data_ptr() and v.stride() == (6, 1)
# x.t() visits the buffer as 0, 4, 8, 1, 5, 9, ... No single stride walks that sequence,
# so a flat view of it cannot exist: view() refuses ...
try:
    xt.view(12)
    raise AssertionError("view should have failed")
except RuntimeError as err:
    print("x.t().view(12) fails:", str(err).split(";")[0])
# ... and reshape() falls back to a copy.
flat = xt.reshape(12)
print("x.t().reshape(12) =", flat)
assert flat.tolist() == [0.0, 4.0, 8.0, 1.0, 5.0, 9.0, 2.0, 6.0, 10.0, 3.0, 7.0, 11.0]
assert flat.untyped_storage_id() != x.untyped_storage_id()
# When a view *is* possible, reshape returns one. Splitting the rows of the transpose works:
# (4, 3) with strides (1, 4) -> (2, 2, 3) with strides (2, 1, 4).
split = xt.reshape(2, 2, 3)
print("x.t().reshape(2, 2, 3).stride() =", split.stride())
assert split.stride() == (2, 1, 4) and split.untyped_storage_id() == x.untyped_storage_id()
# And every element is still where the formula says.
check_every_element(split, buffer)

print()
print("All claims checked: a view is new (shape, strides, offset) over the same storage.")
