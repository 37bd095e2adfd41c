// Shared by every minidl CUDA kernel source: the runtime puts this text in front of each .cu file.
// Only CUDA built-ins are used (no headers), so NVRTC, nvcc and the simulator's g++ all take it.
//
// Conventions every kernel follows:
// - grid-stride loops (GRID_STRIDE_LOOP, or blockIdx.x stepping by gridDim.x for block-per-row
//   kernels), so any grid size is correct and the launcher picks the grid from the device;
// - operands are (buffer, Layout): element i of the logical row-major order lives at
//   buffer[position(layout, i)], the same formula as minidl/layout.py and the CPU kernels;
// - a bad index is not a crash: the kernel records it with report_index_error and the host
//   raises IndexError at its next synchronisation.

#define MINIDL_MAX_DIMS 8

struct Layout {
    long long ndim;
    long long offset;
    long long shape[MINIDL_MAX_DIMS];
    long long strides[MINIDL_MAX_DIMS];
};

// Buffer position of element i (row-major order over layout.shape).
__device__ __forceinline__ long long position(const Layout &l, long long i) {
    if (l.ndim == 1) return l.offset + i * l.strides[0];
    long long p = l.offset;
    for (int d = (int)l.ndim - 1; d > 0; --d) {
        long long n = l.shape[d];
        long long q = i / n;
        p += (i - q * n) * l.strides[d];
        i = q;
    }
    return p + i * l.strides[0];
}

// A value the compiler cannot see through: between the ops of a generated fused kernel it keeps NVRTC from
// contracting one op's multiply with the next op's add into an FMA (eager rounds each op's result, storing
// it), while each op's own formula contracts as in eager's kernels. The simulator's g++ does not contract.
#if defined(__CUDA_ARCH__)
__device__ __forceinline__ float opaque(float v) { asm volatile("" : "+f"(v)); return v; }
__device__ __forceinline__ double opaque(double v) { asm volatile("" : "+d"(v)); return v; }
#endif
template <class T> __device__ __forceinline__ T opaque(T v) { return v; }

#define GRID_STRIDE_LOOP(i, n)                                                         \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n);     \
         i += (long long)blockDim.x * gridDim.x)

// The packed fast path: the operands are runs of n elements (a broadcast scalar has stride 0), so
// there is no index math; each thread takes 4 elements a grid-stride apart per step (each load
// of a warp still coalesced) and issues their loads before any store, keeping enough bytes in
// flight to run at memory bandwidth. BODY(i) handles element i.
#define PACKED_LOOP(n, BODY)                                                                   \
    {                                                                                          \
        const long long s_ = (long long)blockDim.x * gridDim.x;                                \
        long long i_ = (long long)blockIdx.x * blockDim.x + threadIdx.x;                       \
        for (; i_ + 3 * s_ < (n); i_ += 4 * s_) {                                              \
            BODY(i_) BODY(i_ + s_) BODY(i_ + 2 * s_) BODY(i_ + 3 * s_)                         \
        }                                                                                      \
        for (; i_ < (n); i_ += s_) { BODY(i_) }                                                \
    }

#define FULL_MASK 0xffffffffu  // every lane of a warp, for the shuffles

// float math per type, for kernels templated on float and double
__device__ __forceinline__ float m_exp(float x) { return expf(x); }
__device__ __forceinline__ double m_exp(double x) { return exp(x); }
__device__ __forceinline__ float m_log(float x) { return logf(x); }
__device__ __forceinline__ double m_log(double x) { return log(x); }
__device__ __forceinline__ float m_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double m_sqrt(double x) { return sqrt(x); }

// error[0] == 0 while all is well; the first failing thread stores (1, index, size).
__device__ __forceinline__ void report_index_error(long long *error, long long index, long long size) {
    if (atomicCAS((unsigned long long *)error, 0ull, 1ull) == 0ull) {
        error[1] = index;
        error[2] = size;
    }
}

#ifdef MINIDL_SIM
#define DYNAMIC_SHARED(T, name) T *name = (T *)minidl_sim_dynamic_shared()
#else
#define DYNAMIC_SHARED(T, name) \
    extern __shared__ __align__(16) unsigned char minidl_dynamic_shared_[]; T *name = (T *)minidl_dynamic_shared_
#endif

// One kernel per compute dtype: KERNEL_PER_DTYPE(MACRO) expands MACRO(suffix, type) for each.
#define FOR_COMPUTE_DTYPES(MACRO) MACRO(f32, float) MACRO(f64, double) MACRO(i64, long long) MACRO(b8, bool)
#define FOR_FLOAT_DTYPES(MACRO) MACRO(f32, float) MACRO(f64, double)
