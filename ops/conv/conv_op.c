/* conv2d = im2col + GEMM, chunked over images, on the column-conv skeleton (dt_colconv.h):
 * this file supplies the columns (im2col) and their adjoint (col2im), in the layout of the
 * tensors.
 *
 * NCHW (f32; DT_COLS_CN), per chunk of nb images (P = Ho*Wo, K = Cin*kh*kw):
 *   col[K, nb*P]   = im2col(x chunk)
 *   t[Cout, nb*P]  = W[Cout, K] . col                 (one GEMM for the chunk)
 *   y chunk        = t re-laid out to [nb, Cout, P]    (nb == 1: the GEMM writes y)
 *   dW += dyt . col^T,  dx = col2im(W^T . dyt)   (dyt: dy in [Cout, nb*P]; gather, deterministic)
 * NHWC (f32 or bf16; DT_COLS_NC), K = kh*kw*Cin in the weight's [Cout, kh, kw, Cin] order:
 *   col[nb*P, K]   = im2col_nhwc(x chunk)   (a 1x1 stride-1 unpadded conv reads x itself)
 *   y[nb*P, Cout]  = col . W^T              (the NHWC output: no relayout)
 *   dW += dy^T . col,  dx = col2im_nhwc(dy . W)
 *   A 1x1 stride-1 unpadded conv is three GEMMs on the tensors themselves, the whole batch at
 *   once and no column buffer: x [N*H*W, Cin] is its columns, and dx = beta dx + dy . W.
 * Groups (dt_conv2d_grouped): the same columns, and per group GEMMs on their blocks with the
 * grouped weight [Cout, Cin/groups, kh, kw] as it is (dt_colconv.h); every pass on the column
 * path (the implicit GEMM and the Hopper engine are dense).
 * db = sum of dy over (N, P) either way. The chunk is sized so that the column buffer stays
 * within a budget: memory is bounded for any batch size.
 * bf16 NHWC on the GPU: each pass may run on the implicit GEMM instead (conv_igemm.h: no
 * column matrix at all), as the conv's plan says - a pure function of the shape and the
 * caller's algorithm (dt_conv2d_algo: the model's config key conv_algo), made in the forward
 * and kept for the backward. */
#include "ops/pointwise/bias.h"
#include "ops/conv/conv_igemm.h"
#include "ops/conv/dt_colconv.h"
#include "core/dt_alloc.h"
#include "core/dt_common.h"
#include "core/dt_dtype.h"
#include "core/dt_timer.h"
#include "ops/pointwise/dt_shared_kernels.h"
#include "core/dt_kernel.h"
#include "ops/dt_layers.h"
#include "ops/conv/im2col.h"
#include "ops/conv/depthwise.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dt_conv_out_hw(const char *op, const dt_tensor *x, dt_conv_geom g, int64_t *Ho, int64_t *Wo) {
    if (g.kh < 1 || g.kw < 1 || g.sh < 1 || g.sw < 1 || g.dh < 1 || g.dw < 1 || g.ph < 0 || g.pw < 0)
        dt_fatal("%s: invalid geometry kernel %dx%d stride %dx%d pad %dx%d dilation %dx%d", op, g.kh, g.kw,
                 g.sh, g.sw, g.ph, g.pw, g.dh, g.dw);
    *Ho = dt_conv_out_size(x->shape[2], g.kh, g.sh, g.ph, g.dh);
    *Wo = dt_conv_out_size(x->shape[3], g.kw, g.sw, g.pw, g.dw);
    if (*Ho < 1 || *Wo < 1) {
        char b[128];
        dt_fatal("%s: input %s is too small for kernel %dx%d (dilation %d, padding %d): output would be %lldx%lld",
                 op, dt_shape_str(x, b, sizeof b), g.kh, g.kw, g.dh, g.ph, (long long)*Ho, (long long)*Wo);
    }
}

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

