// Elementwise primitives: unary, binary, compare, where and copy (with dtype conversion).
// Op codes are the positions of the names in minidl/kernels.py (UNARY_OPS, BINARY_OPS,
// COMPARE_OPS); the math follows minidl/cpu/jit.py op for op, so both devices agree.

// ------------------------------------------ float math per type (exp, log and sqrt: common.cuh)
__device__ __forceinline__ float m_log1p(float x) { return log1pf(x); }
__device__ __forceinline__ double m_log1p(double x) { return log1p(x); }
__device__ __forceinline__ float m_expm1(float x) { return expm1f(x); }
__device__ __forceinline__ double m_expm1(double x) { return expm1(x); }
__device__ __forceinline__ float m_sin(float x) { return sinf(x); }
__device__ __forceinline__ double m_sin(double x) { return sin(x); }
__device__ __forceinline__ float m_cos(float x) { return cosf(x); }
__device__ __forceinline__ double m_cos(double x) { return cos(x); }
__device__ __forceinline__ float m_tan(float x) { return tanf(x); }
__device__ __forceinline__ double m_tan(double x) { return tan(x); }
__device__ __forceinline__ float m_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double m_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float m_erf(float x) { return erff(x); }
__device__ __forceinline__ double m_erf(double x) { return erf(x); }
__device__ __forceinline__ float m_floor(float x) { return floorf(x); }
__device__ __forceinline__ double m_floor(double x) { return floor(x); }
__device__ __forceinline__ float m_ceil(float x) { return ceilf(x); }
__device__ __forceinline__ double m_ceil(double x) { return ceil(x); }
__device__ __forceinline__ float m_rint(float x) { return rintf(x); }
__device__ __forceinline__ double m_rint(double x) { return rint(x); }
__device__ __forceinline__ float m_trunc(float x) { return truncf(x); }
__device__ __forceinline__ double m_trunc(double x) { return trunc(x); }
__device__ __forceinline__ float m_fmod(float x, float y) { return fmodf(x, y); }
__device__ __forceinline__ double m_fmod(double x, double y) { return fmod(x, y); }
__device__ __forceinline__ float m_pow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double m_pow(double x, double y) { return pow(x, y); }
__device__ __forceinline__ float m_atan2(float x, float y) { return atan2f(x, y); }
__device__ __forceinline__ double m_atan2(double x, double y) { return atan2(x, y); }
__device__ __forceinline__ float m_copysign(float x, float y) { return copysignf(x, y); }
__device__ __forceinline__ double m_copysign(double x, double y) { return copysign(x, y); }

template <class T> __device__ __forceinline__ T inf_of() { return (T)(1.0 / 0.0); }
template <class T> __device__ __forceinline__ T nan_of() { return (T)(0.0 / 0.0); }

// ---------------------------------------------------------------------------- unary
template <class T> __device__ __forceinline__ T float_unary(int op, T x) {
    switch (op) {
        case 3: return m_exp(x);
        case 4: return x > 0 ? m_log(x) : (x == 0 ? -inf_of<T>() : nan_of<T>());
        case 5: return x > -1 ? m_log1p(x) : (x == -1 ? -inf_of<T>() : nan_of<T>());
        case 6: return m_expm1(x);
        case 7: return x >= 0 ? m_sqrt(x) : nan_of<T>();
        case 8: return x > 0 ? (T)1 / m_sqrt(x) : (x == 0 ? inf_of<T>() : nan_of<T>());
        case 9: return x != 0 ? (T)1 / x : m_copysign(inf_of<T>(), x);
        case 10: return m_sin(x);
        case 11: return m_cos(x);
        case 12: return m_tan(x);
        case 13: return m_tanh(x);
        case 14: if (x >= 0) return (T)1 / ((T)1 + m_exp(-x)); else { T e = m_exp(x); return e / ((T)1 + e); }
        case 16: return m_erf(x);
        case 17: return m_floor(x);
        case 18: return m_ceil(x);
        case 19: return m_rint(x);
        default: return m_trunc(x);
    }
}
__device__ __forceinline__ float unary_rest(int op, float x) { return float_unary(op, x); }
__device__ __forceinline__ double unary_rest(int op, double x) { return float_unary(op, x); }
__device__ __forceinline__ long long unary_rest(int, long long x) { return x; }  // floor/ceil/round/trunc of an int

