/* dt_dropout (ops/pointwise/dropout.h): the drop rate within a binomial bound, the 1 / (1 - p)
 * scale, the backward's exact relation dx = mask * scale * dy (finite differences say nothing of
 * a random op; tests/cases_elementwise.c runs them on one fixed mask), the mask as a pure
 * function of (seed, counter), a fresh mask per call, p = 0 and eval mode as the identity bit for
 * bit, the dropout= key and the model's refusals; on the GPU, the kernel's masks and outputs
 * bit for bit the CPU twin's, eagerly and replayed from a CUDA graph. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dt_alloc.h"
#include "core/dt_common.h"
#include "core/dt_device.h"
#include "core/dt_graph.h"
#include "models/dt_resnet.h"
#include "ops/dt_ops.h"
#include "ops/pointwise/dropout.h"
#include "tests/dt_check.h"
#include "tests/dt_test.h"
#include "train/dt_config.h"

/* a tensor of n values on dev in dtype (f32 or bf16, row-major), v[i] = f(i) */
static dt_tensor *vec(dt_dev dev, dt_dtype t, int64_t n, int ones) {
    float *v = dt_xmalloc((size_t)n * sizeof(float));
    uint64_t s = 99;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        v[i] = ones ? 1.0f : ((float)(s >> 40) / 16777216.0f - 0.5f) * 4.0f + 0.01f;
    }
    dt_tensor *x = dt_tensor_from_values(1, &n, dev, t, DT_NCHW, v);
    free(v);
    return x;
}

/* element i of t as fp32 (host) */
static float at(const dt_tensor *t, const void *host, int64_t i) { return dt_elem_ld(host, t->dtype, i); }


DT_TEST(dropout_rate_scale_and_mask_function) {
    const int64_t n = 1 << 20;
    const float ps[3] = {0.2f, 0.5f, 0.9f};
    for (int d = 0; d < 2; d++) {
        dt_dtype t = d ? DT_BF16 : DT_F32;
        dt_tensor *x = vec(DT_CPU, t, n, 1);
        for (int k = 0; k < 3; k++) {
            float p = ps[k];
            dt_tensor *counter = dt_dropout_counter_new(DT_CPU);
            dt_tensor *y = dt_dropout(x, p, 7, counter, 1);
            EXPECT_MSG(dt_dropout_counter_value(counter) == 1, "the counter is %lld after one call",
                       (long long)dt_dropout_counter_value(counter));
            /* the kept elements are exactly the scale (rounded once to the dtype), the others 0 */
            float scale = 1.0f / (1.0f - p);
            float want = t == DT_BF16 ? dt_bf16_to_float(dt_bf16_from_float(scale)) : scale;
            uint64_t key = dt_dropout_key(7, 1);
            uint32_t thr = dt_dropout_threshold(p);
            int64_t dropped = 0, wrong = 0;
            for (int64_t i = 0; i < n; i++) {
                float v = dt_elem_ld(y->data, t, i);
                int keep = dt_dropout_keep(key, i, thr);
                dropped += !keep;
                wrong += keep ? v != want : v != 0.0f;
            }
            EXPECT_MSG(wrong == 0, "p %g %s: %lld elements neither 0 nor the scale %g of the hash's mask", p,
                       dt_dtype_name(t), (long long)wrong, want);
            /* binomial: mean n p, standard deviation sqrt(n p (1-p)); 6 of them */
            double sd = sqrt((double)n * p * (1.0 - p));
            EXPECT_MSG(fabs((double)dropped - (double)n * p) < 6.0 * sd, "p %g: %lld of %lld dropped (want %.0f +- %.0f)",
                       p, (long long)dropped, (long long)n, (double)n * p, 6.0 * sd);
            dt_tensor_free(counter);
        }
    }
}

