/* The deformable convolution's op cases (dt_opcase.h), in two tables:
 *
 *   deform       the op, dt_deform_conv2d_mode: offsets and mask are f32 inputs; the unfused
 *                baseline in f32 NCHW (the only combination it has), deft in f32 NCHW, f32
 *                NHWC and bf16 NHWC;
 *   deform_deft  the deft layer's node, dt_deform_conv2d_deft: the offset conv inside, its
 *                weight and bias f32 inputs, the main weight a product weight (bf16 working
 *                copy in bf16).
 *
 * Between them: DCNv1 and v2, offset groups 1 and 2, stride 2 with odd sizes, dilation, channel
 * counts that are no multiple of 4 (scalar loads everywhere), of 8 or of 32 (the offset conv's
 * FFMA kernels instead of tensor cores in bf16), batch 1, prime batches with uneven chunks,
 * every knob (dx gather / atomic, stage, fuse_offset, deterministic), and ResNet-18's shapes
 * (GPU parity only: too large for finite differences and the CPU suite).
 *
 * Offsets. Bilinear sampling has kinks where a sample's coordinate crosses an integer; a finite
 * difference across one measures neither slope, so a gradient check must keep every sample
 * away from them. The offsets the op sees are a fixed field of half-integers (-1.5, -0.5, 0.5,
 * 1.5 px by channel and position: std 1.1 px, and the border positions' samples land outside
 * the image) plus the case's input, N(0, OFF_STD = 0.05 px): every coordinate stays 10 sigma
 * from an integer, and the input still moves every sample. The layer's offsets
 * are its offset conv's: the same field goes into its bias (mask logits -1, 0, 1 instead), and
 * the gradient-checked cases keep the x-dependent part small (offset weights of std
 * 0.03 / sqrt(C*K): 0.03 px, 0.06 px in all with the bias' random part: 8 sigma from a kink);
 * the cases without finite differences let it vary by ~1 px.
 *
 * Both tables are made from the deformable tests' one case table, DEFORM_CASES below
 * (tests/deform_testutil.h: a row a problem, its `runs` bits naming the suites that take it):
 * the op's rows (DT_DC_OP), the layer's (DT_DC_LAYER), and the problems of tests/test_deft.c
 * (DT_DC_CPU_DEFT: deft against unfused on the CPU at every knob, the inverse index's
 * invariants) and tests/test_deform_gpu.c (DT_DC_KERNELS: each deft kernel against its twin,
 * the staged kernels' tiles, swizzle and halos, determinism), tests/test_deform.c (DT_DC_REFERENCE:
 * the reference against the sum written out), tests/test_precision.c (DT_DC_TF32: the TF32
 * runs), and the layers' problems: tests/test_deform_gpu.c's tiles and halos (DT_DC_GPU_LAYER)
 * and ResNet shapes (DT_DC_GPU_RESNET), tests/test_deft.c's layer at every knob
 * (DT_DC_CPU_LAYER). Beside it only the single problems of one check each: the 2^31 columns,
 * zero offsets, the offset statistics and the offset conv's tensor cores. */
#include <stdlib.h>

#include "core/dt_common.h"
#include "ops/deform/dt_deform.h"
#include "ops/dt_layers.h"
#include "ops/dt_ops.h"
#include "tests/deform_testutil.h"
#include "tests/dt_opcase.h"
#include "tests/dt_test.h"

#define OFF_STD 0.05f /* the offsets' (and the layer's offset bias') random part, px */

static const dt_deform_knob_set K_GATHER = {DT_DX_GATHER, 0, 0, 0, -1}, K_ATOMIC = {DT_DX_ATOMIC, 0, 0, 0, -1},
                                K_DET = {DT_DX_GATHER, 0, 0, 1, -1}, K_DET_ATOMIC = {DT_DX_ATOMIC, 0, 0, 1, -1},
                                K_STAGE1 = {DT_DX_GATHER, 0, 1, 0, 1}, K_STAGE2 = {DT_DX_GATHER, 0, 1, 0, 2},
                                K_FUSE = {DT_DX_GATHER, 1, 0, 0, -1}, K_FUSE_STAGE1 = {DT_DX_GATHER, 1, 1, 0, 1},
                                K_DEFT_RECIPE = {DT_DX_ATOMIC, 1, 1, 0, 2}; /* fuse + stage + atomics */

/* The fixed part of offset channel ch at position p: a half-integer in {-1.5, -0.5, 0.5, 1.5}
 * (a hash of both, so neighbours differ). */
static float half_integer(int64_t ch, int64_t p) {
    uint32_t h = (uint32_t)(ch * 40503u + p * 2654435761u);
    h ^= h >> 13;
    return (float)((h >> 7) % 4u) - 1.5f;
}

