/* CNN layers on the CPU: finite-difference gradient checks of every op, the optimizer rule,
 * schedules, init statistics, and a small CNN that must learn. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_check.h"
#include "dt_init.h"
#include "dt_layers.h"
#include "dt_ops.h"
#include "dt_optim.h"
#include "dt_param.h"
#include "dt_schedule.h"
#include "dt_test.h"
#include "layer_testutil.h"
#include "sgd.h"


/* The shapes a ResNet needs (3x3 s1/s2, 1x1 s2 downsample, 7x7 s2 stem) and the odd ones:
 * non-square, dilation, batch 1 and a prime batch. */
static const conv_case CONV_CASES[] = {
    {"3x3 s1 p1", 2, 3, 7, 6, 4, {3, 3, 1, 1, 1, 1, 1, 1}, 1},
    {"3x3 s2 p1", 3, 4, 9, 9, 5, {3, 3, 2, 2, 1, 1, 1, 1}, 0},
    {"1x1 s2 (downsample)", 2, 6, 8, 8, 4, {1, 1, 2, 2, 0, 0, 1, 1}, 0},
    {"7x7 s2 p3 (stem)", 1, 3, 15, 13, 4, {7, 7, 2, 2, 3, 3, 1, 1}, 0},
    {"3x3 dil2 p2", 5, 2, 9, 8, 3, {3, 3, 1, 1, 2, 2, 2, 2}, 1},
    {"2x3 s(2,1) p(0,1)", 3, 3, 7, 5, 2, {2, 3, 2, 1, 0, 1, 1, 1}, 1},
};

static void run_conv_gradchecks(void) {
    for (size_t i = 0; i < sizeof CONV_CASES / sizeof *CONV_CASES; i++) {
        const conv_case *c = &CONV_CASES[i];
        dt_tensor *x = dt_test_randn4(c->n, c->cin, c->h, c->w, 1.0f);
        dt_tensor *w = dt_test_randn4(c->cout, c->cin, c->g.kh, c->g.kw, 0.5f);
        int64_t sb[1] = {c->cout};
        dt_tensor *b = c->bias ? dt_test_randn(1, sb, 1.0f) : NULL;
        dt_requires_grad(x);
        dt_requires_grad(w);
        if (b) dt_requires_grad(b);
        dt_tensor *in[3] = {x, w, b};
        conv_arg a = {c->g};
        char name[96];
        snprintf(name, sizeof name, "conv2d %s", c->name);
        EXPECT(dt_gradcheck(name, dt_test_build_conv, &a, 3, in, NULL));
    }
}

DT_TEST(gradcheck_conv2d_one_chunk_per_batch) {
    size_t old = dt_conv_col_budget();
    dt_conv_set_col_budget(64 << 20); /* the whole batch in one chunk */
    run_conv_gradchecks();
    dt_conv_set_col_budget(old);
}

DT_TEST(gradcheck_conv2d_one_image_per_chunk) {
    size_t old = dt_conv_col_budget();
    dt_conv_set_col_budget(1); /* forces nb = 1: the direct-GEMM path */
    run_conv_gradchecks();
    dt_conv_set_col_budget(old);
}

DT_TEST(conv2d_matches_direct_loops) {
    /* An independent oracle: the convolution sum written out, against the im2col path with
     * uneven chunks (budget for 2 of 5 images). */
    const int N = 5, C = 3, H = 6, W = 7, O = 4;
    dt_conv_geom g = {3, 3, 2, 1, 1, 0, 1, 2};
    dt_tensor *x = dt_test_randn4(N, C, H, W, 1), *w = dt_test_randn4(O, C, 3, 3, 1);
    int64_t Ho = dt_conv_out_size(H, 3, 2, 1, 1), Wo = dt_conv_out_size(W, 3, 1, 0, 2);
    size_t old = dt_conv_col_budget();
    dt_conv_set_col_budget((size_t)2 * C * 9 * Ho * Wo * sizeof(float));
    dt_tensor *y = dt_conv2d(x, w, NULL, g);
    dt_conv_set_col_budget(old);
    float *ref = calloc(y->numel, sizeof(float));
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++)
            for (int oy = 0; oy < Ho; oy++)
                for (int ox = 0; ox < Wo; ox++) {
                    double s = 0;
                    for (int c = 0; c < C; c++)
                        for (int ky = 0; ky < 3; ky++)
                            for (int kx = 0; kx < 3; kx++) {
                                int iy = oy * 2 - 1 + ky, ix = ox * 1 - 0 + kx * 2;
                                if (iy >= 0 && iy < H && ix >= 0 && ix < W)
                                    s += x->data[((n * C + c) * H + iy) * W + ix] * w->data[((o * C + c) * 3 + ky) * 3 + kx];
                            }
                    ref[((n * O + o) * Ho + oy) * Wo + ox] = (float)s;
                }
    EXPECT(dt_expect_close("conv2d vs direct", y->data, ref, y->numel, 1e-5));
    free(ref);
}

