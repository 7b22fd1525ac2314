/* The batch-norm lab (issue 34): the NHWC bf16 batch-norm passes of ResNet-18's training step -
 * apply (y = act(bn(x) + skip)), the backward's partial sums, the backward's dx - at the tunings
 * of ops/batchnorm/batchnorm_nhwc.cuh (rows a thread loads at once, U; a register cap, MINB; the
 * pointwise grid; the reductions' splits), beside the library's own entry points (`lib`).
 * Same habit as the other labs: every variant is validated on fresh random inputs (never zeros)
 * before it is timed, and only a winner ships (dt_bn_nhwc_tuned).
 *
 * Shapes: the 20 batch norms of ResNet-18 at 224x224, --batch N (64), grouped by what they do:
 *   relu  bn + ReLU (the stem, each block's first conv): backward dx only;
 *   join  bn + skip + ReLU (each block's second conv): backward dx and dskip written fresh, so
 *         the partial pass stores g in dskip and dx reads it back (batchnorm.cu's g_ready);
 *   down  bn alone (the downsampling 1x1's).
 * A pass's "step" column sums its shapes times their count: what the step spends on it.
 *
 * Validation, at the timed batch:
 *   lib      y, dskip against the CPU twins (ops/batchnorm/batchnorm_cpu.c) run on the same
 *            bf16 inputs and statistics: within half a bf16 rounding step of |ref| (+ 1e-6 near
 *            0): the same fmaf on both sides, so only the rounding of the output can differ;
 *            dx within one bf16 step of |ref| plus 2^-20 of the magnitude of its two terms: dx =
 *            k (g - mean_g) - q (x - mean), and mean_g, q come from double sums that the GPU and
 *            the twin add in different orders, so each float coefficient may differ by a
 *            rounding (2^-24 relative), which the difference of the two terms can expose where
 *            they cancel; one rounding of the output either way is a whole bf16 step; dw, db
 *            within 1e-5 (|ref| + 1) of the twin's.
 *   apply, dx variants   bitwise equal to lib's output (each element is computed alone, by the
 *            same formula, whatever the tuning).
 *   partial variants     the partials [S][C][2] bitwise equal to lib's where the splits are the
 *            same (U and MINB keep each thread's order); else the per-channel sums of the
 *            variant's and of lib's partials, both added on the host in split order, within
 *            1e-12 of the sums of |terms| (double sums over other row ranges); g (the join's
 *            dskip) bitwise equal.
 *   groups variants      (the statistics from a conv epilogue's 64-row group sums,
 *            k_stats_of_groups, on random groups [ceil(R/64)][C][2]) the channel sums (the kernel's
 *            sums mode) within 1e-12 of the host's sums of |terms|; mean and 1/std bitwise equal
 *            to lib's (dt_bn_stats_of_sums_cuda) for lib's threads and accumulators, else within
 *            2^-20 relative of them.
 * A variant that fails is not timed; any failure: exit status 1.
 *
 * Timing: median of --reps after --warmup launches (CUDA events; dt_bench_time), fresh random
 * inputs; the rate is the pass's bytes (E = 2: apply reads x, skip and writes y; partial reads
 * x, dy, skip and writes g for a join; dx reads x, dy or g and writes dx) over its time, beside
 * a 1 GiB device copy's.
 *
 *   build/bn_lab [--batch 64] [--reps 20] [--warmup 3] [--only SUBSTR] [--pass apply,partial,dx,groups] */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_common.h"
#include "core/dt_alloc.h"
#include "core/dt_common.h"
#include "core/dt_device.h"
#include "core/dt_dtype.h"
#include "ops/batchnorm/batchnorm.h"
#include "ops/batchnorm/batchnorm_nhwc.cuh"

typedef __nv_bfloat16 bf16;

/* ================================================================== shapes */

typedef enum { BN_RELU, BN_JOIN, BN_DOWN } bn_kind;
static const char *const KIND_NAME[] = {"relu", "join", "down"};

typedef struct {
    const char *stage;
    int64_t C, H; /* channels; H = W */
    bn_kind kind;
    int count; /* batch norms of this shape and kind in one ResNet-18 */
} bn_shape;

static const bn_shape SHAPES[] = {
    {"stem", 64, 112, BN_RELU, 1},
    {"l1", 64, 56, BN_RELU, 2},   {"l1", 64, 56, BN_JOIN, 2},
    {"l2", 128, 28, BN_RELU, 2},  {"l2", 128, 28, BN_JOIN, 2},  {"l2", 128, 28, BN_DOWN, 1},
    {"l3", 256, 14, BN_RELU, 2},  {"l3", 256, 14, BN_JOIN, 2},  {"l3", 256, 14, BN_DOWN, 1},
    {"l4", 512, 7, BN_RELU, 2},   {"l4", 512, 7, BN_JOIN, 2},   {"l4", 512, 7, BN_DOWN, 1},
};
#define N_SHAPES ((int)(sizeof SHAPES / sizeof SHAPES[0]))

