/* deft.h: the DefT-fused deformable kernels (CUDA only; their CPU twins are the reference
 * loops of deform.h plus a plain offset conv, which the tests compare them against).
 *
 * A block owns a tile of th x tw output positions of one image. It stages the input it needs
 * - the tile's footprint: the rows/columns its taps read, widened by `halo` pixels for the
 * offsets - in shared memory, channel chunk by channel chunk, and:
 *   forward  (dt_deft_fwd_cuda): [fuse] computes the offset conv (+ sigmoid mask) for its
 *            positions on chip from the staged input, writes offsets/mask once (the backward
 *            needs them), then bilinearly samples every channel at those offsets from the
 *            staged tile, writing the column buffer col [C*K, nb*P] for the cuBLAS GEMM.
 *            Without fuse it reads offsets/mask made by a separate offset conv.
 *   backward (dt_deft_bwd_cuda): one pass over the sampled positions and channels produces
 *            the input gradient (global atomics straight into dx: a shared-memory
 *            accumulator was measured slower) and the offset and mask gradients (summed over the
 *            channels in registers), from dcol = W^T dY.
 * A sample whose corner falls outside the staged footprint reads (or scatters to) global
 * memory directly: any offset is correct, only slower. stage = 0 turns staging off
 * altogether (every access goes through L1/L2), swizzle reorders block IDs so that
 * co-resident blocks are 2-D neighbours, det = 1 makes the scatter deterministic
 * (fixed-point int64 accumulation, see deform.h).
 *
 * Layouts (a chunk of nb images, K = kh*kw, G offset groups, OC = 2GK (+GK with mask)):
 *   x [nb, C, H, W]; woff [OC, C, kh, kw]; boff [OC];
 *   offset [nb, 2GK, Ho, Wo] (dy, dx pairs); mask [nb, GK, Ho, Wo] (after the sigmoid);
 *   col, dcol [C*K, nb*Ho*Wo]; dom [nb, OC, Ho, Wo] = gradient w.r.t. the offset conv's output
 *   (offsets, and mask logits: the sigmoid's derivative is applied here). */
#ifndef DT_K_DEFT_H
#define DT_K_DEFT_H

#include <stddef.h>
#include <stdint.h>

#include "conv_geom.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int nb, C, H, W, Ho, Wo, G, has_mask;
    dt_conv_geom g;
    int tile_h, tile_w; /* 0 x 0: chosen for occupancy (8x8, 4x8 or 4x4) */
    int halo, swizzle, stage, det;
} dt_deft_cfg;

/* Validates the configuration: returns NULL or a message naming the bad knob. */
const char *dt_deft_check(const dt_deft_cfg *c);

/* Forward for a chunk. woff/boff NULL: offsets and mask are inputs (not fused). */
void dt_deft_fwd_cuda(const dt_deft_cfg *c, const float *x, const float *woff, const float *boff, float *offset,
                      float *mask, float *col);
/* Where the backward writes the offset and mask gradients: per image, doff holds the 2GK
 * offset channels (image stride off_stride floats) and dmask the GK mask channels (stride
 * mask_stride); each is written (beta 0) or added to (beta 1); mask_logits = 1 applies the
 * sigmoid's derivative (the layer's mask is sigmoid(logits)), 0 gives d/d(mask). The layer
 * points both into one [nb, OC, P] buffer; the raw op into its two tensors. */
typedef struct {
    float *doff, *dmask;
    int64_t off_stride, mask_stride;
    float beta_off, beta_mask;
    int mask_logits;
} dt_deft_grad_out;

/* Backward sampling pass for a chunk. dx: written (beta 0) or added to (beta 1); NULL skips.
 * ws: dt_deft_bwd_ws_bytes(c) bytes of device scratch. */
size_t dt_deft_bwd_ws_bytes(const dt_deft_cfg *c);
void dt_deft_bwd_cuda(const dt_deft_cfg *c, const float *dcol, const float *x, const float *offset, const float *mask,
                      float *dx, float beta_x, const dt_deft_grad_out *out, void *ws);
/* Splits a plain offset-conv output om [nb, OC, P] into offset and sigmoid(mask). */
void dt_deft_split_om_cuda(const dt_deft_cfg *c, const float *om, float *offset, float *mask);

#ifdef __cplusplus
}
#endif
#endif