/* The depthwise family (depthwise.h), in the three activation formats. */
DT_OP_TABLE(dw_fwd_k, "conv2d (depthwise, fwd)", __typeof__(dt_dw_fwd_f32_nchw_cpu), DT_ACT_FORMATS(dw_fwd_k, dt_dw_fwd))
DT_OP_TABLE(dw_dgrad_k, "conv2d (depthwise, dgrad)", __typeof__(dt_dw_dgrad_f32_nchw_cpu),
            DT_ACT_FORMATS(dw_dgrad_k, dt_dw_dgrad))
DT_OP_TABLE(dw_wgrad_k, "conv2d (depthwise, wgrad)", __typeof__(dt_dw_wgrad_f32_nchw_cpu),
            DT_ACT_FORMATS(dw_wgrad_k, dt_dw_wgrad))

typedef struct {
    dt_conv_geom g;
    dt_math math;
    dt_conv_plan plan;
    dt_conv_problem pr; /* for the passes the plan puts on the implicit GEMM */
} conv_ctx;

/* ---- the plans made so far: one row per distinct (problem, algorithm, engine present), for
 * dt_conv_plan_print and for conv_algo=measure, whose rows are its measurements - a dropped row
 * would be measured again on every call, and its choice could differ from the first one (the
 * process's runs must agree bit for bit), so the table grows instead (a ResNet-50 has 23
 * distinct conv shapes; the GPU test suite plans a few hundred). Replicas on CPU threads plan
 * concurrently, hence the lock. */
typedef struct {
    dt_conv_problem p;
    dt_conv_algo algo;
    int sm90;
    dt_conv_plan plan;
} plan_row;
static plan_row *g_plans;
static int g_n_plans, g_plans_cap, g_plans_dropped; /* dropped: a row that found no memory */
static pthread_mutex_t g_plans_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_measure_lock = PTHREAD_MUTEX_INITIALIZER; /* one measurement at a time */

static void remember_plan(const dt_conv_problem *p, dt_conv_algo algo, int sm90, dt_conv_plan plan) {
    pthread_mutex_lock(&g_plans_lock);
    int i = 0;
    while (i < g_n_plans && !(dt_conv_problem_same(&g_plans[i].p, p) && g_plans[i].algo == algo && g_plans[i].sm90 == sm90)) i++;
    if (i == g_n_plans && g_n_plans == g_plans_cap) {
        const int cap = g_plans_cap ? 2 * g_plans_cap : 64;
        plan_row *grown = realloc(g_plans, sizeof(plan_row) * (size_t)cap);
        if (grown) g_plans = grown, g_plans_cap = cap;
    }
    if (i == g_n_plans) {
        if (g_n_plans < g_plans_cap) g_plans[g_n_plans++] = (plan_row){*p, algo, sm90, plan};
        else g_plans_dropped = 1;
    }
    pthread_mutex_unlock(&g_plans_lock);
}

static const char *pass_engine(int tile) {
    switch (tile) {
    case -1: return "gemm";
    case DT_IGEMM_TILE_128: return "igemm128";
    case DT_IGEMM_TILE_64: return "igemm64";
    case DT_IGEMM_TILE_SM90: return "sm90";
    case DT_CONV_PASS_DEPTHWISE: return "depthwise";
    default: return "?";
    }
}

void dt_conv_plan_print(FILE *f) {
    pthread_mutex_lock(&g_plans_lock);
    for (int i = 0; i < g_n_plans; i++) {
        const dt_conv_problem *p = &g_plans[i].p;
        const dt_conv_plan *q = &g_plans[i].plan;
        fprintf(f, "conv plan: [%lld, %lld, %lld, %lld] -> %lld, %dx%d/%d pad %d%s%s (%s%s): fprop %s, dgrad %s, wgrad %s\n",
                (long long)p->N, (long long)p->C, (long long)p->H, (long long)p->W, (long long)p->Cout, p->g.kh, p->g.kw,
                p->g.sh, p->g.ph, p->g.dh > 1 ? " dilated" : "", p->groups > 1 ? " grouped" : "", dt_conv_algo_name(g_plans[i].algo),
                g_plans[i].sm90 ? ", Hopper engine" : "", pass_engine(q->fprop), pass_engine(q->dgrad), pass_engine(q->wgrad));
    }
    if (g_plans_dropped) fprintf(f, "conv plan: (some problems not kept: out of host memory)\n");
    pthread_mutex_unlock(&g_plans_lock);
}

