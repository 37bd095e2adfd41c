// Rows of packed buffers shared out to lanes: a warp per short row or the whole block per long one
// (`lanes` = 32 or blockDim.x), with reductions across a row's lanes (softmax.cu, norm_rows.cu, cross_entropy.cu).

// Every lane gets the max (MAX, NaN winning) or the sum of v over the row's lanes; a block-wide
// row synchronises, so all threads of the block call this.
template <bool MAX, class T> __device__ T lanes_reduce(T v, int lanes) {
    __shared__ T partial[32];
    for (int by = 16; by > 0; by >>= 1) {
        T u = __shfl_xor_sync(FULL_MASK, v, by);
        v = MAX ? ((v > u || v != v) ? v : u) : v + u;
    }
    if (lanes <= 32) return v;
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    v = partial[0];
    for (int w = 1; w < lanes / 32; ++w) {
        T u = partial[w];
        v = MAX ? ((v > u || v != v) ? v : u) : v + u;
    }
    __syncthreads();  // partial is reused by the next call
    return v;
}

// The rows of this thread's group, stepping over the grid: group g of G = blockDim.x / lanes.
#define FOR_EACH_ROW(row, rows, lanes)                                                                 \
    for (long long row = (long long)blockIdx.x * (blockDim.x / (lanes)) + threadIdx.x / (lanes);       \
         row < (rows); row += (long long)gridDim.x * (blockDim.x / (lanes)))
