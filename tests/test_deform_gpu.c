/* Deformable convolution on the GPU against the CPU reference, on fresh random inputs:
 * the unfused op over odd shapes / strides / dilation / groups / masks / batch 1 and a prime
 * batch / zero offsets / offsets far outside the image; the DefT-fused layer under every
 * knob combination, offsets beyond the halo included; deterministic modes bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deform_testutil.h"
#include "dt_alloc.h"
#include "dt_check.h"
#include "dt_deform.h"
#include "dt_init.h"
#include "dt_layers.h"
#include "dt_test.h"

static const dt_deform_case CASES[] = {
    {"odd 3x3 s1 G1 mask bias", 3, 5, 13, 11, 7, {3, 3, 1, 1, 1, 1, 1, 1}, 1, 1, 1, 0.0f, 1.0f},
    {"s2 G2 batch 5", 5, 8, 17, 15, 6, {3, 3, 2, 2, 1, 1, 1, 1}, 2, 0, 0, 0.2f, 1.5f},
    {"dil2 G4 mask batch 1", 1, 8, 12, 14, 5, {3, 3, 1, 1, 2, 2, 2, 2}, 4, 1, 0, 0.0f, 1.0f},
    {"zero offsets", 2, 6, 9, 9, 4, {3, 3, 1, 1, 1, 1, 1, 1}, 1, 0, 1, 0.0f, 0.0f},
    {"far outside the image", 2, 4, 8, 10, 3, {3, 3, 1, 1, 1, 1, 1, 1}, 2, 1, 0, 6.0f, 10.0f},
    {"ResNet l3 shape, batch 3", 3, 256, 14, 14, 256, {3, 3, 1, 1, 1, 1, 1, 1}, 1, 0, 0, 0.0f, 1.0f},
};

typedef struct {
    const dt_deform_case *c;
    int det, tiled;
} op_arg;

static dt_tensor *b_deform(dt_tensor **in, void *a) {
    op_arg *o = a;
    dt_deft_knobs k = dt_deft_knobs_default();
    k.deterministic = o->det;
    k.halo = 2;
    return dt_deform_conv2d_mode(in[0], in[1], in[2], in[3], in[4], o->c->g, o->c->groups,
                                 o->tiled ? DT_DEFORM_DEFT : DT_DEFORM_UNFUSED, &k);
}

static void make_inputs(const dt_deform_case *c, dt_tensor **in) {
    int64_t Ho = dt_conv_out_size(c->h, c->g.kh, c->g.sh, c->g.ph, c->g.dh);
    int64_t Wo = dt_conv_out_size(c->w, c->g.kw, c->g.sw, c->g.pw, c->g.dw);
    int64_t K = (int64_t)c->g.kh * c->g.kw, sb[1] = {c->cout};
    in[0] = dt_test_randn4(c->n, c->c, c->h, c->w, 1.0f);
    in[1] = dt_test_offsets(c, Ho, Wo, 0);
    in[2] = NULL;
    if (c->mask) {
        in[2] = dt_tensor_new4(DT_CPU, c->n, c->groups * K, Ho, Wo);
        dt_tensor_fill_uniform(in[2], dt_test_rng(), 0.0f, 1.0f);
    }
    in[3] = dt_test_randn4(c->cout, c->c, c->g.kh, c->g.kw, 1.0f / sqrtf((float)(c->c * K)));
    in[4] = c->bias ? dt_test_randn(1, sb, 1.0f) : NULL;
    for (int i = 0; i < 5; i++)
        if (in[i]) dt_requires_grad(in[i]);
}

/* The op with given offsets, both implementations (unfused kernels; DefT tiled sampling),
 * deterministic or not, one image per chunk or several. */
DT_GPU_TEST(gpu_parity_deform_op_both_modes) {
    size_t budgets[2] = {1, 256 << 20};
    size_t old = dt_conv_col_budget();
    for (int tiled = 0; tiled < 2; tiled++)
        for (int bi = 0; bi < 2; bi++)
            for (int det = 0; det < 2; det++) {
                dt_conv_set_col_budget(budgets[bi]);
                for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
                    const dt_deform_case *c = &CASES[i];
                    dt_tensor *in[5];
                    make_inputs(c, in);
                    op_arg a = {c, det, tiled};
                    char name[160];
                    snprintf(name, sizeof name, "deform op %s %s%s (budget %zu)", tiled ? "deft" : "unfused", c->name,
                             det ? " det" : "", budgets[bi]);
                    EXPECT(dt_parity(name, b_deform, &a, NULL, 5, in, 2e-5f));
                }
            }
    dt_conv_set_col_budget(old);
}

