/* GPU parity of the CNN layers against their CPU twins on fresh random inputs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_alloc.h"
#include "dt_check.h"
#include "dt_init.h"
#include "dt_layers.h"
#include "dt_ops.h"
#include "dt_optim.h"
#include "dt_param.h"
#include "dt_test.h"
#include "layer_testutil.h"


static const conv_case CASES[] = {
    {"3x3 s1 odd", 3, 5, 13, 11, 7, {3, 3, 1, 1, 1, 1, 1, 1}, 1},
    {"3x3 s2", 2, 16, 17, 17, 24, {3, 3, 2, 2, 1, 1, 1, 1}, 0},
    {"1x1 s2 downsample", 5, 32, 14, 14, 64, {1, 1, 2, 2, 0, 0, 1, 1}, 0},
    {"7x7 s2 stem", 2, 3, 45, 45, 16, {7, 7, 2, 2, 3, 3, 1, 1}, 0},
    {"3x3 dil2", 1, 8, 12, 15, 8, {3, 3, 1, 1, 2, 2, 2, 2}, 1},
    {"ResNet l4 shape, batch 3", 3, 512, 7, 7, 512, {3, 3, 1, 1, 1, 1, 1, 1}, 0},
    {"ResNet l2a shape, batch 7", 7, 64, 56, 56, 128, {3, 3, 2, 2, 1, 1, 1, 1}, 0},
};

DT_GPU_TEST(gpu_parity_conv2d) {
    size_t budgets[2] = {1, 64 << 20}; /* one image per chunk, and several */
    size_t old = dt_conv_col_budget();
    for (int bi = 0; bi < 2; bi++) {
        dt_conv_set_col_budget(budgets[bi]);
        for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
            const conv_case *c = &CASES[i];
            dt_tensor *x = dt_test_randn4(c->n, c->cin, c->h, c->w, 1.0f);
            dt_tensor *w = dt_test_randn4(c->cout, c->cin, c->g.kh, c->g.kw, 0.1f);
            int64_t sb[1] = {c->cout};
            dt_tensor *b = c->bias ? dt_test_randn(1, sb, 1.0f) : NULL;
            dt_requires_grad(x);
            dt_requires_grad(w);
            if (b) dt_requires_grad(b);
            dt_tensor *in[3] = {x, w, b};
            conv_arg a = {c->g};
            char name[128];
            snprintf(name, sizeof name, "conv2d %s (budget %zu)", c->name, budgets[bi]);
            EXPECT(dt_parity(name, dt_test_build_conv, &a, NULL, 3, in, 1e-5f));
        }
    }
    dt_conv_set_col_budget(old);
}

typedef struct {
    dt_batchnorm *bn;
    int training, relu;
} bn_arg;
/* A stand-in for a second replica holding the same batch: the all-reduce doubles the sums. */
static void twice_host(void *ctx, double *sums, int64_t n) {
    (void)ctx;
    for (int64_t i = 0; i < n; i++) sums[i] *= 2;
}
static void twice_device(void *ctx, double *sums, int64_t n) {
    double *h = malloc((size_t)n * sizeof *h);
    dt_copy_d2h(h, sums, (size_t)n * sizeof *h);
    twice_host(ctx, h, n);
    dt_copy_h2d(sums, h, (size_t)n * sizeof *h);
    free(h);
}

static dt_tensor *b_bn(dt_tensor **in, void *a) {
    bn_arg *b = a;
    return dt_batchnorm2d(in[0], b->bn, b->training, b->relu);
}