/* t + the field (channels [0, n_off) of t [N, CH, Ho, Wo] or [CH]; channels beyond, mask
 * logits, get -1, 0, 1 by channel), on t's device. */
static dt_tensor *with_field(dt_tensor *t, int64_t n_off) {
    int64_t ch_count = t->ndim == 4 ? t->shape[1] : t->shape[0], P = t->ndim == 4 ? t->shape[2] * t->shape[3] : 1;
    float *f = dt_xmalloc((size_t)t->numel * sizeof(float));
    for (int64_t e = 0; e < t->numel; e++) {
        int64_t ch = e / P % ch_count, p = e % P;
        f[e] = ch < n_off ? half_integer(ch, p) : (float)(ch % 3) - 1.0f;
    }
    dt_tensor *field = dt_tensor_from_values(t->ndim, t->shape, t->dev, DT_F32, DT_NCHW, f);
    free(f);
    return dt_add(t, field);
}

static dt_deform_knobs knobs_of(const dt_deform_row *a) {
    dt_deform_knobs k = dt_deform_knobs_default();
    k.dx = a->knobs->dx;
    k.fuse_offset = a->knobs->fuse;
    k.stage = a->knobs->stage;
    k.deterministic = a->knobs->det;
    k.halo = a->knobs->halo;
    return k;
}

/* The column budget that gives `chunk` images a chunk for input x (0: unchanged). */
static size_t budget_for(const dt_deform_row *a, const dt_tensor *x) {
    if (!a->chunk) return 0;
    const dt_conv_geom g = a->s.g;
    int64_t Ho = dt_conv_out_size(x->shape[2], g.kh, g.sh, g.ph, g.dh);
    int64_t Wo = dt_conv_out_size(x->shape[3], g.kw, g.sw, g.pw, g.dw);
    return (size_t)(a->chunk * Ho * Wo * x->shape[1] * g.kh * g.kw) * dt_dtype_size(x->dtype);
}

/* in: x, offset part [N, 2GK, Ho, Wo], mask [N, GK, Ho, Wo], w, bias */
static dt_tensor *build_op(const dt_opcase *c, dt_tensor **in, void *state) {
    (void)state;
    const dt_deform_row *a = c->arg;
    dt_deform_knobs k = knobs_of(a);
    size_t old = dt_conv_col_budget(), b = budget_for(a, in[0]);
    if (b) dt_conv_set_col_budget(b); /* the plan, saved for the backward, keeps the chunking */
    dt_tensor *y = dt_deform_conv2d_mode(in[0], with_field(in[1], in[1]->shape[1]), a->s.mask ? in[2] : NULL, in[3],
                                         a->s.bias ? in[4] : NULL, a->s.g, a->s.groups, a->mode, &k, DT_MATH_FP32);
    dt_conv_set_col_budget(old);
    return a->residual ? dt_add(y, in[0]) : y;
}

/* in: x, offset weight [OC, C, kh, kw], offset bias part [OC], w, bias */
static dt_tensor *build_layer(const dt_opcase *c, dt_tensor **in, void *state) {
    (void)state;
    const dt_deform_row *a = c->arg;
    dt_deform_knobs k = knobs_of(a);
    size_t old = dt_conv_col_budget(), b = budget_for(a, in[0]);
    if (b) dt_conv_set_col_budget(b);
    int halo = a->knobs->stage ? a->knobs->halo : 0; /* the layer would size it from its offset statistics */
    dt_tensor *boff = with_field(in[2], 2 * a->s.groups * a->s.g.kh * a->s.g.kw);
    dt_tensor *y = dt_deform_conv2d_deft(in[0], in[1], boff, in[3], a->s.bias ? in[4] : NULL, a->s.g, a->s.groups,
                                         a->s.mask ? 2 : 1, &k, halo, DT_MATH_FP32, NULL);
    dt_conv_set_col_budget(old);
    return a->residual ? dt_add(y, in[0]) : y;
}

/* ---- the one table */

/* A row of the op on x [n, cin, ih, iw] with a kh x kw kernel (stride, padding, dilation per
 * axis); knobs: a dt_deform_knob_set. grad: 0 (finite differences on the CPU) or -1 (parity
 * only); bf16: 0 (the format bound, 2^-6) or -1 (too large for the CPU suite, or beyond the
 * bound: see the row). types: DT_F32_NCHW for unfused (the only combination it has), 0 for
 * deft (all of its tables'). */
#define OP_G(label, types_, mode_, n_, cin, ih, iw, cout_, kh, kw, sh, sw, ph, pw, dh, dw, G, mask_, bias_, knobs_,    \
             chunk_, res, grad_, bf16_)                                                                                \
    {.s = {label, n_, cin, ih, iw, cout_, {kh, kw, sh, sw, ph, pw, dh, dw}, G, mask_, bias_, 0.0f, 0.0f},               \
     .runs = DT_DC_OP, .mode = mode_, .knobs = &knobs_, .chunk = chunk_, .residual = res, .grad = grad_,                \
     .bf16 = bf16_, .types = types_}
