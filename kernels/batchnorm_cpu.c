/* CPU twins of batchnorm.h, channel by channel, threaded over channels. Each reduction is
 * two passes, the per-channel sums then their use, so that a synchronized batch norm can sum
 * them across replicas in between. */
#include <math.h>
#include <stdlib.h>

#include "batchnorm.h"
#include "dt_common.h"
#include "dt_parallel.h"

typedef struct {
    int64_t N, C, P;
    const float *x, *y, *dy, *mean_c, *invstd_c, *w, *b;
    float *out, *mean, *invstd, *rm, *rv, *dx, *dw, *db;
    double *sums;  /* (C, 2) per-channel sums */
    int64_t M;     /* elements per channel the statistics count (all replicas) */
    float eps, momentum, beta_x, beta_w, beta_b;
    int training, relu;
} bn_job;

#define STORE(dst, v, beta) ((dst) = (beta) == 0.0f ? (v) : (dst) + (v))

static void stats_sums_range(void *ctx, int64_t c0, int64_t c1) {
    const bn_job *j = ctx;
    for (int64_t c = c0; c < c1; c++) {
        double s = 0, s2 = 0;
        for (int64_t n = 0; n < j->N; n++) {
            const float *xp = j->x + (n * j->C + c) * j->P;
            for (int64_t p = 0; p < j->P; p++) {
                s += xp[p];
                s2 += (double)xp[p] * xp[p];
            }
        }
        j->sums[2 * c] = s;
        j->sums[2 * c + 1] = s2;
    }
}

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

void dt_bn_stats_cpu(int64_t N, int64_t C, int64_t P, const float *x, int training, float eps,
                     float momentum, float *running_mean, float *running_var, float *mean,
                     float *invstd, void *ws, const dt_bn_sync *sync) {
    (void)ws;
    bn_job j = {.N = N, .C = C, .P = P, .x = x, .training = training, .eps = eps, .momentum = momentum,
                .rm = running_mean, .rv = running_var, .mean = mean, .invstd = invstd, .M = N * P};
    if (training) {
        j.sums = dt_xmalloc((size_t)C * 2 * sizeof(double));
        dt_parallel_for(C, 1, stats_sums_range, &j);
        if (sync) {
            sync->allreduce(sync->ctx, j.sums, 2 * C);
            j.M *= sync->ranks;
        }
    }
    dt_parallel_for(C, 1, stats_final_range, &j);
    free(j.sums);
}

static void apply_range(void *ctx, int64_t r0, int64_t r1) {
    const bn_job *j = ctx;
    for (int64_t r = r0; r < r1; r++) { /* r = n*C + c */
        int64_t c = r % j->C;
        float scale = j->invstd_c[c] * j->w[c], shift = j->b[c] - j->mean_c[c] * scale;
        const float *xp = j->x + r * j->P;
        float *yp = j->out + r * j->P;
        for (int64_t p = 0; p < j->P; p++) {
            float v = xp[p] * scale + shift;
            yp[p] = j->relu && v < 0.0f ? 0.0f : v;
        }
    }
}

void dt_bn_apply_cpu(int64_t N, int64_t C, int64_t P, const float *x, const float *mean,
                     const float *invstd, const float *w, const float *b, int relu, float *y) {
    bn_job j = {.N = N, .C = C, .P = P, .x = x, .mean_c = mean, .invstd_c = invstd, .w = w, .b = b, .relu = relu, .out = y};
    dt_parallel_for(N * C, 16, apply_range, &j);
}

static void backward_sums_range(void *ctx, int64_t c0, int64_t c1) {
    const bn_job *j = ctx;
    for (int64_t c = c0; c < c1; c++) {
        double sg = 0, sgx = 0;
        float mu = j->mean_c[c], is = j->invstd_c[c];
        for (int64_t n = 0; n < j->N; n++) {
            int64_t o = (n * j->C + c) * j->P;
            for (int64_t p = 0; p < j->P; p++) {
                float g = j->relu && !(j->y[o + p] > 0.0f) ? 0.0f : j->dy[o + p];
                sg += g;
                sgx += (double)g * ((j->x[o + p] - mu) * is);
            }
        }
        if (j->db) STORE(j->db[c], (float)sg, j->beta_b);
        if (j->dw) STORE(j->dw[c], (float)sgx, j->beta_w);
        j->sums[2 * c] = sg;
        j->sums[2 * c + 1] = sgx;
    }
}

static void backward_dx_range(void *ctx, int64_t c0, int64_t c1) {
    const bn_job *j = ctx;
    for (int64_t c = c0; c < c1; c++) {
        float mu = j->mean_c[c], is = j->invstd_c[c];
        float k = j->w[c] * is, mg = (float)(j->sums[2 * c] / j->M), mgx = (float)(j->sums[2 * c + 1] / j->M);
        for (int64_t n = 0; n < j->N; n++) {
            int64_t o = (n * j->C + c) * j->P;
            for (int64_t p = 0; p < j->P; p++) {
                float g = j->relu && !(j->y[o + p] > 0.0f) ? 0.0f : j->dy[o + p];
                float v = j->training ? k * (g - mg - (j->x[o + p] - mu) * is * mgx) : k * g;
                STORE(j->dx[o + p], v, j->beta_x);
            }
        }
    }
}

void dt_bn_backward_cpu(int64_t N, int64_t C, int64_t P, const float *x, const float *y,
                        const float *dy, const float *mean, const float *invstd, const float *w,
                        int relu, int training, float *dx, float beta_x, float *dw, float beta_w,
                        float *db, float beta_b, void *ws, const dt_bn_sync *sync) {
    (void)ws;
    bn_job j = {.N = N, .C = C, .P = P, .x = x, .y = y, .dy = dy, .mean_c = mean, .invstd_c = invstd, .w = w,
                .relu = relu, .training = training, .dx = dx, .beta_x = beta_x, .dw = dw, .beta_w = beta_w,
                .db = db, .beta_b = beta_b, .M = N * P};
    j.sums = dt_xmalloc((size_t)C * 2 * sizeof(double));
    dt_parallel_for(C, 1, backward_sums_range, &j);
    if (sync && training) {
        sync->allreduce(sync->ctx, j.sums, 2 * C);
        j.M *= sync->ranks;
    }
    if (dx) dt_parallel_for(C, 1, backward_dx_range, &j);
    free(j.sums);
}
