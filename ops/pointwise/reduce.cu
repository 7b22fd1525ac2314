/* Deterministic full sum: DT_SUM_BLOCKS blocks (a constant, so the partition of the input does
 * not depend on the GPU) each reduce a strided share in double, then one block adds the
 * partials in index order. Two launches, no atomics; reads x once (coalesced). */
#include "core/dt_dtype.cuh"
#include "core/dt_kernel_util.cuh"
#include "ops/pointwise/reduce.h"

#define REDUCE_THREADS 256

namespace {

__device__ double block_sum(double v) {
    __shared__ double s[REDUCE_THREADS / 32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) s[warp] = v;
    __syncthreads();
    v = 0.0;
    if (warp == 0) {
        v = lane < REDUCE_THREADS / 32 ? s[lane] : 0.0;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    }
    return v;
}

template <typename T>
__global__ void k_partial(int64_t n, const T *__restrict__ x, double *__restrict__ part) {
    double acc = 0.0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)DT_SUM_BLOCKS * REDUCE_THREADS)
        acc += dt_ld(x + i);
    acc = block_sum(acc);
    if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

__global__ void k_final(const double *__restrict__ part, float alpha, float *__restrict__ out) {
    double acc = 0.0;
    for (int i = threadIdx.x; i < DT_SUM_BLOCKS; i += REDUCE_THREADS) acc += part[i];
    acc = block_sum(acc);
    if (threadIdx.x == 0) out[0] = (float)(alpha * acc);
}

template <typename T>
void sum(int64_t n, const void *x, float alpha, float *out, void *ws) {
    k_partial<T><<<DT_SUM_BLOCKS, REDUCE_THREADS, 0, dt_stream()>>>(n, (const T *)x, (double *)ws);
    DT_CHECK_LAUNCH();
    k_final<<<1, REDUCE_THREADS, 0, dt_stream()>>>((const double *)ws, alpha, out);
    DT_CHECK_LAUNCH();
}

}  // namespace

extern "C" void dt_sum_f32_cuda(int64_t n, const void *x, float alpha, float *out, void *ws) {
    sum<float>(n, x, alpha, out, ws);
}
extern "C" void dt_sum_bf16_cuda(int64_t n, const void *x, float alpha, float *out, void *ws) {
    sum<__nv_bfloat16>(n, x, alpha, out, ws);
}
