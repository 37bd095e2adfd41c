// Scaled-dot-product attention, forward and backward (the contract of minidl/kernels/__init__.py),
// blocked as flash attention is: a block of threads takes a tile of rows, a thread one row of it, and the
// block walks over tiles of the other side's rows staged in shared memory, so each key/value (or query)
// row is read from global memory once per tile instead of once per thread. The forward keeps an online
// softmax (running max m and sum l per row, the row of out rescaled when m grows) and saves lse; the
// backward recomputes each weight as exp(score - lse). A thread per query row writes out, lse and dq, a
// thread per key row dk and dv: every output element has one writer (no atomics, deterministic). The
// tile of staged rows is ``tile`` rows (the launcher sizes it to the shared memory).
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

// The scalars every attention kernel takes, gathered once.
template <class T> struct AttShape {
    long long B, H, G, L, S, E, Ev;
    T scale;
    int causal, has_mask;
    AttDropout drop;
    long long tile;
};

// Stage rows r0 .. r0+n-1 of head (b, h) of x (cols elements each) into xs, packed; every thread helps.
template <class T> __device__ void att_stage(T *xs, const T *x, const Layout &l, long long b, long long h,
                                            long long r0, long long n, long long cols) {
    for (long long e = threadIdx.x; e < n * cols; e += blockDim.x)
        xs[e] = x[att_row(l, b, h, r0 + e / cols) + e % cols];
}

// Query row threadIdx.x of block t of a query-row kernel (blockDim.x rows of one head per block), and the
// keys the block's rows see between them: 0 .. block_end-1.
struct AttQueryRow {
    long long b, h, i, row, block_end;
    bool live;
};

template <class T> __device__ AttQueryRow att_query_row(const AttShape<T> &a, long long t, long long per_head) {
    long long bh = t / per_head, i0 = (t % per_head) * blockDim.x, i = i0 + threadIdx.x;
    long long block_end = att_kend(min(a.L, i0 + (long long)blockDim.x) - 1, a.S, a.causal);
    return AttQueryRow{bh / a.H, bh % a.H, i, bh * a.L + i, block_end, i < a.L};
}

// Stage keys and values j0 .. j0+n-1 of key/value head (b, hk) for the whole block, once the previous tile is read.
template <class T> __device__ void att_stage_kv(T *ks, T *vs, const T *k, const Layout &kl, const T *v,
                                               const Layout &vl, long long b, long long hk, long long j0,
                                               long long n, const AttShape<T> &a) {
    __syncthreads();
    att_stage(ks, k, kl, b, hk, j0, n, a.E);
    att_stage(vs, v, vl, b, hk, j0, n, a.Ev);
    __syncthreads();
}

// Forward. Block: blockDim.x query rows of one head; per staged key tile, the thread's row takes the tile's
// max first (so out is rescaled at most once per tile), then adds exp(score - m) Z_ij v_j to its row of out.
// A row no key takes part in gets zeros and lse = -inf.
template <class T> __device__ void attention_tiles(const T *q, Layout ql, const T *k, Layout kl, const T *v,
                                                   Layout vl, const T *mask, Layout ml, T *out, T *lse,
                                                   AttShape<T> a) {
    DYNAMIC_SHARED(T, ks);
    T *vs = ks + a.tile * a.E;
    long long per_head = (a.L + blockDim.x - 1) / blockDim.x;
    for (long long t = blockIdx.x; t < a.B * a.H * per_head; t += gridDim.x) {
        AttQueryRow r = att_query_row(a, t, per_head);
        long long b = r.b, h = r.h, i = r.i, row = r.row, kend = att_kend(i, a.S, a.causal);
        bool live = r.live;
        const T *qi = q + att_row(ql, b, h, live ? i : 0);
        T *o = out + row * a.Ev;
        if (live)
            for (long long c = 0; c < a.Ev; ++c) o[c] = 0;
        T m = (T)(-1.0 / 0.0), l = 0;
        for (long long j0 = 0; j0 < r.block_end; j0 += a.tile) {
            long long n = min(a.tile, r.block_end - j0);
            att_stage_kv(ks, vs, k, kl, v, vl, b, h / a.G, j0, n, a);
            if (!live) continue;
            long long seen = min(n, kend - j0);
            T tile_max = (T)(-1.0 / 0.0);
            for (long long jj = 0; jj < seen; ++jj) {
                T s = att_score(qi, ks + jj * a.E, a.E, a.scale, mask, ml, a.has_mask, b, h, i, j0 + jj);
                if (s > tile_max || s != s) tile_max = s;  // (NaN wins, and stays)
            }
            if (tile_max == (T)(-1.0 / 0.0)) continue;  // every key of the tile masked out
            T m_new = (tile_max > m || tile_max != tile_max) ? tile_max : m;
            if (m_new != m) {
                T alpha = m_exp(m - m_new);
                l *= alpha;
                for (long long c = 0; c < a.Ev; ++c) o[c] *= alpha;
                m = m_new;
            }
            for (long long jj = 0; jj < seen; ++jj) {
                T p = m_exp(att_score(qi, ks + jj * a.E, a.E, a.scale, mask, ml, a.has_mask, b, h, i, j0 + jj) - m);
                l += p;
                p *= att_keep<T>(a.drop, row, a.S, j0 + jj);
                const T *vj = vs + jj * a.Ev;
                for (long long c = 0; c < a.Ev; ++c) o[c] += p * vj[c];
            }
        }
        if (!live) continue;
        if (l == 0) {
            lse[row] = (T)(-1.0 / 0.0);
            continue;
        }
        lse[row] = m + m_log(l);
        T inv = (T)1 / l;
        for (long long c = 0; c < a.Ev; ++c) o[c] *= inv;
    }
}

