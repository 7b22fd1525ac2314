/* Reduced precision (dt_dtype.h: the tf32 and bf16 policies) against fp32, with every
 * tolerance derived from the number formats - never fitted to the results.
 *
 * tf32: fp32 tensors whose products run on TF32 tensor cores (the ops' dt_math argument,
 * DT_MATH_TF32; GPU only - the CPU computes them in fp32). bf16: bf16 channels-last tensors -
 * activations and output gradients rounded to bf16, weights as fp32 masters whose bf16 working
 * copies (dt_param_make_work) the op multiplies, fp32 sums - against the same op in fp32 NCHW
 * on the same (unrounded) values.
 *
 * Notation: u = unit roundoff of the operand format (bf16: 2^-8, 8 significant bits rounded to nearest even; TF32:
 * bounded by 2^-10, which holds whether cuBLAS rounds or truncates to its 10 stored bits),
 * e = 2^-24 (fp32), n = the longest sum behind an output element.
 *  - A product of two operands rounded once each: |ab - bf(a)bf(b)| <= (2u + u^2)|a||b|.
 *  - A sum of such products: |error| <= (2u + u^2) * sum|a_i||b_i| + 2ne * sum|a_i||b_i| (both
 *    sides accumulate in fp32, in different orders).
 *  - The sums of |a_i||b_i| are computed by running the same op in fp32 on |inputs| (weights
 *    and activations made non-negative, the geometry - offsets, mask - unchanged): bilinear
 *    weights, masks and col2im taps are non-negative, so |col| <= col(|x|) and every bound
 *    below is the op's own output on absolute values.
 *  - A result with error k * B (|result| <= B) rounded once more to bf16 has error at most
 *    (k + u + uk) * B; adding an fp32 term (a bias) before that rounding counts it in B. So:
 *    bf16 column gradients (dcol = bf(W^T dy)): 3u + 4u^2; a bf16 output rounded from an
 *    fp32 sum and rounded again after its bias: 4u + 8u^2 (conv2d: exact columns), 5u + 12u^2
 *    (deformable: its columns are sampled from bf16 x and rounded, 2u + u^2); a bf16 input
 *    gradient summed in fp32 from bf16 dcol and rounded once: 4u + 8u^2; a gradient that reads
 *    bf16 dcol and bf16 x (the offsets and mask) or bf16 dy and sampled columns (the deformable
 *    weight): 4u + 8u^2 and 3u + 4u^2; a bias gradient summing bf16 dy: u.
 * Each bf16 test also checks that the result is off by more than fp32's rounding somewhere,
 * so that a precision switch that did nothing would fail. (Not for TF32: cuBLAS's TF32 mode
 * permits tensor cores, it does not force them - it keeps fp32 kernels for some shapes.)
 *
 * CPU tests exercise the exact emulation (bf16 rounding, then the fp32 arithmetic) of the
 * conversion and the GEMM; GPU tests run the CUDA kernels and cuBLAS's tensor cores against the
 * CPU's fp32. (Each op's CPU twin in bf16 against fp32, and its CUDA kernels in bf16 against
 * that twin: the op-case tables, tests/cases_*.c, whose bf16 bound is a relative L2 error over
 * the tensor rather than one per element.) */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/pointwise/convert.h"
#include "core/dt_common.h"
#include "ops/deform/deform_chunk.h"
#include "tests/deform_testutil.h"
#include "core/dt_alloc.h"
#include "core/dt_autograd.h"
#include "tests/dt_check.h"
#include "ops/deform/dt_deform.h"
#include "ops/dt_layers.h"
#include "core/dt_param.h"
#include "tests/dt_test.h"
#include "ops/linear/gemm.h"
#include "ops/conv/im2col.h"
#include "ops/deform/offset_conv.h"

#define U_BF16 (1.0 / 256)
#define U_TF32 (1.0 / 1024)
#define E32 (1.0 / 16777216)

/* ---- the conversion ---- */

static float bits_to_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

DT_TEST(bf16_conversion_rounds_to_nearest_even) {
    /* ties: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 (even: 1); 1 + 3*2^-8 between 1 + 2^-7
     * and 1 + 2^-6 (even: 1 + 2^-6) */
    EXPECT(dt_bf16_to_float(dt_bf16_from_float(1.0f + 1.0f / 256)) == 1.0f);
    EXPECT(dt_bf16_to_float(dt_bf16_from_float(1.0f + 3.0f / 256)) == 1.0f + 1.0f / 64);
    EXPECT(dt_bf16_to_float(dt_bf16_from_float(1.0f + 1.0f / 256 + 1.0f / 65536)) == 1.0f + 1.0f / 128);
    EXPECT(dt_bf16_to_float(dt_bf16_from_float(-2.5f)) == -2.5f);
    EXPECT(dt_bf16_from_float(-0.0f) == 0x8000u);
    /* the range is fp32's: FLT_MAX is more than half a bf16 ulp above bf16's largest finite
     * value (2^128 - 2^120), so it rounds to infinity, as IEEE's rule says; infinities stay */
    EXPECT(isinf(dt_bf16_to_float(dt_bf16_from_float(FLT_MAX))));
    EXPECT(dt_bf16_to_float(dt_bf16_from_float(bits_to_float(0x7f7f0000u))) == bits_to_float(0x7f7f0000u));
    EXPECT(isinf(dt_bf16_to_float(dt_bf16_from_float(INFINITY))) && dt_bf16_to_float(dt_bf16_from_float(-INFINITY)) < 0);
    /* NaN stays NaN, including a NaN whose payload lies only in the low 16 bits */
    EXPECT(isnan(dt_bf16_to_float(dt_bf16_from_float(NAN))));
    EXPECT(isnan(dt_bf16_to_float(dt_bf16_from_float(bits_to_float(0x7f800001u)))));
    /* subnormals round like the rest (fp32's smallest subnormal is below bf16's half ulp there) */
    EXPECT(dt_bf16_to_float(dt_bf16_from_float(bits_to_float(0x00000001u))) == 0.0f);
    EXPECT(dt_bf16_to_float(dt_bf16_from_float(bits_to_float(0x00010000u))) == bits_to_float(0x00010000u));
    /* random values: within u relatively, bf16 values exact, the array twin = the scalar one */
    enum { N = 4096 };
    float x[N], y[N];
    dt_bf16 h[N];
    dt_rng_fill_normal(dt_test_rng(), x, N, 0.0f, 100.0f);
    dt_f32_to_bf16_cpu(N, x, h);
    dt_bf16_to_f32_cpu(N, h, y);
    int64_t bad = 0, inexact = 0;
    for (int i = 0; i < N; i++) {
        bad += h[i] != dt_bf16_from_float(x[i]) || !(fabs((double)y[i] - x[i]) <= U_BF16 * fabs(x[i]));
        inexact += y[i] != x[i];
        bad += dt_bf16_from_float(y[i]) != h[i]; /* bf16 values convert exactly */
    }
    EXPECT_MSG(bad == 0, "%lld conversions outside the rounding bound", (long long)bad);
    EXPECT(inexact > N / 2);
}

