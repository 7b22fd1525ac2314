/* Deterministic full sum: REDUCE_BLOCKS blocks (a constant, so the partition of the input
 * does not depend on the GPU) each reduce a strided share in double, then one block adds the
 * partials in index order. Two launches, no atomics. */
#include "dt_kernel_util.cuh"
#include "reduce.h"

#define REDUCE_BLOCKS 512
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

__global__ void k_partial(int64_t n, const float *__restrict__ x, double *__restrict__ part) {
    double acc = 0.0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)REDUCE_BLOCKS * REDUCE_THREADS)
        acc += x[i];
    acc = block_sum(acc);
    if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

__global__ void k_final(const double *__restrict__ part, float alpha, float *__restrict__ out) {
    double acc = 0.0;
    for (int i = threadIdx.x; i < REDUCE_BLOCKS; i += REDUCE_THREADS) acc += part[i];
    acc = block_sum(acc);
    if (threadIdx.x == 0) out[0] = (float)(alpha * acc);
}

}  // namespace

extern "C" size_t dt_sum_cuda_ws_bytes(void) { return REDUCE_BLOCKS * sizeof(double); }

extern "C" void dt_sum_cuda(int64_t n, const float *x, float alpha, float *out, void *ws) {
    k_partial<<<REDUCE_BLOCKS, REDUCE_THREADS, 0, dt_stream()>>>(n, x, (double *)ws);
    DT_CHECK_LAUNCH();
    k_final<<<1, REDUCE_THREADS, 0, dt_stream()>>>((const double *)ws, alpha, out);
    DT_CHECK_LAUNCH();
}
