#include "tests/deform_api_testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/pointwise/convert.h"
#include "core/dt_alloc.h"
#include "core/dt_dtype.h"
#include "tests/dt_test.h"

enum { CPU = DT_DEFORM_API_CPU, F64 = DT_DEFORM_API_F64, DEFT = DT_DEFORM_API_DEFT, UNF = DT_DEFORM_API_UNFUSED,
       DET = DT_DEFORM_API_DETERMINISTIC };

/* n c h w cout, kernel stride pad dilation, G WG mask bias */
const dt_api_case dt_api_group_cases[] = {
    {"WG2 G1 mask bias", 2, 4, 7, 6, 6, {3, 3, 1, 1, 1, 1, 1, 1}, 1, 2, 1, 1},
    {"torchvision's: WG2 G3 3x2 s(2,1) p(1,0) d(2,1)", 3, 6, 5, 4, 2, {3, 2, 2, 1, 1, 0, 2, 1}, 3, 2, 1, 1},
    {"WG4 (one channel a group) G2, no mask", 2, 4, 6, 6, 8, {3, 3, 1, 1, 1, 1, 1, 1}, 2, 4, 0, 0},
    {"WG3 G1 s2, no bias", 1, 6, 9, 8, 3, {3, 3, 2, 2, 1, 1, 1, 1}, 1, 3, 1, 0},
    {"WG1 (no groups)", 2, 3, 6, 5, 4, {3, 3, 1, 1, 1, 1, 1, 1}, 1, 1, 1, 1},
};
const int dt_api_n_group_cases = sizeof dt_api_group_cases / sizeof *dt_api_group_cases;

const dt_api_case dt_api_f64_cases[] = {
    {"torchvision's: WG2 G3 3x2 s(2,1) p(1,0) d(2,1), mask", 2, 6, 5, 4, 2, {3, 2, 2, 1, 1, 0, 2, 1}, 3, 2, 1, 1},
    {"no mask, WG1 G2", 2, 4, 6, 5, 3, {3, 3, 1, 1, 1, 1, 1, 1}, 2, 1, 0, 1},
    {"WG2 G1 s2 d2 no bias", 1, 4, 8, 7, 4, {3, 3, 2, 2, 2, 2, 2, 2}, 1, 2, 1, 0},
};
const int dt_api_n_f64_cases = sizeof dt_api_f64_cases / sizeof *dt_api_f64_cases;

/* name, mode, device, x dtype / layout, weight's, offsets' and mask's, tolerance */
const dt_api_path dt_api_paths[] = {
    {"unfused f32 NCHW", UNF, CPU, DT_F32, DT_NCHW, DT_F32, DT_NCHW, DT_F32, DT_NCHW, 1e-5, 0},
    {"unfused det, NHWC weight, NHWC offsets", UNF | DET, CPU, DT_F32, DT_NCHW, DT_F32, DT_NHWC, DT_F32, DT_NHWC, 1e-5, 0},
    {"deft f32 NCHW x, NHWC weight", DEFT, CPU, DT_F32, DT_NCHW, DT_F32, DT_NHWC, DT_F32, DT_NCHW, 1e-5, 0},
    {"deft f32 NHWC", DEFT, CPU, DT_F32, DT_NHWC, DT_F32, DT_NHWC, DT_F32, DT_NHWC, 1e-5, 0},
    {"deft det, f32 NHWC x, NCHW weight", DEFT | DET, CPU, DT_F32, DT_NHWC, DT_F32, DT_NCHW, DT_F32, DT_NCHW, 1e-5, 0},
    /* bf16 operands and results, rounded (2^-9 a rounding) */
    {"deft bf16 NHWC, f32 NCHW master weight", DEFT, CPU, DT_BF16, DT_NHWC, DT_F32, DT_NCHW, DT_BF16, DT_NHWC, 2e-2, 0},
    {"deft bf16 NHWC, bf16 NHWC weight", DEFT, CPU, DT_BF16, DT_NHWC, DT_BF16, DT_NHWC, DT_F32, DT_NCHW, 2e-2, 0},
    {"deft f32 NHWC x, bf16 NCHW offsets and mask", DEFT, CPU, DT_F32, DT_NHWC, DT_F32, DT_NHWC, DT_BF16, DT_NCHW, 2e-2, 0},
    /* PyTorch's bf16 autocast + channels_last: the offset conv's output, bf16 NHWC, handed over as it is -
     * dense, and as the channel slices a DCNv2 layer takes of it */
    {"deft bf16 NHWC, bf16 NHWC offsets and mask", DEFT | DET, CPU, DT_BF16, DT_NHWC, DT_BF16, DT_NHWC, DT_BF16, DT_NHWC,
     2e-2, 0},
    {"deft bf16 NHWC, offsets and mask sliced from one bf16 NHWC tensor", DEFT, CPU, DT_BF16, DT_NHWC, DT_BF16, DT_NHWC,
     DT_BF16, DT_NHWC, 2e-2, 1},
    {"deft f32 NCHW, offsets and mask sliced from one f32 NCHW tensor", DEFT | DET, CPU, DT_F32, DT_NCHW, DT_F32, DT_NCHW,
     DT_F32, DT_NCHW, 1e-5, 1},
};
const int dt_api_n_paths = sizeof dt_api_paths / sizeof *dt_api_paths;
const dt_api_path dt_api_f64_path = {"f64", DEFT, CPU, F64, DT_NCHW, F64, DT_NCHW, F64, DT_NCHW, 1e-12, 0};