/* ---- the bf16 GEMM ---- */

/* |got - want| <= (k + k32) * bound (+ the smallest normal float, for bounds of exactly 0)
 * everywhere: k the reduced format's share, k32 the fp32 summation's. With `exceed`, some
 * element must also be off by more than k32 * bound - more than fp32 alone could explain - so
 * that a precision switch that did nothing fails. */
static int within(const char *what, const float *got, const float *want, const float *bound, int64_t n, double k,
                  double k32, int exceed) {
    int64_t bad = 0, worst = -1, beyond32 = 0;
    double worst_r = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]), lim = (k + k32) * bound[i] + FLT_MIN;
        beyond32 += d > k32 * bound[i] + FLT_MIN;
        if (!(d <= lim)) bad++;
        double r = d / lim;
        if (!(r <= worst_r)) worst_r = r, worst = i;
    }
    if (bad)
        dt_test_fail(__FILE__, __LINE__, "%s: %lld of %lld elements beyond the bound; worst [%lld] got %.9g want %.9g bound %.3g x %.3g",
                     what, (long long)bad, (long long)n, (long long)worst, got[worst], want[worst], k + k32, bound[worst]);
    else if (dt_test_verbose())
        printf("    %s: worst error %.3f of the bound, %lld elements beyond fp32's share\n", what, worst_r, (long long)beyond32);
    if (exceed && beyond32 == 0) {
        dt_test_fail(__FILE__, __LINE__, "%s: within fp32's rounding everywhere: the reduced precision did not run", what);
        return 0;
    }
    return bad == 0;
}

static void fabs_all(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = fabsf(x[i]);
}

DT_TEST(gemm_bf16_within_format_bound) {
    const int64_t M = 37, N = 29, K = 300;
    float *A = malloc(M * K * 4), *B = malloc(K * N * 4), *C = malloc(M * N * 4), *ref = malloc(M * N * 4);
    float *Aa = malloc(M * K * 4), *Ba = malloc(K * N * 4), *bound = malloc(M * N * 4), *C0 = malloc(M * N * 4);
    dt_bf16 *Ah = malloc(M * K * 2), *Bh = malloc(K * N * 2), *Ch = malloc(M * N * 2);
    dt_rng_fill_normal(dt_test_rng(), A, M * K, 0.0f, 1.0f);
    dt_rng_fill_normal(dt_test_rng(), B, K * N, 0.0f, 1.0f);
    dt_rng_fill_normal(dt_test_rng(), C0, M * N, 0.0f, 1.0f);
    memcpy(Aa, A, M * K * 4);
    memcpy(Ba, B, K * N * 4);
    fabs_all(Aa, M * K);
    fabs_all(Ba, K * N);
    dt_f32_to_bf16_cpu(M * K, A, Ah);
    dt_f32_to_bf16_cpu(K * N, B, Bh);
    for (int t = 0; t < 4; t++) { /* the four transposes: A stored [M,K] or [K,M], B [K,N] or [N,K] */
        int ta = t & 1, tb = t >> 1;
        int64_t lda = ta ? M : K, ldb = tb ? K : N;
        char what[96];
        /* beta = 1 onto C0: the bound covers |C0| too (added in fp32 on both sides) */
        memcpy(ref, C0, M * N * 4);
        dt_gemm_cpu(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 1.0f, ref, N);
        for (int64_t i = 0; i < M * N; i++) bound[i] = fabsf(C0[i]);
        dt_gemm_cpu(ta, tb, M, N, K, 1.0f, Aa, lda, Ba, ldb, 1.0f, bound, N);
        memcpy(C, C0, M * N * 4);
        dt_gemm_bf16_cpu(DT_MATH_FP32, ta, tb, M, N, K, 1.0f, Ah, lda, Bh, ldb, 1.0f, C, DT_F32, N);
        snprintf(what, sizeof what, "gemm_bf16 ta %d tb %d, fp32 C", ta, tb);
        EXPECT(within(what, C, ref, bound, M * N, 2 * U_BF16 + U_BF16 * U_BF16, 2 * (K + 1) * E32, 1));
        /* bf16 C (beta 0): one more rounding of the result */
        dt_gemm_cpu(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, ref, N);
        dt_gemm_cpu(ta, tb, M, N, K, 1.0f, Aa, lda, Ba, ldb, 0.0f, bound, N);
        dt_gemm_bf16_cpu(DT_MATH_FP32, ta, tb, M, N, K, 1.0f, Ah, lda, Bh, ldb, 0.0f, Ch, DT_BF16, N);
        dt_bf16_to_f32_cpu(M * N, Ch, C);
        snprintf(what, sizeof what, "gemm_bf16 ta %d tb %d, bf16 C", ta, tb);
        EXPECT(within(what, C, ref, bound, M * N, 3 * U_BF16 + 4 * U_BF16 * U_BF16, 2 * K * E32, 1));
    }
    free(A), free(B), free(C), free(ref), free(Aa), free(Ba), free(bound), free(C0), free(Ah), free(Bh), free(Ch);
}

