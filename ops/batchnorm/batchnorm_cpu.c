/* CPU twins of batchnorm.h. Each reduction is two passes, the per-channel sums then their
 * use, so that a synchronized batch norm can sum them across replicas in between; the sums
 * live in ws (the first 2*C doubles).
 *
 * NCHW f32 (the reference): channel by channel, threaded over channels, each channel's sums in
 * double in plain (n, p) order.
 * NHWC f32 / bf16: the sums threaded over ranges of channels (a worker walks every row for its
 * channels, so each channel's sum is in row order whatever the thread count), the pointwise
 * passes threaded over rows. The arithmetic is the CUDA kernels' - fp32 between an exact widen
 * and one rounding per store, the same fmaf's - so a twin and its kernel differ only by the
 * order of the double sums. */
#include <math.h>
#include <stdlib.h>

#include "ops/batchnorm/batchnorm.h"
#include "core/dt_common.h"
#include "core/dt_dtype.h"
#include "core/dt_parallel.h"

typedef struct {
    int64_t N, C, P;
    dt_dtype dt;   /* the activations' dtype (nhwc) */
    const void *x, *y, *skip, *dy;
    const float *mean_c, *invstd_c, *w, *b;
    void *out, *dx, *dskip;
    float *mean, *invstd, *rm, *rv, *dw, *db;
    double *sums;  /* (C, 2) per-channel sums */
    float *coef;   /* nhwc: per-channel constants, COEF_N arrays of C */
    int64_t M;     /* elements per channel the statistics count (all replicas) */
    float eps, momentum, beta_x, beta_s, beta_w, beta_b;
    int training, relu;
} bn_job;

#define STORE(dst, v, beta) ((dst) = (beta) == 0.0f ? (v) : (dst) + (v))

/* ---- shared: statistics from the sums ---- */

static void stats_final_range(void *ctx, int64_t c0, int64_t c1) {
    const bn_job *j = ctx;
    for (int64_t c = c0; c < c1; c++) {
        if (!j->training) {
            j->mean[c] = j->rm[c];
            j->invstd[c] = (float)(1.0 / sqrt((double)j->rv[c] + j->eps));
            continue;
        }
        int64_t M = j->M;
        double mean = j->sums[2 * c] / M, var = j->sums[2 * c + 1] / M - mean * mean;
        if (var < 0) var = 0;
        j->mean[c] = (float)mean;
        j->invstd[c] = (float)(1.0 / sqrt(var + j->eps));
        if (j->rm) {
            double unbiased = M > 1 ? var * M / (M - 1) : var;
            j->rm[c] = (float)((1.0 - j->momentum) * j->rm[c] + j->momentum * mean);
            j->rv[c] = (float)((1.0 - j->momentum) * j->rv[c] + j->momentum * unbiased);
        }
    }
}

/* Sums (when training; threaded over channels, `grain` at least per worker) -> sync ->
 * statistics. */
static void stats(bn_job *j, dt_range_fn sums_range, int64_t grain, const dt_bn_sync *sync) {
    if (j->training) {
        dt_parallel_for(j->C, grain, sums_range, j);
        if (sync) {
            sync->allreduce(sync->ctx, j->sums, 2 * j->C);
            j->M *= sync->ranks;
        }
    }
    dt_parallel_for(j->C, 1, stats_final_range, j);
}

void dt_bn_stats_of_sums_cpu(int64_t C, int64_t M, const double *sums, int64_t groups, float eps, float momentum,
                             float *rm, float *rv, float *mean, float *invstd, const dt_bn_sync *sync) {
    double *s = dt_xcalloc((size_t)(2 * C), sizeof *s); /* [C][2]: the groups in group order */
    for (int64_t g = 0; g < groups; g++)
        for (int64_t i = 0; i < 2 * C; i++) s[i] += sums[g * 2 * C + i];
    bn_job j = {.C = C, .training = 1, .eps = eps, .momentum = momentum, .rm = rm, .rv = rv, .mean = mean,
                .invstd = invstd, .sums = s, .M = M};
    if (sync) {
        sync->allreduce(sync->ctx, s, 2 * C);
        j.M *= sync->ranks;
    }
    dt_parallel_for(C, 1, stats_final_range, &j);
    free(s);
}

/* ---- NCHW f32 ---- */

static void nchw_stats_sums_range(void *ctx, int64_t c0, int64_t c1) {
    const bn_job *j = ctx;
    const float *x = j->x;
    for (int64_t c = c0; c < c1; c++) {
        double s = 0, s2 = 0;
        for (int64_t n = 0; n < j->N; n++) {
            const float *xp = x + (n * j->C + c) * j->P;
            for (int64_t p = 0; p < j->P; p++) {
                s += xp[p];
                s2 += (double)xp[p] * xp[p];
            }
        }
        j->sums[2 * c] = s;
        j->sums[2 * c + 1] = s2;
    }
}

