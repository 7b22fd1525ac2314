/* CPU twins of deform_nhwc.h: the plainest loops over the same sample arithmetic
 * (deform_chunk.h) the CUDA kernels run. The index is a counting sort (stable by
 * construction), so the CPU and GPU indexes are identical; the gather visits a pixel's samples
 * in the same order as the GPU, summing in double. Threaded where each output has one writer.
 *
 * bf16 plans: the loops run on fp32 copies of the bf16 inputs (widening is exact) and round
 * their results where the GPU rounds them - each column once, on its store; dx once, after
 * beta (dt_convert_cpu: the sum in fp32, one rounding). */
#include <stdlib.h>
#include <string.h>

#include "core/dt_alloc.h"
#include "ops/pointwise/convert.h"
#include "ops/deform/deform_chunk.h"
#include "core/dt_common.h"
#include "ops/deform/deform_nhwc.h"
#include "core/dt_parallel.h"
#include "ops/deform/offset_conv.h"

/* n elements of a plan's tensor as fp32: the data itself (f32) or a widened copy in *own
 * (bf16; the caller frees it). */
static const float *as_f32(dt_dtype t, const void *x, int64_t n, float **own) {
    *own = NULL;
    if (t == DT_F32) return x;
    *own = dt_dev_alloc(DT_CPU, (size_t)(n > 0 ? n : 1) * sizeof(float));
    dt_bf16_to_f32_cpu(n, x, *own);
    return *own;
}

typedef struct {
    const dt_deform_chunk *c;
    const dt_deform_index *idx;
    const float *xT, *om, *dcolT, *D;
    float *colT, *dxT, *dom, *Dout;
    int mask_logits;
} job;

static void sample_range(void *ctx, int64_t s0, int64_t s1) {
    const job *j = ctx;
    const dt_deform_chunk *c = j->c;
    for (int64_t s = s0; s < s1; s++) {
        int q, k, g, i;
        float m;
        dt_sample_decode(c, (uint32_t)s, &q, &k, &g);
        dt_bilin b = dt_sample_bilin(c, j->om, q, k, g, &i, &m);
        float *out = j->colT + (int64_t)q * c->KC + (int64_t)k * c->C + (int64_t)g * c->Cg;
        for (int ch = 0; ch < c->Cg; ch++) {
            float v[4];
            for (int t = 0; t < 4; t++)
                v[t] = b.ok[t] ? j->xT[((int64_t)i * c->H * c->W + dt_bilin_index(&b, t, c->W)) * c->C + g * c->Cg + ch]
                               : 0.0f;
            out[ch] = m * dt_bilin_value(&b, v);
        }
    }
}

void dt_deform_sample_nhwc_cpu(const dt_deform_plan *p, int64_t nb, const void *xT, const float *om, void *colT) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    int64_t ncol = (int64_t)c.Q * c.KC;
    float *xown, *cown = p->dtype == DT_F32 ? NULL : dt_dev_alloc(DT_CPU, (size_t)(ncol > 0 ? ncol : 1) * sizeof(float));
    job j = {.c = &c, .xT = as_f32(p->dtype, xT, (int64_t)c.npix * c.C, &xown), .om = om, .colT = cown ? cown : colT};
    dt_parallel_for(c.S, 64, sample_range, &j);
    if (cown) dt_f32_to_bf16_cpu(ncol, cown, colT); /* each column rounded once */
    dt_dev_free(DT_CPU, xown);
    dt_dev_free(DT_CPU, cown);
}

size_t dt_deform_tile_ws_bytes_cpu(const dt_deform_plan *p, int64_t nb) { return dt_offconv_ws_bytes_cpu(p, nb); }

/* The tiled forward computes what the two kernels compute; on the CPU it is those two. */
void dt_deform_tile_forward_cpu(const dt_deform_plan *p, int64_t nb, const void *xT, const float *woff,
                                const float *boff, float *om, void *colT, void *ws) {
    if (woff) dt_offconv_fwd_cpu(p, nb, xT, woff, boff, om, ws);
    dt_deform_sample_nhwc_cpu(p, nb, xT, om, colT);
}