DT_TEST(precision_names_parse) {
    dt_precision p;
    EXPECT(dt_precision_parse("bf16", &p) == 0 && p == DT_PREC_BF16);
    EXPECT(dt_precision_parse("tf32", &p) == 0 && p == DT_PREC_TF32);
    EXPECT(dt_precision_parse("fp32", &p) == 0 && p == DT_PREC_FP32);
    EXPECT(dt_precision_parse("fp16", &p) == -1 && dt_precision_parse(NULL, &p) == -1);
    EXPECT(!strcmp(dt_precision_name(DT_PREC_BF16), "bf16"));
    /* what each policy means for a model's tensors */
    EXPECT(dt_precision_act_dtype(DT_PREC_BF16) == DT_BF16 && dt_precision_act_dtype(DT_PREC_TF32) == DT_F32);
    EXPECT(dt_precision_math(DT_PREC_TF32) == DT_MATH_TF32 && dt_precision_math(DT_PREC_BF16) == DT_MATH_FP32);
    EXPECT(dt_precision_layout(DT_PREC_BF16) == DT_NHWC && dt_precision_layout(DT_PREC_FP32) == DT_NCHW);
}

/* ---- the GPU: kernels against their twins, layers against the CPU's fp32 ---- */
#ifdef DT_CUDA

/* Layers in reduced precision: forward and every gradient against fp32. (bf16 layers on the
 * CPU twins: the op-case tables' bf16 mode, dt_opcase.h.) */

typedef struct {
    float *v[6]; /* y, then the gradients of in[0..4] (NULL when absent) */
    int64_t n[6];
} run_out;

static void run_free(run_out *o) {
    for (int i = 0; i < 6; i++) free(o->v[i]);
}

/* What an input of an op is: an activation (bf16 channels last in the bf16 runs), a weight of
 * a product (an fp32 parameter in the run's layout; in bf16 the op takes its working copy, its
 * gradient is the master's) or an fp32 row-major tensor in every run (bias, offsets, mask). */
typedef enum { IN_ACT = 0, IN_WEIGHT, IN_F32 } in_kind;

/* Forward and backward of f (n_in inputs, each wanting a gradient, of kinds `kind`) on `dev`
 * with activations of `dtype` (f32: NCHW; bf16: NHWC), with upstream gradient R (host, the
 * output's logical order). absolute[i]: in[i] replaced by |in[i]| (and R by |R| when absolute
 * is set at all). Every value comes back as fp32 in logical order. */
static run_out run(dt_build_fn f, void *arg, int n_in, dt_tensor **in, const in_kind *kind, const float *R, dt_dev dev,
                   dt_dtype dtype, const int *absolute) {
    run_out o;
    memset(&o, 0, sizeof o);
    const dt_layout layout = dtype == DT_BF16 ? DT_NHWC : DT_NCHW;
    dt_params ps = {0}; /* the weights, when they are parameters (outside the scope: caller-owned) */
    dt_scope_begin();
    dt_tensor *x[5] = {0}, *gsrc[5] = {0};
    for (int i = 0; i < n_in; i++) {
        if (!in[i]) continue;
        float *h = dt_tensor_host_copy(in[i]);
        if (absolute && absolute[i]) fabs_all(h, in[i]->numel);
        if (kind[i] == IN_WEIGHT && dtype == DT_BF16) {
            dt_tensor *m = dt_param_new(&ps, "w", in[i]->ndim, in[i]->shape, dev, layout, 1);
            dt_tensor_set_values(m, h);
            x[i] = dt_param_make_work(&ps, m);
            gsrc[i] = m;
        } else {
            int act = kind[i] != IN_F32 && in[i]->ndim == 4;
            x[i] = dt_tensor_from_values(in[i]->ndim, in[i]->shape, dev, act ? dtype : DT_F32, act ? layout : DT_NCHW, h);
            x[i]->requires_grad = 1;
            gsrc[i] = x[i];
        }
        free(h);
    }
    dt_params_refresh_work(&ps);
    dt_tensor *y = f(x, arg);
    o.n[0] = y->numel;
    o.v[0] = dt_tensor_host_copy(y);
    float *r = malloc(sizeof(float) * (size_t)y->numel);
    memcpy(r, R, sizeof(float) * (size_t)y->numel);
    if (absolute) fabs_all(r, y->numel);
    dt_tensor *Rt = dt_tensor_from_values(y->ndim, y->shape, dev, y->dtype, y->layout, r);
    free(r);
    dt_backward_with(y, Rt);
    for (int i = 0; i < n_in; i++)
        if (x[i]) {
            if (!gsrc[i]->grad) dt_fatal("test_precision: input %d of the op got no gradient", i);
            o.n[i + 1] = gsrc[i]->numel;
            o.v[i + 1] = dt_tensor_host_copy(gsrc[i]->grad);
        }
    dt_scope_end();
    dt_params_free(&ps);
    return o;
}

typedef struct {
    dt_conv_geom g;
    dt_math math;
} conv_arg;

static dt_tensor *b_conv(dt_tensor **in, void *a) {
    return dt_conv2d(in[0], in[1], in[2], ((conv_arg *)a)->g, ((conv_arg *)a)->math);
}

static const in_kind CONV_KINDS[3] = {IN_ACT, IN_WEIGHT, IN_F32};

/* conv2d: y, dx, dw, db in precision p on dev against the CPU's fp32. Chunks of one image
 * (the direct GEMM) and of the whole batch. */
