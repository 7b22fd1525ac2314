/* A grouped conv (dt_conv2d_grouped) is the dense conv of its block-diagonal weight (a
 * depthwise one runs on the depthwise family, and is checked against the column path forced by
 * conv_algo=gemm too): the dense
 * weight [Cout, C, kh, kw] holds group j's [Cout/G, C/G, kh, kw] block at output rows
 * [j*Cout/G, +Cout/G) and input channels [j*C/G, +C/G), zeros elsewhere. Both run on the same
 * device and inputs in f32 NCHW, f32 NHWC and bf16 NHWC: y and dx must agree, and the grouped dW
 * must be the dense dW's diagonal blocks - within 1e-5 in f32 (the same products, summed in
 * another blocking), and within the bf16 format bound (2^-6 relative L2) of the f32 NCHW dense
 * conv in bf16. The CPU test and its GPU twin (device memory NaN-poisoned by the runner). */
#include <stdlib.h>
#include <string.h>

#include "core/dt_param.h"
#include "ops/conv/depthwise.h"
#include "ops/dt_layers.h"
#include "tests/dt_check.h"
#include "tests/dt_test.h"

typedef struct {
    const char *name;
    int64_t N, C, H, W, Cout, groups;
    dt_conv_geom g;
    int chunk; /* images per chunk (0: the default budget) */
} groups_case;

static const groups_case cases[] = {
    {"groups 2, 3x3 s1 pad 1, odd sizes", 3, 6, 7, 9, 4, 2, {3, 3, 1, 1, 1, 1, 1, 1}, 0},
    {"groups 3, 3x3 s2 pad 1, dilation 2", 2, 9, 11, 10, 6, 3, {3, 3, 2, 2, 1, 1, 2, 2}, 0},
    {"depthwise C = 5, 3x3 s2 pad 1", 3, 5, 9, 8, 5, 5, {3, 3, 2, 2, 1, 1, 1, 1}, 0},
    {"depthwise C = 4, multiplier 3, 2x3 dilation 2", 2, 4, 8, 9, 12, 4, {2, 3, 1, 1, 1, 2, 2, 2}, 0},
    {"groups 2, 1x1 s1 (columns = input)", 3, 6, 5, 7, 8, 2, {1, 1, 1, 1, 0, 0, 1, 1}, 0},
    {"groups 3, 3x3, prime batch 5 in chunks of 2", 5, 6, 6, 7, 9, 3, {3, 3, 1, 1, 1, 1, 1, 1}, 2},
    /* the depthwise family (groups = C; ops/conv/depthwise.h): multipliers 1-3, odd C and
     * multiples of the 16-byte vectors (4 f32, 8 bf16), paddings whose last window runs past
     * the image by another amount than the first (asymmetric in effect) */
    {"depthwise 1x1 s1, C = 7", 2, 7, 5, 6, 7, 7, {1, 1, 1, 1, 0, 0, 1, 1}, 0},
    {"depthwise 1x1 s2 pad 1, C = 8, multiplier 2", 1, 8, 7, 7, 16, 8, {1, 1, 2, 2, 1, 1, 1, 1}, 0},
    {"depthwise 3x3 s1 pad 1, C = 16, batch 3", 3, 16, 9, 10, 16, 16, {3, 3, 1, 1, 1, 1, 1, 1}, 0},
    {"depthwise 3x3 s2 pad 1, C = 5, multiplier 2, odd sizes", 2, 5, 10, 9, 10, 5, {3, 3, 2, 2, 1, 1, 1, 1}, 0},
    {"depthwise 3x3 dilation 4 pad 4, C = 8", 1, 8, 13, 12, 8, 8, {3, 3, 1, 1, 4, 4, 4, 4}, 0},
    {"depthwise 3x3 dilation 16 pad 16, C = 4", 1, 4, 36, 35, 4, 4, {3, 3, 1, 1, 16, 16, 16, 16}, 0},
    {"depthwise 3x3 s2 dilation 2 pad 0, C = 6, multiplier 3", 3, 6, 12, 11, 18, 6, {3, 3, 2, 2, 0, 0, 2, 2}, 0},
    {"depthwise 5x5 s2 dilation 2 pad 3, C = 7, multiplier 2", 2, 7, 15, 14, 14, 7, {5, 5, 2, 2, 3, 3, 2, 2}, 0},
    {"depthwise 7x7 s1 pad 3, C = 9", 2, 9, 11, 10, 9, 9, {7, 7, 1, 1, 3, 3, 1, 1}, 0},
    {"depthwise 7x7 s2 pad 3, C = 8, multiplier 2", 1, 8, 16, 15, 16, 8, {7, 7, 2, 2, 3, 3, 1, 1}, 0},
    {"depthwise 1-D k 1 dilation 4, C = 5", 2, 5, 1, 37, 5, 5, {1, 1, 1, 1, 0, 0, 1, 4}, 0},
    {"depthwise 1-D k 4 dilation 2 pad 3, C = 8, multiplier 2", 2, 8, 1, 41, 16, 8, {1, 4, 1, 1, 0, 3, 1, 2}, 0},
    {"depthwise 1-D k 16 dilation 4 pad 30, C = 7", 1, 7, 1, 70, 7, 7, {1, 16, 1, 1, 0, 30, 1, 4}, 0},
    {"depthwise 1-D k 16 s2 dilation 16 pad 120, C = 8", 2, 8, 1, 300, 8, 8, {1, 16, 1, 2, 0, 120, 1, 16}, 0},
    {"depthwise 1-D k 64 pad 32, C = 5, multiplier 2", 1, 5, 1, 100, 10, 5, {1, 64, 1, 1, 0, 32, 1, 1}, 0},
    {"depthwise 1-D k 64 dilation 128, long input, C = 3", 1, 3, 1, 8200, 3, 3, {1, 64, 1, 1, 0, 0, 1, 128}, 0},
    {"depthwise 1-D k 4 s2 dilation 128 pad 200, C = 4, multiplier 2", 2, 4, 1, 900, 8, 4, {1, 4, 1, 2, 0, 200, 1, 128}, 0},
};

