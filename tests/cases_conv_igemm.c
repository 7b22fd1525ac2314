/* The implicit-GEMM convolution's op cases (dt_opcase.h; ops/conv/conv_igemm.h): conv2d with the
 * algorithm forced to igemm128 or igemm64, so that every pass of each bf16 NHWC case runs on the
 * implicit GEMM - its CPU twins in the bf16 mode (against the f32 NCHW im2col + GEMM path on the
 * same values), its CUDA kernels in the parity mode (against those twins). The shapes are the
 * edges of the tiles: M, Cout and K = kh*kw*C not multiples of them, batch 1 and a prime batch,
 * stride 2 on odd inputs, dilation, a non-square kernel, the 1x1s, a layer1-sized problem (many
 * CTAs, wgrad's split reduction), and dx accumulated onto another use of x (beta 1) with and
 * without a bias; and C = 3 and 13, whose fprop runs on x and w padded with zero channels to a
 * multiple of 8 while the backward passes keep to im2col + GEMM (the kernels move 16-byte chunks
 * of 8 channels; conv_plan_* in test_conv_plan.c). The f32 combination runs for the
 * reference and is the plain path (no gradcheck here: its finite differences are the conv table's). */
#include "ops/dt_layers.h"
#include "tests/dt_opcase.h"
#include "ops/dt_ops.h"
#include "tests/dt_test.h"

typedef struct {
    dt_conv_geom g;
    dt_conv_algo algo;
} igemm_arg;

/* The case's algorithm is the conv's (the backward reads the plan the forward kept). */
static dt_tensor *build(const dt_opcase *c, dt_tensor **in, void *state) {
    (void)state;
    const igemm_arg *a = c->arg;
    return dt_conv2d_algo(in[0], in[1], c->in[2].grad ? in[2] : NULL, a->g, DT_MATH_FP32, a->algo);
}

/* conv(x) + x (Cout = Cin, stride 1, same size): the add's backward runs first, so the conv's
 * dgrad accumulates onto it (beta 1) */
static dt_tensor *build_residual(const dt_opcase *c, dt_tensor **in, void *state) {
    return dt_add(build(c, in, state), in[0]);
}

/* op: the engine's fprop table (the combinations the case runs) */
#define IG_CASE(op, label, algo_, fn, n, cin, h, w, cout, kh, kw, with_bias, wstd, ...)                           \
    {.name = label, .ops = {op, "conv2d (im2col, nchw)"}, .n_in = 3, .grad_tol = -1,                               \
     .in = {{4, {n, cin, h, w}, DT_IN_ACT, 1.0f, 1},                                                               \
            {4, {cout, cin, kh, kw}, DT_IN_WEIGHT, wstd, 1},                                                       \
            {1, {cout}, DT_IN_F32, 1.0f, with_bias}},                                                             \
     .build = fn, .arg = &(const igemm_arg){{__VA_ARGS__}, algo_}}

/* every shape once per shipped tile; the geometry {kh, kw, sh, sw, ph, pw, dh, dw} comes last */
#define IGEMM_FPROP "conv2d (implicit GEMM, fprop)"
#define IG_SHAPES(t, A)                                                                                            \
    IG_CASE(IGEMM_FPROP, t " 3x3 s1 odd 13x11, C 8 -> 24, bias", A, build, 3, 8, 13, 11, 24, 3, 3, 1, 0.2f, 3, 3, 1, 1, 1, 1, 1, 1), \
    IG_CASE(IGEMM_FPROP, t " 3x3 s2 odd 17x15, C 16 -> 40", A, build, 2, 16, 17, 15, 40, 3, 3, 0, 0.1f, 3, 3, 2, 2, 1, 1, 1, 1), \
    IG_CASE(IGEMM_FPROP, t " 3x3 s1 batch 1, C 24 -> 8", A, build, 1, 24, 9, 10, 8, 3, 3, 0, 0.1f, 3, 3, 1, 1, 1, 1, 1, 1),   \
    IG_CASE(IGEMM_FPROP, t " 3x3 s2 prime batch 7, 28x28, 64 -> 128", A, build, 7, 64, 28, 28, 128, 3, 3, 0, 0.05f, 3, 3, 2, 2, \
            1, 1, 1, 1),                                                                                           \
    IG_CASE(IGEMM_FPROP, t " 1x1 s2 odd 15x15, 32 -> 64", A, build, 5, 32, 15, 15, 64, 1, 1, 0, 0.1f, 1, 1, 2, 2, 0, 0, 1, 1), \
    IG_CASE(IGEMM_FPROP, t " 1x1 s1 + x (dx accumulated)", A, build_residual, 3, 24, 9, 7, 24, 1, 1, 0, 0.1f, 1, 1, 1, 1, 0, 0, \
            1, 1),                                                                                                 \
    IG_CASE(IGEMM_FPROP, t " 3x3 s1 + x (dx accumulated), bias", A, build_residual, 2, 16, 8, 9, 16, 3, 3, 1, 0.1f, 3, 3, 1, 1, \
            1, 1, 1, 1),                                                                                           \
    IG_CASE(IGEMM_FPROP, t " 3x3 dilation 2, 12x15", A, build, 1, 8, 12, 15, 16, 3, 3, 0, 0.2f, 3, 3, 1, 1, 2, 2, 2, 2),       \
    IG_CASE(IGEMM_FPROP, t " 5x5 s1 pad 2, C 8 -> 8", A, build, 2, 8, 11, 11, 8, 5, 5, 0, 0.1f, 5, 5, 1, 1, 2, 2, 1, 1),       \
    IG_CASE(IGEMM_FPROP, t " 2x3 kernel, stride 2x1, padding 0x1, bias", A, build, 3, 8, 7, 5, 8, 2, 3, 1, 0.3f, 2, 3, 2, 1, 0, \
            1, 1, 1),                                                                                              \
    IG_CASE(IGEMM_FPROP, t " ResNet l1 shape 56x56 64 -> 64, batch 1", A, build, 1, 64, 56, 56, 64, 3, 3, 0, 0.05f, 3, 3, 1, 1, \
            1, 1, 1, 1),                                                                                           \
    IG_CASE(IGEMM_FPROP, t " 7x7 s2 stem, C = 3 (fprop padded to 8)", A, build, 2, 3, 45, 45, 16, 7, 7, 0, 0.1f, 7, 7, 2, 2, 3, 3, \
            1, 1),                                                                                                 \
    IG_CASE(IGEMM_FPROP, t " 3x3 s1, C = 13 (fprop padded to 16), bias", A, build, 3, 13, 10, 9, 8, 3, 3, 1, 0.2f, 3, 3, 1, 1, 1, \
            1, 1, 1)