void dt_bn_stats_f32_nchw_cpu(int64_t N, int64_t C, int64_t P, const void *x, int training, float eps,
                              float momentum, float *running_mean, float *running_var, float *mean, float *invstd,
                              void *ws, const dt_bn_sync *sync) {
    bn_job j = {.N = N, .C = C, .P = P, .x = x, .training = training, .eps = eps, .momentum = momentum,
                .rm = running_mean, .rv = running_var, .mean = mean, .invstd = invstd, .sums = ws, .M = N * P};
    stats(&j, nchw_stats_sums_range, 1, sync);
}

static void nchw_apply_range(void *ctx, int64_t r0, int64_t r1) {
    const bn_job *j = ctx;
    for (int64_t r = r0; r < r1; r++) { /* r = n*C + c */
        int64_t c = r % j->C;
        float scale = j->invstd_c[c] * j->w[c], shift = j->b[c] - j->mean_c[c] * scale;
        const float *xp = (const float *)j->x + r * j->P, *sp = j->skip ? (const float *)j->skip + r * j->P : NULL;
        float *yp = (float *)j->out + r * j->P;
        for (int64_t p = 0; p < j->P; p++) {
            float v = xp[p] * scale + shift;
            if (sp) v += sp[p];
            yp[p] = j->relu && v < 0.0f ? 0.0f : v;
        }
    }
}

void dt_bn_apply_f32_nchw_cpu(int64_t N, int64_t C, int64_t P, const void *x, const float *mean,
                              const float *invstd, const float *w, const float *b, const void *skip, int relu,
                              void *y) {
    bn_job j = {.N = N, .C = C, .P = P, .x = x, .mean_c = mean, .invstd_c = invstd, .w = w, .b = b, .skip = skip,
                .relu = relu, .out = y};
    dt_parallel_for(N * C, 16, nchw_apply_range, &j);
}

/* g = dy masked by y > 0 when relu */
static float nchw_g(const bn_job *j, int64_t i) {
    return j->relu && !(((const float *)j->y)[i] > 0.0f) ? 0.0f : ((const float *)j->dy)[i];
}

static void nchw_backward_sums_range(void *ctx, int64_t c0, int64_t c1) {
    const bn_job *j = ctx;
    const float *x = j->x;
    for (int64_t c = c0; c < c1; c++) {
        double sg = 0, sgx = 0;
        float mu = j->mean_c[c], is = j->invstd_c[c];
        for (int64_t n = 0; n < j->N; n++) {
            int64_t o = (n * j->C + c) * j->P;
            for (int64_t p = 0; p < j->P; p++) {
                float g = nchw_g(j, o + p);
                sg += g;
                sgx += (double)g * ((x[o + p] - mu) * is);
            }
        }
        if (j->db) STORE(j->db[c], (float)sg, j->beta_b);
        if (j->dw) STORE(j->dw[c], (float)sgx, j->beta_w);
        j->sums[2 * c] = sg;
        j->sums[2 * c + 1] = sgx;
    }
}

static void nchw_backward_dx_range(void *ctx, int64_t c0, int64_t c1) {
    const bn_job *j = ctx;
    const float *x = j->x;
    float *dx = j->dx, *dskip = j->dskip;
    for (int64_t c = c0; c < c1; c++) {
        float mu = j->mean_c[c], is = j->invstd_c[c];
        float k = j->w[c] * is, mg = (float)(j->sums[2 * c] / j->M), mgx = (float)(j->sums[2 * c + 1] / j->M);
        for (int64_t n = 0; n < j->N; n++) {
            int64_t o = (n * j->C + c) * j->P;
            for (int64_t p = 0; p < j->P; p++) {
                float g = nchw_g(j, o + p);
                if (dskip) STORE(dskip[o + p], g, j->beta_s);
                if (!dx) continue;
                float v = j->training ? k * (g - mg - (x[o + p] - mu) * is * mgx) : k * g;
                STORE(dx[o + p], v, j->beta_x);
            }
        }
    }
}

void dt_bn_backward_f32_nchw_cpu(int64_t N, int64_t C, int64_t P, const void *x, const void *y, const void *skip,
                                 const void *dy, const float *mean, const float *invstd, const float *w,
                                 const float *b, int relu, int training, void *dx, float beta_x, void *dskip,
                                 float beta_s, float *dw, float beta_w, float *db, float beta_b, void *ws,
                                 const dt_bn_sync *sync) {
    (void)skip; /* the mask is y's */
    (void)b;
    bn_job j = {.N = N, .C = C, .P = P, .x = x, .y = y, .dy = dy, .mean_c = mean, .invstd_c = invstd, .w = w,
                .relu = relu, .training = training, .dx = dx, .beta_x = beta_x, .dskip = dskip, .beta_s = beta_s,
                .dw = dw, .beta_w = beta_w, .db = db, .beta_b = beta_b, .sums = ws, .M = N * P};
    dt_parallel_for(C, 1, nchw_backward_sums_range, &j);
    if (sync && training) { /* even without dx: every replica makes the same collective calls */
        sync->allreduce(sync->ctx, j.sums, 2 * C);
        j.M *= sync->ranks;
    }
    if (dx || dskip) dt_parallel_for(C, 1, nchw_backward_dx_range, &j);
}