static int64_t taps(const dt_api_case *c) { return (int64_t)c->g.kh * c->g.kw; }

/* A value every format holds exactly. */
static double bf16_value(double v) { return dt_bf16_round((float)v); }

static double *fresh(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(double)); }

void dt_api_problem_make(dt_api_problem *pr, const dt_api_case *c) {
    memset(pr, 0, sizeof *pr);
    pr->c = *c;
    pr->ho = (int)dt_conv_out_size(c->h, c->g.kh, c->g.sh, c->g.ph, c->g.dh);
    pr->wo = (int)dt_conv_out_size(c->w, c->g.kw, c->g.sw, c->g.pw, c->g.dw);
    int64_t K = taps(c), P = (int64_t)pr->ho * pr->wo, cw = c->c / c->WG;
    pr->len[DT_API_X] = (int64_t)c->n * c->c * c->h * c->w;
    pr->len[DT_API_OFF] = (int64_t)c->n * 2 * c->G * K * P;
    pr->len[DT_API_MASK] = c->mask ? (int64_t)c->n * c->G * K * P : 0;
    pr->len[DT_API_W] = (int64_t)c->cout * cw * K;
    pr->len[DT_API_B] = c->bias ? c->cout : 0;
    pr->ny = (int64_t)c->n * c->cout * P;
    dt_rng *r = dt_test_rng();
    for (int i = 0; i < DT_API_NIN; i++) {
        if (!(i == DT_API_MASK ? c->mask : i == DT_API_B ? c->bias : 1)) continue; /* absent: NULL */
        pr->in[i] = fresh(pr->len[i]);
        for (int64_t j = 0; j < pr->len[i]; j++) {
            double v;
            if (i == DT_API_OFF) { /* integer part + a fraction in [0.15, 0.85] */
                double o = 1.5 * dt_rng_normal(r), f = 0.15 + 0.7 * dt_rng_uniform(r);
                v = floor(o) + f;
            } else if (i == DT_API_MASK) {
                v = -0.5 + 1.5 * dt_rng_uniform(r);
            } else {
                v = dt_rng_normal(r) * (i == DT_API_W ? 1.0 / sqrt((double)(cw * K)) : 1.0);
            }
            pr->in[i][j] = bf16_value(v);
        }
    }
    pr->gy = fresh(pr->ny);
    for (int64_t j = 0; j < pr->ny; j++) pr->gy[j] = bf16_value(dt_rng_normal(r));
}