static int is_depthwise(const groups_case *k) { return k->groups == k->C && k->C > 1; }

typedef struct {
    float *y, *dx, *dw; /* logical values, host */
} result;

static void result_free(result *r) { free(r->y), free(r->dx), free(r->dw); }

/* conv of x (logical values) by w [Cout, C/groups, kh, kw] on dev in (dtype, layout), then its
 * backward from R: y, dx, dw (the f32 master's gradient) as logical values. */
static result run_algo(const groups_case *k, dt_dev dev, dt_dtype dtype, dt_layout layout, const float *xv,
                       const float *wv, int64_t groups, const float *R, dt_conv_algo algo) {
    dt_params ps = {0};
    int64_t xs[4] = {k->N, k->C, k->H, k->W}, ws[4] = {k->Cout, k->C / groups, k->g.kh, k->g.kw};
    dt_tensor *x = dt_tensor_from_values(4, xs, dev, dtype, layout, xv);
    dt_requires_grad(x);
    dt_tensor *m = dt_param_new(&ps, "w", 4, ws, dev, layout, 1);
    dt_tensor_set_values(m, wv);
    dt_tensor *w = m;
    if (dtype == DT_BF16) {
        w = dt_param_make_work(&ps, m);
        dt_params_refresh_work(&ps);
    }
    size_t saved = dt_conv_col_budget();
    if (k->chunk) {
        int64_t Ho = dt_conv_out_size(k->H, k->g.kh, k->g.sh, k->g.ph, k->g.dh);
        int64_t Wo = dt_conv_out_size(k->W, k->g.kw, k->g.sw, k->g.pw, k->g.dw);
        dt_conv_set_col_budget((size_t)(k->chunk * k->C * k->g.kh * k->g.kw * Ho * Wo) * dt_dtype_size(dtype));
    }
    dt_tensor *y = groups > 1 ? dt_conv2d_grouped_algo(x, w, NULL, k->g, groups, DT_MATH_FP32, algo)
                              : dt_conv2d(x, w, NULL, k->g, DT_MATH_FP32);
    y->retain = 1;
    dt_backward_with(y, dt_tensor_from_values(4, y->shape, dev, y->dtype, y->layout, R));
    dt_conv_set_col_budget(saved);
    result r = {dt_tensor_host_copy(y), dt_tensor_host_copy(x->grad), dt_tensor_host_copy(m->grad)};
    dt_params_free(&ps);
    return r;
}

static result run(const groups_case *k, dt_dev dev, dt_dtype dtype, dt_layout layout, const float *xv,
                  const float *wv, int64_t groups, const float *R) {
    return run_algo(k, dev, dtype, layout, xv, wv, groups, R, DT_CONV_ALGO_DEFAULT);
}

/* w's blocks [Cout/G, C/G, kh, kw] onto the diagonal of dense [Cout, C, kh, kw] (to_dense), or
 * the diagonal blocks of dense back into w */
static void diagonal(const groups_case *k, float *dense, float *w, int to_dense) {
    const int64_t cg = k->C / k->groups, og = k->Cout / k->groups, taps = (int64_t)k->g.kh * k->g.kw;
    for (int64_t o = 0; o < k->Cout; o++)
        for (int64_t c = 0; c < cg; c++)
            for (int64_t t = 0; t < taps; t++) {
                float *d = &dense[(o * k->C + (o / og) * cg + c) * taps + t], *g = &w[(o * cg + c) * taps + t];
                if (to_dense) *d = *g;
                else *g = *d;
            }
}