static const dt_opcase conv_igemm_cases[] = {
    IG_SHAPES("igemm128", DT_CONV_ALGO_IGEMM128),
    IG_SHAPES("igemm64", DT_CONV_ALGO_IGEMM64),
};
DT_OPCASES_NO_GRADCHECK(conv_igemm, conv_igemm_cases)

/* The Hopper engine (conv_algo=sm90: every pass the engine table's sm90 entry takes on it, the others
 * as auto). Its A operand comes through TMA's im2col mode in 64-channel blocks, so the 3x3s
 * have C % 64 == 0; the edges are its own: M tails inside and across images (TMA wraps the
 * output rows of a box over rows and images), Cout not a multiple of 64 (dgrad declines, fprop
 * and wgrad run), strides (dgrad declines), dilation, a non-square kernel, the pointwise
 * convs (a dense A, dgrad too), the downsampling 1x1, a layer1-sized wgrad (its split
 * reduction), dx accumulated (beta 1); and the columns path of fprop and wgrad where TMA's
 * im2col cannot read x (C = 32, the stem's C = 3 with its odd K = 147, C = 13), also in chunks
 * of images under a small column budget. */
#define SM90_FPROP "conv2d (Hopper engine, fprop)"
#define IG_SM90_SHAPES(t, A)                                                                                        \
    IG_CASE(SM90_FPROP, t " 3x3 s1 odd 13x11, C 64 -> 72, bias", A, build, 3, 64, 13, 11, 72, 3, 3, 1, 0.05f, 3, 3, 1, 1, 1, 1, \
            1, 1),                                                                                                  \
    IG_CASE(SM90_FPROP, t " 3x3 s1 batch 9 of 7x7, 128 -> 128", A, build, 9, 128, 7, 7, 128, 3, 3, 0, 0.03f, 3, 3, 1, 1, 1, 1, \
            1, 1),                                                                                                  \
    IG_CASE(SM90_FPROP, t " 3x3 s2 odd 17x15, 64 -> 128", A, build, 2, 64, 17, 15, 128, 3, 3, 0, 0.05f, 3, 3, 2, 2, 1, 1, 1, 1), \
    IG_CASE(SM90_FPROP, t " 3x3 s1 + x (dx accumulated), bias", A, build_residual, 2, 64, 8, 9, 64, 3, 3, 1, 0.05f, 3, 3, 1, 1, \
            1, 1, 1, 1),                                                                                            \
    IG_CASE(SM90_FPROP, t " 1x1 s1 pointwise 24 -> 40", A, build, 3, 24, 9, 7, 40, 1, 1, 0, 0.1f, 1, 1, 1, 1, 0, 0, 1, 1),      \
    IG_CASE(SM90_FPROP, t " 1x1 s1 pointwise + x, 64 -> 64", A, build_residual, 2, 64, 9, 11, 64, 1, 1, 0, 0.1f, 1, 1, 1, 1, 0, \
            0, 1, 1),                                                                                               \
    IG_CASE(SM90_FPROP, t " 1x1 s2 odd 15x15, 64 -> 128", A, build, 3, 64, 15, 15, 128, 1, 1, 0, 0.1f, 1, 1, 2, 2, 0, 0, 1, 1), \
    IG_CASE(SM90_FPROP, t " 3x3 dilation 2, 12x15", A, build, 1, 64, 12, 15, 64, 3, 3, 0, 0.05f, 3, 3, 1, 1, 2, 2, 2, 2),      \
    IG_CASE(SM90_FPROP, t " 2x3 kernel, stride 2x1, padding 0x1, bias", A, build, 3, 64, 7, 5, 64, 2, 3, 1, 0.05f, 2, 3, 2, 1, \
            0, 1, 1, 1),                                                                                            \
    IG_CASE(SM90_FPROP, t " 5x5 s1 pad 2, 64 -> 8", A, build, 2, 64, 11, 11, 8, 5, 5, 0, 0.03f, 5, 5, 1, 1, 2, 2, 1, 1),        \
    IG_CASE(SM90_FPROP, t " ResNet l1 shape 56x56 64 -> 64, batch 1", A, build, 1, 64, 56, 56, 64, 3, 3, 0, 0.05f, 3, 3, 1, 1, \
            1, 1, 1, 1),                                                                                            \
    IG_CASE(SM90_FPROP, t " 3x3 s1, C = 32 (columns)", A, build, 2, 32, 9, 9, 32, 3, 3, 0, 0.1f, 3, 3, 1, 1, 1, 1, 1, 1),     \
    IG_CASE(SM90_FPROP, t " 7x7 s2 stem, C = 3 (columns, K = 147), bias", A, build, 3, 3, 45, 45, 64, 7, 7, 1, 0.1f, 7, 7, 2, 2, \
            3, 3, 1, 1),                                                                                            \
    IG_CASE(SM90_FPROP, t " 3x3 s1, C = 13 (columns)", A, build, 3, 13, 10, 9, 16, 3, 3, 0, 0.2f, 3, 3, 1, 1, 1, 1, 1, 1),    \
    IG_CASE(SM90_FPROP, t " 3x3 s1, C = 32, 3x270 (a row's patch past shared memory)", A, build, 1, 32, 3, 270, 16, 3, 3, 0, 0.1f, \
            3, 3, 1, 1, 1, 1, 1, 1)