static void conv_too_small(void *a) {
    (void)a;
    dt_conv2d(dt_tensor_new4(DT_CPU, 1, 3, 2, 2), dt_tensor_new4(DT_CPU, 4, 3, 5, 5), NULL, dt_geom(5, 1, 0, 1));
}
static void conv_wrong_channels(void *a) {
    (void)a;
    dt_conv2d(dt_tensor_new4(DT_CPU, 1, 3, 8, 8), dt_tensor_new4(DT_CPU, 4, 2, 3, 3), NULL, dt_geom(3, 1, 1, 1));
}

DT_TEST(conv2d_bad_shapes_are_clear_errors) {
    EXPECT_DEATH(conv_too_small, NULL, "is too small for kernel 5x5");
    EXPECT_DEATH(conv_wrong_channels, NULL, "weight [4, 2, 3, 3] does not fit input [1, 3, 8, 8]");
}

/* ---- batch norm ---- */

typedef struct {
    dt_batchnorm *bn;
    int training, relu;
} bn_arg;

static dt_tensor *b_bn(dt_tensor **in, void *a) {
    bn_arg *b = a;
    /* The weight and bias under test are inputs 1 and 2: swap them into the module. */
    b->bn->weight = in[1];
    b->bn->bias = in[2];
    return dt_batchnorm2d(in[0], b->bn, b->training, b->relu);
}

/* Moves inputs so that every pre-ReLU value is at least 0.2 away from the kink, where the
 * finite difference would straddle it: the analytic gradient is right there, the numeric one
 * is not. Iterates because in training mode moving x moves the batch statistics. */
static void keep_bn_away_from_kink(dt_tensor *x, const dt_tensor *w, const dt_tensor *b, const dt_batchnorm *bn,
                                   int training) {
    int64_t N = x->shape[0], C = x->shape[1], P = x->shape[2] * x->shape[3];
    for (int iter = 0; iter < 20; iter++) {
        int moved = 0;
        for (int64_t c = 0; c < C; c++) {
            double mean = bn->running_mean->data[c], var = bn->running_var->data[c];
            if (training) {
                double s = 0, s2 = 0;
                for (int64_t n = 0; n < N; n++)
                    for (int64_t p = 0; p < P; p++) {
                        double v = x->data[(n * C + c) * P + p];
                        s += v;
                        s2 += v * v;
                    }
                mean = s / (N * P);
                var = s2 / (N * P) - mean * mean;
            }
            double is = 1.0 / sqrt(var + bn->eps);
            for (int64_t n = 0; n < N; n++)
                for (int64_t p = 0; p < P; p++) {
                    float *v = &x->data[(n * C + c) * P + p];
                    double pre = (*v - mean) * is * w->data[c] + b->data[c];
                    if (fabs(pre) < 0.2) {
                        double dir = (pre >= 0 ? 1 : -1) * (w->data[c] >= 0 ? 1 : -1);
                        *v += (float)(dir * 0.4 / (is * fabs(w->data[c]) + 1e-3));
                        moved = 1;
                    }
                }
        }
        if (!moved) return;
    }
}