// dq. Block: blockDim.x query rows of one head over staged key/value tiles: dq_i = sum_j dS_ij k_j with
// dS_ij = P_ij (Z_ij g_i . v_j - D_i) scale, D_i = g_i . out_i.
template <class T> __device__ void attention_dq_tiles(const T *q, Layout ql, const T *k, Layout kl, const T *v,
                                                      Layout vl, const T *mask, Layout ml, const T *out,
                                                      const T *lse, const T *g, T *dq, AttShape<T> a) {
    DYNAMIC_SHARED(T, ks);
    T *vs = ks + a.tile * a.E;
    long long per_head = (a.L + blockDim.x - 1) / blockDim.x;
    for (long long t = blockIdx.x; t < a.B * a.H * per_head; t += gridDim.x) {
        AttQueryRow r = att_query_row(a, t, per_head);
        long long b = r.b, h = r.h, i = r.i, row = r.row;
        bool live = r.live;
        T *dqi = dq + row * a.E;
        if (live)
            for (long long c = 0; c < a.E; ++c) dqi[c] = 0;
        T ls = live ? lse[row] : (T)(-1.0 / 0.0);
        live = live && ls != (T)(-1.0 / 0.0);  // a row no key takes part in has no gradient
        const T *qi = q + att_row(ql, b, h, live ? i : 0), *gi = g + (live ? row : 0) * a.Ev;
        T d = live ? att_dot(gi, out + row * a.Ev, a.Ev) : (T)0;
        long long kend = att_kend(i, a.S, a.causal);
        for (long long j0 = 0; j0 < r.block_end; j0 += a.tile) {
            long long n = min(a.tile, r.block_end - j0);
            att_stage_kv(ks, vs, k, kl, v, vl, b, h / a.G, j0, n, a);
            if (!live) continue;
            for (long long jj = 0, seen = min(n, kend - j0); jj < seen; ++jj) {
                const T *kj = ks + jj * a.E;
                T p = m_exp(att_score(qi, kj, a.E, a.scale, mask, ml, a.has_mask, b, h, i, j0 + jj) - ls);
                T z = att_keep<T>(a.drop, row, a.S, j0 + jj);
                T ds = p * (z * att_dot(gi, vs + jj * a.Ev, a.Ev) - d) * a.scale;
                for (long long c = 0; c < a.E; ++c) dqi[c] += ds * kj[c];
            }
        }
    }
}

