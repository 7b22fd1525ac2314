/* The engine table (conv_engine.h): for each engine its limits and its launches, which pick
 * the CPU twin or the CUDA kernel through op tables (core/dt_kernel.h) by the call's device.
 * The plan (conv_plan.c) says which engine a pass should run on; this file says which ones can
 * and how each runs.
 *
 * The column path (gemm), per chunk of nb images (P = Ho*Wo):
 *   NCHW (f32; DT_COLS_CN), K = Cin*kh*kw:
 *     col[K, nb*P]   = im2col(x chunk)
 *     t[Cout, nb*P]  = W[Cout, K] . col                 (one GEMM for the chunk)
 *     y chunk        = t re-laid out to [nb, Cout, P]    (nb == 1: the GEMM writes y)
 *     dW += dyt . col^T,  dx = col2im(W^T . dyt)   (dyt: dy in [Cout, nb*P]; gather, deterministic)
 *   NHWC (f32 or bf16; DT_COLS_NC), K = kh*kw*Cin in the weight's [Cout, kh, kw, Cin] order:
 *     col[nb*P, K]   = im2col_nhwc(x chunk)
 *     y[nb*P, Cout]  = col . W^T              (the NHWC output: no relayout)
 *     dW += dy^T . col,  dx = col2im_nhwc(dy . W)
 *   A pointwise NHWC conv is three GEMMs on the tensors themselves, the whole batch at once and
 *   no column buffer: x [N*H*W, Cin] is its columns, and dx = beta dx + dy . W.
 * Groups: the same columns, and per group GEMMs on their blocks with the grouped weight
 * [Cout, Cin/groups, kh, kw] as it is (dt_colconv.h). The chunk keeps the column buffer within
 * a budget: memory is bounded for any batch size. */
#include "ops/conv/conv_engine.h"

#include "core/dt_kernel.h"
#include "ops/conv/conv_igemm.h"
#include "ops/conv/conv_sm90.h"
#include "ops/conv/depthwise.h"
#include "ops/conv/dt_colconv.h"
#include "ops/conv/im2col.h"
#include "ops/dt_layers.h" /* dt_conv_chunk: the column budget */

DT_OP_TABLE(im2col_nchw_k, "conv2d (im2col, nchw)", __typeof__(dt_im2col_cpu), DT_TWINS(im2col_nchw_k, dt_im2col, DT_F32, DT_NCHW))
DT_OP_TABLE(col2im_nchw_k, "conv2d (col2im, nchw)", __typeof__(dt_col2im_cpu), DT_TWINS(col2im_nchw_k, dt_col2im, DT_F32, DT_NCHW))
DT_OP_TABLE(im2col_k, "conv2d (im2col, nhwc)", __typeof__(dt_im2col_nhwc_f32_cpu), DT_TWINS(im2col_k, dt_im2col_nhwc_f32, DT_F32, DT_NHWC),
            DT_TWINS(im2col_k, dt_im2col_nhwc_bf16, DT_BF16, DT_NHWC))
DT_OP_TABLE(col2im_k, "conv2d (col2im, nhwc)", __typeof__(dt_col2im_nhwc_f32_cpu), DT_TWINS(col2im_k, dt_col2im_nhwc_f32, DT_F32, DT_NHWC),
            DT_TWINS(col2im_k, dt_col2im_nhwc_bf16, DT_BF16, DT_NHWC))

DT_OP_TABLE(igemm_fprop_k, "conv2d (implicit GEMM, fprop)", __typeof__(dt_conv_igemm_fprop_bf16_cpu),
            DT_TWINS(igemm_fprop_k, dt_conv_igemm_fprop_bf16, DT_BF16, DT_NHWC))
DT_OP_TABLE(igemm_dgrad_k, "conv2d (implicit GEMM, dgrad)", __typeof__(dt_conv_igemm_dgrad_bf16_cpu),
            DT_TWINS(igemm_dgrad_k, dt_conv_igemm_dgrad_bf16, DT_BF16, DT_NHWC))
