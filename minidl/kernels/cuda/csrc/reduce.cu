// Reductions (sum, prod, max, min), arg reductions (argmax, argmin) and scans (cumsum, cumprod).
// Op codes are named in op_codes.cuh (generated from minidl/formulas/table.py). Sums and products accumulate in
// 64 bits of the input's kind (double for floats, long long for int64), as on the CPU; max/min and
// argmax/argmin let NaN win, and argmax/argmin keep the first index among equals.
//
// A reduction sees the input as (outputs, reduced) through two layouts: `outer` (kept dims, with
// the input's offset) and `inner` (reduced dims), so element (o, k) is
// x[position(outer, o) + position(inner, k)]. A block of B threads covers W outputs with H = B / W
// lanes each, the lanes splitting the reduced extent; `columns` says which way the threads run:
//   columns == 0: lanes of one output are consecutive threads (the reduced dim is the fastest);
//   columns == 1: consecutive threads own consecutive outputs (a kept dim is the fastest).
// Either way a warp reads consecutive memory. When there are few outputs, each one's reduced extent
// is split into `chunks` of `chunk` elements, each a separate block; the partials land in a scratch
// buffer (outputs x chunks) that a second launch reduces (see primitives/reduce.py).

#include "op_codes.cuh"

#define REDUCE_THREADS 256  // the block size of reduce and arg_reduce launches (the scratch of combine_lanes)

#include "reducer.cuh"  // Wide, lowest_of, highest_of, Reducer

// ---------------------------------------------------------------------------- (value, index) pairs
template <class T> struct Candidate { T value; long long index; };  // index -1: no element yet

template <int OP, class T> struct ArgReducer {
    typedef Candidate<T> State;
    __device__ static State identity() { State s; s.value = (T)0; s.index = -1; return s; }
    // NaN beats everything, then the larger (argmax) or smaller (argmin) value, then the lower index
    __device__ static bool wins(const State &a, const State &b) {
        if (b.index < 0) return true;
        if (a.index < 0) return false;
        bool a_nan = a.value != a.value, b_nan = b.value != b.value;
        if (a_nan || b_nan) return a_nan && (!b_nan || a.index < b.index);
        if (a.value == b.value) return a.index < b.index;
        return OP == ARG_REDUCE_ARGMAX ? a.value > b.value : a.value < b.value;
    }
    __device__ static State combine(State a, State b) { return wins(a, b) ? a : b; }
    __device__ static State shuffle_down(State s, int by) {
        s.value = __shfl_down_sync(FULL_MASK, s.value, by);
        s.index = __shfl_down_sync(FULL_MASK, s.index, by);
        return s;
    }
};

// ---------------------------------------------------------------------------- the shared tiling
struct Tiling {
    long long outputs, extent, chunks, chunk;  // outputs x extent elements; extent split in chunks
    int per_block, columns;                    // W outputs per block; thread order (see top)
};

// Combine the H lane states of each output; the result is valid in the thread with k_lane 0.
// Every thread of the block calls this (it synchronises).
template <class R> __device__ typename R::State combine_lanes(typename R::State v, typename R::State *smem,
                                                              const Tiling &t, int o_lane, int k_lane) {
    int lanes = blockDim.x / t.per_block;
    if (!t.columns) {  // lanes are consecutive threads: shuffles within a warp, then across warps
        for (int by = min(lanes, 32) / 2; by > 0; by >>= 1) v = R::combine(v, R::shuffle_down(v, by));
        if (lanes <= 32) return v;
        int warp = threadIdx.x / 32;
        if (threadIdx.x % 32 == 0) smem[warp] = v;
        __syncthreads();
        if (k_lane == 0)
            for (int w = 1; w < lanes / 32; ++w) v = R::combine(v, smem[warp + w]);
        __syncthreads();
        return v;
    }
    int w = t.per_block;  // lanes of one output are w threads apart: a tree in shared memory
    smem[k_lane * w + o_lane] = v;
    __syncthreads();
    for (int half = lanes / 2; half > 0; half >>= 1) {
        if (k_lane < half) smem[k_lane * w + o_lane] = R::combine(smem[k_lane * w + o_lane],
                                                                  smem[(k_lane + half) * w + o_lane]);
        __syncthreads();
    }
    return k_lane == 0 ? smem[o_lane] : v;
}