/* One shape's buffers at the timed batch. Device: x, skip, dy, y, dx, dskip [N, H, W, C] bf16
 * (skip, dskip only for a join); mean, invstd, w, b [C] f32; ws (dt_bn_ws_bytes) of the library's
 * calls, whose coefficients [4][C] the dx variants read; wsv: a variant's partials
 * [DT_BN_MAX_SPLITS][C][2] double; yv, dxv, gv: a variant's outputs. */
typedef struct {
    const bn_shape *s;
    int64_t N, R, C; /* R = N H W rows */
    bf16 *x, *skip, *dy, *y, *dx, *dskip, *yv, *dxv, *gv;
    float *mean, *invstd, *w, *b, *rm, *rv, *dw, *db;
    void *ws;
    double *wsv;
    int S_lib;              /* the library's splits (the partial variants compare against) */
    double *part_lib;       /* host [S_lib][C][2]: lib's partials (sum g, sum g xhat per split) */
    double *abs_sums;       /* host [C][2]: sums of |g|, |g xhat| (the partial variants' bound) */
    int64_t G;              /* groups of 64 rows: ceil(R / 64) */
    double *groups;         /* device [G][C][2]: random (sum x, sum x^2) per group, as a conv's epilogue */
    double *gsums;          /* device [C][2]: a groups variant's channel sums */
    float *meanv, *invstdv; /* device [C]: a groups variant's statistics */
    float *mean_g, *invstd_g; /* host [C]: lib's statistics from the groups */
} bn_case;

static size_t act_bytes(const bn_case *c) { return (size_t)(c->R * c->C) * sizeof(bf16); }
static int has_skip(const bn_case *c) { return c->s->kind == BN_JOIN; }
static int has_relu(const bn_case *c) { return c->s->kind != BN_DOWN; }

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float urand(float lo, float hi) { /* xorshift64*: uniform in [lo, hi) */
    g_rng ^= g_rng >> 12, g_rng ^= g_rng << 25, g_rng ^= g_rng >> 27;
    return lo + (hi - lo) * (float)((g_rng * 2685821657736338717ull) >> 40) / (float)(1 << 24);
}

static void fill_bf16(bf16 *d, size_t n, float lo, float hi, dt_bf16 *host) {
    for (size_t i = 0; i < n; i++) host[i] = dt_bf16_from_float(urand(lo, hi));
    dt_copy_h2d(d, host, n * sizeof(dt_bf16));
}
static void fill_f32(float *d, int64_t n, float lo, float hi) {
    float *h = (float *)dt_xmalloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) h[i] = urand(lo, hi);
    dt_copy_h2d(d, h, (size_t)n * sizeof(float));
    free(h);
}

/* ================================================================== the library's calls */

static void lib_apply(bn_case *c, bf16 *y) {
    dt_bn_apply_bf16_nhwc_cuda(c->N, c->C, c->R / c->N, c->x, c->mean, c->invstd, c->w, c->b,
                               has_skip(c) ? c->skip : NULL, has_relu(c), y);
}
static void lib_backward(bn_case *c) {
    dt_bn_backward_bf16_nhwc_cuda(c->N, c->C, c->R / c->N, c->x, c->y, has_skip(c) ? c->skip : NULL, c->dy, c->mean,
                                  c->invstd, c->w, c->b, has_relu(c), 1, c->dx, 0.0f, has_skip(c) ? c->dskip : NULL,
                                  0.0f, c->dw, 0.0f, c->db, 0.0f, c->ws, NULL);
}
/* the coefficients [4][C] the library's backward left in ws (batchnorm.h: after the partials and
 * the sums) */
static const float *lib_coef(const bn_case *c) {
    return (const float *)((const double *)c->ws + (size_t)c->C * (DT_BN_MAX_SPLITS + 1) * 2);
}

/* ================================================================== variants */

typedef void (*pass_fn)(bn_case *c);
typedef struct {
    const char *name;
    pass_fn fn;
    int (*splits)(const bn_case *c); /* a partial variant's row splits on c (else NULL) */
    pass_fn sums;                    /* a groups variant in its sums mode, into gsums (else NULL) */
} variant;

