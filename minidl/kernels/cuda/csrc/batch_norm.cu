// Batch norm forward and backward (the formulas of minidl/kernels/__init__.py): a block per channel, stepping over
// the grid. Element i of channel c's M = N * S lies at (n * C + c) * S + s (i = n * S + s) in the (N, C, S) planes,
// at i * C + c in channels-last rows. The statistics take two passes over the channel (the mean, then the squared
// deviations from it), as on the CPU; sums are in the buffers' dtype, per thread and then across the block.

// The sum of v over the block (a multiple of 32 threads); every thread calls it and gets the total.
template <class T> __device__ T block_sum(T v) {
    __shared__ T partial[32];
    for (int by = 16; by > 0; by >>= 1) v += __shfl_xor_sync(FULL_MASK, v, by);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    T total = 0;
    for (int w = 0; w < (int)blockDim.x / 32; ++w) total += partial[w];
    __syncthreads();  // partial is reused by the next call
    return total;
}

__device__ __forceinline__ long long bn_position(long long i, long long c, long long C, long long S, int rows) {
    if (rows) return i * C + c;
    long long n = i / S;
    return (n * C + c) * S + (i - n * S);
}

#define FOR_CHANNEL_ELEMENT(i, p, c)                                                                   \
    for (long long i = threadIdx.x, p = bn_position(i, c, C, S, rows); i < M;                          \
         i += blockDim.x, p = bn_position(i, c, C, S, rows))

template <class T> __device__ void batch_norm_channels(const T *x, T *out, long long N, long long C, long long S,
                                                       int rows, const T *w, const T *b, T *mean, T *invstd, T *rm,
                                                       T *rv, int training, double momentum, double eps) {
    long long M = N * S;
    for (long long c = blockIdx.x; c < C; c += gridDim.x) {
        T m, is;
        if (training) {
            T s = 0;
            FOR_CHANNEL_ELEMENT(i, p, c) s += x[p];
            s = block_sum(s);
            m = M ? s / (T)M : s;
            T q = 0;
            FOR_CHANNEL_ELEMENT(i, p, c) {
                T d = x[p] - m;
                q += d * d;
            }
            q = block_sum(q);
            double var = M ? (double)q / M : 0.0;
            is = (T)(1.0 / sqrt(var + eps));
            if (threadIdx.x == 0) {
                mean[c] = m;
                invstd[c] = is;
                if (rm && rv && M > 0) {
                    rm[c] = (T)((1 - momentum) * rm[c] + momentum * m);
                    rv[c] = (T)((1 - momentum) * rv[c] + momentum * (var * M / (M - 1)));
                }
            }
        } else {
            m = rm[c];
            is = (T)(1.0 / sqrt((double)rv[c] + eps));
            if (threadIdx.x == 0) {
                mean[c] = m;
                invstd[c] = is;
            }
        }
        T scale = (w ? w[c] : (T)1) * is;
        T shift = (b ? b[c] : (T)0) - m * scale;
        FOR_CHANNEL_ELEMENT(i, p, c) out[p] = x[p] * scale + shift;
    }
}

template <class T> __device__ void batch_norm_backward_channels(const T *x, const T *g, T *dx, long long N,
                                                                long long C, long long S, int rows, const T *w,
                                                                const T *mean, const T *invstd, T *dw, T *db,
                                                                int training) {
    long long M = N * S;
    for (long long c = blockIdx.x; c < C; c += gridDim.x) {
        T m = mean[c], is = invstd[c];
        T sg = 0, sgd = 0;
        FOR_CHANNEL_ELEMENT(i, p, c) {
            sg += g[p];
            sgd += g[p] * (x[p] - m);
        }
        sg = block_sum(sg);
        sgd = block_sum(sgd);
        if (threadIdx.x == 0) {
            db[c] = sg;
            dw[c] = sgd * is;
        }
        T a = (w ? w[c] : (T)1) * is, pc = 0, qc = 0;
        if (training && M) {
            pc = -a * is * is * sgd / (T)M;
            qc = -a * sg / (T)M - pc * m;
        }
        FOR_CHANNEL_ELEMENT(i, p, c) dx[p] = a * g[p] + pc * x[p] + qc;
    }
}

#define BATCH_NORM_KERNELS(suffix, T)                                                                         \
    extern "C" __global__ void batch_norm_##suffix(const T *x, T *out, long long N, long long C, long long S, \
                                                   int rows, const T *w, const T *b, T *mean, T *invstd,     \
                                                   T *rm, T *rv, int training, double momentum, double eps) { \
        batch_norm_channels(x, out, N, C, S, rows, w, b, mean, invstd, rm, rv, training, momentum, eps);     \
    }                                                                                                         \
    extern "C" __global__ void batch_norm_backward_##suffix(const T *x, const T *g, T *dx, long long N,      \
                                                            long long C, long long S, int rows, const T *w,  \
                                                            const T *mean, const T *invstd, T *dw, T *db,    \
                                                            int training) {                                  \
        batch_norm_backward_channels(x, g, dx, N, C, S, rows, w, mean, invstd, dw, db, training);            \
    }
FOR_FLOAT_DTYPES(BATCH_NORM_KERNELS)
