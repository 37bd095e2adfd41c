// Fused optimizer updates: one thread per element of packed 1-D buffers, the formulas of
// minidl/kernels/__init__.py in the CPU kernels' order of operations (minidl/kernels/cpu/jit/optim.py), so float32
// stays float32. Factors such as 1 - dampening arrive precomputed in the parameters' dtype.

// keep = 1 - dampening, sign = -1 to maximize; buf is read and written only with momentum.
#define SGD_KERNEL(suffix, T)                                                                     \
    extern "C" __global__ void sgd_step_##suffix(T *p, const T *g, T *buf, T lr, T wd, T momentum, \
                                                 T keep, int nesterov, T sign, int first,         \
                                                 long long n) {                                   \
        GRID_STRIDE_LOOP(i, n) {                                                                  \
            T d = g[i] * sign;                                                                    \
            if (wd != 0) d = d + wd * p[i];                                                       \
            if (momentum != 0) {                                                                  \
                T b = first ? d : buf[i] * momentum + keep * d;                                   \
                buf[i] = b;                                                                       \
                d = nesterov ? d + momentum * b : b;                                              \
            }                                                                                     \
            p[i] = p[i] - lr * d;                                                                 \
        }                                                                                         \
    }
FOR_FLOAT_DTYPES(SGD_KERNEL)

// c1 = 1 - beta1, c2 = 1 - beta2; vmax is read and written only with amsgrad.
#define ADAM_KERNEL(suffix, T)                                                                    \
    extern "C" __global__ void adam_step_##suffix(T *p, const T *g, T *m, T *v, T *vmax, T c1,     \
                                                  T beta2, T c2, T eps, T wd, T decay,            \
                                                  int amsgrad, T sign, T step_size, T bc2_sqrt,   \
                                                  long long n) {                                  \
        GRID_STRIDE_LOOP(i, n) {                                                                  \
            T pi = p[i] * decay;                                                                  \
            T d = g[i] * sign;                                                                    \
            if (wd != 0) d = d + wd * pi;                                                         \
            T mi = m[i] + c1 * (d - m[i]);                                                        \
            T vi = v[i] * beta2 + c2 * d * d;                                                     \
            m[i] = mi;                                                                            \
            v[i] = vi;                                                                            \
            if (amsgrad) {                                                                        \
                T top = vmax[i] >= vi ? vmax[i] : vi; /* a NaN in v is kept */                    \
                vmax[i] = top;                                                                    \
                vi = top;                                                                         \
            }                                                                                     \
            p[i] = pi - step_size * (mi / (m_sqrt(vi) / bc2_sqrt + eps));                         \
        }                                                                                         \
    }
FOR_FLOAT_DTYPES(ADAM_KERNEL)
