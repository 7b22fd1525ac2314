/* The CPU twins of the implicit-GEMM convolution (conv_igemm.h): direct loops over the same
 * index spaces the CUDA GEMMs run - fprop over (output position, output channel), dgrad over
 * (input position, input channel), wgrad over (output channel, tap, channel) - each element
 * summed in fp32 in (tap, channel) or position order and rounded once. They differ from the
 * CUDA kernels only in the order of the fp32 sums. The tile does not change the function. */
#include "ops/conv/conv_igemm.h"

#include "core/dt_dtype.h"
#include "core/dt_parallel.h"

typedef struct {
    const dt_conv_problem *p;
    const dt_bf16 *a, *b; /* fprop: x, w; dgrad: dy, w; wgrad: x, dy */
    const float *bias;
    float beta;
    void *out;
} twin_job;

static float bf(const dt_bf16 *v, int64_t i) { return dt_bf16_to_float(v[i]); }

/* y [N*Ho*Wo, Cout]: one output position (n, ho, wo) a task */
static void fprop_range(void *ctx, int64_t m0, int64_t m1) {
    const twin_job *j = ctx;
    const dt_conv_problem *p = j->p;
    const dt_conv_geom g = p->g;
    const int64_t K = (int64_t)g.kh * g.kw * p->C;
    dt_bf16 *y = j->out;
    for (int64_t m = m0; m < m1; m++) {
        const int64_t n = m / (p->Ho * p->Wo), ho = m / p->Wo % p->Ho, wo = m % p->Wo;
        for (int64_t co = 0; co < p->Cout; co++) {
            float s = 0.0f;
            for (int r = 0; r < g.kh; r++) {
                const int64_t hi = ho * g.sh - g.ph + r * g.dh;
                if (hi < 0 || hi >= p->H) continue;
                for (int t = 0; t < g.kw; t++) {
                    const int64_t wi = wo * g.sw - g.pw + t * g.dw;
                    if (wi < 0 || wi >= p->W) continue;
                    const dt_bf16 *xa = j->a + ((n * p->H + hi) * p->W + wi) * p->C;
                    const dt_bf16 *wb = j->b + co * K + (r * g.kw + t) * p->C;
                    for (int64_t c = 0; c < p->C; c++) s += bf(xa, c) * bf(wb, c);
                }
            }
            if (j->bias) s += j->bias[co];
            y[m * p->Cout + co] = dt_bf16_from_float(s);
        }
    }
}

void dt_conv_igemm_fprop_bf16_cpu(const dt_conv_problem *p, dt_igemm_tile tile, const void *x, const void *w, const float *bias, void *y) {
    (void)tile;
    twin_job j = {p, x, w, bias, 0.0f, y};
    dt_parallel_for(p->N * p->Ho * p->Wo, 16, fprop_range, &j);
}

/* dx [N*H*W, C]: one input position (n, h, w) a task; the taps (r, t) whose output position
 * (ho, wo) = ((h + ph - r*dh) / sh, (w + pw - t*dw) / sw) divides exactly and lies inside */
static void dgrad_range(void *ctx, int64_t m0, int64_t m1) {
    const twin_job *j = ctx;
    const dt_conv_problem *p = j->p;
    const dt_conv_geom g = p->g;
    const int64_t K = (int64_t)g.kh * g.kw * p->C;
    dt_bf16 *dx = j->out;
    for (int64_t m = m0; m < m1; m++) {
        const int64_t n = m / (p->H * p->W), h = m / p->W % p->H, w = m % p->W;
        for (int64_t c = 0; c < p->C; c++) {
            float s = 0.0f;
            for (int r = 0; r < g.kh; r++) {
                const int64_t hh = h + g.ph - (int64_t)r * g.dh;
                if (hh < 0 || hh % g.sh || hh / g.sh >= p->Ho) continue;
                for (int t = 0; t < g.kw; t++) {
                    const int64_t ww = w + g.pw - (int64_t)t * g.dw;
                    if (ww < 0 || ww % g.sw || ww / g.sw >= p->Wo) continue;
                    const dt_bf16 *dya = j->a + ((n * p->Ho + hh / g.sh) * p->Wo + ww / g.sw) * p->Cout;
                    const dt_bf16 *wb = j->b + (r * g.kw + t) * p->C + c;
                    for (int64_t co = 0; co < p->Cout; co++) s += bf(dya, co) * bf(wb, co * K);
                }
            }
            const int64_t i = m * p->C + c;
            dx[i] = dt_bf16_from_float(j->beta != 0.0f ? j->beta * dt_bf16_to_float(dx[i]) + s : s);
        }
    }
}

void dt_conv_igemm_dgrad_bf16_cpu(const dt_conv_problem *p, dt_igemm_tile tile, const void *dy, const void *w, float beta, void *dx) {
    (void)tile;
    twin_job j = {p, dy, w, NULL, beta, dx};
    dt_parallel_for(p->N * p->H * p->W, 16, dgrad_range, &j);
}

/* dw [Cout, kh*kw*C] fp32: one output channel a task, summed over (n, ho, wo) in order */
static void wgrad_range(void *ctx, int64_t c0, int64_t c1) {
    const twin_job *j = ctx;
    const dt_conv_problem *p = j->p;
    const dt_conv_geom g = p->g;
    const int64_t K = (int64_t)g.kh * g.kw * p->C;
    float *dw = j->out;
    for (int64_t co = c0; co < c1; co++)
        for (int r = 0; r < g.kh; r++)
            for (int t = 0; t < g.kw; t++)
                for (int64_t c = 0; c < p->C; c++) {
                    float s = 0.0f;
                    for (int64_t n = 0; n < p->N; n++)
                        for (int64_t ho = 0; ho < p->Ho; ho++) {
                            const int64_t hi = ho * g.sh - g.ph + (int64_t)r * g.dh;
                            if (hi < 0 || hi >= p->H) continue;
                            for (int64_t wo = 0; wo < p->Wo; wo++) {
                                const int64_t wi = wo * g.sw - g.pw + (int64_t)t * g.dw;
                                if (wi < 0 || wi >= p->W) continue;
                                s += bf(j->b, ((n * p->Ho + ho) * p->Wo + wo) * p->Cout + co) *
                                     bf(j->a, ((n * p->H + hi) * p->W + wi) * p->C + c);
                            }
                        }
                    const int64_t i = co * K + (r * g.kw + t) * p->C + c;
                    dw[i] = j->beta != 0.0f ? j->beta * dw[i] + s : s;
                }
}

void dt_conv_igemm_wgrad_bf16_cpu(const dt_conv_problem *p, dt_igemm_tile tile, const void *x, const void *dy, float beta, float *dw) {
    (void)tile;
    twin_job j = {p, x, dy, NULL, beta, dw};
    dt_parallel_for(p->Cout, 1, wgrad_range, &j);
}
