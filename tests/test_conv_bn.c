/* conv + batch-norm statistics (dt_conv_bn, ops/batchnorm/batchnorm_op.c): the conv's fprop
 * makes the batch norm's per-channel sums in its epilogue (the Hopper engine on the GPU, the
 * implicit GEMM's twin on the CPU), the batch norm takes them instead of reading its input.
 *
 * - op cases (dt_opcase.h) with conv_algo=sm90: the bf16 mode runs the CPU twins' fused form
 *   against the unfused f32 reference; the parity mode the engine's epilogue against the twins
 *   - every tile the engine picks (128x64, 256x64, 128x128, 256x128, 128x256), M tails, Cout
 *   not a multiple of the tile, the columns path (the stem's C = 3) also in chunks, the join
 *   with a skip, eval (no fusion); the ReLU cases shift the batch norm's bias by +-8 a channel,
 *   away from the kink where a bf16 rounding would flip the mask;
 * - on the CPU the fused op is the unfused pair bit for bit (outputs, statistics, running
 *   estimates: the twin and the batch norm sum the same values in the same order);
 * - on the GPU the epilogue's sums are those of the y it stored (recomputed here in double), the
 *   same bits run to run, and the fused step matches the unfused one. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dt_alloc.h"
#include "core/dt_common.h"
#include "core/dt_device.h"
#include "core/dt_dtype.h"
#include "ops/dt_layers.h"
#include "ops/dt_ops.h"
#include "tests/dt_opcase.h"
#include "tests/dt_test.h"

typedef struct {
    dt_conv_geom g;
    int relu, skip, training;
    size_t col_budget; /* 0: the process's; else the column budget while the case runs */
} conv_bn_arg;

typedef struct {
    dt_batchnorm bn; /* weight and bias: the case's inputs, set by build */
    size_t saved_budget;
    dt_tensor *shift; /* relu cases: +-8 per channel, added to the batch norm's bias */
} conv_bn_state;

static void *state_new(const dt_opcase *c, dt_dev dev, dt_layout layout) {
    (void)layout;
    const conv_bn_arg *a = c->arg;
    conv_bn_state *s = dt_xcalloc(1, sizeof *s);
    const int64_t C = c->in[1].shape[0];
    dt_batchnorm_init(&s->bn, NULL, "case.bn", C, dev);
    s->saved_budget = dt_conv_col_budget();
    if (a->col_budget) dt_conv_set_col_budget(a->col_budget);
    return s;
}

static void state_free(void *state) {
    conv_bn_state *s = state;
    dt_conv_set_col_budget(s->saved_budget);
    if (s->shift) dt_tensor_free(s->shift);
    dt_tensor_free(s->bn.weight);
    dt_tensor_free(s->bn.bias);
    dt_batchnorm_free(&s->bn);
    free(s);
}

static dt_tensor *build(const dt_opcase *c, dt_tensor **in, void *state) {
    const conv_bn_arg *a = c->arg;
    conv_bn_state *s = state;
    dt_tensor *w0 = s->bn.weight, *b0 = s->bn.bias;
    s->bn.weight = in[2], s->bn.bias = in[3];
    if (a->relu) { /* the pre-activation ~ N(+-8, |gamma|), gamma ~ N(0, 1/4): a bf16 rounding never flips the mask */
        if (!s->shift) {
            const int64_t C = in[3]->numel;
            float *v = dt_xmalloc((size_t)C * sizeof *v);
            for (int64_t k = 0; k < C; k++) v[k] = k % 2 ? -8.0f : 8.0f;
            s->shift = dt_tensor_from_values(1, in[3]->shape, in[3]->dev, DT_F32, DT_NCHW, v);
            dt_tensor_keep(s->shift);
            free(v);
        }
        s->bn.bias = dt_add(in[3], s->shift);
    }
    dt_tensor_fill(s->bn.running_mean, 0.0f);
    dt_tensor_fill(s->bn.running_var, 1.0f);
    dt_tensor *y = dt_conv_bn(in[0], in[1], a->g, DT_MATH_FP32, DT_CONV_ALGO_SM90, &s->bn, a->skip ? in[4] : NULL,
                              a->training, a->relu);
    s->bn.weight = w0, s->bn.bias = b0; /* the state's own, freed with it */
    return y;
}

