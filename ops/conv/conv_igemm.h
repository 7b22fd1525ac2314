/* conv_igemm.h: the implicit-GEMM convolution (bf16 channels last, fp32 accumulation) in its
 * three directions, and the plan that says, per shape, which pass runs on it and which on the
 * im2col + cuBLAS path (docs/conv.md). The CUDA kernels are conv_igemm.cuh's; the CPU twins are
 * direct loops, simple enough to trust, that compute the same function.
 *
 * Shapes (logical [N, C, H, W] tensors stored NHWC, every pointer 16-byte aligned):
 *   x  [N, H, W, C] bf16      w  [Cout, kh, kw, C] bf16     y, dy [N, Ho, Wo, Cout] bf16
 *   dx [N, H, W, C] bf16      dw [Cout, kh, kw, C] fp32     bias [Cout] fp32 or NULL
 *   fprop: y  = round(conv(x, w) + bias)
 *   dgrad: dx = round(beta * dx + conv^T(dy, w))            (beta 0: dx is not read)
 *   wgrad: dw = beta * dw + sum over (n, ho, wo) of dy (x) the window of x   (fp32, not rounded)
 * Each output element is summed in fp32 in a fixed order and rounded once: bitwise
 * reproducible. The CUDA kernels move 16-byte chunks of 8 channels: Cout % 8 == 0 always, and
 * C % 8 == 0 for dgrad and wgrad; fprop copies x and w with zero channels up to a multiple of 8
 * when C is not one (the stem's C = 3: 3 -> 8). dt_igemm_supported says which passes run. */
#ifndef DT_K_CONV_IGEMM_H
#define DT_K_CONV_IGEMM_H

#include <stdint.h>

#include "ops/conv/conv_geom.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CTA tile a pass runs (the CPU twins compute the same function for either):
 *   fprop:  128 = 128x128x64, 8 warps of 64x32, 3 stages;  64 = 64x64x32, 4 warps of 32x32, 4 stages
 *   dgrad:  128 = 128x128x32, 8 warps of 64x32;            64 = 64x64x32, 4 warps of 32x32 (a strided
 *           conv's dgrad runs one sub-GEMM per output parity class over its taps); 4 stages
 *   wgrad:  128 = 128 output channels x 128 k;             64 = 64 x 128 (the 64-channel layers); 4 stages
 * all with a cp.async pipeline, ldmatrix and mma.sync m16n8k16. */
/*   sm90:   the Hopper engine (conv_sm90.h: wgmma + TMA, its tile chosen per shape), for the
 *           passes dt_conv_sm90_supports allows, on a GPU that dt_gpu_has_sm90a. */
typedef enum { DT_IGEMM_TILE_128 = 0, DT_IGEMM_TILE_64 = 1, DT_IGEMM_TILE_SM90 = 2 } dt_igemm_tile;

/* Which passes the CUDA kernels run for problem p (conv_geom.h; dense: groups 1): DT_IGEMM_FPROP
 * (Cout % 8 == 0; any C, padded), | DT_IGEMM_BACKWARD (dgrad and wgrad: C % 8 == 0 too); 0 when
 * none (or past 32-bit row indices). */
enum { DT_IGEMM_FPROP = 1, DT_IGEMM_BACKWARD = 2 };
int dt_igemm_supported(const dt_conv_problem *p);

/* The passes of problem p on tile `tile` (the CPU twins compute the same function for any tile).
 * fprop's stats (or NULL): the statistics of y for the batch norm that follows (conv_geom.h's
 * dt_conv_stats) - the CPU twin's one group summed in double in row order, the engine's 64-row
 * groups (conv_sm90.h); the GPU's mma.sync tiles make none (stats->sums NULL). */
#define DT_DECL_CONV_IGEMM(sfx)                                                                                   \
    void dt_conv_igemm_fprop_bf16_##sfx(const dt_conv_problem *p, dt_igemm_tile tile, const void *x, const void *w, \
                                        const float *bias, void *y, dt_conv_stats *stats);                        \
    void dt_conv_igemm_dgrad_bf16_##sfx(const dt_conv_problem *p, dt_igemm_tile tile, const void *dy, const void *w, \
                                        float beta, void *dx);                                                    \
    void dt_conv_igemm_wgrad_bf16_##sfx(const dt_conv_problem *p, dt_igemm_tile tile, const void *x, const void *dy, \
                                        float beta, float *dw);

DT_DECL_CONV_IGEMM(cpu)
DT_DECL_CONV_IGEMM(cuda)

/* ---- the plan: which engine each pass of a bf16 channels-last conv runs on. */

/* The algorithms (dt_conv_algo, DT_CONV_ALGO_DEFAULT, their names): conv_geom.h. */

/* Per pass: DT_CONV_PASS_GEMM (-1) = im2col + GEMM (the column path), DT_CONV_PASS_DEPTHWISE
 * (-2) = the depthwise family (depthwise.h: a grouped problem with groups == C), else the
 * dt_igemm_tile the implicit GEMM runs. */
enum { DT_CONV_PASS_GEMM = -1, DT_CONV_PASS_DEPTHWISE = -2 };
typedef struct {
    int fprop, dgrad, wgrad;
} dt_conv_plan;

/* The plan of problem p under algo, sm90 saying whether the device
 * runs the Hopper engine (dt_gpu_has_sm90a); a pure function of the shape and the device kind,
 * so every run, replica and replay of a step makes the same choice (bitwise reproducible). */
dt_conv_plan dt_conv_plan_bf16(const dt_conv_problem *p, dt_conv_algo algo, int sm90);

/* The plan of a grouped problem (groups > 1), any dtype and layout: every pass on the depthwise
 * family when p is depthwise (groups == C, Cout a multiple of C) and algo is not gemm (which
 * keeps the column path: the reference, for comparison) and, on the GPU (gpu = 1), its kernels
 * take every pass (dt_dw_gpu_supported); else every pass on the column path (the engines are
 * dense). A pure function of the problem, the algorithm and the device kind. */
dt_conv_plan dt_conv_plan_grouped(const dt_conv_problem *p, dt_conv_algo algo, int gpu);

/* The passes of p the Hopper engine runs (DT_SM90_* bits), whatever the device, and how each
 * reads its input operand (dt_conv_sm90_read):
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
 * than 2^31 rows. */
enum { DT_SM90_FPROP = 1, DT_SM90_DGRAD = 2, DT_SM90_WGRAD = 4 };
int dt_conv_sm90_supports(const dt_conv_problem *p);
typedef enum { DT_SM90_NONE = 0, DT_SM90_DENSE, DT_SM90_IM2COL, DT_SM90_COLUMNS } dt_sm90_read;
dt_sm90_read dt_conv_sm90_read(const dt_conv_problem *p, int pass); /* pass: one DT_SM90_* bit */

#ifdef __cplusplus
}
#endif
#endif
