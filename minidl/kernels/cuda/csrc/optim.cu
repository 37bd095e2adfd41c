// Fused optimizer updates: one thread per element of packed 1-D buffers (the element updates are in
// optim_update.cuh). Factors such as 1 - dampening arrive precomputed in the parameters' dtype.
#include "optim_update.cuh"

#define SGD_KERNEL(suffix, T)                                                                     \
    extern "C" __global__ void sgd_step_##suffix(T *p, const T *g, T *buf, T lr, T wd, T momentum, \
                                                 T keep, int nesterov, T sign, int first,         \
                                                 long long n) {                                   \
        GRID_STRIDE_LOOP(i, n) sgd_update(p, g, buf, i, lr, wd, momentum, keep, nesterov, sign, first); \
    }
FOR_FLOAT_DTYPES(SGD_KERNEL)

#define ADAM_KERNEL(suffix, T)                                                                    \
    extern "C" __global__ void adam_step_##suffix(T *p, const T *g, T *m, T *v, T *vmax, T c1,     \
                                                  T beta2, T c2, T eps, T wd, T decay,            \
                                                  int amsgrad, T sign, T step_size, T bc2_sqrt,   \
                                                  long long n) {                                  \
        GRID_STRIDE_LOOP(i, n)                                                                    \
            adam_update(p, g, m, v, vmax, i, c1, beta2, c2, eps, wd, decay, amsgrad, sign, step_size, bc2_sqrt); \
    }
FOR_FLOAT_DTYPES(ADAM_KERNEL)
