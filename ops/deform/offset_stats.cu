/* Offset histogram on the GPU: per-block shared-memory histograms (integer atomics, so the
 * result is exact and order-independent), merged into the global one. */
#include "core/dt_kernel_util.cuh"
#include "ops/deform/offset_stats.h"

namespace {

__device__ __forceinline__ int bin_of(float a) {
    float b = a * DT_OFFHIST_PER_PX;
    return b < (float)(DT_OFFHIST_BINS - 1) ? (int)b : DT_OFFHIST_BINS - 1;
}

__global__ void k_hist(int64_t N, int64_t GK, int64_t P, const float *__restrict__ off, int64_t s_img, int64_t s_pos,
                       int64_t s_ch, float halo, unsigned long long *__restrict__ out) {
    __shared__ unsigned hy[DT_OFFHIST_BINS], hx[DT_OFFHIST_BINS];
    for (int b = threadIdx.x; b < DT_OFFHIST_BINS; b += blockDim.x) hy[b] = hx[b] = 0;
    __syncthreads();
    unsigned long long sy = 0, sx = 0, outside = 0;
    unsigned maxbits = 0;
    int64_t total = N * GK * P;
    DT_GRID_STRIDE(t, total) {
        int64_t p = t % P, nj = t / P; /* nj = n*GK + j */
        int64_t n = nj / GK, j = nj % GK;
        const float *dy = off + n * s_img + p * s_pos + 2 * j * s_ch;
        float ay = fabsf(dy[0]), ax = fabsf(dy[s_ch]);
        if (isnan(ay) || isnan(ax)) { outside++; maxbits = 0x7fc00000u; continue; }
        atomicAdd(&hy[bin_of(ay)], 1u);
        atomicAdd(&hx[bin_of(ax)], 1u);
        sy += (unsigned long long)(fminf(ay, 1048576.0f) * 65536.0f);
        sx += (unsigned long long)(fminf(ax, 1048576.0f) * 65536.0f);
        outside += ay > halo || ax > halo;
        if (maxbits != 0x7fc00000u) maxbits = max(maxbits, __float_as_uint(fmaxf(ay, ax)));
    }
    __syncthreads();
    for (int b = threadIdx.x; b < DT_OFFHIST_BINS; b += blockDim.x) {
        if (hy[b]) atomicAdd(&out[DT_OFFHIST_DY + b], (unsigned long long)hy[b]);
        if (hx[b]) atomicAdd(&out[DT_OFFHIST_DX + b], (unsigned long long)hx[b]);
    }
    atomicAdd(&out[DT_OFFHIST_SUM], sy);
    atomicAdd(&out[DT_OFFHIST_SUM + 1], sx);
    atomicAdd(&out[DT_OFFHIST_OUT], outside);
    atomicMax(&out[DT_OFFHIST_MAX], (unsigned long long)maxbits);
}

}  // namespace

extern "C" void dt_offset_hist_cuda(int64_t N, int64_t GK, int64_t P, const float *off, int64_t s_img, int64_t s_pos,
                                    int64_t s_ch, float halo, uint64_t *out) {
    DT_CHECK(cudaMemsetAsync(out, 0, DT_OFFHIST_LEN * sizeof(uint64_t), dt_stream()));
    int64_t total = N * GK * P;
    if (total <= 0) return;
    int blocks = dt_grid_for(total, 256);
    if (blocks > 2 * dt_gpu_sm_count()) blocks = 2 * dt_gpu_sm_count(); /* fewer merges into the global histogram */
    k_hist<<<blocks, 256, 0, dt_stream()>>>(N, GK, P, off, s_img, s_pos, s_ch, halo, (unsigned long long *)out);
    DT_CHECK_LAUNCH();
}
