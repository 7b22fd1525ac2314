/* conv2d's op cases (dt_opcase.h): every geometry ResNet uses and the awkward ones, in f32
 * NCHW (im2col + SGEMM), f32 NHWC and bf16 NHWC (channels-last im2col + GEMM, and the 1x1
 * stride-1 conv that is three GEMMs on the tensors themselves: x read as its columns, dx
 * written by the GEMM, accumulated when x has another use); the Bottleneck's 1x1 shapes; and
 * the batch split into chunks by the column budget: one image a chunk (NCHW: the GEMM writes y
 * itself) and uneven chunks (the weight gradient accumulated over them). The grouped conv
 * (dt_conv2d_grouped: per-group GEMMs on the column skeleton, and the depthwise family when
 * groups = C) has its own table, conv_groups. */
#include "ops/dt_layers.h"
#include "tests/dt_opcase.h"
#include "ops/dt_ops.h"
#include "tests/dt_test.h"

typedef struct {
    dt_conv_geom g;
    int chunk; /* images per chunk (0: the default column budget, one chunk here) */
    int groups; /* 0 or 1: dt_conv2d; > 1: dt_conv2d_grouped */
} conv_arg;

/* A chunked case's budget has to hold until its backward, which sizes its chunks from the
 * budget when it runs (after build has returned): build sets it, and it is restored when the
 * last live instance goes (two instances of a case live at once; a case without chunks leaves
 * the budget as it is). */
static int chunked_live;
static size_t saved_budget;

static void *chunked_new(const dt_opcase *c, dt_dev dev, dt_layout layout) {
    (void)c, (void)dev, (void)layout;
    if (!chunked_live++) saved_budget = dt_conv_col_budget();
    return &chunked_live; /* nothing of its own to hold: non-NULL, so that chunked_free runs */
}

static void chunked_free(void *state) {
    (void)state;
    if (!--chunked_live) dt_conv_set_col_budget(saved_budget);
}

/* The bias is used when its input is differentiated. */
static dt_tensor *build(const dt_opcase *c, dt_tensor **in, void *state) {
    (void)state;
    const conv_arg *a = c->arg;
    const dt_tensor *x = in[0];
    if (a->chunk) { /* the column budget of `chunk` images of x's dtype */
        int64_t Ho = dt_conv_out_size(x->shape[2], a->g.kh, a->g.sh, a->g.ph, a->g.dh);
        int64_t Wo = dt_conv_out_size(x->shape[3], a->g.kw, a->g.sw, a->g.pw, a->g.dw);
        dt_conv_set_col_budget((size_t)(a->chunk * x->shape[1] * a->g.kh * a->g.kw * Ho * Wo) * dt_dtype_size(x->dtype));
    }
    dt_tensor *bias = c->in[2].grad ? in[2] : NULL;
    if (a->groups > 1) return dt_conv2d_grouped(in[0], in[1], bias, a->g, a->groups, DT_MATH_FP32);
    return dt_conv2d(in[0], in[1], bias, a->g, DT_MATH_FP32);
}

/* conv(x) + x (Cout = Cin): the add's backward runs first, so the conv's dx accumulates onto
 * the add's (beta 1; a Bottleneck's input feeds its conv1 and its skip so). */
static dt_tensor *build_residual(const dt_opcase *c, dt_tensor **in, void *state) {
    return dt_add(build(c, in, state), in[0]);
}

/* gradcheck: 0 (finite differences on the CPU) or -1 (too large for them: parity only);
 * bf16: 0 (the bf16 mode) or -1 (parity only); chunk: images per chunk (0: one chunk); the
 * geometry {kh, kw, sh, sw, ph, pw, dh, dw} comes last */
#define CONV_G(label, n, cin, h, w, cout, kh, kw, with_bias, wstd, gradcheck, bf16, chunk_, ...)                  \
    {.name = label, .ops = {"conv2d (im2col, nchw)", "conv2d (im2col, nhwc)"}, .n_in = 3, .grad_tol = gradcheck, .bf16_bound = bf16,                 \
     .in = {{4, {n, cin, h, w}, DT_IN_ACT, 1.0f, 1},                                                               \
            {4, {cout, cin, kh, kw}, DT_IN_WEIGHT, wstd, 1},                                                       \
            {1, {cout}, DT_IN_F32, 1.0f, with_bias}},                                                             \
     .build = build, .arg = &(const conv_arg){{__VA_ARGS__}, chunk_, 0}, .state_new = chunked_new,                \
     .state_free = chunked_free}