DT_GPU_TEST(gpu_parity_batchnorm) {
    int64_t shapes[3][4] = {{4, 3, 5, 7}, {64, 64, 14, 14}, {3, 512, 7, 7}};
    for (int si = 0; si < 3; si++)
        for (int mode = 0; mode < 6; mode++) { /* train, eval, train with sync_bn; each +-relu */
            int training = mode < 2 || mode >= 4, relu = mode & 1, sync = mode >= 4;
            int64_t C = shapes[si][1];
            dt_batchnorm bc, bg;
            dt_batchnorm_init(&bc, NULL, "bn", C, DT_CPU);
            dt_batchnorm_init(&bg, NULL, "bn", C, DT_GPU);
            dt_bn_sync sc = {twice_host, NULL, 2}, sg = {twice_device, NULL, 2};
            if (sync) bc.sync = &sc, bg.sync = &sg;
            dt_tensor *init = dt_test_randn4(4, 1, 1, C, 1.0f);
            dt_tensor_upload(bc.weight, init->data);
            dt_tensor_upload(bc.bias, init->data + C);
            for (int64_t c = 0; c < C; c++) init->data[3 * C + c] = 0.5f + fabsf(init->data[3 * C + c]);
            dt_tensor_upload(bc.running_mean, init->data + 2 * C);
            dt_tensor_upload(bc.running_var, init->data + 3 * C);
            dt_tensor_copy(bg.weight, bc.weight);
            dt_tensor_copy(bg.bias, bc.bias);
            dt_tensor_copy(bg.running_mean, bc.running_mean);
            dt_tensor_copy(bg.running_var, bc.running_var);
            dt_requires_grad(bc.weight);
            dt_requires_grad(bg.weight);
            dt_tensor *x = dt_test_randn4(shapes[si][0], C, shapes[si][2], shapes[si][3], 2.0f);
            dt_requires_grad(x);
            bn_arg ac = {&bc, training, relu}, ag = {&bg, training, relu};
            char name[96];
            snprintf(name, sizeof name, "batchnorm %lldx%lldx%lldx%lld %s%s%s", (long long)shapes[si][0], (long long)C,
                     (long long)shapes[si][2], (long long)shapes[si][3], training ? "train" : "eval", relu ? "+relu" : "",
                     sync ? "+sync" : "");
            EXPECT(dt_parity(name, b_bn, &ac, &ag, 1, &x, 1e-5f));
            float *rm = dt_tensor_host_copy(bg.running_mean), *rv = dt_tensor_host_copy(bg.running_var);
            EXPECT(dt_expect_close("running_mean", rm, bc.running_mean->data, C, 1e-5));
            EXPECT(dt_expect_close("running_var", rv, bc.running_var->data, C, 1e-5));
            /* weight/bias gradients */
            float *gw = dt_tensor_host_copy(bg.weight->grad);
            EXPECT(dt_expect_close("dgamma", gw, bc.weight->grad->data, C, 1e-4));
            free(rm); free(rv); free(gw);
            dt_params ps = {0};
            dt_params_add(&ps, bc.weight); dt_params_add(&ps, bc.bias);
            dt_params_add(&ps, bg.weight); dt_params_add(&ps, bg.bias);
            dt_params_free(&ps);
            dt_batchnorm_free(&bc);
            dt_batchnorm_free(&bg);
        }
}

typedef struct {
    dt_tensor *lab_cpu, *lab_gpu;
    float eps;
} xent_arg;
static dt_tensor *b_xent(dt_tensor **in, void *a) {
    xent_arg *x = a;
    return dt_softmax_cross_entropy(in[0], in[0]->dev == DT_GPU ? x->lab_gpu : x->lab_cpu, x->eps);
}