/* Runs op twice on the GPU with the same inputs and checks that every gradient is the same
 * bit for bit. */
static int same_bits_twice(dt_tensor *(*build)(dt_tensor **, void *), void *arg, dt_tensor **in_cpu, int n_in, const char *what) {
    float *first[8] = {0};
    int ok = 1;
    for (int run = 0; run < 2; run++) {
        dt_scope_begin();
        dt_tensor *in[8];
        for (int i = 0; i < n_in; i++) {
            in[i] = in_cpu[i] ? dt_tensor_to(in_cpu[i], DT_GPU) : NULL;
            if (in[i]) in[i]->requires_grad = 1;
        }
        dt_tensor *y = build(in, arg);
        dt_tensor *R = dt_tensor_like(y);
        dt_init_reseed();
        dt_init_normal(R, 0, 1);
        dt_backward_with(y, R);
        for (int i = 0; i < n_in; i++) {
            if (!in[i]) continue;
            float *h = dt_tensor_host_copy(in[i]->grad);
            if (!run) first[i] = h;
            else {
                if (memcmp(h, first[i], in[i]->numel * sizeof(float))) {
                    dt_test_fail(__FILE__, __LINE__, "%s: gradient of input %d differs between two runs", what, i);
                    ok = 0;
                }
                free(h);
                free(first[i]);
            }
        }
        dt_scope_end();
    }
    return ok;
}

DT_GPU_TEST(gpu_deform_unfused_deterministic_is_bitwise) {
    const dt_deform_case *c = &CASES[0];
    dt_tensor *in[5];
    make_inputs(c, in);
    op_arg a = {c, 1, 0};
    EXPECT(same_bits_twice(b_deform, &a, in, 5, "unfused deterministic"));
    op_arg t = {c, 1, 1};
    EXPECT(same_bits_twice(b_deform, &t, in, 5, "deft (tiled) deterministic"));
}

/* ---- the fused layer ---- */

typedef struct {
    const char *name;
    int64_t n, c, h, w, cout;
    dt_conv_geom g;
    int groups, version, bias;
    float off_w_std;             /* std (px) of the input-dependent part of the offsets */
    float off_b_mean, off_b_std; /* offset biases: integer part ~ N(mean, std), see init_layer_pair */
} layer_case;

static const layer_case LAYERS[] = {
    {"odd 3x3 s1 G2 v2 bias", 3, 8, 11, 13, 6, {3, 3, 1, 1, 1, 1, 1, 1}, 2, 2, 1, 0.05f, 0.0f, 1.5f},
    {"s2 G1 v1 batch 5", 5, 16, 17, 15, 8, {3, 3, 2, 2, 1, 1, 1, 1}, 1, 1, 0, 0.05f, 0.3f, 1.5f},
    {"dil2 G1 v2 batch 1", 1, 8, 12, 14, 5, {3, 3, 1, 1, 2, 2, 2, 2}, 1, 2, 0, 0.05f, 0.0f, 1.5f},
    {"beyond halo and image", 2, 8, 10, 9, 4, {3, 3, 1, 1, 1, 1, 1, 1}, 1, 2, 0, 0.05f, 5.0f, 8.0f},
    {"l4-like 512ch 7x7", 2, 512, 7, 7, 16, {3, 3, 1, 1, 1, 1, 1, 1}, 1, 1, 0, 0.05f, 0.0f, 1.5f},
};

/* The GPU computes the offsets with its fused offset conv, the CPU with conv2d: they agree to
 * float rounding, not bit for bit. A sample that lands within that rounding of an integer
 * coordinate sits on a kink of bilinear sampling, where its offset gradient jumps, so the
 * offsets are kept away from integers: biases of integer + 0.5 +- 0.15 and an
 * input-dependent part of std off_w_std <= 0.05 px keep every fractional part in ~[0.2, 0.8].
 * (The op-level test gives both sides the same offsets and needs no such care.) */
