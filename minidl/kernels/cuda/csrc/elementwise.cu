// Elementwise primitives: unary, binary, compare, where and copy (with dtype conversion).
// The ops' math is generated from minidl/formulas/table.py (formulas.cuh), as the CPU's is, so
// both devices compute the same formulas; the kernels here only walk the operands.

#include "formulas.cuh"  // apply_unary, apply_binary and apply_compare: the ops' math

#define UNARY_KERNEL(suffix, T)                                                                   \
    extern "C" __global__ void unary_##suffix(int op, const T *x, const Layout xl, T *out,         \
                                              const Layout ol, long long n) {                     \
        GRID_STRIDE_LOOP(i, n) out[position(ol, i)] = apply_unary(op, x[position(xl, i)]);        \
    }
FOR_FLOAT_DTYPES(UNARY_KERNEL)
UNARY_KERNEL(i64, long long)

// Packed operands: the op is a template argument, so the loop holds no switch.
template <int OP, class T>
__device__ __forceinline__ void unary_packed_loop(const T *__restrict__ x, T *__restrict__ out, long long n) {
#define UNARY_PACKED_BODY(i) out[i] = apply_unary(OP, x[i]);
    PACKED_LOOP(n, UNARY_PACKED_BODY)
#undef UNARY_PACKED_BODY
}

#define UNARY_CASE(k) case k: unary_packed_loop<k>(x + xo, out + oo, n); break;
#define UNARY_PACKED_KERNEL(suffix, T)                                                            \
    extern "C" __global__ void __launch_bounds__(256) unary_packed_##suffix(                      \
            int op, const T *x, long long xo, T *out, long long oo, long long n) {                \
        switch (op) {                                                                             \
            FOR_UNARY_OPS(UNARY_CASE)                                                             \
            default: __trap();  /* an unknown code is a bug */                                    \
        }                                                                                         \
    }
FOR_FLOAT_DTYPES(UNARY_PACKED_KERNEL)
UNARY_PACKED_KERNEL(i64, long long)

// ---------------------------------------------------------------------------- binary
// bools compute as integers (True + True is True, as numpy's logical add)
__device__ __forceinline__ bool apply_binary(int op, bool x, bool y) {
    return apply_binary(op, (long long)x, (long long)y) != 0;
}

#define BINARY_KERNEL(suffix, T)                                                                  \
    extern "C" __global__ void binary_##suffix(int op, const T *a, const Layout al, const T *b,    \
                                               const Layout bl, T *out, const Layout ol,           \
                                               long long n) {                                      \
        GRID_STRIDE_LOOP(i, n) out[position(ol, i)] = apply_binary(op, a[position(al, i)],         \
                                                                   b[position(bl, i)]);           \
    }
FOR_COMPUTE_DTYPES(BINARY_KERNEL)

// Packed operands; a and b have stride 1 or 0 (a broadcast scalar, such as a bias or a number).
template <int OP, class T>
__device__ __forceinline__ void binary_packed_loop(const T *__restrict__ a, long long sa, const T *__restrict__ b,
                                                   long long sb, T *__restrict__ out, long long n) {
#define BINARY_PACKED_BODY(i) out[i] = apply_binary(OP, a[(i) * sa], b[(i) * sb]);
    PACKED_LOOP(n, BINARY_PACKED_BODY)
#undef BINARY_PACKED_BODY
}

#define BINARY_CASE(k) case k: binary_packed_loop<k>(a + ao, sa, b + bo, sb, out + oo, n); break;
#define BINARY_PACKED_KERNEL(suffix, T)                                                           \
    extern "C" __global__ void __launch_bounds__(256) binary_packed_##suffix(                     \
            int op, const T *a, long long ao, long long sa, const T *b, long long bo, long long sb, \
            T *out, long long oo, long long n) {                                                  \
        switch (op) {                                                                             \
            FOR_BINARY_OPS(BINARY_CASE)                                                           \
            default: __trap();                                                                    \
        }                                                                                         \
    }
FOR_COMPUTE_DTYPES(BINARY_PACKED_KERNEL)