void dt_api_problem_free(dt_api_problem *pr) {
    for (int i = 0; i < DT_API_NIN; i++) free(pr->in[i]);
    free(pr->gy);
}

/* ---- the definition ---- */

static double sample(const double *plane, int64_t H, int64_t W, double y, double x) {
    if (y <= -1 || y >= H || x <= -1 || x >= W) return 0;
    int64_t y0 = (int64_t)floor(y), x0 = (int64_t)floor(x);
    double ly = y - (double)y0, lx = x - (double)x0, v = 0;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            int64_t yy = y0 + a, xx = x0 + b;
            if (yy >= 0 && yy < H && xx >= 0 && xx < W) v += (a ? ly : 1 - ly) * (b ? lx : 1 - lx) * plane[yy * W + xx];
        }
    return v;
}

/* Output channel o reads the input channels of its weight group; each channel its offset
 * group's offsets and mask. */
void dt_api_direct(const dt_api_problem *pr, void *ctx, double *y) {
    (void)ctx;
    const dt_api_case *c = &pr->c;
    const double *x = pr->in[DT_API_X], *off = pr->in[DT_API_OFF], *mask = pr->in[DT_API_MASK];
    const double *w = pr->in[DT_API_W], *b = pr->in[DT_API_B];
    int64_t K = taps(c), Ho = pr->ho, Wo = pr->wo, P = Ho * Wo, cw = c->c / c->WG, ow = c->cout / c->WG;
    int64_t cg = c->c / c->G;
    for (int64_t n = 0; n < c->n; n++)
        for (int64_t o = 0; o < c->cout; o++)
            for (int64_t p = 0; p < P; p++) {
                int64_t oy = p / Wo, ox = p % Wo;
                double s = 0;
                for (int64_t j = 0; j < cw; j++) {
                    int64_t ch = o / ow * cw + j, grp = ch / cg;
                    for (int64_t k = 0; k < K; k++) {
                        int64_t tap = (n * c->G + grp) * K + k;
                        double yy = (double)(oy * c->g.sh - c->g.ph + k / c->g.kw * c->g.dh) + off[2 * tap * P + p];
                        double xx = (double)(ox * c->g.sw - c->g.pw + k % c->g.kw * c->g.dw) + off[(2 * tap + 1) * P + p];
                        double m = mask ? mask[tap * P + p] : 1.0;
                        s += w[(o * cw + j) * K + k] * m * sample(x + (n * c->c + ch) * c->h * c->w, c->h, c->w, yy, xx);
                    }
                }
                y[(n * c->cout + o) * P + p] = s + (b ? b[o] : 0);
            }
}

static double loss(const dt_api_problem *pr, dt_api_fwd *fwd, void *ctx, double *y) {
    fwd(pr, ctx, y);
    double l = 0;
    for (int64_t i = 0; i < pr->ny; i++) l += pr->gy[i] * y[i];
    return l;
}

void dt_api_fd(dt_api_problem *pr, dt_api_fwd *fwd, void *ctx, double h, double *g[DT_API_NIN]) {
    double *y = fresh(pr->ny);
    for (int i = 0; i < DT_API_NIN; i++) {
        if (!g[i] || !pr->in[i]) continue;
        for (int64_t j = 0; j < pr->len[i]; j++) {
            double v = pr->in[i][j];
            pr->in[i][j] = v + h;
            double lp = loss(pr, fwd, ctx, y);
            pr->in[i][j] = v - h;
            double lm = loss(pr, fwd, ctx, y);
            pr->in[i][j] = v;
            g[i][j] = (lp - lm) / (2 * h);
        }
    }
    free(y);
}

double dt_api_rel(const double *got, const double *want, int64_t n) {
    double d = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(got[i]) || isnan(want[i])) return INFINITY;
        d += (got[i] - want[i]) * (got[i] - want[i]);
        s += want[i] * want[i];
    }
    return sqrt(d) / fmax(sqrt(s), 1e-30);
}

