// The formula language's library functions on the GPU (minidl/formulas/expr.py: MATH), one
// overload per element type, with the same meaning per dtype as the CPU's
// (minidl/kernels/cpu/jit/scalar_math.py). exp, log and sqrt are in common.cuh (other kernels use them).
// Integer kernels call only the functions that say what they do for integers.

template <class T> __device__ __forceinline__ T inf_of() { return (T)(1.0 / 0.0); }
template <class T> __device__ __forceinline__ T nan_of() { return (T)(0.0 / 0.0); }

__device__ __forceinline__ float m_atan(float x) { return atanf(x); }
__device__ __forceinline__ double m_atan(double x) { return atan(x); }
__device__ __forceinline__ float m_asin(float x) { return asinf(x); }
__device__ __forceinline__ double m_asin(double x) { return asin(x); }
__device__ __forceinline__ float m_acos(float x) { return acosf(x); }
__device__ __forceinline__ double m_acos(double x) { return acos(x); }
__device__ __forceinline__ float m_sinh(float x) { return sinhf(x); }
__device__ __forceinline__ double m_sinh(double x) { return sinh(x); }
__device__ __forceinline__ float m_cosh(float x) { return coshf(x); }
__device__ __forceinline__ double m_cosh(double x) { return cosh(x); }
__device__ __forceinline__ float m_asinh(float x) { return asinhf(x); }
__device__ __forceinline__ double m_asinh(double x) { return asinh(x); }
__device__ __forceinline__ float m_acosh(float x) { return acoshf(x); }
__device__ __forceinline__ double m_acosh(double x) { return acosh(x); }
__device__ __forceinline__ float m_atanh(float x) { return atanhf(x); }
__device__ __forceinline__ double m_atanh(double x) { return atanh(x); }
__device__ __forceinline__ float m_erfc(float x) { return erfcf(x); }
__device__ __forceinline__ double m_erfc(double x) { return erfc(x); }
__device__ __forceinline__ float m_log2(float x) { return log2f(x); }
__device__ __forceinline__ double m_log2(double x) { return log2(x); }
__device__ __forceinline__ float m_log10(float x) { return log10f(x); }
__device__ __forceinline__ double m_log10(double x) { return log10(x); }
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
__device__ __forceinline__ float m_copysign(float x, float y) { return copysignf(x, y); }
__device__ __forceinline__ double m_copysign(double x, double y) { return copysign(x, y); }
__device__ __forceinline__ float m_fmod(float x, float y) { return fmodf(x, y); }
__device__ __forceinline__ double m_fmod(double x, double y) { return fmod(x, y); }
__device__ __forceinline__ float m_atan2(float x, float y) { return atan2f(x, y); }
__device__ __forceinline__ double m_atan2(double x, double y) { return atan2(x, y); }

// rounding: integers are already whole
__device__ __forceinline__ float m_floor(float x) { return floorf(x); }
__device__ __forceinline__ double m_floor(double x) { return floor(x); }
__device__ __forceinline__ long long m_floor(long long x) { return x; }
__device__ __forceinline__ float m_ceil(float x) { return ceilf(x); }
__device__ __forceinline__ double m_ceil(double x) { return ceil(x); }
__device__ __forceinline__ long long m_ceil(long long x) { return x; }
__device__ __forceinline__ float m_rint(float x) { return rintf(x); }  // half to even
__device__ __forceinline__ double m_rint(double x) { return rint(x); }
__device__ __forceinline__ long long m_rint(long long x) { return x; }
__device__ __forceinline__ float m_trunc(float x) { return truncf(x); }
__device__ __forceinline__ double m_trunc(double x) { return trunc(x); }
__device__ __forceinline__ long long m_trunc(long long x) { return x; }

__device__ __forceinline__ float m_abs(float x) { return fabsf(x); }  // -0.0 gives 0.0, NaN stays NaN
__device__ __forceinline__ double m_abs(double x) { return fabs(x); }
__device__ __forceinline__ long long m_abs(long long x) { return x < 0 ? -x : x; }

