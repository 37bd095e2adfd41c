// Gather/scatter over flat (row-major) element indices: take, put, and nonzero's three passes.
// take and put check every index against the element count of the indexed layout: a bad one is
// recorded with report_index_error (the host raises IndexError at its next synchronisation) and
// its element is skipped, so no thread reads or writes outside the buffer.

// ---------------------------------------------------------------------------- check_index
// out = stride * index, wrapped by size where negative (when wrap). A bad index is reported as
// given and its term becomes 2^62: any flat index summed from it lies beyond every tensor (and
// below 2^63), so the take or put that follows skips it instead of touching a wrong element.
extern "C" __global__ void check_index(const long long *index, long long size, long long stride, int wrap,
                                       long long *out, long long n, long long *error) {
    GRID_STRIDE_LOOP(i, n) {
        long long v = index[i];
        long long w = (wrap && v < 0) ? v + size : v;
        if (w < 0 || w >= size) {
            report_index_error(error, v, size);
            out[i] = 1ll << 62;
        } else {
            out[i] = w * stride;
        }
    }
}

// ---------------------------------------------------------------------------- take / put
#define TAKE_KERNEL(suffix, T)                                                                    \
    extern "C" __global__ void take_##suffix(const T *src, const Layout sl, const long long *index, \
                                             T *out, long long n, long long numel,                \
                                             long long *error) {                                  \
        GRID_STRIDE_LOOP(i, n) {                                                                  \
            long long f = index[i];                                                               \
            if (f < 0 || f >= numel) {                                                            \
                report_index_error(error, f, numel);                                              \
                out[i] = (T)0;                                                                    \
            } else {                                                                              \
                out[i] = src[position(sl, f)];                                                    \
            }                                                                                     \
        }                                                                                         \
    }
FOR_COMPUTE_DTYPES(TAKE_KERNEL)

// Accumulation with duplicate indices needs atomics; a bool "sum" is a logical or, and storing
// true is the same write from every thread, so it needs none.
__device__ __forceinline__ void accumulate(float *p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void accumulate(double *p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void accumulate(long long *p, long long v) {
    atomicAdd((unsigned long long *)p, (unsigned long long)v);  // two's complement: the same bits
}
__device__ __forceinline__ void accumulate(bool *p, bool v) {
    if (v) *p = true;
}

#define PUT_KERNEL(suffix, T)                                                                     \
    extern "C" __global__ void put_##suffix(T *dst, const Layout dl, const long long *index,       \
                                            const T *values, int add, long long n,                \
                                            long long numel, long long *error) {                  \
        GRID_STRIDE_LOOP(i, n) {                                                                  \
            long long f = index[i];                                                               \
            if (f < 0 || f >= numel) {                                                            \
                report_index_error(error, f, numel);                                              \
            } else if (add) {                                                                     \
                accumulate(dst + position(dl, f), values[i]);                                     \
            } else {                                                                              \
                dst[position(dl, f)] = values[i];                                                 \
            }                                                                                     \
        }                                                                                         \
    }
FOR_COMPUTE_DTYPES(PUT_KERNEL)

// ---------------------------------------------------------------------------- nonzero
// The elements are cut into tiles of blockDim.x (one per thread); pass 1 counts each tile's
// nonzeros, pass 2 turns the counts into exclusive offsets (one block), pass 3 writes each
// nonzero's flat index at its tile's offset plus its rank inside the tile. The output stays in
// element order, and every pass reads coalesced.

// Inclusive sum of v over the block (in thread order); *total gets the block's sum. warp_sums
// is __shared__ space for 32 values; blockDim.x must be a multiple of 32.
__device__ __forceinline__ long long block_inclusive_scan(long long v, long long *warp_sums, long long *total) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int d = 1; d < 32; d <<= 1) {
        long long up = __shfl_up_sync(FULL_MASK, v, d);
        if (lane >= d) v += up;
    }
    if (lane == 31) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        long long s = lane < warps ? warp_sums[lane] : 0;
        for (int d = 1; d < 32; d <<= 1) {
            long long up = __shfl_up_sync(FULL_MASK, s, d);
            if (lane >= d) s += up;
        }
        warp_sums[lane] = s;
    }
    __syncthreads();
    v += warp ? warp_sums[warp - 1] : 0;
    *total = warp_sums[warps - 1];
    __syncthreads();  // warp_sums is free for the next call
    return v;
}

#define NONZERO_KERNELS(suffix, T)                                                                \
    extern "C" __global__ void nonzero_count_##suffix(const T *x, const Layout xl, long long n,   \
                                                      long long *counts) {                       \
        __shared__ long long warp_sums[32];                                                       \
        long long tiles = (n + blockDim.x - 1) / blockDim.x;                                      \
        for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {                      \
            long long i = tile * blockDim.x + threadIdx.x;                                        \
            long long total;                                                                      \
            block_inclusive_scan(i < n && x[position(xl, i)] != 0, warp_sums, &total);            \
            if (threadIdx.x == 0) counts[tile] = total;                                           \
        }                                                                                         \
    }                                                                                             \
    extern "C" __global__ void nonzero_write_##suffix(const T *x, const Layout xl, long long n,   \
                                                      const long long *offsets, long long *out) { \
        __shared__ long long warp_sums[32];                                                       \
        long long tiles = (n + blockDim.x - 1) / blockDim.x;                                      \
        for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {                      \
            long long i = tile * blockDim.x + threadIdx.x;                                        \
            bool keep = i < n && x[position(xl, i)] != 0;                                         \
            long long total;                                                                      \
            long long rank = block_inclusive_scan(keep, warp_sums, &total);                       \
            if (keep) out[offsets[tile] + rank - 1] = i;                                          \
        }                                                                                         \
    }
FOR_COMPUTE_DTYPES(NONZERO_KERNELS)

// offsets[t] = counts[0] + ... + counts[t-1] for t <= tiles (offsets[tiles] is the total); launched
// as one block (of up to 1024 threads), which walks the counts blockDim.x at a time.
extern "C" __global__ void exclusive_scan_i64(const long long *counts, long long tiles, long long *offsets) {
    __shared__ long long warp_sums[32];
    long long running = 0;
    for (long long base = 0; base < tiles; base += blockDim.x) {
        long long i = base + threadIdx.x;
        long long v = i < tiles ? counts[i] : 0;
        long long total;
        long long inclusive = block_inclusive_scan(v, warp_sums, &total);
        if (i < tiles) offsets[i] = running + inclusive - v;
        running += total;
    }
    if (threadIdx.x == 0) offsets[tiles] = running;
}
