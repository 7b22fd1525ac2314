/* Pooling's op cases (dt_opcase.h) - max pooling (3x3/2 with padding as in ResNet's stem, 2x2,
 * stride 1, no padding) and global average pooling, odd sizes, C with and without 16-byte
 * packs, batch 1 and a prime batch, the ResNet shapes - in f32 NCHW, f32 NHWC and bf16 NHWC;
 * and max pooling's tie, NaN and padding rules on every device and layout.
 *
 * Max pooling's small cases pool x + ramp, the ramp a constant ((3h + w + c) mod 9) / 4: the
 * nine values of any 3x3 window differ by >= 1/4 - far more than a finite-difference step or
 * a bf16 rounding moves them - so no argmax flips while the case is checked; x (std 0.02) still
 * decides the values, and the argmax moves around from window to window. */
#include <math.h>
#include <stdlib.h>

#include "core/dt_alloc.h"
#include "core/dt_common.h"
#include "ops/dt_layers.h"
#include "tests/dt_opcase.h"
#include "ops/dt_ops.h"
#include "tests/dt_test.h"

typedef struct {
    int max; /* maxpool (else global average pool) */
    int k, s, p;
    int ramp;
} pool_arg;

typedef struct {
    dt_tensor *ramp; /* made at the first build, in x's dtype and layout */
} pool_state;

static void *state_new(const dt_opcase *c, dt_dev dev, dt_layout layout) {
    (void)c, (void)dev, (void)layout;
    return dt_xcalloc(1, sizeof(pool_state));
}

static void state_free(void *state) {
    pool_state *s = state;
    if (s->ramp) dt_tensor_free(s->ramp);
    free(s);
}

static dt_tensor *make_ramp(const dt_tensor *x) {
    int64_t C = DT_C(x), H = DT_H(x), W = DT_W(x);
    float *v = dt_xmalloc((size_t)x->numel * sizeof(float));
    for (int64_t i = 0; i < x->numel; i++) {
        int64_t w = i % W, h = (i / W) % H, c = (i / (W * H)) % C;
        v[i] = (float)((3 * h + w + c) % 9) * 0.25f;
    }
    dt_tensor *r = dt_tensor_from_values(4, x->shape, x->dev, x->dtype, x->layout, v);
    dt_tensor_keep(r);
    free(v);
    return r;
}

static dt_tensor *build(const dt_opcase *c, dt_tensor **in, void *state) {
    const pool_arg *a = c->arg;
    pool_state *s = state;
    dt_tensor *x = in[0];
    if (a->ramp) {
        if (!s->ramp) s->ramp = make_ramp(x);
        x = dt_add(x, s->ramp);
    }
    return a->max ? dt_maxpool2d(x, a->k, a->s, a->p) : dt_global_avgpool(x);
}

/* grad: 0 (every mode) or -1 (parity and perf only, with no bf16 bound: a big shape) */
#define POOL(label, table, n_, c_, h_, w_, std, grad, ...)                                                              \
    {.name = label, .ops = {table}, .n_in = 1, .grad_tol = grad, .bf16_bound = grad,                        \
     .in = {{4, {n_, c_, h_, w_}, DT_IN_ACT, std, 1}}, .build = build, .arg = &(const pool_arg){__VA_ARGS__},           \
     .state_new = state_new, .state_free = state_free}

#define MAXPOOL(label, ...) POOL(label, "maxpool2d", __VA_ARGS__)
#define AVGPOOL(label, ...) POOL(label, "global_avgpool", __VA_ARGS__)

