// Multi-tensor optimizer steps, norms and scaling: every tensor of a list in one launch. The tensors
// arrive as a pointer table (minidl/kernels/cpu/jit/multi_tensor.py has the same): `table` holds n rows
// of `cols` long longs, (size, address of operand 0, address of operand 1, ...); `per` holds each
// tensor's own scalars in T (n rows of `per_cols`). blockIdx.y picks the tensor (stepping by gridDim.y),
// blockIdx.x and threadIdx.x stride over its elements. Each element is updated by the formulas and
// in the order of operations of the per-parameter kernels (optim_update.cuh).
#include "optim_update.cuh"

#define FOR_EACH_TENSOR(j) for (long long j = blockIdx.y; j < ntensors; j += gridDim.y)
#define OPERAND(T, j, k) ((T *)table[(j) * cols + 1 + (k)])

// per[j] = 1 where tensor j's momentum buffer starts as its gradient (SGD's first step).
#define SGD_MULTI_KERNEL(suffix, T)                                                                  \
    extern "C" __global__ void sgd_multi_##suffix(const long long *table, long long cols,          \
                                                  long long ntensors, const T *per, T lr, T wd,     \
                                                  T momentum, T keep, int nesterov, T sign) {       \
        FOR_EACH_TENSOR(j) {                                                                         \
            long long n = table[j * cols];                                                           \
            T *p = OPERAND(T, j, 0), *buf = OPERAND(T, j, 2);                                        \
            const T *g = OPERAND(T, j, 1);                                                           \
            int first = per[j] != 0;                                                                 \
            GRID_STRIDE_LOOP(i, n) sgd_update(p, g, buf, i, lr, wd, momentum, keep, nesterov, sign, first); \
        }                                                                                            \
    }
FOR_FLOAT_DTYPES(SGD_MULTI_KERNEL)

// per[j] = (step_size, bc2_sqrt) of tensor j.
#define ADAM_MULTI_KERNEL(suffix, T)                                                                 \
    extern "C" __global__ void adam_multi_##suffix(const long long *table, long long cols,         \
                                                   long long ntensors, const T *per, T c1, T beta2, \
                                                   T c2, T eps, T wd, T decay, int amsgrad, T sign) { \
        FOR_EACH_TENSOR(j) {                                                                         \
            long long n = table[j * cols];                                                           \
            T *p = OPERAND(T, j, 0), *m = OPERAND(T, j, 2), *v = OPERAND(T, j, 3);                   \
            T *vmax = OPERAND(T, j, 4);                                                              \
            const T *g = OPERAND(T, j, 1);                                                           \
            GRID_STRIDE_LOOP(i, n)                                                                   \
                adam_update(p, g, m, v, vmax, i, c1, beta2, c2, eps, wd, decay, amsgrad, sign, per[2 * j], \
                            per[2 * j + 1]);                                                         \
        }                                                                                            \
    }
FOR_FLOAT_DTYPES(ADAM_MULTI_KERNEL)

// per[j] = -clr of tensor j; operands (param, grad, sum).
#define ADAGRAD_MULTI_KERNEL(suffix, T)                                                              \
    extern "C" __global__ void adagrad_multi_##suffix(const long long *table, long long cols,      \
                                                      long long ntensors, const T *per, T wd, T eps, \
                                                      T sign) {                                      \
        FOR_EACH_TENSOR(j) {                                                                         \
            long long n = table[j * cols];                                                           \
            T *p = OPERAND(T, j, 0), *s = OPERAND(T, j, 2);                                          \
            const T *g = OPERAND(T, j, 1);                                                           \
            T neg_clr = per[j];                                                                      \
            GRID_STRIDE_LOOP(i, n) {                                                                 \
                T d = g[i] * sign;                                                                   \
                if (wd != 0) d = d + p[i] * wd;                                                      \
                T si = s[i] + d * d;                                                                 \
                s[i] = si;                                                                           \
                p[i] = p[i] + d / (m_sqrt(si) + eps) * neg_clr;                                      \
            }                                                                                        \
        }                                                                                            \
    }
FOR_FLOAT_DTYPES(ADAGRAD_MULTI_KERNEL)

// The block's combined v (max with NaN winning, or sum); blockDim.x is a power of two <= 1024.
__device__ double block_combine(double v, int is_max) {
    __shared__ double partial[1024];
    partial[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            double a = partial[threadIdx.x], b = partial[threadIdx.x + s];
            partial[threadIdx.x] = is_max ? ((a > b || a != a) ? a : b) : a + b;
        }
        __syncthreads();
    }
    double r = partial[0];
    __syncthreads();  // partial is reused by the next tensor
    return r;
}

// out[j] = the ord-norm of tensor j in double (ord = inf: the largest |x|); one block per tensor
// (blockIdx.x stepping over them), the CPU kernel's formulas, summed in another order.
#define NORMS_MULTI_KERNEL(suffix, T)                                                                \
    extern "C" __global__ void norms_multi_##suffix(const long long *table, long long cols,        \
                                                    long long ntensors, double ord, double *out) {  \
        int is_inf = ord == 1.0 / 0.0;                                                               \
        for (long long j = blockIdx.x; j < ntensors; j += gridDim.x) {                               \
            const T *x = OPERAND(T, j, 0);                                                           \
            long long n = table[j * cols];                                                           \
            double acc = 0;                                                                          \
            for (long long i = threadIdx.x; i < n; i += blockDim.x) {                                \
                double a = x[i] < 0 ? -(double)x[i] : (double)x[i];                                 \
                if (is_inf) { if (a > acc || a != a) acc = a; } /* a NaN is kept */                 \
                else if (ord == 2.0) acc += a * a;                                                   \
                else if (ord == 1.0) acc += a;                                                       \
                else acc += pow(a, ord);                                                             \
            }                                                                                        \
            acc = block_combine(acc, is_inf);                                                        \
            if (threadIdx.x == 0)                                                                    \
                out[j] = is_inf || ord == 1.0 ? acc : ord == 2.0 ? sqrt(acc) : pow(acc, 1.0 / ord);  \
        }                                                                                            \
    }
FOR_FLOAT_DTYPES(NORMS_MULTI_KERNEL)

#define SCALE_MULTI_KERNEL(suffix, T)                                                                \
    extern "C" __global__ void scale_multi_##suffix(const long long *table, long long cols,        \
                                                    long long ntensors, T factor) {                 \
        FOR_EACH_TENSOR(j) {                                                                         \
            long long n = table[j * cols];                                                           \
            T *x = OPERAND(T, j, 0);                                                                 \
            GRID_STRIDE_LOOP(i, n) x[i] = x[i] * factor;                                             \
        }                                                                                            \
    }
FOR_FLOAT_DTYPES(SCALE_MULTI_KERNEL)