/* x [n, cin, h, w], w [cout, cin, k, k], bn weight and bias [cout], skip like the output */
#define CB_CASE(label, n, cin, h, w, cout, kh, kw, ho, wo, wstd, relu_, skip_, train, budget, ...)                   \
    {.name = label, .ops = {"conv2d (implicit GEMM, fprop)", "batchnorm2d"}, .n_in = (skip_) ? 5 : 4, .grad_tol = -1, \
     .in = {{4, {n, cin, h, w}, DT_IN_ACT, 1.0f, 1},                                                                \
            {4, {cout, cin, kh, kw}, DT_IN_WEIGHT, wstd, 1},                                                        \
            {1, {cout}, DT_IN_F32, 0.5f, 1},                                                                        \
            {1, {cout}, DT_IN_F32, 0.5f, 1},                                                                        \
            {4, {n, cout, ho, wo}, DT_IN_ACT, 1.0f, 1}},                                                            \
     .build = build, .state_new = state_new, .state_free = state_free,                                             \
     .arg = &(const conv_bn_arg){{__VA_ARGS__}, relu_, skip_, train, budget}}

static const dt_opcase conv_bn_cases[] = {
    CB_CASE("conv+bn 3x3 56x56 batch 2, 64 -> 64 (128x64 tiles, 98 groups), relu", 2, 64, 56, 56, 64, 3, 3, 56, 56,
            0.05f, 1, 0, 1, 0, 3, 3, 1, 1, 1, 1, 1, 1),
    CB_CASE("conv+bn 3x3 odd 13x11 batch 3, 64 -> 72 (128x128, an M tail, Cout past a tile)", 3, 64, 13, 11, 72, 3, 3,
            13, 11, 0.05f, 0, 0, 1, 0, 3, 3, 1, 1, 1, 1, 1, 1),
    CB_CASE("conv+bn 3x3 s2 17x15, 64 -> 256 (256x128), relu", 2, 64, 17, 15, 256, 3, 3, 9, 8, 0.05f, 1, 0, 1, 0, 3,
            3, 2, 2, 1, 1, 1, 1),
    CB_CASE("conv+bn 1x1 pointwise 30x30, 64 -> 64 (256x64)", 2, 64, 30, 30, 64, 1, 1, 30, 30, 0.1f, 0, 0, 1, 0, 1,
            1, 1, 1, 0, 0, 1, 1),
    CB_CASE("conv+bn 1x1 pointwise 9x7, 64 -> 512 (128x256)", 3, 64, 9, 7, 512, 1, 1, 9, 7, 0.1f, 0, 0, 1, 0, 1, 1, 1,
            1, 0, 0, 1, 1),
    CB_CASE("conv+bn 3x3 + skip + relu (the join), 64 -> 64", 2, 64, 9, 10, 64, 3, 3, 9, 10, 0.05f, 1, 1, 1, 0, 3, 3,
            1, 1, 1, 1, 1, 1),
    CB_CASE("conv+bn 7x7 s2 stem, C = 3 (columns), relu", 3, 3, 45, 45, 64, 7, 7, 23, 23, 0.1f, 1, 0, 1, 0, 7, 7, 2,
            2, 3, 3, 1, 1),
    CB_CASE("conv+bn 7x7 s2 stem in 3 chunks of columns (groups per chunk)", 3, 3, 45, 45, 64, 7, 7, 23, 23, 0.1f, 0,
            0, 1, 23 * 23 * 152 * 2, 7, 7, 2, 2, 3, 3, 1, 1),
    CB_CASE("conv+bn eval (running statistics: no fusion), relu", 2, 64, 9, 9, 64, 3, 3, 9, 9, 0.05f, 1, 0, 0, 0, 3,
            3, 1, 1, 1, 1, 1, 1),
};
DT_OPCASES_NO_GRADCHECK(conv_bn, conv_bn_cases)