static void check_case(const groups_case *k, dt_dev dev) {
    const int64_t Ho = dt_conv_out_size(k->H, k->g.kh, k->g.sh, k->g.ph, k->g.dh);
    const int64_t Wo = dt_conv_out_size(k->W, k->g.kw, k->g.sw, k->g.pw, k->g.dw);
    const int64_t nx = k->N * k->C * k->H * k->W, nw = k->Cout * (k->C / k->groups) * k->g.kh * k->g.kw;
    const int64_t ny = k->N * k->Cout * Ho * Wo, nd = k->Cout * k->C * k->g.kh * k->g.kw;
    float *xv = malloc(sizeof(float) * nx), *wv = malloc(sizeof(float) * nw), *R = malloc(sizeof(float) * ny);
    float *dense = calloc((size_t)nd, sizeof(float)), *dw_diag = malloc(sizeof(float) * nw);
    dt_rng_fill_normal(dt_test_rng(), xv, nx, 0.0f, 1.0f);
    dt_rng_fill_normal(dt_test_rng(), wv, nw, 0.0f, 0.3f);
    dt_rng_fill_normal(dt_test_rng(), R, ny, 0.0f, 1.0f);
    diagonal(k, dense, wv, 1);
    result ref = run(k, dev, DT_F32, DT_NCHW, xv, dense, 1, R); /* the f32 NCHW dense conv */
    const struct {
        dt_dtype dtype;
        dt_layout layout;
        const char *name;
    } combos[] = {{DT_F32, DT_NCHW, "f32 nchw"}, {DT_F32, DT_NHWC, "f32 nhwc"}, {DT_BF16, DT_NHWC, "bf16 nhwc"}};
    for (int i = 0; i < 3; i++) {
        const double tol = combos[i].dtype == DT_BF16 ? 1.0 / 64 : 1e-5;
        result gr = run(k, dev, combos[i].dtype, combos[i].layout, xv, wv, k->groups, R);
        /* f32: against the dense conv in the same layout (the same products); bf16: the reference */
        result de = combos[i].dtype == DT_BF16 ? (result){0} : run(k, dev, combos[i].dtype, combos[i].layout, xv, dense, 1, R);
        const result *want = combos[i].dtype == DT_BF16 ? &ref : &de;
        diagonal(k, want->dw, dw_diag, 0);
        char what[192];
        snprintf(what, sizeof what, "%s %s %s: y", dt_dev_name(dev), k->name, combos[i].name);
        EXPECT(dt_expect_close(what, gr.y, want->y, ny, tol));
        snprintf(what, sizeof what, "%s %s %s: dx", dt_dev_name(dev), k->name, combos[i].name);
        EXPECT(dt_expect_close(what, gr.dx, want->dx, nx, tol));
        snprintf(what, sizeof what, "%s %s %s: dW", dt_dev_name(dev), k->name, combos[i].name);
        EXPECT(dt_expect_close(what, gr.dw, dw_diag, nw, tol));
        if (is_depthwise(k)) { /* the column path, forced (conv_algo=gemm), computes the same conv */
            result co = run_algo(k, dev, combos[i].dtype, combos[i].layout, xv, wv, k->groups, R, DT_CONV_ALGO_GEMM);
            snprintf(what, sizeof what, "%s %s %s: y, column path", dt_dev_name(dev), k->name, combos[i].name);
            EXPECT(dt_expect_close(what, co.y, gr.y, ny, tol));
            snprintf(what, sizeof what, "%s %s %s: dx, column path", dt_dev_name(dev), k->name, combos[i].name);
            EXPECT(dt_expect_close(what, co.dx, gr.dx, nx, tol));
            snprintf(what, sizeof what, "%s %s %s: dW, column path", dt_dev_name(dev), k->name, combos[i].name);
            EXPECT(dt_expect_close(what, co.dw, gr.dw, nw, tol));
            result_free(&co);
        }
        result_free(&gr), result_free(&de);
    }
    result_free(&ref);
    free(xv), free(wv), free(R), free(dense), free(dw_diag);
}

DT_TEST(conv2d_grouped_is_dense_block_diagonal) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i], DT_CPU);
}

DT_GPU_TEST(gpu_conv2d_grouped_is_dense_block_diagonal) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i], DT_GPU);
}

/* The depthwise kernels against their CPU twins, each format: y and dx bit for bit (both sum
 * with fused multiply-adds in one order and round once), dW within 1e-5 (the twin sums in
 * double, the GPU in fp32 tiles); and a second GPU run bit for bit the first (the wgrad's
 * fixed-order partials, no atomics). Fresh random inputs; the runner NaN-poisons device memory. */
