// The gates of one time step of a recurrent layer, forward and backward (the rnn_cell pair of
// minidl/kernels/__init__.py; the same formulas as kernels/cpu/jit/rnn.py): a thread per (row, hidden
// unit) reads that unit's gate pre-activations and writes its new state and saved activations. Absent
// buffers are null and never read. Modes: 0 RNN_TANH, 1 RNN_RELU, 2 LSTM, 3 GRU.

#include "scalar_math.cuh"  // m_tanh

template <class T> __device__ __forceinline__ T rnn_sigmoid(T v) { return (T)1 / ((T)1 + m_exp(-v)); }

template <class T> __device__ void rnn_cell_unit(int mode, const T *gx, const T *gh, const T *bh, const T *hx,
                                                 const T *cx, T *hy, T *cy, T *saved, long long H, long long i) {
    long long b = i / H, j = i - b * H;
    if (mode == 2) {  // LSTM: i, f, g, o
        const T *x = gx + b * 4 * H, *h = gh + b * 4 * H;
        T p[4];
        for (int k = 0; k < 4; ++k) p[k] = x[k * H + j] + h[k * H + j] + (bh ? bh[k * H + j] : (T)0);
        T ig = rnn_sigmoid(p[0]), fg = rnn_sigmoid(p[1]), gg = m_tanh(p[2]), og = rnn_sigmoid(p[3]);
        T c = fg * cx[i] + ig * gg;
        cy[i] = c;
        hy[i] = og * m_tanh(c);
        T *s = saved + b * 4 * H;
        s[j] = ig; s[H + j] = fg; s[2 * H + j] = gg; s[3 * H + j] = og;
    } else if (mode == 3) {  // GRU: r, z, n with n = tanh(x_n + r * (W_hn h + b_hn))
        const T *x = gx + b * 3 * H, *h = gh + b * 3 * H;
        T r = rnn_sigmoid(x[j] + h[j] + (bh ? bh[j] : (T)0));
        T z = rnn_sigmoid(x[H + j] + h[H + j] + (bh ? bh[H + j] : (T)0));
        T hn = h[2 * H + j] + (bh ? bh[2 * H + j] : (T)0);
        T n = m_tanh(x[2 * H + j] + r * hn);
        hy[i] = n + z * (hx[i] - n);
        T *s = saved + b * 4 * H;
        s[j] = r; s[H + j] = z; s[2 * H + j] = n; s[3 * H + j] = hn;
    } else {
        T p = gx[i] + gh[i] + (bh ? bh[j] : (T)0);
        hy[i] = mode == 0 ? m_tanh(p) : ((p > (T)0 || p != p) ? p : (T)0);  // (relu keeps NaN)
    }
}

template <class T> __device__ void rnn_cell_backward_unit(int mode, const T *dh, const T *dy, const T *dc,
                                                          const T *hx, const T *cx, const T *hy, const T *cy,
                                                          const T *saved, T *dgx, T *dgh, T *dhx, T *dcx,
                                                          long long H, long long i) {
    long long b = i / H, j = i - b * H;
    T d = dh[i] + (dy ? dy[i] : (T)0);
    if (mode == 2) {
        const T *s = saved + b * 4 * H;
        T ig = s[j], fg = s[H + j], gg = s[2 * H + j], og = s[3 * H + j];
        T tc = m_tanh(cy[i]);
        T dct = (dc ? dc[i] : (T)0) + d * og * ((T)1 - tc * tc);
        T *g = dgx + b * 4 * H;
        g[j] = dct * gg * ig * ((T)1 - ig);
        g[H + j] = dct * cx[i] * fg * ((T)1 - fg);
        g[2 * H + j] = dct * ig * ((T)1 - gg * gg);
        g[3 * H + j] = d * tc * og * ((T)1 - og);
        dcx[i] = dct * fg;  // (dcx may be dc: this thread's element, read above)
    } else if (mode == 3) {
        const T *s = saved + b * 4 * H;
        T r = s[j], z = s[H + j], n = s[2 * H + j], hn = s[3 * H + j];
        T dn = d * ((T)1 - z) * ((T)1 - n * n);
        T dr = dn * hn * r * ((T)1 - r);
        T dz = d * (hx[i] - n) * z * ((T)1 - z);
        T *gx_ = dgx + b * 3 * H, *gh_ = dgh + b * 3 * H;
        gx_[j] = gh_[j] = dr;
        gx_[H + j] = gh_[H + j] = dz;
        gx_[2 * H + j] = dn;
        gh_[2 * H + j] = dn * r;
        dhx[i] = d * z;
    } else {
        T y = hy[i];
        dgx[i] = mode == 0 ? d * ((T)1 - y * y) : (y > (T)0 ? d : (T)0);
    }
}

#define RNN_KERNELS(suffix, T)                                                                         \
    extern "C" __global__ void rnn_cell_##suffix(int mode, const T *gx, const T *gh, const T *bh,      \
                                                 const T *hx, const T *cx, T *hy, T *cy, T *saved,     \
                                                 long long rows, long long H) {                        \
        GRID_STRIDE_LOOP(i, rows * H) rnn_cell_unit(mode, gx, gh, bh, hx, cx, hy, cy, saved, H, i);    \
    }                                                                                                  \
    extern "C" __global__ void rnn_cell_backward_##suffix(                                             \
        int mode, const T *dh, const T *dy, const T *dc, const T *hx, const T *cx, const T *hy,        \
        const T *cy, const T *saved, T *dgx, T *dgh, T *dhx, T *dcx, long long rows, long long H) {    \
        GRID_STRIDE_LOOP(i, rows * H)                                                                  \
            rnn_cell_backward_unit(mode, dh, dy, dc, hx, cx, hy, cy, saved, dgx, dgh, dhx, dcx, H, i); \
    }
FOR_FLOAT_DTYPES(RNN_KERNELS)
