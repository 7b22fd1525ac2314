/* im2col.h: the column transforms behind convolution as a GEMM, and the layout transposes
 * around them.
 *
 * For a chunk of nb images x: [nb, C, H, W] and output size Ho x Wo (P = Ho*Wo):
 *   col: [C*kh*kw, nb*P]   col[(c*kh + ky)*kw + kx][i*P + oy*Wo + ox]
 *                          = x[i][c][oy*sh - ph + ky*dh][ox*sw - pw + kx*dw]  (0 outside)
 * so that y = W[Cout, C*kh*kw] . col is the convolution, laid out [Cout, nb*P] ("CNHW").
 * col2im is the adjoint: x[i][c][iy][ix] = beta*x + sum of the col entries that read it,
 * computed as a gather (each x element sums its own taps in a fixed order): deterministic,
 * no atomics. The relayouts of the GEMM's [C, nb*P] output are in layout.h.
 * The channels-last pair (NHWC, f32 or bf16: x, col of the entry's dtype):
 *   col: [nb*P, kh*kw*C]   col[i*P + oy*Wo + ox][(ky*kw + kx)*C + c] = x[i][iy][ix][c]
 * (the order an NHWC weight [Cout, kh, kw, C] is stored in, so y [nb*P, Cout] = col W^T is the
 * NHWC output itself), and its adjoint col2im_nhwc, also a gather: each x element sums its
 * taps in a fixed order in fp32 and is written once (beta 0) or added to (beta 1). */
#ifndef DT_K_IM2COL_H
#define DT_K_IM2COL_H

#include <stdint.h>

#include "ops/conv/conv_geom.h"
#include "core/dt_dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DT_DECL_IM2COL(sfx)                                                                          \
    void dt_im2col_##sfx(const float *x, int64_t nb, int64_t C, int64_t H, int64_t W, dt_conv_geom g, \
                         int64_t Ho, int64_t Wo, float *col);                                        \
    void dt_col2im_##sfx(const float *col, int64_t nb, int64_t C, int64_t H, int64_t W, dt_conv_geom g, \
                         int64_t Ho, int64_t Wo, float beta, float *x);                          \
    DT_DECL_IM2COL_NHWC(f32_##sfx)                                                                   \
    DT_DECL_IM2COL_NHWC(bf16_##sfx)
#define DT_DECL_IM2COL_NHWC(sfx)                                                                              \
    void dt_im2col_nhwc_##sfx(const void *x, int64_t nb, int64_t C, int64_t H, int64_t W, dt_conv_geom g,      \
                              int64_t Ho, int64_t Wo, void *col);                                             \
    void dt_col2im_nhwc_##sfx(const void *col, int64_t nb, int64_t C, int64_t H, int64_t W, dt_conv_geom g,    \
                              int64_t Ho, int64_t Wo, float beta, void *x);

DT_DECL_IM2COL(cpu)
DT_DECL_IM2COL(cuda)

#ifdef __cplusplus
}
#endif
#endif