/* apply at U rows a step, PER_SM pointwise blocks an SM (0: resident) into yv */
template <int U, int PER_SM>
static void apply_v(bn_case *c) {
    const dt_bn_nhwc::shape sh = {PER_SM, 8, 4};
    dt_bn_nhwc::launch_apply<dt_bn_nhwc::tuning<U, 1, 0, 1, 3, 256, 1>, bf16>(c->R, c->C, c->x, c->mean, c->invstd, c->w, c->b,
                                                                    has_skip(c) ? c->skip : NULL, has_relu(c), c->yv,
                                                                    sh);
}
/* the backward's partial sums at U rows a step, MINB, SPLITS an SM into wsv (g into gv for a join) */
template <int U, int MINB, int SPLITS>
static void partial_v(bn_case *c) {
    const dt_bn_nhwc::shape sh = {8, 8, SPLITS};
    int S;
    dt_bn_nhwc::launch_bwd_partial<dt_bn_nhwc::tuning<1, U, MINB, 1, 3, 256, 1>, bf16>(
        c->R, c->C, c->x, has_skip(c) ? c->skip : NULL, c->dy, c->mean, c->invstd, c->w, c->b, has_relu(c),
        has_skip(c) ? c->gv : NULL, c->dx, has_skip(c) ? c->dskip : NULL, c->wsv, sh, &S);
}
/* the backward's row splits on c at splits_per_sm (launch_bwd_partial's tiling) */
static int splits_at(const bn_case *c, int splits_per_sm) {
    const dt_bn_nhwc::grid g = dt_bn_nhwc::tiling<bf16>(c->C, {c->x, c->skip, c->dy, c->dx, c->dskip});
    return dt_bn_nhwc::splits(c->R, g, splits_per_sm);
}
template <int SPLITS>
static int partial_splits(const bn_case *c) { return splits_at(c, SPLITS); }
/* dx at U rows a step, MINB, PER_SM blocks an SM into dxv, from lib's coefficients (a join reads
 * lib's g from dskip) */
template <int U, int MINB, int PER_SM>
static void dx_v(bn_case *c) {
    const dt_bn_nhwc::shape sh = {8, PER_SM, 4};
    dt_bn_nhwc::launch_bwd_dx<dt_bn_nhwc::tuning<1, 1, 0, U, MINB, 256, 1>, bf16>(
        c->R, c->C, c->x, has_skip(c) ? c->skip : NULL, c->dy, c->mean, lib_coef(c), has_relu(c), 1, has_skip(c),
        has_skip(c) ? c->dskip : NULL, 0.0f, c->dxv, 0.0f, sh);
}

/* the statistics from the groups at T threads a channel, A accumulators a thread, into meanv,
 * invstdv (the running estimates rm, rv updated as the step does) */
template <int T, int A>
static void groups_v(bn_case *c) {
    dt_bn_nhwc::launch_stats_of_groups<dt_bn_nhwc::tuning<1, 1, 0, 1, 0, T, A>>(c->C, c->R, c->groups, c->G, NULL,
                                                                              1e-5f, 0.1f, c->rm, c->rv, c->meanv,
                                                                              c->invstdv);
}
static void lib_groups(bn_case *c) {
    dt_bn_stats_of_sums_cuda(c->C, c->R, c->groups, c->G, 1e-5f, 0.1f, c->rm, c->rv, c->meanv, c->invstdv, NULL);
}

static void lib_apply_timed(bn_case *c) { lib_apply(c, c->yv); }