/* the plan kept for (p, algo, sm90): 1 and *plan, or 0 (call with the lock held) */
static int find_plan(const dt_conv_problem *p, dt_conv_algo algo, int sm90, dt_conv_plan *plan) {
    for (int i = 0; i < g_n_plans; i++)
        if (dt_conv_problem_same(&g_plans[i].p, p) && g_plans[i].algo == algo && g_plans[i].sm90 == sm90) {
            *plan = g_plans[i].plan;
            return 1;
        }
    return 0;
}

static dt_conv_plan measure_plan(const dt_tensor *x, const dt_tensor *w, dt_math math, const dt_conv_problem *pr,
                                 int sm90);

/* The conv's plan: bf16 NHWC only; on the CPU only when an implicit-GEMM algorithm is forced
 * (its twins are direct loops, for tests - "auto" and "measure" keep the CPU on im2col + GEMM).
 * measure: the first conv of a problem times the candidates (with the lock held, so that
 * replicas planning it at once measure it once) and every later one takes that plan. */
static dt_conv_plan plan_of(const dt_tensor *x, const dt_tensor *w, dt_math math, const dt_conv_problem *pr,
                            dt_conv_algo a) {
    const dt_conv_plan none = {-1, -1, -1};
    if (pr->groups > 1) { /* any format: depthwise or the columns (conv_plan.c) */
        const int gpu = x->dev == DT_GPU;
        const dt_conv_plan plan = dt_conv_plan_grouped(pr, a, gpu);
        remember_plan(pr, a, gpu && dt_gpu_has_sm90a(), plan);
        return plan;
    }
    if (x->dtype != DT_BF16 || x->layout != DT_NHWC) return none;
    if (x->dev != DT_GPU && (a == DT_CONV_ALGO_AUTO || a == DT_CONV_ALGO_GEMM || a == DT_CONV_ALGO_MEASURE)) return none;
    const int sm90 = x->dev == DT_GPU && dt_gpu_has_sm90a();
    if (a == DT_CONV_ALGO_SM90 && x->dev == DT_GPU && !sm90)
        dt_fatal("conv_algo=sm90: this GPU or build has no Hopper engine (it needs compute capability 9.0 and a "
                 "CUDA_ARCH=sm_90 build); use auto");
    if (a != DT_CONV_ALGO_MEASURE) {
        const dt_conv_plan plan = dt_conv_plan_bf16(pr, a, sm90);
        remember_plan(pr, a, sm90, plan);
        return plan;
    }
    pthread_mutex_lock(&g_measure_lock);
    dt_conv_plan plan;
    pthread_mutex_lock(&g_plans_lock);
    const int known = find_plan(pr, a, sm90, &plan);
    pthread_mutex_unlock(&g_plans_lock);
    if (!known) {
        plan = measure_plan(x, w, math, pr, sm90);
        remember_plan(pr, a, sm90, plan);
    }
    pthread_mutex_unlock(&g_measure_lock);
    return plan;
}


/* The column source of a plain conv: im2col of the input, col2im of the gradient. */
typedef struct {
    dt_dev dev;
    dt_dtype dtype;
    dt_layout layout;
    const void *x;    /* [N, Cin, H, W] in the layout */
    void *dx;         /* same, or NULL */
    float beta_x;
    int64_t Cin, H, W, Ho, Wo;
    dt_conv_geom g;
} conv_cols;

static size_t image_bytes(const conv_cols *c) { return (size_t)(c->Cin * c->H * c->W) * dt_dtype_size(c->dtype); }

static void conv_fill(void *ctx, int64_t n0, int64_t nb, void *col) {
    conv_cols *c = ctx;
    const void *x = (const char *)c->x + n0 * image_bytes(c);
    if (c->layout == DT_NCHW) DT_PICK(im2col_nchw_k, c->dev, DT_F32, DT_NCHW)(x, nb, c->Cin, c->H, c->W, c->g, c->Ho, c->Wo, col);
    else DT_PICK(im2col_k, c->dev, c->dtype, c->layout)(x, nb, c->Cin, c->H, c->W, c->g, c->Ho, c->Wo, col);
}

