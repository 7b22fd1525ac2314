/* batch norm's op cases (dt_opcase.h): training and eval, ReLU on and off, with and without
 * the residual skip, gradients written and accumulated, synchronized through a stand-in peer,
 * odd shapes and ResNet-18's, in f32 NCHW (the reference kernels), f32 NHWC and bf16 NHWC.
 *
 * Inputs: x [N, C, H, W] (activation), weight and bias [C] (f32, as a model's), skip like x.
 * Small cases move their values away from the ReLU's kink, where finite differences (and a
 * bf16 rounding) would flip the mask: x gets a +-7/8 pattern per element and a per-channel
 * offset (so the batch mean is not 0) on top of small random values, the weight +-1 per channel;
 * the pre-activation then stays well away from 0, and BN still sees every term of its gradient.
 * The offsets are small next to the pattern, so that bf16's relative rounding of x stays small
 * next to x's spread (dw, a sum over few values per channel, is compared too). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dt_alloc.h"
#include "ops/batchnorm/batchnorm.h" /* dt_bn_sync */
#include "core/dt_common.h"
#include "ops/dt_layers.h"
#include "tests/dt_opcase.h"
#include "ops/dt_ops.h"
#include "tests/dt_test.h"

typedef struct {
    int training, relu, skip;
    int sync;      /* a stand-in peer holding the same batch: the sums are doubled */
    int twice;     /* the op applied twice to the same inputs and added: every gradient of the
                      first application is added (beta 1) to the second's */
    int calibrate; /* eval after a training forward on a fixed batch: the running statistics */
    int away;      /* the offsets of the header comment (small cases) */
} bn_arg;

typedef struct {
    dt_batchnorm bn;   /* weight and bias: the case's inputs, set by build */
    dt_bn_sync sync;
    dt_tensor *rm0, *rv0;                /* the running statistics every build starts from */
    dt_tensor *x_offset, *w_offset, *calib; /* made at the first build (x's dtype and layout) */
} bn_state;

/* The stand-in peer: its sums equal ours. */
static void twice_host(void *ctx, double *sums, int64_t n) {
    (void)ctx;
    for (int64_t i = 0; i < n; i++) sums[i] *= 2;
}
static void twice_device(void *ctx, double *sums, int64_t n) {
    double *h = dt_xmalloc((size_t)n * sizeof *h);
    dt_copy_d2h(h, sums, (size_t)n * sizeof *h);
    twice_host(ctx, h, n);
    dt_copy_h2d(sums, h, (size_t)n * sizeof *h);
    free(h);
}

static float channel_offset(int64_t c) { return 0.25f * (float)(c % 3) - 0.25f; }

static dt_tensor *kept(dt_tensor *t) {
    dt_tensor_keep(t);
    return t;
}

static void *state_new(const dt_opcase *c, dt_dev dev, dt_layout layout) {
    (void)layout;
    const bn_arg *a = c->arg;
    bn_state *s = dt_xcalloc(1, sizeof *s);
    int64_t C = c->in[0].shape[1], sc[1] = {C};
    s->bn = (dt_batchnorm){.C = C, .eps = 1e-5f, .momentum = 0.1f};
    s->bn.running_mean = dt_tensor_new_unscoped(1, sc, dev, DT_F32, DT_NCHW);
    s->bn.running_var = dt_tensor_new_unscoped(1, sc, dev, DT_F32, DT_NCHW);
    float *rm = dt_xmalloc((size_t)C * sizeof(float)), *rv = dt_xmalloc((size_t)C * sizeof(float));
    for (int64_t k = 0; k < C; k++) {
        rm[k] = channel_offset(k) + 0.02f * sinf((float)k);
        rv[k] = 0.6f + 0.05f * (float)((k * 7) % 5);
    }
    s->rm0 = kept(dt_tensor_from_values(1, sc, dev, DT_F32, DT_NCHW, rm));
    s->rv0 = kept(dt_tensor_from_values(1, sc, dev, DT_F32, DT_NCHW, rv));
    free(rm);
    free(rv);
    if (a->sync) {
        s->sync = (dt_bn_sync){dev == DT_GPU ? twice_device : twice_host, NULL, 2};
        s->bn.sync = &s->sync;
    }
    return s;
}

