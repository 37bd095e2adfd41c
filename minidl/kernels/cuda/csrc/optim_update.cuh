// The fused optimizer updates of one element, shared by the per-parameter kernels (optim.cu) and the
// multi-tensor ones (multi_tensor.cu): the formulas of minidl/kernels/__init__.py in the CPU kernels'
// order of operations (minidl/kernels/cpu/jit/optim.py), so float32 stays float32.

// keep = 1 - dampening, sign = -1 to maximize; buf is read and written only with momentum.
template <class T>
__device__ __forceinline__ void sgd_update(T *p, const T *g, T *buf, long long i, T lr, T wd, T momentum, T keep,
                                           int nesterov, T sign, int first) {
    T d = g[i] * sign;
    if (wd != 0) d = d + wd * p[i];
    if (momentum != 0) {
        T b = first ? d : buf[i] * momentum + keep * d;
        buf[i] = b;
        d = nesterov ? d + momentum * b : b;
    }
    p[i] = p[i] - lr * d;
}

// c1 = 1 - beta1, c2 = 1 - beta2; vmax is read and written only with amsgrad.
template <class T>
__device__ __forceinline__ void adam_update(T *p, const T *g, T *m, T *v, T *vmax, long long i, T c1, T beta2,
                                            T c2, T eps, T wd, T decay, int amsgrad, T sign, T step_size,
                                            T bc2_sqrt) {
    T pi = p[i] * decay;
    T d = g[i] * sign;
    if (wd != 0) d = d + wd * pi;
    T mi = m[i] + c1 * (d - m[i]);
    T vi = v[i] * beta2 + c2 * d * d;
    m[i] = mi;
    v[i] = vi;
    if (amsgrad) {
        T top = vmax[i] >= vi ? vmax[i] : vi;  // a NaN in v is kept
        vmax[i] = top;
        vi = top;
    }
    p[i] = pi - step_size * (mi / (m_sqrt(vi) / bc2_sqrt + eps));
}