/* k: the (square) kernel size; one chunk; the bf16 mode */
#define CONV(label, n, cin, h, w, cout, k, with_bias, wstd, gradcheck, ...)                                        \
    CONV_G(label, n, cin, h, w, cout, k, k, with_bias, wstd, gradcheck, 0, 0, __VA_ARGS__)

static const dt_opcase conv_cases[] = {
    CONV("3x3 s1 odd, bias", 3, 5, 13, 11, 7, 3, 1, 0.2f, 0, 3, 3, 1, 1, 1, 1, 1, 1),
    CONV("3x3 s2", 2, 16, 17, 17, 24, 3, 0, 0.1f, 0, 3, 3, 2, 2, 1, 1, 1, 1),
    CONV("1x1 s1 (columns = input)", 3, 32, 9, 7, 16, 1, 1, 0.1f, 0, 1, 1, 1, 1, 0, 0, 1, 1),
    CONV("1x1 s2 downsample", 5, 32, 14, 14, 64, 1, 0, 0.1f, 0, 1, 1, 2, 2, 0, 0, 1, 1),
    {.name = "1x1 s1 + x (dx accumulated)", .ops = {"conv2d (im2col, nchw)", "conv2d (im2col, nhwc)"}, .n_in = 3,
     .in = {{4, {3, 24, 9, 7}, DT_IN_ACT, 1.0f, 1}, {4, {24, 24, 1, 1}, DT_IN_WEIGHT, 0.1f, 1}, {1, {24}, DT_IN_F32, 1.0f, 0}},
     .build = build_residual, .arg = &(const conv_arg){{1, 1, 1, 1, 0, 0, 1, 1}, 0, 0}, .state_new = chunked_new,
     .state_free = chunked_free},
    CONV("1x1 s1, C = 13 (no vector loads), bias", 2, 13, 5, 6, 7, 1, 1, 0.2f, 0, 1, 1, 1, 1, 0, 0, 1, 1),
    CONV("7x7 s2 stem (C = 3)", 2, 3, 45, 45, 16, 7, 0, 0.1f, 0, 7, 7, 2, 2, 3, 3, 1, 1),
    CONV("3x3 dilation 2, bias", 1, 8, 12, 15, 8, 3, 1, 0.2f, 0, 3, 3, 1, 1, 2, 2, 2, 2),
    CONV("3x3 stride 2x1 dilation 1x2", 5, 3, 6, 7, 4, 3, 0, 0.3f, 0, 3, 3, 2, 1, 1, 0, 1, 2),
    CONV_G("2x3 kernel, stride 2x1, padding 0x1, bias", 3, 3, 7, 5, 2, 2, 3, 1, 0.3f, 0, 0, 0, 2, 3, 2, 1, 0, 1, 1, 1),
    CONV_G("3x3 s2, one image a chunk", 3, 8, 9, 9, 6, 3, 3, 0, 0.2f, 0, 0, 1, 3, 3, 2, 2, 1, 1, 1, 1),
    CONV_G("3x3 s1, bias, prime batch 5 in chunks of 2 (2 + 2 + 1)", 5, 6, 7, 6, 5, 3, 3, 1, 0.2f, 0, 0, 2, 3, 3, 1,
           1, 1, 1, 1, 1),
    CONV("ResNet l4 shape, batch 3", 3, 512, 7, 7, 512, 3, 0, 0.02f, -1, 3, 3, 1, 1, 1, 1, 1, 1),
    CONV("ResNet l2a shape, prime batch 7", 7, 64, 56, 56, 128, 3, 0, 0.05f, -1, 3, 3, 2, 2, 1, 1, 1, 1),
    CONV_G("ResNet l2a shape, prime batch 7, one image a chunk", 7, 64, 56, 56, 128, 3, 3, 0, 0.05f, -1, -1, 1, 3, 3,
           2, 2, 1, 1, 1, 1),
    CONV("batch 1, C = 13 (no vector loads)", 1, 13, 10, 9, 6, 3, 1, 0.2f, 0, 3, 3, 1, 1, 1, 1, 1, 1),
    CONV("ResNet-50 layer1 1x1 expand 64 -> 256, batch 2", 2, 64, 56, 56, 256, 1, 0, 0.1f, -1, 1, 1, 1, 1, 0, 0, 1, 1),
    CONV("ResNet-50 layer3 1x1 reduce 1024 -> 256, prime batch 3", 3, 1024, 14, 14, 256, 1, 0, 0.03f, -1, 1, 1, 1, 1, 0,
         0, 1, 1),
    CONV("ResNet-50 layer3.0 downsample 1x1 s2 512 -> 1024, batch 2", 2, 512, 28, 28, 1024, 1, 0, 0.04f, -1, 1, 1, 2, 2,
         0, 0, 1, 1),
};
DT_OPCASES(conv, conv_cases)