// ---------------------------------------------------------------------------- compare and where
#define COMPARE_KERNEL(suffix, T)                                                                 \
    extern "C" __global__ void compare_##suffix(int op, const T *a, const Layout al, const T *b,   \
                                                const Layout bl, bool *out, const Layout ol,       \
                                                long long n) {                                     \
        GRID_STRIDE_LOOP(i, n) out[position(ol, i)] = apply_compare(op, a[position(al, i)],        \
                                                                    b[position(bl, i)]);          \
    }
FOR_COMPUTE_DTYPES(COMPARE_KERNEL)

#define WHERE_KERNEL(suffix, T)                                                                   \
    extern "C" __global__ void where_##suffix(const bool *c, const Layout cl, const T *a,          \
                                              const Layout al, const T *b, const Layout bl,        \
                                              T *out, const Layout ol, long long n) {             \
        GRID_STRIDE_LOOP(i, n) out[position(ol, i)] = c[position(cl, i)] ? a[position(al, i)]     \
                                                                         : b[position(bl, i)];    \
    }
FOR_COMPUTE_DTYPES(WHERE_KERNEL)

// ---------------------------------------------------------------------------- copy with conversion
// float16 is stored as its bits; conversions go through float, rounding to nearest even.
struct half_t { unsigned short bits; };

__device__ __forceinline__ float half_to_float(unsigned int h) {
    unsigned int sign = (h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu, bits;
    if (exponent == 0x1fu) {
        bits = sign | 0x7f800000u | (mantissa << 13);         // inf, NaN
    } else if (exponent) {
        bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
    } else if (mantissa == 0) {
        bits = sign;                                            // +-0
    } else {                                                    // subnormal: normalise
        unsigned int shifts = 0;
        while (!(mantissa & 0x400u)) { mantissa <<= 1; ++shifts; }
        bits = sign | ((113u - shifts) << 23) | ((mantissa & 0x3ffu) << 13);
    }
    return __uint_as_float(bits);
}

__device__ __forceinline__ unsigned short float_to_half(float f) {
    unsigned int x = __float_as_uint(f), sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
    if (a >= 0x7f800000u) return (unsigned short)(sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);   // rounds past 65504: inf
    if (a < 0x33000000u) return (unsigned short)sign;                 // at most 2^-25: zero
    if (a < 0x38800000u) {                                            // half subnormal
        unsigned int shift = 126u - (a >> 23), m = (a & 0x7fffffu) | 0x800000u;
        unsigned int r = m >> shift, rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rest > half || (rest == half && (r & 1u))) ++r;
        return (unsigned short)(sign | r);
    }
    unsigned int rebiased = a - 0x38000000u, h = rebiased >> 13, rest = rebiased & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
    return (unsigned short)(sign | h);
}

// bfloat16 is stored as its bits too: the top half of a float32's (minidl/_bfloat16.py). Widening is
// a shift; narrowing (from float; other types by way of float, as in PyTorch) rounds to nearest
// even, and a NaN stays a quiet NaN with its sign.
struct bf16_t { unsigned short bits; };

__device__ __forceinline__ float bf16_to_float(unsigned int b) { return __uint_as_float(b << 16); }