/* the stem shape with a column budget of one image's columns (23*23*152*2 bytes: 3 chunks): set
 * while an instance of the case lives, the process's budget back when the last goes */
static int budget_live;
static size_t saved_budget;
static void *small_budget_new(const dt_opcase *c, dt_dev dev, dt_layout layout) {
    (void)c, (void)dev, (void)layout;
    if (!budget_live++) saved_budget = dt_conv_col_budget();
    dt_conv_set_col_budget(23 * 23 * 152 * 2);
    return &budget_live;
}
static void small_budget_free(void *state) {
    (void)state;
    if (!--budget_live) dt_conv_set_col_budget(saved_budget);
}

static const dt_opcase conv_sm90_cases[] = {
    IG_SM90_SHAPES("sm90", DT_CONV_ALGO_SM90),
    {.name = "sm90 7x7 s2 stem in 3 chunks of columns", .ops = {SM90_FPROP, "conv2d (im2col, nchw)"},
     .n_in = 3, .grad_tol = -1,
     .in = {{4, {3, 3, 45, 45}, DT_IN_ACT, 1.0f, 1}, {4, {64, 3, 7, 7}, DT_IN_WEIGHT, 0.1f, 1}, {1, {64}, DT_IN_F32, 1.0f, 1}},
     .build = build, .arg = &(const igemm_arg){{7, 7, 2, 2, 3, 3, 1, 1}, DT_CONV_ALGO_SM90},
     .state_new = small_budget_new, .state_free = small_budget_free},
};
#define N_SM90 ((int)(sizeof conv_sm90_cases / sizeof *conv_sm90_cases))

DT_TEST(cases_conv_sm90_bf16) { dt_opcase_run_bf16("conv_sm90", conv_sm90_cases, N_SM90); }

static void conv_sm90_on_gpu(void *arg) {
    (void)arg;
    dt_opcase_run_parity("conv_sm90", conv_sm90_cases, 1);
}

/* On a GPU with the engine: every case's CUDA passes against the CPU twins. Without it: the
 * forced algorithm is refused with the error that says why. */
DT_GPU_TEST(gpu_cases_conv_sm90_parity) {
    if (dt_gpu_has_sm90a()) dt_opcase_run_parity("conv_sm90", conv_sm90_cases, N_SM90);
    else EXPECT_DEATH(conv_sm90_on_gpu, NULL, "conv_algo=sm90: this GPU or build has no Hopper engine");
}