static const variant APPLY[] = {
    {"lib", lib_apply_timed, NULL, NULL},
    {"u1_g8", apply_v<1, 8>, NULL, NULL},   {"u2_g8", apply_v<2, 8>, NULL, NULL},   {"u4_g8", apply_v<4, 8>, NULL, NULL},
    {"u1_res", apply_v<1, 0>, NULL, NULL},  {"u2_res", apply_v<2, 0>, NULL, NULL},  {"u4_res", apply_v<4, 0>, NULL, NULL},
};
/* name: u<U>_b<MINB>_s<splits an SM> */
#define PARTIAL_V(U, B, S) {"u" #U "_b" #B "_s" #S, partial_v<U, B, S>, partial_splits<S>, NULL}
static const variant PARTIAL[] = {
    PARTIAL_V(1, 0, 4), PARTIAL_V(2, 0, 4), PARTIAL_V(4, 0, 4), PARTIAL_V(1, 3, 4), PARTIAL_V(2, 3, 4),
    PARTIAL_V(2, 2, 4), PARTIAL_V(1, 0, 8), PARTIAL_V(2, 3, 8), PARTIAL_V(4, 2, 8),
};
static const variant DX[] = {
    {"u1_b3_g8", dx_v<1, 3, 8>, NULL, NULL},  {"u1_b0_g8", dx_v<1, 0, 8>, NULL, NULL},  {"u2_b0_g8", dx_v<2, 0, 8>, NULL, NULL},
    {"u2_b3_g8", dx_v<2, 3, 8>, NULL, NULL},  {"u4_b0_g8", dx_v<4, 0, 8>, NULL, NULL},  {"u1_b3_res", dx_v<1, 3, 0>, NULL, NULL},
    {"u2_b0_res", dx_v<2, 0, 0>, NULL, NULL}, {"u2_b3_res", dx_v<2, 3, 0>, NULL, NULL}, {"u4_b0_res", dx_v<4, 0, 0>, NULL, NULL},
};
/* the same in its sums mode (what a synchronized batch norm all-reduces) into gsums */
template <int T, int A>
static void groups_sums(bn_case *c) {
    dt_bn_nhwc::launch_stats_of_groups<dt_bn_nhwc::tuning<1, 1, 0, 1, 0, T, A>>(c->C, c->R, c->groups, c->G, c->gsums,
                                                                              1e-5f, 0.1f, NULL, NULL, NULL, NULL);
}
/* name: t<threads a channel>_a<accumulators a thread>; `lib` is the library's entry */
#define GROUPS_V(T, A) {"t" #T "_a" #A, groups_v<T, A>, NULL, groups_sums<T, A>}
static const variant GROUPS[] = {
    {"lib", lib_groups, NULL, NULL}, GROUPS_V(256, 1),  GROUPS_V(256, 2),  GROUPS_V(256, 4), GROUPS_V(512, 1),
    GROUPS_V(512, 2),          GROUPS_V(1024, 1), GROUPS_V(1024, 2), GROUPS_V(128, 4),
};
#define COUNT(a) ((int)(sizeof a / sizeof a[0]))

/* ================================================================== checks */

static int g_failures;

static dt_bf16 *host_bf16(const bf16 *d, size_t n) {
    dt_bf16 *h = (dt_bf16 *)dt_xmalloc(n * sizeof(dt_bf16));
    dt_copy_d2h(h, d, n * sizeof(dt_bf16));
    return h;
}

/* got within `steps` bf16 rounding steps of |ref| (a step: 2^-7 |ref|, the spacing at the
 * bottom of its binade) plus slack[i] (NULL: none) plus 1e-6 near 0; the first failure printed */
static int near_bf16(const char *what, const bn_case *c, const dt_bf16 *got, const dt_bf16 *ref, size_t n,
                     float steps, const float *slack) {
    size_t bad = 0, at = 0;
    for (size_t i = 0; i < n; i++) {
        const float g = dt_bf16_to_float(got[i]), r = dt_bf16_to_float(ref[i]);
        if (!(fabsf(g - r) <= steps * ldexpf(fabsf(r), -7) + (slack ? slack[i] : 0.0f) + 1e-6f)) {
            if (!bad) at = i;
            bad++;
        }
    }
    if (bad) {
        printf("FAIL %s %s %s: %zu of %zu outside the bound (first at %zu: %g vs %g)\n", c->s->stage,
               KIND_NAME[c->s->kind], what, bad, n, at, dt_bf16_to_float(got[at]), dt_bf16_to_float(ref[at]));
        g_failures++;
    }
    return bad == 0;
}

static int same_bits(const char *what, const bn_case *c, const void *a_dev, const void *b_dev, size_t bytes) {
    unsigned char *a = (unsigned char *)dt_xmalloc(bytes), *b = (unsigned char *)dt_xmalloc(bytes);
    dt_copy_d2h(a, a_dev, bytes);
    dt_copy_d2h(b, b_dev, bytes);
    const int ok = !memcmp(a, b, bytes);
    if (!ok) {
        printf("FAIL %s %s %s: not bitwise equal to lib's\n", c->s->stage, KIND_NAME[c->s->kind], what);
        g_failures++;
    }
    free(a), free(b);
    return ok;
}

