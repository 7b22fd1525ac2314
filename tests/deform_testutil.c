#include "tests/deform_testutil.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/dt_autograd.h"
#include "ops/pointwise/convert.h"
#include "tests/dt_check.h"
#include "ops/deform/dt_deform.h"
#include "tests/dt_test.h"

dt_tensor *dt_test_offsets(const dt_deform_case *c, int64_t Ho, int64_t Wo, int avoid_kinks) {
    int64_t K = (int64_t)c->g.kh * c->g.kw;
    dt_tensor *off = dt_tensor_new4(DT_CPU, c->n, 2 * c->groups * K, Ho, Wo);
    for (int64_t i = 0; i < off->numel; i++) {
        float v = c->off_mean + c->off_std * dt_rng_normal(dt_test_rng());
        if (avoid_kinks) {
            /* Base coordinates are integers, so only the offset's fractional part matters. */
            float f = v - floorf(v);
            if (f < 0.15f) v += 0.15f - f + 0.05f * dt_rng_uniform(dt_test_rng());
            else if (f > 0.85f) v -= f - 0.85f + 0.05f * dt_rng_uniform(dt_test_rng());
        }
        dt_data_f32(off)[i] = v;
    }
    return off;
}

void dt_test_deform_inputs(const dt_deform_case *c, int avoid_kinks, dt_tensor **in) {
    int64_t Ho = dt_conv_out_size(c->h, c->g.kh, c->g.sh, c->g.ph, c->g.dh);
    int64_t Wo = dt_conv_out_size(c->w, c->g.kw, c->g.sw, c->g.pw, c->g.dw);
    int64_t K = (int64_t)c->g.kh * c->g.kw, sb[1] = {c->cout};
    in[0] = dt_test_randn4(c->n, c->c, c->h, c->w, 1.0f);
    in[1] = dt_test_offsets(c, Ho, Wo, avoid_kinks);
    in[2] = NULL;
    if (c->mask) {
        in[2] = dt_tensor_new4(DT_CPU, c->n, c->groups * K, Ho, Wo);
        dt_tensor_fill_uniform(in[2], dt_test_rng(), 0.1f, 1.0f);
    }
    in[3] = dt_test_randn4(c->cout, c->c, c->g.kh, c->g.kw, 1.0f / sqrtf((float)(c->c * K)));
    in[4] = c->bias ? dt_test_randn(1, sb, 1.0f) : NULL;
    for (int i = 0; i < 5; i++)
        if (in[i]) dt_requires_grad(in[i]);
}

dt_tensor *dt_test_deform_layer_forward(dt_tensor **in, void *layer) {
    dt_deform_conv *l = layer;
    l->weight = in[1];
    l->off_weight = in[2];
    l->off_bias = in[3];
    l->bias = in[4];
    return dt_deform_conv_forward(l, in[0]);
}

/* Bilinear sampling with per-corner zero padding, written from torchvision's definition
 * independently of ops/deform/deform_bilinear.h. */
static double sample(const float *plane, int64_t H, int64_t W, double y, double x) {
    if (y <= -1 || y >= H || x <= -1 || x >= W) return 0;
    int64_t y0 = (int64_t)floor(y), x0 = (int64_t)floor(x);
    double ly = y - y0, lx = x - x0, v = 0;
    for (int dy = 0; dy < 2; dy++)
        for (int dx = 0; dx < 2; dx++) {
            int64_t yy = y0 + dy, xx = x0 + dx;
            if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
            v += (dy ? ly : 1 - ly) * (dx ? lx : 1 - lx) * plane[yy * W + xx];
        }
    return v;
}