// Runs every (output tile, chunk) task of the grid; `src.load(pos, k)` reads element k of an output
// at buffer position pos, `dst.store(o, c, state)` writes output o's chunk c.
template <class R, class Src, class Dst>
__device__ void reduce_tiles(const Src &src, const Dst &dst, const Layout &outer, const Layout &inner,
                             const Tiling &t) {
    __shared__ typename R::State smem[REDUCE_THREADS];
    int w = t.per_block, lanes = blockDim.x / w;
    int o_lane = t.columns ? threadIdx.x % w : threadIdx.x / lanes;
    int k_lane = t.columns ? threadIdx.x / w : threadIdx.x % lanes;
    long long tiles = (t.outputs + w - 1) / w;
    for (long long task = blockIdx.x; task < tiles * t.chunks; task += gridDim.x) {
        long long o = task / t.chunks * w + o_lane, c = task % t.chunks;
        typename R::State acc = R::identity();
        if (o < t.outputs) {
            long long base = position(outer, o), k = c * t.chunk + k_lane;
            long long end = min(t.extent, (c + 1) * t.chunk);
            // four independent loads in flight per step, then the tail
            for (; k + 3 * lanes < end; k += 4 * lanes) {
                typename R::State a = src.load(base + position(inner, k), k);
                typename R::State b = src.load(base + position(inner, k + lanes), k + lanes);
                typename R::State c2 = src.load(base + position(inner, k + 2 * lanes), k + 2 * lanes);
                typename R::State d = src.load(base + position(inner, k + 3 * lanes), k + 3 * lanes);
                acc = R::combine(acc, R::combine(R::combine(a, b), R::combine(c2, d)));
            }
            for (; k < end; k += lanes) acc = R::combine(acc, src.load(base + position(inner, k), k));
        }
        acc = combine_lanes<R>(acc, smem, t, o_lane, k_lane);
        if (k_lane == 0 && o < t.outputs) dst.store(o, c, acc);
    }
}

// ---------------------------------------------------------------------------- reduce kernels
template <class In, class A> struct ValueSource {
    const In *x;
    __device__ A load(long long pos, long long) const { return (A)x[pos]; }
};
template <class Out, class A> struct ValueSink {
    Out *out;
    long long chunks;
    __device__ void store(long long o, long long c, A v) const { out[o * chunks + c] = (Out)v; }
};

template <int OP, class In, class Out>
__device__ void reduce_op(const In *x, const Layout &outer, const Layout &inner, const Tiling &t, Out *out) {
    typedef typename Wide<In>::type A;
    ValueSource<In, A> src = {x};
    ValueSink<Out, A> dst = {out, t.chunks};
    reduce_tiles<Reducer<OP, A> >(src, dst, outer, inner, t);
}

// reduce_<in>_<out>: out gets one value per (output, chunk); In -> Out pairs cover the direct
// reduction (T -> T), the per-chunk partials (float -> double) and their reduction (double -> float).
#define REDUCE_KERNEL(in_suffix, In, out_suffix, Out)                                                  \
    extern "C" __global__ void reduce_##in_suffix##_##out_suffix(                                      \
        int op, const In *x, const Layout outer, const Layout inner, long long outputs,                \
        long long extent, long long chunks, long long chunk, int per_block, int columns, Out *out) {    \
        Tiling t = {outputs, extent, chunks, chunk, per_block, columns};                               \
        switch (op) {                                                                                  \
            case REDUCE_SUM: reduce_op<REDUCE_SUM>(x, outer, inner, t, out); break;                    \
            case REDUCE_PROD: reduce_op<REDUCE_PROD>(x, outer, inner, t, out); break;                  \
            case REDUCE_MAX: reduce_op<REDUCE_MAX>(x, outer, inner, t, out); break;                    \
            case REDUCE_MIN: reduce_op<REDUCE_MIN>(x, outer, inner, t, out); break;                    \
            default: __trap();  /* an unknown code is a bug */                                         \
        }                                                                                              \
    }
REDUCE_KERNEL(f32, float, f32, float)
REDUCE_KERNEL(f32, float, f64, double)
REDUCE_KERNEL(f64, double, f32, float)
REDUCE_KERNEL(f64, double, f64, double)
REDUCE_KERNEL(i64, long long, i64, long long)

// ---------------------------------------------------------------------------- arg_reduce kernels
// indices == 0: element k's index is k; else (a second pass) it is indices[pos], a partial's index.
template <class T> struct CandidateSource {
    const T *x;
    const long long *indices;
    __device__ Candidate<T> load(long long pos, long long k) const {
        Candidate<T> s;
        s.value = x[pos];
        s.index = indices ? indices[pos] : k;
        return s;
    }
};
// values == 0: only the index is kept (the final pass)
template <class T> struct CandidateSink {
    T *values;
    long long *indices, chunks;
    __device__ void store(long long o, long long c, const Candidate<T> &s) const {
        if (values) values[o * chunks + c] = s.value;
        indices[o * chunks + c] = s.index;
    }
};

#define ARG_REDUCE_KERNEL(suffix, T)                                                                   \
    extern "C" __global__ void arg_reduce_##suffix(                                                    \
        int op, const T *x, const long long *x_indices, const Layout outer, const Layout inner,        \
        long long outputs, long long extent, long long chunks, long long chunk, int per_block,          \
        int columns, T *values, long long *indices) {                                                  \
        Tiling t = {outputs, extent, chunks, chunk, per_block, columns};                               \
        CandidateSource<T> src = {x, x_indices};                                                       \
        CandidateSink<T> dst = {values, indices, chunks};                                              \
        switch (op) {                                                                                  \
            case ARG_REDUCE_ARGMAX: reduce_tiles<ArgReducer<ARG_REDUCE_ARGMAX, T> >(src, dst, outer, inner, t); break; \
            case ARG_REDUCE_ARGMIN: reduce_tiles<ArgReducer<ARG_REDUCE_ARGMIN, T> >(src, dst, outer, inner, t); break; \
            default: __trap();                                                                         \
        }                                                                                              \
    }
