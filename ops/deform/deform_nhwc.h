/* deform_nhwc.h: the channels-last deformable kernels of the deft mode (layouts and the
 * sample numbering in deform_plan.h). All channels of one offset group share a sample's
 * position and bilinear weights, so with channels last a sample is one weight computation and
 * a few contiguous vector loads; the CUDA kernels give each sample (or pixel) a group of lanes
 * over its channels.
 *
 * Forward, per chunk of nb images (Q = nb*P positions, S = Q*K*G samples):
 *   sample        colT [Q, K*C] from xT [nb, H, W, C] and om [Q, OCS]
 *   tile_forward  the same by output tiles, DefT's way: [fuse] the offset conv of the tile
 *                 (writing om) and then its sampling in one kernel, [stage] the sampling
 *                 reading the tile's input footprint + halo from shared memory (knobs)
 *
 * Types: xT, colT and dcolT are of the plan's dtype (f32, or bf16: read as stored, every sum
 * fp32, a bf16 result rounded once, on its store); om, dom, D and the index are fp32 in every
 * plan; the gather writes dx in the plan's dtype or as an fp32 sum that another kernel
 * finishes (the deft layer's offset conv adds its part before the one rounding).
 *
 * Backward, from dcolT [Q, K*C] (the column gradient, same layout as colT):
 *   index_build   the inverse index, built from the offsets alone: the samples sorted
 *                 (stably, by id) by the top-left pixel they read, per offset group
 *   gather_dx     dxT [nb, H, W, C] = beta*dxT + adjoint of the sampling: each input pixel
 *                 visits the samples of the 4 keys whose 2x2 corners contain it (corner 0:
 *                 the pixel is their top-left, 1: top-right, 2: bottom-left, 3:
 *                 bottom-right), in that order and in index order within a key, sums in fp32
 *                 and writes its gradient once - no atomics, bitwise deterministic. It also
 *                 stores D [S, 4]: D[s][c] = the dot product of sample s's dcol row with x at
 *                 its corner c (over the group's channels), from which:
 *   offset_grads  dom [Q, OCS]: d offset = m * sum_c dw_c/d(y or x) * D[c], d mask =
 *                 sum_c w_c * D[c] (times m(1 - m) for mask logits), corners in a fixed order
 *   scatter_dx    the alternative: dxT += adjoint with float4 atomics into an fp32 dxT
 *                 (zeroed by the caller) and dom directly, in one pass over the samples (not
 *                 reproducible)
 * dom's padding columns [OC, OCS) are written as 0. */
#ifndef DT_K_DEFORM_NHWC_H
#define DT_K_DEFORM_NHWC_H

#include <stddef.h>
#include <stdint.h>

#include "ops/deform/deform_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The inverse index of a chunk (pointers into a workspace of dt_deform_index_ws_bytes). */
typedef struct {
    int64_t samples; /* S = nb*P*K*G */
    int64_t keys;    /* nb*G*(H+1)*(W+1): top-left pixels (y, x) in [-1, H) x [-1, W) */
    uint32_t *order; /* [S] sample ids by key, ascending id within a key */
    uint32_t *start; /* [keys + 1] the samples of key k are order[start[k] .. start[k+1]) */
    float *wm;       /* [S, 4] corner weight x mask (0 for a corner outside the image) */
} dt_deform_index;

/* Samples whose corners are all outside the image (or whose position is not finite) are in
 * no key. Key of top-left pixel (y, x) of image i, group g: ((i*G + g)*(H+1) + y+1)*(W+1) + x+1. */
static inline int64_t dt_deform_index_keys(const dt_deform_plan *p, int64_t nb) {
    return nb * p->G * (p->prob.H + 1) * (p->prob.W + 1);
}

#define DT_DECL_DEFORM_NHWC(sfx)                                                                                      \
    /* xT [nb, H, W, C] and colT [Q, K*C] of p->dtype */                                                            \
    void dt_deform_sample_nhwc_##sfx(const dt_deform_plan *p, int64_t nb, const void *xT, const float *om,          \
                                     void *colT);                                                                    \
    /* woff [OC, C, kh, kw], boff [OC]: the offset conv (fuse only; om written). ws: see below. */                   \
    void dt_deform_tile_forward_##sfx(const dt_deform_plan *p, int64_t nb, const void *xT, const float *woff,      \
                                      const float *boff, float *om, void *colT, void *ws);                           \
    size_t dt_deform_tile_ws_bytes_##sfx(const dt_deform_plan *p, int64_t nb);                                       \
    size_t dt_deform_index_ws_bytes_##sfx(const dt_deform_plan *p, int64_t nb);                                      \
    void dt_deform_index_build_##sfx(const dt_deform_plan *p, int64_t nb, const float *om, void *ws,                \
                                     dt_deform_index *idx);                                                          \
    /* xT, dcolT of p->dtype; dx [nb, H, W, C] = beta*dx + the adjoint, of dx_dtype (p->dtype, or DT_F32 for a     \
     * sum another kernel finishes; NULL: only D is wanted); D [S, 4] */                                            \
    void dt_deform_gather_dx_##sfx(const dt_deform_plan *p, int64_t nb, const dt_deform_index *idx, const void *xT,  \
                                   const void *dcolT, float beta, void *dx, dt_dtype dx_dtype, float *D);            \
    void dt_deform_offset_grads_##sfx(const dt_deform_plan *p, int64_t nb, const float *om, const float *D,         \
                                      int mask_logits, float *dom);                                                  \
    /* xT, dcolT of p->dtype; dxT fp32 += (zero it first; NULL: only dom is wanted); dom written */                 \
    void dt_deform_scatter_dx_##sfx(const dt_deform_plan *p, int64_t nb, const void *xT, const float *om,           \
                                    const void *dcolT, int mask_logits, float *dxT, float *dom);

DT_DECL_DEFORM_NHWC(cpu)
DT_DECL_DEFORM_NHWC(cuda)

#ifdef __cplusplus
}
#endif
#endif
