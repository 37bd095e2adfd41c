// Convolution and pooling: im2col, col2im, max_pool2d and its backward, with the geometry of
// minidl/kernels/__init__.py: planes = N*C contiguous h*w images, kernel kh*kw, stride sh*sw, padding
// ph*pw, dilation dh*dw, output oh*ow. Window (i, j) tap (ki, kj) reads image row
// i*sh - ph + ki*dh, column j*sw - pw + kj*dw. The columns are (C*kh*kw, N, oh*ow): row
// c*kh*kw + ki*kw + kj; chans = C (chans = planes gives unfold's (N, C*kh*kw, oh*ow) layout).
// Every buffer is contiguous from element 0; the wrapper checked their sizes.

struct Geometry {
    long long planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow;
};

// im2col: one thread per column element, so writes are coalesced and reads nearly so (taps of
// neighbouring windows are sw apart).
#define IM2COL_KERNEL(suffix, T)                                                                  \
    extern "C" __global__ void im2col_##suffix(const T *x, T *cols, const Geometry g, long long chans) { \
        long long L = g.oh * g.ow, images = g.planes / chans;                                    \
        long long n = g.planes * g.kh * g.kw * L;                                                 \
        GRID_STRIDE_LOOP(e, n) {                                                                  \
            long long pos = e % L, t = e / L;                                                     \
            long long image = t % images, row = t / images;                                      \
            long long kj = row % g.kw, ki = (row / g.kw) % g.kh, c = row / (g.kw * g.kh);         \
            long long y = (pos / g.ow) * g.sh - g.ph + ki * g.dh;                                 \
            long long x_ = (pos % g.ow) * g.sw - g.pw + kj * g.dw;                                \
            bool inside = y >= 0 && y < g.h && x_ >= 0 && x_ < g.w;                               \
            cols[e] = inside ? x[((image * chans + c) * g.h + y) * g.w + x_] : (T)0;              \
        }                                                                                         \
    }
FOR_FLOAT_DTYPES(IM2COL_KERNEL)

// The windows along one axis that tap image coordinate v with tap k: the i with
// i*s - p + k*d == v and 0 <= i < o, or -1.
__device__ __forceinline__ long long window_of(long long v, long long k, long long s, long long p, long long d,
                                               long long o) {
    long long t = v + p - k * d;
    if (t < 0 || t % s) return -1;
    t /= s;
    return t < o ? t : -1;
}

// col2im as a gather: one thread per image element sums the column entries of every window tap
// that reads it, so no two threads write the same place and no atomics are needed.
#define COL2IM_KERNEL(suffix, T)                                                                  \
    extern "C" __global__ void col2im_##suffix(const T *cols, T *x, const Geometry g, long long chans) { \
        long long L = g.oh * g.ow, images = g.planes / chans, hw = g.h * g.w;                    \
        GRID_STRIDE_LOOP(e, g.planes * hw) {                                                      \
            long long p = e / hw, q = e - p * hw, y = q / g.w, x_ = q - y * g.w;                  \
            long long base = (p % chans) * g.kh * g.kw * images + p / chans;                      \
            T sum = 0;                                                                            \
            for (long long ki = 0; ki < g.kh; ++ki) {                                             \
                long long i = window_of(y, ki, g.sh, g.ph, g.dh, g.oh);                           \
                if (i < 0) continue;                                                              \
                for (long long kj = 0; kj < g.kw; ++kj) {                                         \
                    long long j = window_of(x_, kj, g.sw, g.pw, g.dw, g.ow);                      \
                    if (j >= 0) sum += cols[(base + (ki * g.kw + kj) * images) * L + i * g.ow + j]; \
                }                                                                                 \
            }                                                                                     \
            x[e] = sum;                                                                           \
        }                                                                                         \
    }
FOR_FLOAT_DTYPES(COL2IM_KERNEL)

// max_pool2d: one thread per output; taps outside the image are skipped. The first maximum wins
// and NaN propagates (it is taken and kept); a window with no tap inside keeps the plane's first
// element and index -1, as on the CPU.
#define MAX_POOL_KERNEL(suffix, T)                                                                \
    extern "C" __global__ void max_pool2d_##suffix(const T *x, T *out, long long *index, const Geometry g) { \
        long long L = g.oh * g.ow;                                                                \
        GRID_STRIDE_LOOP(e, g.planes * L) {                                                       \
            long long p = e / L, pos = e - p * L;                                                 \
            const T *plane = x + p * g.h * g.w;                                                   \
            long long y0 = (pos / g.ow) * g.sh - g.ph, x0 = (pos % g.ow) * g.sw - g.pw;           \
            T best = plane[0];                                                                    \
            long long at = -1;                                                                    \
            for (long long ki = 0; ki < g.kh; ++ki) {                                             \
                long long y = y0 + ki * g.dh;                                                     \
                if (y < 0 || y >= g.h) continue;                                                  \
                for (long long kj = 0; kj < g.kw; ++kj) {                                         \
                    long long x_ = x0 + kj * g.dw;                                                \
                    if (x_ < 0 || x_ >= g.w) continue;                                            \
                    T v = plane[y * g.w + x_];                                                    \
                    if (at < 0 || v > best || (v != v && best == best)) {                         \
                        best = v;                                                                 \
                        at = y * g.w + x_;                                                        \
                    }                                                                             \
                }                                                                                 \
            }                                                                                     \
            out[e] = best;                                                                        \
            index[e] = at;                                                                        \
        }                                                                                         \
    }
FOR_FLOAT_DTYPES(MAX_POOL_KERNEL)

// max_pool2d_backward after grad_in was zeroed: one thread per output gradient adds it at its
// index (overlapping windows may pick the same element: atomics); indices outside the plane
// are skipped.
#define MAX_POOL_BACKWARD_KERNEL(suffix, T)                                                       \
    extern "C" __global__ void max_pool2d_backward_##suffix(const T *grad, const long long *index, \
                                                            T *grad_in, long long planes,         \
                                                            long long hw, long long L) {          \
        GRID_STRIDE_LOOP(e, planes * L) {                                                         \
            long long q = index[e];                                                               \
            if (q >= 0 && q < hw) atomicAdd(grad_in + (e / L) * hw + q, grad[e]);                 \
        }                                                                                         \
    }
FOR_FLOAT_DTYPES(MAX_POOL_BACKWARD_KERNEL)
