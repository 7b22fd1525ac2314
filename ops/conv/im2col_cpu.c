/* CPU twins of im2col.h: the plain loops, threaded over channels. */
#include <stdlib.h>
#include <string.h>

#include "core/dt_common.h"
#include "core/dt_parallel.h"
#include "ops/conv/im2col.h"

typedef struct {
    const float *x;
    float *col;
    const float *ccol;
    float *xo;
    int64_t nb, C, H, W, Ho, Wo;
    dt_conv_geom g;
    float beta;
} im2col_job;

static void im2col_range(void *ctx, int64_t c0, int64_t c1) {
    const im2col_job *j = ctx;
    const dt_conv_geom g = j->g;
    int64_t P = j->Ho * j->Wo, NP = j->nb * P;
    for (int64_t c = c0; c < c1; c++)
        for (int ky = 0; ky < g.kh; ky++)
            for (int kx = 0; kx < g.kw; kx++) {
                float *row = j->col + ((c * g.kh + ky) * g.kw + kx) * NP;
                for (int64_t i = 0; i < j->nb; i++) {
                    const float *xp = j->x + (i * j->C + c) * j->H * j->W;
                    for (int64_t oy = 0; oy < j->Ho; oy++) {
                        int64_t iy = oy * g.sh - g.ph + ky * g.dh;
                        float *out = row + i * P + oy * j->Wo;
                        for (int64_t ox = 0; ox < j->Wo; ox++) {
                            int64_t ix = ox * g.sw - g.pw + kx * g.dw;
                            out[ox] = (iy >= 0 && iy < j->H && ix >= 0 && ix < j->W) ? xp[iy * j->W + ix] : 0.0f;
                        }
                    }
                }
            }
}

void dt_im2col_cpu(const float *x, int64_t nb, int64_t C, int64_t H, int64_t W, dt_conv_geom g,
                   int64_t Ho, int64_t Wo, float *col) {
    im2col_job j = {.x = x, .col = col, .nb = nb, .C = C, .H = H, .W = W, .Ho = Ho, .Wo = Wo, .g = g};
    dt_parallel_for(C, 1, im2col_range, &j);
}

/* Gather form: each input element adds the column entries that sampled it, in tap order. */
static void col2im_range(void *ctx, int64_t c0, int64_t c1) {
    const im2col_job *j = ctx;
    const dt_conv_geom g = j->g;
    int64_t P = j->Ho * j->Wo, NP = j->nb * P;
    for (int64_t c = c0; c < c1; c++)
        for (int64_t i = 0; i < j->nb; i++) {
            float *xp = j->xo + (i * j->C + c) * j->H * j->W;
            for (int64_t iy = 0; iy < j->H; iy++)
                for (int64_t ix = 0; ix < j->W; ix++) {
                    double s = 0.0;
                    for (int ky = 0; ky < g.kh; ky++) {
                        int64_t ty = iy + g.ph - ky * g.dh;
                        if (ty < 0 || ty % g.sh) continue;
                        int64_t oy = ty / g.sh;
                        if (oy >= j->Ho) continue;
                        for (int kx = 0; kx < g.kw; kx++) {
                            int64_t tx = ix + g.pw - kx * g.dw;
                            if (tx < 0 || tx % g.sw) continue;
                            int64_t ox = tx / g.sw;
                            if (ox >= j->Wo) continue;
                            s += j->ccol[((c * g.kh + ky) * g.kw + kx) * NP + i * P + oy * j->Wo + ox];
                        }
                    }
                    float v = (float)s;
                    xp[iy * j->W + ix] = j->beta == 0.0f ? v : xp[iy * j->W + ix] + v;
                }
        }
}

void dt_col2im_cpu(const float *col, int64_t nb, int64_t C, int64_t H, int64_t W, dt_conv_geom g,
                   int64_t Ho, int64_t Wo, float beta, float *x) {
    im2col_job j = {.ccol = col, .xo = x, .nb = nb, .C = C, .H = H, .W = W, .Ho = Ho, .Wo = Wo, .g = g, .beta = beta};
    dt_parallel_for(C, 1, col2im_range, &j);
}