/* lib's y, dx, dskip, dw, db against the CPU twins, and the host sums the partial variants meet */
static void check_lib(bn_case *c) {
    const size_t n = (size_t)(c->R * c->C);
    const int64_t C = c->C, P = c->R / c->N;
    dt_bf16 *x = host_bf16(c->x, n), *dy = host_bf16(c->dy, n), *skip = has_skip(c) ? host_bf16(c->skip, n) : NULL;
    float *mean = (float *)dt_xmalloc(4 * C * sizeof(float)), *invstd = mean + C, *w = mean + 2 * C, *b = mean + 3 * C;
    dt_copy_d2h(mean, c->mean, C * sizeof(float));
    dt_copy_d2h(invstd, c->invstd, C * sizeof(float));
    dt_copy_d2h(w, c->w, C * sizeof(float));
    dt_copy_d2h(b, c->b, C * sizeof(float));
    dt_bf16 *y = (dt_bf16 *)dt_xmalloc(n * 2), *dx = (dt_bf16 *)dt_xmalloc(n * 2),
            *dskip = has_skip(c) ? (dt_bf16 *)dt_xmalloc(n * 2) : NULL;
    float *dw = (float *)dt_xmalloc(2 * C * sizeof(float)), *db = dw + C;
    void *ws = dt_xmalloc(dt_bn_ws_bytes(C));
    dt_bn_apply_bf16_nhwc_cpu(c->N, C, P, x, mean, invstd, w, b, skip, has_relu(c), y);
    dt_bn_backward_bf16_nhwc_cpu(c->N, C, P, x, y, skip, dy, mean, invstd, w, b, has_relu(c), 1, dx, 0.0f, dskip, 0.0f,
                                 dw, 0.0f, db, 0.0f, ws, NULL);
    dt_bf16 *got = host_bf16(c->y, n);
    near_bf16("lib y", c, got, y, n, 0.5f, NULL);
    free(got);
    /* dx's slack: 2^-20 (|k (g - mean_g)| + |q (x - mean)|), the terms from the twin's sums (db =
     * sum g, dw = sum g xhat over M = R values; k = w invstd, q = k invstd dw / M) */
    float *slack = (float *)dt_xmalloc(n * sizeof(float));
    for (int64_t r = 0; r < c->R; r++)
        for (int64_t k = 0; k < C; k++) {
            const size_t o = (size_t)(r * C + k);
            const double kk = (double)w[k] * invstd[k], q = kk * invstd[k] * dw[k] / c->R;
            const double gv = dt_bf16_to_float(dy[o]), xv = dt_bf16_to_float(x[o]);
            slack[o] = (float)ldexp(fabs(kk) * (fabs(gv) + fabs((double)db[k] / c->R)) + fabs(q * (xv - mean[k])), -20);
        }
    got = host_bf16(c->dx, n);
    near_bf16("lib dx", c, got, dx, n, 1.0f, slack);
    free(got);
    free(slack);
    if (dskip) {
        got = host_bf16(c->dskip, n);
        near_bf16("lib dskip", c, got, dskip, n, 0.5f, NULL);
        free(got);
    }
    float *gdw = (float *)dt_xmalloc(2 * C * sizeof(float)), *gdb = gdw + C;
    dt_copy_d2h(gdw, c->dw, C * sizeof(float));
    dt_copy_d2h(gdb, c->db, C * sizeof(float));
    for (int64_t k = 0; k < C; k++)
        if (!(fabsf(gdw[k] - dw[k]) <= 1e-5f * (fabsf(dw[k]) + 1)) || !(fabsf(gdb[k] - db[k]) <= 1e-5f * (fabsf(db[k]) + 1))) {
            printf("FAIL %s %s lib dw/db channel %lld: %g %g vs the twin's %g %g\n", c->s->stage, KIND_NAME[c->s->kind],
                   (long long)k, gdw[k], gdb[k], dw[k], db[k]);
            g_failures++;
            break;
        }
    /* the sums of |g|, |g xhat| (xhat as the kernels round it: (x - mean) * invstd in fp32) */
    for (int64_t k = 0; k < 2 * C; k++) c->abs_sums[k] = 0;
    for (int64_t r = 0; r < c->R; r++)
        for (int64_t k = 0; k < C; k++) {
            const size_t o = (size_t)(r * C + k);
            float g = dt_bf16_to_float(dy[o]);
            if (has_relu(c)) {
                float pre = fmaf(dt_bf16_to_float(x[o]), invstd[k] * w[k], fmaf(-mean[k], invstd[k] * w[k], b[k]));
                if (skip) pre += dt_bf16_to_float(skip[o]);
                if (!(pre > 0.0f)) g = 0.0f;
            }
            c->abs_sums[2 * k] += fabs((double)g);
            c->abs_sums[2 * k + 1] += fabs((double)g * ((dt_bf16_to_float(x[o]) - mean[k]) * invstd[k]));
        }
    /* lib's partials, where its pass 1 left them (batchnorm.h's ws: [S][C][2] first) */
    dt_copy_d2h(c->part_lib, c->ws, (size_t)c->S_lib * C * 2 * sizeof(double));
    free(x), free(dy), free(skip), free(mean), free(y), free(dx), free(dskip), free(dw), free(gdw), free(ws);
}

/* a partial variant's partials against lib's: bitwise for the same splits, else the per-channel
 * sums of both (host, split order) within 1e-12 of the sums of |terms| */