DT_TEST(gradcheck_batchnorm_train_eval_relu) {
    for (int mode = 0; mode < 4; mode++) {
        int training = mode < 2, relu = mode & 1;
        dt_batchnorm bn;
        dt_batchnorm_init(&bn, NULL, "bn", 3, DT_CPU);
        dt_tensor *w0 = bn.weight, *b0 = bn.bias;
        for (int c = 0; c < 3; c++) {
            bn.running_mean->data[c] = 0.3f * c;
            bn.running_var->data[c] = 0.5f + c;
        }
        dt_tensor *x = dt_test_randn4(4, 3, 3, 5, 2.0f);
        for (int64_t i = 0; i < x->numel; i++) x->data[i] += 1.0f; /* a nonzero mean */
        int64_t sc[1] = {3};
        dt_tensor *w = dt_test_randn(1, sc, 1.0f), *b = dt_test_randn(1, sc, 1.0f);
        for (int c = 0; c < 3; c++)
            if (fabsf(w->data[c]) < 0.3f) w->data[c] = w->data[c] < 0 ? -0.3f : 0.3f;
        if (relu) keep_bn_away_from_kink(x, w, b, &bn, training);
        dt_requires_grad(x);
        dt_requires_grad(w);
        dt_requires_grad(b);
        dt_tensor *in[3] = {x, w, b};
        bn_arg a = {&bn, training, relu};
        char name[64];
        snprintf(name, sizeof name, "batchnorm2d %s%s", training ? "train" : "eval", relu ? "+relu" : "");
        dt_gradcheck_opts o = {.h = 1e-2f, .tol = 2e-2f};
        EXPECT(dt_gradcheck(name, b_bn, &a, 3, in, &o));
        bn.weight = w0;
        bn.bias = b0;
        dt_tensor_free(w0);
        dt_tensor_free(b0);
        dt_batchnorm_free(&bn);
    }
}

DT_TEST(batchnorm_statistics_and_running_update) {
    dt_batchnorm bn;
    dt_batchnorm_init(&bn, NULL, "bn", 2, DT_CPU);
    dt_tensor *x = dt_test_randn4(3, 2, 4, 4, 3.0f);
    for (int64_t i = 0; i < x->numel; i++) x->data[i] += 5.0f;
    dt_tensor *y = dt_batchnorm2d(x, &bn, 1, 0);
    for (int c = 0; c < 2; c++) {
        double s = 0, s2 = 0, xs = 0, xs2 = 0;
        int M = 3 * 16;
        for (int n = 0; n < 3; n++)
            for (int p = 0; p < 16; p++) {
                double v = y->data[(n * 2 + c) * 16 + p], u = x->data[(n * 2 + c) * 16 + p];
                s += v; s2 += v * v; xs += u; xs2 += u * u;
            }
        EXPECT_NEAR(s / M, 0.0, 1e-5);
        EXPECT_NEAR(s2 / M, 1.0, 1e-3);
        double mean = xs / M, var = xs2 / M - mean * mean;
        EXPECT_NEAR(bn.running_mean->data[c], 0.1 * mean, 1e-4);
        EXPECT_NEAR(bn.running_var->data[c], 0.9 + 0.1 * var * M / (M - 1), 1e-3); /* unbiased, as PyTorch */
    }
    dt_params ps = {0};
    dt_params_add(&ps, bn.weight);
    dt_params_add(&ps, bn.bias);
    dt_params_free(&ps);
    dt_batchnorm_free(&bn);
}

/* ---- pooling, loss ---- */


/* Distinct values at least 0.1 apart, so no finite-difference step changes an argmax. */
static void distinct_values(dt_tensor *t) {
    for (int64_t i = 0; i < t->numel; i++) t->data[i] = 0.1f * (float)i - 0.05f * (float)t->numel;
    for (int64_t i = t->numel - 1; i > 0; i--) {
        int64_t j = dt_rng_below(dt_test_rng(), (uint32_t)(i + 1));
        float v = t->data[i];
        t->data[i] = t->data[j];
        t->data[j] = v;
    }
}

DT_TEST(gradcheck_pooling) {
    dt_tensor *x = dt_tensor_new4(DT_CPU, 2, 3, 9, 8);
    distinct_values(x);
    dt_requires_grad(x);
    pool_arg a = {3, 2, 1};
    dt_gradcheck_opts o = {.h = 1e-2f, .max_checks = 200};
    EXPECT(dt_gradcheck("maxpool 3x3/2 p1", dt_test_build_maxpool, &a, 1, &x, &o));
    pool_arg a2 = {2, 2, 0};
    EXPECT(dt_gradcheck("maxpool 2x2/2", dt_test_build_maxpool, &a2, 1, &x, &o));
    EXPECT(dt_gradcheck("global avgpool", dt_test_build_avgpool, NULL, 1, &x, NULL));
}

DT_TEST(maxpool_padding_and_first_max) {
    /* 1x1x2x2 input with a tie: the first maximum in window order wins; padding is -inf. */
    float v[4] = {-3, -1, -1, -2};
    int64_t s[4] = {1, 1, 2, 2};
    dt_tensor *x = dt_tensor_from_host(4, s, DT_CPU, v);
    dt_requires_grad(x);
    dt_tensor *y = dt_maxpool2d(x, 3, 2, 1); /* one output covering the whole image */
    EXPECT_EQ_INT(y->numel, 1);
    EXPECT_NEAR(y->data[0], -1.0, 0);
    dt_backward(dt_sum(y));
    EXPECT_NEAR(x->grad->data[1], 1.0, 0);
    EXPECT_NEAR(x->grad->data[2], 0.0, 0);
}

