/* CPU twins of depthwise.h (the plain loops, threaded over (image, channel) planes for fwd
 * and dgrad and over output channels for wgrad, so no result depends on the thread count), and
 * the CUDA kernels' tile choice (a pure function of the problem, here so that the plan can ask
 * it in a CUDA=0 build too). fwd and dgrad sum with fmaf in the CUDA kernels' order, a zero
 * product for a padded or unaligned tap, which makes the two bit for bit equal; wgrad sums in
 * double. */
#include <math.h>
#include <string.h>

#include "core/dt_common.h"
#include "core/dt_dtype.h"
#include "core/dt_parallel.h"
#include "ops/conv/depthwise.h"

int dt_dw_problem(const dt_conv_problem *p) {
    return p->C >= 1 && p->groups == p->C && p->Cout >= p->C && p->Cout % p->C == 0;
}

static int gcd(int a, int b) {
    while (b) {
        int t = a % b;
        a = b, b = t;
    }
    return a;
}

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The footprint and shared memory of tile t for the pass; returns the bytes. */
static size_t tile_bytes(const dt_conv_problem *p, dt_conv_pass pass, dt_dw_tile *t) {
    const dt_conv_geom g = p->g;
    const int64_t M = p->Cout / p->C, taps = (int64_t)g.kh * g.kw;
    if (pass == DT_CONV_DGRAD) {
        t->IH = t->TH + g.kh - 1, t->IW = t->TW + g.kw - 1;
        return sizeof(float) * (size_t)((int64_t)t->IH * t->RH * t->IW * t->RW * t->CB * M + taps * M * t->CB);
    }
    t->IH = (t->TH - 1) * t->mh + g.kh, t->IW = (t->TW - 1) * t->mw + g.kw;
    size_t b = sizeof(float) * (size_t)((int64_t)t->IH * t->RH * t->IW * t->RW * t->CB + taps * M * t->CB);
    if (pass == DT_CONV_WGRAD) b += sizeof(float) * (size_t)((int64_t)t->TH * t->RH * t->TW * t->RW * t->CB * M);
    return b;
}

int dt_dw_tile_of(const dt_conv_problem *p, dt_conv_pass pass, size_t smem_limit, dt_dw_tile *t) {
    const dt_conv_geom g = p->g;
    memset(t, 0, sizeof *t);
    if (pass == DT_CONV_DGRAD) { /* dx positions d apart: their dy are d apart on the virtual stride-1 grid */
        t->qh = g.dh, t->qw = g.dw, t->mh = t->mw = 1;
    } else { /* outputs q apart read inputs d apart: q s = m d */
        const int gh = gcd(g.dh, g.sh), gw = gcd(g.dw, g.sw);
        t->qh = g.dh / gh, t->mh = g.sh / gh, t->qw = g.dw / gw, t->mw = g.sw / gw;
    }
    const int64_t rows = pass == DT_CONV_DGRAD ? p->H : p->Ho, cols = pass == DT_CONV_DGRAD ? p->W : p->Wo;
    const int64_t crow = cdiv(rows, t->qh), ccol = cdiv(cols, t->qw); /* positions of class 0 */
    /* a row of 256 positions for 1-D problems, 8 x 16 for 2-D ones: within a class first (no
     * class holds more), then over consecutive classes */
    const int one_d = rows == 1, want_w = one_d ? 256 : 16, want_h = one_d ? 1 : 8;
    t->TW = (int)(ccol < want_w ? ccol : want_w);
    t->TH = (int)(crow < want_h ? crow : want_h);
    t->RW = (int)(cdiv(want_w, t->TW) < t->qw ? cdiv(want_w, t->TW) : t->qw);
    t->RH = (int)(cdiv(want_h, t->TH) < t->qh ? cdiv(want_h, t->TH) : t->qh);
    t->CB = p->C >= 32 ? 32 : (int)cdiv(p->C, 8) * 8;
    for (;;) {
        t->smem = tile_bytes(p, pass, t);
        if (t->smem <= smem_limit) break;
        if (t->RW > 1 && t->RW >= t->RH) t->RW /= 2;
        else if (t->RH > 1) t->RH /= 2;
        else if (t->TW > 1 && t->TW >= t->TH) t->TW /= 2;
        else if (t->TH > 1) t->TH /= 2;
        else if (t->CB > 8) t->CB /= 2;
        else return 0;
    }
    t->nth = cdiv(crow, t->TH), t->ntw = cdiv(ccol, t->TW);
    t->ngh = cdiv(t->qh, t->RH), t->ngw = cdiv(t->qw, t->RW);
    return 1;
}