static void conv_adjoint(void *ctx, int64_t n0, int64_t nb, void *dcol) {
    conv_cols *c = ctx;
    void *dx = (char *)c->dx + n0 * image_bytes(c);
    if (c->layout == DT_NCHW) DT_PICK(col2im_nchw_k, c->dev, DT_F32, DT_NCHW)(dcol, nb, c->Cin, c->H, c->W, c->g, c->Ho, c->Wo, c->beta_x, dx);
    else DT_PICK(col2im_k, c->dev, c->dtype, c->layout)(dcol, nb, c->Cin, c->H, c->W, c->g, c->Ho, c->Wo, c->beta_x, dx);
}

/* A 1x1 stride-1 unpadded NHWC conv: its columns are the input's rows. */
static int is_pointwise(const conv_cols *c) {
    const dt_conv_geom g = c->g;
    return c->layout == DT_NHWC && g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
}
static const void *conv_direct(void *ctx, int64_t n0) {
    conv_cols *c = ctx;
    return (const char *)c->x + n0 * image_bytes(c);
}
/* ... and its column gradient is dx's rows: dX [nb*P, Cin] = dY [nb*P, Cout] . W [Cout, Cin],
 * accumulated into dx by the GEMM's beta (no column buffer, no col2im). */
static void *conv_ddirect(void *ctx, int64_t n0) {
    conv_cols *c = ctx;
    return (char *)c->dx + n0 * image_bytes(c);
}

static dt_colconv conv_skeleton(conv_cols *cols, const dt_tensor *x, const dt_tensor *w, dt_conv_geom g, int64_t groups,
                                dt_math math, int64_t Ho, int64_t Wo) {
    *cols = (conv_cols){.dev = x->dev, .dtype = x->dtype, .layout = x->layout, .x = x->data, .Cin = x->shape[1],
                        .H = x->shape[2], .W = x->shape[3], .Ho = Ho, .Wo = Wo, .g = g};
    int64_t R = cols->Cin * g.kh * g.kw;
    dt_colconv cc = {.dev = x->dev, .layout = x->layout == DT_NHWC ? DT_COLS_NC : DT_COLS_CN, .dtype = x->dtype,
                     .math = math, .nhwc = x->layout == DT_NHWC, .N = x->shape[0], .Cout = w->shape[0],
                     .P = Ho * Wo, .R = R, .nb = dt_conv_chunk(x->shape[0], R * Ho * Wo, dt_dtype_size(x->dtype)),
                     .groups = groups, .taps = (int64_t)g.kh * g.kw, .ctx = cols, .fill = conv_fill};
    if (is_pointwise(cols)) {
        cc.cols_direct = conv_direct;
        cc.nb = x->shape[0];
    }
    return cc;
}

/* The backward passes of x * w under a plan: dx (NULL: not wanted) = beta_x dx + conv^T(dy, w),
 * dw (NULL: not wanted) = beta_w dw + the weight gradient, each on the engine the plan gives
 * it; what the implicit GEMM does not take runs on the column skeleton (both passes share its
 * chunks). pr: the problem the plan was made for. */
static void conv_backward_passes(const dt_tensor *x, const dt_tensor *w, const dt_conv_problem *pr, dt_conv_plan plan,
                                 dt_math math, const void *dy, void *dx, float beta_x, float *dw, float beta_w) {
    if (plan.dgrad == DT_CONV_PASS_DEPTHWISE) { /* the plan puts every pass of a depthwise conv there */
        if (dx) DT_PICK(dw_dgrad_k, x->dev, x->dtype, x->layout)(pr, dy, w->data, beta_x, dx);
        if (dw) DT_PICK(dw_wgrad_k, x->dev, x->dtype, x->layout)(pr, x->data, dy, beta_w, dw);
        return;
    }
    conv_cols cols;
    dt_colconv cc = conv_skeleton(&cols, x, w, pr->g, pr->groups, math, pr->Ho, pr->Wo);
    cols.dx = dx, cols.beta_x = beta_x;
    if (dx && plan.dgrad >= 0) { /* dx on the implicit GEMM: no column gradient */
        DT_PICK(igemm_dgrad_k, x->dev, DT_BF16, DT_NHWC)(pr, (dt_igemm_tile)plan.dgrad, dy, w->data, beta_x, dx);
    } else if (dx && cc.cols_direct) {
        cc.dcols_direct = conv_ddirect;
        cc.dcols_beta = beta_x;
    } else if (dx) {
        cc.adjoint = conv_adjoint;
    }
    if (dw && plan.wgrad >= 0) {
        DT_PICK(igemm_wgrad_k, x->dev, DT_BF16, DT_NHWC)(pr, (dt_igemm_tile)plan.wgrad, x->data, dy, beta_w, dw);
        dw = NULL; /* done: the column path below runs only what is left (dx), or nothing */
    }
    dt_colconv_backward(&cc, w->data, dy, dw, beta_w);
}

