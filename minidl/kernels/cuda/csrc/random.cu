// The random primitive: element i of a draw is Philox4x32-10 of counter offset + i under key seed,
// then the kind's transform (minidl/kernels/__init__.py gives the formulas). Counter-based, so each thread
// computes its elements independently and the CPU kernels (minidl/kernels/cpu/jit/random.py) give the
// same bits. Double arithmetic avoids fused multiply-adds, which the CPU does not use either.

#ifdef MINIDL_SIM
__device__ __forceinline__ double mul_rn(double x, double y) { return x * y; }
__device__ __forceinline__ double add_rn(double x, double y) { return x + y; }
#else
__device__ __forceinline__ double mul_rn(double x, double y) { return __dmul_rn(x, y); }
__device__ __forceinline__ double add_rn(double x, double y) { return __dadd_rn(x, y); }
#endif

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

#define RANDOM_FLOAT_KERNELS(suffix, T)                                                             \
    extern "C" __global__ void random_uniform_##suffix(T *out, long long n, unsigned long long seed, \
                                                       unsigned long long offset, double a, double b) { \
        GRID_STRIDE_LOOP(i, n) {                                                                    \
            Words w = philox(offset + (unsigned long long)i, seed);                                 \
            out[i] = (T)add_rn(a, mul_rn(b - a, unit(out, w)));                                     \
        }                                                                                           \
    }                                                                                               \
    extern "C" __global__ void random_normal_##suffix(T *out, long long n, unsigned long long seed,  \
                                                      unsigned long long offset, double a, double b) { \
        GRID_STRIDE_LOOP(i, n) {                                                                    \
            Words w = philox(offset + (unsigned long long)i, seed);                                 \
            double radius = sqrt(mul_rn(-2.0, log(add_rn(u53(w.w0, w.w1), 0x1p-53))));             \
            double z = mul_rn(radius, cos(mul_rn(6.283185307179586, u53(w.w2, w.w3))));             \
            out[i] = (T)add_rn(a, mul_rn(b, z));                                                    \
        }                                                                                           \
    }
FOR_FLOAT_DTYPES(RANDOM_FLOAT_KERNELS)

// span = high - low as unsigned 64-bit (0: the whole 64-bit range)
extern "C" __global__ void random_integers_i64(long long *out, long long n, unsigned long long seed,
                                               unsigned long long offset, long long low,
                                               unsigned long long span) {
    GRID_STRIDE_LOOP(i, n) {
        Words w = philox(offset + (unsigned long long)i, seed);
        unsigned long long bits = join(w.w0, w.w1);
        out[i] = (long long)((unsigned long long)low + (span ? bits % span : bits));
    }
}