DT_TEST(dropout_backward_is_mask_times_scale) {
    const int64_t n = 10007;
    for (int d = 0; d < 2; d++) {
        dt_dtype t = d ? DT_BF16 : DT_F32;
        dt_tensor *x = vec(DT_CPU, t, n, 0), *g = vec(DT_CPU, t, n, 0);
        dt_tensor *counter = dt_dropout_counter_new(DT_CPU);
        x->requires_grad = 1;
        dt_tensor *y1 = dt_dropout(x, 0.3f, 11, counter, 1); /* advances the counter: the mask of 2 differs */
        (void)y1;
        dt_tensor *y = dt_dropout(x, 0.3f, 11, counter, 1);
        y->retain = 1; /* read after the backward */
        dt_backward_with(y, g);
        EXPECT(x->grad != NULL);
        if (!x->grad) return;
        uint64_t key = dt_dropout_key(11, 2);
        uint32_t thr = dt_dropout_threshold(0.3f);
        float scale = dt_dropout_scale(0.3f);
        int64_t bad_y = 0, bad_dx = 0;
        for (int64_t i = 0; i < n; i++) {
            int keep = dt_dropout_keep(key, i, thr);
            float wy = keep ? at(x, x->data, i) * scale : 0.0f, wdx = keep ? at(g, g->data, i) * scale : 0.0f;
            if (t == DT_BF16) {
                wy = dt_bf16_to_float(dt_bf16_from_float(wy));
                wdx = dt_bf16_to_float(dt_bf16_from_float(wdx));
            }
            bad_y += at(y, y->data, i) != wy;
            bad_dx += at(x->grad, x->grad->data, i) != wdx;
        }
        EXPECT_MSG(bad_y == 0 && bad_dx == 0, "%s: %lld outputs and %lld gradients not mask * scale * (x, dy)",
                   dt_dtype_name(t), (long long)bad_y, (long long)bad_dx);
        dt_tensor_free(counter);
    }
}

DT_TEST(dropout_is_deterministic_and_fresh_per_call) {
    const int64_t n = 4096;
    dt_tensor *x = vec(DT_CPU, DT_F32, n, 0);
    dt_tensor *c1 = dt_dropout_counter_new(DT_CPU), *c2 = dt_dropout_counter_new(DT_CPU);
    dt_tensor *a = dt_dropout(x, 0.5f, 3, c1, 1), *b = dt_dropout(x, 0.5f, 3, c2, 1);
    EXPECT_MSG(!memcmp(a->data, b->data, (size_t)n * sizeof(float)), "the same (seed, counter) drew two masks");
    dt_tensor *a2 = dt_dropout(x, 0.5f, 3, c1, 1), *other = dt_dropout(x, 0.5f, 4, c2, 1);
    int64_t diff = 0, diff_seed = 0;
    for (int64_t i = 0; i < n; i++) {
        diff += (dt_data_f32(a)[i] == 0.0f) != (dt_data_f32(a2)[i] == 0.0f);
        diff_seed += (dt_data_f32(a2)[i] == 0.0f) != (dt_data_f32(other)[i] == 0.0f);
    }
    /* independent masks at p 0.5 disagree on half the elements: 2048 +- 32 */
    EXPECT_MSG(diff > 1800 && diff < 2300, "successive counters: masks differ in %lld of %lld elements", (long long)diff,
               (long long)n);
    EXPECT_MSG(diff_seed > 1800 && diff_seed < 2300, "another seed: masks differ in %lld of %lld elements",
               (long long)diff_seed, (long long)n);
    dt_tensor_free(c1);
    dt_tensor_free(c2);
}

DT_TEST(dropout_p0_and_eval_are_the_identity) {
    const int64_t n = 1001;
    for (int d = 0; d < 2; d++) {
        dt_dtype t = d ? DT_BF16 : DT_F32;
        size_t bytes = (size_t)n * dt_dtype_size(t);
        dt_tensor *x = vec(DT_CPU, t, n, 0), *counter = dt_dropout_counter_new(DT_CPU);
        EXPECT(dt_dropout(x, 0.0f, 1, counter, 1) == x);
        EXPECT(dt_dropout(x, 0.5f, 1, counter, 0) == x);
        EXPECT_MSG(dt_dropout_counter_value(counter) == 0, "the identity advanced the counter");
        /* the kernel itself at p = 0: every element kept, times 1 - bit for bit */
        void *y = dt_xmalloc(bytes);
        int64_t snap = 5;
        (d ? dt_dropout_fwd_bf16_cpu : dt_dropout_fwd_f32_cpu)(n, 0.0f, 1, &snap, x->data, y);
        EXPECT_MSG(!memcmp(x->data, y, bytes), "%s: the kernel at p = 0 changed x", dt_dtype_name(t));
        free(y);
        dt_tensor_free(counter);
    }
}

static void bad_p(void *arg) {
    (void)arg;
    dt_tensor *x = vec(DT_CPU, DT_F32, 8, 1), *c = dt_dropout_counter_new(DT_CPU);
    dt_dropout(x, 1.0f, 1, c, 1);
}
static void resnet_dropout(void *arg) {
    (void)arg;
    dt_resnet_cfg c = dt_resnet_cfg_default(10);
    c.dropout = 0.2f;
    dt_resnet m;
    dt_resnet_init(&m, &c, DT_CPU);
}