// x ** y; an integer to a negative integer power is 0 unless x is 1 or -1, as in torch
__device__ __forceinline__ float m_pow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double m_pow(double x, double y) { return pow(x, y); }
__device__ __forceinline__ long long m_pow(long long x, long long y) {
    if (y < 0) return x == 1 ? 1 : (x == -1 ? (y % 2 ? -1 : 1) : 0);
    long long result = 1;
    while (y) {
        if (y & 1) result *= x;
        x *= x;
        y >>= 1;
    }
    return result;
}

// bitwise ops, integers only: the op layer refuses floats, which get x back here only so that float kernels compile;
// a shift below 0 or beyond 63 gives 0 (left) or the sign (right), as in torch
__device__ __forceinline__ long long m_bitand(long long x, long long y) { return x & y; }
__device__ __forceinline__ long long m_bitor(long long x, long long y) { return x | y; }
__device__ __forceinline__ long long m_bitxor(long long x, long long y) { return x ^ y; }
__device__ __forceinline__ long long m_shl(long long x, long long y) {
    return y < 0 || y > 63 ? 0 : (long long)((unsigned long long)x << y);
}
__device__ __forceinline__ long long m_shr(long long x, long long y) { return x >> (y < 0 || y > 63 ? 63 : y); }
template <typename T> __device__ __forceinline__ T m_bitand(T x, T) { return x; }
template <typename T> __device__ __forceinline__ T m_bitor(T x, T) { return x; }
template <typename T> __device__ __forceinline__ T m_bitxor(T x, T) { return x; }
template <typename T> __device__ __forceinline__ T m_shl(T x, T) { return x; }
template <typename T> __device__ __forceinline__ T m_shr(T x, T) { return x; }

// Python's x // y (rounded toward -inf) and x % y (the sign of y). Floats divided by zero: +-inf
// (NaN for 0 or NaN) and NaN; integers divided by zero: 0 (the CPU raises; a kernel cannot, and
// PyTorch's CUDA gives garbage).
template <class T> __device__ __forceinline__ T float_floor_divide(bool remainder, T x, T y) {
    if (y == 0) {
        if (remainder || x != x || x == 0) return nan_of<T>();
        return m_copysign(inf_of<T>(), x) * m_copysign((T)1, y);
    }
    T mod = m_fmod(x, y);
    T div = (x - mod) / y;
    if (mod != 0) {
        if ((y < 0) != (mod < 0)) { mod += y; div -= 1; }
    } else {
        mod = m_copysign((T)0, y);
    }
    if (remainder) return mod;
    if (div == 0) return m_copysign((T)0, x / y);
    T q = m_floor(div);
    return div - q > (T)0.5 ? q + 1 : q;
}
__device__ __forceinline__ float m_floordiv(float x, float y) { return float_floor_divide(false, x, y); }
__device__ __forceinline__ double m_floordiv(double x, double y) { return float_floor_divide(false, x, y); }
__device__ __forceinline__ float m_remainder(float x, float y) { return float_floor_divide(true, x, y); }
__device__ __forceinline__ double m_remainder(double x, double y) { return float_floor_divide(true, x, y); }

__device__ __forceinline__ long long m_floordiv(long long x, long long y) {
    if (y == 0) return 0;
    long long q = x / y, r = x - q * y;
    return (r != 0 && ((r < 0) != (y < 0))) ? q - 1 : q;
}
__device__ __forceinline__ long long m_remainder(long long x, long long y) {
    if (y == 0) return 0;
    long long r = x % y;
    return (r != 0 && ((r < 0) != (y < 0))) ? r + y : r;
}

// C's fmod (the sign of x); integers: 0 for y == 0 (the CPU raises)
__device__ __forceinline__ long long m_fmod(long long x, long long y) { return y == 0 ? 0 : x % y; }
__device__ __forceinline__ float m_hypot(float x, float y) { return hypotf(x, y); }
__device__ __forceinline__ double m_hypot(double x, double y) { return hypot(x, y); }

// The special functions, in double for both float types, as the CPU's (minidl/kernels/cpu/jit/scalar_math.py,
// whose docstrings give the method of each).
__device__ __forceinline__ double special_lgamma(double x) {
    if (x <= 0 && x == floor(x)) return inf_of<double>();  // the poles
    return lgamma(x);
}