/* The same with a square k x k kernel, stride s, padding p, dilation d. */
#define OP(label, types_, mode_, n, cin, ih, iw, cout, k, s, p, d, G, mask_, bias_, knobs, chunk_, res, grad, bf16)    \
    OP_G(label, types_, mode_, n, cin, ih, iw, cout, k, k, s, s, p, p, d, d, G, mask_, bias_, knobs, chunk_, res, grad, \
         bf16)

/* Offset weights of std px / sqrt(C*K): offsets that vary with x by ~px (x ~ N(0, 1)); the
 * square root written out (a static initializer cannot call sqrtf). */
#define OFFW(px, sqrt_ck) ((px) / (sqrt_ck))

/* A row of the layer's node; v2: DCNv2 (the mask), offw: the offset weights' std (OFFW). */
#define LAYER_G(label, n_, cin, ih, iw, cout_, kh, kw, sh, sw, ph, pw, dh, dw, G, v2, bias_, knobs_, chunk_, res,      \
                offw_, grad_, bf16_)                                                                                   \
    {.s = {label, n_, cin, ih, iw, cout_, {kh, kw, sh, sw, ph, pw, dh, dw}, G, v2, bias_, 0.0f, 0.0f},                  \
     .runs = DT_DC_LAYER, .mode = DT_DEFORM_DEFT, .knobs = &knobs_, .chunk = chunk_, .residual = res, .offw = offw_,    \
     .grad = grad_, .bf16 = bf16_}
#define LAYER(label, n, cin, ih, iw, cout, k, s, p, d, G, v2, bias_, knobs, chunk_, res, offw, grad, bf16)             \
    LAYER_G(label, n, cin, ih, iw, cout, k, k, s, s, p, p, d, d, G, v2, bias_, knobs, chunk_, res, offw, grad, bf16)

/* A problem of the suites that make their own inputs (dt_test_deform_inputs): runs, then
 * dt_deform_case's fields - name, n, c, h, w, cout, {kh, kw, sh, sw, ph, pw, dh, dw}, groups,
 * mask, bias, off_mean, off_std. */
#define PROBLEM(runs_, ...) {.s = {__VA_ARGS__}, .runs = runs_}