__device__ __forceinline__ unsigned short float_to_bf16(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// the float value of a stored element: the half types widen, the others are themselves
template <class S> __device__ __forceinline__ S widen(S v) { return v; }
__device__ __forceinline__ float widen(half_t v) { return half_to_float(v.bits); }
__device__ __forceinline__ float widen(bf16_t v) { return bf16_to_float(v.bits); }

template <class T> struct Cast {
    template <class S> __device__ static T from(S v) { return (T)widen(v); }
};

// Float to integer as on the CPU (minidl/kernels/cpu/jit/convert.py): truncate toward zero into int32
// (signed targets of up to 32 bits) or int64 (the others), where NaN and values outside that
// range become its minimum; then keep the low bits. CUDA's conversion instructions saturate
// instead, so the rule is written out. (double holds every float exactly.)
template <class Via> __device__ __forceinline__ Via truncate_or_min(double v);
template <> __device__ __forceinline__ int truncate_or_min<int>(double v) {
    return (v > -2147483649.0 && v < 2147483648.0) ? (int)v : (int)(-2147483647 - 1);
}
template <> __device__ __forceinline__ long long truncate_or_min<long long>(double v) {
    return (v >= -9223372036854775808.0 && v < 9223372036854775808.0) ? (long long)v
                                                                        : (-9223372036854775807LL - 1);
}
template <class T, class Via> struct CastToInteger {
    template <class S> __device__ static T from(S v) { return (T)v; }  // from integers: the low bits
    __device__ static T from(float v) { return (T)truncate_or_min<Via>(v); }
    __device__ static T from(double v) { return (T)truncate_or_min<Via>(v); }
    __device__ static T from(half_t v) { return from(widen(v)); }
    __device__ static T from(bf16_t v) { return from(widen(v)); }
};
template <> struct Cast<unsigned char> : CastToInteger<unsigned char, long long> {};
template <> struct Cast<short> : CastToInteger<short, int> {};
template <> struct Cast<int> : CastToInteger<int, int> {};
template <> struct Cast<long long> : CastToInteger<long long, long long> {};
template <> struct Cast<bool> {
    template <class S> __device__ static bool from(S v) { return widen(v) != 0; }
};
template <> struct Cast<half_t> {
    template <class S> __device__ static half_t from(S v) { return half_t{float_to_half((float)widen(v))}; }
    __device__ static half_t from(half_t v) { return v; }
};
template <> struct Cast<bf16_t> {
    template <class S> __device__ static bf16_t from(S v) { return bf16_t{float_to_bf16((float)widen(v))}; }
    __device__ static bf16_t from(bf16_t v) { return v; }
};

// packed: src is a run (stride 1) or a scalar (stride 0, a fill), dst a run
template <class S, class D>
__device__ __forceinline__ void copy_packed_loop(const S *__restrict__ src, long long ss, D *__restrict__ dst,
                                                 long long n) {
#define COPY_PACKED_BODY(i) dst[i] = Cast<D>::from(src[(i) * ss]);
    PACKED_LOOP(n, COPY_PACKED_BODY)
#undef COPY_PACKED_BODY
}

#define COPY_KERNEL(s_suffix, S, d_suffix, D)                                                     \
    extern "C" __global__ void copy_##s_suffix##_##d_suffix(const S *src, const Layout sl, D *dst, \
                                                            const Layout dl, long long n) {       \
        GRID_STRIDE_LOOP(i, n) dst[position(dl, i)] = Cast<D>::from(src[position(sl, i)]);        \
    }                                                                                             \
    extern "C" __global__ void __launch_bounds__(256) copy_packed_##s_suffix##_##d_suffix(        \
            const S *src, long long so, long long ss, D *dst, long long do_, long long n) {       \
        copy_packed_loop(src + so, ss, dst + do_, n);                                             \
    }
#define COPY_FROM(s_suffix, S)                                                                    \
    COPY_KERNEL(s_suffix, S, b8, bool) COPY_KERNEL(s_suffix, S, u8, unsigned char)                \
    COPY_KERNEL(s_suffix, S, i16, short) COPY_KERNEL(s_suffix, S, i32, int)                       \
    COPY_KERNEL(s_suffix, S, i64, long long) COPY_KERNEL(s_suffix, S, f16, half_t)                \
    COPY_KERNEL(s_suffix, S, bf16, bf16_t) COPY_KERNEL(s_suffix, S, f32, float)                   \
    COPY_KERNEL(s_suffix, S, f64, double)
COPY_FROM(b8, bool) COPY_FROM(u8, unsigned char) COPY_FROM(i16, short) COPY_FROM(i32, int)
COPY_FROM(i64, long long) COPY_FROM(f16, half_t) COPY_FROM(bf16, bf16_t) COPY_FROM(f32, float)
COPY_FROM(f64, double)

// A number of up to 8 bytes, passed as a kernel argument, stored to device memory: how a Python
// number reaches the GPU without a copy from the host, which would make the host wait (and which a
// graph capture refuses). bits holds the value's bytes, little-endian, as on the host.
extern "C" __global__ void store_bytes(unsigned char *out, unsigned long long bits, int nbytes) {
    if (blockIdx.x == 0 && threadIdx.x == 0)
        for (int i = 0; i < nbytes; ++i) out[i] = (unsigned char)(bits >> (8 * i));
}
