/* The loss's op cases (dt_opcase.h): softmax cross-entropy with and without label smoothing,
 * batch 1, a prime batch, ImageNet's 1000 classes, on f32 and bf16 logits; and the value,
 * stability and invalid-label rules, and top-k counting with ties (on 6 classes and on 1000),
 * on every device and dtype. */
#include <math.h>
#include <stdlib.h>

#include "core/dt_alloc.h"
#include "core/dt_common.h"
#include "ops/dt_layers.h"
#include "tests/dt_opcase.h"
#include "ops/dt_ops.h"
#include "tests/dt_test.h"

typedef struct {
    float smoothing;
} xent_arg;

static dt_tensor *build(const dt_opcase *c, dt_tensor **in, void *state) {
    (void)state;
    return dt_softmax_cross_entropy(in[0], in[1], ((const xent_arg *)c->arg)->smoothing);
}

/* grad: 0 (every mode) or -1 (parity and perf only); bound: the bf16 mode's (0: the default 1/64).
 * One row's loss is one number whose error is not averaged with others': the logits' bf16
 * rounding (2^-9 |z|, |z| up to ~6 at std 2) moves it by up to sum |softmax - onehot| <= 2 times
 * that, ~0.023 of a loss near 1, past 1/64 for some seeds (CI, seed 21461613780: 0.0168). */
#define XENT(label, n, k, eps, grad, bound)                                                                         \
    {.name = label, .ops = {"softmax_cross_entropy"}, .n_in = 2, .grad_tol = grad,                                 \
     .bf16_bound = (grad) < 0 ? (grad) : (bound),                                                                   \
     .in = {{2, {n, k}, DT_IN_ACT, 2.0f, 1}, {1, {n}, DT_IN_LABELS, (float)(k), 0}}, .build = build,                \
     .arg = &(const xent_arg){eps}}

static const dt_opcase xent_cases[] = {
    XENT("6 rows, 7 classes", 6, 7, 0.0f, 0, 0),
    XENT("6 rows, 7 classes, smoothing 0.1", 6, 7, 0.1f, 0, 0),
    XENT("batch 1, 10 classes", 1, 10, 0.0f, 0, 1.0 / 32),
    XENT("prime batch 13, 5 classes, smoothing 0.2", 13, 5, 0.2f, 0, 0),
    XENT("37 rows, 1000 classes, smoothing 0.1", 37, 1000, 0.1f, 0, 0),
    XENT("ImageNet head 256x1000, smoothing 0.1", 256, 1000, 0.1f, -1, 0),
};
DT_OPCASES(loss, xent_cases)

static dt_tensor *labels_of(dt_dev dev, int n, const float *v) {
    int64_t s[1] = {n};
    return dt_tensor_from_values(1, s, dev, DT_I32, DT_NCHW, v);
}

/* Logits [1000, 1004, 996] (exact in bf16), label 1: the loss is log(1 + e^-4 + e^-8) whatever
 * the scale of the logits (computed from the max); a label outside [0, K) gives NaN. */
static void xent_rules(dt_dev dev) {
    const float v[3] = {1000.0f, 1004.0f, 996.0f}, lab = 1.0f, bad = 3.0f;
    int64_t s[2] = {1, 3};
    const dt_dtype dts[2] = {DT_F32, DT_BF16};
    for (int k = 0; k < 2; k++) {
        dt_tensor *l = dt_tensor_from_values(2, s, dev, dts[k], DT_NCHW, v);
        float loss = dt_item(dt_softmax_cross_entropy(l, labels_of(dev, 1, &lab), 0.0f));
        EXPECT_NEAR(loss, log(1.0 + exp(-4.0) + exp(-8.0)), 1e-5);
        EXPECT(isnan(dt_item(dt_softmax_cross_entropy(l, labels_of(dev, 1, &bad), 0.0f))));
    }
}

/* Four rows of six logits (exact in bf16):
 *   label 0 of {0 5 4 3 2 1}: rank 5, in neither top-1 nor top-5;
 *   label 2 of {9 1 1 8 7 0}: ties with index 1, counted as ahead: rank 4, top-5 only;
 *   label 1 of {1 7 3 2 0 0}: rank 0, both;
 *   label 6 (outside [0, 6)): neither. */
