// Philox4x32-10 of one counter under a 64-bit key, and the uniforms the contract makes of its words
// (minidl/kernels/__init__.py): shared by the random primitive and the attention kernels' dropout, so that
// both draw the same bits for the same (seed, counter).

struct Words { unsigned int w0, w1, w2, w3; };

__device__ __forceinline__ Words philox(unsigned long long counter, unsigned long long seed) {
    unsigned int c0 = (unsigned int)counter, c1 = (unsigned int)(counter >> 32), c2 = 0u, c3 = 0u;
    unsigned int k0 = (unsigned int)seed, k1 = (unsigned int)(seed >> 32);
    for (int r = 0; r < 10; ++r) {
        if (r) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
        unsigned long long p0 = 0xD2511F53ull * c0, p1 = 0xCD9E8D57ull * c2;
        unsigned int n0 = (unsigned int)(p1 >> 32) ^ c1 ^ k0, n2 = (unsigned int)(p0 >> 32) ^ c3 ^ k1;
        c0 = n0; c1 = (unsigned int)p1; c2 = n2; c3 = (unsigned int)p0;
    }
    return Words{c0, c1, c2, c3};
}

__device__ __forceinline__ unsigned long long join(unsigned int lo, unsigned int hi) {
    return ((unsigned long long)hi << 32) | lo;
}
__device__ __forceinline__ double u53(unsigned int lo, unsigned int hi) {
    return (double)(join(lo, hi) >> 11) * 0x1p-53;
}
__device__ __forceinline__ double unit(float *, const Words &w) { return (double)(w.w0 >> 8) * 0x1p-24; }
__device__ __forceinline__ double unit(double *, const Words &w) { return u53(w.w0, w.w1); }

// A draw's key and counter start: the (seed, offset) arguments, or, when `state` is not null, read on the
// device from state = (seed, base offset) with the offset argument a delta added to the base. A CUDA graph
// that captured the launch then draws new numbers at each replay once the host rewrites state between
// replays (torch's PhiloxCudaState keeps an offset pointer and an intra-graph offset for the same reason).
__device__ __forceinline__ unsigned long long philox_seed(const unsigned long long *state,
                                                          unsigned long long seed) {
    return state ? state[0] : seed;
}
__device__ __forceinline__ unsigned long long philox_offset(const unsigned long long *state,
                                                            unsigned long long offset) {
    return state ? state[1] + offset : offset;
}