/* ---- the fused op against the unfused pair, and the epilogue's sums against its output */

typedef struct {
    dt_tensor *y;      /* the batch norm's output */
    float *mean, *var; /* the running estimates after the step, [C] on the host */
} step_out;

/* a malloc'd fp32 copy in logical order */
static float *host_floats(const dt_tensor *t) { return dt_tensor_host_copy(t); }

/* one training forward of conv (algo sm90) + bn + relu, fused or as the pair */
static step_out conv_bn_step(dt_tensor *x, dt_tensor *w, dt_conv_geom g, int fused) {
    dt_batchnorm bn;
    dt_batchnorm_init(&bn, NULL, "t.bn", w->shape[0], x->dev);
    step_out o;
    o.y = fused ? dt_conv_bn(x, w, g, DT_MATH_FP32, DT_CONV_ALGO_SM90, &bn, NULL, 1, 1)
                : dt_batchnorm2d(dt_conv2d_algo(x, w, NULL, g, DT_MATH_FP32, DT_CONV_ALGO_SM90), &bn, 1, 1);
    o.mean = host_floats(bn.running_mean);
    o.var = host_floats(bn.running_var);
    dt_tensor_free(bn.weight);
    dt_tensor_free(bn.bias);
    dt_batchnorm_free(&bn);
    return o;
}

/* bf16 NHWC [n, c, h, w] of N(0, std) draws */
static dt_tensor *random_act(dt_dev dev, int64_t n, int64_t c, int64_t h, int64_t w, float std) {
    dt_tensor *t = dt_tensor_new4_as(dev, DT_BF16, DT_NHWC, n, c, h, w);
    dt_tensor_fill_normal(t, dt_test_rng(), 0.0f, std);
    return t;
}

static int same_floats(const float *a, const float *b, int64_t n) { return memcmp(a, b, (size_t)n * sizeof *a) == 0; }

DT_TEST(conv_bn_on_cpu_is_conv_then_bn_bit_for_bit) {
    dt_tensor *x = random_act(DT_CPU, 2, 64, 11, 9, 1.0f), *w = random_act(DT_CPU, 32, 64, 3, 3, 0.05f);
    const dt_conv_geom g = dt_geom(3, 1, 1, 1);
    step_out f = conv_bn_step(x, w, g, 1), u = conv_bn_step(x, w, g, 0);
    float *fy = host_floats(f.y), *uy = host_floats(u.y);
    EXPECT(same_floats(fy, uy, f.y->numel));
    free(fy), free(uy);
    EXPECT(same_floats(f.mean, u.mean, 32) && same_floats(f.var, u.var, 32));
    EXPECT(fabsf(f.var[0] - 0.9f) > 1e-3f); /* the running variance moved: training statistics ran */
    free(f.mean), free(f.var), free(u.mean), free(u.var);
}