__device__ inline double special_zeta(double s, double q) {  // Hurwitz's zeta: direct sum, Euler-Maclaurin tail
    const double bernoulli_over_factorial[12] = {
        1.0 / 6 / 2, -1.0 / 30 / 24, 1.0 / 42 / 720, -1.0 / 30 / 40320, 5.0 / 66 / 3628800,
        -691.0 / 2730 / 479001600, 7.0 / 6 / 87178291200.0, -3617.0 / 510 / 20922789888000.0,
        43867.0 / 798 / 6402373705728000.0, -174611.0 / 330 / 2432902008176640000.0,
        854513.0 / 138 / 1.1240007277776077e21, -236364091.0 / 2730 / 6.204484017332394e23};
    if (s == 1) return inf_of<double>();
    if (s < 1) return nan_of<double>();
    if (q <= 0) {
        if (q == floor(q)) return inf_of<double>();
        if (s != floor(s)) return nan_of<double>();
    }
    if (s != s || q != q || isinf(q)) return nan_of<double>();
    if (isinf(s)) return q < 1 ? inf_of<double>() : (q == 1 ? 1.0 : nan_of<double>());  // (torch's values)
    double total = 0, a = q;
    for (int n = 0; n < 9 || a < 9; ++n) {
        total += pow(a, -s);
        a += 1;
    }
    total += pow(a, 1 - s) / (s - 1) + 0.5 * pow(a, -s);
    double rising = s * pow(a, -s - 1);
    for (int k = 0; k < 12; ++k) {
        double term = bernoulli_over_factorial[k] * rising;
        total += term;
        if (fabs(term) <= 1e-17 * fabs(total)) break;
        rising *= (s + 2 * k + 1) * (s + 2 * k + 2) / (a * a);
    }
    return total;
}

__device__ inline double special_digamma(double x) {  // reflection, recurrence to x >= 10, asymptotic series
    const double pi = 3.141592653589793;
    if (x == 0) return copysign(inf_of<double>(), -x);
    double shift = 0;
    if (x < 0) {
        if (x == floor(x)) return nan_of<double>();
        shift = -pi / tan(pi * (x - trunc(x)));
        x = 1 - x;
    }
    while (x < 10) {
        shift -= 1 / x;
        x += 1;
    }
    double z = 1 / (x * x);
    double series = z * (1.0 / 12 - z * (1.0 / 120 - z * (1.0 / 252 - z * (1.0 / 240 - z * (1.0 / 132
                    - z * (691.0 / 32760 - z / 12))))));
    return shift + log(x) - 0.5 / x - series;
}

__device__ inline double special_erfinv(double x) {  // a first guess, then three Halley steps
    double a = fabs(x), y;
    if (!(a < 1)) return a == 1 ? copysign(inf_of<double>(), x) : nan_of<double>();
    if (a < 0.25) {
        y = 0.886226925452758 * a * (1 + 0.2617993877991494 * a * a);
    } else {
        double w = log((1 - a) * (1 + a)), c = 4.330746750799873 + 0.5 * w;
        y = sqrt(sqrt(c * c - w / 0.147) - c);
    }
    for (int i = 0; i < 3; ++i) {
        double r = a <= 0.5 ? erf(y) - a : (1 - a) - erfc(y);
        double d = r / (1.1283791670955126 * exp(-y * y));
        y -= d / (1 + y * d);
    }
    return copysign(y, x);
}

template <class T> __device__ __forceinline__ T m_lgamma(T x) { return (T)special_lgamma((double)x); }
template <class T> __device__ __forceinline__ T m_digamma(T x) { return (T)special_digamma((double)x); }
template <class T> __device__ __forceinline__ T m_erfinv(T x) { return (T)special_erfinv((double)x); }
template <class T> __device__ __forceinline__ T m_zeta(T s, T q) { return (T)special_zeta((double)s, (double)q); }