/* Grouped convs: `groups` groups of cin/groups -> cout/groups channels, the weight
 * [cout, cin/groups, kh, kw] as stored; the geometry {kh, kw, sh, sw, ph, pw, dh, dw} last. NCHW
 * runs one GEMM a group (its column rows are contiguous), NHWC one per group and tap (a group's
 * channels are C/groups of each tap's C) and bf16 sums the taps in fp32; the 1x1 s1 cases run
 * on the tensors themselves (x as the columns, dx written by the GEMM blocks). */
#define CONV_GROUPS(label, n, cin, h, w, cout, groups_, kh, kw, with_bias, wstd, chunk_, ...)                      \
    {.name = label, .ops = {"conv2d (im2col, nchw)", "conv2d (im2col, nhwc)"}, .n_in = 3,                           \
     .in = {{4, {n, cin, h, w}, DT_IN_ACT, 1.0f, 1},                                                               \
            {4, {cout, (cin) / (groups_), kh, kw}, DT_IN_WEIGHT, wstd, 1},                                         \
            {1, {cout}, DT_IN_F32, 1.0f, with_bias}},                                                             \
     .build = build, .arg = &(const conv_arg){{__VA_ARGS__}, chunk_, groups_}, .state_new = chunked_new,          \
     .state_free = chunked_free}

/* A depthwise conv (groups = cin, cout a multiple of it) on the depthwise family's tables. */
#define CONV_DW(label, n, cin, h, w, cout, kh, kw, with_bias, wstd, ...)                                           \
    {.name = label, .ops = {"conv2d (depthwise, fwd)", "conv2d (depthwise, dgrad)", "conv2d (depthwise, wgrad)"},   \
     .n_in = 3,                                                                                                    \
     .in = {{4, {n, cin, h, w}, DT_IN_ACT, 1.0f, 1},                                                               \
            {4, {cout, 1, kh, kw}, DT_IN_WEIGHT, wstd, 1},                                                         \
            {1, {cout}, DT_IN_F32, 1.0f, with_bias}},                                                             \
     .build = build, .arg = &(const conv_arg){{__VA_ARGS__}, 0, cin}, .state_new = chunked_new,                   \
     .state_free = chunked_free}

