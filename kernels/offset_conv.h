/* offset_conv.h: the offset convolution of the deft mode on channels-last input, as implicit
 * GEMMs - no im2col buffer. For a chunk (layouts in deform_plan.h; K = kh*kw taps, the plan's
 * stride/padding/dilation; OC = 2GK (+GK mask) outputs):
 *
 *   fwd          om [Q, OCS] = conv(xT, w) + b, the mask columns through the sigmoid, the
 *                padding columns 0:  a GEMM of Q positions x OC outputs over K*C
 *   bwd_weight   dw [OC, C, kh, kw] = beta_w*dw + sum_q dom[q] x patch(q)^T,
 *                db [OC] = beta_b*db + sum_q dom[q] (either may be NULL):  OC x K*C over Q (split over Q, then a
 *                reduction of the parts in a fixed order: deterministic)
 *   bwd_input    dxT [nb, H, W, C] = beta*dxT + the transposed conv of dom:  pixels x C over
 *                K*OC (each pixel gathers the taps that read it: no atomics)
 *
 * w [OC, C, kh, kw] and b [OC] stay in their parameter layout; the CUDA versions repack w
 * into the workspace (dt_offconv_ws_bytes) for their loads. The thin output (18 or 27
 * columns) is why these are not cuBLAS calls: an 18-row GEMM runs at ~14 of cuBLAS' 51
 * TFLOP/s and needs the im2col buffer (docs/deft.md). */
#ifndef DT_K_OFFSET_CONV_H
#define DT_K_OFFSET_CONV_H

#include <stddef.h>
#include <stdint.h>

#include "deform_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DT_DECL_OFFCONV(sfx)                                                                                       \
    size_t dt_offconv_ws_bytes_##sfx(const dt_deform_plan *p, int64_t nb);                                         \
    void dt_offconv_fwd_##sfx(const dt_deform_plan *p, int64_t nb, const float *xT, const float *w, const float *b, \
                              float *om, void *ws);                                                                \
    void dt_offconv_bwd_weight_##sfx(const dt_deform_plan *p, int64_t nb, const float *xT, const float *dom,      \
                                     float beta_w, float *dw, float beta_b, float *db, void *ws);                  \
    void dt_offconv_bwd_input_##sfx(const dt_deform_plan *p, int64_t nb, const float *dom, const float *w,        \
                                    float beta, float *dxT, void *ws);

DT_DECL_OFFCONV(cpu)
DT_DECL_OFFCONV(cuda)

/* Precision (dt_device.h): in tf32 and bf16 the CUDA versions run tensor-core kernels
 * (offset_conv_tc.h) whose operands are rounded to TF32 or bf16, sums fp32 - when C % 32 == 0;
 * other channel counts stay fp32. The CPU twins round to bf16 under the same rule (tf32 is
 * computed in fp32 on the CPU). */
static inline int dt_offconv_rounds(const dt_deform_plan *p) { return p->C % 32 == 0; }

/* The CUDA versions run shared-memory tiled GEMMs when C % 4 == 0 and lane-group kernels
 * otherwise; 0 forces the lane kernels everywhere (the tests and the kernel lab compare both). */
void dt_offconv_use_tiles(int on);
/* The tensor-core kernels' forward and weight gradient by halo-staged output tiles (1, the
 * default) or by the flat list of positions (0: their fallback for K > 16 or footprints that
 * do not fit shared memory); the tests run both. CUDA builds only. */
void dt_offconv_use_halo(int on);

#ifdef __cplusplus
}
#endif
#endif