static double split_sum(const double *part, int S, int64_t C, int64_t k, int j) {
    double sum = 0;
    for (int s = 0; s < S; s++) sum += part[((size_t)s * C + k) * 2 + j];
    return sum;
}
static int check_partial(bn_case *c, const variant *pv) {
    const int S = pv->splits(c);
    const int64_t C = c->C;
    const size_t bytes = (size_t)S * C * 2 * sizeof(double);
    double *part = (double *)dt_xmalloc(bytes);
    dt_copy_d2h(part, c->wsv, bytes);
    int ok = 1;
    if (S == c->S_lib) {
        if (memcmp(part, c->part_lib, bytes)) {
            printf("FAIL %s %s partial %s: partials not bitwise equal to lib's (%d splits)\n", c->s->stage,
                   KIND_NAME[c->s->kind], pv->name, S);
            g_failures++;
            ok = 0;
        }
    } else
        for (int64_t k = 0; k < C && ok; k++)
            for (int j = 0; j < 2 && ok; j++) {
                const double sum = split_sum(part, S, C, k, j), ref = split_sum(c->part_lib, c->S_lib, C, k, j);
                if (!(fabs(sum - ref) <= 1e-12 * c->abs_sums[2 * k + j])) {
                    printf("FAIL %s %s partial %s: channel %lld sum %d %.17g vs lib's %.17g (%d vs %d splits)\n",
                           c->s->stage, KIND_NAME[c->s->kind], pv->name, (long long)k, j, sum, ref, S, c->S_lib);
                    g_failures++;
                    ok = 0;
                }
            }
    free(part);
    if (ok && has_skip(c)) ok = same_bits("partial g", c, c->gv, c->dskip, act_bytes(c));
    return ok;
}

/* a groups variant: its sums against the host's, its statistics against lib's (see the header) */
static int check_groups(bn_case *c, const variant *v) {
    const int64_t C = c->C;
    int ok = 1;
    char tuned[32]; /* dt_bn_nhwc_tuned's variant: the same bits as lib */
    snprintf(tuned, sizeof tuned, "t%d_a%d", dt_bn_nhwc_tuned::group_threads, dt_bn_nhwc_tuned::group_acc);
    const int is_lib = !strcmp(v->name, "lib") || !strcmp(v->name, tuned);
    if (v->sums) {
        v->sums(c);
        double *got = (double *)dt_xmalloc((size_t)C * 2 * sizeof(double));
        double *h = (double *)dt_xmalloc((size_t)c->G * C * 2 * sizeof(double));
        dt_copy_d2h(got, c->gsums, (size_t)C * 2 * sizeof(double));
        dt_copy_d2h(h, c->groups, (size_t)c->G * C * 2 * sizeof(double));
        for (int64_t k = 0; k < C && ok; k++)
            for (int j = 0; j < 2 && ok; j++) {
                double sum = 0, abs = 0;
                for (int64_t g = 0; g < c->G; g++) sum += h[(g * C + k) * 2 + j], abs += fabs(h[(g * C + k) * 2 + j]);
                if (!(fabs(got[2 * k + j] - sum) <= 1e-12 * abs)) {
                    printf("FAIL %s %s groups %s: channel %lld sum %d %.17g vs the host's %.17g\n", c->s->stage,
                           KIND_NAME[c->s->kind], v->name, (long long)k, j, got[2 * k + j], sum);
                    g_failures++;
                    ok = 0;
                }
            }
        free(got), free(h);
    }
    float *m = (float *)dt_xmalloc((size_t)C * 2 * sizeof(float)), *is = m + C;
    dt_copy_d2h(m, c->meanv, (size_t)C * sizeof(float));
    dt_copy_d2h(is, c->invstdv, (size_t)C * sizeof(float));
    for (int64_t k = 0; k < C && ok; k++) {
        const int same = !memcmp(&m[k], &c->mean_g[k], sizeof(float)) && !memcmp(&is[k], &c->invstd_g[k], sizeof(float));
        const int near = fabsf(m[k] - c->mean_g[k]) <= ldexpf(fabsf(c->mean_g[k]), -20) + 1e-12f &&
                         fabsf(is[k] - c->invstd_g[k]) <= ldexpf(fabsf(c->invstd_g[k]), -20);
        if (is_lib ? !same : !near) {
            printf("FAIL %s %s groups %s: channel %lld mean %.9g 1/std %.9g vs lib's %.9g %.9g\n", c->s->stage,
                   KIND_NAME[c->s->kind], v->name, (long long)k, m[k], is[k], c->mean_g[k], c->invstd_g[k]);
            g_failures++;
            ok = 0;
        }
    }
    free(m);
    return ok;
}

