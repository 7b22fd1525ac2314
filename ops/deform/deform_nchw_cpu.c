#include <string.h>
/* The CPU reference of the deformable convolution: the plainest correct loops, the oracle
 * every other implementation is tested against. Threaded over channels (im2col, col2im,
 * each channel independent) or offset channels (coord); each output element is computed by
 * one thread in a fixed order, so results do not depend on the thread count. */
#include "ops/deform/deform_nchw.h"
#include "ops/deform/deform_bilinear.h"
#include "core/dt_parallel.h"

/* The plan's sizes for a chunk of nb images. */
typedef struct {
    int64_t nb, C, H, W, Ho, Wo;
    int G;
    dt_conv_geom g;
} shape;

static shape shape_of(const dt_deform_plan *p, int64_t nb) {
    shape s = {nb, p->prob.C, p->prob.H, p->prob.W, p->prob.Ho, p->prob.Wo, p->G, p->prob.g};
    return s;
}

typedef struct {
    const shape *s;
    const float *x, *offset, *mask, *col;
    float *out, *out2;
    float beta, beta2;
} job;

/* The bilinear sample of tap k (group g) at output position p of image i, and its mask:
 * y = oy*sh - ph + ky*dh + dy, x = ox*sw - pw + kx*dw + dx with (dy, dx) from the offsets. */
static inline dt_bilin tap_sample(const shape *s, const float *offset, const float *mask, int64_t i, int g,
                                  int k, int64_t p, float *m) {
    int64_t K = (int64_t)s->g.kh * s->g.kw, P = s->Ho * s->Wo;
    const float *o = offset + ((i * s->G + g) * K + k) * 2 * P;
    *m = mask ? mask[((i * s->G + g) * K + k) * P + p] : 1.0f;
    int64_t oy = p / s->Wo, ox = p % s->Wo;
    int ky = k / s->g.kw, kx = k % s->g.kw;
    float y = (float)(oy * s->g.sh - s->g.ph + ky * s->g.dh) + o[p];
    float x = (float)(ox * s->g.sw - s->g.pw + kx * s->g.dw) + o[P + p];
    return dt_bilin_make(y, x, (int)s->H, (int)s->W);
}

static void im2col_range(void *ctx, int64_t c0, int64_t c1) {
    const job *j = ctx;
    const shape *s = j->s;
    int64_t K = (int64_t)s->g.kh * s->g.kw, P = s->Ho * s->Wo, NP = s->nb * P;
    for (int64_t c = c0; c < c1; c++) {
        int g = (int)(c / (s->C / s->G));
        for (int64_t i = 0; i < s->nb; i++) {
            const float *plane = j->x + (i * s->C + c) * s->H * s->W;
            for (int k = 0; k < K; k++) {
                float *row = (float *)j->col + (c * K + k) * NP + i * P;
                for (int64_t p = 0; p < P; p++) {
                    float m, v[4];
                    dt_bilin b = tap_sample(s, j->offset, j->mask, i, g, k, p, &m);
                    dt_bilin_fetch(&b, plane, (int)s->W, v);
                    row[p] = m * dt_bilin_value(&b, v);
                }
            }
        }
    }
}

void dt_deform_im2col_cpu(const dt_deform_plan *p, int64_t nb, const float *x, const float *offset, const float *mask,
                          float *col) {
    shape sh = shape_of(p, nb), *s = &sh;
    job j = {.s = s, .x = x, .offset = offset, .mask = mask, .col = col};
    dt_parallel_for(s->C, 1, im2col_range, &j);
}

