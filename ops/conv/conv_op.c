/* conv2d: the op - its checks, its autograd node, and the plan each conv's passes run under
 * (conv_engine.h): made in the forward, a pure function of the problem, the device kind and the
 * caller's algorithm (dt_conv2d_algo: the model's config key conv_algo), or measured
 * (conv_algo=measure), and kept for the backward. The engines themselves (the column path
 * im2col + GEMM for every dtype and layout, the implicit GEMM, the Hopper engine, the depthwise
 * family) are conv_engine.c's table; this file launches a pass through its engine's entry.
 * Grouped convs (dt_conv2d_grouped) plan depthwise or the column path; dense f32 convs and the
 * CPU's bf16 convs under auto run every pass on the column path. db = sum of dy over (N, P)
 * whichever engine runs. */
#include "ops/pointwise/bias.h"
#include "ops/conv/conv_engine.h"
#include "core/dt_alloc.h"
#include "core/dt_common.h"
#include "core/dt_dtype.h"
#include "core/dt_timer.h"
#include "ops/pointwise/dt_shared_kernels.h"
#include "core/dt_kernel.h"
#include "ops/dt_layers.h"

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

typedef struct {
    dt_math math;
    dt_conv_plan plan;
    dt_conv_problem pr; /* the problem the plan was made for */
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

static const char *engine_name(dt_conv_engine_id e) { return dt_conv_engines[e].name; }

void dt_conv_plan_print(FILE *f) {
    pthread_mutex_lock(&g_plans_lock);
    for (int i = 0; i < g_n_plans; i++) {
        const dt_conv_problem *p = &g_plans[i].p;
        const dt_conv_plan *q = &g_plans[i].plan;
        fprintf(f, "conv plan: [%lld, %lld, %lld, %lld] -> %lld, %dx%d/%d pad %d%s%s (%s%s): fprop %s, dgrad %s, wgrad %s\n",
                (long long)p->N, (long long)p->C, (long long)p->H, (long long)p->W, (long long)p->Cout, p->g.kh, p->g.kw,
                p->g.sh, p->g.ph, p->g.dh > 1 ? " dilated" : "", p->groups > 1 ? " grouped" : "", dt_conv_algo_name(g_plans[i].algo),
                g_plans[i].sm90 ? ", Hopper engine" : "", engine_name(q->fprop), engine_name(q->dgrad), engine_name(q->wgrad));
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

/* The call of x * w for problem pr: its tensors' device, dtype and layout; the passes' pointers
 * are the caller's to set. */
static dt_conv_call call_of(const dt_tensor *x, const dt_tensor *w, dt_math math, const dt_conv_problem *pr) {
    return (dt_conv_call){.p = pr, .dev = x->dev, .dtype = x->dtype, .layout = x->layout, .math = math, .x = x->data,
                          .w = w->data};
}

static dt_conv_plan measure_plan(const dt_conv_call *c, dt_conv_target t);

/* The plan of call c (x and w set, no pass's pointers yet: measure runs the passes on scratch
 * memory). Grouped: conv_plan.c's, any format. Dense: the column path but for bf16 NHWC, and on
 * the CPU but for a forced engine (the twins are direct loops, for tests - "auto" and "measure"
 * keep the CPU on im2col + GEMM). measure: the first conv of a problem times the candidates (with the lock held, so that
 * replicas planning it at once measure it once) and every later one takes that plan. */
static dt_conv_plan plan_of(const dt_conv_call *c, dt_conv_algo a) {
    static const dt_conv_plan columns = {DT_CONV_ENGINE_GEMM, DT_CONV_ENGINE_GEMM, DT_CONV_ENGINE_GEMM};
    const dt_conv_problem *pr = c->p;
    const dt_conv_target t = {c->dev == DT_GPU, c->dev == DT_GPU && dt_gpu_has_sm90a()};
    if (pr->groups > 1) { /* any format: depthwise or the columns (conv_plan.c) */
        const dt_conv_plan plan = dt_conv_plan_grouped(pr, a, t);
        remember_plan(pr, a, t.sm90a, plan);
        return plan;
    }
    if (c->dtype != DT_BF16 || c->layout != DT_NHWC) return columns;
    if (!t.gpu && (a == DT_CONV_ALGO_AUTO || a == DT_CONV_ALGO_GEMM || a == DT_CONV_ALGO_MEASURE)) return columns;
    if (a == DT_CONV_ALGO_SM90 && t.gpu && !t.sm90a)
        dt_fatal("conv_algo=sm90: this GPU or build has no Hopper engine (it needs compute capability 9.0 and a "
                 "CUDA_ARCH=sm_90 build); use auto");
    if (a != DT_CONV_ALGO_MEASURE) {
        const dt_conv_plan plan = dt_conv_plan_bf16(pr, a, t);
        remember_plan(pr, a, t.sm90a, plan);
        return plan;
    }
    pthread_mutex_lock(&g_measure_lock);
    dt_conv_plan plan;
    pthread_mutex_lock(&g_plans_lock);
    const int known = find_plan(pr, a, t.sm90a, &plan);
    pthread_mutex_unlock(&g_plans_lock);
    if (!known) {
        plan = measure_plan(c, t);
        remember_plan(pr, a, t.sm90a, plan);
    }
    pthread_mutex_unlock(&g_measure_lock);
    return plan;
}

/* The backward passes c asks for (dx, dw: NULL = not wanted) under plan, each on its engine:
 * one call when both passes are on one engine (the column path shares its chunks between them),
 * else one an engine. */
static void conv_backward_passes(const dt_conv_call *c, dt_conv_plan plan) {
    dt_conv_call d = *c;
    if (plan.wgrad != plan.dgrad) d.dw = NULL;
    if (d.dx || d.dw) dt_conv_engines[plan.dgrad].backward(&d);
    if (plan.wgrad != plan.dgrad && c->dw) {
        dt_conv_call wg = *c;
        wg.dx = NULL;
        dt_conv_engines[plan.wgrad].backward(&wg);
    }
}

static void conv_backward(dt_node *n) {
    dt_tensor *x = n->in[0], *w = n->in[1], *bias = n->in[2], *y = n->out, *dy = y->grad;
    conv_ctx *ctx = n->ctx;
    int64_t N = x->shape[0], Cout = w->shape[0], P = y->shape[2] * y->shape[3];
    float beta_b;
    float *db = dt_grad_dst(bias, &beta_b);
    if (db && x->layout == DT_NCHW) DT_PICK(dt_bias_nchw_bwd_k, x->dev, DT_F32, DT_NCHW)(N, Cout, P, dy->data, beta_b, db);
    else if (db) DT_PICK(dt_bias_rows_bwd_k, x->dev, x->dtype, x->layout)(N * P, Cout, dy->data, beta_b, db);
    dt_conv_call c = call_of(x, w, ctx->math, &ctx->pr);
    c.dy = dy->data;
    c.dx = dt_grad_dst(x, &c.beta_x);
    c.dw = dt_grad_dst(w, &c.beta_w);
    conv_backward_passes(&c, ctx->plan);
}

/* ---- conv_algo=measure: the engines a pass can run on, timed */

/* Scratch of one measurement: y (the fprop's output, then the backward's dy: the conv's own
 * values, never zeros), dx, dw; device memory, stream-ordered. */
typedef struct {
    void *y, *dx;
    float *dw;
} measure_bufs;

/* pass of c's x and w on engine e, into the scratch (no bias, no statistics, beta 0) */
static void run_pass(const dt_conv_call *c, dt_conv_pass pass, dt_conv_engine_id e, const measure_bufs *b) {
    dt_conv_call r = *c;
    if (pass == DT_CONV_FPROP) {
        r.y = b->y;
        dt_conv_engines[e].fprop(&r);
        return;
    }
    r.dy = b->y;
    if (pass == DT_CONV_DGRAD) r.dx = b->dx;
    else r.dw = b->dw;
    dt_conv_engines[e].backward(&r);
}

/* The fastest engine of each pass among those the table says run it on t (the table's order:
 * the first of equal times wins): every candidate run once (its first call's setup: cuBLAS
 * handles, kernel attributes, tensor-map entry points), then the mean of 3 runs by the device's
 * events; the fprop first, whose output is the backward passes' dy. */
static dt_conv_plan measure_plan(const dt_conv_call *c, dt_conv_target t) {
    const dt_conv_problem *pr = c->p;
    const int64_t K = (int64_t)pr->g.kh * pr->g.kw * (pr->C / pr->groups);
    measure_bufs b = {dt_gpu_malloc(sizeof(dt_bf16) * (size_t)(pr->N * pr->Ho * pr->Wo * pr->Cout)),
                      dt_gpu_malloc(sizeof(dt_bf16) * (size_t)(pr->N * pr->H * pr->W * pr->C)),
                      dt_gpu_malloc(sizeof(float) * (size_t)(pr->Cout * K))};
    dt_gpu_timer *timer = dt_gpu_timer_new();
    dt_conv_engine_id best[DT_CONV_PASSES];
    for (int i = 0; i < DT_CONV_PASSES; i++) {
        const dt_conv_pass pass = (dt_conv_pass)i;
        float best_ms = 0.0f;
        best[i] = DT_CONV_ENGINE_GEMM;
        int tried = 0;
        for (int e = 0; e < DT_CONV_ENGINES; e++) {
            if (!dt_conv_engines[e].supports(pr, pass, t)) continue;
            run_pass(c, pass, (dt_conv_engine_id)e, &b);
            dt_gpu_timer_start(timer);
            for (int r = 0; r < 3; r++) run_pass(c, pass, (dt_conv_engine_id)e, &b);
            dt_gpu_timer_stop(timer);
            const float ms = dt_gpu_timer_ms(timer);
            if (!tried++ || ms < best_ms) best_ms = ms, best[i] = (dt_conv_engine_id)e;
        }
        if (pass == DT_CONV_FPROP) run_pass(c, pass, best[i], &b); /* dy: the winner's y */
    }
    dt_gpu_timer_free(timer);
    dt_gpu_free(b.y), dt_gpu_free(b.dx), dt_gpu_free(b.dw);
    return (dt_conv_plan){best[DT_CONV_FPROP], best[DT_CONV_DGRAD], best[DT_CONV_WGRAD]};
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
    dt_conv_call c = call_of(x, w, math, &pr);
    const dt_conv_plan plan = plan_of(&c, algo); /* grouped: depthwise or the columns */
    c.bias = bias ? bias->data : NULL, c.y = y->data, c.stats = stats;
    dt_conv_engines[plan.fprop].fprop(&c);
    dt_tensor *in[3] = {x, w, bias};
    dt_node *n = dt_record("conv2d", conv_backward, y, 3, in, sizeof(conv_ctx));
    if (n) *(conv_ctx *)n->ctx = (conv_ctx){math, plan, pr};
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
