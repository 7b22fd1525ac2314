/* deform_chunk.h: a chunk of a deformable plan as the channels-last kernels see it - 32-bit
 * sizes (the plan keeps every per-chunk index below 2^31) and fast divisors - plus the
 * per-sample arithmetic every kernel shares: decoding a sample id, reading its offsets and
 * mask from om, and its bilinear corners. Host + device, so the CPU twins run this very code.
 * Memory offsets are computed in 64 bits (a column buffer may exceed 2^31 floats). */
#ifndef DT_DEFORM_CHUNK_H
#define DT_DEFORM_CHUNK_H

#include <stdint.h>

#include "ops/deform/deform_bilinear.h"
#include "ops/deform/deform_plan.h"
#include "core/dt_fastdiv.h"

typedef struct {
    int nb, C, H, W, Ho, Wo, P, K, G, Cg, KC, OC, OCS, GK, has_mask;
    int kh, kw, sh, sw, ph, pw, dh, dw;
    int Q;       /* positions nb*P */
    int S;       /* samples Q*K*G */
    int npix;    /* pixels nb*H*W */
    dt_fastdiv fG, fK, fP, fWo, fkw, fW, fH;
} dt_deform_chunk;

DT_HD dt_deform_chunk dt_deform_chunk_make(const dt_deform_plan *p, int64_t nb) {
    dt_deform_chunk c;
    c.nb = (int)nb;
    c.C = (int)p->prob.C;
    c.H = (int)p->prob.H;
    c.W = (int)p->prob.W;
    c.Ho = (int)p->prob.Ho;
    c.Wo = (int)p->prob.Wo;
    c.P = (int)p->P;
    c.K = (int)p->K;
    c.G = p->G;
    c.Cg = (int)p->Cg;
    c.KC = (int)p->KC;
    c.OC = (int)p->OC;
    c.OCS = (int)p->OCS;
    c.GK = (int)p->GK;
    c.has_mask = p->has_mask;
    c.kh = p->prob.g.kh;
    c.kw = p->prob.g.kw;
    c.sh = p->prob.g.sh;
    c.sw = p->prob.g.sw;
    c.ph = p->prob.g.ph;
    c.pw = p->prob.g.pw;
    c.dh = p->prob.g.dh;
    c.dw = p->prob.g.dw;
    c.Q = (int)(nb * p->P);
    c.S = (int)(nb * p->P * p->K * p->G);
    c.npix = (int)(nb * p->prob.H * p->prob.W);
    c.fG = dt_fastdiv_make((uint32_t)c.G);
    c.fK = dt_fastdiv_make((uint32_t)c.K);
    c.fP = dt_fastdiv_make((uint32_t)c.P);
    c.fWo = dt_fastdiv_make((uint32_t)c.Wo);
    c.fkw = dt_fastdiv_make((uint32_t)c.kw);
    c.fW = dt_fastdiv_make((uint32_t)c.W);
    c.fH = dt_fastdiv_make((uint32_t)c.H);
    return c;
}

/* Sample id s = (q*K + k)*G + g -> position q, tap k, group g. */
DT_HD void dt_sample_decode(const dt_deform_chunk *c, uint32_t s, int *q, int *k, int *g) {
    uint32_t qk, qq;
    *g = (int)dt_fastdiv_divmod(s, c->fG, &qk);
    *k = (int)dt_fastdiv_divmod(qk, c->fK, &qq);
    *q = (int)qq;
}

/* Position q -> image i and output (oy, ox). */
DT_HD void dt_position_decode(const dt_deform_chunk *c, int q, int *i, int *oy, int *ox) {
    uint32_t ii, yy;
    uint32_t p = dt_fastdiv_divmod((uint32_t)q, c->fP, &ii);
    *ox = (int)dt_fastdiv_divmod(p, c->fWo, &yy);
    *oy = (int)yy;
    *i = (int)ii;
}

/* The bilinear sample of (q, k, g) at its offsets in om [Q, OCS]; *m = its mask (1 without).
 * *i receives the image. */
DT_HD dt_bilin dt_sample_bilin(const dt_deform_chunk *c, const float *om, int q, int k, int g, int *i, float *m) {
    int oy, ox;
    dt_position_decode(c, q, i, &oy, &ox);
    uint32_t kyu;
    int kx = (int)dt_fastdiv_divmod((uint32_t)k, c->fkw, &kyu), ky = (int)kyu;
    const float *row = om + (int64_t)q * c->OCS;
    int j = g * c->K + k;
    float dy = row[2 * j], dx = row[2 * j + 1];
    *m = c->has_mask ? row[2 * c->GK + j] : 1.0f;
    float y = (float)(oy * c->sh - c->ph + ky * c->dh) + dy;
    float x = (float)(ox * c->sw - c->pw + kx * c->dw) + dx;
    return dt_bilin_make(y, x, c->H, c->W);
}

/* The index key of a sample (top-left pixel, see deform_nhwc.h), or `none` when it reads no
 * pixel of the image. */
DT_HD uint32_t dt_sample_key(const dt_deform_chunk *c, const dt_bilin *b, int i, int g, uint32_t none) {
    if (!b->inside || !(b->ok[0] | b->ok[1] | b->ok[2] | b->ok[3])) return none;
    return (uint32_t)(((i * c->G + g) * (c->H + 1) + b->yl + 1) * (c->W + 1) + b->xl + 1);
}

/* Offset and mask gradients of one sample from its four corner dot products D[c] (0 for
 * corners outside the image): d/dy, d/dx of m * sum_c w_c v_c and d/dm. */
DT_HD void dt_sample_grads(const dt_bilin *b, float m, const float D[4], float *gy, float *gx, float *gm) {
    if (!b->inside) {
        *gy = *gx = *gm = 0.0f;
        return;
    }
    float hy = 1.0f - b->ly, hx = 1.0f - b->lx;
    *gy = m * (hx * (D[2] - D[0]) + b->lx * (D[3] - D[1]));
    *gx = m * (hy * (D[1] - D[0]) + b->ly * (D[3] - D[2]));
    *gm = b->w[0] * D[0] + b->w[1] * D[1] + b->w[2] * D[2] + b->w[3] * D[3];
}

/* Writes a sample's gradients into dom [Q, OCS] (mask as logits: times m(1-m)). The sample
 * with k = g = 0 also zeroes the row's padding columns. */
DT_HD void dt_sample_store_grads(const dt_deform_chunk *c, float *dom, int q, int k, int g, float m, float gy, float gx,
                                 float gm, int mask_logits) {
    float *row = dom + (int64_t)q * c->OCS;
    int j = g * c->K + k;
    row[2 * j] = gy;
    row[2 * j + 1] = gx;
    if (c->has_mask) row[2 * c->GK + j] = mask_logits ? gm * m * (1.0f - m) : gm;
    if (k == 0 && g == 0)
        for (int o = c->OC; o < c->OCS; o++) row[o] = 0.0f;
}

#endif
