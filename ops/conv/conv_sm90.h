/* conv_sm90.h: the three passes of a bf16 channels-last convolution on the Hopper engine
 * (sm90_gemm.cuh: wgmma on swizzled shared-memory tiles fed by TMA through an mbarrier ring,
 * warp-specialized, persistent). The implicit GEMM's fourth tile (DT_IGEMM_TILE_SM90,
 * conv_igemm.h): the same function as its other tiles and its CPU twins, reached through the
 * dt_conv_igemm_*_bf16_cuda entry points when the plan (conv_plan.c) puts a pass on it.
 *
 * Shapes as conv_igemm.h: x [N, H, W, C], w [Cout, kh, kw, C], y / dy [N, Ho, Wo, Cout] bf16,
 * dw [Cout, kh, kw, C] fp32. What each pass takes (dt_conv_sm90_supports):
 *   fprop  Cout % 8 == 0; C % 64 == 0 (TMA's im2col mode brings one tap's 64-channel block a
 *          k-slice), or a pointwise conv (1x1, stride 1, no padding) with C % 8 == 0 (x is A);
 *   dgrad  stride 1, C % 8 == 0: the conv of dy with the weight flipped and its channel axes
 *          swapped, padding (k - 1) d - p; Cout % 64 == 0, or pointwise with Cout % 8 == 0;
 *   wgrad  C % 64 == 0, Cout % 8 == 0: dy^T . im2col(x), the reduction over N*Ho*Wo split
 *          into partials summed in split order (deterministic);
 * and every pass: strides <= 8, the window's bounding-box corners within TMA's [-128, 127],
 * fewer than 2^31 output positions. */
#ifndef DT_CONV_SM90_H
#define DT_CONV_SM90_H

#include "ops/conv/conv_igemm.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { DT_SM90_FPROP = 1, DT_SM90_DGRAD = 2, DT_SM90_WGRAD = 4 };
/* The passes of p the engine runs (DT_SM90_* bits), whatever the device. */
int dt_conv_sm90_supports(const dt_igemm_conv *p);

void dt_conv_sm90_fprop(const dt_igemm_conv *p, const void *x, const void *w, const float *bias, void *y);
void dt_conv_sm90_dgrad(const dt_igemm_conv *p, const void *dy, const void *w, float beta, void *dx);
void dt_conv_sm90_wgrad(const dt_igemm_conv *p, const void *x, const void *dy, float beta, float *dw);

#ifdef __cplusplus
}

#include <cuda.h>

/* The tensor maps the engine reads and writes through (host side; cuTensorMapEncode* from the
 * driver's entry point, no -lcuda):
 * a [rows, cols] row-major bf16 matrix in boxes of box_rows x 64 columns, 128-byte swizzled */
CUtensorMap dt_sm90_map_rows(const void *a, int64_t rows, int64_t cols, int box_rows);
/* x [N, H, W, C] bf16 as TMA's im2col mode reads it for the conv g whose output is Ho x Wo:
 * boxes of `pixels` consecutive output positions x 64 channels, 128-byte swizzled */
CUtensorMap dt_sm90_map_im2col(const void *x, int64_t N, int64_t H, int64_t W, int64_t C, dt_conv_geom g,
                               int64_t Ho, int64_t Wo, int pixels);
#endif

#endif
