/* offset_conv_tc.h: the offset conv on tensor cores (offset_conv_tc.cu), behind the _cuda
 * entry points of offset_conv.h in the tf32 and bf16 precisions. CUDA only; bf16 = 1 rounds
 * the operands to bf16, 0 to TF32; sums and results fp32. */
#ifndef DT_K_OFFSET_CONV_TC_H
#define DT_K_OFFSET_CONV_TC_H

#include <stddef.h>
#include <stdint.h>

#include "deform_plan.h"

/* The kernels need C % 32 == 0 (a step reads 32 channels); other plans keep the FFMA kernels. */
int dt_offconv_tc_ok(const dt_deform_plan *p);
size_t dt_offconv_tc_ws_bytes(const dt_deform_plan *p, int64_t nb);
/* om [Q, OCS] as dt_offconv_fwd_cuda; ws: packed weights and split partials. */
void dt_offconv_tc_fwd(const dt_deform_plan *p, int64_t nb, int bf16, const float *xT, const float *w, const float *b,
                       float *om, void *ws);
/* Writes nz partial weight gradients partw [nz][OC, C, K] and bias gradients *partb [nz][OC]
 * (*partb set into partw's workspace); returns nz (sum them in order). */
int dt_offconv_tc_bwd_weight(const dt_deform_plan *p, int64_t nb, int bf16, const float *xT, const float *dom,
                             float *partw, float **partb);
/* dxT = beta*dxT + the transposed conv of dom; wT [OC, K, C]. */
void dt_offconv_tc_bwd_input(const dt_deform_plan *p, int64_t nb, int bf16, const float *dom, const float *wT, float beta,
                             float *dxT);

#endif