DT_OP_TABLE(igemm_wgrad_k, "conv2d (implicit GEMM, wgrad)", __typeof__(dt_conv_igemm_wgrad_bf16_cpu),
            DT_TWINS(igemm_wgrad_k, dt_conv_igemm_wgrad_bf16, DT_BF16, DT_NHWC))

/* The Hopper engine: its kernels (conv_sm90.cu) and the implicit GEMM's twins (conv_sm90_cpu.c). */
DT_OP_TABLE(sm90_fprop_k, "conv2d (Hopper engine, fprop)", __typeof__(dt_conv_sm90_fprop_cpu),
            DT_KERNEL(sm90_fprop_k, DT_CPU, DT_BF16, DT_NHWC, dt_conv_sm90_fprop_cpu),
            DT_KERNEL_CUDA(sm90_fprop_k, DT_GPU, DT_BF16, DT_NHWC, dt_conv_sm90_fprop))
DT_OP_TABLE(sm90_dgrad_k, "conv2d (Hopper engine, dgrad)", __typeof__(dt_conv_sm90_dgrad_cpu),
            DT_KERNEL(sm90_dgrad_k, DT_CPU, DT_BF16, DT_NHWC, dt_conv_sm90_dgrad_cpu),
            DT_KERNEL_CUDA(sm90_dgrad_k, DT_GPU, DT_BF16, DT_NHWC, dt_conv_sm90_dgrad))
DT_OP_TABLE(sm90_wgrad_k, "conv2d (Hopper engine, wgrad)", __typeof__(dt_conv_sm90_wgrad_cpu),
            DT_KERNEL(sm90_wgrad_k, DT_CPU, DT_BF16, DT_NHWC, dt_conv_sm90_wgrad_cpu),
            DT_KERNEL_CUDA(sm90_wgrad_k, DT_GPU, DT_BF16, DT_NHWC, dt_conv_sm90_wgrad))

/* The depthwise family (depthwise.h), in the three activation formats. */
DT_OP_TABLE(dw_fwd_k, "conv2d (depthwise, fwd)", __typeof__(dt_dw_fwd_f32_nchw_cpu), DT_ACT_FORMATS(dw_fwd_k, dt_dw_fwd))
DT_OP_TABLE(dw_dgrad_k, "conv2d (depthwise, dgrad)", __typeof__(dt_dw_dgrad_f32_nchw_cpu),
            DT_ACT_FORMATS(dw_dgrad_k, dt_dw_dgrad))
DT_OP_TABLE(dw_wgrad_k, "conv2d (depthwise, wgrad)", __typeof__(dt_dw_wgrad_f32_nchw_cpu),
            DT_ACT_FORMATS(dw_wgrad_k, dt_dw_wgrad))

/* ---- gemm: im2col + GEMM on the column-conv skeleton (dt_colconv.h), which this file feeds
 * with the columns (im2col) and takes their adjoint (col2im), in the layout of the tensors */

typedef struct {
    const dt_conv_call *c;
    size_t image_bytes; /* one image of x (and dx): C*H*W elements */
} conv_cols;

static void conv_fill(void *ctx, int64_t n0, int64_t nb, void *col) {
    const conv_cols *k = ctx;
    const dt_conv_call *c = k->c;
    const dt_conv_problem *p = c->p;
    const void *x = (const char *)c->x + n0 * k->image_bytes;
    if (c->layout == DT_NCHW) DT_PICK(im2col_nchw_k, c->dev, DT_F32, DT_NCHW)(x, nb, p->C, p->H, p->W, p->g, p->Ho, p->Wo, col);
    else DT_PICK(im2col_k, c->dev, c->dtype, c->layout)(x, nb, p->C, p->H, p->W, p->g, p->Ho, p->Wo, col);
}

static void conv_adjoint(void *ctx, int64_t n0, int64_t nb, void *dcol) {
    const conv_cols *k = ctx;
    const dt_conv_call *c = k->c;
    const dt_conv_problem *p = c->p;
    void *dx = (char *)c->dx + n0 * k->image_bytes;
    if (c->layout == DT_NCHW) DT_PICK(col2im_nchw_k, c->dev, DT_F32, DT_NCHW)(dcol, nb, p->C, p->H, p->W, p->g, p->Ho, p->Wo, c->beta_x, dx);
    else DT_PICK(col2im_k, c->dev, c->dtype, c->layout)(dcol, nb, p->C, p->H, p->W, p->g, p->Ho, p->Wo, c->beta_x, dx);
}

