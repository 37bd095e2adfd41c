// Scaled-dot-product attention, forward and backward (the contract of minidl/kernels/__init__.py).
// A simple design, correct first: one thread per query row for out, lse and dq, one thread per key
// row for dk and dv, each looping over the other side's rows; every output element has one writer
// (no atomics, deterministic). The scores are recomputed where needed, never stored.
//
// q, k, v and the mask come as 4-D Layouts (B, H or Hkv, rows, cols) with unit stride along the
// head dim of q, k, v; out, lse, g, dq, dk, dv are packed. geo = B, H, G, L, S, E, Ev as in the
// CPU kernels (G query heads per key/value head). causal: query i sees keys 0..i (upper-left).

#include "philox.cuh"  // dropout draws its kept weights as the random primitive draws uniforms

// Dropout on the weights (the contract): weight j of packed query row `row` is kept when uniform draw
// row * S + j at (seed, offset) is below 1 - p rounded to T, then scaled by 1 / (1 - p); p = 0: none.
struct AttDropout {
    double p;
    unsigned long long seed, offset;
};

template <class T> __device__ T att_keep(const AttDropout &d, long long row, long long S, long long j) {
    if (d.p == 0) return 1;
    double u = unit((T *)0, philox(d.offset + (unsigned long long)(row * S + j), d.seed));
    return u < (double)(T)(1.0 - d.p) ? (T)(1.0 / (1.0 - d.p)) : (T)0;
}

// Position of row `row` of head (b, h) of a 4-D layout (its first element).
__device__ __forceinline__ long long att_row(const Layout &l, long long b, long long h, long long row) {
    return l.offset + b * l.strides[0] + h * l.strides[1] + row * l.strides[2];
}

// score(i, j) = (q_i . k_j) * scale + mask[b, h, i, j], summed over the head dim in order (as on the CPU).
template <class T> __device__ T att_score(const T *qi, const T *kj, long long E, T scale, const T *mask,
                                          const Layout &ml, int has_mask, long long b, long long h,
                                          long long i, long long j) {
    T s = 0;
    for (long long c = 0; c < E; ++c) s += qi[c] * kj[c];
    s *= scale;
    if (has_mask) s += mask[att_row(ml, b, h, i) + j * ml.strides[3]];
    return s;
}

template <class T> __device__ T att_dot(const T *x, const T *y, long long n) {
    T s = 0;
    for (long long c = 0; c < n; ++c) s += x[c] * y[c];
    return s;
}

// Keys query row i may see: 0..kend-1.
__device__ __forceinline__ long long att_kend(long long i, long long S, int causal) {
    return causal ? (i + 1 < S ? i + 1 : S) : S;
}

// Thread per query row: pass 1 finds the row's max and sum of exp (online), so lse; pass 2 adds
// exp(score - lse) Z_ij v_j into the row of out (Z: dropout's factor). A row no key takes part in gets zeros and lse = -inf.
template <class T> __device__ void attention_rows(const T *q, Layout ql, const T *k, Layout kl, const T *v,
                                                  Layout vl, const T *mask, Layout ml, T *out, T *lse,
                                                  long long B, long long H, long long G, long long L,
                                                  long long S, long long E, long long Ev, T scale, int causal,
                                                  int has_mask, AttDropout drop) {
    GRID_STRIDE_LOOP(row, B * H * L) {
        long long i = row % L, bh = row / L, b = bh / H, h = bh % H;
        const T *qi = q + att_row(ql, b, h, i);
        long long kend = att_kend(i, S, causal);
        T m = (T)(-1.0 / 0.0), l = 0;
        for (long long j = 0; j < kend; ++j) {
            T s = att_score(qi, k + att_row(kl, b, h / G, j), E, scale, mask, ml, has_mask, b, h, i, j);
            if (s == (T)(-1.0 / 0.0)) continue;
            T m_new = (s > m || s != s) ? s : m;  // (NaN wins, and stays)
            l = l * m_exp(m - m_new) + m_exp(s - m_new);
            m = m_new;
        }
        T *o = out + row * Ev;
        for (long long c = 0; c < Ev; ++c) o[c] = 0;
        if (l == 0) {
            lse[row] = (T)(-1.0 / 0.0);
            continue;
        }
        T ls = m + m_log(l);
        lse[row] = ls;
        for (long long j = 0; j < kend; ++j) {
            T p = m_exp(att_score(qi, k + att_row(kl, b, h / G, j), E, scale, mask, ml, has_mask, b, h, i, j) - ls);
            p *= att_keep<T>(drop, row, S, j);
            const T *vj = v + att_row(vl, b, h / G, j);
            for (long long c = 0; c < Ev; ++c) o[c] += p * vj[c];
        }
    }
}