static void conv_backward(dt_node *n) {
    dt_tensor *x = n->in[0], *w = n->in[1], *bias = n->in[2], *y = n->out, *dy = y->grad;
    conv_ctx *ctx = n->ctx;
    int64_t N = x->shape[0], Cout = w->shape[0], P = y->shape[2] * y->shape[3];
    float beta_b, beta_w, beta_x;
    float *db = dt_grad_dst(bias, &beta_b);
    if (db && x->layout == DT_NCHW) DT_PICK(dt_bias_nchw_bwd_k, x->dev, DT_F32, DT_NCHW)(N, Cout, P, dy->data, beta_b, db);
    else if (db) DT_PICK(dt_bias_rows_bwd_k, x->dev, x->dtype, x->layout)(N * P, Cout, dy->data, beta_b, db);
    void *dx = dt_grad_dst(x, &beta_x);
    float *dw = dt_grad_dst(w, &beta_w);
    conv_backward_passes(x, w, &ctx->pr, ctx->plan, ctx->math, dy->data, dx, beta_x, dw, beta_w);
}

/* ---- conv_algo=measure: the engines a pass can run on, timed */

/* The candidates of pass (DT_SM90_* bit) for p: im2col + GEMM (-1) always, the implicit GEMM's
 * two tiles where it runs the pass, the Hopper engine where the device has it and it takes the
 * pass. Returns how many, in out[]. */
static int pass_candidates(const dt_conv_problem *p, int pass, int sm90, int out[4]) {
    int n = 0;
    out[n++] = -1;
    if (dt_igemm_supported(p) & (pass == DT_SM90_FPROP ? DT_IGEMM_FPROP : DT_IGEMM_BACKWARD))
        out[n++] = DT_IGEMM_TILE_128, out[n++] = DT_IGEMM_TILE_64;
    if (sm90 && (dt_conv_sm90_supports(p) & pass)) out[n++] = DT_IGEMM_TILE_SM90;
    return n;
}

/* Scratch of one measurement: y (the fprop's output, then the backward's dy: the conv's own
 * values, never zeros), dx, dw; device memory, stream-ordered. */
typedef struct {
    void *y, *dx;
    float *dw;
} measure_bufs;

static void run_pass(const dt_tensor *x, const dt_tensor *w, dt_math math, const dt_conv_problem *pr, int pass,
                     int engine, const measure_bufs *b) {
    dt_conv_plan plan = {-1, -1, -1};
    if (pass == DT_SM90_FPROP) {
        if (engine >= 0) {
            DT_PICK(igemm_fprop_k, x->dev, DT_BF16, DT_NHWC)(pr, (dt_igemm_tile)engine, x->data, w->data, NULL, b->y, NULL);
        } else {
            conv_cols cols;
            dt_colconv cc = conv_skeleton(&cols, x, w, pr->g, pr->groups, math, pr->Ho, pr->Wo);
            dt_colconv_forward(&cc, w->data, NULL, b->y);
        }
    } else if (pass == DT_SM90_DGRAD) {
        plan.dgrad = engine;
        conv_backward_passes(x, w, pr, plan, math, b->y, b->dx, 0.0f, NULL, 0.0f);
    } else {
        plan.wgrad = engine;
        conv_backward_passes(x, w, pr, plan, math, b->y, NULL, 0.0f, b->dw, 0.0f);
    }
}

