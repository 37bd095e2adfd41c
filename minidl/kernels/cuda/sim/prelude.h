// The CUDA built-ins our kernels use, for the host compiler: the simulator compiles each kernel
// source with g++ after this header, then runs a launch block by block on the CPU, each GPU thread
// a fiber (ucontext) of one OS thread, so __syncthreads and warp shuffles switch fibers instead of
// racing. Deterministic and slow: for checking kernels' index math where no GPU is at hand.
#pragma once
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstddef>

#define MINIDL_SIM 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __shared__ static __attribute__((section("minidl_shared")))  // poisoned at each block's start
#define __align__(n) alignas(n)

struct uint3 { unsigned int x, y, z; };
struct dim3 { unsigned int x, y, z; };

extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;
static const int warpSize = 32;

void __syncthreads();
void __syncwarp(unsigned int mask = 0xffffffffu);
void *minidl_sim_dynamic_shared();
unsigned long long minidl_sim_exchange(unsigned long long bits, int src_lane, int width, bool *valid);

using std::min;
using std::max;
using std::isnan;
using std::isinf;
using std::isfinite;

// a GPU's trap ends the kernel (and the context) at once: here, the process
[[noreturn]] inline void __trap() {
    std::fprintf(stderr, "minidl CUDA simulator: a kernel executed __trap()\n");
    std::abort();
}

inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
template <class T> inline T __ldg(const T *p) { return *p; }

template <class To, class From> inline To minidl_sim_bits(From v) {
    To out; std::memcpy(&out, &v, sizeof(To)); return out;
}
inline int __float_as_int(float v) { return minidl_sim_bits<int>(v); }
inline float __int_as_float(int v) { return minidl_sim_bits<float>(v); }
inline unsigned int __float_as_uint(float v) { return minidl_sim_bits<unsigned int>(v); }
inline float __uint_as_float(unsigned int v) { return minidl_sim_bits<float>(v); }
inline long long __double_as_longlong(double v) { return minidl_sim_bits<long long>(v); }
inline double __longlong_as_double(long long v) { return minidl_sim_bits<double>(v); }

// warp shuffles: every live lane of the warp meets at an exchange (a warp barrier)
template <class T> inline T minidl_sim_shuffle(T v, int src_lane, int width) {
    unsigned long long bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    bool valid = false;
    unsigned long long got = minidl_sim_exchange(bits, src_lane, width, &valid);
    if (!valid) return v;
    T out; std::memcpy(&out, &got, sizeof(T)); return out;
}
inline int minidl_sim_lane() { return (int)((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 32u); }
template <class T> inline T __shfl_sync(unsigned int, T v, int src, int width = 32) {
    int lane = minidl_sim_lane();
    return minidl_sim_shuffle(v, lane - lane % width + ((src % width) + width) % width, width);
}
template <class T> inline T __shfl_down_sync(unsigned int, T v, unsigned int delta, int width = 32) {
    int lane = minidl_sim_lane();
    int src = lane + (int)delta;
    return minidl_sim_shuffle(v, src / width == lane / width ? src : -1, width);
}
template <class T> inline T __shfl_up_sync(unsigned int, T v, unsigned int delta, int width = 32) {
    int lane = minidl_sim_lane();
    int src = lane - (int)delta;
    return minidl_sim_shuffle(v, src >= lane - lane % width ? src : -1, width);
}
template <class T> inline T __shfl_xor_sync(unsigned int, T v, int mask, int width = 32) {
    int lane = minidl_sim_lane();
    int src = lane ^ mask;
    return minidl_sim_shuffle(v, src / width == lane / width ? src : -1, width);
}

// atomics: fibers never run at the same time, so plain read-modify-writes are atomic here
template <class T> inline T atomicAdd(T *p, T v) { T old = *p; *p = old + v; return old; }
template <class T> inline T atomicMax(T *p, T v) { T old = *p; if (v > old) *p = v; return old; }
template <class T> inline T atomicMin(T *p, T v) { T old = *p; if (v < old) *p = v; return old; }
template <class T> inline T atomicExch(T *p, T v) { T old = *p; *p = v; return old; }
template <class T> inline T atomicOr(T *p, T v) { T old = *p; *p = old | v; return old; }
template <class T> inline T atomicCAS(T *p, T compare, T v) { T old = *p; if (old == compare) *p = v; return old; }