static const dt_opcase conv_groups_cases[] = {
    CONV_GROUPS("groups 2, 3x3 s1 pad 1, odd sizes, bias", 3, 6, 7, 9, 4, 2, 3, 3, 1, 0.3f, 0, 3, 3, 1, 1, 1, 1, 1, 1),
    CONV_GROUPS("groups 3, 3x3 s2 pad 1", 2, 9, 9, 11, 6, 3, 3, 3, 0, 0.3f, 0, 3, 3, 2, 2, 1, 1, 1, 1),
    CONV_GROUPS("groups 3, 3x3 dilation 2 pad 2, bias", 2, 6, 10, 9, 9, 3, 3, 3, 1, 0.3f, 0, 3, 3, 1, 1, 2, 2, 2, 2),
    CONV_GROUPS("groups 2, 2x3 kernel, stride 2x1, padding 1x0", 3, 4, 7, 6, 6, 2, 2, 3, 0, 0.3f, 0, 2, 3, 2, 1, 1, 0, 1, 1),
    CONV_GROUPS("depthwise C = 5, 3x3 s1 pad 1, bias", 2, 5, 7, 6, 5, 5, 3, 3, 1, 0.4f, 0, 3, 3, 1, 1, 1, 1, 1, 1),
    CONV_GROUPS("depthwise C = 6, multiplier 2, 3x3 s2 pad 1", 3, 6, 9, 7, 12, 6, 3, 3, 0, 0.4f, 0, 3, 3, 2, 2, 1, 1, 1, 1),
    CONV_GROUPS("depthwise C = 4, 5x5 dilation 2 pad 4", 2, 4, 11, 10, 4, 4, 5, 5, 0, 0.3f, 0, 5, 5, 1, 1, 4, 4, 2, 2),
    CONV_GROUPS("groups 2, 1x1 s1 (columns = input), bias", 3, 6, 5, 7, 8, 2, 1, 1, 1, 0.3f, 0, 1, 1, 1, 1, 0, 0, 1, 1),
    CONV_GROUPS("groups 3, 1x1 s2", 2, 9, 7, 7, 6, 3, 1, 1, 0, 0.3f, 0, 1, 1, 2, 2, 0, 0, 1, 1),
    {.name = "groups 3, 1x1 s1 + x (dx accumulated by the GEMM blocks)",
     .ops = {"conv2d (im2col, nchw)", "conv2d (im2col, nhwc)"}, .n_in = 3,
     .in = {{4, {2, 12, 5, 6}, DT_IN_ACT, 1.0f, 1}, {4, {12, 4, 1, 1}, DT_IN_WEIGHT, 0.3f, 1}, {1, {12}, DT_IN_F32, 1.0f, 0}},
     .build = build_residual, .arg = &(const conv_arg){{1, 1, 1, 1, 0, 0, 1, 1}, 0, 3}, .state_new = chunked_new,
     .state_free = chunked_free},
    CONV_GROUPS("groups 2, 3x3, prime batch 5 in chunks of 2 (2 + 2 + 1), bias", 5, 4, 6, 7, 6, 2, 3, 3, 1, 0.3f, 2, 3,
                3, 1, 1, 1, 1, 1, 1),
    CONV_GROUPS("groups 3, 3x3 s2, one image a chunk", 3, 6, 7, 7, 3, 3, 3, 3, 0, 0.3f, 1, 3, 3, 2, 2, 1, 1, 1, 1),
    CONV_GROUPS("ResNeXt-like groups 8, 3x3, 64 -> 64", 2, 64, 9, 9, 64, 8, 3, 3, 0, 0.1f, 0, 3, 3, 1, 1, 1, 1, 1, 1),
    /* depthwise (groups = C: the depthwise family, ops/conv/depthwise.h; the rows above with
     * groups = C run there too): 1-D and 2-D, dilations up to 128, multipliers, vector and odd C */
    CONV_DW("depthwise 3x3 s1 pad 1, C = 16 (vectors), bias", 2, 16, 8, 9, 16, 3, 3, 1, 0.3f, 3, 3, 1, 1, 1, 1, 1, 1),
    CONV_DW("depthwise 3x3 s2 pad 1, C = 24, multiplier 2, MobileNet-like", 3, 24, 11, 10, 48, 3, 3, 0, 0.3f, 3, 3, 2,
            2, 1, 1, 1, 1),
    CONV_DW("depthwise 7x7 pad 3 dilation 2, C = 8, bias", 1, 8, 13, 14, 8, 7, 7, 1, 0.2f, 7, 7, 1, 1, 6, 6, 2, 2),
    CONV_DW("depthwise 5x5 s2 pad 2, C = 7 (odd), multiplier 2", 2, 7, 12, 11, 14, 5, 5, 0, 0.2f, 5, 5, 2, 2, 2, 2, 1, 1),
    CONV_DW("depthwise 1-D k 4 dilation 8 pad 12, C = 32", 2, 32, 1, 64, 32, 1, 4, 1, 0.3f, 1, 4, 1, 1, 0, 12, 1, 8),
    CONV_DW("depthwise 1-D k 16 dilation 2, C = 13 (odd), multiplier 3", 2, 13, 1, 60, 39, 1, 16, 0, 0.2f, 1, 16, 1,
            1, 0, 0, 1, 2),
    CONV_DW("depthwise 1-D k 64 dilation 128 pad 100, C = 8, long input", 1, 8, 1, 8100, 8, 1, 64, 0, 0.1f, 1, 64, 1,
            1, 0, 100, 1, 128),
    CONV_DW("depthwise 1-D k 1 s2 dilation 4, C = 9", 3, 9, 1, 33, 9, 1, 1, 1, 0.4f, 1, 1, 1, 2, 0, 0, 1, 4),
};
DT_OPCASES(conv_groups, conv_groups_cases)