static void init_layer_pair(const layer_case *lc, dt_deform_conv *lc_cpu, dt_deform_conv *lc_gpu) {
    dt_deform_conv_init(lc_cpu, NULL, "cpu", lc->c, lc->cout, lc->g, lc->groups, lc->version, lc->bias, 0.0f, DT_CPU);
    dt_deform_conv_init(lc_gpu, NULL, "gpu", lc->c, lc->cout, lc->g, lc->groups, lc->version, lc->bias, 0.0f, DT_GPU);
    dt_tensor_fill_normal(lc_cpu->weight, dt_test_rng(), 0, 1.0f / sqrtf((float)(lc->c * 9)));
    dt_tensor_fill_normal(lc_cpu->off_weight, dt_test_rng(), 0, lc->off_w_std / sqrtf((float)(lc->c * 9)));
    int64_t n_off = 2 * lc->groups * 9;
    for (int64_t i = 0; i < lc_cpu->off_bias->numel; i++) {
        float v = lc->off_b_mean + lc->off_b_std * dt_rng_normal(dt_test_rng());
        lc_cpu->off_bias->data[i] = i < n_off ? floorf(v) + 0.5f + 0.3f * (dt_rng_uniform(dt_test_rng()) - 0.5f)
                                              : v; /* mask logits: smooth, no kinks */
    }
    if (lc->bias) dt_tensor_fill_normal(lc_cpu->bias, dt_test_rng(), 0, 1);
    dt_tensor_copy(lc_gpu->weight, lc_cpu->weight);
    dt_tensor_copy(lc_gpu->off_weight, lc_cpu->off_weight);
    dt_tensor_copy(lc_gpu->off_bias, lc_cpu->off_bias);
    if (lc->bias) dt_tensor_copy(lc_gpu->bias, lc_cpu->bias);
}

static void free_layer(dt_deform_conv *l) {
    dt_tensor_free(l->weight);
    dt_tensor_free(l->off_weight);
    dt_tensor_free(l->off_bias);
    dt_tensor_free(l->bias);
}

static void zero_grads(dt_deform_conv *l) {
    l->weight->grad_valid = l->off_weight->grad_valid = l->off_bias->grad_valid = 0;
    if (l->bias) l->bias->grad_valid = 0;
}

/* Forward + backward of the CPU reference and the GPU layer; compares output and every
 * gradient. Returns 1 when all agree to tol. */
static int layer_parity(const layer_case *lc, dt_deform_conv *lcpu, dt_deform_conv *lgpu, const char *what, float tol) {
    int ok = 1;
    char name[256];
    dt_scope_begin();
    zero_grads(lcpu);
    zero_grads(lgpu);
    dt_tensor *x = dt_test_randn4(lc->n, lc->c, lc->h, lc->w, 1.0f), *xg = dt_tensor_to(x, DT_GPU);
    dt_requires_grad(x);
    dt_requires_grad(xg);
    dt_tensor *yc = dt_deform_conv_forward(lcpu, x), *yg = dt_deform_conv_forward(lgpu, xg);
    float *h = dt_tensor_host_copy(yg);
    snprintf(name, sizeof name, "%s: forward", what);
    ok &= dt_expect_close(name, h, yc->data, yc->numel, tol);
    free(h);
    dt_tensor *R = dt_tensor_like(yc);
    dt_tensor_fill_normal(R, dt_test_rng(), 0, 1);
    dt_backward_with(yc, R);
    dt_backward_with(yg, dt_tensor_to(R, DT_GPU));
    dt_tensor *pc[5] = {x, lcpu->weight, lcpu->off_weight, lcpu->off_bias, lcpu->bias};
    dt_tensor *pg[5] = {xg, lgpu->weight, lgpu->off_weight, lgpu->off_bias, lgpu->bias};
    const char *pn[5] = {"input", "weight", "offset weight", "offset bias", "bias"};
    for (int i = 0; i < 5; i++) {
        if (!pc[i]) continue;
        h = dt_tensor_host_copy(pg[i]->grad);
        snprintf(name, sizeof name, "%s: gradient of %s", what, pn[i]);
        ok &= dt_expect_close(name, h, pc[i]->grad->data, pc[i]->numel, tol);
        free(h);
    }
    dt_scope_end();
    return ok;
}