static const dt_opcase pool_cases[] = {
    MAXPOOL("maxpool 3x3/2 p1, C = 5 (no packs)", 2, 5, 9, 8, 0.02f, 0, .max = 1, .k = 3, .s = 2, .p = 1, .ramp = 1),
    MAXPOOL("maxpool 3x3/2 p1, C = 16", 3, 16, 11, 10, 0.02f, 0, .max = 1, .k = 3, .s = 2, .p = 1, .ramp = 1),
    MAXPOOL("maxpool 2x2/2, batch 1, odd W, C = 24", 1, 24, 8, 9, 0.02f, 0, .max = 1, .k = 2, .s = 2, .p = 0, .ramp = 1),
    MAXPOOL("maxpool 3x3/1 p1, prime batch 7, C = 8", 7, 8, 6, 6, 0.02f, 0, .max = 1, .k = 3, .s = 1, .p = 1, .ramp = 1),
    MAXPOOL("maxpool 3x3/2 no padding, C = 12", 2, 12, 7, 7, 0.02f, 0, .max = 1, .k = 3, .s = 2, .p = 0, .ramp = 1),
    MAXPOOL("maxpool ResNet stem 64x64x112x112", 64, 64, 112, 112, 1.0f, -1, .max = 1, .k = 3, .s = 2, .p = 1),
    AVGPOOL("avgpool C = 5 (no packs)", 3, 5, 7, 7, 1.0f, 0),
    AVGPOOL("avgpool prime batch 7, C = 64", 7, 64, 7, 7, 1.0f, 0),
    AVGPOOL("avgpool batch 1, 5x3, C = 12", 1, 12, 5, 3, 1.0f, 0),
    AVGPOOL("avgpool 1x1 images, C = 24", 2, 24, 1, 1, 1.0f, 0),
    AVGPOOL("avgpool ResNet head 64x512x7x7", 64, 512, 7, 7, 1.0f, -1),
};
DT_OPCASES(pool, pool_cases)

/* ---- max pooling's rules, exactly: ties, NaN, padding ---- */

/* the op's three formats: f32 NCHW, f32 NHWC, bf16 NHWC */
static const dt_dtype dts[3] = {DT_F32, DT_F32, DT_BF16};
static const dt_layout ls[3] = {DT_NCHW, DT_NHWC, DT_NHWC};

/* One 4x4 plane per channel, 2x2/2 windows (k = 2): window (0,0) {1 3 / 2 3} ties at 3 -> the
 * first, (0,1); (0,1) {3 0 / 1 0} -> (0,2); (1,0) all 0 -> (2,0); (1,1) all 5 -> (2,2). Channel
 * 1 has a NaN at (3,3), channel 2 NaNs at (2,3) and (3,3): a NaN wins, the first one. C = 8 so
 * that the channels-last kernels take their packed path. */
static void maxpool_rules(dt_dev dev) {
    static const float plane[16] = {1, 3, 3, 0, 2, 3, 1, 0, 0, 0, 5, 5, 0, 0, 5, 5};
    const int64_t C = 8, s[4] = {1, 8, 4, 4};
    float v[8 * 16], want_y[8 * 4], want_g[8 * 16];
    for (int64_t c = 0; c < C; c++) {
        for (int i = 0; i < 16; i++) v[c * 16 + i] = plane[i] + (float)c;
        const int arg[4] = {1, 2, 8, c == 1 ? 15 : c == 2 ? 11 : 10};
        for (int i = 0; i < 16; i++) want_g[c * 16 + i] = 0;
        for (int o = 0; o < 4; o++) {
            want_y[c * 4 + o] = o == 3 && (c == 1 || c == 2) ? NAN : v[c * 16 + arg[o]];
            want_g[c * 16 + arg[o]] = 1;
        }
    }
    v[1 * 16 + 15] = NAN;
    v[2 * 16 + 11] = v[2 * 16 + 15] = NAN;
    for (int k = 0; k < 3; k++) {
        dt_tensor *x = dt_tensor_from_values(4, s, dev, dts[k], ls[k], v);
        dt_requires_grad(x);
        dt_tensor *y = dt_maxpool2d(x, 2, 2, 0);
        float *hy = dt_tensor_host_copy(y);
        dt_backward(dt_sum(y)); /* dy = 1: each window's argmax gets 1 */
        float *hg = dt_tensor_host_copy(x->grad);
        for (int i = 0; i < 32; i++)
            EXPECT_MSG(isnan(want_y[i]) ? isnan(hy[i]) : hy[i] == want_y[i], "%s %s %s: y[%d] = %g, expected %g",
                       dt_dev_name(dev), dt_dtype_name(dts[k]), dt_layout_name(ls[k]), i, hy[i], want_y[i]);
        for (int i = 0; i < 128; i++)
            EXPECT_MSG(hg[i] == want_g[i], "%s %s %s: dx[%d] = %g, expected %g", dt_dev_name(dev),
                       dt_dtype_name(dts[k]), dt_layout_name(ls[k]), i, hg[i], want_g[i]);
        free(hy);
        free(hg);
        /* padding is -inf: a 3x3/2 window with padding 1 over all-negative values takes the
         * largest real one, and its gradient goes there */
        float neg[8 * 9];
        for (int i = 0; i < 8 * 9; i++) neg[i] = -1.0f - (float)(i % 9);
        int64_t s3[4] = {1, 8, 3, 3};
        dt_tensor *xn = dt_tensor_from_values(4, s3, dev, dts[k], ls[k], neg);
        float *hn = dt_tensor_host_copy(dt_maxpool2d(xn, 3, 2, 1));
        /* windows (0,0) (0,1) (1,0) (1,1) see their top-left valid element: -1, -2, -4, -5 */
        const float want_n[4] = {-1, -2, -4, -5};
        for (int i = 0; i < 32; i++)
            EXPECT_MSG(hn[i] == want_n[i % 4], "%s %s %s: padded y[%d] = %g, expected %g", dt_dev_name(dev),
                       dt_dtype_name(dts[k]), dt_layout_name(ls[k]), i, hn[i], want_n[i % 4]);
        free(hn);
    }
}

