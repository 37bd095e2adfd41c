// argsort: the stable sort order of each row, NaN counted as the largest value (first when
// descending). Ties are ordered by index, which makes the order total: any correct sort gives the
// stable result, so the parallel sorts below need no stability of their own.
//
// Rows of up to one tile are sorted by a bitonic network in shared memory (argsort_tiles, direct
// to `out`). Longer rows are cut into tiles sorted the same way into a scratch buffer of
// (key, index) pairs, then merged pairwise, run width doubling (argsort_merge), each element
// finding its place in the merged run by a binary search in the other run.

template <class T> __device__ __forceinline__ bool sorts_before(T a, long long ia, T b, long long ib, int descending) {
    bool a_nan = a != a, b_nan = b != b;
    if (a_nan != b_nan) return descending ? a_nan : b_nan;
    if (!a_nan && a != b) return descending ? a > b : a < b;
    return ia < ib;
}

// A block sorts `per_block` segments of `slots` (a power of two) at a time; segment s is tile
// s % tiles of row s / tiles. Padding slots carry indices >= slots and sort last.
template <class T>
__device__ void sort_tiles(const T *x, const Layout &x_rows, long long x_step, long long n, long long tile,
                           int slots, int descending, T *keys_out, long long *index_out, long long *out,
                           const Layout &out_rows, long long out_step, long long rows) {
    DYNAMIC_SHARED(T, keys);
    int per_block = max(1, (int)(2 * blockDim.x) / slots);
    int *index = (int *)(keys + per_block * slots);
    long long tiles = (n + tile - 1) / tile, segments = rows * tiles;
    for (long long first = (long long)blockIdx.x * per_block; first < segments;
         first += (long long)gridDim.x * per_block) {
        for (int q = threadIdx.x; q < per_block * slots; q += blockDim.x) {
            long long s = first + q / slots, start = s % tiles * tile;
            int local = q % slots;
            bool real = s < segments && local < min(tile, n - start);
            if (real) keys[q] = x[position(x_rows, s / tiles) + (start + local) * x_step];
            index[q] = real ? local : slots + local;
        }
        __syncthreads();
        for (int size = 2; size <= slots; size <<= 1) {
            for (int stride = size / 2; stride > 0; stride >>= 1) {
                for (int p = threadIdx.x; p < per_block * slots / 2; p += blockDim.x) {
                    int base = p / (slots / 2) * slots, pair = p % (slots / 2);
                    int i = base + pair / stride * 2 * stride + pair % stride, l = i + stride;
                    bool up = ((i - base) & size) == 0;
                    bool pads = index[i] >= slots || index[l] >= slots;
                    bool l_first = pads ? index[l] < index[i]
                                        : sorts_before(keys[l], index[l], keys[i], index[i], descending);
                    if (l_first == up) {
                        T k = keys[i]; keys[i] = keys[l]; keys[l] = k;
                        int t = index[i]; index[i] = index[l]; index[l] = t;
                    }
                }
                __syncthreads();
            }
        }
        for (int q = threadIdx.x; q < per_block * slots; q += blockDim.x) {
            long long s = first + q / slots, start = s % tiles * tile, row = s / tiles;
            if (s >= segments || index[q] >= slots) continue;
            long long at = start + q % slots;  // the sorted position within the row
            if (out) out[position(out_rows, row) + at * out_step] = start + index[q];
            else {
                keys_out[row * n + at] = keys[q];
                index_out[row * n + at] = start + index[q];
            }
        }
        __syncthreads();  // the shared arrays are refilled for the next segments
    }
}

// One merge step over packed (rows, n) pairs: runs of `width` become runs of 2 * width.
template <class T>
__device__ void merge_runs(const T *keys, const long long *index, T *keys_out, long long *index_out,
                           long long rows, long long n, long long width, int descending) {
    GRID_STRIDE_LOOP(e, rows * n) {
        long long row = e / n, j = e - row * n, base = row * n;
        long long start = j - j % (2 * width), mid = min(start + width, n), end = min(start + 2 * width, n);
        T key = keys[e];
        long long id = index[e];
        // the other run: count its elements that sort before this one
        long long lo = j < mid ? mid : start, hi = j < mid ? end : mid, first = lo;
        while (lo < hi) {
            long long m = (lo + hi) / 2;
            if (sorts_before(keys[base + m], index[base + m], key, id, descending)) lo = m + 1;
            else hi = m;
        }
        long long at = j < mid ? j + (lo - first) : (lo - start) + (j - mid) + start;
        keys_out[base + at] = key;
        index_out[base + at] = id;
    }
}

#define SORT_KERNELS(suffix, T)                                                                        \
    extern "C" __global__ void argsort_tiles_##suffix(                                                 \
        const T *x, const Layout x_rows, long long x_step, long long n, long long tile, int slots,      \
        int descending, T *keys_out, long long *index_out, long long *out, const Layout out_rows,      \
        long long out_step, long long rows) {                                                          \
        sort_tiles(x, x_rows, x_step, n, tile, slots, descending, keys_out, index_out, out, out_rows,   \
                   out_step, rows);                                                                    \
    }                                                                                                  \
    extern "C" __global__ void argsort_merge_##suffix(const T *keys, const long long *index,           \
                                                      T *keys_out, long long *index_out,               \
                                                      long long rows, long long n, long long width,    \
                                                      int descending) {                                \
        merge_runs(keys, index, keys_out, index_out, rows, n, width, descending);                      \
    }
FOR_FLOAT_DTYPES(SORT_KERNELS)
SORT_KERNELS(i64, long long)