static void conv_case(dt_dev dev, dt_precision p, int64_t n, int64_t c, int64_t h, int64_t w, int64_t cout,
                      dt_conv_geom g) {
    const int bf = p == DT_PREC_BF16;
    double u = bf ? U_BF16 : U_TF32;
    conv_arg a = {g, DT_MATH_FP32}, ar = {g, dt_precision_math(p)};
    dt_tensor *in[3] = {dt_test_randn4(n, c, h, w, 1.0f), dt_test_randn4(cout, c, g.kh, g.kw, 0.3f), NULL};
    int64_t sb[1] = {cout};
    in[2] = dt_test_randn(1, sb, 1.0f);
    dt_set_grad_enabled(0); /* the output's shape only: nothing recorded */
    dt_scope_begin();
    dt_tensor *probe = b_conv(in, &a);
    int64_t ny = probe->numel, P = probe->shape[2] * probe->shape[3];
    dt_scope_end();
    dt_set_grad_enabled(1);
    float *R = malloc(sizeof(float) * (size_t)ny);
    dt_rng_fill_normal(dt_test_rng(), R, ny, 0.0f, 1.0f);
    static const int abs3[3] = {1, 1, 1};
    run_out ref = run(b_conv, &a, 3, in, CONV_KINDS, R, DT_CPU, DT_F32, NULL);
    run_out bnd = run(b_conv, &a, 3, in, CONV_KINDS, R, DT_CPU, DT_F32, abs3);
    const int64_t Kr = c * g.kh * g.kw; /* sum lengths: y over C*kh*kw, dW over n*P, dx over cout then the taps */
    /* bf16: y and dx are bf16 tensors (rounded after the product and after the bias, and after
     * col2im's fp32 sums of bf16 dcol), dy is bf16 (the bias gradient sums it) */
    const double prod = 2 * u + u * u, yk = bf ? 4 * u + 8 * u * u : prod, dxk = bf ? 4 * u + 8 * u * u : prod;
    const double dbk = bf ? u : 0;
    const size_t budget = dt_conv_col_budget();
    for (int whole = 0; whole < 2; whole++) {
        dt_conv_set_col_budget(whole ? (size_t)1 << 30 : 1);
        run_out got = run(b_conv, &ar, 3, in, CONV_KINDS, R, dev, dt_precision_act_dtype(p), NULL);
        char what[160];
#define W(s) (snprintf(what, sizeof what, "conv2d %s %s %lldx%lld s%d, %s chunks: %s", dt_dev_name(dev), \
                       dt_precision_name(p), (long long)h, (long long)w, g.sh, whole ? "whole-batch" : "one-image", s), what)
        EXPECT(within(W("forward"), got.v[0], ref.v[0], bnd.v[0], ny, yk, 2 * (Kr + 1) * E32, bf));
        EXPECT(within(W("dx"), got.v[1], ref.v[1], bnd.v[1], got.n[1], dxk, 2 * (cout + Kr) * E32, bf));
        EXPECT(within(W("dw"), got.v[2], ref.v[2], bnd.v[2], got.n[2], prod, 2 * n * P * E32, bf));
        /* the bias gradient sums dy in fp32: dy itself is bf16 in the bf16 policy */
        EXPECT(within(W("db"), got.v[3], ref.v[3], bnd.v[3], got.n[3], dbk, 2 * n * P * E32, 0));
#undef W
        run_free(&got);
    }
    dt_conv_set_col_budget(budget);
    run_free(&ref);
    run_free(&bnd);
    free(R);
    for (int i = 0; i < 3; i++) dt_tensor_free(in[i]);
}

/* The deformable op: y and its five gradients. The offset and mask gradients are dot
 * products of the column gradient with corner differences and bilinear values; with |inputs|
 * the op's mask gradient is sum_c A_c * bilin(|x|)_c (A = |W|^T |dy|, which bounds the
 * column gradient's error over 3u + 4u^2), a bound for the mask gradient's error. For the
 * offsets, d bilin / d(y or x) weighs each corner by (1 - f) or f of the other axis, at most
 * 1 / min(f, 1 - f) times its bilinear weight: with the fractional parts kept in [0.15, 0.85]
 * (dt_test_offsets' avoid_kinks) an offset gradient's error is at most m / 0.15 times its
 * sample's mask-gradient bound. A DCNv1 case runs its bound with a mask of ones (the same
 * columns). */
typedef struct {
    const dt_deform_case *c;
    dt_deform_mode mode;
    dt_math math;
} deform_arg;

static dt_tensor *b_deform(dt_tensor **in, void *av) {
    deform_arg *a = av;
    dt_deform_knobs k = dt_deform_knobs_default();
    return dt_deform_conv2d_mode(in[0], in[1], in[2], in[3], in[4], a->c->g, a->c->groups, a->mode, &k, a->math);
}

static const in_kind DEFORM_KINDS[5] = {IN_ACT, IN_F32, IN_F32, IN_WEIGHT, IN_F32};