static const dt_deform_row DEFORM_CASES[] = {
    /* the op (DT_DC_OP) */
    OP("unfused v2 3x3, bias", DT_F32_NCHW, DT_DEFORM_UNFUSED, 2, 6, 8, 7, 5, 3, 1, 1, 1, 1, 1, 1, K_GATHER, 0, 0, 0,
       0),
    OP("unfused v1 G2 s2 odd 11x9, prime batch 3 in chunks of 1", DT_F32_NCHW, DT_DEFORM_UNFUSED, 3, 8, 11, 9, 4, 3, 2,
       1, 1, 2, 0, 0, K_GATHER, 1, 0, 0, 0),
    OP("unfused v2 deterministic (fixed point), residual", DT_F32_NCHW, DT_DEFORM_UNFUSED, 2, 4, 7, 8, 4, 3, 1, 1, 1, 1,
       1, 0, K_DET, 0, 1, 0, 0),
    OP("deft v2 3x3 C 8, bias", 0, DT_DEFORM_DEFT, 2, 8, 9, 8, 6, 3, 1, 1, 1, 1, 1, 1, K_GATHER, 0, 0, 0, 0),
    OP("deft v1 G2 s2 odd 11x9, C 12 (Cg 6: scalar)", 0, DT_DEFORM_DEFT, 3, 12, 11, 9, 5, 3, 2, 1, 1, 2, 0,
       0, K_GATHER, 0, 0, 0, 0),
    OP("deft v2 batch 1, C 13, dilation 2", 0, DT_DEFORM_DEFT, 1, 13, 10, 9, 4, 3, 1, 2, 2, 1, 1, 1,
       K_GATHER, 0, 0, 0, 0),
    OP("deft v2 G2 C 32, prime batch 5 in chunks of 2", 0, DT_DEFORM_DEFT, 5, 32, 7, 6, 8, 3, 1, 1, 1, 2, 1,
       0, K_GATHER, 2, 0, 0, 0),
    OP_G("deft v2 2x3 kernel, stride (1, 2), padding (0, 1), G3 (Cg 2)", 0, DT_DEFORM_DEFT, 2, 6, 6, 9, 4, 2,
         3, 1, 2, 0, 1, 1, 1, 3, 1, 1, K_GATHER, 0, 0, 0, 0),
    OP_G("unfused v1 2x3 kernel, stride (1, 2), padding (0, 1), G3", DT_F32_NCHW, DT_DEFORM_UNFUSED, 2, 6, 6, 9, 4, 2,
         3, 1, 2, 0, 1, 1, 1, 3, 0, 0, K_GATHER, 0, 0, 0, 0),
    OP("deft v2 residual (dx accumulated)", 0, DT_DEFORM_DEFT, 2, 8, 8, 9, 8, 3, 1, 1, 1, 1, 1, 1, K_GATHER,
       0, 1, 0, 0),
    OP("deft v2 dx=atomic", 0, DT_DEFORM_DEFT, 2, 8, 8, 9, 4, 3, 1, 1, 1, 1, 1, 1, K_ATOMIC, 0, 0, 0, 0),
    OP("deft v1 G2 dx=atomic, s2, chunks of 1", 0, DT_DEFORM_DEFT, 3, 8, 9, 9, 4, 3, 2, 1, 1, 2, 0, 0,
       K_ATOMIC, 1, 0, 0, 0),
    OP("deft v2 dx=atomic, residual", 0, DT_DEFORM_DEFT, 2, 8, 7, 8, 8, 3, 1, 1, 1, 1, 1, 0, K_ATOMIC, 0, 1,
       0, 0),
    OP("deft v2 stage halo 1", 0, DT_DEFORM_DEFT, 2, 8, 9, 10, 4, 3, 1, 1, 1, 1, 1, 0, K_STAGE1, 0, 0, 0, 0),
    OP("deft v1 G2 stage halo 2, C 6, s2", 0, DT_DEFORM_DEFT, 2, 6, 11, 10, 4, 3, 2, 1, 1, 2, 0, 0, K_STAGE2,
       0, 0, 0, 0),
    OP("deft v2 deterministic (atomic asked)", 0, DT_DEFORM_DEFT, 2, 8, 7, 7, 4, 3, 1, 1, 1, 1, 1, 0,
       K_DET_ATOMIC, 0, 0, 0, 0),
    OP("deft ResNet l1 shape, batch 2", 0, DT_DEFORM_DEFT, 2, 64, 56, 56, 64, 3, 1, 1, 1, 1, 0, 0, K_GATHER,
       0, 0, -1, -1),
    OP("deft ResNet l4a shape (s2), batch 3", 0, DT_DEFORM_DEFT, 3, 256, 14, 14, 512, 3, 2, 1, 1, 1, 0, 0,
       K_GATHER, 0, 0, -1, -1),
    OP("unfused ResNet l2a shape (s2), batch 2", DT_F32_NCHW, DT_DEFORM_UNFUSED, 2, 64, 56, 56, 128, 3, 2, 1, 1, 1, 0,
       0, K_GATHER, 0, 0, -1, -1),

    /* the deft layer's node (DT_DC_LAYER) */
    LAYER("v1 C 32 (tensor-core offset conv in bf16), bias", 2, 32, 7, 6, 8, 3, 1, 1, 1, 1, 0, 1, K_GATHER, 0, 0,
          OFFW(0.03f, 16.97f), 0, 0),
    LAYER("v2 G2 C 12 s2 odd 11x9 (FFMA offset conv)", 3, 12, 11, 9, 6, 3, 2, 1, 1, 2, 1, 0, K_GATHER, 0, 0,
          OFFW(0.03f, 10.39f), 0, 0),
    LAYER("v1 G2 C 6 batch 1 (C % 4 != 0: lane kernels)", 1, 6, 8, 9, 4, 3, 1, 1, 1, 2, 0, 1, K_GATHER, 0, 0,
          OFFW(0.03f, 7.35f), 0, 0),
    LAYER("v2 C 64 G2 (two offset-channel tiles), dilation 2", 2, 64, 9, 10, 8, 3, 1, 2, 2, 2, 1, 0, K_GATHER, 0, 0,
          OFFW(0.03f, 24.00f), -1, 0),
    LAYER_G("v2 3x1 kernel, stride (2, 1), padding (1, 0)", 2, 8, 9, 7, 4, 3, 1, 2, 1, 1, 0, 1, 1, 1, 1, 0, K_GATHER, 0,
            0, OFFW(0.03f, 4.90f), 0, 0),
    LAYER("v2 C 20, prime batch 5 in chunks of 2", 5, 20, 5, 6, 6, 3, 1, 1, 1, 1, 1, 1, K_GATHER, 2, 0,
          OFFW(0.03f, 13.42f), 0, 0),
    LAYER("v2 C 32 residual (dx accumulated)", 1, 32, 6, 6, 32, 3, 1, 1, 1, 1, 1, 0, K_GATHER, 0, 1,
          OFFW(0.03f, 16.97f), 0, 0),
    LAYER("v1 dx=atomic", 2, 8, 9, 8, 4, 3, 1, 1, 1, 1, 0, 0, K_ATOMIC, 0, 0, OFFW(0.03f, 8.49f), 0, 0),
    LAYER("v2 C 32 dx=atomic, chunks of 1", 3, 32, 7, 7, 4, 3, 1, 1, 1, 1, 1, 1, K_ATOMIC, 1, 0, OFFW(0.03f, 16.97f),
          -1, 0),
    LAYER("v2 dx=atomic, residual", 2, 8, 8, 8, 8, 3, 1, 1, 1, 1, 1, 0, K_ATOMIC, 0, 1, OFFW(0.03f, 8.49f), 0, 0),
    LAYER("v2 dx=atomic, prime batch 5 in chunks of 2 (2 + 2 + 1)", 5, 8, 6, 7, 4, 3, 1, 1, 1, 1, 1, 1, K_ATOMIC, 2, 0,
          OFFW(0.03f, 8.49f), 0, 0),
    LAYER("v2 fuse_offset", 2, 8, 9, 9, 4, 3, 1, 1, 1, 1, 1, 0, K_FUSE, 0, 0, OFFW(0.03f, 8.49f), 0, 0),
    LAYER("v1 C 32 fuse_offset (bf16: rounded offset weights)", 2, 32, 8, 9, 4, 3, 1, 1, 1, 1, 0, 0, K_FUSE, 0, 0,
          OFFW(0.03f, 16.97f), -1, 0),
    LAYER("v2 G2 stage halo 1, s2", 2, 8, 11, 10, 4, 3, 2, 1, 1, 2, 1, 0, K_STAGE1, 0, 0, OFFW(0.03f, 8.49f), 0, 0),
    LAYER("v2 fuse_offset + stage halo 2 + dx=atomic (DefT's recipe)", 2, 12, 9, 9, 4, 3, 1, 1, 1, 1, 1, 1,
          K_DEFT_RECIPE, 0, 0, OFFW(0.03f, 10.39f), 0, 0),
    LAYER("v2 deterministic (atomic asked)", 2, 8, 8, 8, 4, 3, 1, 1, 1, 1, 1, 0, K_DET_ATOMIC, 0, 0, OFFW(0.03f, 8.49f),
          0, 0),
    /* parity only: bf16's offsets (x and the offset weights rounded) move ~0.004 px from f32's,
     * and the ~1.6 % of samples that cross a kink on the way change their gradients by O(1) */
    LAYER("v2 C 32, offsets varying by ~1 px", 2, 32, 12, 11, 16, 3, 1, 1, 1, 1, 1, 1, K_GATHER, 0, 0,
          OFFW(1.0f, 16.97f), -1, -1),
    LAYER("ResNet l1 shape, batch 2", 2, 64, 56, 56, 64, 3, 1, 1, 1, 1, 0, 0, K_GATHER, 0, 0, OFFW(1.0f, 24.00f), -1,
          -1),
    LAYER("ResNet l2a shape (s2), batch 2", 2, 64, 56, 56, 128, 3, 2, 1, 1, 1, 0, 0, K_GATHER, 0, 0, OFFW(1.0f, 24.00f),
          -1, -1),
    LAYER("ResNet l3 shape, v2, prime batch 3", 3, 256, 14, 14, 256, 3, 1, 1, 1, 1, 1, 0, K_GATHER, 0, 0,
          OFFW(1.0f, 48.00f), -1, -1),
    LAYER("ResNet l4 shape, batch 2, fuse_offset + stage", 2, 512, 7, 7, 512, 3, 1, 1, 1, 1, 0, 0, K_FUSE_STAGE1, 0, 0,
          OFFW(1.0f, 67.88f), -1, -1),

    /* test_deform_gpu.c: the kernels against their CPU twins (DT_DC_KERNELS) */
    PROBLEM(DT_DC_KERNELS, "odd 3x3 s1 G1 mask bias", 3, 5, 13, 11, 7, {3, 3, 1, 1, 1, 1, 1, 1}, 1, 1, 1, 0.0f, 1.0f),
    PROBLEM(DT_DC_KERNELS, "s2 G2 batch 5", 5, 8, 17, 15, 6, {3, 3, 2, 2, 1, 1, 1, 1}, 2, 0, 0, 0.2f, 1.5f),
    PROBLEM(DT_DC_KERNELS, "dil2 G4 (2 ch a group) mask batch 1", 1, 8, 12, 14, 5, {3, 3, 1, 1, 2, 2, 2, 2}, 4, 1, 0, 0.0f,
            1.0f),
    PROBLEM(DT_DC_KERNELS, "2x3 s(1,2) p(0,1) G3", 2, 9, 10, 11, 4, {2, 3, 1, 2, 0, 1, 1, 1}, 3, 0, 1, 0.0f, 2.0f),
    PROBLEM(DT_DC_KERNELS, "zero offsets", 2, 6, 9, 9, 4, {3, 3, 1, 1, 1, 1, 1, 1}, 1, 0, 1, 0.0f, 0.0f),
    PROBLEM(DT_DC_KERNELS, "far outside the image", 2, 4, 8, 10, 3, {3, 3, 1, 1, 1, 1, 1, 1}, 2, 1, 0, 6.0f, 10.0f),
    PROBLEM(DT_DC_KERNELS, "offsets of 20 px", 2, 32, 24, 20, 8, {3, 3, 1, 1, 1, 1, 1, 1}, 1, 1, 1, 0.0f, 20.0f),
    PROBLEM(DT_DC_KERNELS, "prime batch 7, C 96", 7, 96, 9, 10, 16, {3, 3, 1, 1, 1, 1, 1, 1}, 1, 1, 0, 0.0f, 1.5f),
    PROBLEM(DT_DC_KERNELS, "ResNet l3 shape, batch 3", 3, 256, 14, 14, 256, {3, 3, 1, 1, 1, 1, 1, 1}, 1, 0, 0, 0.0f, 1.0f),
    PROBLEM(DT_DC_KERNELS, "ResNet l4 shape, batch 2, G2", 2, 512, 7, 7, 64, {3, 3, 1, 1, 1, 1, 1, 1}, 2, 1, 1, 0.0f, 1.0f),
    /* test_deft.c: deft against the reference on the CPU, the inverse index (DT_DC_CPU_DEFT) */
    PROBLEM(DT_DC_CPU_DEFT, "3x3 s1 G1 mask bias", 2, 8, 7, 6, 3, {3, 3, 1, 1, 1, 1, 1, 1}, 1, 1, 1, 0.0f, 1.0f),
    PROBLEM(DT_DC_CPU_DEFT, "3x3 s2 G2 (2 ch a group)", 3, 4, 9, 8, 2, {3, 3, 2, 2, 1, 1, 1, 1}, 2, 0, 0, 0.3f, 1.5f),
    PROBLEM(DT_DC_CPU_DEFT, "3x3 dil2 G2 mask", 1, 6, 8, 9, 3, {3, 3, 1, 1, 2, 2, 2, 2}, 2, 1, 0, 0.0f, 0.8f),
    PROBLEM(DT_DC_CPU_DEFT, "2x3 s(1,2) p(0,1) G3", 2, 3, 6, 7, 2, {2, 3, 1, 2, 0, 1, 1, 1}, 3, 0, 1, 0.0f, 2.0f),
    PROBLEM(DT_DC_CPU_DEFT, "far outside the image", 2, 2, 5, 5, 2, {3, 3, 1, 1, 1, 1, 1, 1}, 1, 1, 0, 4.0f, 6.0f),
    PROBLEM(DT_DC_CPU_DEFT, "offsets of 20 px", 2, 16, 12, 10, 5, {3, 3, 1, 1, 1, 1, 1, 1}, 1, 1, 1, 0.0f, 20.0f),
    PROBLEM(DT_DC_CPU_DEFT, "prime batch 7, G3 of 4", 7, 12, 5, 6, 4, {3, 3, 1, 1, 1, 1, 1, 1}, 3, 1, 1, 0.5f, 1.2f),
    /* test_deform.c: the reference against the sum written out (DT_DC_REFERENCE) */
    PROBLEM(DT_DC_REFERENCE, "3x3 s1 G1 mask bias", 2, 4, 7, 6, 3, {3, 3, 1, 1, 1, 1, 1, 1}, 1, 1, 1, 0.0f, 1.0f),
    PROBLEM(DT_DC_REFERENCE, "3x3 s2 G2", 3, 4, 9, 8, 2, {3, 3, 2, 2, 1, 1, 1, 1}, 2, 0, 0, 0.3f, 1.5f),
    PROBLEM(DT_DC_REFERENCE, "3x3 dil2 G2 mask", 1, 6, 8, 9, 3, {3, 3, 1, 1, 2, 2, 2, 2}, 2, 1, 0, 0.0f, 0.8f),
    PROBLEM(DT_DC_REFERENCE, "2x3 s(1,2) p(0,1) G3", 2, 3, 6, 7, 2, {2, 3, 1, 2, 0, 1, 1, 1}, 3, 0, 1, 0.0f, 2.0f),
    PROBLEM(DT_DC_REFERENCE, "3x3 far outside", 2, 2, 5, 5, 2, {3, 3, 1, 1, 1, 1, 1, 1}, 1, 1, 0, 4.0f, 6.0f),
    /* test_precision.c: TF32 products within the format's bound (DT_DC_TF32) */
    PROBLEM(DT_DC_TF32, "3x3 s1 G1 mask bias", 2, 8, 9, 7, 6, {3, 3, 1, 1, 1, 1, 1, 1}, 1, 1, 1, 0.0f, 1.0f),
    PROBLEM(DT_DC_TF32, "3x3 s2 G2 DCNv1", 3, 8, 10, 9, 5, {3, 3, 2, 2, 1, 1, 1, 1}, 2, 0, 0, 0.3f, 1.5f),
    PROBLEM(DT_DC_TF32, "offsets of 6 px, C 32", 2, 32, 12, 10, 16, {3, 3, 1, 1, 1, 1, 1, 1}, 1, 1, 1, 0.0f, 6.0f),
    /* test_deform_gpu.c: the GPU layer's tiles, swizzle and halos against the CPU's unfused layer,
     * bitwise determinism (the first row) (DT_DC_GPU_LAYER); mask: DCNv2; off_mean, off_std: the
     * offset biases' integer part (tests/test_deform_gpu.c's init_layer_pair) */
    PROBLEM(DT_DC_GPU_LAYER, "odd 3x3 s1 G2 v2 bias", 3, 8, 11, 13, 6, {3, 3, 1, 1, 1, 1, 1, 1}, 2, 1, 1, 0.0f, 1.5f),
    PROBLEM(DT_DC_GPU_LAYER, "s2 G1 v1 batch 5", 5, 16, 17, 15, 8, {3, 3, 2, 2, 1, 1, 1, 1}, 1, 0, 0, 0.3f, 1.5f),
    PROBLEM(DT_DC_GPU_LAYER, "dil2 G1 v2 batch 1, 6 channels", 1, 6, 12, 14, 5, {3, 3, 1, 1, 2, 2, 2, 2}, 1, 1, 0, 0.0f,
            1.5f),
    PROBLEM(DT_DC_GPU_LAYER, "beyond halo and image", 2, 8, 10, 9, 4, {3, 3, 1, 1, 1, 1, 1, 1}, 1, 1, 0, 5.0f, 8.0f),
    PROBLEM(DT_DC_GPU_LAYER, "l4-like 512ch 7x7", 2, 512, 7, 7, 16, {3, 3, 1, 1, 1, 1, 1, 1}, 1, 0, 0, 0.0f, 1.5f),
    /* test_deform_gpu.c: the deft layer against the unfused layer on the GPU on ResNet's shapes
     * (DT_DC_GPU_RESNET; the offsets as DT_DC_GPU_LAYER's) */
    PROBLEM(DT_DC_GPU_RESNET, "l1-like", 4, 64, 56, 56, 64, {3, 3, 1, 1, 1, 1, 1, 1}, 1, 0, 0, 0.0f, 1.5f),
    PROBLEM(DT_DC_GPU_RESNET, "l2a-like", 4, 64, 56, 56, 128, {3, 3, 2, 2, 1, 1, 1, 1}, 1, 1, 0, 0.0f, 1.5f),
    /* test_deft.c: the deft layer against the unfused layer on the CPU at every knob
     * (DT_DC_CPU_LAYER; its offsets are the test's own, near +-0.5 px: no distribution here) */
    PROBLEM(DT_DC_CPU_LAYER, "v1 G1 s1 d1", 2, 8, 9, 8, 4, {3, 3, 1, 1, 1, 1, 1, 1}, 1, 0, 1, 0.0f, 0.0f),
    PROBLEM(DT_DC_CPU_LAYER, "v2 G2 s2 d1", 3, 8, 11, 10, 4, {3, 3, 2, 2, 1, 1, 1, 1}, 2, 1, 1, 0.0f, 0.0f),
    PROBLEM(DT_DC_CPU_LAYER, "v2 G1 s1 d2", 1, 5, 9, 9, 4, {3, 3, 1, 1, 2, 2, 2, 2}, 1, 1, 1, 0.0f, 0.0f),
};
enum { NROWS = sizeof DEFORM_CASES / sizeof *DEFORM_CASES };