/* A pointwise NHWC conv: its columns are the input's rows ... */
static const void *conv_direct(void *ctx, int64_t n0) {
    const conv_cols *k = ctx;
    return (const char *)k->c->x + n0 * k->image_bytes;
}
/* ... and its column gradient is dx's rows: dX [nb*P, Cin] = dY [nb*P, Cout] . W [Cout, Cin],
 * accumulated into dx by the GEMM's beta (no column buffer, no col2im). */
static void *conv_ddirect(void *ctx, int64_t n0) {
    const conv_cols *k = ctx;
    return (char *)k->c->dx + n0 * k->image_bytes;
}

static dt_colconv conv_skeleton(conv_cols *cols, const dt_conv_call *c) {
    const dt_conv_problem *p = c->p;
    *cols = (conv_cols){c, (size_t)(p->C * p->H * p->W) * dt_dtype_size(c->dtype)};
    const int64_t R = p->C * p->g.kh * p->g.kw;
    dt_colconv cc = {.dev = c->dev, .layout = c->layout == DT_NHWC ? DT_COLS_NC : DT_COLS_CN, .dtype = c->dtype,
                     .math = c->math, .nhwc = c->layout == DT_NHWC, .N = p->N, .Cout = p->Cout, .P = p->Ho * p->Wo,
                     .R = R, .nb = dt_conv_chunk(p->N, R * p->Ho * p->Wo, dt_dtype_size(c->dtype)),
                     .groups = p->groups, .taps = (int64_t)p->g.kh * p->g.kw, .ctx = cols, .fill = conv_fill};
    if (c->layout == DT_NHWC && dt_conv_geom_pointwise(p->g)) {
        cc.cols_direct = conv_direct;
        cc.nb = p->N;
    }
    return cc;
}

static int gemm_supports(const dt_conv_problem *p, dt_conv_pass pass, dt_conv_target t) {
    (void)p, (void)pass, (void)t;
    return 1;
}

static void gemm_fprop(const dt_conv_call *c) {
    conv_cols cols;
    const dt_colconv cc = conv_skeleton(&cols, c);
    dt_colconv_forward(&cc, c->w, c->bias, c->y);
}

/* dx and dw in one chunk loop: the columns filled for dw, dy relaid (NCHW) for both */
static void gemm_backward(const dt_conv_call *c) {
    conv_cols cols;
    dt_colconv cc = conv_skeleton(&cols, c);
    if (c->dx && cc.cols_direct) {
        cc.dcols_direct = conv_ddirect;
        cc.dcols_beta = c->beta_x;
    } else if (c->dx) {
        cc.adjoint = conv_adjoint;
    }
    dt_colconv_backward(&cc, c->w, c->dy, c->dw, c->beta_w);
}

/* ---- igemm128, igemm64: the mma.sync implicit GEMM (conv_igemm.h) */

/* Cout % 8 == 0 (16-byte chunks of 8 channels), any C for fprop (padded to C8, a multiple of 8),
 * C % 8 == 0 for dgrad and wgrad; dense; the kernels' 32-bit row and element indices. The CPU
 * twins keep the same limits, so that a forced plan is the same on either device. */
static int igemm_supports(const dt_conv_problem *p, dt_conv_pass pass, dt_conv_target t) {
    (void)t;
    const int64_t lim = (int64_t)1 << 31, C8 = (p->C + 7) / 8 * 8;
    if (p->groups != 1 || p->Cout % 8 || p->C < 1 || p->Cout < 1 || p->N * p->Ho * p->Wo >= lim ||
        p->N * p->H * p->W * C8 >= lim * 8 || p->g.kh * p->g.kw * (C8 > p->Cout ? C8 : p->Cout) >= lim)
        return 0;
    return pass == DT_CONV_FPROP || p->C % 8 == 0;
}

