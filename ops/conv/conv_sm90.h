/* conv_sm90.h: the three passes of a bf16 channels-last convolution on the Hopper engine
 * (sm90_gemm.cuh: wgmma on swizzled shared-memory tiles fed by TMA through an mbarrier ring,
 * warp-specialized, persistent): the engine table's sm90 entry (conv_engine.h), the same
 * function as the implicit GEMM (conv_igemm.h) and its CPU twins, for the passes
 * dt_conv_sm90_read gives a way to read. Its limits and CPU twins are conv_sm90_cpu.c's (both
 * builds: the plan asks them without a GPU); its kernels conv_sm90.cu's.
 *
 * Shapes as conv_igemm.h: x [N, H, W, C], w [Cout, kh, kw, C], y / dy [N, Ho, Wo, Cout] bf16,
 * dw [Cout, kh, kw, C] fp32, every pointer 16-byte aligned (TMA's rule). */
#ifndef DT_CONV_SM90_H
#define DT_CONV_SM90_H

#include <stdint.h>

#include "ops/conv/conv_engine.h"
#include "ops/conv/conv_geom.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How the engine reads pass `pass` of p's input operand, whatever the device (NONE: it does not
 * run the pass):
 *   DENSE    a pointwise conv (1x1, stride 1, no padding): the tensor is the GEMM's A itself
 *            (C % 8 == 0 for fprop, Cout % 8 == 0 for dgrad: TMA's 16-byte row strides);
 *   IM2COL   TMA's im2col mode brings one tap's 64-channel block a k-slice (C % 64 == 0, for
 *            dgrad Cout % 64 == 0), strides <= 8 and the window's bounding-box corners within
 *            [-128, 127];
 *   COLUMNS  any other fprop or wgrad (the stem's C = 3): the column matrix [M, Kp] is
 *            materialized (K = kh*kw*C padded to Kp, a multiple of 8), in chunks of images
 *            within the column budget, and read densely;
 * fprop and wgrad need Cout % 8 == 0; dgrad is the conv of dy with the weight mirrored and its
 * channel axes swapped (dt_conv_dgrad_geom: stride 1 only) and C % 8 == 0; every pass fewer
 * than 2^31 rows; groups 1. */
typedef enum { DT_SM90_NONE = 0, DT_SM90_DENSE, DT_SM90_IM2COL, DT_SM90_COLUMNS } dt_sm90_read;
dt_sm90_read dt_conv_sm90_read(const dt_conv_problem *p, dt_conv_pass pass);

/* The CPU twins: the implicit GEMM's (conv_igemm.h), whose function the engine computes; fprop's
 * stats their one group. */
void dt_conv_sm90_fprop_cpu(const dt_conv_problem *p, const void *x, const void *w, const float *bias, void *y,
                            dt_conv_stats *stats);
void dt_conv_sm90_dgrad_cpu(const dt_conv_problem *p, const void *dy, const void *w, float beta, void *dx);
void dt_conv_sm90_wgrad_cpu(const dt_conv_problem *p, const void *x, const void *dy, float beta, float *dw);

/* stats (or NULL): the statistics of y for the batch norm that follows (conv_geom.h's
 * dt_conv_stats), made by the epilogue from the tile it stores - one group per 64 rows of y
 * (of each chunk on the columns path), summed in fp32 over a slab of at most 64 rows and in
 * double above, in an order fixed by the shape. */
void dt_conv_sm90_fprop(const dt_conv_problem *p, const void *x, const void *w, const float *bias, void *y,
                        dt_conv_stats *stats);
/* fprop with fp32 rows: y [N*Ho*Wo, ldy] fp32, columns co < Cout = conv(x, w) + bias (unrounded),
 * those from sigmoid_from on through the logistic function 1 / (1 + e^-v), columns Cout .. ldy-1
 * zero - the deformable layer's offset conv (offsets and mask, ops/deform/offset_conv.h). Any
 * Cout (w [Cout, kh, kw, C] bf16, bias [Cout] fp32 or NULL), ldy even and >= Cout; x read by TMA's
 * im2col mode: dt_conv_sm90_read of the problem with Cout rounded up to 8 is DT_SM90_IM2COL. */
void dt_conv_sm90_fprop_f32(const dt_conv_problem *p, const void *x, const void *w, const float *bias, float *y,
                            int64_t ldy, int64_t sigmoid_from);
/* stride-1 dgrad with few output channels: dx [N, H, W, C] bf16 = round(beta * dx + add + conv^T(dy, w)),
 * dy [N, Ho, Wo, Cout] bf16 with Cout % 8 == 0 (any multiple: gathered by cp.async), wf the
 * weight flipped and transposed [C, kh, kw, Cout] bf16, add [N*H*W, C] fp32 or NULL, C % 8 == 0 -
 * the deformable layer's offset conv (ops/deform/offset_conv_sm90.h) */
void dt_conv_sm90_dgrad_narrow(const dt_conv_problem *p, const void *dy, const void *wf, const float *add, float beta,
                               void *dx);
void dt_conv_sm90_dgrad(const dt_conv_problem *p, const void *dy, const void *w, float beta, void *dx);

void dt_conv_sm90_wgrad(const dt_conv_problem *p, const void *x, const void *dy, float beta, float *dw);

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