/* Index workspace: order [S], start [keys+1], wm [S*4], key [S], count [keys+1]. */
size_t dt_deform_index_ws_bytes_cpu(const dt_deform_plan *p, int64_t nb) {
    int64_t S = nb * p->P * p->K * p->G, keys = dt_deform_index_keys(p, nb);
    return (size_t)(S * 4 + (keys + 1) * 4 + S * 16 + S * 4 + (keys + 1) * 4) + 64;
}

void dt_deform_index_build_cpu(const dt_deform_plan *p, int64_t nb, const float *om, void *ws, dt_deform_index *idx) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    int64_t S = c.S, keys = dt_deform_index_keys(p, nb);
    char *w = ws;
    idx->samples = S;
    idx->keys = keys;
    idx->order = (uint32_t *)w;
    idx->start = idx->order + S;
    idx->wm = (float *)(idx->start + keys + 1);
    uint32_t *key = (uint32_t *)(idx->wm + 4 * S), *cnt = key + S;
    memset(cnt, 0, (size_t)(keys + 1) * 4);
    for (int64_t s = 0; s < S; s++) {
        int q, k, g, i;
        float m;
        dt_sample_decode(&c, (uint32_t)s, &q, &k, &g);
        dt_bilin b = dt_sample_bilin(&c, om, q, k, g, &i, &m);
        key[s] = dt_sample_key(&c, &b, i, g, (uint32_t)keys);
        for (int t = 0; t < 4; t++) idx->wm[4 * s + t] = b.ok[t] ? b.w[t] * m : 0.0f;
        cnt[key[s]]++;
    }
    /* exclusive prefix sum -> start; then place ids in increasing order (stable) */
    uint32_t run = 0;
    for (int64_t k = 0; k <= keys; k++) {
        idx->start[k] = run;
        run += cnt[k];
        cnt[k] = idx->start[k];
    }
    for (int64_t s = 0; s < S; s++) idx->order[cnt[key[s]]++] = (uint32_t)s;
}

/* One (pixel, group) per index; corners 0..3 in order, samples in index order. */
static void gather_range(void *ctx, int64_t r0, int64_t r1) {
    const job *j = ctx;
    const dt_deform_chunk *c = j->c;
    double *acc = dt_dev_alloc(DT_CPU, sizeof(double) * (size_t)c->Cg);
    for (int64_t r = r0; r < r1; r++) {
        int g = (int)(r % c->G);
        int64_t pix = r / c->G, ix = pix % c->W, iy = (pix / c->W) % c->H, i = pix / ((int64_t)c->W * c->H);
        const float *xr = j->xT + pix * c->C + (int64_t)g * c->Cg;
        int64_t base = ((i * c->G + g) * (c->H + 1) + iy + 1) * (c->W + 1) + ix + 1;
        int64_t kc[4] = {base, base - 1, base - (c->W + 1), base - (c->W + 1) - 1};
        for (int ch = 0; ch < c->Cg; ch++) acc[ch] = 0;
        for (int t = 0; t < 4; t++)
            for (uint32_t e = j->idx->start[kc[t]]; e < j->idx->start[kc[t] + 1]; e++) {
                uint32_t s = j->idx->order[e];
                int q, k, gg;
                dt_sample_decode(c, s, &q, &k, &gg);
                float w = j->idx->wm[4 * (int64_t)s + t];
                const float *row = j->dcolT + (int64_t)q * c->KC + (int64_t)k * c->C + (int64_t)g * c->Cg;
                double d = 0;
                for (int ch = 0; ch < c->Cg; ch++) {
                    acc[ch] += (double)w * row[ch];
                    d += (double)row[ch] * xr[ch];
                }
                j->Dout[4 * (int64_t)s + t] = (float)d;
            }
        float *out = j->dxT + pix * c->C + (int64_t)g * c->Cg;
        for (int ch = 0; ch < c->Cg; ch++) out[ch] = (float)acc[ch];
    }
    dt_dev_free(DT_CPU, acc);
}

