/* offset_conv_tc.h: the offset conv on tensor cores (offset_conv_tc.cu), behind the _cuda
 * entry points of offset_conv.h for bf16 plans and f32 plans with TF32 products. CUDA only.
 * bf16 plans: x is bf16 as stored, the fp32 operands (w, dom) are rounded to bf16; TF32: every
 * operand is rounded to TF32; sums and om, dw, db fp32; dx in the plan's dtype. */
#ifndef DT_K_OFFSET_CONV_TC_H
#define DT_K_OFFSET_CONV_TC_H

#include <stddef.h>
#include <stdint.h>

#include "ops/deform/deform_plan.h"

/* The kernels need C % 32 == 0 (a step reads 32 channels); other plans keep the FFMA kernels. */
int dt_offconv_tc_ok(const dt_deform_plan *p);
size_t dt_offconv_tc_ws_bytes(const dt_deform_plan *p, int64_t nb);
/* om [Q, OCS] as dt_offconv_fwd_cuda; xT of the plan's dtype; ws: packed weights and split
 * partials. */
void dt_offconv_tc_fwd(const dt_deform_plan *p, int64_t nb, const void *xT, const float *w, const float *b, float *om,
                       void *ws);
/* Writes nz partial weight gradients partw [nz][OC, C, K] and bias gradients *partb [nz][OC]
 * (*partb set into partw's workspace); returns nz (sum them in order). */
int dt_offconv_tc_bwd_weight(const dt_deform_plan *p, int64_t nb, const void *xT, const float *dom, float *partw,
                             float **partb);
/* dxT = beta*dxT + (add + the transposed conv of dom), dxT of the plan's dtype, add fp32 or
 * NULL; wT [OC, K, C]. */
void dt_offconv_tc_bwd_input(const dt_deform_plan *p, int64_t nb, const float *dom, const float *wT, const float *add,
                             float beta, void *dxT);

#endif
