/* deform_igemm.h: the deformable convolution's forward main GEMM with the sampler as its
 * A-operand loader (issue 20's third part; docs/conv.md, docs/deft.md): y = colT . w^T + bias
 * computed without colT - each CTA samples its tile of the column matrix into shared memory
 * (conv_igemm.cuh's A_DEFORM loader) and multiplies it there. Same function as deft's sampling
 * kernel followed by its GEMM (deform_nhwc.h): the samples are rounded to bf16 as colT's are,
 * products and sums in fp32, the bias added before y's one rounding.
 *
 * For a chunk of nb images of a bf16 NHWC deft plan p (Q = nb*P positions):
 *   xT   [nb, H, W, C] bf16      om [Q, OCS] fp32 (deform_plan.h: offsets, then the mask)
 *   w    [Cout, K*C] bf16 (the NHWC weight [Cout, kh, kw, C] as stored)
 *   bias [Cout] fp32 or NULL     y  [Q, Cout] bf16 (the NHWC output rows of the chunk)
 * The CUDA kernel moves 16-byte chunks of 8 channels: C, Cg = C / G and Cout multiples of 8
 * (dt_deform_igemm_supported). The CPU twin is the sampling twin and the GEMM twin, as the
 * tiled forward's twin is. */
#ifndef DT_K_DEFORM_IGEMM_H
#define DT_K_DEFORM_IGEMM_H

#include <stdint.h>

#include "deform_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when the kernel runs plan p: bf16 NHWC, deft, C, Cg and Cout multiples of 8, 32-bit rows. */
int dt_deform_igemm_supported(const dt_deform_plan *p);

#define DT_DECL_DEFORM_IGEMM(sfx)                                                                             \
    void dt_deform_igemm_fprop_##sfx(const dt_deform_plan *p, int64_t nb, const void *xT, const float *om,    \
                                     const void *w, const float *bias, void *y);
DT_DECL_DEFORM_IGEMM(cpu)
DT_DECL_DEFORM_IGEMM(cuda)

#ifdef __cplusplus
}
#endif
#endif