void dt_deform_gather_dx_cpu(const dt_deform_plan *p, int64_t nb, const dt_deform_index *idx, const void *xT,
                             const void *dcolT, float beta, void *dx, dt_dtype dx_dtype, float *D) {
    if (dx_dtype != p->dtype && dx_dtype != DT_F32)
        dt_fatal("deform gather: dx in %s for a %s plan (its dtype, or f32)", dt_dtype_name(dx_dtype), dt_dtype_name(p->dtype));
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    int64_t nx = (int64_t)c.npix * c.C;
    float *xown, *down;
    /* the adjoint in fp32 [nb, H, W, C], then dx = beta*dx + it, rounded once to dx_dtype */
    float *t = dt_dev_alloc(DT_CPU, (size_t)(nx > 0 ? nx : 1) * sizeof(float));
    job j = {.c = &c, .idx = idx, .xT = as_f32(p->dtype, xT, nx, &xown),
             .dcolT = as_f32(p->dtype, dcolT, (int64_t)c.Q * c.KC, &down), .dxT = t, .Dout = D};
    dt_parallel_for((int64_t)c.npix * c.G, 16, gather_range, &j);
    if (dx) dt_convert_cpu(1, 1, nx, t, DT_F32, DT_NCHW, beta, dx, dx_dtype, DT_NCHW);
    dt_dev_free(DT_CPU, t);
    dt_dev_free(DT_CPU, xown);
    dt_dev_free(DT_CPU, down);
}

static void grads_range(void *ctx, int64_t s0, int64_t s1) {
    const job *j = ctx;
    const dt_deform_chunk *c = j->c;
    for (int64_t s = s0; s < s1; s++) {
        int q, k, g, i;
        float m, D[4], gy, gx, gm;
        dt_sample_decode(c, (uint32_t)s, &q, &k, &g);
        dt_bilin b = dt_sample_bilin(c, j->om, q, k, g, &i, &m);
        for (int t = 0; t < 4; t++) D[t] = b.ok[t] ? j->D[4 * s + t] : 0.0f;
        dt_sample_grads(&b, m, D, &gy, &gx, &gm);
        dt_sample_store_grads(c, j->dom, q, k, g, m, gy, gx, gm, j->mask_logits);
    }
}

void dt_deform_offset_grads_cpu(const dt_deform_plan *p, int64_t nb, const float *om, const float *D, int mask_logits,
                                float *dom) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    job j = {.c = &c, .om = om, .D = D, .dom = dom, .mask_logits = mask_logits};
    dt_parallel_for(c.S, 64, grads_range, &j);
}

/* Serial: every sample adds into up to four pixels. */
void dt_deform_scatter_dx_cpu(const dt_deform_plan *p, int64_t nb, const void *xTv, const float *om, const void *dcolTv,
                              int mask_logits, float *dxT, float *dom) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    float *xown, *down;
    const float *xT = as_f32(p->dtype, xTv, (int64_t)c.npix * c.C, &xown);
    const float *dcolT = as_f32(p->dtype, dcolTv, (int64_t)c.Q * c.KC, &down);
    for (int64_t s = 0; s < c.S; s++) {
        int q, k, g, i;
        float m, D[4] = {0, 0, 0, 0}, gy, gx, gm;
        dt_sample_decode(&c, (uint32_t)s, &q, &k, &g);
        dt_bilin b = dt_sample_bilin(&c, om, q, k, g, &i, &m);
        const float *row = dcolT + (int64_t)q * c.KC + (int64_t)k * c.C + (int64_t)g * c.Cg;
        for (int t = 0; t < 4; t++) {
            if (!b.ok[t]) continue;
            int64_t at = ((int64_t)i * c.H * c.W + dt_bilin_index(&b, t, c.W)) * c.C + (int64_t)g * c.Cg;
            double d = 0;
            for (int ch = 0; ch < c.Cg; ch++) {
                d += (double)row[ch] * xT[at + ch];
                if (dxT) dxT[at + ch] += b.w[t] * m * row[ch];
            }
            D[t] = (float)d;
        }
        dt_sample_grads(&b, m, D, &gy, &gx, &gm);
        dt_sample_store_grads(&c, dom, q, k, g, m, gy, gx, gm, mask_logits);
    }
    dt_dev_free(DT_CPU, xown);
    dt_dev_free(DT_CPU, down);
}
