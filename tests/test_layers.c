/* CNN layers on the CPU: conv2d against the convolution sum written out and its shape errors,
 * the optimizer rule, schedules, init statistics, and a small CNN that must learn. (Each op's
 * finite differences, bf16 bound and GPU parity: its op-case table, tests/cases_*.c.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/dt_check.h"
#include "ops/init/dt_init.h"
#include "ops/dt_layers.h"
#include "ops/dt_ops.h"
#include "train/dt_optim.h"
#include "core/dt_param.h"
#include "train/dt_schedule.h"
#include "tests/dt_test.h"
#include "ops/optim/sgd.h"

DT_TEST(conv2d_matches_direct_loops) {
    /* An independent oracle: the convolution sum written out, against the im2col path with
     * uneven chunks (budget for 2 of 5 images). */
    const int N = 5, C = 3, H = 6, W = 7, O = 4;
    dt_conv_geom g = {3, 3, 2, 1, 1, 0, 1, 2};
    dt_tensor *x = dt_test_randn4(N, C, H, W, 1), *w = dt_test_randn4(O, C, 3, 3, 1);
    int64_t Ho = dt_conv_out_size(H, 3, 2, 1, 1), Wo = dt_conv_out_size(W, 3, 1, 0, 2);
    size_t old = dt_conv_col_budget();
    dt_conv_set_col_budget((size_t)2 * C * 9 * Ho * Wo * sizeof(float));
    dt_tensor *y = dt_conv2d(x, w, NULL, g, DT_MATH_FP32);
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
                                    s += dt_data_f32(x)[((n * C + c) * H + iy) * W + ix] * dt_data_f32(w)[((o * C + c) * 3 + ky) * 3 + kx];
                            }
                    ref[((n * O + o) * Ho + oy) * Wo + ox] = (float)s;
                }
    EXPECT(dt_expect_close("conv2d vs direct", y->data, ref, y->numel, 1e-5));
    free(ref);
}

static void conv_too_small(void *a) {
    (void)a;
    dt_conv2d(dt_tensor_new4(DT_CPU, 1, 3, 2, 2), dt_tensor_new4(DT_CPU, 4, 3, 5, 5), NULL, dt_geom(5, 1, 0, 1), DT_MATH_FP32);
}
static void conv_wrong_channels(void *a) {
    (void)a;
    dt_conv2d(dt_tensor_new4(DT_CPU, 1, 3, 8, 8), dt_tensor_new4(DT_CPU, 4, 2, 3, 3), NULL, dt_geom(3, 1, 1, 1), DT_MATH_FP32);
}

DT_TEST(conv2d_bad_shapes_are_clear_errors) {
    EXPECT_DEATH(conv_too_small, NULL, "is too small for kernel 5x5");
    EXPECT_DEATH(conv_wrong_channels, NULL, "weight [4, 2, 3, 3] does not fit input [1, 3, 8, 8]");
}

/* ---- optimizer, schedule, init ---- */

DT_TEST(sgd_matches_pytorch_rule) {
    /* Two steps of momentum 0.9, wd 0.1, nesterov on/off, dampening 0, against the formula. */
    for (int nesterov = 0; nesterov < 2; nesterov++) {
        dt_params ps = {0};
        int64_t s[1] = {5};
        dt_tensor *p = dt_param_new(&ps, "p", 1, s, DT_CPU, DT_NCHW, 1);
        dt_tensor *q = dt_param_new(&ps, "q", 1, s, DT_CPU, DT_NCHW, 0); /* no_decay */
        dt_tensor *r = dt_param_new(&ps, "r", 1, s, DT_CPU, DT_NCHW, 1); /* never gets a gradient */
        dt_param_of(q)->lr_mult = 0.5f;
        for (int i = 0; i < 5; i++) dt_data_f32(p)[i] = dt_data_f32(q)[i] = dt_data_f32(r)[i] = 1.0f + i;
        dt_sgd opt;
        dt_sgd_opts o = {.momentum = 0.9f, .weight_decay = 0.1f, .nesterov = nesterov};
        dt_sgd_init(&opt, &ps, &o);
        double pr[5], qr[5], mp[5] = {0}, mq[5] = {0};
        for (int i = 0; i < 5; i++) pr[i] = qr[i] = 1.0 + i;
        for (int step = 0; step < 3; step++) {
            dt_params_zero_grad(&ps);
            for (int i = 0; i < 5; i++) {
                dt_data_f32(p->grad)[i] = dt_data_f32(q->grad)[i] = 0.5f * i - step;
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
            EXPECT_NEAR(dt_data_f32(p)[i], pr[i], 1e-5);
            EXPECT_NEAR(dt_data_f32(q)[i], qr[i], 1e-5);
            EXPECT_NEAR(dt_data_f32(r)[i], 1.0 + i, 0); /* skipped: no gradient, no decay */
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
    dt_tensor *w1 = dt_param_new(&ps, "w1", 4, s1, dev, DT_NCHW, 1), *w2 = dt_param_new(&ps, "w2", 4, s2, dev, DT_NCHW, 1);
    dt_tensor *fc = dt_param_new(&ps, "fc", 2, sl, dev, DT_NCHW, 1), *fcb = dt_param_new(&ps, "fcb", 1, sb, dev, DT_NCHW, 0);
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
        dt_tensor *x = dt_tensor_from_host(4, sx, dev, img), *y = dt_tensor_from_values(1, sy, dev, DT_I32, DT_NCHW, lab);
        dt_tensor *h = dt_batchnorm2d(dt_conv2d(x, w1, NULL, dt_geom(3, 1, 1, 1), DT_MATH_FP32), &bn1, 1, 1);
        h = dt_maxpool2d(h, 3, 2, 1);
        h = dt_batchnorm2d(dt_conv2d(h, w2, NULL, dt_geom(3, 1, 1, 1), DT_MATH_FP32), &bn2, 1, 1);
        dt_tensor *logits = dt_linear(dt_global_avgpool(h), fc, fcb, DT_MATH_FP32);
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