DT_TEST(dropout_refusals_and_config_key) {
    EXPECT_DEATH(bad_p, NULL, "dropout: p = 1 must be in [0, 1)");
    EXPECT_DEATH(resnet_dropout, NULL, "resnet18 has no dropout layer");
    struct {
        const char *model, *value;
        float want; /* < 0: refused */
        const char *msg;
    } rows[] = {
        {"mobilenet_v2", "auto", 0.2f, NULL},
        {"resnet50", "auto", 0.0f, NULL},
        {"mobilenet_v2", "0", 0.0f, NULL},
        {"mobilenet_v2", "0.5", 0.5f, NULL},
        {"resnet18", "0", 0.0f, NULL},
        {"mobilenet_v2", "1", -1, "bad value '1' for 'dropout': expected auto or a probability in [0, 1)"},
        {"mobilenet_v2", "-0.1", -1, "bad value '-0.1' for 'dropout'"},
        {"mobilenet_v2", "nan", -1, "for 'dropout'"},
        {"mobilenet_v2", "0.2x", -1, "for 'dropout'"},
        {"mobilenet_v2", "0.99999999", -1, "for 'dropout'"}, /* 1 as a float */
        {"resnet50", "0.2", -1, "dropout=0.2: dropout 0.2: resnet50 has no dropout layer"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        dt_train_cfg c;
        dt_config_defaults(&c);
        char kv[64];
        dt_err err = {0};
        snprintf(kv, sizeof kv, "model=%s", rows[i].model);
        EXPECT_EQ_INT(dt_config_set(&c, kv, &err), 0);
        snprintf(kv, sizeof kv, "dropout=%s", rows[i].value);
        EXPECT_EQ_INT(dt_config_set(&c, kv, &err), 0);
        EXPECT_EQ_INT(dt_config_set(&c, "synthetic=1", &err), 0);
        EXPECT_EQ_INT(dt_config_set(&c, "device=cpu", &err), 0);
        float p = -2;
        int rc = dt_config_dropout(&c, &p, &err);
        int rc_check = dt_config_check(&c, &err);
        if (rows[i].want >= 0) {
            EXPECT_MSG(rc == 0 && p == rows[i].want && rc_check == 0, "%s %s: rc %d, p %g (want %g), check %d (%s)",
                       rows[i].model, kv, rc, p, rows[i].want, rc_check, rc_check ? err.msg : "");
        } else {
            EXPECT_MSG(rc != 0 && rc_check != 0 && strstr(err.msg, rows[i].msg), "%s %s: rc %d check %d, '%s' (want '%s')",
                       rows[i].model, kv, rc, rc_check, err.msg, rows[i].msg);
        }
    }
}

/* mobilenet_v2's classifier: train mode ticks the counter once per forward, eval mode never, and
 * at dropout 0 the model owns no counter (torchvision's mobilenet_v2(dropout=0.0)). */
DT_TEST(dropout_in_mobilenet_v2_classifier) {
    dt_resnet_cfg c = dt_resnet_cfg_default(10);
    c.model = DT_MOBILENET_V2;
    c.width = 0.25f;
    dt_resnet m;
    dt_resnet_init(&m, &c, DT_CPU);
    EXPECT(m.drop_counter == NULL);
    dt_resnet_free(&m);
    c.dropout = 0.2f;
    c.dropout_seed = 5;
    dt_resnet_init(&m, &c, DT_CPU);
    EXPECT(m.drop_counter != NULL);
    dt_tensor *x = dt_test_randn4(2, 3, 32, 32, 1.0f);
    dt_scope_begin();
    dt_resnet_forward(&m, x, 0);
    EXPECT(dt_dropout_counter_value(m.drop_counter) == 0);
    dt_resnet_forward(&m, x, 1);
    dt_resnet_forward(&m, x, 1);
    EXPECT(dt_dropout_counter_value(m.drop_counter) == 2);
    dt_scope_end();
    dt_resnet_free(&m);
}

#ifdef DT_CUDA
static void *host_bytes(const dt_tensor *t) {
    void *h = dt_xmalloc((size_t)t->numel * dt_dtype_size(t->dtype));
    dt_tensor_download(t, h);
    return h;
}

/* The CUDA kernel against the CPU twin: the mask (x = 1) and the output (random x), forward and
 * backward, f32 and bf16, bit for bit, for the same seed and counter; two successive calls differ. */
DT_GPU_TEST(gpu_dropout_bitwise_the_cpu_twin) {
    const int64_t n = 100003; /* odd: no whole grid */
    for (int d = 0; d < 2; d++)
        for (int ones = 0; ones < 2; ones++) {
            dt_dtype t = d ? DT_BF16 : DT_F32;
            size_t bytes = (size_t)n * dt_dtype_size(t);
            dt_tensor *xc = vec(DT_CPU, t, n, ones), *xg = vec(DT_GPU, t, n, ones), *g = vec(DT_CPU, t, n, 0);
            dt_tensor *gg = dt_tensor_to(g, DT_GPU);
            dt_tensor *cc = dt_dropout_counter_new(DT_CPU), *cg = dt_dropout_counter_new(DT_GPU);
            xc->requires_grad = xg->requires_grad = 1;
            void *first = NULL;
            for (int step = 0; step < 2; step++) {
                /* each forward then its backward (one tape) */
                dt_tensor *yc = dt_dropout(xc, 0.2f, 42, cc, 1);
                yc->retain = 1; /* read after the backward */
                dt_backward_with(yc, g);
                dt_tensor *yg = dt_dropout(xg, 0.2f, 42, cg, 1);
                yg->retain = 1;
                dt_backward_with(yg, gg);
                EXPECT(xc->grad && xg->grad);
                if (!xc->grad || !xg->grad) return;
                void *hy = host_bytes(yg), *hdx = host_bytes(xg->grad);
                EXPECT_MSG(!memcmp(hy, yc->data, bytes), "%s %s step %d: the GPU's output is not the twin's",
                           dt_dtype_name(t), ones ? "mask" : "output", step);
                EXPECT_MSG(!memcmp(hdx, xc->grad->data, bytes), "%s step %d: the GPU's gradient is not the twin's",
                           dt_dtype_name(t), step);
                if (step == 0) first = hy;
                else {
                    EXPECT_MSG(memcmp(first, hy, bytes), "%s: two successive calls drew the same mask", dt_dtype_name(t));
                    free(hy);
                    free(first);
                }
                free(hdx);
                dt_tensor_free(xc->grad), xc->grad = NULL;
                dt_tensor_free(xg->grad), xg->grad = NULL;
            }
            EXPECT(dt_dropout_counter_value(cg) == 2);
            dt_tensor_free(cc);
            dt_tensor_free(cg);
        }
}

/* The op captured in a CUDA graph (as the trainer's step is): each replay ticks the device-side
 * counter, so replay k draws the twin's mask of counter k - nothing host-side is baked in. */
DT_GPU_TEST(gpu_dropout_graph_replays_draw_fresh_masks) {
    const int64_t n = 65537;
    dt_tensor *xc = vec(DT_CPU, DT_F32, n, 0), *xg = vec(DT_GPU, DT_F32, n, 0);
    dt_tensor *cg = dt_dropout_counter_new(DT_GPU);
    dt_graph *gr = dt_graph_begin();
    dt_scope_begin();
    dt_tensor *y = dt_dropout(xg, 0.3f, 9, cg, 1);
    const void *yd = y->data;
    dt_scope_end();
    char why[256];
    double ms;
    int rc = dt_graph_end(gr, why, sizeof why, &ms);
    EXPECT_MSG(rc == 0, "the dropout could not be captured: %s", rc ? why : "");
    if (rc) return;
    EXPECT_MSG(dt_dropout_counter_value(cg) == 0, "the capture ran the tick");
    float *want = dt_xmalloc((size_t)n * sizeof(float)), *got = dt_xmalloc((size_t)n * sizeof(float)),
          *prev = dt_xmalloc((size_t)n * sizeof(float));
    for (int64_t k = 1; k <= 3; k++) {
        dt_graph_launch(gr);
        dt_gpu_sync();
        dt_copy_d2h(got, yd, (size_t)n * sizeof(float));
        dt_dropout_fwd_f32_cpu(n, 0.3f, 9, &k, xc->data, want);
        EXPECT_MSG(!memcmp(got, want, (size_t)n * sizeof(float)), "replay %lld: not the twin's mask of counter %lld",
                   (long long)k, (long long)k);
        if (k > 1) EXPECT_MSG(memcmp(got, prev, (size_t)n * sizeof(float)), "replay %lld drew replay %lld's mask",
                              (long long)k, (long long)k - 1);
        memcpy(prev, got, (size_t)n * sizeof(float));
    }
    EXPECT(dt_dropout_counter_value(cg) == 3);
    dt_graph_free(gr);
    free(want), free(got), free(prev);
    dt_tensor_free(cg);
}
#endif
