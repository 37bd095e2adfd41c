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

#include "philox.cuh"  // philox(counter, seed) and the uniforms u24/u53 made of its words

#define RANDOM_FLOAT_KERNELS(suffix, T)                                                             \
    extern "C" __global__ void random_uniform_##suffix(T *out, long long n, unsigned long long seed, \
                                                       unsigned long long offset, const unsigned long long *state, \
                                                       double a, double b) {                         \
        seed = philox_seed(state, seed);                                                            \
        offset = philox_offset(state, offset);                                                      \
        GRID_STRIDE_LOOP(i, n) {                                                                    \
            Words w = philox(offset + (unsigned long long)i, seed);                                 \
            out[i] = (T)add_rn(a, mul_rn(b - a, unit(out, w)));                                     \
        }                                                                                           \
    }                                                                                               \
    extern "C" __global__ void random_normal_##suffix(T *out, long long n, unsigned long long seed,  \
                                                      unsigned long long offset, const unsigned long long *state, \
                                                      double a, double b) {                          \
        seed = philox_seed(state, seed);                                                            \
        offset = philox_offset(state, offset);                                                      \
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
                                               unsigned long long offset, const unsigned long long *state,
                                               long long low, unsigned long long span) {
    seed = philox_seed(state, seed);
    offset = philox_offset(state, offset);
    GRID_STRIDE_LOOP(i, n) {
        Words w = philox(offset + (unsigned long long)i, seed);
        unsigned long long bits = join(w.w0, w.w1);
        out[i] = (long long)((unsigned long long)low + (span ? bits % span : bits));
    }
}

// dropout: mask = scale where draw i (as random_uniform draws it for T) is below keep, else 0; out = x * mask.
// keep = 1 - p and scale = 1 / (1 - p), both already rounded to T by the host.
#define DROPOUT_KERNELS(suffix, T)                                                                    \
    extern "C" __global__ void dropout_##suffix(const T *x, T *out, T *mask, long long n,             \
                                                unsigned long long seed, unsigned long long offset,   \
                                                const unsigned long long *state, T keep, T scale) {   \
        seed = philox_seed(state, seed);                                                              \
        offset = philox_offset(state, offset);                                                        \
        GRID_STRIDE_LOOP(i, n) {                                                                      \
            Words w = philox(offset + (unsigned long long)i, seed);                                   \
            T m = unit(out, w) < (double)keep ? scale : (T)0;                                         \
            mask[i] = m;                                                                              \
            out[i] = x[i] * m;                                                                        \
        }                                                                                             \
    }
FOR_FLOAT_DTYPES(DROPOUT_KERNELS)