typedef struct {
    dt_tensor *labels;
    float eps;
} xent_arg;
static dt_tensor *b_xent(dt_tensor **in, void *a) {
    xent_arg *x = a;
    return dt_softmax_cross_entropy(in[0], x->labels, x->eps);
}

DT_TEST(gradcheck_softmax_cross_entropy) {
    int64_t s[2] = {6, 7}, sl[1] = {6};
    dt_tensor *logits = dt_test_randn(2, s, 2.0f), *labels = dt_tensor_new(1, sl, DT_CPU);
    for (int i = 0; i < 6; i++) labels->data[i] = (float)dt_rng_below(dt_test_rng(), 7);
    dt_requires_grad(logits);
    for (int k = 0; k < 2; k++) {
        xent_arg a = {labels, k ? 0.1f : 0.0f};
        EXPECT(dt_gradcheck(k ? "xent smoothing 0.1" : "xent", b_xent, &a, 1, &logits, NULL));
    }
    /* Value against a hand computation, and stability with huge logits. */
    float v[3] = {1000.0f, 1001.0f, 999.0f}, lab = 1.0f;
    int64_t s1[2] = {1, 3}, one[1] = {1};
    dt_tensor *l = dt_tensor_from_host(2, s1, DT_CPU, v), *t = dt_tensor_from_host(1, one, DT_CPU, &lab);
    float loss = dt_item(dt_softmax_cross_entropy(l, t, 0.0f));
    double ref = log(exp(-1.0) + 1.0 + exp(-2.0));
    EXPECT_NEAR(loss, ref, 1e-5);
    /* An invalid label is loud (NaN), never a silent wrong number. */
    float bad = 3.0f;
    dt_tensor *tb = dt_tensor_from_host(1, one, DT_CPU, &bad);
    EXPECT(isnan(dt_item(dt_softmax_cross_entropy(l, tb, 0.0f))));
}

DT_TEST(topk_counts) {
    float v[2 * 6] = {0, 5, 4, 3, 2, 1, /* label 0: rank 5 -> not in top-5 */
                      9, 1, 1, 8, 7, 0}; /* label 2: ties with 1 at lower index -> rank 4 */
    float lab[2] = {0, 2};
    int64_t s[2] = {2, 6}, sl[1] = {2};
    dt_tensor *l = dt_tensor_from_host(2, s, DT_CPU, v), *t = dt_tensor_from_host(1, sl, DT_CPU, lab);
    float c[2];
    dt_topk_correct(l, t, c);
    EXPECT_NEAR(c[0], 0, 0);
    EXPECT_NEAR(c[1], 1, 0);
}

/* ---- optimizer, schedule, init ---- */

DT_TEST(sgd_matches_pytorch_rule) {
    /* Two steps of momentum 0.9, wd 0.1, nesterov on/off, dampening 0, against the formula. */
    for (int nesterov = 0; nesterov < 2; nesterov++) {
        dt_params ps = {0};
        int64_t s[1] = {5};
        dt_tensor *p = dt_param_new(&ps, "p", 1, s, DT_CPU, 1);
        dt_tensor *q = dt_param_new(&ps, "q", 1, s, DT_CPU, 0); /* no_decay */
        dt_tensor *r = dt_param_new(&ps, "r", 1, s, DT_CPU, 1); /* never gets a gradient */
        q->lr_mult = 0.5f;
        for (int i = 0; i < 5; i++) p->data[i] = q->data[i] = r->data[i] = 1.0f + i;
        dt_sgd opt;
        dt_sgd_opts o = {.momentum = 0.9f, .weight_decay = 0.1f, .nesterov = nesterov};
        dt_sgd_init(&opt, &ps, &o);
        double pr[5], qr[5], mp[5] = {0}, mq[5] = {0};
        for (int i = 0; i < 5; i++) pr[i] = qr[i] = 1.0 + i;
        for (int step = 0; step < 3; step++) {
            dt_params_zero_grad(&ps);
            for (int i = 0; i < 5; i++) {
                p->grad->data[i] = q->grad->data[i] = 0.5f * i - step;
            }
            p->grad_valid = q->grad_valid = 1;
            dt_sgd_step(&opt, 0.1f);
            for (int i = 0; i < 5; i++) {
                double gp = (0.5 * i - step) + 0.1 * pr[i], gq = 0.5 * i - step;
                mp[i] = step ? 0.9 * mp[i] + gp : gp;
                mq[i] = step ? 0.9 * mq[i] + gq : gq;
                pr[i] -= 0.1 * (nesterov ? gp + 0.9 * mp[i] : mp[i]);
                qr[i] -= 0.5 * 0.1 * (nesterov ? gq + 0.9 * mq[i] : mq[i]);
            }
        }
        for (int i = 0; i < 5; i++) {
            EXPECT_NEAR(p->data[i], pr[i], 1e-5);
            EXPECT_NEAR(q->data[i], qr[i], 1e-5);
            EXPECT_NEAR(r->data[i], 1.0 + i, 0); /* skipped: no gradient, no decay */
        }
        dt_sgd_free(&opt);
        dt_params_free(&ps);
    }
}

