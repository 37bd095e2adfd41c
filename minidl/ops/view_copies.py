"""torch's ``*_copy`` ops: each a view op followed by a packed copy (torch's functionalised views),
all made by one helper from the view they copy."""
from __future__ import annotations

from . import shape_ops, stacking, views
from .registry import op


def _copied(name, view):
    """The op ``name``: ``view``'s result (or each of its results) copied into fresh memory."""
    def copy(x, *args, **kwargs):
        out = view(x, *args, **kwargs)
        return tuple(views.clone(o) for o in out) if isinstance(out, tuple) else views.clone(out)
    copy.__name__ = copy.__qualname__ = name
    copy.__doc__ = f"A packed copy of what ``{view.__name__}`` gives (no view of ``x``)."
    return copy


def _alias(x):
    return x


def _expand(x, size, *, implicit=False):
    return views.expand(x, size)


def _view(x, size):
    return views.view(x, size)


def _permute(x, dims):
    return views.permute(x, dims)


alias_copy = op("alias_copy", method=False, samples=lambda t: [
    t.S("alias_copy", lambda x: alias_copy(x), t.rn(2, 3))])(_copied("alias_copy", _alias))
as_strided_copy = op("as_strided_copy", method=False, samples=lambda t: [
    t.S("as_strided_copy", lambda x: as_strided_copy(x, (2, 2), (1, 2)), t.rn(2, 3), any_layout=False)])(
    _copied("as_strided_copy", views.as_strided))
diagonal_copy = op("diagonal_copy", method=False, samples=lambda t: [
    t.S("diagonal_copy", lambda x: diagonal_copy(x, 1, 1, 0), t.NC(t.rn(3, 4), "F"))])(
    _copied("diagonal_copy", views.diagonal))
expand_copy = op("expand_copy", method=False, samples=lambda t: [
    t.S("expand_copy", lambda x: expand_copy(x, (2, 3, 2)), t.rn(3, 1))])(_copied("expand_copy", _expand))
narrow_copy = op("narrow_copy", samples=lambda t: [   # (a Tensor method too, as in torch)
    t.S("narrow_copy", lambda x: x.narrow_copy(1, 1, 2), t.rn(2, 4))])(_copied("narrow_copy", views.narrow))
permute_copy = op("permute_copy", method=False, samples=lambda t: [
    t.S("permute_copy", lambda x: permute_copy(x, (1, 0, 2)), t.rn(2, 3, 2))])(_copied("permute_copy", _permute))
split_with_sizes_copy = op("split_with_sizes_copy", method=False, samples=lambda t: [
    t.S("split_with_sizes_copy", lambda x: split_with_sizes_copy(x, [1, 2], 1), t.rn(2, 3))])(
    _copied("split_with_sizes_copy", stacking.split_with_sizes))
squeeze_copy = op("squeeze_copy", method=False, samples=lambda t: [
    t.S("squeeze_copy", lambda x: squeeze_copy(x, 1), t.rn(3, 1, 2))])(_copied("squeeze_copy", views.squeeze))
t_copy = op("t_copy", method=False, samples=lambda t: [
    t.S("t_copy", lambda x: t_copy(x), t.NC(t.rn(3, 2), "F"))])(_copied("t_copy", views.t))
transpose_copy = op("transpose_copy", method=False, samples=lambda t: [
    t.S("transpose_copy", lambda x: transpose_copy(x, 0, -1), t.rn(2, 3, 4))])(
    _copied("transpose_copy", views.transpose))
unbind_copy = op("unbind_copy", method=False, samples=lambda t: [
    t.S("unbind_copy", lambda x: unbind_copy(x, 1), t.rn(2, 3))])(_copied("unbind_copy", shape_ops.unbind))
unfold_copy = op("unfold_copy", method=False, samples=lambda t: [
    t.S("unfold_copy", lambda x: unfold_copy(x, 1, 2, 1), t.rn(2, 4))])(_copied("unfold_copy", views.unfold_windows))
unsqueeze_copy = op("unsqueeze_copy", method=False, samples=lambda t: [
    t.S("unsqueeze_copy", lambda x: unsqueeze_copy(x, -1), t.rn(3, 2))])(_copied("unsqueeze_copy", views.unsqueeze))
view_copy = op("view_copy", method=False, samples=lambda t: [
    t.S("view_copy", lambda x: view_copy(x, (3, 2)), t.rn(2, 3), any_layout=False)])(_copied("view_copy", _view))