__device__ inline double special_bessel_i(int order, double x, bool scaled) {  // series, or asymptotic above 30
    double a = fabs(x), value;
    if (a != a) return a;
    if (a <= 30) {
        double half = 0.5 * a, total = 0, term = order == 1 ? half : 1.0;
        for (int k = 1;; ++k) {
            total += term;
            term *= half * half / (k * (k + order));
            if (term <= 1e-17 * total) break;
        }
        value = scaled ? total * exp(-a) : total;
    } else if (isinf(a)) {
        value = scaled ? 0.0 : nan_of<double>();  // (NaN: torch's value)
    } else {
        double mu = 4.0 * order * order, total = 1, term = 1;
        for (int k = 1; k < 60; ++k) {
            term *= -(mu - (double)(2 * k - 1) * (2 * k - 1)) / (k * 8.0 * a);
            total += term;
            if (fabs(term) <= 1e-17 * fabs(total)) break;
        }
        double series = total / sqrt(2 * 3.141592653589793 * a);
        value = scaled ? series : exp(0.5 * a) * (exp(0.5 * a) * series);
    }
    return order == 1 && x < 0 ? -value : value;
}

__device__ inline double special_erfcx(double x) {  // exp(x^2) erfc(x); an asymptotic series above 26
    if (x < 26) return x > -27 ? exp(x * x) * erfc(x) : inf_of<double>();
    if (isinf(x)) return 0.0;
    double z = 0.5 / (x * x), total = 1, term = 1;
    for (int k = 1; k < 12; ++k) {
        term *= -(2 * k - 1) * z;
        total += term;
    }
    return total / (x * 1.7724538509055159);
}

template <class T> __device__ __forceinline__ T m_i0(T x) { return (T)special_bessel_i(0, (double)x, false); }
template <class T> __device__ __forceinline__ T m_i1(T x) { return (T)special_bessel_i(1, (double)x, false); }
template <class T> __device__ __forceinline__ T m_i0e(T x) { return (T)special_bessel_i(0, (double)x, true); }
template <class T> __device__ __forceinline__ T m_i1e(T x) { return (T)special_bessel_i(1, (double)x, true); }
template <class T> __device__ __forceinline__ T m_erfcx(T x) { return (T)special_erfcx((double)x); }
__device__ __forceinline__ float m_nextafter(float x, float y) { return nextafterf(x, y); }
__device__ __forceinline__ double m_nextafter(double x, double y) { return nextafter(x, y); }
// Euclid's greatest common divisor (integers only; floats get x back, as the bitwise functions)
__device__ __forceinline__ long long m_gcd(long long x, long long y) {
    x = x < 0 ? -x : x;
    y = y < 0 ? -y : y;
    while (y != 0) {
        long long r = x % y;
        x = y;
        y = r;
    }
    return x;
}
template <typename T> __device__ __forceinline__ T m_gcd(T x, T) { return x; }

// the regularized incomplete gamma function P(a, x) (Q = 1 - P when upper): P's series below x = a + 1, Q's
// continued fraction above, as the CPU's
__device__ inline double special_incomplete_gamma(double a, double x, bool upper) {
    if (a < 0 || x < 0) return nan_of<double>();  // (NaNs only after the other edges, as torch)
    if (a == 0) return x > 0 ? (upper ? 0.0 : 1.0) : nan_of<double>();
    if (x == 0) return upper ? 1.0 : 0.0;
    if (isinf(a)) return isinf(x) ? nan_of<double>() : (upper ? 1.0 : 0.0);
    if (isinf(x)) return upper ? 0.0 : 1.0;
    if (a != a || x != x) return nan_of<double>();
    double prefix = exp(a * log(x) - x - lgamma(a));
    if (x < a + 1) {
        double term = 1 / a, total = term, n = a;
        for (int i = 0; i < 100000; ++i) {
            n += 1;
            term *= x / n;
            total += term;
            if (term < total * 1e-17) break;
        }
        return upper ? fmax(1 - prefix * total, 0.0) : prefix * total;  // (1 - P: absolute accuracy only)
    }
    const double tiny = 1e-300;
    double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
    for (int i = 1; i < 100000; ++i) {
        double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        if (fabs(d) < tiny) d = tiny;
        c = b + an / c;
        if (fabs(c) < tiny) c = tiny;
        d = 1 / d;
        h *= d * c;
        if (fabs(d * c - 1) < 1e-16) break;
    }
    return upper ? prefix * h : fmax(1 - prefix * h, 0.0);
}
template <class T> __device__ __forceinline__ T m_igamma(T a, T x) {
    return (T)special_incomplete_gamma((double)a, (double)x, false);
}
template <class T> __device__ __forceinline__ T m_igammac(T a, T x) {
    return (T)special_incomplete_gamma((double)a, (double)x, true);
}