/* the sums the engine wrote for x * w, against those of the y it stored, in double */
static void check_epilogue_sums(int64_t n, int64_t cin, int64_t h, int64_t wd, int64_t cout, int k, int stride) {
    dt_tensor *x = random_act(DT_GPU, n, cin, h, wd, 1.0f), *w = random_act(DT_GPU, cout, cin, k, k, 0.05f);
    const dt_conv_geom g = dt_geom(k, stride, k / 2, 1);
    dt_conv_stats st, st2;
    dt_tensor *y = dt_conv2d_stats(x, w, NULL, g, DT_MATH_FP32, DT_CONV_ALGO_SM90, &st);
    dt_conv2d_stats(x, w, NULL, g, DT_MATH_FP32, DT_CONV_ALGO_SM90, &st2);
    if (!st.sums || !st2.sums || st.groups != st2.groups) {
        EXPECT_MSG(0, "the engine made no statistics for %lldx%lld %dx%d -> %lld", (long long)h, (long long)wd, k, k,
                   (long long)cout);
        return;
    }
    const size_t bytes = sizeof(double) * 2 * (size_t)(st.groups * cout);
    double *grp = dt_xmalloc(bytes), *grp2 = dt_xmalloc(bytes);
    dt_copy_d2h(grp, st.sums, bytes);
    dt_copy_d2h(grp2, st2.sums, bytes);
    EXPECT_MSG(memcmp(grp, grp2, bytes) == 0, "the epilogue's sums differ run to run");
    double *s = dt_xcalloc((size_t)(2 * cout), sizeof *s); /* the groups added in group order */
    for (int64_t gi = 0; gi < st.groups; gi++)
        for (int64_t i = 0; i < 2 * cout; i++) s[i] += grp[gi * 2 * cout + i];
    float *yv = host_floats(y); /* logical [N, Cout, Ho, Wo] */
    const int64_t P = y->shape[2] * y->shape[3];
    double worst = 0.0;
    for (int64_t c = 0; c < cout; c++) {
        double a = 0.0, b = 0.0, mag = 0.0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t q = 0; q < P; q++) {
                const double v = yv[(i * cout + c) * P + q];
                a += v, b += v * v, mag += fabs(v);
            }
        /* fp32 over at most 64 rows: relative to the magnitudes summed */
        const double e = fmax(fabs(s[2 * c] - a) / (mag + 1e-30), fabs(s[2 * c + 1] - b) / (b + 1e-30));
        if (e > worst) worst = e;
    }
    EXPECT_MSG(worst < 1e-6, "%lldx%lld %dx%d/%d -> %lld: the epilogue's sums are %.3g off those of its output",
               (long long)h, (long long)wd, k, k, stride, (long long)cout, worst);
    dt_gpu_free(st.sums), dt_gpu_free(st2.sums);
    free(s), free(grp), free(grp2), free(yv);
}

DT_GPU_TEST(gpu_conv_sm90_statistics_are_those_of_its_output) {
    if (!dt_gpu_has_sm90a()) return; /* the engine's refusal is gpu_cases_conv_sm90_parity's */
    check_epilogue_sums(2, 64, 56, 56, 64, 3, 1);  /* 128x64 tiles */
    check_epilogue_sums(3, 64, 13, 11, 72, 3, 1);  /* 128x128, tails */
    check_epilogue_sums(2, 64, 17, 15, 256, 3, 2); /* 256x128 */
    check_epilogue_sums(2, 64, 30, 30, 64, 1, 1);  /* 256x64, dense A */
    check_epilogue_sums(3, 64, 9, 7, 512, 1, 1);   /* 128x256 */
    check_epilogue_sums(3, 3, 45, 45, 64, 7, 2);   /* the columns */
}

DT_GPU_TEST(gpu_conv_bn_fused_matches_the_pair) {
    if (!dt_gpu_has_sm90a()) return;
    dt_tensor *x = random_act(DT_GPU, 4, 64, 28, 28, 1.0f), *w = random_act(DT_GPU, 128, 64, 3, 3, 0.05f);
    const dt_conv_geom g = dt_geom(3, 1, 1, 1);
    step_out f = conv_bn_step(x, w, g, 1), u = conv_bn_step(x, w, g, 0);
    /* the same y of the conv (one kernel), statistics summed in another order: float-close */
    float worst = 0.0f;
    for (int c = 0; c < 128; c++) {
        worst = fmaxf(worst, fabsf(f.mean[c] - u.mean[c]));
        worst = fmaxf(worst, fabsf(f.var[c] - u.var[c]) / u.var[c]);
    }
    EXPECT_MSG(worst < 1e-5f, "running statistics %.3g apart", worst);
    float *fy = host_floats(f.y), *uy = host_floats(u.y);
    int64_t off = 0;
    for (int64_t i = 0; i < f.y->numel; i++) off += fabsf(fy[i] - uy[i]) > 1e-2f * (fabsf(uy[i]) + 1.0f);
    EXPECT_MSG(off == 0, "%lld outputs apart", (long long)off);
    free(fy), free(uy), free(f.mean), free(f.var), free(u.mean), free(u.var);
}
