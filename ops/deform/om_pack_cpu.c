/* CPU twins of om_pack.h, element by element. */
#include "ops/deform/om_pack.h"

const char *dt_deform_field_fmt_refusal(dt_deform_field_fmt f, int64_t Cf, int64_t P) {
    if (f.dtype != DT_F32 && f.dtype != DT_BF16) return "an offset or mask field is f32 or bf16";
    if (f.layout != DT_NCHW && f.layout != DT_NHWC) return "an offset or mask field is NCHW or NHWC";
    if (f.pitch < 0 || (f.pitch > 0 && f.pitch < (f.layout == DT_NHWC ? Cf : Cf * P)))
        return "an offset or mask field's pitch is 0 (dense) or at least its channels (NHWC: per position) or its "
               "channels x positions (NCHW: per image)";
    return NULL;
}

/* Element (n, j, p) of a field of Cf channels and P positions in format f. */
static int64_t at(dt_deform_field_fmt f, int64_t Cf, int64_t P, int64_t n, int64_t j, int64_t p) {
    if (f.layout == DT_NHWC) return (n * P + p) * (f.pitch ? f.pitch : Cf) + j;
    return n * (f.pitch ? f.pitch : Cf * P) + j * P + p;
}

void dt_deform_om_pack_cpu(int64_t nb, int64_t P, int64_t GK, int64_t OCS, const void *offset, dt_deform_field_fmt of,
                           const void *mask, dt_deform_field_fmt mf, float *om) {
    const int64_t used = mask ? 3 * GK : 2 * GK;
    for (int64_t n = 0; n < nb; n++)
        for (int64_t p = 0; p < P; p++) {
            float *row = om + (n * P + p) * OCS;
            for (int64_t j = 0; j < 2 * GK; j++) row[j] = dt_elem_ld(offset, of.dtype, at(of, 2 * GK, P, n, j, p));
            if (mask)
                for (int64_t j = 0; j < GK; j++) row[2 * GK + j] = dt_elem_ld(mask, mf.dtype, at(mf, GK, P, n, j, p));
            for (int64_t j = used; j < OCS; j++) row[j] = 0.0f;
        }
}

void dt_deform_om_unpack_cpu(int64_t nb, int64_t P, int64_t GK, int64_t OCS, const float *dom, void *doffset,
                             dt_deform_field_fmt of, float boff, void *dmask, dt_deform_field_fmt mf, float bmask) {
    for (int64_t n = 0; n < nb; n++)
        for (int64_t p = 0; p < P; p++) {
            const float *row = dom + (n * P + p) * OCS;
            if (doffset)
                for (int64_t j = 0; j < 2 * GK; j++)
                    dt_elem_st_beta(doffset, of.dtype, at(of, 2 * GK, P, n, j, p), row[j], boff);
            if (dmask)
                for (int64_t j = 0; j < GK; j++)
                    dt_elem_st_beta(dmask, mf.dtype, at(mf, GK, P, n, j, p), row[2 * GK + j], bmask);
        }
}
