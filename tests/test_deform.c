/* Deformable convolution on the CPU: the reference against an independent oracle, zero
 * offsets = conv2d, finite differences through the (unfused) layer, statistics, errors. (Finite
 * differences through the op itself: tests/cases_deform.c.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/deform_testutil.h"
#include "tests/dt_check.h"
#include "ops/deform/dt_deform.h"
#include "ops/dt_layers.h"
#include "ops/dt_ops.h"
#include "tests/dt_test.h"

typedef struct {
    const dt_deform_case *c;
    int det;
} op_arg;

static dt_tensor *b_deform(dt_tensor **in, void *a) {
    op_arg *o = a;
    return dt_deform_conv2d(in[0], in[1], in[2], in[3], in[4], o->c->g, o->c->groups, o->det);
}

static void make_inputs(const dt_deform_case *c, dt_tensor **in, int64_t *Ho, int64_t *Wo) {
    *Ho = dt_conv_out_size(c->h, c->g.kh, c->g.sh, c->g.ph, c->g.dh);
    *Wo = dt_conv_out_size(c->w, c->g.kw, c->g.sw, c->g.pw, c->g.dw);
    int64_t K = (int64_t)c->g.kh * c->g.kw, sb[1] = {c->cout};
    in[0] = dt_test_randn4(c->n, c->c, c->h, c->w, 1.0f);
    in[1] = dt_test_offsets(c, *Ho, *Wo, 0);
    in[2] = NULL;
    if (c->mask) {
        in[2] = dt_tensor_new4(DT_CPU, c->n, c->groups * K, *Ho, *Wo);
        dt_tensor_fill_uniform(in[2], dt_test_rng(), 0.1f, 1.0f);
    }
    in[3] = dt_test_randn4(c->cout, c->c, c->g.kh, c->g.kw, 0.5f);
    in[4] = c->bias ? dt_test_randn(1, sb, 1.0f) : NULL;
    for (int i = 0; i < 5; i++)
        if (in[i]) dt_requires_grad(in[i]);
}

DT_TEST(deform_reference_matches_direct_formula) {
    const dt_deform_case *c; /* the problems of the one table (tests/cases_deform.c) this test runs */
    for (int i = 0; (c = dt_deform_case_at(DT_DC_REFERENCE, i)); i++) {
        dt_tensor *in[5];
        int64_t Ho, Wo;
        make_inputs(c, in, &Ho, &Wo);
        op_arg a = {c, 0};
        dt_tensor *y = b_deform(in, &a);
        float *ref = calloc(y->numel, sizeof(float));
        dt_test_deform_direct(c, in[0]->data, in[1]->data, in[2] ? in[2]->data : NULL, in[3]->data,
                              in[4] ? in[4]->data : NULL, Ho, Wo, ref);
        char what[96];
        snprintf(what, sizeof what, "deform %s vs direct", c->name);
        EXPECT(dt_expect_close(what, y->data, ref, y->numel, 1e-5));
        free(ref);
    }
}

DT_TEST(deform_zero_offsets_equal_conv2d) {
    const dt_deform_case c = {"zero", 3, 5, 9, 7, 4, {3, 3, 2, 1, 1, 1, 1, 1}, 1, 0, 0, 0, 0};
    dt_tensor *in[5];
    int64_t Ho, Wo;
    make_inputs(&c, in, &Ho, &Wo);
    dt_tensor_fill(in[1], 0.0f);
    op_arg a = {&c, 0};
    dt_tensor *y = b_deform(in, &a);
    dt_tensor *yc = dt_conv2d(in[0], in[3], NULL, c.g, DT_MATH_FP32);
    EXPECT(dt_expect_close("zero offsets vs conv2d", y->data, yc->data, y->numel, 1e-6));
}

/* ---- the layer: offset conv + sampling + main conv, gradients through everything ---- */

DT_TEST(gradcheck_deform_layer_v1_v2) {
    for (int version = 1; version <= 2; version++)
        for (int G = 1; G <= 2; G++) {
            dt_deform_conv l;
            dt_conv_geom g = dt_geom(3, version == 2 ? 2 : 1, 1, 1);
            dt_deform_conv_init(&l, NULL, "dcn", 4, 3, g, G, version, 1, 0.0f, DT_CPU, DT_NCHW);
            dt_tensor *own[4] = {l.weight, l.off_weight, l.off_bias, l.bias};
            dt_tensor *x = dt_test_randn4(2, 4, 7, 7, 1.0f);
            dt_tensor *w = dt_test_randn4(3, 4, 3, 3, 0.5f);
            int64_t oc = dt_deform_offset_channels(&l), so[4] = {oc, 4, 3, 3}, sob[1] = {oc}, sb[1] = {3};
            /* Offsets near 0.5 px (away from integer kinks), varying a little with x. */
            dt_tensor *ow = dt_test_randn(4, so, 0.01f), *ob = dt_tensor_new(1, sob, DT_CPU);
            for (int64_t i = 0; i < oc; i++) dt_data_f32(ob)[i] = i < 2 * G * 9 ? 0.5f : 0.3f * (float)(i % 3) - 0.3f;
            dt_tensor *b = dt_test_randn(1, sb, 1.0f);
            dt_tensor *in[5] = {x, w, ow, ob, b};
            for (int i = 0; i < 5; i++) dt_requires_grad(in[i]);
            char what[64];
            snprintf(what, sizeof what, "deform layer v%d G%d", version, G);
            dt_gradcheck_opts o = {.h = 1e-2f, .tol = 2e-2f, .max_checks = 48};
            EXPECT(dt_gradcheck(what, dt_test_deform_layer_forward, &l, 5, in, &o));
            for (int i = 0; i < 4; i++) dt_tensor_free(own[i]);
        }
}