FOR_FLOAT_DTYPES(ARG_REDUCE_KERNEL)
ARG_REDUCE_KERNEL(i64, long long)

// ---------------------------------------------------------------------------- scans
// Row r of the scan starts at position(x_rows, r) in x and position(out_rows, r) in out and has n
// elements, x_step and out_step apart. Sums and products run in 64 bits and are stored per element.

template <int OP, class A> __device__ __forceinline__ A warp_inclusive_scan(A v) {
    int lane = threadIdx.x % 32;
    for (int by = 1; by < 32; by <<= 1) {
        A before = __shfl_up_sync(FULL_MASK, v, by);
        if (lane >= by) v = Reducer<OP, A>::combine(before, v);
    }
    return v;
}

// The whole block scans one row, blockDim.x elements per step, carrying the total between steps.
template <int OP, class T> __device__ void scan_row_block(const T *x, long long px, long long xs, T *out,
                                                          long long po, long long os, long long n) {
    typedef typename Wide<T>::type A;
    __shared__ A totals[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    A carry = Reducer<OP, A>::identity();
    for (long long j0 = 0; j0 < n; j0 += blockDim.x) {
        long long j = j0 + threadIdx.x;
        A v = j < n ? (A)x[px + j * xs] : Reducer<OP, A>::identity();
        v = warp_inclusive_scan<OP>(v);
        if (lane == 31) totals[warp] = v;
        __syncthreads();
        if (warp == 0) {
            A t = lane < warps ? totals[lane] : Reducer<OP, A>::identity();
            t = warp_inclusive_scan<OP>(t);
            if (lane < warps) totals[lane] = t;
        }
        __syncthreads();
        if (warp > 0) v = Reducer<OP, A>::combine(totals[warp - 1], v);
        if (j < n) out[po + j * os] = (T)Reducer<OP, A>::combine(carry, v);
        carry = Reducer<OP, A>::combine(carry, totals[warps - 1]);
        __syncthreads();  // totals is rewritten by the next step
    }
}

// One warp scans one row, 32 elements per step.
template <int OP, class T> __device__ void scan_row_warp(const T *x, long long px, long long xs, T *out,
                                                         long long po, long long os, long long n) {
    typedef typename Wide<T>::type A;
    int lane = threadIdx.x % 32;
    A carry = Reducer<OP, A>::identity();
    for (long long j0 = 0; j0 < n; j0 += 32) {
        long long j = j0 + lane;
        A v = warp_inclusive_scan<OP>(j < n ? (A)x[px + j * xs] : Reducer<OP, A>::identity());
        if (j < n) out[po + j * os] = (T)Reducer<OP, A>::combine(carry, v);
        carry = Reducer<OP, A>::combine(carry, __shfl_sync(FULL_MASK, v, 31));
    }
}

// mode 0: a block per row; 1: a warp per row; 2: a thread per row, serially (for rows whose
// elements are far apart while neighbouring rows are adjacent: the threads of a warp then read
// consecutive memory at every step).
template <int OP, class T> __device__ void scan_op(const T *x, const Layout &x_rows, long long xs, T *out,
                                                   const Layout &out_rows, long long os, long long rows,
                                                   long long n, int mode) {
    typedef typename Wide<T>::type A;
    if (mode == 0) {
        for (long long r = blockIdx.x; r < rows; r += gridDim.x)
            scan_row_block<OP>(x, position(x_rows, r), xs, out, position(out_rows, r), os, n);
    } else if (mode == 1) {
        long long warps = blockDim.x / 32;
        for (long long r = blockIdx.x * warps + threadIdx.x / 32; r < rows; r += gridDim.x * warps)
            scan_row_warp<OP>(x, position(x_rows, r), xs, out, position(out_rows, r), os, n);
    } else {
        GRID_STRIDE_LOOP(r, rows) {
            long long px = position(x_rows, r), po = position(out_rows, r);
            A acc = Reducer<OP, A>::identity();
            for (long long j = 0; j < n; ++j) {
                acc = Reducer<OP, A>::combine(acc, (A)x[px + j * xs]);
                out[po + j * os] = (T)acc;
            }
        }
    }
}

#define SCAN_KERNEL(suffix, T)                                                                         \
    extern "C" __global__ void scan_##suffix(int op, const T *x, const Layout x_rows, long long x_step, \
                                             T *out, const Layout out_rows, long long out_step,         \
                                             long long rows, long long n, int mode) {                   \
        switch (op) { /* a scan runs the reduction of the same name: cumsum is a running sum */        \
            case SCAN_CUMSUM: scan_op<REDUCE_SUM>(x, x_rows, x_step, out, out_rows, out_step, rows, n, mode); break; \
            case SCAN_CUMPROD: scan_op<REDUCE_PROD>(x, x_rows, x_step, out, out_rows, out_step, rows, n, mode); break; \
            default: __trap();                                                                         \
        }                                                                                              \
    }
FOR_FLOAT_DTYPES(SCAN_KERNEL)
SCAN_KERNEL(i64, long long)