static void topk_rules(dt_dev dev) {
    const float v[24] = {0, 5, 4, 3, 2, 1, 9, 1, 1, 8, 7, 0, 1, 7, 3, 2, 0, 0, 4, 3, 2, 1, 0, 0};
    const float lab[4] = {0, 2, 1, 6};
    int64_t s[2] = {4, 6};
    const dt_dtype dts[2] = {DT_F32, DT_BF16};
    for (int k = 0; k < 2; k++) {
        float c[2];
        dt_topk_correct(dt_tensor_from_values(2, s, dev, dts[k], DT_NCHW, v), labels_of(dev, 4, lab), c);
        EXPECT_NEAR(c[0], 1, 0);
        EXPECT_NEAR(c[1], 2, 0);
    }
}

/* ImageNet's 1000 classes over 37 rows (on the GPU each row's warp strides over the classes,
 * and the rows span several blocks), against ranks counted here. The logits are integers in
 * [-32, 32) (exact in bf16, ~16 ties of each value a row); a third of the labels are planted
 * above every other logit (rank 0), a third at the top value 31 behind exactly 0..7 ties (inside
 * the top 5 or not: both counts are exercised whatever the seed). */
static void topk_many_classes(dt_dev dev) {
    enum { N = 37, K = 1000 };
    float *v = dt_xmalloc((size_t)N * K * sizeof(float)), lab[N];
    double want[2] = {0, 0};
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < K; j++) v[i * K + j] = (float)((int)dt_rng_below(dt_test_rng(), 64) - 32);
        int l = (int)dt_rng_below(dt_test_rng(), K);
        if (i % 3 == 0) v[i * K + l] = 40.0f;
        if (i % 3 == 1) { /* at the top value behind exactly t ties: rank t, 0..7 over the rows */
            int t = (i / 3) % 8, seen = 0;
            l = 8 + (int)dt_rng_below(dt_test_rng(), K - 8);
            for (int j = 0; j < l; j++) {
                if (v[i * K + j] == 31.0f) v[i * K + j] = 30.0f;
                if (j % 2 == 0 && seen < t) v[i * K + j] = 31.0f, seen++;
            }
            v[i * K + l] = 31.0f;
        }
        lab[i] = (float)l;
        int64_t rank = 0;
        for (int j = 0; j < K; j++) rank += v[i * K + j] > v[i * K + l] || (v[i * K + j] == v[i * K + l] && j < l);
        want[0] += rank < 1;
        want[1] += rank < 5;
    }
    EXPECT(want[0] >= N / 3 && want[1] > want[0]); /* both counts are tested, not only zeros */
    int64_t s[2] = {N, K};
    const dt_dtype dts[2] = {DT_F32, DT_BF16};
    for (int k = 0; k < 2; k++) {
        float c[2];
        dt_topk_correct(dt_tensor_from_values(2, s, dev, dts[k], DT_NCHW, v), labels_of(dev, N, lab), c);
        EXPECT_MSG(c[0] == want[0] && c[1] == want[1], "%s %s: top-1 %g top-5 %g, expected %g and %g", dt_dev_name(dev),
                   dt_dtype_name(dts[k]), c[0], c[1], want[0], want[1]);
    }
    free(v);
}

DT_TEST(xent_value_stability_invalid_label) { xent_rules(DT_CPU); }
DT_GPU_TEST(gpu_xent_value_stability_invalid_label) { xent_rules(DT_GPU); }
DT_TEST(topk_counts_ties_every_dtype) { topk_rules(DT_CPU); }
DT_GPU_TEST(gpu_topk_counts_ties_every_dtype) { topk_rules(DT_GPU); }
DT_TEST(topk_1000_classes_every_dtype) { topk_many_classes(DT_CPU); }
DT_GPU_TEST(gpu_topk_1000_classes_every_dtype) { topk_many_classes(DT_GPU); }