static int check_apply(bn_case *c, const variant *v) { return same_bits(v->name, c, c->yv, c->y, act_bytes(c)); }
static int check_dx(bn_case *c, const variant *v) { return same_bits(v->name, c, c->dxv, c->dx, act_bytes(c)); }

/* ================================================================== timing and the table */

static int g_warmup = 3, g_reps = 20;

static void run_fn(void *p) {
    void **a = (void **)p;
    ((pass_fn)a[0])((bn_case *)a[1]);
}
static double time_us(pass_fn fn, bn_case *c) {
    void *a[2] = {(void *)fn, c};
    return 1e3 * dt_bench_time(run_fn, a, g_warmup, g_reps);
}

/* bytes one pass moves on shape c (see the header comment) */
static double pass_bytes(const char *pass, const bn_case *c) {
    const double e = (double)act_bytes(c);
    if (!strcmp(pass, "apply")) return e * (2 + has_skip(c));
    if (!strcmp(pass, "partial")) return e * (2 + 2 * has_skip(c));
    if (!strcmp(pass, "groups")) return (double)c->G * c->C * 2 * sizeof(double);
    return 3 * e;
}

static void print_head(const char *pass, bn_case *cases, int n) {
    printf("\n## %s (us a call; `step`: the shapes times their counts; GB/s of the stem or the first shape)\n%-12s", pass,
           "variant");
    for (int i = 0; i < n; i++) {
        char h[32];
        snprintf(h, sizeof h, "%s %s", cases[i].s->stage, KIND_NAME[cases[i].s->kind]);
        printf(" %10s", h);
    }
    printf(" %10s %8s\n", "step", "GB/s");
}

static void print_row(const char *pass, const char *name, const double *us, bn_case *cases, int n) {
    double step = 0;
    printf("%-12s", name);
    for (int i = 0; i < n; i++) {
        if (us[i] < 0) printf(" %10s", "FAIL");
        else printf(" %10.1f", us[i]);
        step += us[i] < 0 ? 0 : us[i] * cases[i].s->count;
    }
    printf(" %10.1f %8.0f\n", step, us[0] > 0 ? pass_bytes(pass, &cases[0]) / (us[0] * 1e-6) / 1e9 : 0.0);
}

/* One pass's table: each variant run, checked, then timed on every shape (not timed where it
 * fails). */
static void run_pass(const char *pass, const variant *vs, int nv, int (*check)(bn_case *, const variant *),
                     bn_case *cases, int n) {
    print_head(pass, cases, n);
    for (int v = 0; v < nv; v++) {
        double us[N_SHAPES];
        for (int i = 0; i < n; i++) {
            vs[v].fn(&cases[i]);
            us[i] = check(&cases[i], &vs[v]) ? time_us(vs[v].fn, &cases[i]) : -1;
        }
        print_row(pass, vs[v].name, us, cases, n);
    }
}

static int has(const char *list, const char *name) { return strstr(list, name) != NULL; }