const dt_deform_case *dt_deform_case_at(unsigned suite, int i) {
    for (int r = 0; r < NROWS; r++)
        if (DEFORM_CASES[r].runs & suite && i-- == 0) return &DEFORM_CASES[r].s;
    return NULL;
}

static int rows_in(unsigned suite) {
    int n = 0;
    while (dt_deform_case_at(suite, n)) n++;
    return n;
}

/* The loops over dt_deform_case_at run nothing when a suite has no rows, so the table itself is
 * checked: every row runs in a suite, an op case's row has its knobs (a problem's has none), and
 * each suite keeps at least the problems its table had before the tables became one. */
DT_TEST(deform_case_table_feeds_every_suite) {
    for (int r = 0; r < NROWS; r++) {
        const dt_deform_row *row = &DEFORM_CASES[r];
        const int is_op_case = (row->runs & (DT_DC_OP | DT_DC_LAYER)) != 0;
        EXPECT_MSG(row->runs && !(row->runs & ~DT_DC_ALL), "row %d (%s): runs 0x%x names no suite", r, row->s.name,
                   row->runs);
        EXPECT_MSG(is_op_case == (row->knobs != NULL), "row %d (%s): an op case has knobs, a problem has none", r,
                   row->s.name);
    }
    static const struct {
        unsigned suite;
        const char *name;
        int at_least;
    } SUITES[] = {{DT_DC_OP, "the op's cases", 19},           {DT_DC_LAYER, "the layer's cases", 21},
                  {DT_DC_KERNELS, "test_deform_gpu.c's", 10},   {DT_DC_CPU_DEFT, "test_deft.c's", 7},
                  {DT_DC_REFERENCE, "test_deform.c's", 5},      {DT_DC_TF32, "test_precision.c's", 3},
                  {DT_DC_GPU_LAYER, "test_deform_gpu.c's layers", 5},
                  {DT_DC_GPU_RESNET, "test_deform_gpu.c's ResNet shapes", 2},
                  {DT_DC_CPU_LAYER, "test_deft.c's layers", 3}};
    for (size_t i = 0; i < sizeof SUITES / sizeof *SUITES; i++)
        EXPECT_MSG(rows_in(SUITES[i].suite) >= SUITES[i].at_least, "%s: %d rows, fewer than the %d it had", SUITES[i].name,
                   rows_in(SUITES[i].suite), SUITES[i].at_least);
}