static void state_free(void *state) {
    bn_state *s = state;
    dt_batchnorm_free(&s->bn);
    dt_tensor *own[5] = {s->rm0, s->rv0, s->x_offset, s->w_offset, s->calib};
    for (int i = 0; i < 5; i++)
        if (own[i]) dt_tensor_free(own[i]);
    free(s);
}

/* A caller-owned tensor like `like` from values v(i, c, n + h + w), i the logical index, c the
 * channel (for a [C] tensor: i). */
static dt_tensor *pattern(const dt_tensor *like, float (*v)(int64_t i, int64_t c, int64_t hw_n)) {
    float *h = dt_xmalloc((size_t)like->numel * sizeof(float));
    int64_t C = like->ndim == 4 ? like->shape[1] : like->numel, P = like->ndim == 4 ? like->shape[2] * like->shape[3] : 1;
    for (int64_t i = 0; i < like->numel; i++) {
        int64_t c = (i / P) % C, n = i / (P * C), hw = i % P;
        h[i] = v(i, c, like->ndim == 4 ? n + hw / like->shape[3] + hw % like->shape[3] : 0);
    }
    dt_tensor *t = kept(dt_tensor_from_values(like->ndim, like->shape, like->dev, like->dtype, like->layout, h));
    free(h);
    return t;
}
/* +-7/8 by the parity of n + h + w (a checkerboard per channel), plus the channel's offset */
static float x_offset_v(int64_t i, int64_t c, int64_t nhw) { (void)i; return (nhw % 2 ? -0.875f : 0.875f) + channel_offset(c); }
static float w_offset_v(int64_t i, int64_t c, int64_t nhw) { (void)i, (void)nhw; return c % 2 ? -1.0f : 1.0f; }
static float calib_v(int64_t i, int64_t c, int64_t nhw) { (void)nhw; return channel_offset(c) + sinf(1.7f * (float)i); }

static dt_tensor *bn_once(const bn_arg *a, dt_tensor *x, dt_tensor *skip, bn_state *s) {
    int training = a->training && !a->calibrate;
    return a->skip ? dt_batchnorm2d_add_relu(x, skip, &s->bn, training) : dt_batchnorm2d(x, &s->bn, training, a->relu);
}

static dt_tensor *build(const dt_opcase *c, dt_tensor **in, void *state) {
    const bn_arg *a = c->arg;
    bn_state *s = state;
    dt_tensor *x = in[0], *w = in[1];
    if (a->away) {
        if (!s->x_offset) s->x_offset = pattern(x, x_offset_v);
        if (!s->w_offset) s->w_offset = pattern(w, w_offset_v);
        x = dt_add(x, s->x_offset);
        w = dt_add(w, s->w_offset);
    }
    s->bn.weight = w;
    s->bn.bias = in[2];
    dt_tensor_copy(s->bn.running_mean, s->rm0);
    dt_tensor_copy(s->bn.running_var, s->rv0);
    if (a->calibrate) { /* one training step on a fixed batch updates the running statistics */
        if (!s->calib) s->calib = pattern(x, calib_v);
        int g = dt_grad_enabled();
        dt_set_grad_enabled(0);
        dt_batchnorm2d(s->calib, &s->bn, 1, 0);
        dt_set_grad_enabled(g);
    }
    dt_tensor *skip = a->skip ? in[3] : NULL, *y = bn_once(a, x, skip, s);
    return a->twice ? dt_add(y, bn_once(a, x, skip, s)) : y;
}

/* A small case: every mode (gradcheck h 1e-2, tol 2e-2). std: of the random part of x, weight
 * and bias (small where the offsets keep the ReLU's pre-activation away from 0); gx, gp, gs: x,
 * the affine parameters and the skip want gradients. */