/* ---- NHWC f32 / bf16 ---- */

/* The per-channel constants, COEF_N arrays of C floats in j->coef. */
enum { MU, IS, SC, SH, K, MG, MGX, COEF_N };
#define COEF(j, a, c) ((j)->coef[(int64_t)(a) * (j)->C + (c)])

/* bn(x) = fmaf(x, scale, shift), as the CUDA kernels compute it. */
static void coef_fill(bn_job *j, int with_sums) {
    for (int64_t c = 0; c < j->C; c++) {
        float is = j->invstd_c[c], sc = is * j->w[c];
        COEF(j, MU, c) = j->mean_c[c];
        COEF(j, IS, c) = is;
        COEF(j, SC, c) = sc;
        COEF(j, SH, c) = fmaf(-j->mean_c[c], sc, j->b[c]);
        if (!with_sums) continue;
        COEF(j, K, c) = j->w[c] * is;
        COEF(j, MG, c) = j->training ? (float)(j->sums[2 * c] / j->M) : 0.0f;
        COEF(j, MGX, c) = j->training ? (float)(j->sums[2 * c + 1] / j->M) : 0.0f;
    }
}

static void nhwc_stats_sums_range(void *ctx, int64_t c0, int64_t c1) {
    const bn_job *j = ctx;
    int64_t R = j->N * j->P, C = j->C;
    for (int64_t c = c0; c < c1; c++) j->sums[2 * c] = j->sums[2 * c + 1] = 0.0;
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = c0; c < c1; c++) {
            double v = dt_elem_ld(j->x, j->dt, r * C + c);
            j->sums[2 * c] += v;
            j->sums[2 * c + 1] += v * v;
        }
}

static void nhwc_stats(dt_dtype dt, int64_t N, int64_t C, int64_t P, const void *x, int training, float eps,
                       float momentum, float *rm, float *rv, float *mean, float *invstd, void *ws,
                       const dt_bn_sync *sync) {
    bn_job j = {.N = N, .C = C, .P = P, .dt = dt, .x = x, .training = training, .eps = eps, .momentum = momentum,
                .rm = rm, .rv = rv, .mean = mean, .invstd = invstd, .sums = ws, .M = N * P};
    stats(&j, nhwc_stats_sums_range, 16, sync); /* 16 channels: a worker's share of a row spans cache lines */
}

static void nhwc_apply_range(void *ctx, int64_t r0, int64_t r1) {
    const bn_job *j = ctx;
    int64_t C = j->C;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t c = 0; c < C; c++) {
            int64_t i = r * C + c;
            float u = fmaf(dt_elem_ld(j->x, j->dt, i), COEF(j, SC, c), COEF(j, SH, c));
            if (j->skip) u += dt_elem_ld(j->skip, j->dt, i);
            dt_elem_st(j->out, j->dt, i, j->relu && !(u > 0.0f) ? 0.0f : u);
        }
}

static void nhwc_apply(dt_dtype dt, int64_t N, int64_t C, int64_t P, const void *x, const float *mean,
                       const float *invstd, const float *w, const float *b, const void *skip, int relu, void *y) {
    bn_job j = {.N = N, .C = C, .P = P, .dt = dt, .x = x, .mean_c = mean, .invstd_c = invstd, .w = w, .b = b,
                .skip = skip, .relu = relu, .out = y};
    j.coef = dt_xmalloc((size_t)(C ? C : 1) * COEF_N * sizeof(float));
    coef_fill(&j, 0);
    dt_parallel_for(N * P, 64, nhwc_apply_range, &j);
    free(j.coef);
}

/* g = dy, zeroed where the pre-activation fmaf(x, scale, shift) (+ skip) is not > 0 (relu) */
static float nhwc_g(const bn_job *j, int64_t i, int64_t c, float x) {
    float g = dt_elem_ld(j->dy, j->dt, i);
    if (!j->relu) return g;
    float pre = fmaf(x, COEF(j, SC, c), COEF(j, SH, c));
    if (j->skip) pre += dt_elem_ld(j->skip, j->dt, i);
    return pre > 0.0f ? g : 0.0f;
}