int dt_api_expect_close(const char *what, const dt_api_problem *pr, const dt_api_result *got,
                        const dt_api_result *want, double tol) {
    static const char *const names[DT_API_NIN] = {"dx", "doffset", "dmask", "dweight", "dbias"};
    int ok = 1;
    double e = dt_api_rel(got->y, want->y, pr->ny);
    EXPECT_MSG(e <= tol, "%s: y rel err %.3g > %.3g", what, e, tol);
    ok &= e <= tol;
    for (int i = 0; i < DT_API_NIN; i++) {
        if (!pr->in[i]) continue;
        e = dt_api_rel(got->g[i], want->g[i], pr->len[i]);
        EXPECT_MSG(e <= tol, "%s: %s rel err %.3g > %.3g", what, names[i], e, tol);
        ok &= e <= tol;
    }
    return ok;
}

/* ---- a run through the C API ---- */

/* A tensor as dt_convert sees it (N x C x P), its format and where it lives. */
typedef struct {
    int64_t N, C, P;
    int dtype, layout, device;
} spec;

static int64_t count(spec s) { return s.N * s.C * s.P; }
static size_t elem(spec s) { return s.dtype == DT_DEFORM_API_F64 ? sizeof(double) : dt_dtype_size((dt_dtype)s.dtype); }
static size_t bytes(spec s) { return (size_t)count(s) * elem(s); }

/* The values v (logical NCHW) as a buffer of spec s on its device; NULL for an empty tensor. */
static void *upload(const double *v, spec s) {
    if (!v || count(s) == 0) return NULL;
    void *h = malloc(bytes(s));
    if (s.dtype == DT_DEFORM_API_F64) {
        memcpy(h, v, bytes(s));
    } else {
        float *f = malloc((size_t)count(s) * sizeof(float));
        for (int64_t i = 0; i < count(s); i++) f[i] = (float)v[i];
        dt_convert_cpu(s.N, s.C, s.P, f, DT_F32, DT_NCHW, 0.0f, h, (dt_dtype)s.dtype, (dt_layout)s.layout);
        free(f);
    }
    if (s.device == DT_DEFORM_API_CPU) return h;
    void *d = dt_gpu_malloc(bytes(s));
    dt_copy_h2d(d, h, bytes(s));
    free(h);
    return d;
}

/* An output buffer of spec s, every byte 0xFF (NaN in every float format). */
static void *output(spec s) {
    if (count(s) == 0) return NULL;
    if (s.device == DT_DEFORM_API_CPU) return memset(malloc(bytes(s)), 0xFF, bytes(s));
    void *d = dt_gpu_malloc(bytes(s));
    dt_memset_gpu(d, 0xFF, bytes(s));
    return d;
}

/* A buffer of spec s back as logical NCHW doubles. */
static double *download(const void *buf, spec s) {
    double *v = fresh(count(s));
    if (!buf) return v;
    void *h = malloc(bytes(s));
    if (s.device == DT_DEFORM_API_CPU) memcpy(h, buf, bytes(s));
    else dt_copy_d2h(h, buf, bytes(s));
    if (s.dtype == DT_DEFORM_API_F64) {
        memcpy(v, h, bytes(s));
    } else {
        float *f = malloc((size_t)count(s) * sizeof(float));
        dt_convert_cpu(s.N, s.C, s.P, h, (dt_dtype)s.dtype, (dt_layout)s.layout, 0.0f, f, DT_F32, DT_NCHW);
        for (int64_t i = 0; i < count(s); i++) v[i] = f[i];
        free(f);
    }
    free(h);
    return v;
}

static void release(void *buf, int device) {
    if (device == DT_DEFORM_API_CPU) free(buf);
    else dt_gpu_free(buf);
}