static void col2im_range(void *ctx, int64_t c0, int64_t c1) {
    const job *j = ctx;
    const shape *s = j->s;
    int64_t K = (int64_t)s->g.kh * s->g.kw, P = s->Ho * s->Wo, NP = s->nb * P;
    for (int64_t c = c0; c < c1; c++) {
        int g = (int)(c / (s->C / s->G));
        for (int64_t i = 0; i < s->nb; i++) {
            float *plane = j->out + (i * s->C + c) * s->H * s->W;
            for (int k = 0; k < K; k++) {
                const float *row = j->col + (c * K + k) * NP + i * P;
                for (int64_t p = 0; p < P; p++) {
                    float m;
                    dt_bilin b = tap_sample(s, j->offset, j->mask, i, g, k, p, &m);
                    float gv = m * row[p];
                    for (int q = 0; q < 4; q++)
                        if (b.ok[q]) plane[dt_bilin_index(&b, q, (int)s->W)] += b.w[q] * gv;
                }
            }
        }
    }
}

void dt_deform_col2im_cpu(const dt_deform_plan *p, int64_t nb, const float *dcol, const float *offset, const float *mask,
                          float *dx) {
    shape sh = shape_of(p, nb), *s = &sh;
    job j = {.s = s, .col = dcol, .offset = offset, .mask = mask, .out = dx};
    dt_parallel_for(s->C, 1, col2im_range, &j);
}

/* One (i, g, k) triple per index; loops over positions and the group's channels. */
static void coord_range(void *ctx, int64_t t0, int64_t t1) {
    const job *j = ctx;
    const shape *s = j->s;
    int64_t K = (int64_t)s->g.kh * s->g.kw, P = s->Ho * s->Wo, NP = s->nb * P, Cg = s->C / s->G;
    for (int64_t t = t0; t < t1; t++) {
        int64_t i = t / (s->G * K);
        int g = (int)((t / K) % s->G), k = (int)(t % K);
        for (int64_t p = 0; p < P; p++) {
            float m;
            dt_bilin b = tap_sample(s, j->offset, j->mask, i, g, k, p, &m);
            double gy = 0, gx = 0, gm = 0;
            for (int64_t c = g * Cg; c < (g + 1) * Cg; c++) {
                float v[4];
                dt_bilin_fetch(&b, j->x + (i * s->C + c) * s->H * s->W, (int)s->W, v);
                float d = j->col[(c * K + k) * NP + i * P + p];
                gy += (double)d * m * dt_bilin_dy(&b, v);
                gx += (double)d * m * dt_bilin_dx(&b, v);
                gm += (double)d * dt_bilin_value(&b, v);
            }
            float *o = j->out + ((i * s->G + g) * K + k) * 2 * P;
            o[p] = j->beta == 0.0f ? (float)gy : o[p] + (float)gy;
            o[P + p] = j->beta == 0.0f ? (float)gx : o[P + p] + (float)gx;
            if (j->out2) {
                float *mo = j->out2 + ((i * s->G + g) * K + k) * P;
                mo[p] = j->beta2 == 0.0f ? (float)gm : mo[p] + (float)gm;
            }
        }
    }
}

void dt_deform_col2im_det_cpu(const dt_deform_plan *p, int64_t nb, const float *dcol, const float *offset,
                              const float *mask, float beta, float *dx) {
    if (beta == 0.0f) memset(dx, 0, (size_t)(nb * p->prob.C * p->prob.H * p->prob.W) * sizeof(float));
    dt_deform_col2im_cpu(p, nb, dcol, offset, mask, dx); /* one thread a channel, fixed order */
}

void dt_deform_col2im_coord_cpu(const dt_deform_plan *p, int64_t nb, const float *dcol, const float *x,
                                const float *offset, const float *mask, float *doffset, float beta_off, float *dmask,
                                float beta_mask) {
    shape sh = shape_of(p, nb), *s = &sh;
    job j = {.s = s, .col = dcol, .x = x, .offset = offset, .mask = mask, .out = doffset, .beta = beta_off,
             .out2 = dmask, .beta2 = beta_mask};
    dt_parallel_for(s->nb * s->G * (int64_t)s->g.kh * s->g.kw, 1, coord_range, &j);
}