/* ---- offset statistics ---- */

static int cmpf(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

DT_TEST(offset_statistics_match_sorted_values) {
    const dt_deform_case c = {"stats", 3, 1, 1, 1, 1, {3, 3, 1, 1, 1, 1, 1, 1}, 2, 0, 0, 0.2f, 1.3f};
    dt_tensor *off = dt_test_offsets(&c, 11, 13, 0);
    int64_t n = off->numel / 2, P = 11 * 13, GK = 18;
    float *ay = malloc(n * 4), *ax = malloc(n * 4);
    int64_t k = 0, outside = 0;
    double sy = 0, sx = 0;
    for (int64_t i = 0; i < 3; i++)
        for (int64_t j = 0; j < GK; j++)
            for (int64_t p = 0; p < P; p++, k++) {
                ay[k] = fabsf(dt_data_f32(off)[(i * 2 * GK + 2 * j) * P + p]);
                ax[k] = fabsf(dt_data_f32(off)[(i * 2 * GK + 2 * j + 1) * P + p]);
                sy += ay[k];
                sx += ax[k];
                outside += ay[k] > 2.0f || ax[k] > 2.0f;
            }
    dt_offset_stats st;
    dt_offset_stats_compute(off, 2.0f, &st);
    EXPECT_EQ_INT(st.samples, n);
    EXPECT_NEAR(st.mean_abs_dy, sy / n, 1e-4);
    EXPECT_NEAR(st.mean_abs_dx, sx / n, 1e-4);
    EXPECT_NEAR(st.frac_outside, (double)outside / n, 1e-12);
    qsort(ay, n, 4, cmpf);
    qsort(ax, n, 4, cmpf);
    double qs[4] = {0.5, 0.9, 0.99, 0.999};
    for (int q = 0; q < 4; q++) {
        int64_t idx = (int64_t)(qs[q] * n);
        if (idx >= n) idx = n - 1;
        /* the histogram resolves 1/64 px */
        EXPECT_NEAR(st.p_dy[q], ay[idx], 2.0 / 64);
        EXPECT_NEAR(st.p_dx[q], ax[idx], 2.0 / 64);
    }
    EXPECT_NEAR(st.max_abs, fmaxf(ay[n - 1], ax[n - 1]), 0);
    EXPECT(dt_offset_stats_halo(&st, 2) >= (int)ceilf(fmaxf(ay[(int64_t)(0.99 * n)], ax[(int64_t)(0.99 * n)])) - 1);
    free(ay);
    free(ax);
}

/* ---- errors ---- */

static void bad_offset_shape(void *a) {
    (void)a;
    dt_tensor *x = dt_tensor_zeros(4, (int64_t[]){1, 4, 6, 6}, DT_CPU);
    dt_tensor *off = dt_tensor_zeros(4, (int64_t[]){1, 9, 6, 6}, DT_CPU);
    dt_tensor *w = dt_tensor_zeros(4, (int64_t[]){2, 4, 3, 3}, DT_CPU);
    dt_deform_conv2d(x, off, NULL, w, NULL, dt_geom(3, 1, 1, 1), 1, 0);
}
static void bad_groups(void *a) {
    (void)a;
    dt_tensor *x = dt_tensor_zeros(4, (int64_t[]){1, 4, 6, 6}, DT_CPU);
    dt_tensor *off = dt_tensor_zeros(4, (int64_t[]){1, 54, 6, 6}, DT_CPU);
    dt_tensor *w = dt_tensor_zeros(4, (int64_t[]){2, 4, 3, 3}, DT_CPU);
    dt_deform_conv2d(x, off, NULL, w, NULL, dt_geom(3, 1, 1, 1), 3, 0);
}

DT_TEST(deform_bad_shapes_are_clear_errors) {
    EXPECT_DEATH(bad_offset_shape, NULL, "offset [1, 9, 6, 6] must be [1, 18, 6, 6]");
    EXPECT_DEATH(bad_groups, NULL, "4 input channels cannot be split into 3 offset groups");
}