/* (bf16 runs the deft mode only: the unfused baseline is f32 NCHW.) */
static void deform_case(dt_dev dev, dt_precision p, const dt_deform_case *c, dt_deform_mode mode) {
    const int bf = p == DT_PREC_BF16;
    double u = bf ? U_BF16 : U_TF32;
    deform_arg a = {c, mode, DT_MATH_FP32}, ar = {c, mode, dt_precision_math(p)};
    dt_tensor *in[5];
    dt_test_deform_inputs(c, 1, in);
    dt_set_grad_enabled(0);
    dt_scope_begin();
    dt_tensor *probe = b_deform(in, &a);
    int64_t ny = probe->numel, Ho = probe->shape[2], Wo = probe->shape[3], P = Ho * Wo;
    dt_scope_end();
    dt_set_grad_enabled(1);
    float *R = malloc(sizeof(float) * (size_t)ny);
    dt_rng_fill_normal(dt_test_rng(), R, ny, 0.0f, 1.0f);
    run_out ref = run(b_deform, &a, 5, in, DEFORM_KINDS, R, DT_CPU, DT_F32, NULL);
    /* the bound's run: |x|, |W|, |bias|, |R|; offsets as they are; a mask (of ones for DCNv1) */
    static const int abs5[5] = {1, 0, 0, 1, 1};
    dt_tensor *bin[5] = {in[0], in[1], in[2], in[3], in[4]};
    const int64_t GK = (int64_t)c->groups * c->g.kh * c->g.kw;
    if (!in[2]) {
        bin[2] = dt_tensor_new4(DT_CPU, c->n, GK, Ho, Wo);
        dt_tensor_fill(bin[2], 1.0f);
    }
    run_out bnd = run(b_deform, &a, 5, bin, DEFORM_KINDS, R, DT_CPU, DT_F32, abs5);
    float *mask = dt_data_f32(bin[2]); /* [n, GK, Ho, Wo] */
    const int64_t K = c->g.kh * c->g.kw, Cg = c->c / c->groups;
    /* bf16 (see the header): y 5u + 12u^2; dx, d offset, d mask 4u + 8u^2; dw 3u + 4u^2; db u */
    const double prod = 2 * u + u * u, yk = bf ? 5 * u + 12 * u * u : prod, dxk = bf ? 4 * u + 8 * u * u : prod;
    const double dwk = bf ? 3 * u + 4 * u * u : prod, dbk = bf ? u : 0;
    /* offset bounds [n, 2GK, Ho, Wo] from the mask-gradient bound of the same sample */
    float *off_bnd = malloc(sizeof(float) * (size_t)(c->n * 2 * GK * P));
    for (int64_t i = 0; i < c->n; i++)
        for (int64_t s = 0; s < GK; s++)
            for (int64_t q = 0; q < P; q++) {
                float b = mask[(i * GK + s) * P + q] * bnd.v[3][(i * GK + s) * P + q] / 0.15f;
                off_bnd[((i * 2 * GK) + 2 * s) * P + q] = off_bnd[((i * 2 * GK) + 2 * s + 1) * P + q] = b;
            }
    run_out got = run(b_deform, &ar, 5, in, DEFORM_KINDS, R, dev, dt_precision_act_dtype(p), NULL);
    char what[200];
#define W(s) (snprintf(what, sizeof what, "deform %s %s %s '%s': %s", mode == DT_DEFORM_DEFT ? "deft" : "unfused", \
                       dt_dev_name(dev), dt_precision_name(p), c->name, s), what)
    const double sy = 2 * (K * c->c + 1) * E32, sx = 2 * (c->cout + 4 * K) * E32 + 2 * K * Cg * 4 * E32;
    EXPECT(within(W("forward"), got.v[0], ref.v[0], bnd.v[0], ny, yk, sy, bf));
    EXPECT(within(W("dx"), got.v[1], ref.v[1], bnd.v[1], got.n[1], dxk, sx, bf));
    EXPECT(within(W("d offset"), got.v[2], ref.v[2], off_bnd, got.n[2], dxk, sx / 0.15, 0));
    if (in[2]) EXPECT(within(W("d mask"), got.v[3], ref.v[3], bnd.v[3], got.n[3], dxk, sx, 0));
    EXPECT(within(W("dw"), got.v[4], ref.v[4], bnd.v[4], got.n[4], dwk, 2 * c->n * P * E32, bf));
    if (in[4]) EXPECT(within(W("db"), got.v[5], ref.v[5], bnd.v[5], got.n[5], dbk, 2 * c->n * P * E32, 0));
#undef W
    run_free(&got);
    run_free(&ref);
    run_free(&bnd);
    free(off_bnd);
    free(R);
    if (!in[2]) dt_tensor_free(bin[2]);
    for (int i = 0; i < 5; i++)
        if (in[i]) dt_tensor_free(in[i]);
}

static void *to_gpu(const void *h, size_t bytes) {
    void *d = dt_gpu_malloc(bytes ? bytes : 1);
    dt_copy_h2d(d, h, bytes);
    return d;
}

/* The deft plan of a case, whole batch in one chunk; 0 on success (a failed EXPECT otherwise). */
static int case_plan(const dt_deform_case *c, dt_deform_plan *p) {
    dt_deform_knobs k = dt_deform_knobs_default();
    const char *bad = dt_deform_plan_init(p, c->n, c->c, c->h, c->w, c->cout, c->g, c->groups, c->mask, DT_DEFORM_DEFT,
                                          &k, (size_t)1 << 40);
    EXPECT_MSG(!bad, "%s: %s", c->name, bad ? bad : "");
    return bad != NULL;
}

/* bf16 kernels on bf16-representable data do the fp32 kernels' arithmetic: the only error
 * left is the fp32 summation order (im2col: none at all, it copies and rounds). */