DT_GPU_TEST(gpu_parity_deft_layer_every_knob) {
    for (size_t li = 0; li < sizeof LAYERS / sizeof *LAYERS; li++) {
        const layer_case *lc = &LAYERS[li];
        dt_deform_conv lcpu, lgpu;
        init_layer_pair(lc, &lcpu, &lgpu);
        lgpu.mode = DT_DEFORM_DEFT;
        /* all 16 on/off combinations of the four switches, 8x8 tiles, halo 1 */
        int combos = li == 0 ? 16 : 4;
        for (int m = 0; m < combos; m++) {
            dt_deft_knobs k = dt_deft_knobs_default();
            k.halo = 1;
            k.fuse_offset = combos == 16 ? (m & 1) : 1;
            k.stage = combos == 16 ? !!(m & 2) : !!(m & 1);
            k.swizzle = combos == 16 ? !!(m & 4) : 1;
            k.deterministic = combos == 16 ? !!(m & 8) : !!(m & 2);
            lgpu.knobs = k;
            char what[256];
            snprintf(what, sizeof what, "deft %s [fuse %d stage %d swizzle %d det %d]", lc->name, k.fuse_offset, k.stage,
                     k.swizzle, k.deterministic);
            EXPECT(layer_parity(lc, &lcpu, &lgpu, what, 1e-4f));
        }
        /* tiles and halos, including the automatic halo from the statistics */
        int tiles[4][2] = {{4, 8}, {4, 4}, {16, 4}, {2, 16}}, halos[3] = {0, 3, -1};
        for (int t = 0; t < 4; t++) {
            lgpu.knobs = dt_deft_knobs_default();
            lgpu.knobs.tile_h = tiles[t][0];
            lgpu.knobs.tile_w = tiles[t][1];
            char what[256];
            snprintf(what, sizeof what, "deft %s [tile %dx%d]", lc->name, tiles[t][0], tiles[t][1]);
            EXPECT(layer_parity(lc, &lcpu, &lgpu, what, 1e-4f));
        }
        for (int hh = 0; hh < 3; hh++) {
            lgpu.knobs = dt_deft_knobs_default();
            lgpu.knobs.halo = halos[hh];
            lgpu.calls = 0;
            char what[256];
            snprintf(what, sizeof what, "deft %s [halo %d]", lc->name, halos[hh]);
            EXPECT(layer_parity(lc, &lcpu, &lgpu, what, 1e-4f));
            if (halos[hh] < 0 && dt_test_verbose()) printf("    auto halo chose %d\n", lgpu.cur_halo);
        }
        free_layer(&lcpu);
        free_layer(&lgpu);
    }
}

typedef struct {
    dt_deform_conv *l;
} layer_arg;
static dt_tensor *b_layer(dt_tensor **in, void *a) {
    dt_deform_conv *l = ((layer_arg *)a)->l;
    l->weight = in[1];
    l->off_weight = in[2];
    l->off_bias = in[3];
    return dt_deform_conv_forward(l, in[0]);
}

/* A batch split into chunks of unequal size: the smaller last chunk splits channels more
 * finely (more scratch) than the first; a regression test for a scratch overflow that only
 * showed at batch 256. */
DT_GPU_TEST(gpu_deft_uneven_chunks) {
    const layer_case lc = {"uneven chunks", 7, 64, 7, 7, 32, {3, 3, 1, 1, 1, 1, 1, 1}, 1, 2, 0, 0.05f, 0.0f, 1.5f};
    dt_deform_conv lcpu, lgpu;
    init_layer_pair(&lc, &lcpu, &lgpu);
    lgpu.mode = DT_DEFORM_DEFT;
    size_t old = dt_conv_col_budget();
    dt_conv_set_col_budget((size_t)5 * 64 * 9 * 49 * sizeof(float)); /* chunks of 5 and 2 images */
    EXPECT(layer_parity(&lc, &lcpu, &lgpu, "deft uneven chunks", 1e-4f));
    lgpu.knobs.deterministic = 1;
    EXPECT(layer_parity(&lc, &lcpu, &lgpu, "deft uneven chunks det", 1e-4f));
    dt_conv_set_col_budget(old);
    free_layer(&lcpu);
    free_layer(&lgpu);
}