int dt_dw_gpu_supported(const dt_conv_problem *p) {
    dt_dw_tile t;
    const int64_t lim = (int64_t)1 << 31;
    if (!dt_dw_problem(p) || p->N * p->C * p->H * p->W >= lim || p->N * p->Cout * p->Ho * p->Wo >= lim) return 0;
    for (int pass = 0; pass < DT_CONV_PASSES; pass++)
        if (!dt_dw_tile_of(p, (dt_conv_pass)pass, DT_DW_SMEM_LIMIT, &t)) return 0;
    return 1;
}

/* DT_DW_KERNEL_*: -1 until the first ask reads the environment */
static volatile int g_dw_kernel = -1;
int dt_dw_kernel(void) {
    if (g_dw_kernel < 0) {
        const long k = dt_env_long("DT_DW_KERNEL", DT_DW_KERNEL_AUTO);
        if (k != DT_DW_KERNEL_TILE && k != DT_DW_KERNEL_RB && k != DT_DW_KERNEL_AUTO)
            dt_fatal("DT_DW_KERNEL=%ld: 0 (the tile kernels), 1 (the register-blocked ones) or 2 (auto: "
                     "register-blocked for bf16, tiles for f32)", k);
        g_dw_kernel = (int)k;
    }
    return g_dw_kernel;
}
void dt_dw_set_kernel(int kernel) {
    if (kernel != DT_DW_KERNEL_TILE && kernel != DT_DW_KERNEL_RB && kernel != DT_DW_KERNEL_AUTO)
        dt_fatal("dt_dw_set_kernel(%d): DT_DW_KERNEL_TILE, DT_DW_KERNEL_RB or DT_DW_KERNEL_AUTO", kernel);
    g_dw_kernel = kernel;
}

/* ---- the twins */

typedef struct {
    const dt_conv_problem *p;
    int nhwc, bf16;
    const void *a, *b; /* fwd: x, w; dgrad: dy, w; wgrad: x, dy */
    const float *bias;
    float beta;
    void *out;
} dw_job;

/* element (n, c, y, x) of a [N, C, H, W] tensor in the job's layout */
static int64_t at(int nhwc, int64_t n, int64_t c, int64_t y, int64_t x, int64_t C, int64_t H, int64_t W) {
    return nhwc ? ((n * H + y) * W + x) * C + c : ((n * C + c) * H + y) * W + x;
}
static float ld(const dw_job *j, const void *base, int64_t i) {
    return j->bf16 ? dt_bf16_to_float(((const dt_bf16 *)base)[i]) : ((const float *)base)[i];
}
static void st(const dw_job *j, void *base, int64_t i, float v) {
    if (j->bf16) ((dt_bf16 *)base)[i] = dt_bf16_from_float(v);
    else ((float *)base)[i] = v;
}

/* planes [q0, q1) of (n, co): y[n, co] */
static void fwd_range(void *ctx, int64_t q0, int64_t q1) {
    const dw_job *j = ctx;
    const dt_conv_problem *p = j->p;
    const dt_conv_geom g = p->g;
    const int64_t M = p->Cout / p->C;
    for (int64_t q = q0; q < q1; q++) {
        const int64_t n = q / p->Cout, co = q % p->Cout, c = co / M;
        for (int64_t oy = 0; oy < p->Ho; oy++)
            for (int64_t ox = 0; ox < p->Wo; ox++) {
                float acc = 0.0f;
                for (int ky = 0; ky < g.kh; ky++)
                    for (int kx = 0; kx < g.kw; kx++) {
                        const int64_t iy = oy * g.sh - g.ph + (int64_t)ky * g.dh, ix = ox * g.sw - g.pw + (int64_t)kx * g.dw;
                        const float xv = iy >= 0 && iy < p->H && ix >= 0 && ix < p->W
                                             ? ld(j, j->a, at(j->nhwc, n, c, iy, ix, p->C, p->H, p->W))
                                             : 0.0f;
                        acc = fmaf(xv, ld(j, j->b, (co * g.kh + ky) * g.kw + kx), acc);
                    }
                if (j->bias) acc = acc + j->bias[co];
                st(j, j->out, at(j->nhwc, n, co, oy, ox, p->Cout, p->Ho, p->Wo), acc);
            }
    }
}