static void igemm_fprop(const dt_conv_call *c, dt_igemm_tile tile) {
    DT_PICK(igemm_fprop_k, c->dev, c->dtype, c->layout)(c->p, tile, c->x, c->w, c->bias, c->y, c->stats);
}
static void igemm_backward(const dt_conv_call *c, dt_igemm_tile tile) {
    if (c->dx) DT_PICK(igemm_dgrad_k, c->dev, c->dtype, c->layout)(c->p, tile, c->dy, c->w, c->beta_x, c->dx);
    if (c->dw) DT_PICK(igemm_wgrad_k, c->dev, c->dtype, c->layout)(c->p, tile, c->x, c->dy, c->beta_w, c->dw);
}
static void igemm128_fprop(const dt_conv_call *c) { igemm_fprop(c, DT_IGEMM_TILE_128); }
static void igemm128_backward(const dt_conv_call *c) { igemm_backward(c, DT_IGEMM_TILE_128); }
static void igemm64_fprop(const dt_conv_call *c) { igemm_fprop(c, DT_IGEMM_TILE_64); }
static void igemm64_backward(const dt_conv_call *c) { igemm_backward(c, DT_IGEMM_TILE_64); }

/* ---- sm90: the Hopper engine (conv_sm90.h) */

/* a pass it has a way to read (dt_conv_sm90_read), on a GPU that runs it or on the CPU twins */
static int sm90_supports(const dt_conv_problem *p, dt_conv_pass pass, dt_conv_target t) {
    return (!t.gpu || t.sm90a) && dt_conv_sm90_read(p, pass) != DT_SM90_NONE;
}

static void sm90_fprop(const dt_conv_call *c) {
    DT_PICK(sm90_fprop_k, c->dev, c->dtype, c->layout)(c->p, c->x, c->w, c->bias, c->y, c->stats);
}
static void sm90_backward(const dt_conv_call *c) {
    if (c->dx) DT_PICK(sm90_dgrad_k, c->dev, c->dtype, c->layout)(c->p, c->dy, c->w, c->beta_x, c->dx);
    if (c->dw) DT_PICK(sm90_wgrad_k, c->dev, c->dtype, c->layout)(c->p, c->x, c->dy, c->beta_w, c->dw);
}

/* ---- depthwise: the direct stencils (depthwise.h) */

/* a grouped problem with groups == C (a dense one, groups 1, is the dense engines'), every pass
 * or none: the plan puts them all here; on the GPU where each pass's tile fits */
static int depthwise_supports(const dt_conv_problem *p, dt_conv_pass pass, dt_conv_target t) {
    (void)pass;
    return p->groups > 1 && dt_dw_problem(p) && (!t.gpu || dt_dw_gpu_supported(p));
}

static void depthwise_fprop(const dt_conv_call *c) {
    DT_PICK(dw_fwd_k, c->dev, c->dtype, c->layout)(c->p, c->x, c->w, c->bias, c->y);
}
static void depthwise_backward(const dt_conv_call *c) {
    if (c->dx) DT_PICK(dw_dgrad_k, c->dev, c->dtype, c->layout)(c->p, c->dy, c->w, c->beta_x, c->dx);
    if (c->dw) DT_PICK(dw_wgrad_k, c->dev, c->dtype, c->layout)(c->p, c->x, c->dy, c->beta_w, c->dw);
}

const dt_conv_engine dt_conv_engines[DT_CONV_ENGINES] = {
    [DT_CONV_ENGINE_GEMM] = {"gemm", gemm_supports, gemm_fprop, gemm_backward},
    [DT_CONV_ENGINE_IGEMM128] = {"igemm128", igemm_supports, igemm128_fprop, igemm128_backward},
    [DT_CONV_ENGINE_IGEMM64] = {"igemm64", igemm_supports, igemm64_fprop, igemm64_backward},
    [DT_CONV_ENGINE_SM90] = {"sm90", sm90_supports, sm90_fprop, sm90_backward},
    [DT_CONV_ENGINE_DEPTHWISE] = {"depthwise", depthwise_supports, depthwise_fprop, depthwise_backward},
};