/* ---- channels last: one job per row of columns / per input pixel, fp32 sums in tap order ---- */

typedef struct {
    const void *x, *ccol;
    void *col, *xo;
    dt_dtype dtype;
    int64_t nb, C, H, W, Ho, Wo;
    dt_conv_geom g;
    float beta;
} nhwc_job;


static void im2col_nhwc_rows(void *ctx, int64_t q0, int64_t q1) {
    const nhwc_job *j = ctx;
    const dt_conv_geom g = j->g;
    int64_t P = j->Ho * j->Wo, C = j->C, KC = (int64_t)g.kh * g.kw * C;
    for (int64_t q = q0; q < q1; q++) {
        int64_t i = q / P, p = q % P, oy = p / j->Wo, ox = p % j->Wo;
        for (int ky = 0; ky < g.kh; ky++)
            for (int kx = 0; kx < g.kw; kx++) {
                int64_t iy = oy * g.sh - g.ph + ky * g.dh, ix = ox * g.sw - g.pw + kx * g.dw;
                int in = iy >= 0 && iy < j->H && ix >= 0 && ix < j->W;
                int64_t src = ((i * j->H + iy) * j->W + ix) * C, dst = q * KC + (ky * g.kw + kx) * C;
                for (int64_t c = 0; c < C; c++) dt_elem_st(j->col, j->dtype, dst + c, in ? dt_elem_ld(j->x, j->dtype, src + c) : 0.0f);
            }
    }
}

static void col2im_nhwc_pixels(void *ctx, int64_t t0, int64_t t1) {
    const nhwc_job *j = ctx;
    const dt_conv_geom g = j->g;
    int64_t P = j->Ho * j->Wo, C = j->C, KC = (int64_t)g.kh * g.kw * C, HW = j->H * j->W;
    for (int64_t t = t0; t < t1; t++) {
        int64_t i = t / HW, iy = (t % HW) / j->W, ix = t % j->W;
        for (int64_t c = 0; c < C; c++) {
            float s = 0.0f;
            for (int ky = 0; ky < g.kh; ky++) {
                int64_t ty = iy + g.ph - ky * g.dh;
                if (ty < 0 || ty % g.sh || ty / g.sh >= j->Ho) continue;
                for (int kx = 0; kx < g.kw; kx++) {
                    int64_t tx = ix + g.pw - kx * g.dw;
                    if (tx < 0 || tx % g.sw || tx / g.sw >= j->Wo) continue;
                    int64_t q = i * P + (ty / g.sh) * j->Wo + tx / g.sw;
                    s += dt_elem_ld(j->ccol, j->dtype, q * KC + (ky * g.kw + kx) * C + c);
                }
            }
            dt_elem_st_beta(j->xo, j->dtype, t * C + c, s, j->beta);
        }
    }
}

#define NHWC_TWINS(sfx, dtype_)                                                                                   \
    void dt_im2col_nhwc_##sfx##_cpu(const void *x, int64_t nb, int64_t C, int64_t H, int64_t W, dt_conv_geom g,     \
                                    int64_t Ho, int64_t Wo, void *col) {                                            \
        nhwc_job j = {.x = x, .col = col, .dtype = dtype_, .nb = nb, .C = C, .H = H, .W = W, .Ho = Ho, .Wo = Wo, .g = g}; \
        dt_parallel_for(nb * Ho * Wo, 64, im2col_nhwc_rows, &j);                                                    \
    }                                                                                                               \
    void dt_col2im_nhwc_##sfx##_cpu(const void *col, int64_t nb, int64_t C, int64_t H, int64_t W, dt_conv_geom g,   \
                                    int64_t Ho, int64_t Wo, float beta, void *x) {                                  \
        nhwc_job j = {.ccol = col, .xo = x, .dtype = dtype_, .nb = nb, .C = C, .H = H, .W = W, .Ho = Ho, .Wo = Wo,   \
                      .g = g, .beta = beta};                                                                        \
        dt_parallel_for(nb * H * W, 64, col2im_nhwc_pixels, &j);                                                    \
    }
NHWC_TWINS(f32, DT_F32)
NHWC_TWINS(bf16, DT_BF16)
