// Layer, RMS and group norm over packed rows of n elements (the norm_rows pair of minidl/kernels/__init__.py).
// The forward and dx take a warp per short row or the block per long one (rows.cuh); the moments are two
// reductions (mean, then squared deviations from it: as exact as the CPU's two passes). The parameter
// gradients are sums over rows, each parameter's elements shared out to threads of a block.
// A null w or b is 1 or 0; a null dw or db is not written.

#include "rows.cuh"  // lanes_reduce and FOR_EACH_ROW

// The affine parameter of element j of row `row`.
__device__ __forceinline__ long long param_of(long long row, long long j, long long n, long long span,
                                              long long cycle) {
    return (row % cycle) * (n / span) + j / span;
}

template <class T> __device__ void norm_rows_forward(const T *x, const T *w, const T *b, T *out, T *mean, T *rstd,
                                                     long long rows, long long n, long long span, long long cycle,
                                                     T eps, int rms, int lanes) {
    int lane = threadIdx.x % lanes;
    FOR_EACH_ROW(row, rows, lanes) {
        const T *xr = x + row * n;
        T *o = out + row * n;
        T m = 0;
        if (!rms) {
            for (long long j = lane; j < n; j += lanes) m += xr[j];
            m = lanes_reduce<false>(m, lanes) / (T)n;
        }
        T q = 0;
        for (long long j = lane; j < n; j += lanes) q += (xr[j] - m) * (xr[j] - m);
        T s = (T)1 / m_sqrt(lanes_reduce<false>(q, lanes) / (T)n + eps);
        if (lane == 0) {
            mean[row] = m;
            rstd[row] = s;
        }
        for (long long j = lane; j < n; j += lanes) {
            long long p = param_of(row, j, n, span, cycle);
            o[j] = (xr[j] - m) * s * (w ? w[p] : (T)1) + (b ? b[p] : (T)0);
        }
    }
}

template <class T> __device__ void norm_rows_dx(const T *x, const T *w, const T *mean, const T *rstd, const T *g,
                                                T *dx, long long rows, long long n, long long span, long long cycle,
                                                int rms, int lanes) {
    int lane = threadIdx.x % lanes;
    FOR_EACH_ROW(row, rows, lanes) {
        const T *xr = x + row * n, *gr = g + row * n;
        T *d = dx + row * n;
        T m = mean[row], s = rstd[row], a = 0, c = 0;
        for (long long j = lane; j < n; j += lanes) {
            T gy = gr[j] * (w ? w[param_of(row, j, n, span, cycle)] : (T)1);
            a += gy;
            c += gy * (xr[j] - m) * s;
        }
        a = rms ? (T)0 : lanes_reduce<false>(a, lanes) / (T)n;
        c = lanes_reduce<false>(c, lanes) / (T)n;
        for (long long j = lane; j < n; j += lanes) {
            T gy = gr[j] * (w ? w[param_of(row, j, n, span, cycle)] : (T)1);
            d[j] = s * (gy - a - (xr[j] - m) * s * c);
        }
    }
}

// The parameter gradients: a block takes `together` consecutive parameters (32 for layer/RMS norm, whose
// neighbours are neighbouring columns, so a warp's reads coalesce; 1 for group norm, whose parameter owns
// runs of `span`), each shared by blockDim.x / together threads. Parameter p's elements lie in rows
// p / (n / span) + i * cycle, at (p % (n / span)) * span onwards. blockDim.x is at most NORM_PARAMS_THREADS.
#define NORM_PARAMS_THREADS 256
template <class T> __device__ void norm_rows_params(const T *x, const T *mean, const T *rstd, const T *g, T *dw,
                                                    T *db, long long rows, long long n, long long span,
                                                    long long cycle, int together) {
    __shared__ T partial[2 * NORM_PARAMS_THREADS];
    long long per = n / span, params = cycle * per;
    int slices = blockDim.x / together, k = threadIdx.x / together;
    for (long long p0 = (long long)blockIdx.x * together; p0 < params; p0 += (long long)gridDim.x * together) {
        long long p = p0 + threadIdx.x % together;
        T sw = 0, sb = 0;
        if (p < params) {
            long long first = p / per, start = (p % per) * span;
            long long items = (rows > first ? (rows - first + cycle - 1) / cycle : 0) * span;
            for (long long i = k; i < items; i += slices) {
                long long row = first + (i / span) * cycle, at = row * n + start + i % span;
                sw += g[at] * (x[at] - mean[row]) * rstd[row];
                sb += g[at];
            }
        }
        partial[threadIdx.x] = sw;
        partial[NORM_PARAMS_THREADS + threadIdx.x] = sb;
        __syncthreads();
        if (k == 0 && p < params) {
            for (int j = 1; j < slices; ++j) {
                sw += partial[j * together + threadIdx.x];
                sb += partial[NORM_PARAMS_THREADS + j * together + threadIdx.x];
            }
            if (dw) dw[p] = sw;
            if (db) db[p] = sb;
        }
        __syncthreads();  // partial is refilled by the next parameters
    }
}

#define NORM_ROWS_KERNELS(suffix, T)                                                                             \
    extern "C" __global__ void norm_rows_##suffix(const T *x, const T *w, const T *b, T *out, T *mean, T *rstd,   \
                                                  long long rows, long long n, long long span, long long cycle,  \
                                                  T eps, int rms, int lanes) {                                   \
        norm_rows_forward(x, w, b, out, mean, rstd, rows, n, span, cycle, eps, rms, lanes);                      \
    }                                                                                                            \
    extern "C" __global__ void norm_rows_dx_##suffix(const T *x, const T *w, const T *mean, const T *rstd,        \
                                                     const T *g, T *dx, long long rows, long long n,             \
                                                     long long span, long long cycle, int rms, int lanes) {      \
        norm_rows_dx(x, w, mean, rstd, g, dx, rows, n, span, cycle, rms, lanes);                                 \
    }                                                                                                            \
    extern "C" __global__ void norm_rows_params_##suffix(const T *x, const T *mean, const T *rstd, const T *g,    \
                                                         T *dw, T *db, long long rows, long long n,              \
                                                         long long span, long long cycle, int together) {        \
        norm_rows_params(x, mean, rstd, g, dw, db, rows, n, span, cycle, together);                              \
    }
FOR_FLOAT_DTYPES(NORM_ROWS_KERNELS)