DT_TEST(maxpool_ties_nan_padding_every_layout) { maxpool_rules(DT_CPU); }
DT_GPU_TEST(gpu_maxpool_ties_nan_padding_every_layout) { maxpool_rules(DT_GPU); }

/* The largest window, 16x16 (the argmax's tap ky*16 + kx in a byte: 0 .. 255), over a 17x17
 * plane with stride 1: 4 windows. Channel c is 0 but for its maximum 2 + c at (ym, xm) =
 * (16, 16), (0, 0), (15, 1), (8, 9), ...: a window holding it takes it (for (16, 16) the last
 * tap, 255, of window (1, 1)); one that does not ties at 0 and takes its first element, tap 0 -
 * so where dy = 1 goes is known exactly, in every dtype. */
static void maxpool_largest_window(dt_dev dev) {
    enum { C = 8, S = 17, K = 16 };
    static const int ym[C] = {16, 0, 15, 8, 1, 16, 3, 10}, xm[C] = {16, 0, 1, 9, 15, 0, 3, 12};
    const int64_t s[4] = {1, C, S, S};
    float v[C * S * S], want_g[C * S * S];
    for (int i = 0; i < C * S * S; i++) v[i] = want_g[i] = 0.0f;
    for (int c = 0; c < C; c++) {
        v[(c * S + ym[c]) * S + xm[c]] = 2.0f + (float)c;
        for (int oy = 0; oy < 2; oy++)
            for (int ox = 0; ox < 2; ox++) {
                const int holds = ym[c] >= oy && ym[c] < oy + K && xm[c] >= ox && xm[c] < ox + K;
                want_g[c * S * S + (holds ? ym[c] * S + xm[c] : oy * S + ox)] += 1.0f;
            }
    }
    for (int k = 0; k < 3; k++) {
        dt_tensor *x = dt_tensor_from_values(4, s, dev, dts[k], ls[k], v);
        dt_requires_grad(x);
        dt_backward(dt_sum(dt_maxpool2d(x, K, 1, 0)));
        float *hg = dt_tensor_host_copy(x->grad);
        int off = 0;
        for (int i = 0; i < C * S * S; i++) off += hg[i] != want_g[i];
        EXPECT_MSG(off == 0, "%s %s %s: %d of dx's elements are not where the 16x16 windows' maxima are",
                   dt_dev_name(dev), dt_dtype_name(dts[k]), dt_layout_name(ls[k]), off);
        free(hg);
    }
}

DT_TEST(maxpool_largest_window_every_layout) { maxpool_largest_window(DT_CPU); }
DT_GPU_TEST(gpu_maxpool_largest_window_every_layout) { maxpool_largest_window(DT_GPU); }

/* a max pool the op refuses: x [1, 2, h, h] of ones in the format, a k x k window of stride s */
typedef struct {
    dt_dtype dt;
    dt_layout l;
    int h, k, s;
} refused_pool;

static void pool_refused(void *p) {
    const refused_pool *r = p;
    dt_tensor *x = dt_tensor_new4_as(DT_CPU, r->dt, r->l, 1, 2, r->h, r->h);
    dt_tensor_fill(x, 1.0f);
    dt_maxpool2d(x, r->k, r->s, 0);
}

DT_TEST(maxpool_refuses_bf16_nchw) {
    refused_pool r = {DT_BF16, DT_NCHW, 4, 2, 2};
    EXPECT_DEATH(pool_refused, &r, "maxpool2d: no kernel for bf16 nchw");
}

/* the argmax is kept as its tap in a byte: a 17x17 window is refused, naming the limit */
DT_TEST(maxpool_refuses_a_window_past_16) {
    refused_pool r = {DT_F32, DT_NCHW, 20, 17, 1};
    EXPECT_DEATH(pool_refused, &r, "the kernel at most 16");
}
