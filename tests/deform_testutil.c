#include "tests/deform_testutil.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include "core/dt_autograd.h"
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

/* ---- the scan's problems ---- */

static const dt_deform_case SCAN_CASES[] = {
    {"scan 3x3 s1 p1", 2, 8, 9, 11, 4, {3, 3, 1, 1, 1, 1, 1, 1}, 1, 0, 0, 0, 0},
    {"scan 3x3 s2 p1 G2 mask", 3, 12, 10, 9, 4, {3, 3, 2, 2, 1, 1, 1, 1}, 2, 1, 0, 0, 0},
    {"scan 3x3 s1 p2 d2 mask", 1, 5, 8, 8, 4, {3, 3, 1, 1, 2, 2, 2, 2}, 1, 1, 0, 0, 0},
    {"scan 3x3 s2 p0 d2", 2, 4, 12, 11, 4, {3, 3, 2, 2, 0, 0, 2, 2}, 1, 0, 0, 0, 0},
    {"scan 5x5 s1 p2 G3", 2, 9, 7, 10, 4, {5, 5, 1, 1, 2, 2, 1, 1}, 3, 0, 0, 0, 0},
    {"scan 5x5 s2 p2 d2 G2 mask", 2, 16, 13, 12, 4, {5, 5, 2, 2, 2, 2, 2, 2}, 2, 1, 0, 0, 0},
    {"scan 1x1 s1 p0 mask", 2, 4, 6, 5, 4, {1, 1, 1, 1, 0, 0, 1, 1}, 1, 1, 0, 0, 0},
    {"scan 1x1 s2 p0 G2", 3, 8, 7, 9, 4, {1, 1, 2, 2, 0, 0, 1, 1}, 2, 0, 0, 0, 0},
    {"scan 3x3 s(2,1) p(0,2) d(1,2) 133ch", 2, 133, 9, 10, 4, {3, 3, 2, 1, 0, 2, 1, 2}, 1, 1, 0, 0, 0},
};

int dt_test_scan_case_count(void) { return (int)(sizeof SCAN_CASES / sizeof *SCAN_CASES); }
const dt_deform_case *dt_test_scan_case(int i) { return &SCAN_CASES[i]; }

static float scan_offset(int kind) {
    dt_rng *r = dt_test_rng();
    if (kind == DT_SCAN_OM_SMALL) return 0.7f * dt_rng_normal(r);
    if (kind == DT_SCAN_OM_LARGE) return 40.0f * dt_rng_uniform(r) - 20.0f;
    float u = dt_rng_uniform(r);
    if (u < 0.60f) return 0.7f * dt_rng_normal(r);
    if (u < 0.75f) return 40.0f * dt_rng_uniform(r) - 20.0f;
    if (u < 0.90f) return (float)((int)(7.0f * dt_rng_uniform(r)) - 3);
    if (u < 0.95f) return NAN;
    return u < 0.975f ? INFINITY : -INFINITY;
}

float *dt_test_scan_om(const dt_deform_plan *p, int64_t nb, int kind) {
    const int64_t Q = nb * p->P;
    float *om = calloc((size_t)(Q * p->OCS), sizeof(float));
    for (int64_t q = 0; q < Q; q++) {
        float *row = om + q * p->OCS;
        for (int64_t j = 0; j < 2 * p->GK; j++) row[j] = scan_offset(kind);
        for (int64_t j = 0; p->has_mask && j < p->GK; j++) {
            float u = dt_rng_uniform(dt_test_rng());
            row[2 * p->GK + j] = u < 0.05f ? 0.0f : u > 0.95f ? 1.0f : dt_rng_uniform(dt_test_rng());
        }
    }
    return om;
}