// dk, dv. Block: blockDim.x key rows of one key/value head over staged tiles of the query rows of its G
// query heads (q, g, lse and D_i staged together): dv_j = sum P_ij Z_ij g_i, dk_j = sum dS_ij q_i.
template <class T> __device__ void attention_dkv_tiles(const T *q, Layout ql, const T *k, Layout kl, const T *v,
                                                       Layout vl, const T *mask, Layout ml, const T *out,
                                                       const T *lse, const T *g, T *dk, T *dv, AttShape<T> a) {
    DYNAMIC_SHARED(T, qs);
    T *gs = qs + a.tile * a.E, *lses = gs + a.tile * a.Ev, *dots = lses + a.tile;
    long long Hkv = a.H / a.G, per_head = (a.S + blockDim.x - 1) / blockDim.x;
    for (long long t = blockIdx.x; t < a.B * Hkv * per_head; t += gridDim.x) {
        long long bk = t / per_head, b = bk / Hkv, hk = bk % Hkv, j0 = (t % per_head) * blockDim.x;
        long long j = j0 + threadIdx.x, krow = bk * a.S + j;
        bool live = j < a.S;
        const T *kj = k + att_row(kl, b, hk, live ? j : 0), *vj = v + att_row(vl, b, hk, live ? j : 0);
        T *dkj = dk + krow * a.E, *dvj = dv + krow * a.Ev;
        if (live) {
            for (long long c = 0; c < a.E; ++c) dkj[c] = 0;
            for (long long c = 0; c < a.Ev; ++c) dvj[c] = 0;
        }
        for (long long h = hk * a.G; h < (hk + 1) * a.G; ++h) {
            long long first = a.causal ? j0 : 0;  // (causal: rows before j0 see no key of the block)
            for (long long r0 = first; r0 < a.L; r0 += a.tile) {
                long long n = min(a.tile, a.L - r0), rows = (b * a.H + h) * a.L + r0;
                __syncthreads();
                att_stage(qs, q, ql, b, h, r0, n, a.E);
                for (long long e = threadIdx.x; e < n * a.Ev; e += blockDim.x) gs[e] = g[rows * a.Ev + e];
                for (long long r = threadIdx.x; r < n; r += blockDim.x) {
                    lses[r] = lse[rows + r];
                    dots[r] = att_dot(g + (rows + r) * a.Ev, out + (rows + r) * a.Ev, a.Ev);
                }
                __syncthreads();
                if (!live) continue;
                for (long long rr = a.causal && j > r0 ? j - r0 : 0; rr < n; ++rr) {
                    T ls = lses[rr];
                    if (ls == (T)(-1.0 / 0.0)) continue;
                    const T *qi = qs + rr * a.E, *gi = gs + rr * a.Ev;
                    T p = m_exp(att_score(qi, kj, a.E, a.scale, mask, ml, a.has_mask, b, h, r0 + rr, j) - ls);
                    T z = att_keep<T>(a.drop, rows + rr, a.S, j);
                    T ds = p * (z * att_dot(gi, vj, a.Ev) - dots[rr]) * a.scale;
                    for (long long c = 0; c < a.Ev; ++c) dvj[c] += p * z * gi[c];
                    for (long long c = 0; c < a.E; ++c) dkj[c] += ds * qi[c];
                }
            }
        }
    }
}

#define ATTENTION_ARGS(T)                                                                              \
    const T *q, Layout ql, const T *k, Layout kl, const T *v, Layout vl, const T *mask, Layout ml
#define SHAPE_ARGS(T)                                                                                  \
    long long B, long long H, long long G, long long L, long long S, long long E, long long Ev, T scale, \
        int causal, int has_mask, double dropout_p, unsigned long long seed, unsigned long long offset,  \
        const unsigned long long *state, long long tile
#define SHAPE(T)                                                                                       \
    AttShape<T>{B, H, G, L, S, E, Ev, scale, causal, has_mask,                                        \
                AttDropout{dropout_p, philox_seed(state, seed), philox_offset(state, offset)}, tile}
#define ATTENTION_KERNELS(suffix, T)                                                                   \
    extern "C" __global__ void attention_##suffix(ATTENTION_ARGS(T), T *out, T *lse, SHAPE_ARGS(T)) {    \
        attention_tiles(q, ql, k, kl, v, vl, mask, ml, out, lse, SHAPE(T));                            \
    }                                                                                                  \
    extern "C" __global__ void attention_dq_##suffix(ATTENTION_ARGS(T), const T *out, const T *lse,    \
                                                     const T *g, T *dq, SHAPE_ARGS(T)) {               \
        attention_dq_tiles(q, ql, k, kl, v, vl, mask, ml, out, lse, g, dq, SHAPE(T));                  \
    }                                                                                                  \
    extern "C" __global__ void attention_dkv_##suffix(ATTENTION_ARGS(T), const T *out, const T *lse,   \
                                                      const T *g, T *dk, T *dv, SHAPE_ARGS(T)) {       \
        attention_dkv_tiles(q, ql, k, kl, v, vl, mask, ml, out, lse, g, dk, dv, SHAPE(T));             \
    }
FOR_FLOAT_DTYPES(ATTENTION_KERNELS)