void dt_test_deform_direct(const dt_deform_case *c, const float *x, const float *off, const float *mask, const float *w,
                           const float *bias, int64_t Ho, int64_t Wo, float *y) {
    int64_t K = (int64_t)c->g.kh * c->g.kw, P = Ho * Wo, Cg = c->c / c->groups;
    for (int64_t n = 0; n < c->n; n++)
        for (int64_t o = 0; o < c->cout; o++)
            for (int64_t oy = 0; oy < Ho; oy++)
                for (int64_t ox = 0; ox < Wo; ox++) {
                    double s = bias ? bias[o] : 0;
                    for (int64_t ch = 0; ch < c->c; ch++) {
                        int64_t grp = ch / Cg;
                        for (int64_t k = 0; k < K; k++) {
                            int64_t ky = k / c->g.kw, kx = k % c->g.kw, p = oy * Wo + ox;
                            double dy = off[((n * c->groups + grp) * K + k) * 2 * P + p];
                            double dx = off[(((n * c->groups + grp) * K + k) * 2 + 1) * P + p];
                            double m = mask ? mask[((n * c->groups + grp) * K + k) * P + p] : 1.0;
                            double yy = oy * c->g.sh - c->g.ph + ky * c->g.dh + dy;
                            double xx = ox * c->g.sw - c->g.pw + kx * c->g.dw + dx;
                            s += w[(o * c->c + ch) * K + k] * m * sample(x + (n * c->c + ch) * c->h * c->w, c->h, c->w, yy, xx);
                        }
                    }
                    y[((n * c->cout + o) * Ho + oy) * Wo + ox] = (float)s;
                }
}

/* ---- the om pack's problems and fields ---- */

const dt_om_pack_case dt_om_pack_cases[] = {
    {2, 7, 9, 0},   /* a 3x3 conv's offsets alone: OC 18, 2 padding columns */
    {2, 7, 9, 1},   /* with its mask: OC 27, OCS 28 */
    {3, 70, 12, 1}, /* OC 36 = OCS: two column tiles, positions past one tile */
    {1, 130, 18, 1}, /* 2 offset groups of 9 taps: OC 54, OCS 56, three position tiles */
    {2, 5, 1, 0},   /* a 1x1 conv: OC 2, OCS 4 */
};
const int dt_om_pack_n_cases = sizeof dt_om_pack_cases / sizeof *dt_om_pack_cases;

dt_deform_field_fmt dt_test_field_fmt(int i) {
    return (dt_deform_field_fmt){(i & 1) ? DT_BF16 : DT_F32, (i & 2) ? DT_NHWC : DT_NCHW, 0};
}

dt_test_field_slice dt_test_field_sliced(int64_t nb, int64_t Cf, int64_t P, dt_deform_field_fmt f) {
    const int64_t Cw = Cf + 5, c0 = 3; /* channels [3, 3 + Cf) of a tensor of Cf + 5 */
    const size_t es = dt_dtype_size(f.dtype);
    dt_test_field_slice r;
    r.wide = dt_test_field(nb, Cw, P, f);
    r.fmt = (dt_deform_field_fmt){f.dtype, f.layout, f.layout == DT_NHWC ? Cw : Cw * P};
    r.slice = (const char *)r.wide + (size_t)(f.layout == DT_NHWC ? c0 : c0 * P) * es;
    r.bytes = (size_t)(nb * Cw * P) * es;
    /* the dense copy: through f32 NCHW, where the slice is one block of rows an image */
    float *w32 = malloc(sizeof(float) * (size_t)(nb * Cw * P)), *d32 = malloc(sizeof(float) * (size_t)(nb * Cf * P));
    dt_convert_cpu(nb, Cw, P, r.wide, f.dtype, f.layout, 0.0f, w32, DT_F32, DT_NCHW);
    for (int64_t n = 0; n < nb; n++) memcpy(d32 + n * Cf * P, w32 + (n * Cw + c0) * P, sizeof(float) * (size_t)(Cf * P));
    r.dense = malloc(es * (size_t)(nb * Cf * P));
    dt_convert_cpu(nb, Cf, P, d32, DT_F32, DT_NCHW, 0.0f, r.dense, f.dtype, f.layout);
    free(w32), free(d32);
    return r;
}

void *dt_test_field(int64_t nb, int64_t Cf, int64_t P, dt_deform_field_fmt f) {
    const int64_t n = nb * Cf * P;
    float *v = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    dt_rng_fill_normal(dt_test_rng(), v, n, 0.0f, 2.0f);
    void *out = malloc(dt_dtype_size(f.dtype) * (size_t)(n > 0 ? n : 1));
    dt_convert_cpu(nb, Cf, P, v, DT_F32, DT_NCHW, 0.0f, out, f.dtype, f.layout);
    free(v);
    return out;
}