/* The fastest engine of each pass: every candidate run once (its first call's setup: cuBLAS
 * handles, kernel attributes, tensor-map entry points), then the mean of 3 runs by the device's
 * events; the fprop first, whose output is the backward passes' dy. */
static dt_conv_plan measure_plan(const dt_tensor *x, const dt_tensor *w, dt_math math, const dt_conv_problem *pr,
                                 int sm90) {
    const int64_t K = (int64_t)pr->g.kh * pr->g.kw * (pr->C / pr->groups);
    measure_bufs b = {dt_gpu_malloc(sizeof(dt_bf16) * (size_t)(pr->N * pr->Ho * pr->Wo * pr->Cout)),
                      dt_gpu_malloc(sizeof(dt_bf16) * (size_t)(pr->N * pr->H * pr->W * pr->C)),
                      dt_gpu_malloc(sizeof(float) * (size_t)(pr->Cout * K))};
    dt_gpu_timer *t = dt_gpu_timer_new();
    int best[3];
    for (int i = 0; i < 3; i++) {
        const int pass = 1 << i; /* DT_SM90_FPROP, _DGRAD, _WGRAD */
        int cand[4];
        const int n = pass_candidates(pr, pass, sm90, cand);
        float best_ms = 0.0f;
        best[i] = -1;
        for (int c = 0; c < n; c++) {
            run_pass(x, w, math, pr, pass, cand[c], &b);
            dt_gpu_timer_start(t);
            for (int r = 0; r < 3; r++) run_pass(x, w, math, pr, pass, cand[c], &b);
            dt_gpu_timer_stop(t);
            const float ms = dt_gpu_timer_ms(t);
            if (c == 0 || ms < best_ms) best_ms = ms, best[i] = cand[c];
        }
        if (pass == DT_SM90_FPROP) run_pass(x, w, math, pr, pass, best[i], &b); /* dy: the winner's y */
    }
    dt_gpu_timer_free(t);
    dt_gpu_free(b.y), dt_gpu_free(b.dx), dt_gpu_free(b.dw);
    return (dt_conv_plan){best[0], best[1], best[2]};
}

/* The (dtype, layout) pairs conv2d runs: f32 NCHW, f32 NHWC, bf16 NHWC; the weight in the
 * input's dtype and layout (a bf16 model passes its weights' working copies), fp32 bias. */
static void check_types(const dt_tensor *x, const dt_tensor *w, const dt_tensor *bias) {
    char a[160], b[160];
    if (x->dtype != w->dtype || x->layout != w->layout)
        dt_fatal("conv2d: input %s and weight %s must have one dtype and layout (a bf16 model passes its weights' "
                 "bf16 working copies, dt_param_work)", dt_tensor_desc(x, a, sizeof a), dt_tensor_desc(w, b, sizeof b));
    int ok = (x->dtype == DT_F32 && x->layout == DT_NCHW) || (x->layout == DT_NHWC && (x->dtype == DT_F32 || x->dtype == DT_BF16));
    if (!ok) dt_fatal("conv2d: no kernel for %s (has: f32 nchw, f32 nhwc, bf16 nhwc)", dt_tensor_desc(x, a, sizeof a));
    if (bias) dt_require_dtype("conv2d", "bias", bias, DT_F32);
}

dt_tensor *dt_conv2d(dt_tensor *x, dt_tensor *w, dt_tensor *bias, dt_conv_geom g, dt_math math) {
    return dt_conv2d_algo(x, w, bias, g, math, DT_CONV_ALGO_DEFAULT);
}

dt_tensor *dt_conv2d_algo(dt_tensor *x, dt_tensor *w, dt_tensor *bias, dt_conv_geom g, dt_math math,
                          dt_conv_algo algo) {
    return dt_conv2d_stats(x, w, bias, g, math, algo, NULL);
}