DT_TEST(lr_schedules) {
    dt_schedule s = {.kind = DT_SCHED_COSINE, .base_lr = 1.0f, .min_lr = 0.0f, .total_steps = 110, .warmup_steps = 10,
                     .warmup_start = 0.1f};
    EXPECT_NEAR(dt_schedule_lr(&s, 0), 0.1, 1e-6);
    EXPECT_NEAR(dt_schedule_lr(&s, 5), 0.55, 1e-6);
    EXPECT_NEAR(dt_schedule_lr(&s, 10), 1.0, 1e-6);
    EXPECT_NEAR(dt_schedule_lr(&s, 60), 0.5, 1e-6);
    EXPECT_NEAR(dt_schedule_lr(&s, 110), 0.0, 1e-6);
    dt_schedule st = {.kind = DT_SCHED_STEP, .base_lr = 0.1f, .gamma = 0.1f, .step_size = 30};
    EXPECT_NEAR(dt_schedule_lr(&st, 29), 0.1, 1e-7);
    EXPECT_NEAR(dt_schedule_lr(&st, 30), 0.01, 1e-7);
    EXPECT_NEAR(dt_schedule_lr(&st, 95), 0.0001, 1e-8);
    EXPECT_EQ_INT(dt_schedule_kind("cosine"), DT_SCHED_COSINE);
    EXPECT_EQ_INT(dt_schedule_kind("linear"), -1);
}

static void moments(const dt_tensor *t, double *mean, double *std) {
    float *h = dt_tensor_host_copy(t);
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < t->numel; i++) { s += h[i]; s2 += (double)h[i] * h[i]; }
    *mean = s / t->numel;
    *std = sqrt(s2 / t->numel - *mean * *mean);
    free(h);
}

void dt_test_init_statistics(dt_dev dev);
void dt_test_init_statistics(dt_dev dev) {
    dt_tensor *w = dt_tensor_new4(dev, 128, 64, 3, 3);
    dt_init_kaiming_normal_fanout(w);
    double m, s;
    moments(w, &m, &s);
    EXPECT_NEAR(m, 0.0, 0.003);
    EXPECT_NEAR(s, sqrt(2.0 / (128 * 9)), 0.002);
    dt_tensor *l = dt_tensor_new2(dev, 100, 512), *b = dt_tensor_new1(dev, 100);
    dt_init_linear_default(l, b);
    float *h = dt_tensor_host_copy(l);
    float mx = 0;
    for (int64_t i = 0; i < l->numel; i++) mx = fmaxf(mx, fabsf(h[i]));
    EXPECT(mx <= 1.0f / sqrtf(512.0f) + 1e-6f && mx > 0.9f / sqrtf(512.0f));
    free(h);
    moments(l, &m, &s);
    EXPECT_NEAR(s, (1.0 / sqrt(512.0)) / sqrt(3.0), 0.001); /* std of U(-a, a) = a/sqrt(3) */
    /* Reproducible from the seed. */
    dt_tensor *a1 = dt_tensor_new1(dev, 1001), *a2 = dt_tensor_new1(dev, 1001);
    dt_init_reseed();
    dt_init_normal(a1, 0, 1);
    dt_init_reseed();
    dt_init_normal(a2, 0, 1);
    float *h1 = dt_tensor_host_copy(a1), *h2 = dt_tensor_host_copy(a2);
    EXPECT(!memcmp(h1, h2, 1001 * sizeof(float)));
    free(h1);
    free(h2);
}

DT_TEST(init_statistics_and_reproducibility) { dt_test_init_statistics(DT_CPU); }

