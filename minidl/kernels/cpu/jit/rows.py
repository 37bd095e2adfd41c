"""Where a kernel's work is: rows, work items and element positions of a collapsed layout."""
from numba import njit

# ----------------------------------------------------------------------------- work splitting
CHUNK = 4096


@njit(inline="always")
def row_position(row, shape, strides, offset):
    """Buffer position of element 0 of the ``row``-th row (rows run over all dims but the last)."""
    pos = offset
    rest = row + 0  # a new value: ``row`` may be a prange index, which Numba forbids overwriting
    for d in range(shape.size - 2, -1, -1):
        n = shape[d]
        pos += (rest % n) * strides[d]
        rest //= n
    return pos


@njit(inline="always")
def item_bounds(t, shape):
    """(row, first column, end column) of work item ``t``."""
    inner = shape[shape.size - 1]
    nchunks = (inner + CHUNK - 1) // CHUNK
    row = t // nchunks
    lo = (t % nchunks) * CHUNK
    return row, lo, min(inner, lo + CHUNK)


# ----------------------------------------------------------------------------- serial row loops
# Parallel kernels find each work item's row with row_position (a division per dim and operand).
# Serial kernels loop over rows directly: layouts collapse to at most three dims almost always,
# so they walk (outer, middle) rows with every extent and stride held in a local scalar. (Read
# from the stride arrays inside the loop, LLVM reloads them after every store to the output,
# and short rows, such as a (64, 64, 121) permute's 4096 rows, run 5x slower.)
@njit(inline="always")
def extent3(shape):
    """(outer, middle, inner) extents of a layout of at most three dims."""
    n = shape.size
    return (shape[0] if n == 3 else 1), (shape[n - 2] if n >= 2 else 1), shape[n - 1]


@njit(inline="always")
def strides3(strides):
    """(outer, middle, inner) strides, matching extent3 (0 for the dims it adds)."""
    n = strides.size
    return (strides[0] if n == 3 else 0), (strides[n - 2] if n >= 2 else 0), strides[n - 1]


@njit(inline="always")
def flat_position(flat, shape, strides, offset):
    pos = offset
    rest = flat + 0
    for d in range(shape.size - 1, -1, -1):
        n = shape[d]
        pos += (rest % n) * strides[d]
        rest //= n
    return pos