int dt_api_run(const dt_api_problem *pr, const dt_api_path *path, dt_api_result *r) {
    const dt_api_case *c = &pr->c;
    int f64 = path->dtype == DT_DEFORM_API_F64, dev = path->device;
    int64_t K = taps(c), P = (int64_t)pr->ho * pr->wo;
    dt_deform_desc d = {.n = c->n, .c = c->c, .h = c->h, .w = c->w, .cout = c->cout, .kh = c->g.kh, .kw = c->g.kw,
                        .stride_h = c->g.sh, .stride_w = c->g.sw, .pad_h = c->g.ph, .pad_w = c->g.pw,
                        .dil_h = c->g.dh, .dil_w = c->g.dw, .offset_groups = c->G, .has_mask = c->mask,
                        .has_bias = c->bias, .size = (int)sizeof d, .dtype = path->dtype, .layout = path->layout,
                        .weight_dtype = path->wdtype, .weight_layout = path->wlayout, .offset_dtype = path->odtype,
                        .offset_layout = path->olayout, .mask_dtype = path->odtype, .mask_layout = path->olayout,
                        .weight_groups = c->WG, .device = dev};
    spec s[DT_API_NIN] = {{c->n, c->c, (int64_t)c->h * c->w, path->dtype, path->layout, dev},
                          {c->n, 2 * c->G * K, P, path->odtype, path->olayout, dev},
                          {c->n, c->G * K, P, path->odtype, path->olayout, dev},
                          {c->cout, c->c / c->WG, K, path->wdtype, path->wlayout, dev},
                          {1, 1, c->cout, f64 ? DT_DEFORM_API_F64 : DT_F32, DT_NCHW, dev}};
    spec sy = {c->n, c->cout, P, path->dtype, path->layout, dev};
    void *in[DT_API_NIN], *g[DT_API_NIN];
    for (int i = 0; i < DT_API_NIN; i++) {
        in[i] = pr->in[i] ? upload(pr->in[i], s[i]) : NULL;
        g[i] = pr->in[i] ? output(s[i]) : NULL;
    }
    void *y = output(sy), *gy = upload(pr->gy, sy);
    const void *off = in[DT_API_OFF], *mask = in[DT_API_MASK];
    void *whole = NULL; /* sliced: the one tensor the offsets and mask are channels of */
    if (path->sliced && c->n > 0) {
        const int64_t oc = 2 * c->G * K, mc = c->mask ? c->G * K : 0, Cw = oc + mc + 1;
        double *v = fresh(c->n * Cw * P);
        for (int64_t n = 0; n < c->n; n++) {
            memcpy(v + n * Cw * P, pr->in[DT_API_OFF] + n * oc * P, sizeof(double) * (size_t)(oc * P));
            if (mc) memcpy(v + (n * Cw + oc) * P, pr->in[DT_API_MASK] + n * mc * P, sizeof(double) * (size_t)(mc * P));
        }
        spec sw = {c->n, Cw, P, path->odtype, path->olayout, dev};
        whole = upload(v, sw);
        free(v);
        const size_t es = elem(sw);
        off = whole;
        mask = c->mask ? (const char *)whole + (size_t)(path->olayout == DT_NHWC ? oc : oc * P) * es : NULL;
        d.offset_pitch = d.mask_pitch = (int)(path->olayout == DT_NHWC ? Cw : Cw * P);
    }
    int rc = dt_deform_api_forward(&d, path->mode, in[0], off, mask, in[3], in[4], y, NULL);
    if (!rc) rc = dt_deform_api_backward(&d, path->mode, in[0], off, mask, in[3], gy, g[0], g[1], g[2], g[3], g[4], NULL);
    if (whole) release(whole, dev);
    EXPECT_MSG(rc == 0, "%s: %s", path->name, dt_deform_api_error());
    memset(r, 0, sizeof *r);
    r->y = download(y, sy);
    for (int i = 0; i < DT_API_NIN; i++)
        if (pr->in[i]) r->g[i] = download(g[i], s[i]);
    for (int i = 0; i < DT_API_NIN; i++) {
        release(in[i], dev);
        release(g[i], dev);
    }
    release(y, dev);
    release(gy, dev);
    return rc;
}

void dt_api_result_free(dt_api_result *r) {
    free(r->y);
    for (int i = 0; i < DT_API_NIN; i++) free(r->g[i]);
}