/* ---- a small CNN learns ---- */

/* conv-BN-ReLU-maxpool-conv-BN-ReLU-avgpool-linear on synthetic 2-class images: a bright
 * horizontal bar vs a vertical bar at a random position, under noise. The loss must fall
 * below 40 % of its starting value and the training accuracy pass 90 %. */
double dt_test_small_cnn(dt_dev dev, int steps, double *acc_out);
double dt_test_small_cnn(dt_dev dev, int steps, double *acc_out) {
    const int B = 32, S = 12, C1 = 8, C2 = 16;
    dt_set_seed(1234);
    dt_init_reseed();
    dt_params ps = {0};
    int64_t s1[4] = {C1, 1, 3, 3}, s2[4] = {C2, C1, 3, 3}, sl[2] = {2, C2}, sb[1] = {2};
    dt_tensor *w1 = dt_param_new(&ps, "w1", 4, s1, dev, 1), *w2 = dt_param_new(&ps, "w2", 4, s2, dev, 1);
    dt_tensor *fc = dt_param_new(&ps, "fc", 2, sl, dev, 1), *fcb = dt_param_new(&ps, "fcb", 1, sb, dev, 0);
    dt_init_kaiming_normal_fanout(w1);
    dt_init_kaiming_normal_fanout(w2);
    dt_init_linear_default(fc, fcb);
    dt_batchnorm bn1, bn2;
    dt_batchnorm_init(&bn1, &ps, "bn1", C1, dev);
    dt_batchnorm_init(&bn2, &ps, "bn2", C2, dev);
    dt_sgd opt;
    dt_sgd_opts o = {.momentum = 0.9f, .weight_decay = 1e-4f};
    dt_sgd_init(&opt, &ps, &o);
    float *img = malloc(sizeof(float) * B * S * S), lab[32];
    dt_rng r;
    dt_rng_seed(&r, 99);
    double first = 0, last = 0, acc = 0;
    for (int step = 0; step < steps; step++) {
        for (int i = 0; i < B; i++) {
            int cls = (int)dt_rng_below(&r, 2), pos = 2 + (int)dt_rng_below(&r, S - 4);
            lab[i] = (float)cls;
            for (int y = 0; y < S; y++)
                for (int x = 0; x < S; x++) {
                    int on = cls ? (x == pos && y > 1 && y < S - 2) : (y == pos && x > 1 && x < S - 2);
                    img[(i * S + y) * S + x] = (on ? 1.0f : 0.0f) + 0.3f * dt_rng_normal(&r);
                }
        }
        dt_params_zero_grad(&ps);
        dt_scope_begin();
        int64_t sx[4] = {B, 1, S, S}, sy[1] = {B};
        dt_tensor *x = dt_tensor_from_host(4, sx, dev, img), *y = dt_tensor_from_host(1, sy, dev, lab);
        dt_tensor *h = dt_batchnorm2d(dt_conv2d(x, w1, NULL, dt_geom(3, 1, 1, 1)), &bn1, 1, 1);
        h = dt_maxpool2d(h, 3, 2, 1);
        h = dt_batchnorm2d(dt_conv2d(h, w2, NULL, dt_geom(3, 1, 1, 1)), &bn2, 1, 1);
        dt_tensor *logits = dt_linear(dt_global_avgpool(h), fc, fcb);
        float c[2];
        dt_topk_correct(logits, y, c);
        dt_tensor *loss = dt_softmax_cross_entropy(logits, y, 0.0f);
        loss->retain = 1;
        dt_backward(loss);
        dt_sgd_step(&opt, 0.05f);
        double l = dt_item(loss);
        if (step < 5) first += l / 5;
        if (step >= steps - 5) { last += l / 5; acc += c[0] / B / 5; }
        dt_scope_end();
    }
    free(img);
    dt_sgd_free(&opt);
    dt_batchnorm_free(&bn1);
    dt_batchnorm_free(&bn2);
    dt_params_free(&ps);
    *acc_out = acc;
    return last / first;
}

DT_TEST(small_cnn_trains_on_cpu) {
    double acc, ratio = dt_test_small_cnn(DT_CPU, 120, &acc);
    if (dt_test_verbose()) printf("    loss ratio %.3f, accuracy %.2f\n", ratio, acc);
    EXPECT_MSG(ratio < 0.4, "loss fell only to %.2f of its start", ratio);
    EXPECT_MSG(acc > 0.9, "training accuracy %.2f", acc);
}
