/* For C kernels of minidl's user ops (minidl.library.c_kernel): a tensor's layout as minidl's kernels see it.
 * The struct is the one minidl's CUDA kernels take (kernels/cuda/csrc/common.cuh), passed by value; a 0-d
 * tensor arrives as one element of a 1-d layout. Element i of the tensor, in row-major order over shape, is at
 * buffer[minidl_position(layout, i)]; strides are in elements and may be 0 (broadcast) or negative. */
#ifndef MINIDL_KERNEL_H
#define MINIDL_KERNEL_H

#include <stdbool.h>
#include <stdint.h>

#define MINIDL_MAX_DIMS 8

typedef struct {
    int64_t ndim;
    int64_t offset;
    int64_t shape[MINIDL_MAX_DIMS];
    int64_t strides[MINIDL_MAX_DIMS];
} Layout;

static inline int64_t minidl_position(const Layout *l, int64_t i) {
    int64_t p = l->offset;
    for (int64_t d = l->ndim - 1; d > 0; --d) {
        p += (i % l->shape[d]) * l->strides[d];
        i /= l->shape[d];
    }
    return p + i * l->strides[0];
}

#endif
