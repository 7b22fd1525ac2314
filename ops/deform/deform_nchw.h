/* deform_nchw.h: the NCHW deformable-convolution column kernels of the unfused mode
 * (torchvision.ops.deform_conv2d semantics): the CPU reference every implementation is tested
 * against, and the CUDA baseline that runs the op as PyTorch does.
 *
 * Shapes, for a chunk of nb images of a plan (deform_plan.h), K = kh*kw taps, G offset groups
 * (C % G == 0), P = Ho*Wo:
 *   x       [nb, C, H, W]
 *   offset  [nb, 2*G*K, Ho, Wo]   channel (g*K + k)*2 holds dy, +1 holds dx of tap k, group g
 *   mask    [nb, G*K, Ho, Wo]     channel g*K + k (NULL: DCNv1, all ones)
 *   col     [C*K, nb*P]           col[c*K + k][i*P + p] = mask * bilinear(x[i,c], y, x)
 *     with y = oy*sh - ph + ky*dh + dy, x = ox*sw - pw + kx*dw + dx, channel c in group c/(C/G).
 *
 * Backward pieces (dcol = W^T dY in the same layout as col):
 *   col2im        dx[i,c,..] += adjoint of the sampling (scatter; float atomics on the GPU)
 *   col2im_det    the same, deterministic: fixed-point int64 atomics (see below)
 *   col2im_coord  doffset / dmask of each (i, g, k, p): sums over the group's channels
 *                 (a gather: deterministic by construction)
 *
 * Deterministic scatter: float addition is not associative, so atomics in a varying order
 * give varying bits. Integer addition is: contributions v are added as round(v * S) to int64
 * accumulators and converted back once. S = 2^e is chosen per call from the largest |dcol|
 * and |mask| (computed on the device) so that no accumulator can overflow: a dx element
 * receives at most K*P contributions of at most max|dcol|*max|mask| each. The resolution
 * S^-1 is then ~2^-47 of max|dcol|, far below float32 rounding of the sums. */
#ifndef DT_K_DEFORM_H
#define DT_K_DEFORM_H

#include <stddef.h>
#include <stdint.h>

#include "ops/deform/deform_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DT_DECL_DEFORM(sfx)                                                                                      \
    void dt_deform_im2col_##sfx(const dt_deform_plan *p, int64_t nb, const float *x, const float *offset,        \
                                const float *mask, float *col);                                                  \
    /* dx += scatter(dcol) (dx must be initialized) */                                                           \
    void dt_deform_col2im_##sfx(const dt_deform_plan *p, int64_t nb, const float *dcol, const float *offset,     \
                                const float *mask, float *dx);                                                   \
    void dt_deform_col2im_coord_##sfx(const dt_deform_plan *p, int64_t nb, const float *dcol, const float *x,    \
                                      const float *offset, const float *mask, float *doffset, float beta_off,    \
                                      float *dmask, float beta_mask);

DT_DECL_DEFORM(cpu)
DT_DECL_DEFORM(cuda)

/* The deterministic scatter: dx = beta*dx + scatter(dcol), bitwise reproducible. The GPU sums
 * in fixed point (int64 atomics into device scratch from the caching allocator: integer
 * addition is associative), the CPU twin in its fixed loop order. */
void dt_deform_col2im_det_cpu(const dt_deform_plan *p, int64_t nb, const float *dcol, const float *offset,
                              const float *mask, float beta, float *dx);
void dt_deform_col2im_det_cuda(const dt_deform_plan *p, int64_t nb, const float *dcol, const float *offset,
                               const float *mask, float beta, float *dx);

#ifdef __cplusplus
}
#endif
#endif