#define BN_SMALL(label, n_, c_, h_, w_, std, gx, gp, gs, ...)                                                            \
    {.name = label, .ops = {"batchnorm2d"}, .n_in = 4, .h = 1e-2f, .grad_tol = 2e-2f,                                \
     .in = {{4, {n_, c_, h_, w_}, DT_IN_ACT, std, gx},                                                               \
            {1, {c_}, DT_IN_F32, std, gp},                                                                           \
            {1, {c_}, DT_IN_F32, std, gp},                                                                           \
            {4, {n_, c_, h_, w_}, DT_IN_ACT, 0.05f, gs}},                                                                \
     .build = build, .arg = &(const bn_arg){.away = 1, __VA_ARGS__}, .state_new = state_new,                         \
     .state_free = state_free}
#define RELU_STD 0.05f

/* A ResNet-18 shape at batch 64: GPU parity (and perf) only. gs: the op has a skip input.
 * Every big case has a ReLU, so it takes the small cases' offsets (.away) and their small random
 * part: with N(0, 1) inputs, a few of millions of pre-activations lie within a rounding of 0,
 * where the two devices' last bits put them on either side of the kink, and each such element
 * moves a gradient by its whole upstream value - one flip on the 1.6 M elements of l4 is a
 * relative error of 1.3e-3 (seed 133194860), so no tolerance both holds and means anything.
 * Away from the kink the f32 kernels keep the default tolerance. */
#define BN_BIG(label, n_, c_, h_, w_, gs, ...)                                                                           \
    {.name = label, .ops = {"batchnorm2d"}, .n_in = 4, .grad_tol = -1, .bf16_bound = -1,                             \
     .in = {{4, {n_, c_, h_, w_}, DT_IN_ACT, RELU_STD, 1},                                                           \
            {1, {c_}, DT_IN_F32, RELU_STD, 1},                                                                       \
            {1, {c_}, DT_IN_F32, RELU_STD, 1},                                                                       \
            {4, {n_, c_, h_, w_}, DT_IN_ACT, RELU_STD, gs}},                                                         \
     .build = build, .arg = &(const bn_arg){.away = 1, __VA_ARGS__}, .state_new = state_new,                         \
     .state_free = state_free}

static const dt_opcase bn_cases[] = {
    BN_SMALL("train, C = 11 (no packs), 5x7", 4, 11, 5, 7, 1.0f, 1, 1, 0, .training = 1),
    BN_SMALL("train+relu, batch 1, C = 16", 1, 16, 9, 11, RELU_STD, 1, 1, 0, .training = 1, .relu = 1),
    BN_SMALL("train+add+relu, C = 24", 3, 24, 5, 5, RELU_STD, 1, 1, 1, .training = 1, .relu = 1, .skip = 1),
    BN_SMALL("train, prime batch 7, C = 12 (no bf16 packs)", 7, 12, 3, 5, 1.0f, 1, 1, 0, .training = 1),
    BN_SMALL("train+relu, 1x1 images, batch 6", 6, 32, 1, 1, RELU_STD, 1, 1, 0, .training = 1, .relu = 1),
    BN_SMALL("eval, 5x6x2x3", 5, 6, 2, 3, 1.0f, 1, 1, 0, .training = 0),
    BN_SMALL("eval+relu, C = 13 (no packs)", 2, 13, 4, 6, RELU_STD, 1, 1, 0, .relu = 1),
    BN_SMALL("eval+add+relu, prime batch 7, C = 8", 7, 8, 3, 3, RELU_STD, 1, 1, 1, .relu = 1, .skip = 1),
    BN_SMALL("eval after a training step (running statistics)", 3, 10, 4, 4, 1.0f, 1, 1, 0, .calibrate = 1),
    BN_SMALL("eval after a synchronized training step (running statistics of both)", 2, 12, 3, 5, 1.0f, 1, 1, 0,
             .calibrate = 1, .sync = 1),
    BN_SMALL("train+relu, sync (a peer doubles the sums)", 3, 16, 4, 4, RELU_STD, 1, 1, 0, .training = 1,
             .relu = 1, .sync = 1),
    BN_SMALL("train+add+relu, sync", 2, 8, 3, 5, RELU_STD, 1, 1, 1, .training = 1, .relu = 1, .skip = 1,
             .sync = 1),
    BN_SMALL("train+add+relu twice: gradients accumulate", 2, 16, 3, 3, RELU_STD, 1, 1, 1, .training = 1,
             .relu = 1, .skip = 1, .twice = 1),
    BN_SMALL("train+relu twice, C = 7: gradients accumulate", 3, 7, 3, 4, RELU_STD, 1, 1, 0, .training = 1,
             .relu = 1, .twice = 1),
    BN_SMALL("train+add+relu, only the skip's gradient", 3, 8, 4, 4, RELU_STD, 0, 0, 1, .training = 1, .relu = 1,
             .skip = 1),
    BN_BIG("ResNet stem 64x64x112x112, train+relu", 64, 64, 112, 112, 0, .training = 1, .relu = 1),
    BN_BIG("ResNet l1 64x64x56x56, train+relu", 64, 64, 56, 56, 0, .training = 1, .relu = 1),
    BN_BIG("ResNet l1 join 64x64x56x56, train+add+relu", 64, 64, 56, 56, 1, .training = 1, .relu = 1, .skip = 1),
    BN_BIG("ResNet l2 join 64x128x28x28, train+add+relu", 64, 128, 28, 28, 1, .training = 1, .relu = 1, .skip = 1),
    BN_BIG("ResNet l3 64x256x14x14, train+relu", 64, 256, 14, 14, 0, .training = 1, .relu = 1),
    BN_BIG("ResNet l4 join 64x512x7x7, train+add+relu", 64, 512, 7, 7, 1, .training = 1, .relu = 1, .skip = 1),
    BN_BIG("ResNet l4 64x512x7x7, eval+relu", 64, 512, 7, 7, 0, .relu = 1),
    BN_BIG("32x64x28x28 train+add+relu, sync", 32, 64, 28, 28, 1, .training = 1, .relu = 1, .skip = 1, .sync = 1),
};
DT_OPCASES(batchnorm, bn_cases)

