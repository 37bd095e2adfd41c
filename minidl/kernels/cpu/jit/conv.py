"""Convolution and pooling kernels: im2col, col2im, max_pool2d and its backward.

Planes are the (batch, channel) pairs of a contiguous (N, C, H, W) input, numbered p = n*C + c.
A column buffer is (C*kh*kw, N, oh*ow) for ``chans`` = C: row c*kh*kw + ki*kw + kj, image n,
window position i*ow + j. With chans = planes (N taken as 1) that is the (N, C*kh*kw, oh*ow)
layout of unfold, where plane p owns rows p*kh*kw ... (p+1)*kh*kw - 1.
The wrapper validated every size, so no index here can leave its buffer.
"""
from numba import njit, prange


@njit(inline="always")
def _valid_columns(off, w, sw, ow):
    """The window columns j with 0 <= j*sw + off < w, as a range [lo, hi)."""
    lo = 0 if off >= 0 else (sw - 1 - off) // sw
    hi = (w - 1 - off) // sw + 1
    hi = min(max(hi, 0), ow)
    return min(lo, hi), hi


@njit(inline="always")
def _im2col_plane(x, out, p, chans, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow):
    L = oh * ow
    images = planes // chans
    rstride = images * L                                   # from one column row to the next
    base = ((p % chans) * kh * kw * images + p // chans) * L
    xbase = p * h * w
    for ki in range(kh):
        for kj in range(kw):
            row = base + (ki * kw + kj) * rstride
            off = kj * dw - pw
            lo, hi = _valid_columns(off, w, sw, ow)
            for i in range(oh):
                y = i * sh - ph + ki * dh
                o = row + i * ow
                if y < 0 or y >= h:
                    for j in range(ow):
                        out[o + j] = 0
                    continue
                src = xbase + y * w + off
                for j in range(lo):
                    out[o + j] = 0
                if sw == 1:
                    for j in range(lo, hi):
                        out[o + j] = x[src + j]
                else:
                    for j in range(lo, hi):
                        out[o + j] = x[src + j * sw]
                for j in range(hi, ow):
                    out[o + j] = 0


@njit(inline="always")
def _im2col_plane_dense(x, out, p, chans, planes, h, w, kh, kw, oh, ow):
    """_im2col_plane for stride 1, no padding, no dilation: each tap is a sub-block of the image.
    (2-D views indexed by loop counters: no index can be negative, so the copies vectorise.)"""
    L = oh * ow
    images = planes // chans
    rstride = images * L
    base = ((p % chans) * kh * kw * images + p // chans) * L
    img = x[p * h * w:(p + 1) * h * w].reshape(h, w)
    for ki in range(kh):
        for kj in range(kw):
            row = base + (ki * kw + kj) * rstride
            dst = out[row:row + L].reshape(oh, ow)
            src = img[ki:ki + oh, kj:kj + ow]
            for i in range(oh):
                for j in range(ow):
                    dst[i, j] = src[i, j]


@njit(inline="always")
def _im2col_any(x, out, p, chans, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow):
    if sh == 1 and sw == 1 and ph == 0 and pw == 0 and dh == 1 and dw == 1:
        _im2col_plane_dense(x, out, p, chans, planes, h, w, kh, kw, oh, ow)
    else:
        _im2col_plane(x, out, p, chans, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)


@njit(cache=True, nogil=True)
def im2col_serial(x, out, chans, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow):
    for p in range(planes):
        _im2col_any(x, out, p, chans, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)


@njit(cache=True, nogil=True, parallel=True)
def im2col_parallel(x, out, chans, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow):
    for p in prange(planes):
        _im2col_any(x, out, p, chans, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)


@njit(inline="always")
def _col2im_plane(col, out, p, chans, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow):
    """out[plane p] = the sum of the column entries that im2col read from it (one plane: no races)."""
    L = oh * ow
    images = planes // chans
    rstride = images * L
    base = ((p % chans) * kh * kw * images + p // chans) * L
    img = out[p * h * w:(p + 1) * h * w]       # slices indexed from 0 by loop counters vectorise
    for q in range(h * w):
        img[q] = 0
    for ki in range(kh):
        for kj in range(kw):
            row = base + (ki * kw + kj) * rstride
            off = kj * dw - pw
            lo, hi = _valid_columns(off, w, sw, ow)
            for i in range(oh):
                y = i * sh - ph + ki * dh
                if y < 0 or y >= h:
                    continue
                c = col[row + i * ow + lo:row + i * ow + hi]
                if sw == 1:
                    d = img[y * w + off + lo:y * w + off + hi]
                    for j in range(hi - lo):
                        d[j] += c[j]
                else:
                    d = img[y * w:(y + 1) * w]
                    for j in range(hi - lo):
                        d[(j + lo) * sw + off] += c[j]


@njit(cache=True, nogil=True)
def col2im_serial(col, out, chans, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow):
    for p in range(planes):
        _col2im_plane(col, out, p, chans, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)


@njit(cache=True, nogil=True, parallel=True)
def col2im_parallel(col, out, chans, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow):
    for p in prange(planes):
        _col2im_plane(col, out, p, chans, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)


@njit(inline="always")
def _max_pool_plane(x, out, idx, p, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow):
    """Max over each window (padding never wins); idx is the flat h*w position in the plane.
    The first maximum wins; NaN propagates (it is taken and kept)."""
    xbase = p * h * w
    obase = p * oh * ow
    for i in range(oh):
        for j in range(ow):
            best = x[xbase]
            at = -1
            for ki in range(kh):
                y = i * sh - ph + ki * dh
                if y < 0 or y >= h:
                    continue
                for kj in range(kw):
                    xx = j * sw - pw + kj * dw
                    if xx < 0 or xx >= w:
                        continue
                    v = x[xbase + y * w + xx]
                    if at < 0 or v > best or (v != v and best == best):
                        best = v
                        at = y * w + xx
            out[obase + i * ow + j] = best
            idx[obase + i * ow + j] = at


@njit(inline="always")
def _max_pool_plane_dense(x, out, idx, p, h, w, kh, kw, sh, sw, oh, ow):
    """_max_pool_plane without padding or dilation (every tap lies in the image), ignoring NaN;
    returns whether the plane holds a NaN (then the caller redoes it with _max_pool_plane)."""
    xbase = p * h * w
    obase = p * oh * ow
    nan = False
    for i in range(oh):
        y0 = i * sh
        o = obase + i * ow
        for j in range(ow):
            x0 = j * sw
            at = y0 * w + x0
            best = x[xbase + at]
            for ki in range(kh):
                r = (y0 + ki) * w + x0
                for kj in range(kw):
                    v = x[xbase + r + kj]
                    nan |= v != v
                    if v > best:
                        best = v
                        at = r + kj
            out[o + j] = best
            idx[o + j] = at
    return nan


@njit(inline="always")
def _max_pool_plane_2x2(x, out, idx, p, h, w, sh, sw, oh, ow):
    """_max_pool_plane_dense for the common 2x2 window: with the four taps written out, the
    comparisons compile to selects instead of branches that random data mispredicts (3x faster).
    NaN shows up in the sum of the taps (so may inf - inf: then the exact path just redoes it)."""
    xbase = p * h * w
    obase = p * oh * ow
    nan = False
    for i in range(oh):
        r = i * sh * w
        o = obase + i * ow
        for j in range(ow):
            at = r + j * sw
            a = x[xbase + at]
            b = x[xbase + at + 1]
            c = x[xbase + at + w]
            d = x[xbase + at + w + 1]
            best = a
            if b > best:
                best = b
                at = r + j * sw + 1
            if c > best:
                best = c
                at = r + j * sw + w
            if d > best:
                best = d
                at = r + j * sw + w + 1
            total = a + b + c + d
            nan |= total != total
            out[o + j] = best
            idx[o + j] = at
    return nan


@njit(inline="always")
def _max_pool_any(x, out, idx, p, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow):
    # (the dense paths read whole windows: only when every window lies inside the plane, which a
    # ceil_mode window hanging over the edge does not)
    if ph == 0 and pw == 0 and dh == 1 and dw == 1 and (oh - 1) * sh + kh <= h and (ow - 1) * sw + kw <= w:
        if kh == 2 and kw == 2:
            if not _max_pool_plane_2x2(x, out, idx, p, h, w, sh, sw, oh, ow):
                return
        elif not _max_pool_plane_dense(x, out, idx, p, h, w, kh, kw, sh, sw, oh, ow):
            return
    _max_pool_plane(x, out, idx, p, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)


@njit(cache=True, nogil=True)
def max_pool2d_serial(x, out, idx, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow):
    for p in range(planes):
        _max_pool_any(x, out, idx, p, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)


@njit(cache=True, nogil=True, parallel=True)
def max_pool2d_parallel(x, out, idx, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow):
    for p in prange(planes):
        _max_pool_any(x, out, idx, p, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)


@njit(inline="always")
def _max_pool_backward_plane(g, idx, out, p, hw, L):
    """out[plane p] = 0, then out[plane p][idx] += g (indices outside the plane are skipped)."""
    obase = p * hw
    gbase = p * L
    for q in range(hw):
        out[obase + q] = 0
    for k in range(L):
        q = idx[gbase + k]
        if q >= 0 and q < hw:
            out[obase + q] += g[gbase + k]


@njit(cache=True, nogil=True)
def max_pool2d_backward_serial(g, idx, out, planes, hw, L):
    for p in range(planes):
        _max_pool_backward_plane(g, idx, out, p, hw, L)


@njit(cache=True, nogil=True, parallel=True)
def max_pool2d_backward_parallel(g, idx, out, planes, hw, L):
    for p in prange(planes):
        _max_pool_backward_plane(g, idx, out, p, hw, L)