/* ---- the op-case tables, made from the rows (the arg of a case is its row) */

/* in: x, offset part [N, 2GK, Ho, Wo], mask [N, GK, Ho, Wo], w, bias */
static dt_opcase op_case(const dt_deform_row *r) {
    const dt_deform_case *s = &r->s;
    const int64_t Ho = dt_conv_out_size(s->h, s->g.kh, s->g.sh, s->g.ph, s->g.dh);
    const int64_t Wo = dt_conv_out_size(s->w, s->g.kw, s->g.sw, s->g.pw, s->g.dw), GK = s->groups * s->g.kh * s->g.kw;
    const dt_opcase c = {
        .name = s->name, .ops = {r->mode == DT_DEFORM_DEFT ? "deft (sampling)" : "deform_conv2d unfused (im2col)"},
        .types = r->types, .n_in = 5, .grad_tol = r->grad, .bf16_bound = r->bf16,
        .in = {{4, {s->n, s->c, s->h, s->w}, DT_IN_ACT, 1.0f, 1},
               {4, {s->n, 2 * GK, Ho, Wo}, DT_IN_F32, OFF_STD, 1},
               {4, {s->n, GK, Ho, Wo}, DT_IN_F32, 1.0f, s->mask},
               {4, {s->cout, s->c, s->g.kh, s->g.kw}, DT_IN_WEIGHT, 0.5f / s->g.kh, 1},
               {1, {s->cout}, DT_IN_F32, 1.0f, s->bias}},
        .build = build_op, .arg = r};
    return c;
}

