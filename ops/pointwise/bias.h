/* bias.h: adding a per-channel bias and its gradient, in the two layouts deftc uses.
 *  rows:  y[R, C] (a row per position: linear layers, NHWC tensors), y of the entry's dtype
 *         (f32 or bf16: the sum in fp32, rounded once), b and db fp32:
 *         y[r, c] += b[c]             db[c] = beta*db[c] + sum_r dy[r, c]
 *  nchw:  y[N, C, P] fp32             y[n, c, p] += b[c]          db[c] = beta*db[c] + sum_{n,p} dy[n, c, p]
 * The gradient sums run in double in a fixed order per channel (deterministic): the rows
 * version on the GPU sums fixed blocks of rows, then the blocks' partials in block order. */
#ifndef DT_K_BIAS_H
#define DT_K_BIAS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DT_DECL_BIAS(sfx)                                                                        \
    void dt_bias_rows_fwd_f32_##sfx(int64_t R, int64_t C, const float *b, void *y);              \
    void dt_bias_rows_bwd_f32_##sfx(int64_t R, int64_t C, const void *dy, float beta, float *db); \
    void dt_bias_rows_fwd_bf16_##sfx(int64_t R, int64_t C, const float *b, void *y);             \
    void dt_bias_rows_bwd_bf16_##sfx(int64_t R, int64_t C, const void *dy, float beta, float *db); \
    void dt_bias_nchw_fwd_##sfx(int64_t N, int64_t C, int64_t P, const float *b, float *y);       \
    void dt_bias_nchw_bwd_##sfx(int64_t N, int64_t C, int64_t P, const float *dy, float beta, float *db);

DT_DECL_BIAS(cpu)
DT_DECL_BIAS(cuda)

#ifdef __cplusplus
}
#endif
#endif
