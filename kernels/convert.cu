/* CUDA versions of convert.h: cuda_bf16.h's conversions (round to nearest even, NaN kept),
 * memory-bound grid-stride loops. */
#include <cuda_bf16.h>

#include "convert.h"
#include "dt_kernel_util.cuh"

namespace {

__global__ void k_f32_to_bf16(int64_t n, const float *__restrict__ x, __nv_bfloat16 *__restrict__ y) {
    DT_GRID_STRIDE(i, n) y[i] = __float2bfloat16_rn(x[i]);
}

__global__ void k_bf16_to_f32(int64_t n, const __nv_bfloat16 *__restrict__ x, float *__restrict__ y) {
    DT_GRID_STRIDE(i, n) y[i] = __bfloat162float(x[i]);
}

}  // namespace

extern "C" {
void dt_f32_to_bf16_cuda(int64_t n, const float *x, dt_bf16 *y) {
    if (n <= 0) return;
    k_f32_to_bf16<<<dt_grid_for(n, 256), 256, 0, dt_stream()>>>(n, x, (__nv_bfloat16 *)y);
    DT_CHECK_LAUNCH();
}

void dt_bf16_to_f32_cuda(int64_t n, const dt_bf16 *x, float *y) {
    if (n <= 0) return;
    k_bf16_to_f32<<<dt_grid_for(n, 256), 256, 0, dt_stream()>>>(n, (const __nv_bfloat16 *)x, y);
    DT_CHECK_LAUNCH();
}
}
