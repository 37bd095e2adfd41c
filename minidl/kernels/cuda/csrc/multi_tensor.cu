// Multi-tensor optimizer steps, norms and scaling: up to MULTI_MAX tensors of a list in one launch.
// The tensors arrive in a TensorList passed by value as a kernel argument (no copy to the device
// beforehand, so a step can be captured in a graph; a longer list takes one launch per MULTI_MAX):
// each tensor's size, the addresses of its operands (param, grad, states...) and its own scalars in
// double (rounded to T here, as numpy rounds the CPU kernels' scalars). blockIdx.y picks the tensor
// (stepping by gridDim.y), blockIdx.x and threadIdx.x stride over its elements. Each element is
// updated by the formulas and in the order of operations of the per-parameter kernels.
#include "optim_update.cuh"

#define MULTI_MAX 56      // 3.6 KB: the list and the other arguments stay within 4 KB of parameters
#define MULTI_OPERANDS 5

struct TensorList {
    long long n;                                    // tensors in this launch
    long long size[MULTI_MAX];
    long long addr[MULTI_MAX][MULTI_OPERANDS];      // unused operands: any address, never read
    double per[MULTI_MAX][2];                       // each tensor's own scalars
};

#define FOR_EACH_TENSOR(j) for (long long j = blockIdx.y; j < list.n; j += gridDim.y)
#define OPERAND(T, j, k) ((T *)list.addr[j][k])

// per[j][0] = 1 where tensor j's momentum buffer starts as its gradient (SGD's first step).
#define SGD_MULTI_KERNEL(suffix, T)                                                                   \
    extern "C" __global__ void sgd_multi_##suffix(TensorList list, T lr, T wd, T momentum, T keep,   \
                                                  int nesterov, T sign) {                            \
        FOR_EACH_TENSOR(j) {                                                                          \
            T *p = OPERAND(T, j, 0), *buf = OPERAND(T, j, 2);                                         \
            const T *g = OPERAND(T, j, 1);                                                            \
            int first = list.per[j][0] != 0;                                                          \
            GRID_STRIDE_LOOP(i, list.size[j])                                                         \
                sgd_update(p, g, buf, i, lr, wd, momentum, keep, nesterov, sign, first);              \
        }                                                                                             \
    }
FOR_FLOAT_DTYPES(SGD_MULTI_KERNEL)

// per[j] = (step_size, bc2_sqrt) of tensor j.
#define ADAM_MULTI_KERNEL(suffix, T)                                                                  \
    extern "C" __global__ void adam_multi_##suffix(TensorList list, T c1, T beta2, T c2, T eps, T wd, \
                                                   T decay, int amsgrad, T sign) {                    \
        FOR_EACH_TENSOR(j) {                                                                          \
            T *p = OPERAND(T, j, 0), *m = OPERAND(T, j, 2), *v = OPERAND(T, j, 3);                    \
            T *vmax = OPERAND(T, j, 4);                                                               \
            const T *g = OPERAND(T, j, 1);                                                            \
            T step_size = (T)list.per[j][0], bc2_sqrt = (T)list.per[j][1];                            \
            GRID_STRIDE_LOOP(i, list.size[j])                                                         \
                adam_update(p, g, m, v, vmax, i, c1, beta2, c2, eps, wd, decay, amsgrad, sign,        \
                            step_size, bc2_sqrt);                                                     \
        }                                                                                             \
    }
FOR_FLOAT_DTYPES(ADAM_MULTI_KERNEL)

// per[j][0] = -clr of tensor j; operands (param, grad, sum): the CPU kernel's formula,
// d = sign*g (+ p*wd); sum += d*d; p += d / (sqrt(sum) + eps) * -clr.
#define ADAGRAD_MULTI_KERNEL(suffix, T)                                                               \
    extern "C" __global__ void adagrad_multi_##suffix(TensorList list, T wd, T eps, T sign) {        \
        FOR_EACH_TENSOR(j) {                                                                          \
            T *p = OPERAND(T, j, 0), *s = OPERAND(T, j, 2);                                           \
            const T *g = OPERAND(T, j, 1);                                                            \
            T neg_clr = (T)list.per[j][0];                                                            \
            GRID_STRIDE_LOOP(i, list.size[j]) {                                                       \
                T d = g[i] * sign;                                                                    \
                if (wd != 0) d = d + p[i] * wd;                                                       \
                T si = s[i] + d * d;                                                                  \
                s[i] = si;                                                                            \
                p[i] = p[i] + d / (m_sqrt(si) + eps) * neg_clr;                                       \
            }                                                                                         \
        }                                                                                             \
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
#define NORMS_MULTI_KERNEL(suffix, T)                                                                 \
    extern "C" __global__ void norms_multi_##suffix(TensorList list, double ord, double *out) {      \
        int is_inf = ord == 1.0 / 0.0;                                                                \
        for (long long j = blockIdx.x; j < list.n; j += gridDim.x) {                                  \
            const T *x = OPERAND(T, j, 0);                                                            \
            double acc = 0;                                                                           \
            for (long long i = threadIdx.x; i < list.size[j]; i += blockDim.x) {                      \
                double a = x[i] < 0 ? -(double)x[i] : (double)x[i];                                   \
                if (is_inf) { if (a > acc || a != a) acc = a; } /* a NaN is kept */                   \
                else if (ord == 2.0) acc += a * a;                                                    \
                else if (ord == 1.0) acc += a;                                                        \
                else acc += pow(a, ord);                                                              \
            }                                                                                         \
            acc = block_combine(acc, is_inf);                                                         \
            if (threadIdx.x == 0)                                                                     \
                out[j] = is_inf || ord == 1.0 ? acc : ord == 2.0 ? sqrt(acc) : pow(acc, 1.0 / ord);   \
        }                                                                                             \
    }
FOR_FLOAT_DTYPES(NORMS_MULTI_KERNEL)

#define SCALE_MULTI_KERNEL(suffix, T)                                                                 \
    extern "C" __global__ void scale_multi_##suffix(TensorList list, T factor) {                     \
        FOR_EACH_TENSOR(j) {                                                                          \
            T *x = OPERAND(T, j, 0);                                                                  \
            GRID_STRIDE_LOOP(i, list.size[j]) x[i] = x[i] * factor;                                   \
        }                                                                                             \
    }
FOR_FLOAT_DTYPES(SCALE_MULTI_KERNEL)