/* ---- what the op refuses, and the statistics themselves ---- */

typedef struct {
    dt_dtype dtype;
    dt_layout layout;
    int skip_is_x;
} refuse_arg;

static void bn_refused(void *p) {
    const refuse_arg *r = p;
    dt_batchnorm bn;
    dt_batchnorm_init(&bn, NULL, "bn", 4, DT_CPU);
    dt_tensor *x = dt_tensor_new4_as(DT_CPU, r->dtype, r->layout, 2, 4, 3, 3);
    dt_tensor_fill(x, 1.0f);
    if (r->skip_is_x) dt_batchnorm2d_add_relu(x, x, &bn, 1);
    else dt_batchnorm2d(x, &bn, 1, 1);
}

DT_TEST(batchnorm_refuses_what_it_lacks) {
    refuse_arg bf16_nchw = {DT_BF16, DT_NCHW, 0}, i32 = {DT_I32, DT_NHWC, 0}, same = {DT_F32, DT_NHWC, 1};
    EXPECT_DEATH(bn_refused, &bf16_nchw, "no kernel for bf16 nchw");
    EXPECT_DEATH(bn_refused, &i32, "no kernel for i32 nhwc");
    EXPECT_DEATH(bn_refused, &same, "the skip is the batch norm's own input");
}

/* Training output: mean 0 and variance 1 per channel in every layout and dtype (the op cases
 * compare kernels with each other; this compares them with the definition), and the running
 * update 0.9*init + 0.1*(mean, unbiased var). */