/* in: x, offset weight [OC, C, kh, kw], offset bias part [OC], w, bias; OC = (2 or 3) GK */
static dt_opcase layer_case(const dt_deform_row *r) {
    const dt_deform_case *s = &r->s;
    const int64_t OC = (s->mask ? 3 : 2) * s->groups * s->g.kh * s->g.kw;
    const dt_opcase c = {
        .name = s->name, .ops = {"deft (sampling)"}, .n_in = 5, .grad_tol = r->grad, .bf16_bound = r->bf16,
        .in = {{4, {s->n, s->c, s->h, s->w}, DT_IN_ACT, 1.0f, 1},
               {4, {OC, s->c, s->g.kh, s->g.kw}, DT_IN_F32, r->offw, 1},
               {1, {OC}, DT_IN_F32, OFF_STD, 1},
               {4, {s->cout, s->c, s->g.kh, s->g.kw}, DT_IN_WEIGHT, 0.5f / s->g.kh, 1},
               {1, {s->cout}, DT_IN_F32, 1.0f, s->bias}},
        .build = build_layer, .arg = r};
    return c;
}

/* The op cases of the rows in `suite`, made once. */
static const dt_opcase *cases_of(unsigned suite, dt_opcase (*make)(const dt_deform_row *), dt_opcase *cases, int *made,
                                 int *n) {
    if (!*made)
        for (int r = 0; r < NROWS; r++)
            if (DEFORM_CASES[r].runs & suite) cases[(*made)++] = make(&DEFORM_CASES[r]);
    *n = *made;
    return cases;
}
static const dt_opcase *op_cases(int *n) {
    static dt_opcase cases[NROWS];
    static int made;
    return cases_of(DT_DC_OP, op_case, cases, &made, n);
}
static const dt_opcase *layer_cases(int *n) {
    static dt_opcase cases[NROWS];
    static int made;
    return cases_of(DT_DC_LAYER, layer_case, cases, &made, n);
}
DT_OPCASES_FN(deform, op_cases)
DT_OPCASES_FN(deform_deft, layer_cases)
