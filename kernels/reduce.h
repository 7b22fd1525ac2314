/* reduce.h: full reductions, deterministic: the summation order depends only on n, never on
 * thread timing (fixed partitions, partials combined in index order).
 * out[0] = alpha * sum(x[0..n)). The CUDA version needs a device workspace of
 * dt_sum_cuda_ws_bytes() bytes. */
#ifndef DT_K_REDUCE_H
#define DT_K_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void dt_sum_cpu(int64_t n, const float *x, float alpha, float *out);
size_t dt_sum_cuda_ws_bytes(void);
void dt_sum_cuda(int64_t n, const float *x, float alpha, float *out, void *ws);

#ifdef __cplusplus
}
#endif
#endif
