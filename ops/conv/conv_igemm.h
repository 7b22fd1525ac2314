/* conv_igemm.h: the implicit-GEMM convolution (bf16 channels last, fp32 accumulation) in its
 * three directions (docs/conv.md). The CUDA kernels are conv_igemm.cuh's; the CPU twins are
 * direct loops, simple enough to trust, that compute the same function (also the Hopper
 * engine's, conv_sm90.h).
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
 * when C is not one (the stem's C = 3: 3 -> 8). The engine table (conv_engine.h: its igemm128
 * and igemm64 entries) says which passes of a problem run here and launches them. */
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
 * all with a cp.async pipeline, ldmatrix and mma.sync m16n8k16. The plan names the engine
 * (DT_CONV_ENGINE_IGEMM128 / _IGEMM64), whose launch passes its tile here. */
typedef enum { DT_IGEMM_TILE_128 = 0, DT_IGEMM_TILE_64 = 1 } dt_igemm_tile;

/* The passes of problem p on tile `tile` (the CPU twins compute the same function for any tile).
 * fprop's stats (or NULL): the statistics of y for the batch norm that follows (conv_geom.h's
 * dt_conv_stats) - the CPU twin's one group summed in double in row order; the GPU's mma.sync
 * tiles make none (stats->sums NULL). */
#define DT_DECL_CONV_IGEMM(sfx)                                                                                   \
    void dt_conv_igemm_fprop_bf16_##sfx(const dt_conv_problem *p, dt_igemm_tile tile, const void *x, const void *w, \
                                        const float *bias, void *y, dt_conv_stats *stats);                        \
    void dt_conv_igemm_dgrad_bf16_##sfx(const dt_conv_problem *p, dt_igemm_tile tile, const void *dy, const void *w, \
                                        float beta, void *dx);                                                    \
    void dt_conv_igemm_wgrad_bf16_##sfx(const dt_conv_problem *p, dt_igemm_tile tile, const void *x, const void *dy, \
                                        float beta, float *dw);

DT_DECL_CONV_IGEMM(cpu)
DT_DECL_CONV_IGEMM(cuda)

#ifdef __cplusplus
}
#endif
#endif
