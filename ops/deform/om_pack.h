/* om_pack.h: the op's offsets and mask into the deft kernels' om and their gradients out of
 * dom, each in one pass from or to the caller's format (om and dom: deform_plan.h, [Q, OCS]
 * f32 with Q = nb*P positions, P = Ho*Wo).
 *
 *   pack    om[n*P + p][j]       = offset(n, j, p)  for j in [0, 2GK)
 *           om[n*P + p][2GK + j] = mask(n, j, p)    for j in [0, GK) when there is a mask
 *           and the columns after those, up to OCS, = 0
 *   unpack  doffset(n, j, p) = boff*doffset(n, j, p) + dom[n*P + p][j]       (doffset given)
 *           dmask(n, j, p)   = bmask*dmask(n, j, p)  + dom[n*P + p][2GK + j] (dmask given)
 *           beta 0 overwrites (the old value may be NaN), 1 adds in fp32; a bf16 result is
 *           rounded once
 *
 * A field is an offset-shaped tensor, [nb, 2GK, Ho, Wo] (offsets) or [nb, GK, Ho, Wo] (mask),
 * stored f32 or bf16 in NCHW or NHWC, each field in its own format (dt_deform_field_fmt; the
 * zero value is f32 NCHW, dense). An input field may have a pitch: the channel slice of a larger
 * tensor - offsets and mask as channels [0, 2GK) and [2GK, 3GK) of one offset-conv output - is
 * read where it lies (unpack's gradients take a pitch too; the C API's and the drop-in's are
 * dense). Why one kernel: a bf16 or channels-last field used to be converted
 * to f32 NCHW, om zero-filled and each field relaid out - up to five launches a direction
 * where this is one, and a PyTorch caller pays its host time per launch (docs/deform_api.md).
 *
 * The CUDA versions go through shared-memory tiles of positions x OCS columns: both the
 * field's side (coalesced along positions in NCHW, along channels in NHWC) and om's side (one
 * contiguous span of the tile's rows) are read and written in full lines. Pure copies and
 * conversions: the twins agree bit for bit. */
#ifndef DT_K_OM_PACK_H
#define DT_K_OM_PACK_H

#include <stdint.h>

#include "core/dt_dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    dt_dtype dtype;   /* DT_F32 or DT_BF16 */
    dt_layout layout; /* DT_NCHW or DT_NHWC */
    int64_t pitch;    /* elements from one position to the next (NHWC, >= Cf) or from one image to the
                         next (NCHW, >= Cf*P); 0: dense (Cf, Cf*P). Element (n, j, p) of a field of
                         Cf channels is at (n*P + p)*pitch + j (NHWC) or n*pitch + j*P + p (NCHW). */
} dt_deform_field_fmt;

/* NULL when f is a format the kernels take for a field of Cf channels and P positions, else what
 * is wrong with it. */
const char *dt_deform_field_fmt_refusal(dt_deform_field_fmt f, int64_t Cf, int64_t P);

#define DT_DECL_OM_PACK(sfx)                                                                                      \
    void dt_deform_om_pack_##sfx(int64_t nb, int64_t P, int64_t GK, int64_t OCS, const void *offset,             \
                                 dt_deform_field_fmt of, const void *mask, dt_deform_field_fmt mf, float *om);    \
    void dt_deform_om_unpack_##sfx(int64_t nb, int64_t P, int64_t GK, int64_t OCS, const float *dom, void *doffset, \
                                   dt_deform_field_fmt of, float boff, void *dmask, dt_deform_field_fmt mf,       \
                                   float bmask);

DT_DECL_OM_PACK(cpu)
DT_DECL_OM_PACK(cuda)

#ifdef __cplusplus
}
#endif
#endif