/* planes [q0, q1) of (n, c): dx[n, c], summing over m, ky, kx the dy that read each element */
static void dgrad_range(void *ctx, int64_t q0, int64_t q1) {
    const dw_job *j = ctx;
    const dt_conv_problem *p = j->p;
    const dt_conv_geom g = p->g;
    const int64_t M = p->Cout / p->C;
    for (int64_t q = q0; q < q1; q++) {
        const int64_t n = q / p->C, c = q % p->C;
        for (int64_t iy = 0; iy < p->H; iy++)
            for (int64_t ix = 0; ix < p->W; ix++) {
                float acc = 0.0f;
                for (int64_t m = 0; m < M; m++)
                    for (int ky = 0; ky < g.kh; ky++)
                        for (int kx = 0; kx < g.kw; kx++) {
                            const int64_t uy = iy + g.ph - (int64_t)ky * g.dh, ux = ix + g.pw - (int64_t)kx * g.dw;
                            const int64_t oy = uy / g.sh, ox = ux / g.sw;
                            const int ok = uy >= 0 && ux >= 0 && uy % g.sh == 0 && ux % g.sw == 0 && oy < p->Ho && ox < p->Wo;
                            const int64_t co = c * M + m;
                            const float dv = ok ? ld(j, j->a, at(j->nhwc, n, co, oy, ox, p->Cout, p->Ho, p->Wo)) : 0.0f;
                            acc = fmaf(dv, ld(j, j->b, (co * g.kh + ky) * g.kw + kx), acc);
                        }
                const int64_t i = at(j->nhwc, n, c, iy, ix, p->C, p->H, p->W);
                st(j, j->out, i, j->beta == 0.0f ? acc : fmaf(j->beta, ld(j, j->out, i), acc));
            }
    }
}

/* output channels [c0, c1): dw[co][ky][kx], each a double sum in (n, oy, ox) order */
static void wgrad_range(void *ctx, int64_t c0, int64_t c1) {
    const dw_job *j = ctx;
    const dt_conv_problem *p = j->p;
    const dt_conv_geom g = p->g;
    const int64_t M = p->Cout / p->C;
    float *dw = j->out;
    for (int64_t co = c0; co < c1; co++)
        for (int ky = 0; ky < g.kh; ky++)
            for (int kx = 0; kx < g.kw; kx++) {
                double s = 0.0;
                for (int64_t n = 0; n < p->N; n++)
                    for (int64_t oy = 0; oy < p->Ho; oy++) {
                        const int64_t iy = oy * g.sh - g.ph + (int64_t)ky * g.dh;
                        if (iy < 0 || iy >= p->H) continue;
                        for (int64_t ox = 0; ox < p->Wo; ox++) {
                            const int64_t ix = ox * g.sw - g.pw + (int64_t)kx * g.dw;
                            if (ix < 0 || ix >= p->W) continue;
                            s += (double)ld(j, j->a, at(j->nhwc, n, co / M, iy, ix, p->C, p->H, p->W)) *
                                 ld(j, j->b, at(j->nhwc, n, co, oy, ox, p->Cout, p->Ho, p->Wo));
                        }
                    }
                float *d = &dw[(co * g.kh + ky) * g.kw + kx];
                *d = j->beta == 0.0f ? (float)s : fmaf(j->beta, *d, (float)s);
            }
}

static void check(const dt_conv_problem *p) {
    if (!dt_dw_problem(p))
        dt_fatal("depthwise conv: %lld groups of %lld channels -> %lld is not depthwise (groups == channels, "
                 "outputs a multiple)", (long long)p->groups, (long long)p->C, (long long)p->Cout);
}

#define DW_TWINS(fmt, NHWC, BF16)                                                                                      \
    void dt_dw_fwd_##fmt##_cpu(const dt_conv_problem *p, const void *x, const void *w, const float *bias, void *y) {  \
        check(p);                                                                                                      \
        dw_job j = {p, NHWC, BF16, x, w, bias, 0.0f, y};                                                               \
        dt_parallel_for(p->N * p->Cout, 1, fwd_range, &j);                                                             \
    }                                                                                                                  \
    void dt_dw_dgrad_##fmt##_cpu(const dt_conv_problem *p, const void *dy, const void *w, float beta, void *dx) {     \
        check(p);                                                                                                      \
        dw_job j = {p, NHWC, BF16, dy, w, NULL, beta, dx};                                                             \
        dt_parallel_for(p->N * p->C, 1, dgrad_range, &j);                                                              \
    }                                                                                                                  \
    void dt_dw_wgrad_##fmt##_cpu(const dt_conv_problem *p, const void *x, const void *dy, float beta, float *dw) {    \
        check(p);                                                                                                      \
        dw_job j = {p, NHWC, BF16, x, dy, NULL, beta, dw};                                                             \
        dt_parallel_for(p->Cout, 1, wgrad_range, &j);                                                                  \
    }

DW_TWINS(f32_nchw, 0, 0)
DW_TWINS(f32_nhwc, 1, 0)
DW_TWINS(bf16_nhwc, 1, 1)
