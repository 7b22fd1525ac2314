/* reduce.h: full sums, deterministic: the summation order depends only on n, never on thread
 * timing or the GPU (fixed partitions, partials combined in index order).
 * out[0] = alpha * sum(x[0 .. n)), x f32 or bf16 (widened exactly), the sum in double, the
 * result fp32 in the kernel's memory. ws: DT_SUM_WS_BYTES on the kernel's device (the CUDA
 * version's per-block partials; the CPU twin needs none). */
#ifndef DT_K_REDUCE_H
#define DT_K_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Blocks of the CUDA sum: a constant, so the partition does not depend on the device. */
#define DT_SUM_BLOCKS 512
#define DT_SUM_WS_BYTES (DT_SUM_BLOCKS * sizeof(double))

typedef void dt_sum_fn(int64_t n, const void *x, float alpha, float *out, void *ws);

dt_sum_fn dt_sum_f32_cpu, dt_sum_bf16_cpu, dt_sum_f32_cuda, dt_sum_bf16_cuda;

#ifdef __cplusplus
}
#endif
#endif