DT_GPU_TEST(gpu_bf16_kernels_match_cpu_twins) {
    /* GEMM: products of bf16 values are exact in fp32 */
    const int64_t M = 70, N = 45, K = 600;
    float *A = malloc(M * K * 4), *B = malloc(K * N * 4), *C = malloc(M * N * 4), *Cg = malloc(M * N * 4);
    dt_bf16 *Ah = malloc(M * K * 2), *Bh = malloc(K * N * 2), *Chh = malloc(M * N * 2);
    dt_rng_fill_normal(dt_test_rng(), A, M * K, 0.0f, 1.0f);
    dt_rng_fill_normal(dt_test_rng(), B, K * N, 0.0f, 1.0f);
    dt_f32_to_bf16_cpu(M * K, A, Ah);
    dt_f32_to_bf16_cpu(K * N, B, Bh);
    void *gA = to_gpu(Ah, M * K * 2), *gB = to_gpu(Bh, K * N * 2), *gC = dt_gpu_malloc(M * N * 4);
    for (int t = 0; t < 4; t++) {
        int ta = t & 1, tb = t >> 1;
        int64_t lda = ta ? M : K, ldb = tb ? K : N;
        dt_gemm_bf16_cpu(DT_MATH_FP32, ta, tb, M, N, K, 1.0f, Ah, lda, Bh, ldb, 0.0f, C, DT_F32, N);
        dt_gemm_bf16_cuda(DT_MATH_FP32, ta, tb, M, N, K, 1.0f, gA, lda, gB, ldb, 0.0f, gC, DT_F32, N);
        dt_copy_d2h(Cg, gC, M * N * 4);
        char what[64];
        snprintf(what, sizeof what, "gemm_bf16 GPU ta %d tb %d", ta, tb);
        EXPECT(dt_expect_close(what, Cg, C, M * N, 2 * K * E32));
        /* bf16 C: both sides round nearly equal fp32 values: at most one bf16 ulp apart */
        dt_gemm_bf16_cuda(DT_MATH_FP32, ta, tb, M, N, K, 1.0f, gA, lda, gB, ldb, 0.0f, gC, DT_BF16, N);
        dt_copy_d2h(Chh, gC, M * N * 2);
        int64_t far = 0;
        for (int64_t i = 0; i < M * N; i++) far += fabs(dt_bf16_to_float(Chh[i]) - C[i]) > 2 * U_BF16 * fabs(C[i]) + 1e-6;
        EXPECT_MSG(far == 0, "%s, bf16 C: %lld elements more than one bf16 ulp from the fp32 product", what, (long long)far);
    }
    dt_gpu_free(gA), dt_gpu_free(gB), dt_gpu_free(gC);
    free(A), free(B), free(C), free(Cg), free(Ah), free(Bh), free(Chh);

    /* im2col / col2im, channels last (x [nb, H, W, C] bf16, col [nb*P, kh*kw*C] bf16): batches
     * of 2 and 1, stride 2 and 1 */
    for (int v = 0; v < 2; v++) {
        const int64_t nb = 2 - v, Ci = 5, H = 9, Wd = 7;
        dt_conv_geom g = dt_geom(3, v ? 1 : 2, 1, 1);
        const int64_t Ho = dt_conv_out_size(H, 3, g.sh, 1, 1), Wo = dt_conv_out_size(Wd, 3, g.sw, 1, 1);
        const int64_t ncol = Ci * 9 * nb * Ho * Wo, nx = nb * Ci * H * Wd;
        float *x = malloc(nx * 4), *dcol = malloc(ncol * 4), *dx = malloc(nx * 4), *dxg = malloc(nx * 4);
        dt_bf16 *xh = malloc(nx * 2), *col = malloc(ncol * 2), *colg = malloc(ncol * 2), *dcolh = malloc(ncol * 2);
        dt_bf16 *dxh = malloc(nx * 2), *dxgh = malloc(nx * 2);
        dt_rng_fill_normal(dt_test_rng(), x, nx, 0.0f, 1.0f);
        dt_rng_fill_normal(dt_test_rng(), dcol, ncol, 0.0f, 1.0f);
        dt_f32_to_bf16_cpu(nx, x, xh);
        dt_f32_to_bf16_cpu(ncol, dcol, dcolh);
        dt_bf16 *gx = to_gpu(xh, nx * 2), *gdx = dt_gpu_malloc(nx * 2);
        dt_bf16 *gcol = dt_gpu_malloc(ncol * 2), *gdcol = to_gpu(dcolh, ncol * 2);
        dt_im2col_nhwc_bf16_cpu(xh, nb, Ci, H, Wd, g, Ho, Wo, col);
        dt_im2col_nhwc_bf16_cuda(gx, nb, Ci, H, Wd, g, Ho, Wo, gcol);
        dt_copy_d2h(colg, gcol, ncol * 2);
        EXPECT_MSG(!memcmp(col, colg, ncol * 2), "im2col_nhwc_bf16 (%lld rows): the GPU's columns differ from the CPU twin's",
                   (long long)(nb * Ho * Wo));
        /* col2im: fp32 sums of the same bf16 values, rounded once to bf16 on both sides: at most
         * one bf16 ulp apart */
        dt_col2im_nhwc_bf16_cpu(dcolh, nb, Ci, H, Wd, g, Ho, Wo, 0.0f, dxh);
        dt_col2im_nhwc_bf16_cuda(gdcol, nb, Ci, H, Wd, g, Ho, Wo, 0.0f, gdx);
        dt_copy_d2h(dxgh, gdx, nx * 2);
        dt_bf16_to_f32_cpu(nx, dxh, dx);
        dt_bf16_to_f32_cpu(nx, dxgh, dxg);
        int64_t far = 0;
        for (int64_t i = 0; i < nx; i++) far += fabs((double)dxg[i] - dx[i]) > 2 * U_BF16 * fabs(dx[i]) + 1e-6;
        EXPECT_MSG(far == 0, "col2im_nhwc_bf16: %lld elements more than one bf16 ulp from the CPU twin's", (long long)far);
        dt_gpu_free(gx), dt_gpu_free(gdx), dt_gpu_free(gcol), dt_gpu_free(gdcol);
        free(x), free(dcol), free(dx), free(dxg), free(xh), free(col), free(colg), free(dcolh), free(dxh), free(dxgh);
    }
}

/* The offset conv on tensor cores (C % 32 == 0) against the fp32 CPU twin: forward (bound:
 * sum |x||w| + |b|, a quarter of it through the mask's sigmoid, whose slope is at most 1/4),
 * weight gradient (sum |dom||x|; the bias gradient sums fp32 dom: fp32 rounding only) and
 * input gradient added onto a random dxT (sum |dom||w|; a bf16 plan's dxT is bf16, rounded
 * once more: 3u + 4u^2). A bf16 plan reads x in bf16 (rounded once, like its other operands),
 * a TF32 one in fp32. Both precisions always round here,
 * so the gradients must exceed fp32's rounding somewhere; the forward too in bf16 (TF32's
 * 2^-11 errors average out below the fp32 slack of 2(KC+1)e over sums of ~900 terms). */
