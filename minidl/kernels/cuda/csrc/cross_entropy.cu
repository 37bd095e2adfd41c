// Cross-entropy (or the negative log-likelihood) of packed rows of n classes, forward and backward (the
// formulas of minidl/kernels/__init__.py): a warp per row, the row max and sums reduced across its lanes by
// shuffles, in the row's dtype as on the CPU. weight == nullptr means every class weighs 1. A target out of
// range is recorded with report_index_error and its row is left as ignored.

#include "rows.cuh"  // lanes_reduce, FOR_EACH_ROW: here a warp (32 lanes) per row

// Whether row target t takes part (not ignore_index, and in range: a bad one is reported).
__device__ __forceinline__ bool counted(long long t, long long n, long long ignore, long long *error, int lane) {
    if (t == ignore) return false;
    if (t < 0 || t >= n) {
        if (lane == 0) report_index_error(error, t, n);
        return false;
    }
    return true;
}

template <class T>
__device__ void cross_entropy_rows(const T *x, const long long *target, const T *weight, T *out, T *wrow, T *stats,
                                   long long rows, long long n, long long ignore, T eps, int logits,
                                   long long *error) {
    int lane = threadIdx.x % 32;
    FOR_EACH_ROW(row, rows, 32) {
        const T *xr = x + row * n;
        T m = 0, ls = 0;
        if (logits) {
            m = (T)(-1.0 / 0.0);
            for (long long j = lane; j < n; j += 32) m = (xr[j] > m || xr[j] != xr[j]) ? xr[j] : m;
            m = lanes_reduce<true>(m, 32);
            T e = 0;
            for (long long j = lane; j < n; j += 32) e += m_exp(xr[j] - m);
            ls = m_log(lanes_reduce<false>(e, 32));
            if (lane == 0) stats[2 * row] = m, stats[2 * row + 1] = ls;
        }
        long long t = target[row];
        bool valid = counted(t, n, ignore, error, lane);
        T smooth = 0;
        if (valid && eps > (T)0) {
            for (long long j = lane; j < n; j += 32) smooth += (weight ? weight[j] : (T)1) * (ls - (xr[j] - m));
            smooth = lanes_reduce<false>(smooth, 32);
        }
        if (lane == 0) {
            T wt = valid ? (weight ? weight[t] : (T)1) : (T)0;
            out[row] = valid ? ((T)1 - eps) * wt * (ls - (xr[t] - m)) + eps / (T)n * smooth : (T)0;
            wrow[row] = wt;
        }
    }
}

template <class T>
__device__ void cross_entropy_backward_rows(const T *x, const long long *target, const T *weight, const T *stats,
                                            const T *g, long long g_rows, T *out, long long rows, long long n,
                                            long long ignore, T eps, int logits) {
    int lane = threadIdx.x % 32;
    FOR_EACH_ROW(row, rows, 32) {
        const T *xr = x + row * n;
        T *o = out + row * n;
        long long t = target[row];
        if (t == ignore || t < 0 || t >= n) {  // (the forward reported a bad target)
            for (long long j = lane; j < n; j += 32) o[j] = 0;
            continue;
        }
        T gr = g[g_rows > 1 ? row : 0];
        T wt = weight ? weight[t] : (T)1;
        T total = (T)n;
        if (weight && eps > (T)0) {
            total = 0;
            for (long long j = lane; j < n; j += 32) total += weight[j];
            total = lanes_reduce<false>(total, 32);
        }
        T coef = gr * (((T)1 - eps) * wt + eps * total / (T)n), uniform = gr * eps / (T)n;
        T m = logits ? stats[2 * row] : 0, ls = logits ? stats[2 * row + 1] : 0;
        for (long long j = lane; j < n; j += 32) {
            T v = logits ? coef * m_exp((xr[j] - m) - ls) - uniform * (weight ? weight[j] : (T)1) : (T)0;
            o[j] = j == t ? v - gr * ((T)1 - eps) * wt : v;
        }
    }
}

#define CROSS_ENTROPY_KERNELS(suffix, T)                                                               \
    extern "C" __global__ void cross_entropy_##suffix(const T *x, const long long *target, const T *weight, \
                                                      T *out, T *wrow, T *stats, long long rows, long long n, \
                                                      long long ignore, T eps, int logits, long long *error) { \
        cross_entropy_rows(x, target, weight, out, wrow, stats, rows, n, ignore, eps, logits, error);    \
    }                                                                                                  \
    extern "C" __global__ void cross_entropy_backward_##suffix(                                        \
        const T *x, const long long *target, const T *weight, const T *stats, const T *g, long long g_rows, \
        T *out, long long rows, long long n, long long ignore, T eps, int logits) {                    \
        cross_entropy_backward_rows(x, target, weight, stats, g, g_rows, out, rows, n, ignore, eps, logits); \
    }
FOR_FLOAT_DTYPES(CROSS_ENTROPY_KERNELS)
