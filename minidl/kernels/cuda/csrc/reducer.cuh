// The value reductions' accumulator types and their combine step (sum, prod, max, min), shared by
// reduce.cu and the generated fused kernels (minidl/formulas/fused_cuda.py). Sums and products of float
// accumulate in double; max and min let NaN win.

#include "op_codes.cuh"

template <class T> struct Wide { typedef T type; };
template <> struct Wide<float> { typedef double type; };

template <class A> __device__ __forceinline__ A lowest_of() { return (A)(-1.0 / 0.0); }
template <> __device__ __forceinline__ long long lowest_of<long long>() { return (long long)(-9223372036854775807LL - 1); }
template <class A> __device__ __forceinline__ A highest_of() { return (A)(1.0 / 0.0); }
template <> __device__ __forceinline__ long long highest_of<long long>() { return 9223372036854775807LL; }

// ---------------------------------------------------------------------------- value reductions
template <int OP, class A> struct Reducer {
    typedef A State;
    __device__ static A identity() {
        return OP == REDUCE_SUM ? (A)0 : OP == REDUCE_PROD ? (A)1 : OP == REDUCE_MAX ? lowest_of<A>() : highest_of<A>();
    }
    __device__ static A combine(A a, A b) {
        if (OP == REDUCE_SUM) return a + b;
        if (OP == REDUCE_PROD) return a * b;
        if (OP == REDUCE_MAX) return (a > b || a != a) ? a : b;  // NaN propagates
        return (a < b || a != a) ? a : b;
    }
    __device__ static A shuffle_down(A v, int by) { return __shfl_down_sync(FULL_MASK, v, by); }
};