DT_GPU_TEST(gpu_parity_pool_loss_topk) {
    dt_tensor *x = dt_test_randn4(3, 5, 113, 111, 1.0f);
    dt_requires_grad(x);
    pool_arg a = {3, 2, 1};
    EXPECT(dt_parity("maxpool 3x3/2 p1", dt_test_build_maxpool, &a, NULL, 1, &x, 0));
    EXPECT(dt_parity("global avgpool", dt_test_build_avgpool, NULL, NULL, 1, &x, 1e-6f));
    int64_t s[2] = {37, 1000}, sl[1] = {37};
    dt_tensor *logits = dt_test_randn(2, s, 3.0f), *lab = dt_tensor_new(1, sl, DT_CPU);
    for (int i = 0; i < 37; i++) lab->data[i] = (float)dt_rng_below(dt_test_rng(), 1000);
    dt_requires_grad(logits);
    xent_arg xa = {lab, dt_tensor_to(lab, DT_GPU), 0.1f};
    EXPECT(dt_parity("softmax xent (smoothing 0.1)", b_xent, &xa, NULL, 1, &logits, 1e-5f));
    /* top-k: plant some labels at the top so both counts are nonzero */
    for (int i = 0; i < 10; i++) logits->data[i * 1000 + (int)lab->data[i]] = 100.0f;
    float cc[2], cg[2];
    dt_topk_correct(logits, lab, cc);
    dt_topk_correct(dt_tensor_to(logits, DT_GPU), xa.lab_gpu, cg);
    EXPECT(cc[0] >= 10 && cc[0] == cg[0] && cc[1] == cg[1]);
}

DT_GPU_TEST(gpu_parity_sgd_multi_tensor) {
    /* Many tensors of awkward sizes (one larger than a chunk), momentum + nesterov + decay
     * exemption, 3 steps, GPU vs CPU. */
    int64_t sizes[6] = {1, 7, 16384, 16385, 100000, 333};
    dt_params pc = {0}, pg = {0};
    for (int i = 0; i < 6; i++) {
        char n[16];
        snprintf(n, sizeof n, "p%d", i);
        dt_tensor *a = dt_param_new(&pc, n, 1, &sizes[i], DT_CPU, i % 2);
        dt_tensor *b = dt_param_new(&pg, n, 1, &sizes[i], DT_GPU, i % 2);
        a->lr_mult = b->lr_mult = i == 2 ? 0.1f : 1.0f;
        dt_tensor_fill_normal(a, dt_test_rng(), 0, 1);
        dt_tensor_copy(b, a);
    }
    dt_sgd oc, og;
    dt_sgd_opts o = {.momentum = 0.9f, .weight_decay = 5e-4f, .nesterov = 1};
    dt_sgd_init(&oc, &pc, &o);
    dt_sgd_init(&og, &pg, &o);
    for (int step = 0; step < 3; step++) {
        dt_params_zero_grad(&pc);
        dt_params_zero_grad(&pg);
        for (int i = 0; i < 6; i++) {
            if (step == 1 && i == 3) continue; /* a parameter without gradient this step */
            dt_tensor_fill_normal(pc.items[i]->grad, dt_test_rng(), 0, 1);
            dt_tensor_copy(pg.items[i]->grad, pc.items[i]->grad);
            pc.items[i]->grad_valid = pg.items[i]->grad_valid = 1;
        }
        dt_sgd_step(&oc, 0.1f);
        dt_sgd_step(&og, 0.1f);
    }
    for (int i = 0; i < 6; i++) {
        float *h = dt_tensor_host_copy(pg.items[i]);
        EXPECT(dt_expect_close("sgd parameter", h, pc.items[i]->data, sizes[i], 1e-6));
        free(h);
    }
    dt_sgd_free(&oc);
    dt_sgd_free(&og);
    dt_params_free(&pc);
    dt_params_free(&pg);
}

void dt_test_init_statistics(dt_dev dev);
DT_GPU_TEST(gpu_init_statistics_and_reproducibility) { dt_test_init_statistics(DT_GPU); }

double dt_test_small_cnn(dt_dev dev, int steps, double *acc_out);
DT_GPU_TEST(gpu_small_cnn_trains) {
    double acc, ratio = dt_test_small_cnn(DT_GPU, 120, &acc);
    printf("    loss ratio %.3f, accuracy %.2f\n", ratio, acc);
    EXPECT_MSG(ratio < 0.4, "loss fell only to %.2f of its start", ratio);
    EXPECT_MSG(acc > 0.9, "training accuracy %.2f", acc);
}
