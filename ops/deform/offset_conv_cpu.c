/* CPU twins of offset_conv.h: direct loops from the definition, summing in double, on fp32
 * copies of bf16 inputs (widening is exact); the operands the GPU rounds (w and dom of bf16
 * plans with C % 32 == 0, offset_conv.h) are rounded the same way, and dx is rounded once, at
 * its store, after add and beta. */
#include <math.h>
#include <stdlib.h>

#include <string.h>

#include "core/dt_alloc.h"
#include "ops/pointwise/convert.h"
#include "ops/deform/deform_chunk.h"
#include "core/dt_common.h"
#include "core/dt_device.h"
#include "core/dt_parallel.h"
#include "ops/deform/offset_conv.h"

/* bf16 plans' fp32 operands (offset_conv.h): a rounded copy of x [n], or NULL when the plan
 * keeps fp32. */
static float *rounded(const dt_deform_plan *p, const float *x, int64_t n) {
    if (p->dtype != DT_BF16 || !dt_offconv_rounds(p)) return NULL;
    float *y = dt_dev_alloc(DT_CPU, (size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) y[i] = dt_bf16_round(x[i]);
    return y;
}

/* The input xT [n] of a plan as fp32: the data itself (f32) or a widened copy in *own (bf16;
 * the caller frees it). */
static const float *input_f32(const dt_deform_plan *p, const void *xT, int64_t n, float **own) {
    *own = NULL;
    if (p->dtype == DT_F32) return xT;
    *own = dt_dev_alloc(DT_CPU, (size_t)(n > 0 ? n : 1) * sizeof(float));
    dt_bf16_to_f32_cpu(n, xT, *own);
    return *own;
}

typedef struct {
    const dt_deform_chunk *c;
    const float *xT, *w, *b, *dom, *add;
    float *om, *dw, *db, *dxT;
    float beta, beta_b;
} job;

size_t dt_offconv_ws_bytes_cpu(const dt_deform_plan *p, int64_t nb) {
    (void)p;
    (void)nb;
    return 0;
}

/* Input pixel read by tap (ky, kx) at output (oy, ox), or -1 in the zero padding. */
static int64_t tap_pixel(const dt_deform_chunk *c, int i, int oy, int ox, int ky, int kx) {
    int iy = oy * c->sh - c->ph + ky * c->dh, ix = ox * c->sw - c->pw + kx * c->dw;
    if (iy < 0 || iy >= c->H || ix < 0 || ix >= c->W) return -1;
    return ((int64_t)i * c->H + iy) * c->W + ix;
}

static void fwd_range(void *ctx, int64_t q0, int64_t q1) {
    const job *j = ctx;
    const dt_deform_chunk *c = j->c;
    for (int64_t q = q0; q < q1; q++) {
        int i, oy, ox;
        dt_position_decode(c, (int)q, &i, &oy, &ox);
        float *row = j->om + q * c->OCS;
        for (int o = 0; o < c->OCS; o++) {
            if (o >= c->OC) {
                row[o] = 0.0f;
                continue;
            }
            double s = j->b ? j->b[o] : 0.0;
            for (int k = 0; k < c->K; k++) {
                int64_t pix = tap_pixel(c, i, oy, ox, k / c->kw, k % c->kw);
                if (pix < 0) continue;
                const float *xr = j->xT + pix * c->C;
                for (int ch = 0; ch < c->C; ch++) s += (double)xr[ch] * j->w[((int64_t)o * c->C + ch) * c->K + k];
            }
            float v = (float)s;
            row[o] = o >= 2 * c->GK ? 1.0f / (1.0f + expf(-v)) : v;
        }
    }
}

void dt_offconv_fwd_cpu(const dt_deform_plan *p, int64_t nb, const void *xT, const float *w, const float *b, float *om,
                        void *ws) {
    (void)ws;
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    float *xown, *wr = rounded(p, w, c.OC * c.KC);
    job j = {.c = &c, .xT = input_f32(p, xT, (int64_t)c.npix * c.C, &xown), .w = wr ? wr : w, .b = b, .om = om};
    dt_parallel_for(c.Q, 16, fwd_range, &j);
    dt_dev_free(DT_CPU, xown);
    dt_dev_free(DT_CPU, wr);
}

/* One output channel o per index: dw[o] and db[o]. */
static void dw_range(void *ctx, int64_t o0, int64_t o1) {
    const job *j = ctx;
    const dt_deform_chunk *c = j->c;
    double *acc = dt_dev_alloc(DT_CPU, (size_t)c->C * c->K * sizeof(double));
    memset(acc, 0, (size_t)c->C * c->K * sizeof(double));
    for (int64_t o = o0; o < o1; o++) {
        for (int64_t e = 0; e < (int64_t)c->C * c->K; e++) acc[e] = 0;
        double sb = 0;
        for (int q = 0; q < c->Q; q++) {
            int i, oy, ox;
            dt_position_decode(c, q, &i, &oy, &ox);
            double d = j->dom[(int64_t)q * c->OCS + o];
            sb += d;
            for (int k = 0; k < c->K; k++) {
                int64_t pix = tap_pixel(c, i, oy, ox, k / c->kw, k % c->kw);
                if (pix < 0) continue;
                const float *xr = j->xT + pix * c->C;
                for (int ch = 0; ch < c->C; ch++) acc[(int64_t)ch * c->K + k] += d * xr[ch];
            }
        }
        if (j->dw) {
            float *dw = j->dw + o * c->C * c->K;
            for (int64_t e = 0; e < (int64_t)c->C * c->K; e++)
                dw[e] = j->beta == 0.0f ? (float)acc[e] : j->beta * dw[e] + (float)acc[e];
        }
        if (j->db) j->db[o] = j->beta_b == 0.0f ? (float)sb : j->beta_b * j->db[o] + (float)sb;
    }
    dt_dev_free(DT_CPU, acc);
}

static void bwd_weight(const dt_deform_plan *p, int64_t nb, const void *xT, const float *dom, float beta_w, float *dw,
                       float beta_b, float *db) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    float *xown, *dr = rounded(p, dom, (int64_t)c.Q * c.OCS);
    const float *x = input_f32(p, xT, (int64_t)c.npix * c.C, &xown);
    if (dr) { /* the bias gradient sums the fp32 dom; the weight gradient multiplies rounded operands */
        job jb = {.c = &c, .xT = x, .dom = dom, .dw = NULL, .db = db, .beta = beta_w, .beta_b = beta_b};
        dt_parallel_for(c.OC, 1, dw_range, &jb);
        db = NULL;
    }
    job j = {.c = &c, .xT = x, .dom = dr ? dr : dom, .dw = dw, .db = db, .beta = beta_w, .beta_b = beta_b};
    dt_parallel_for(c.OC, 1, dw_range, &j);
    dt_dev_free(DT_CPU, xown);
    dt_dev_free(DT_CPU, dr);
}