int main(int argc, char **argv) {
    dt_set_fatal_handler(exit);
    int batch = 64;
    const char *only = NULL, *passes = "apply,partial,dx,groups";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) g_reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) g_warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--pass") && i + 1 < argc) passes = argv[++i];
        else {
            fprintf(stderr, "usage: bn_lab [--batch 64] [--reps 20] [--warmup 3] [--only SUBSTR] [--pass apply,partial,dx,groups]\n");
            return 2;
        }
    }
    if (batch < 1 || g_reps < 1 || g_warmup < 0) {
        fprintf(stderr, "bn_lab: --batch and --reps must be at least 1, --warmup at least 0\n");
        return 2;
    }
    if (dt_gpu_count() == 0) {
        fprintf(stderr, "bn_lab: no CUDA GPU visible\n");
        return 1;
    }
    dt_gpu_init(0);
    printf("# batch-norm lab: bf16 NHWC, ResNet-18's batch norms at batch %d; copy rate %.0f GB/s; lib = the "
           "library's entry points (dt_bn_nhwc_tuned)\n", batch, dt_bench_copy_rate() / 1e9);

    bn_case cases[N_SHAPES];
    int n = 0;
    for (int i = 0; i < N_SHAPES; i++) {
        const bn_shape *s = &SHAPES[i];
        char label[32];
        snprintf(label, sizeof label, "%s %s", s->stage, KIND_NAME[s->kind]);
        if (only && !strstr(label, only)) continue;
        bn_case *c = &cases[n++];
        memset(c, 0, sizeof *c);
        c->s = s, c->N = batch, c->C = s->C, c->R = (int64_t)batch * s->H * s->H;
        const size_t e = act_bytes(c), ne = e / sizeof(bf16);
        bf16 **acts[] = {&c->x, &c->dy, &c->y, &c->dx, &c->yv, &c->dxv};
        for (bf16 **a : acts) *a = (bf16 *)dt_gpu_malloc(e);
        if (has_skip(c)) c->skip = (bf16 *)dt_gpu_malloc(e), c->dskip = (bf16 *)dt_gpu_malloc(e), c->gv = (bf16 *)dt_gpu_malloc(e);
        float **vecs[] = {&c->mean, &c->invstd, &c->w, &c->b, &c->rm, &c->rv, &c->dw, &c->db};
        for (float **v : vecs) *v = (float *)dt_gpu_malloc((size_t)c->C * sizeof(float));
        c->ws = dt_gpu_malloc(dt_bn_ws_bytes(c->C));
        c->wsv = (double *)dt_gpu_malloc((size_t)c->C * DT_BN_MAX_SPLITS * 2 * sizeof(double));
        c->part_lib = (double *)dt_xmalloc((size_t)c->C * DT_BN_MAX_SPLITS * 2 * sizeof(double));
        c->abs_sums = (double *)dt_xmalloc((size_t)c->C * 2 * sizeof(double));
        dt_bf16 *h = (dt_bf16 *)dt_xmalloc(e);
        /* x with a per-channel offset and spread (a conv's output); dy, skip centred */
        for (size_t k = 0; k < ne; k++) h[k] = dt_bf16_from_float(urand(-1.5f, 1.5f) * (1 + (k % c->C) % 3) + 0.25f * ((k % c->C) % 5));
        dt_copy_h2d(c->x, h, e);
        fill_bf16(c->dy, ne, -1, 1, h);
        if (has_skip(c)) fill_bf16(c->skip, ne, -1, 1, h);
        free(h);
        fill_f32(c->w, c->C, 0.5f, 1.5f), fill_f32(c->b, c->C, -0.5f, 0.5f);
        fill_f32(c->rm, c->C, 0, 0), fill_f32(c->rv, c->C, 1, 1);
        dt_bn_stats_bf16_nhwc_cuda(c->N, c->C, c->R / c->N, c->x, 1, 1e-5f, 0.1f, c->rm, c->rv, c->mean, c->invstd, c->ws,
                                   NULL);
        /* the groups: sums of 64 rows of a conv output with a per-channel mean around 0.5 and a
         * spread of 1 (sum x ~ 32 +- 8, sum x^2 ~ 80 +- 16), and lib's statistics from them */
        c->G = dt_ceil_div(c->R, 64);
        {
            const size_t ng = (size_t)c->G * c->C * 2;
            double *hg = (double *)dt_xmalloc(ng * sizeof(double));
            for (size_t k = 0; k < ng; k += 2) hg[k] = urand(24, 40), hg[k + 1] = urand(64, 96);
            c->groups = (double *)dt_gpu_malloc(ng * sizeof(double));
            dt_copy_h2d(c->groups, hg, ng * sizeof(double));
            free(hg);
        }
        c->gsums = (double *)dt_gpu_malloc((size_t)c->C * 2 * sizeof(double));
        c->meanv = (float *)dt_gpu_malloc((size_t)c->C * sizeof(float));
        c->invstdv = (float *)dt_gpu_malloc((size_t)c->C * sizeof(float));
        c->mean_g = (float *)dt_xmalloc((size_t)c->C * 2 * sizeof(float)), c->invstd_g = c->mean_g + c->C;
        lib_groups(c);
        dt_copy_d2h(c->mean_g, c->meanv, (size_t)c->C * sizeof(float));
        dt_copy_d2h(c->invstd_g, c->invstdv, (size_t)c->C * sizeof(float));
        lib_apply(c, c->y);
        lib_backward(c);
        c->S_lib = splits_at(c, dt_bn_nhwc_tuned_shape.splits_per_sm);
        dt_gpu_sync();
        check_lib(c);
    }

    if (has(passes, "apply")) run_pass("apply", APPLY, COUNT(APPLY), check_apply, cases, n);
    if (has(passes, "partial")) run_pass("partial", PARTIAL, COUNT(PARTIAL), check_partial, cases, n);
    if (has(passes, "dx")) run_pass("dx", DX, COUNT(DX), check_dx, cases, n);
    if (has(passes, "groups")) run_pass("groups", GROUPS, COUNT(GROUPS), check_groups, cases, n);
    printf("\n%s: %d failure(s)\n", g_failures ? "FAILED" : "all variants valid", g_failures);
    return g_failures ? 1 : 0;
}