static void nhwc_backward_sums_range(void *ctx, int64_t c0, int64_t c1) {
    const bn_job *j = ctx;
    int64_t R = j->N * j->P, C = j->C;
    for (int64_t c = c0; c < c1; c++) j->sums[2 * c] = j->sums[2 * c + 1] = 0.0;
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = c0; c < c1; c++) {
            int64_t i = r * C + c;
            float x = dt_elem_ld(j->x, j->dt, i), g = nhwc_g(j, i, c, x);
            j->sums[2 * c] += g;
            j->sums[2 * c + 1] += (double)g * ((x - COEF(j, MU, c)) * COEF(j, IS, c));
        }
    for (int64_t c = c0; c < c1; c++) {
        if (j->db) STORE(j->db[c], (float)j->sums[2 * c], j->beta_b);
        if (j->dw) STORE(j->dw[c], (float)j->sums[2 * c + 1], j->beta_w);
    }
}

static void nhwc_backward_dx_range(void *ctx, int64_t r0, int64_t r1) {
    const bn_job *j = ctx;
    int64_t C = j->C;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t c = 0; c < C; c++) {
            int64_t i = r * C + c;
            float x = dt_elem_ld(j->x, j->dt, i), g = nhwc_g(j, i, c, x);
            if (j->dskip) dt_elem_st_beta(j->dskip, j->dt, i, g, j->beta_s);
            if (!j->dx) continue;
            float xh = (x - COEF(j, MU, c)) * COEF(j, IS, c);
            float v = j->training ? COEF(j, K, c) * fmaf(-xh, COEF(j, MGX, c), g - COEF(j, MG, c)) : COEF(j, K, c) * g;
            dt_elem_st_beta(j->dx, j->dt, i, v, j->beta_x);
        }
}

static void nhwc_backward(dt_dtype dt, int64_t N, int64_t C, int64_t P, const void *x, const void *skip,
                          const void *dy, const float *mean, const float *invstd, const float *w, const float *b,
                          int relu, int training, void *dx, float beta_x, void *dskip, float beta_s, float *dw,
                          float beta_w, float *db, float beta_b, void *ws, const dt_bn_sync *sync) {
    bn_job j = {.N = N, .C = C, .P = P, .dt = dt, .x = x, .skip = skip, .dy = dy, .mean_c = mean,
                .invstd_c = invstd, .w = w, .b = b, .relu = relu, .training = training, .dx = dx, .beta_x = beta_x,
                .dskip = dskip, .beta_s = beta_s, .dw = dw, .beta_w = beta_w, .db = db, .beta_b = beta_b,
                .sums = ws, .M = N * P};
    j.coef = (float *)(j.sums + 2 * C); /* ws has room for far more than the sums */
    coef_fill(&j, 0);
    dt_parallel_for(C, 16, nhwc_backward_sums_range, &j);
    if (sync && training) { /* even without dx: every replica makes the same collective calls */
        sync->allreduce(sync->ctx, j.sums, 2 * C);
        j.M *= sync->ranks;
    }
    if (!dx && !dskip) return;
    coef_fill(&j, 1);
    dt_parallel_for(N * P, 64, nhwc_backward_dx_range, &j);
}

#define DT_BN_NHWC_TWIN(name, dtype)                                                                                 \
    void dt_bn_stats_##name##_nhwc_cpu(int64_t N, int64_t C, int64_t P, const void *x, int training, float eps,     \
                                       float momentum, float *rm, float *rv, float *mean, float *invstd, void *ws,  \
                                       const dt_bn_sync *sync) {                                                     \
        nhwc_stats(dtype, N, C, P, x, training, eps, momentum, rm, rv, mean, invstd, ws, sync);                      \
    }                                                                                                                \
    void dt_bn_apply_##name##_nhwc_cpu(int64_t N, int64_t C, int64_t P, const void *x, const float *mean,           \
                                       const float *invstd, const float *w, const float *b, const void *skip,       \
                                       int relu, void *y) {                                                          \
        nhwc_apply(dtype, N, C, P, x, mean, invstd, w, b, skip, relu, y);                                            \
    }                                                                                                                \
    void dt_bn_backward_##name##_nhwc_cpu(int64_t N, int64_t C, int64_t P, const void *x, const void *y,            \
                                          const void *skip, const void *dy, const float *mean, const float *invstd, \
                                          const float *w, const float *b, int relu, int training, void *dx,         \
                                          float beta_x, void *dskip, float beta_s, float *dw, float beta_w,         \
                                          float *db, float beta_b, void *ws, const dt_bn_sync *sync) {              \
        (void)y; /* the mask is recomputed from x (and skip) */                                                      \
        nhwc_backward(dtype, N, C, P, x, skip, dy, mean, invstd, w, b, relu, training, dx, beta_x, dskip, beta_s,   \
                      dw, beta_w, db, beta_b, ws, sync);                                                             \
    }

DT_BN_NHWC_TWIN(f32, DT_F32)
DT_BN_NHWC_TWIN(bf16, DT_BF16)