static void expect_same_bits(const char *what, const float *a, const float *b, int64_t n) {
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) && bad++ == 0) first = i;
    EXPECT_MSG(bad == 0, "%s: %lld of %lld elements differ in their bits (first at %lld: %.9g vs %.9g)", what,
               (long long)bad, (long long)n, (long long)first, first >= 0 ? a[first] : 0.0, first >= 0 ? b[first] : 0.0);
}

DT_GPU_TEST(gpu_depthwise_matches_twins_bitwise_run_to_run) {
    const struct {
        dt_dtype dtype;
        dt_layout layout;
        const char *name;
    } combos[] = {{DT_F32, DT_NCHW, "f32 nchw"}, {DT_F32, DT_NHWC, "f32 nhwc"}, {DT_BF16, DT_NHWC, "bf16 nhwc"}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const groups_case *k = &cases[c];
        if (!is_depthwise(k)) continue;
        const dt_conv_problem pr = dt_conv_problem_of(k->N, k->C, k->H, k->W, k->Cout, k->g, k->groups);
        EXPECT_MSG(dt_dw_gpu_supported(&pr), "%s: not on the GPU's depthwise kernels", k->name);
        const int64_t nx = k->N * k->C * k->H * k->W, nw = k->Cout * k->g.kh * k->g.kw, ny = k->N * k->Cout * pr.Ho * pr.Wo;
        float *xv = malloc(sizeof(float) * nx), *wv = malloc(sizeof(float) * nw), *R = malloc(sizeof(float) * ny);
        dt_rng_fill_normal(dt_test_rng(), xv, nx, 0.0f, 1.0f);
        dt_rng_fill_normal(dt_test_rng(), wv, nw, 0.0f, 0.3f);
        dt_rng_fill_normal(dt_test_rng(), R, ny, 0.0f, 1.0f);
        for (int i = 0; i < 3; i++) {
            result cpu = run(k, DT_CPU, combos[i].dtype, combos[i].layout, xv, wv, k->groups, R);
            result g1 = run(k, DT_GPU, combos[i].dtype, combos[i].layout, xv, wv, k->groups, R);
            result g2 = run(k, DT_GPU, combos[i].dtype, combos[i].layout, xv, wv, k->groups, R);
            char what[192];
            snprintf(what, sizeof what, "%s %s: y against the twin", k->name, combos[i].name);
            expect_same_bits(what, g1.y, cpu.y, ny);
            snprintf(what, sizeof what, "%s %s: dx against the twin", k->name, combos[i].name);
            expect_same_bits(what, g1.dx, cpu.dx, nx);
            snprintf(what, sizeof what, "%s %s: dW against the twin", k->name, combos[i].name);
            EXPECT(dt_expect_close(what, g1.dw, cpu.dw, nw, 1e-5));
            snprintf(what, sizeof what, "%s %s: y run to run", k->name, combos[i].name);
            expect_same_bits(what, g2.y, g1.y, ny);
            snprintf(what, sizeof what, "%s %s: dx run to run", k->name, combos[i].name);
            expect_same_bits(what, g2.dx, g1.dx, nx);
            snprintf(what, sizeof what, "%s %s: dW run to run", k->name, combos[i].name);
            expect_same_bits(what, g2.dw, g1.dw, nw);
            result_free(&cpu), result_free(&g1), result_free(&g2);
        }
        free(xv), free(wv), free(R);
    }
}

/* ---- argument checks */

/* dt_conv2d_grouped of x [1, 6, 8, 8] with a weight [cout, cin_per_group, 3, 3] in `groups` groups */
typedef struct {
    int64_t cout, cin_per_group;
    int groups;
} bad_grouping;
static void conv_bad_grouping(void *a) {
    const bad_grouping *b = a;
    dt_conv2d_grouped(dt_tensor_new4(DT_CPU, 1, 6, 8, 8), dt_tensor_new4(DT_CPU, b->cout, b->cin_per_group, 3, 3), NULL,
                      dt_geom(3, 1, 1, 1), b->groups, DT_MATH_FP32);
}

DT_TEST(conv2d_grouped_bad_shapes_are_clear_errors) {
    bad_grouping c = {4, 1, 4}, cout = {4, 2, 3}, weight = {6, 6, 3}, zero = {6, 6, 0};
    EXPECT_DEATH(conv_bad_grouping, &c, "4 groups do not divide input [1, 6, 8, 8]'s 6 channels");
    EXPECT_DEATH(conv_bad_grouping, &cout, "3 groups do not divide input [1, 6, 8, 8]'s 6 channels and weight [4, 2, 3, 3]'s 4 output channels");
    EXPECT_DEATH(conv_bad_grouping, &weight, "weight [6, 6, 3, 3] does not fit input [1, 6, 8, 8] with a 3x3 kernel in 3 groups (expected [Cout, 2, 3, 3])");
    EXPECT_DEATH(conv_bad_grouping, &zero, "0 groups do not divide");
}
