// The simulator's launch: blocks one after another; inside a block, one fiber per thread, each run
// until it finishes or waits at a barrier (__syncthreads: the whole block; a warp shuffle or
// __syncwarp: its warp), the waiting ones released together once every live member has arrived.
// Between barriers the threads run in a new pseudo-random order each time (fixed seed, so runs
// repeat): a kernel that lacks a barrier, reading what another thread has not yet written, then
// fails in tests instead of passing by the luck of a fixed order.
#include <ucontext.h>
#include <cstdio>
#include <cstring>
#include <vector>

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

// every __shared__ array lies in this section (prelude.h); the linker marks its bounds
extern char __start_minidl_shared[] __attribute__((weak)), __stop_minidl_shared[] __attribute__((weak));

namespace {

enum State { RUNNING, AT_BLOCK_BARRIER, AT_WARP_BARRIER, DONE };

struct Fiber {
    ucontext_t context;
    State state;
    uint3 index;
};

const size_t kStack = 64 * 1024;
std::vector<Fiber> fibers;
std::vector<char> stacks, shared_memory;
std::vector<unsigned long long> exchange_slots;
ucontext_t scheduler_context;
int current = 0;
void (*kernel_wrapper)(void **) = nullptr;
void **kernel_args = nullptr;
std::vector<int> order;
unsigned long long shuffle_state = 0x9E3779B97F4A7C15ull;

void shuffle_order() {  // Fisher-Yates with xorshift64
    for (int i = (int)order.size() - 1; i > 0; --i) {
        shuffle_state ^= shuffle_state << 13;
        shuffle_state ^= shuffle_state >> 7;
        shuffle_state ^= shuffle_state << 17;
        int j = (int)(shuffle_state % (unsigned long long)(i + 1));
        int t = order[i]; order[i] = order[j]; order[j] = t;
    }
}

void yield_as(State state) {
    fibers[current].state = state;
    swapcontext(&fibers[current].context, &scheduler_context);
}

void fiber_main() {
    kernel_wrapper(kernel_args);
    fibers[current].state = DONE;  // uc_link returns to the scheduler
}

// Release the fibers waiting at a barrier whose live members have all arrived; false if none.
bool release(int threads) {
    bool released = false;
    for (int warp = 0; warp < threads; warp += 32) {
        int end = warp + 32 < threads ? warp + 32 : threads;
        bool all = true, any = false;
        for (int t = warp; t < end; ++t) {
            if (fibers[t].state == DONE) continue;
            any = true;
            all = all && fibers[t].state == AT_WARP_BARRIER;
        }
        if (all && any) {
            for (int t = warp; t < end; ++t)
                if (fibers[t].state == AT_WARP_BARRIER) fibers[t].state = RUNNING;
            released = true;
        }
    }
    if (released) return true;
    bool all = true, any = false;
    for (int t = 0; t < threads; ++t) {
        if (fibers[t].state == DONE) continue;
        any = true;
        all = all && fibers[t].state == AT_BLOCK_BARRIER;
    }
    if (all && any)
        for (int t = 0; t < threads; ++t)
            if (fibers[t].state == AT_BLOCK_BARRIER) fibers[t].state = RUNNING;
    return all && any;
}

}  // namespace

void __syncthreads() { yield_as(AT_BLOCK_BARRIER); }
void __syncwarp(unsigned int) { yield_as(AT_WARP_BARRIER); }
void *minidl_sim_dynamic_shared() { return shared_memory.data(); }

unsigned long long minidl_sim_exchange(unsigned long long bits, int src_lane, int, bool *valid) {
    int warp_base = current - current % 32;
    exchange_slots[current] = bits;
    yield_as(AT_WARP_BARRIER);
    int src = warp_base + src_lane;
    *valid = src_lane >= 0 && src_lane < 32 && src < (int)fibers.size() && fibers[src].state != DONE;
    unsigned long long got = *valid ? exchange_slots[src] : bits;
    yield_as(AT_WARP_BARRIER);  // nobody writes a slot again before every lane has read
    return got;
}

// Run wrapper(args) over the grid. Returns 0, or 1 with a message in error when a block's
// threads wait at barriers that can never open (as a divergent __syncthreads would hang a GPU).
extern "C" int minidl_sim_launch(void (*wrapper)(void **), unsigned gx, unsigned gy, unsigned gz,
                                 unsigned bx, unsigned by, unsigned bz, unsigned long long shared_bytes,
                                 void **args, char *error, int error_size) {
    int threads = (int)(bx * by * bz);
    gridDim = dim3{gx, gy, gz};
    blockDim = dim3{bx, by, bz};
    kernel_wrapper = wrapper;
    kernel_args = args;
    fibers.resize(threads);
    order.resize(threads);
    for (int t = 0; t < threads; ++t) order[t] = t;
    exchange_slots.assign(threads, 0);
    if (stacks.size() < (size_t)threads * kStack) stacks.resize((size_t)threads * kStack);
    shared_memory.resize(shared_bytes + 16);
    for (unsigned z = 0; z < gz; ++z)
    for (unsigned y = 0; y < gy; ++y)
    for (unsigned x = 0; x < gx; ++x) {
        blockIdx = uint3{x, y, z};
        // shared memory starts undefined on a GPU: fill it with 0xff bytes (NaN, -1), so a kernel
        // that reads before writing fails here instead of seeing the last block's values
        if (__start_minidl_shared != __stop_minidl_shared)
            std::memset(__start_minidl_shared, 0xff, __stop_minidl_shared - __start_minidl_shared);
        std::memset(shared_memory.data(), 0xff, shared_memory.size());
        for (int t = 0; t < threads; ++t) {
            Fiber &f = fibers[t];
            f.index = uint3{(unsigned)t % bx, ((unsigned)t / bx) % by, (unsigned)t / (bx * by)};
            f.state = RUNNING;
            getcontext(&f.context);
            f.context.uc_stack.ss_sp = stacks.data() + (size_t)t * kStack;
            f.context.uc_stack.ss_size = kStack;
            f.context.uc_link = &scheduler_context;
            makecontext(&f.context, fiber_main, 0);
        }
        for (;;) {
            shuffle_order();
            for (int t : order) {
                while (fibers[t].state == RUNNING) {
                    current = t;
                    threadIdx = fibers[t].index;
                    swapcontext(&scheduler_context, &fibers[t].context);
                }
            }
            bool finished = true;
            for (int t = 0; t < threads; ++t) finished = finished && fibers[t].state == DONE;
            if (finished) break;
            if (!release(threads)) {
                std::snprintf(error, error_size, "block (%u, %u, %u): its threads wait at barriers that "
                              "not all live threads of the block (or warp) reach", x, y, z);
                return 1;
            }
        }
    }
    return 0;
}