DT_GPU_TEST(gpu_deft_deterministic_is_bitwise) {
    const layer_case *lc = &LAYERS[0];
    dt_deform_conv lcpu, lgpu;
    init_layer_pair(lc, &lcpu, &lgpu);
    lgpu.mode = DT_DEFORM_DEFT;
    lgpu.knobs.deterministic = 1;
    lgpu.knobs.halo = 1;
    dt_tensor *x = dt_test_randn4(lc->n, lc->c, lc->h, lc->w, 1.0f);
    dt_tensor *own[4] = {lgpu.weight, lgpu.off_weight, lgpu.off_bias, lgpu.bias};
    dt_tensor *in[4] = {x, dt_tensor_to(lgpu.weight, DT_CPU), dt_tensor_to(lgpu.off_weight, DT_CPU),
                        dt_tensor_to(lgpu.off_bias, DT_CPU)};
    layer_arg a = {&lgpu};
    EXPECT(same_bits_twice(b_layer, &a, in, 4, "deft deterministic"));
    lgpu.weight = own[0];
    lgpu.off_weight = own[1];
    lgpu.off_bias = own[2];
    lgpu.bias = own[3];
    free_layer(&lcpu);
    free_layer(&lgpu);
}

DT_GPU_TEST(gpu_deft_zero_offsets_equal_conv2d) {
    dt_deform_conv l;
    dt_conv_geom g = dt_geom(3, 2, 1, 1);
    dt_deform_conv_init(&l, NULL, "z", 16, 8, g, 1, 2, 0, 0.0f, DT_GPU);
    l.mode = DT_DEFORM_DEFT;
    dt_tensor_fill(l.off_bias, 0.0f);
    /* mask logits 0 -> sigmoid 0.5: compare with 0.5 * conv2d */
    dt_tensor *x = dt_tensor_to(dt_test_randn4(3, 16, 15, 13, 1.0f), DT_GPU);
    dt_tensor *y = dt_deform_conv_forward(&l, x), *yc = dt_conv2d(x, l.weight, NULL, g);
    float *a = dt_tensor_host_copy(y), *b = dt_tensor_host_copy(yc);
    for (int64_t i = 0; i < yc->numel; i++) b[i] *= 0.5f;
    EXPECT(dt_expect_close("deft zero offsets vs 0.5 * conv2d", a, b, yc->numel, 1e-5));
    free(a);
    free(b);
    free_layer(&l);
}

DT_GPU_TEST(gpu_deft_matches_unfused_on_resnet_shape) {
    const layer_case lc = {"l2a-like", 4, 64, 56, 56, 128, {3, 3, 2, 2, 1, 1, 1, 1}, 1, 1, 0, 0.05f, 0.0f, 1.5f};
    dt_deform_conv la, lb, lcpu;
    init_layer_pair(&lc, &lcpu, &la);
    dt_deform_conv_init(&lb, NULL, "b", lc.c, lc.cout, lc.g, 1, 1, 0, 0.0f, DT_GPU);
    dt_tensor_copy(lb.weight, la.weight);
    dt_tensor_copy(lb.off_weight, la.off_weight);
    dt_tensor_copy(lb.off_bias, la.off_bias);
    la.mode = DT_DEFORM_DEFT;
    lb.mode = DT_DEFORM_UNFUSED;
    dt_tensor *x = dt_tensor_to(dt_test_randn4(lc.n, lc.c, lc.h, lc.w, 1.0f), DT_GPU);
    dt_requires_grad(x);
    dt_tensor *ya = dt_deform_conv_forward(&la, x);
    float *ha = dt_tensor_host_copy(ya);
    dt_tensor *yb = dt_deform_conv_forward(&lb, x);
    float *hb = dt_tensor_host_copy(yb);
    EXPECT(dt_expect_close("deft vs unfused forward", ha, hb, ya->numel, 1e-5));
    free(ha);
    free(hb);
    free_layer(&la);
    free_layer(&lb);
    free_layer(&lcpu);
}