DT_TEST(batchnorm_statistics_every_layout) {
    const dt_dtype dts[3] = {DT_F32, DT_F32, DT_BF16};
    const dt_layout ls[3] = {DT_NCHW, DT_NHWC, DT_NHWC};
    const int64_t N = 3, C = 5, H = 4, W = 6, M = N * H * W;
    float *v = dt_xmalloc((size_t)(N * C * H * W) * sizeof(float));
    for (int64_t i = 0; i < N * C * H * W; i++) v[i] = dt_bf16_round(3.0f * sinf(0.37f * (float)i) + 5.0f);
    int64_t s[4] = {N, C, H, W};
    for (int k = 0; k < 3; k++) {
        dt_batchnorm bn;
        dt_batchnorm_init(&bn, NULL, "bn", C, DT_CPU);
        dt_tensor *x = dt_tensor_from_values(4, s, DT_CPU, dts[k], ls[k], v);
        float *y = dt_tensor_host_copy(dt_batchnorm2d(x, &bn, 1, 0));
        double tol = dts[k] == DT_BF16 ? 2e-2 : 1e-5;
        for (int64_t c = 0; c < C; c++) {
            double sy = 0, sy2 = 0, sx = 0, sx2 = 0;
            for (int64_t n = 0; n < N; n++)
                for (int64_t p = 0; p < H * W; p++) {
                    int64_t i = (n * C + c) * H * W + p;
                    sy += y[i], sy2 += (double)y[i] * y[i], sx += v[i], sx2 += (double)v[i] * v[i];
                }
            double mean = sx / M, var = sx2 / M - mean * mean;
            EXPECT_NEAR(sy / M, 0.0, tol);
            EXPECT_NEAR(sy2 / M, 1.0, 10 * tol);
            EXPECT_NEAR(dt_data_f32(bn.running_mean)[c], 0.1 * mean, 1e-4);
            EXPECT_NEAR(dt_data_f32(bn.running_var)[c], 0.9 + 0.1 * var * M / (M - 1), 1e-3);
        }
        free(y);
        dt_tensor_free(bn.weight);
        dt_tensor_free(bn.bias);
        dt_batchnorm_free(&bn);
    }
    free(v);
}

/* The same GPU batch norm twice: the same bits (fixed-order sums, no atomics), forward and
 * every gradient, in each layout. */
DT_GPU_TEST(gpu_batchnorm_bitwise_repeatable) {
    const dt_dtype dts[3] = {DT_F32, DT_F32, DT_BF16};
    const dt_layout ls[3] = {DT_NCHW, DT_NHWC, DT_NHWC};
    int64_t s[4] = {16, 64, 28, 28};
    int64_t n = 16 * 64 * 28 * 28;
    float *v = dt_xmalloc((size_t)n * sizeof(float)), *r = dt_xmalloc((size_t)n * sizeof(float));
    dt_rng_fill_normal(dt_test_rng(), v, n, 0.5f, 2.0f);
    dt_rng_fill_normal(dt_test_rng(), r, n, 0.0f, 1.0f);
    for (int k = 0; k < 3; k++) {
        float *out[2][3];
        for (int rep = 0; rep < 2; rep++) {
            dt_scope_begin();
            dt_batchnorm bn;
            dt_batchnorm_init(&bn, NULL, "bn", 64, DT_GPU);
            dt_tensor *x = dt_tensor_from_values(4, s, DT_GPU, dts[k], ls[k], v);
            dt_tensor *skip = dt_tensor_from_values(4, s, DT_GPU, dts[k], ls[k], r);
            dt_requires_grad(x);
            dt_requires_grad(skip);
            dt_tensor *y = dt_batchnorm2d_add_relu(x, skip, &bn, 1);
            out[rep][0] = dt_tensor_host_copy(y);
            dt_backward_with(y, dt_tensor_from_values(4, s, DT_GPU, dts[k], ls[k], r));
            out[rep][1] = dt_tensor_host_copy(x->grad);
            out[rep][2] = dt_tensor_host_copy(bn.weight->grad);
            dt_tensor_free(bn.weight);
            dt_tensor_free(bn.bias);
            dt_batchnorm_free(&bn);
            dt_scope_end();
        }
        EXPECT(!memcmp(out[0][0], out[1][0], (size_t)n * sizeof(float)));
        EXPECT(!memcmp(out[0][1], out[1][1], (size_t)n * sizeof(float)));
        EXPECT(!memcmp(out[0][2], out[1][2], 64 * sizeof(float)));
        for (int rep = 0; rep < 2; rep++)
            for (int i = 0; i < 3; i++) free(out[rep][i]);
    }
    free(v);
    free(r);
}