template <class T> __device__ __forceinline__ T apply_unary(int op, T x) {
    switch (op) {
        case 0: return -x;
        case 1: return x < 0 ? -x : x;
        case 2: return (T)((x > 0) - (x < 0));  // 0 for NaN, as in PyTorch
        case 15: return x < 0 ? (T)0 : x;        // relu keeps NaN; +0 for -inf and negatives
        case 21: return x * x;
        default: return unary_rest(op, x);
    }
}

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
            UNARY_CASE(0) UNARY_CASE(1) UNARY_CASE(2) UNARY_CASE(3) UNARY_CASE(4) UNARY_CASE(5)   \
            UNARY_CASE(6) UNARY_CASE(7) UNARY_CASE(8) UNARY_CASE(9) UNARY_CASE(10) UNARY_CASE(11) \
            UNARY_CASE(12) UNARY_CASE(13) UNARY_CASE(14) UNARY_CASE(15) UNARY_CASE(16)            \
            UNARY_CASE(17) UNARY_CASE(18) UNARY_CASE(19) UNARY_CASE(20) UNARY_CASE(21)            \
        }                                                                                         \
    }
FOR_FLOAT_DTYPES(UNARY_PACKED_KERNEL)
UNARY_PACKED_KERNEL(i64, long long)

// ---------------------------------------------------------------------------- binary
// x / y (op 3), x // y (op 4), x % y (op 5) in floating point with Python's floor semantics
// (the remainder takes the divisor's sign) and IEEE results for y == 0, as on the CPU.
template <class T> __device__ __forceinline__ T float_divide(int op, T x, T y) {
    if (y == 0) {
        if (op == 5 || x != x || x == 0) return nan_of<T>();
        return m_copysign(inf_of<T>(), x) * m_copysign((T)1, y);
    }
    if (op == 3) return x / y;
    T mod = m_fmod(x, y);
    T div = (x - mod) / y;
    if (mod != 0) {
        if ((y < 0) != (mod < 0)) { mod += y; div -= 1; }
    } else {
        mod = m_copysign((T)0, y);
    }
    if (op == 5) return mod;
    if (div == 0) return m_copysign((T)0, x / y);
    T q = m_floor(div);
    return div - q > (T)0.5 ? q + 1 : q;
}

__device__ __forceinline__ long long int_divide(int op, long long x, long long y) {
    if (y == 0) return 0;  // the CPU raises; a kernel cannot, and PyTorch's CUDA gives garbage
    if (op == 3) return x / y;
    long long q = x / y, r = x - q * y;
    if (r != 0 && ((r < 0) != (y < 0))) { q -= 1; r += y; }
    return op == 4 ? q : r;
}

__device__ __forceinline__ long long int_pow(long long x, long long y) {
    if (y < 0) return x == 1 ? 1 : (x == -1 ? (y % 2 ? -1 : 1) : 0);
    long long result = 1;
    while (y) {
        if (y & 1) result *= x;
        x *= x;
        y >>= 1;
    }
    return result;
}

__device__ __forceinline__ float binary_rest(int op, float x, float y) {
    return op == 6 ? m_pow(x, y) : (op == 10 ? m_atan2(x, y) : float_divide(op, x, y));
}
__device__ __forceinline__ double binary_rest(int op, double x, double y) {
    return op == 6 ? m_pow(x, y) : (op == 10 ? m_atan2(x, y) : float_divide(op, x, y));
}
__device__ __forceinline__ long long binary_rest(int op, long long x, long long y) {
    return op == 6 ? int_pow(x, y) : (op == 10 ? 0 : int_divide(op, x, y));
}

template <class T> __device__ __forceinline__ T apply_binary(int op, T x, T y) {
    switch (op) {
        case 0: return x + y;
        case 1: return x - y;
        case 2: return x * y;
        case 7: return (x >= y || x != x) ? x : y;  // maximum/minimum propagate NaN
        case 8: return (x <= y || x != x) ? x : y;
        case 9: return y > 0 ? x : x * 0;          // gate: ReLU's backward
        default: return binary_rest(op, x, y);
    }
}

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
            BINARY_CASE(0) BINARY_CASE(1) BINARY_CASE(2) BINARY_CASE(3) BINARY_CASE(4)            \
            BINARY_CASE(5) BINARY_CASE(6) BINARY_CASE(7) BINARY_CASE(8) BINARY_CASE(9)            \
            BINARY_CASE(10)                                                                       \
        }                                                                                         \
    }
FOR_COMPUTE_DTYPES(BINARY_PACKED_KERNEL)

// ---------------------------------------------------------------------------- compare and where
template <class T> __device__ __forceinline__ bool apply_compare(int op, T x, T y) {
    switch (op) {
        case 0: return x == y;
        case 1: return x != y;
        case 2: return x < y;
        case 3: return x <= y;
        case 4: return x > y;
        case 5: return x >= y;
        case 6: return (x != 0) && (y != 0);
        case 7: return (x != 0) || (y != 0);
        default: return (x != 0) != (y != 0);
    }
}

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

// Float to integer as on the CPU (minidl/cpu/jit.py, _convert): truncate toward zero into int32
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
