/* dxtile_testutil.h: dx=tile's test problems (tests/test_dxtile.c on the CPU,
 * tests/test_deform_gpu.c on the GPU): random x, dcol and om for a deft plan - offsets small,
 * of +-20 px, integers, or with NaN / inf among them, masks in (-0.5, 1.5) - so that samples
 * fall inside and outside the image and inside and outside their tile's footprint. */
#ifndef DT_DXTILE_TESTUTIL_H
#define DT_DXTILE_TESTUTIL_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dt_dtype.h"
#include "core/dt_rng.h"
#include "ops/deform/deform_plan.h"

typedef enum { DXT_SMALL, DXT_WIDE, DXT_INTEGER, DXT_NONFINITE } dxt_offsets;

typedef struct {
    const char *name;
    int64_t n, c, h, w;
    dt_conv_geom g;
    int groups, mask, halo;
    dxt_offsets off;
} dxt_case;

/* Host copies of a problem: x [N, H, W, C] and dcol [N*P, K*C] of the plan's dtype, om [N*P, OCS]. */
typedef struct {
    void *x, *dcol;
    float *om;
    int64_t nx, ncol, nom;
} dxt_problem;

static inline const char *dxt_plan(const dxt_case *c, dt_dtype dt, int dx, dt_deform_plan *p) {
    dt_deform_knobs k = dt_deform_knobs_default();
    k.dx = dx;
    k.halo = c->halo;
    const char *bad = dt_deform_plan_init(p, c->n, c->c, c->h, c->w, 4, c->g, c->groups, c->mask, DT_DEFORM_DEFT, &k,
                                          (size_t)1 << 40);
    return bad ? bad : dt_deform_plan_types(p, dt, DT_NHWC, DT_MATH_FP32, (size_t)1 << 40);
}

static inline void dxt_fill(dt_rng *r, dt_dtype dt, int64_t n, void *out, float scale) {
    for (int64_t e = 0; e < n; e++) {
        float v = scale * dt_rng_normal(r);
        if (dt == DT_BF16) ((dt_bf16 *)out)[e] = dt_bf16_from_float(v);
        else ((float *)out)[e] = v;
    }
}

static inline float dxt_offset(dt_rng *r, dxt_offsets kind) {
    switch (kind) {
    case DXT_SMALL: return 3.0f * (dt_rng_uniform(r) - 0.5f);
    case DXT_WIDE: return 40.0f * (dt_rng_uniform(r) - 0.5f);
    case DXT_INTEGER: return (float)((int)(dt_rng_uniform(r) * 7.0f) - 3);
    default: {
        float u = dt_rng_uniform(r);
        return u < 0.03f ? NAN : u < 0.06f ? INFINITY : u < 0.09f ? -INFINITY : 6.0f * (u - 0.5f);
    }
    }
}

static inline dxt_problem dxt_make(const dt_deform_plan *p, const dxt_case *c, uint64_t seed) {
    dxt_problem pr;
    dt_rng r;
    dt_rng_seed(&r, seed);
    size_t es = dt_dtype_size(p->dtype);
    pr.nx = p->N * p->H * p->W * p->C;
    pr.ncol = p->N * p->P * p->KC;
    pr.nom = p->N * p->P * p->OCS;
    pr.x = malloc((size_t)pr.nx * es);
    pr.dcol = malloc((size_t)pr.ncol * es);
    pr.om = calloc((size_t)pr.nom, sizeof(float));
    dxt_fill(&r, p->dtype, pr.nx, pr.x, 1.0f);
    dxt_fill(&r, p->dtype, pr.ncol, pr.dcol, 1.0f);
    for (int64_t q = 0; q < p->N * p->P; q++) {
        float *row = pr.om + q * p->OCS;
        for (int64_t j = 0; j < 2 * p->GK; j++) row[j] = dxt_offset(&r, c->off);
        if (p->has_mask)
            for (int64_t j = 0; j < p->GK; j++) row[2 * p->GK + j] = 2.0f * dt_rng_uniform(&r) - 0.5f;
    }
    return pr;
}

static inline void dxt_free(dxt_problem *pr) {
    free(pr->x);
    free(pr->dcol);
    free(pr->om);
}

/* The geometries: strides 2, dilation 2, padding 0/1/2, 1x1 / 3x3 / 5x5 kernels, offset groups,
 * 133 channels (5 chunks of 32, the last of 5), every kind of offset. */
#define DXT_G(k, s, pd, d) {k, k, s, s, pd, pd, d, d}
static const dxt_case dxt_cases[] = {
    {"3x3 C 8 small", 2, 8, 9, 10, DXT_G(3, 1, 1, 1), 1, 1, 1, DXT_SMALL},
    {"3x3 C 64 s2 wide", 2, 64, 13, 11, DXT_G(3, 2, 1, 1), 1, 1, 1, DXT_WIDE},
    {"3x3 C 133 integer", 1, 133, 8, 9, DXT_G(3, 1, 1, 1), 1, 1, 2, DXT_INTEGER},
    {"3x3 d2 G 2 C 40 nonfinite", 2, 40, 11, 12, DXT_G(3, 1, 2, 2), 2, 1, 1, DXT_NONFINITE},
    {"1x1 C 24 pad 0 wide", 2, 24, 7, 9, DXT_G(1, 1, 0, 1), 1, 0, 0, DXT_WIDE},
    {"5x5 s2 pad 2 G 4 C 36 small", 2, 36, 12, 13, DXT_G(5, 2, 2, 1), 4, 1, 1, DXT_SMALL},
    {"5x5 d2 pad 0 C 16 halo 3 integer", 1, 16, 14, 15, DXT_G(5, 1, 0, 2), 1, 0, 3, DXT_INTEGER},
    {"3x3 G 3 C 99 s2 nonfinite", 3, 99, 10, 9, DXT_G(3, 2, 1, 1), 3, 1, 2, DXT_NONFINITE},
};
#undef DXT_G
#define DXT_NCASES ((int)(sizeof dxt_cases / sizeof dxt_cases[0]))

#endif
