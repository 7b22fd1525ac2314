/* dt_kernel_util.cuh: launch-size helpers shared by the .cu files. */
#ifndef DT_KERNEL_UTIL_CUH
#define DT_KERNEL_UTIL_CUH

#include <stdint.h>

#include "core/dt_cuda.h"

/* Grid for a grid-stride loop over n elements: enough blocks to fill the GPU several times
 * over, never more than the work needs. */
static inline int dt_grid_for(int64_t n, int block) {
    int64_t need = (n + block - 1) / block;
    int64_t cap = (int64_t)dt_gpu_sm_count() * 32;
    if (need > cap) need = cap;
    return need < 1 ? 1 : (int)need;
}

/* Blocks in x for n elements per plane when blockIdx.y/z run over `planes` planes: ~16 blocks
 * an SM in total, never more than one plane needs. */
static inline unsigned dt_blocks_per_plane(int64_t n, int64_t planes) {
    int64_t need = (n + 255) / 256;
    int64_t want = (int64_t)dt_gpu_sm_count() * 16 / (planes > 0 ? planes : 1) + 1;
    return (unsigned)(need < want ? need : want);
}

/* blockIdx.y and blockIdx.z are limited to 65535: fatal, naming the op, beyond. */
static inline void dt_check_grid_yz(const char *what, int64_t y, int64_t z) {
    if (y > 65535 || z > 65535)
        dt_fatal("%s: a launch grid of %lld x %lld planes exceeds 65535 in y or z; use smaller chunks", what,
                 (long long)y, (long long)z);
}

#define DT_GRID_STRIDE(i, n) \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* Writes v into *dst honouring the backward convention: overwrite when beta == 0 (the old
 * value may be garbage or NaN), else add. */
__device__ __forceinline__ void dt_store_beta(float *dst, float v, float beta) {
    *dst = beta == 0.0f ? v : *dst + v;
}

#endif