/* One input pixel per index: the taps (k) whose output position reads it. */
static void dx_range(void *ctx, int64_t p0, int64_t p1) {
    const job *j = ctx;
    const dt_deform_chunk *c = j->c;
    double *acc = dt_dev_alloc(DT_CPU, sizeof(double) * (size_t)c->C);
    for (int64_t pix = p0; pix < p1; pix++) {
        int64_t ix = pix % c->W, iy = (pix / c->W) % c->H, i = pix / ((int64_t)c->W * c->H);
        for (int ch = 0; ch < c->C; ch++) acc[ch] = 0;
        for (int k = 0; k < c->K; k++) {
            int64_t ty = iy + c->ph - (int64_t)(k / c->kw) * c->dh, tx = ix + c->pw - (int64_t)(k % c->kw) * c->dw;
            if (ty < 0 || tx < 0 || ty % c->sh || tx % c->sw || ty / c->sh >= c->Ho || tx / c->sw >= c->Wo) continue;
            int64_t q = (i * c->Ho + ty / c->sh) * c->Wo + tx / c->sw;
            const float *d = j->dom + q * c->OCS;
            for (int o = 0; o < c->OC; o++)
                for (int ch = 0; ch < c->C; ch++) acc[ch] += (double)d[o] * j->w[((int64_t)o * c->C + ch) * c->K + k];
        }
        /* add + sum in fp32, as the GPU's epilogue (the beta step: bwd_input) */
        float *out = j->dxT + pix * c->C;
        const float *add = j->add ? j->add + pix * c->C : NULL;
        for (int ch = 0; ch < c->C; ch++) out[ch] = add ? add[ch] + (float)acc[ch] : (float)acc[ch];
    }
    dt_dev_free(DT_CPU, acc);
}

static void bwd_input(const dt_deform_plan *p, int64_t nb, const float *dom, const float *w, const float *add,
                      float beta, void *dxT) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    int64_t nx = (int64_t)c.npix * c.C;
    float *dr = rounded(p, dom, (int64_t)c.Q * c.OCS), *wr = rounded(p, w, c.OC * c.KC);
    float *t = dt_dev_alloc(DT_CPU, (size_t)(nx > 0 ? nx : 1) * sizeof(float)); /* add + the transposed conv, fp32 */
    job j = {.c = &c, .dom = dr ? dr : dom, .w = wr ? wr : w, .add = add, .dxT = t};
    dt_parallel_for(c.npix, 16, dx_range, &j);
    /* dxT = beta*dxT + t: the sum in fp32, rounded once to the plan's dtype */
    dt_convert_cpu(1, 1, nx, t, DT_F32, DT_NCHW, beta, dxT, p->dtype, DT_NCHW);
    dt_dev_free(DT_CPU, t);
    dt_dev_free(DT_CPU, dr);
    dt_dev_free(DT_CPU, wr);
}

void dt_offconv_bwd_cpu(const dt_deform_plan *p, int64_t nb, const void *xT, const float *dom, const float *w,
                        float beta_w, float *dw, float beta_b, float *db, const float *add, float beta, void *dxT,
                        void *ws) {
    (void)ws;
    if (dw || db) bwd_weight(p, nb, xT, dom, beta_w, dw, beta_b, db);
    if (dxT) bwd_input(p, nb, dom, w, add, beta, dxT);
}