/* conv2d in `groups` groups under algo (1: the dense conv of dt_conv2d_stats). */
static dt_tensor *conv2d_groups(dt_tensor *x, dt_tensor *w, dt_tensor *bias, dt_conv_geom g, int64_t groups,
                                dt_math math, dt_conv_algo algo, dt_conv_stats *stats) {
    if (stats) *stats = (dt_conv_stats){NULL, 0};
    dt_require_ndim("conv2d", "input", x, 4);
    dt_require_ndim("conv2d", "weight", w, 4);
    dt_require_same_device("conv2d", x, w);
    dt_require_live("conv2d", x);
    dt_require_live("conv2d", w);
    char a[128], b[128];
    if (groups < 1 || x->shape[1] % groups || w->shape[0] % groups)
        dt_fatal("conv2d: %lld groups do not divide input %s's %lld channels and weight %s's %lld output channels",
                 (long long)groups, dt_shape_str(x, a, sizeof a), (long long)x->shape[1], dt_shape_str(w, b, sizeof b),
                 (long long)w->shape[0]);
    if (w->shape[1] != x->shape[1] / groups || w->shape[2] != g.kh || w->shape[3] != g.kw)
        dt_fatal("conv2d: weight %s does not fit input %s with a %dx%d kernel in %lld groups (expected [Cout, %lld, %d, %d])",
                 dt_shape_str(w, a, sizeof a), dt_shape_str(x, b, sizeof b), g.kh, g.kw, (long long)groups,
                 (long long)(x->shape[1] / groups), g.kh, g.kw);
    if (bias && (bias->ndim != 1 || bias->shape[0] != w->shape[0]))
        dt_fatal("conv2d: bias %s must be [%lld]", dt_shape_str(bias, a, sizeof a), (long long)w->shape[0]);
    check_types(x, w, bias);
    int64_t Ho, Wo;
    dt_conv_out_hw("conv2d", x, g, &Ho, &Wo);
    dt_tensor *y = dt_tensor_new4_as(x->dev, x->dtype, x->layout, x->shape[0], w->shape[0], Ho, Wo);
    const dt_conv_problem pr = {x->shape[0], x->shape[1], x->shape[2], x->shape[3], w->shape[0], Ho, Wo, g, groups};
    const dt_conv_plan plan = plan_of(x, w, math, &pr, algo); /* grouped: depthwise or the columns */
    if (plan.fprop == DT_CONV_PASS_DEPTHWISE) {
        DT_PICK(dw_fwd_k, x->dev, x->dtype, x->layout)(&pr, x->data, w->data, bias ? bias->data : NULL, y->data);
    } else if (plan.fprop >= 0) {
        DT_PICK(igemm_fprop_k, x->dev, DT_BF16, DT_NHWC)(&pr, (dt_igemm_tile)plan.fprop, x->data, w->data,
                                                         bias ? bias->data : NULL, y->data, stats);
    } else {
        conv_cols cols;
        dt_colconv cc = conv_skeleton(&cols, x, w, g, groups, math, Ho, Wo);
        dt_colconv_forward(&cc, w->data, bias ? bias->data : NULL, y->data);
    }
    dt_tensor *in[3] = {x, w, bias};
    dt_node *n = dt_record("conv2d", conv_backward, y, 3, in, sizeof(conv_ctx));
    if (n) *(conv_ctx *)n->ctx = (conv_ctx){g, math, plan, pr};
    return y;
}

dt_tensor *dt_conv2d_stats(dt_tensor *x, dt_tensor *w, dt_tensor *bias, dt_conv_geom g, dt_math math,
                           dt_conv_algo algo, dt_conv_stats *stats) {
    return conv2d_groups(x, w, bias, g, 1, math, algo, stats);
}

dt_tensor *dt_conv2d_grouped(dt_tensor *x, dt_tensor *w, dt_tensor *bias, dt_conv_geom g, int64_t groups, dt_math math) {
    return conv2d_groups(x, w, bias, g, groups, math, DT_CONV_ALGO_DEFAULT, NULL);
}

dt_tensor *dt_conv2d_grouped_algo(dt_tensor *x, dt_tensor *w, dt_tensor *bias, dt_conv_geom g, int64_t groups,
                                  dt_math math, dt_conv_algo algo) {
    return conv2d_groups(x, w, bias, g, groups, math, algo, NULL);
}
