// Softmax and log-softmax over packed rows of n elements, forward and backward (the formulas of
// minidl/kernels/__init__.py). A warp per row for short rows, the whole block per row for long ones
// (`lanes` = 32 or blockDim.x); the row max and sums are reductions across the lanes, in the
// row's dtype as on the CPU, and exp is taken once per element.

#include "rows.cuh"  // lanes_reduce and FOR_EACH_ROW

template <class T> __device__ void softmax_rows(const T *x, T *out, long long rows, long long n, int log_,
                                                int lanes) {
    int lane = threadIdx.x % lanes;
    FOR_EACH_ROW(row, rows, lanes) {
        const T *xr = x + row * n;
        T *yr = out + row * n;
        T m = (T)(-1.0 / 0.0);
        for (long long j = lane; j < n; j += lanes) m = (xr[j] > m || xr[j] != xr[j]) ? xr[j] : m;
        m = lanes_reduce<true>(m, lanes);
        T s = 0;
        for (long long j = lane; j < n; j += lanes) {
            T e = m_exp(xr[j] - m);
            if (!log_) yr[j] = e;
            s += e;
        }
        s = lanes_reduce<false>(s, lanes);
        if (log_) {
            T ls = m_log(s);
            for (long long j = lane; j < n; j += lanes) yr[j] = (xr[j] - m) - ls;
        } else {
            for (long long j = lane; j < n; j += lanes) yr[j] = yr[j] / s;  // this lane's own writes
        }
    }
}

template <class T> __device__ void softmax_backward_rows(const T *y, const T *g, T *out, long long rows,
                                                         long long n, int log_, int lanes) {
    int lane = threadIdx.x % lanes;
    FOR_EACH_ROW(row, rows, lanes) {
        const T *yr = y + row * n, *gr = g + row * n;
        T *o = out + row * n;
        T s = 0;
        for (long long j = lane; j < n; j += lanes) s += log_ ? gr[j] : gr[j] * yr[j];
        s = lanes_reduce<false>(s, lanes);
        for (long long j = lane; j < n; j += lanes) o[j] = log_ ? gr[j] - m_exp(yr[j]) * s : yr[j] * (gr[j] - s);
    }
}

#define SOFTMAX_KERNELS(suffix, T)                                                                     \
    extern "C" __global__ void softmax_##suffix(const T *x, T *out, long long rows, long long n,       \
                                                int log_, int lanes) {                                 \
        softmax_rows(x, out, rows, n, log_, lanes);                                                    \
    }                                                                                                  \
    extern "C" __global__ void softmax_backward_##suffix(const T *y, const T *g, T *out,               \
                                                         long long rows, long long n, int log_,        \
                                                         int lanes) {                                  \
        softmax_backward_rows(y, g, out, rows, n, log_, lanes);                                        \
    }
FOR_FLOAT_DTYPES(SOFTMAX_KERNELS)
