"""The box math of minidl.dist.checkpoint (slices.py) against numpy: a box is a boolean mask of the global
array, an overlap the mask's AND, and the runs of a sub-box (or its span, cut by strides) the flat row-major
indices numpy gathers."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minidl.dist.checkpoint.slices import overlap, row_major_strides, run_count, runs, span, split_rows


@st.composite
def boxes_in(draw, shape):
    """A box (offsets, sizes) inside an array of ``shape``; empty extents included."""
    offsets, sizes = [], []
    for n in shape:
        o = draw(st.integers(0, n))
        offsets.append(o)
        sizes.append(draw(st.integers(0, n - o)))
    return tuple(offsets), tuple(sizes)


shapes = st.lists(st.integers(0, 6), min_size=0, max_size=4).map(tuple)


def mask(shape, offsets, sizes):
    m = np.zeros(shape, bool)
    m[tuple(slice(o, o + s) for o, s in zip(offsets, sizes))] = True
    return m


@given(st.data(), shapes)
def test_overlap_is_the_intersection_of_masks(data, shape):
    a, b = data.draw(boxes_in(shape)), data.draw(boxes_in(shape))
    both = mask(shape, *a) & mask(shape, *b)
    found = overlap(*a, *b)
    if not both.any():
        assert found is None
    else:
        assert found is not None
        np.testing.assert_array_equal(mask(shape, *found), both)
        assert overlap(*b, *a) == found


def _gathered(box_sizes, rel, sub_sizes):
    """The flat row-major indices, within a box of ``box_sizes``, of its sub-box at ``rel``."""
    ids = np.arange(int(np.prod(box_sizes, dtype=np.int64))).reshape(box_sizes)
    return ids[tuple(slice(o, o + s) for o, s in zip(rel, sub_sizes))].ravel()


@given(st.data(), shapes, st.lists(st.integers(0, 5), min_size=4, max_size=4))
def test_runs_gather_the_sub_box_row_major(data, box_sizes, base):
    rel, sub_sizes = data.draw(boxes_in(box_sizes))
    box_offsets = tuple(base[:len(box_sizes)])             # the box's own place in a global tensor
    sub_offsets = tuple(b + r for b, r in zip(box_offsets, rel))
    found = runs(box_offsets, box_sizes, sub_offsets, sub_sizes)
    flat = np.concatenate([np.arange(s, s + n) for s, n in found]) if found else np.empty(0, np.int64)
    np.testing.assert_array_equal(flat, _gathered(box_sizes, rel, sub_sizes))
    if flat.size:   # merged as far as row-major order allows: no two runs abut
        assert all(n > 0 for _, n in found)
        assert all(s + n < t for (s, n), (t, _) in zip(found, found[1:]))


@pytest.mark.parametrize("box, sub, expected", [
    (((), ()), ((), ()), [(0, 1)]),                                  # 0-d: one element
    (((0, 0), (4, 3)), ((1, 0), (2, 3)), [(3, 6)]),                  # a row split: one run
    (((0, 0), (4, 3)), ((0, 1), (4, 1)), [(1, 1), (4, 1), (7, 1), (10, 1)]),   # a column: one per row
    (((2, 10), (3, 4)), ((3, 11), (2, 2)), [(5, 2), (9, 2)]),        # the box not at the origin
    (((0, 0), (0, 3)), ((0, 0), (0, 3)), []),                        # an empty box
])
def test_runs_known_cases(box, sub, expected):
    assert runs(*box, *sub) == expected


@given(shapes.filter(len), st.lists(st.integers(0, 9), min_size=4, max_size=4), st.integers(1, 8))
def test_split_rows_is_numpy_array_split(sizes, offsets, parts):
    offsets = tuple(offsets[:len(sizes)])
    pieces = split_rows(offsets, sizes, parts)
    rows = [r for r in np.array_split(np.arange(sizes[0]), parts) if r.size]
    assert len(pieces) == len(rows) <= parts
    for (o, s), r in zip(pieces, rows):
        assert o == (offsets[0] + r[0], *offsets[1:])
        assert s == (r.size, *sizes[1:])


@given(st.data(), shapes)
def test_a_span_cut_by_strides_is_the_sub_box(data, box_sizes):
    """The loader's path for many runs: the elements from the sub-box's first to just after its last, viewed
    with the box's row-major strides, are the sub-box; run_count is how many runs ``runs`` gives."""
    rel, sub_sizes = data.draw(boxes_in(box_sizes))
    if 0 in sub_sizes:   # (an empty overlap is never read)
        return
    zeros = (0,) * len(box_sizes)
    assert run_count(box_sizes, sub_sizes) == len(runs(zeros, box_sizes, rel, sub_sizes))
    want = _gathered(box_sizes, rel, sub_sizes)
    start, stop = span(zeros, box_sizes, rel, sub_sizes)
    assert (start, stop) == (want[0], want[-1] + 1)
    flat = np.arange(int(np.prod(box_sizes, dtype=np.int64)))
    cut = np.lib.stride_tricks.as_strided(flat[start:stop], sub_sizes,
                                          [n * flat.itemsize for n in row_major_strides(box_sizes)])
    np.testing.assert_array_equal(cut.ravel(), want)