DT_GPU_TEST(gpu_offset_conv_tensor_cores_within_format_bound) {
    static const dt_deform_case cases[] = {
        {"C 64 G1 DCNv1", 3, 64, 11, 9, 8, {3, 3, 1, 1, 1, 1, 1, 1}, 1, 0, 0, 0, 0},
        {"C 32 G1 DCNv2 s2", 2, 32, 13, 12, 8, {3, 3, 2, 2, 1, 1, 1, 1}, 1, 1, 0, 0, 0},
        {"C 96 G2 DCNv2 (two offset-channel tiles)", 2, 96, 9, 10, 8, {3, 3, 1, 1, 2, 2, 2, 2}, 2, 1, 0, 0, 0},
        {"C 128 G2 DCNv2 s2 odd 13x11 (bf16: the Hopper engine)", 3, 128, 13, 11, 8, {3, 3, 2, 2, 1, 1, 1, 1}, 2, 1, 0, 0, 0},
        {"C 64 G1 dilation 2 (bf16: the Hopper engine)", 2, 64, 12, 9, 8, {3, 3, 1, 1, 2, 2, 2, 2}, 1, 1, 0, 0, 0},
    };
    enum { NC = sizeof cases / sizeof *cases };
    /* variant 0: the defaults (bf16 plans with C % 64 == 0 on the Hopper engine where the GPU has
     * it, the others on the tensor-core kernels by halo tiles); 1: the tensor-core kernels by halo
     * tiles; 2: by the flat list of positions */
    static const char *const variants[3] = {"default", "halo", "flat"};
    for (int run = 0; run < 3 * NC * 2; run++) { /* variant x case x precision */
        const int variant = run / (2 * NC), ci = run / 2 % NC, pr = DT_PREC_TF32 + run % 2;
        dt_offconv_use_engine(variant == 0);
        dt_offconv_use_halo(variant != 2);
        const dt_deform_case *c = &cases[ci];
        const double u = pr == DT_PREC_BF16 ? U_BF16 : U_TF32, prod = 2 * u + u * u;
        /* p: the fp32 plan of the CPU references; pg: the same in the reduced precision (a bf16
         * plan, or f32 with TF32 products), which the offset conv's kernels follow */
        dt_deform_plan p, pg;
        if (case_plan(c, &p)) continue;
        pg = p;
        const char *bad = dt_deform_plan_types(&pg, pr == DT_PREC_BF16 ? DT_BF16 : DT_F32, DT_NHWC,
                                               dt_precision_math((dt_precision)pr), (size_t)1 << 40);
        EXPECT_MSG(!bad, "%s: %s", c->name, bad ? bad : "");
        if (bad) continue;
        const int64_t n = p.prob.N, Q = n * p.P, nx = n * p.prob.H * p.prob.W * p.prob.C, nw = p.OC * p.KC, nom = Q * p.OCS;
        float *x = malloc(nx * 4), *w = malloc(nw * 4), *b = malloc(p.OC * 4), *dom = malloc(nom * 4);
        float *dx0 = malloc(nx * 4);
        dt_rng_fill_normal(dt_test_rng(), x, nx, 0.0f, 1.0f);
        dt_rng_fill_normal(dt_test_rng(), w, nw, 0.0f, 1.0f / sqrtf((float)p.KC));
        dt_rng_fill_normal(dt_test_rng(), b, p.OC, 0.0f, 0.5f);
        dt_rng_fill_normal(dt_test_rng(), dom, nom, 0.0f, 1.0f);
        dt_rng_fill_normal(dt_test_rng(), dx0, nx, 0.0f, 1.0f);
        const int bf = pr == DT_PREC_BF16;
        /* a bf16 plan's dxT is bf16: the values it starts from are bf16's */
        if (bf)
            for (int64_t e = 0; e < nx; e++) dx0[e] = dt_bf16_round(dx0[e]);
        for (int64_t q = 0; q < Q; q++)
            for (int64_t o = p.OC; o < p.OCS; o++) dom[q * p.OCS + o] = 0.0f;
        float *xa = malloc(nx * 4), *wa = malloc(nw * 4), *ba = malloc(p.OC * 4), *doma = malloc(nom * 4);
        memcpy(xa, x, nx * 4), memcpy(wa, w, nw * 4), memcpy(ba, b, p.OC * 4), memcpy(doma, dom, nom * 4);
        fabs_all(xa, nx), fabs_all(wa, nw), fabs_all(ba, p.OC), fabs_all(doma, nom);
        /* the fp32 references and bounds (CPU twins, the fp32 plan) */
        float *om = malloc(nom * 4), *omb = calloc(nom, 4), *dw = malloc(nw * 4), *dwb = malloc(nw * 4);
        float *db = malloc(p.OC * 4), *dbb = malloc(p.OC * 4), *dx = malloc(nx * 4), *dxb = malloc(nx * 4);
        dt_offconv_fwd_cpu(&p, n, x, w, b, om, NULL);
        dt_deform_chunk ch = dt_deform_chunk_make(&p, n);
        for (int64_t q = 0; q < Q; q++) { /* pre-activation sum |x||w| + |b|, a quarter for the mask */
            int i, oy, ox;
            dt_position_decode(&ch, (int)q, &i, &oy, &ox);
            for (int64_t oc = 0; oc < p.OC; oc++) {
                double sabs = ba[oc];
                for (int64_t kk = 0; kk < p.K; kk++) {
                    int64_t iy = oy * c->g.sh - c->g.ph + kk / c->g.kw * c->g.dh, ix = ox * c->g.sw - c->g.pw + kk % c->g.kw * c->g.dw;
                    if (iy < 0 || iy >= p.prob.H || ix < 0 || ix >= p.prob.W) continue;
                    for (int64_t cc = 0; cc < p.prob.C; cc++)
                        sabs += (double)xa[((i * p.prob.H + iy) * p.prob.W + ix) * p.prob.C + cc] * wa[(oc * p.prob.C + cc) * p.K + kk];
                }
                omb[q * p.OCS + oc] = (float)(oc >= 2 * p.GK ? sabs / 4 : sabs);
            }
        }
        memcpy(dx, dx0, nx * 4);
        dt_offconv_bwd_cpu(&p, n, x, dom, w, 0.0f, dw, 0.0f, db, NULL, 1.0f, dx, NULL);
        dt_offconv_bwd_cpu(&p, n, xa, doma, wa, 0.0f, dwb, 0.0f, dbb, NULL, 0.0f, dxb, NULL);
        for (int64_t e = 0; e < nx; e++) dxb[e] += fabsf(dx0[e]);
        /* the GPU in the reduced precision: x and dxT of the plan's dtype (bf16: x rounded, as the
         * bf16 kernels of the old policy rounded it inside) */
        const size_t xe = bf ? 2 : 4;
        dt_bf16 *xh = malloc(nx * 2), *dxh = malloc(nx * 2);
        dt_f32_to_bf16_cpu(nx, x, xh);
        dt_f32_to_bf16_cpu(nx, dx0, dxh);
        void *gx = bf ? to_gpu(xh, nx * xe) : to_gpu(x, nx * xe), *gdx = bf ? to_gpu(dxh, nx * xe) : to_gpu(dx0, nx * xe);
        float *gw = to_gpu(w, nw * 4), *gb = to_gpu(b, p.OC * 4), *gdom = to_gpu(dom, nom * 4);
        float *gom = dt_gpu_malloc(nom * 4), *gdw = dt_gpu_malloc(nw * 4), *gdb = dt_gpu_malloc(p.OC * 4);
        void *gws = dt_gpu_malloc(dt_offconv_ws_bytes_cuda(&pg, n));
        dt_memset_gpu(gom, 0xff, nom * 4);
        dt_offconv_fwd_cuda(&pg, n, gx, gw, gb, gom, gws);
        dt_offconv_bwd_cuda(&pg, n, gx, gdom, gw, 0.0f, gdw, 0.0f, gdb, NULL, 1.0f, gdx, gws);
        float *hom = malloc(nom * 4), *hdw = malloc(nw * 4), *hdb = malloc(p.OC * 4), *hdx = malloc(nx * 4);
        dt_copy_d2h(hom, gom, nom * 4), dt_copy_d2h(hdw, gdw, nw * 4), dt_copy_d2h(hdb, gdb, p.OC * 4);
        if (bf) {
            dt_copy_d2h(dxh, gdx, nx * 2);
            dt_bf16_to_f32_cpu(nx, dxh, hdx);
        } else {
            dt_copy_d2h(hdx, gdx, nx * 4);
        }
        /* bf16: dxT is the fp32 sum rounded once more (3u + 4u^2) */
        const double dxk = bf ? 3 * u + 4 * u * u : prod;
        char what[160];
#define W(s) (snprintf(what, sizeof what, "offset conv %s %s '%s': %s", variants[variant], \
                   dt_precision_name((dt_precision)pr), c->name, s), what)
        EXPECT(within(W("forward"), hom, om, omb, nom, prod, 2 * (p.KC + 1) * E32, pr == DT_PREC_BF16));
        EXPECT(within(W("weight gradient"), hdw, dw, dwb, nw, prod, 2 * Q * E32, 1));
        EXPECT(within(W("bias gradient"), hdb, db, dbb, p.OC, 0, 2 * Q * E32, 0));
        EXPECT(within(W("input gradient (+= dxT)"), hdx, dx, dxb, nx, dxk, 2 * (p.K * p.OC + 1) * E32, 1));