// Thread per query row: dq_i = sum_j dS_ij k_j, dS_ij = P_ij (Z_ij g_i . v_j - D_i) scale, D_i = g_i . out_i.
template <class T> __device__ void attention_dq_rows(const T *q, Layout ql, const T *k, Layout kl, const T *v,
                                                     Layout vl, const T *mask, Layout ml, const T *out,
                                                     const T *lse, const T *g, T *dq, long long B, long long H,
                                                     long long G, long long L, long long S, long long E,
                                                     long long Ev, T scale, int causal, int has_mask,
                                                     AttDropout drop) {
    GRID_STRIDE_LOOP(row, B * H * L) {
        long long i = row % L, bh = row / L, b = bh / H, h = bh % H;
        T *dqi = dq + row * E;
        for (long long c = 0; c < E; ++c) dqi[c] = 0;
        T ls = lse[row];
        if (ls == (T)(-1.0 / 0.0)) continue;  // a row no key takes part in has no gradient
        const T *qi = q + att_row(ql, b, h, i), *gi = g + row * Ev;
        T d = att_dot(gi, out + row * Ev, Ev);
        long long kend = att_kend(i, S, causal);
        for (long long j = 0; j < kend; ++j) {
            const T *kj = k + att_row(kl, b, h / G, j);
            T p = m_exp(att_score(qi, kj, E, scale, mask, ml, has_mask, b, h, i, j) - ls);
            T ds = p * (att_keep<T>(drop, row, S, j) * att_dot(gi, v + att_row(vl, b, h / G, j), Ev) - d) * scale;
            for (long long c = 0; c < E; ++c) dqi[c] += ds * kj[c];
        }
    }
}

// Thread per key row j of key/value head (b, hk): dv_j = sum P_ij Z_ij g_i and dk_j = sum dS_ij q_i over the
// rows i of the G query heads that use it.
template <class T> __device__ void attention_dkv_rows(const T *q, Layout ql, const T *k, Layout kl, const T *v,
                                                      Layout vl, const T *mask, Layout ml, const T *out,
                                                      const T *lse, const T *g, T *dk, T *dv, long long B,
                                                      long long H, long long G, long long L, long long S,
                                                      long long E, long long Ev, T scale, int causal,
                                                      int has_mask, AttDropout drop) {
    long long Hkv = H / G;
    GRID_STRIDE_LOOP(krow, B * Hkv * S) {
        long long j = krow % S, bk = krow / S, b = bk / Hkv, hk = bk % Hkv;
        const T *kj = k + att_row(kl, b, hk, j), *vj = v + att_row(vl, b, hk, j);
        T *dkj = dk + krow * E, *dvj = dv + krow * Ev;
        for (long long c = 0; c < E; ++c) dkj[c] = 0;
        for (long long c = 0; c < Ev; ++c) dvj[c] = 0;
        for (long long h = hk * G; h < (hk + 1) * G; ++h) {
            for (long long i = causal ? j : 0; i < L; ++i) {  // (causal: rows before j do not see key j)
                long long row = (b * H + h) * L + i;
                T ls = lse[row];
                if (ls == (T)(-1.0 / 0.0)) continue;
                const T *qi = q + att_row(ql, b, h, i), *gi = g + row * Ev;
                T p = m_exp(att_score(qi, kj, E, scale, mask, ml, has_mask, b, h, i, j) - ls);
                T z = att_keep<T>(drop, row, S, j);
                T ds = p * (z * att_dot(gi, vj, Ev) - att_dot(gi, out + row * Ev, Ev)) * scale;
                for (long long c = 0; c < Ev; ++c) dvj[c] += p * z * gi[c];
                for (long long c = 0; c < E; ++c) dkj[c] += ds * qi[c];
            }
        }
    }
}

#define ATTENTION_ARGS(T)                                                                              \
    const T *q, Layout ql, const T *k, Layout kl, const T *v, Layout vl, const T *mask, Layout ml
#define GEOMETRY_ARGS(T)                                                                               \
    long long B, long long H, long long G, long long L, long long S, long long E, long long Ev, T scale, \
        int causal, int has_mask, double dropout_p, unsigned long long seed, unsigned long long offset
#define DROPOUT AttDropout{dropout_p, seed, offset}
#define ATTENTION_KERNELS(suffix, T)                                                                   \
    extern "C" __global__ void attention_##suffix(ATTENTION_ARGS(T), T *out, T *lse, GEOMETRY_ARGS(T)) { \
        attention_rows(q, ql, k, kl, v, vl, mask, ml, out, lse, B, H, G, L, S, E, Ev, scale, causal,  \
                       has_mask, DROPOUT);                                                             \
    }                                                                                                  \
    extern "C" __global__ void attention_dq_##suffix(ATTENTION_ARGS(T), const T *out, const T *lse,    \
                                                     const T *g, T *dq, GEOMETRY_ARGS(T)) {            \
        attention_dq_rows(q, ql, k, kl, v, vl, mask, ml, out, lse, g, dq, B, H, G, L, S, E, Ev, scale, \
                          causal, has_mask, DROPOUT);                                                  \
    }                                                                                                  \
    extern "C" __global__ void attention_dkv_##suffix(ATTENTION_ARGS(T), const T *out, const T *lse,   \
                                                      const T *g, T *dk, T *dv, GEOMETRY_ARGS(T)) {    \
        attention_dkv_rows(q, ql, k, kl, v, vl, mask, ml, out, lse, g, dk, dv, B, H, G, L, S, E, Ev,   \
                           scale, causal, has_mask, DROPOUT);                                          \
    }
FOR_FLOAT_DTYPES(ATTENTION_KERNELS)