#undef W
        dt_gpu_free(gx), dt_gpu_free(gw), dt_gpu_free(gb), dt_gpu_free(gdom), dt_gpu_free(gom), dt_gpu_free(gdw);
        dt_gpu_free(gdb), dt_gpu_free(gdx), dt_gpu_free(gws);
        free(x), free(w), free(b), free(dom), free(dx0), free(xa), free(wa), free(ba), free(doma), free(om), free(omb);
        free(dw), free(dwb), free(db), free(dbb), free(dx), free(dxb), free(hom), free(hdw), free(hdb), free(hdx);
        free(xh), free(dxh);
    }
    dt_offconv_use_halo(1);
    dt_offconv_use_engine(1);
}

DT_GPU_TEST(gpu_conv2d_reduced_precision_within_format_bound) {
    for (int p = DT_PREC_TF32; p <= DT_PREC_BF16; p++) {
        conv_case(DT_GPU, (dt_precision)p, 4, 32, 14, 13, 48, dt_geom(3, 1, 1, 1));
        conv_case(DT_GPU, (dt_precision)p, 3, 16, 15, 12, 24, dt_geom(3, 2, 1, 1));
    }
}

/* TF32 products in both modes (the bf16 deft op against its CPU twin, and that twin against
 * fp32: the deform op cases, tests/cases_deform.c) */
DT_GPU_TEST(gpu_deform_tf32_within_format_bound) {
    const dt_deform_case *c; /* the problems of the one table (tests/cases_deform.c) this test runs */
    for (int i = 0; (c = dt_deform_case_at(DT_DC_TF32, i)); i++) {
        deform_case(DT_GPU, DT_PREC_TF32, c, DT_DEFORM_DEFT);
        deform_case(DT_GPU, DT_PREC_TF32, c, DT_DEFORM_UNFUSED);
    }
}

#endif
