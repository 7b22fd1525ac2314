/* conv_engine.h: the engines a convolution's passes run on, one closed table (conv_engine.c),
 * and the plan that names one engine per pass (conv_plan.c, docs/conv.md "The engines").
 *
 * An engine is a way to compute a pass of a dt_conv_problem (conv_geom.h): what it can take
 * (supports: a pure function of the problem, the pass and where the conv runs) and how it is
 * launched (fprop, backward). Every engine computes the same function; they differ in speed,
 * in the shapes they take and in the order of their fp32 sums. The plan is data (an engine id
 * per pass), so the run log prints it, conv_algo=measure times the candidates the table
 * offers, and the backward runs what the forward chose. */
#ifndef DT_CONV_ENGINE_H
#define DT_CONV_ENGINE_H

#include "core/dt_device.h"
#include "core/dt_dtype.h"
#include "ops/conv/conv_geom.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The three passes of a conv: fprop y = conv(x, w) (+ bias), dgrad dx = conv^T(dy, w), wgrad
 * dw = the weight gradient. DT_CONV_PASSES counts them. */
typedef enum { DT_CONV_FPROP, DT_CONV_DGRAD, DT_CONV_WGRAD, DT_CONV_PASSES } dt_conv_pass;

/* The engines, in the order conv_algo=measure tries them (the first of equal times wins):
 *   GEMM       im2col + cuBLAS (the column path, dt_colconv.h): any problem, dtype and layout
 *   IGEMM128   the mma.sync implicit GEMM (conv_igemm.h) on its 128x128 tiles
 *   IGEMM64    the same on its 64x64 tiles (wgrad: 64 x 128)
 *   SM90       the Hopper engine (conv_sm90.h: wgmma + TMA)
 *   DEPTHWISE  the depthwise family (depthwise.h: a direct stencil per channel)
 * DT_CONV_ENGINES counts them. */
typedef enum {
    DT_CONV_ENGINE_GEMM,
    DT_CONV_ENGINE_IGEMM128,
    DT_CONV_ENGINE_IGEMM64,
    DT_CONV_ENGINE_SM90,
    DT_CONV_ENGINE_DEPTHWISE,
    DT_CONV_ENGINES
} dt_conv_engine_id;

/* Where a conv runs, as the engines' limits depend on it: gpu 1 = its CUDA kernels, 0 = the
 * CPU twins (which compute every engine's function on any problem within the engine's shape
 * limits, for tests); sm90a 1 = that GPU runs the Hopper engine (dt_gpu_has_sm90a: compute
 * capability 9.0 and a CUDA_ARCH=sm_90 build). */
typedef struct {
    int gpu, sm90a;
} dt_conv_target;

/* One conv's operands as the engines take them: the problem p (logical x [N, C, H, W], w [Cout,
 * C / groups, kh, kw], y and dy [N, Cout, Ho, Wo]) and how the tensors are stored - on dev, of
 * dtype (x, w, y, dy, dx; the weight gradient dw is fp32, the bias fp32) in layout. fprop reads
 * x, w, bias (NULL: none) and writes y and, when stats is not NULL, y's statistics where the
 * engine makes them (conv_geom.h's dt_conv_stats; sums NULL where it makes none). backward
 * writes dx = beta_x dx + conv^T(dy, w) when dx is not NULL and dw = beta_w dw + the weight
 * gradient when dw is not NULL (beta 0: the old value is not read). */
typedef struct {
    const dt_conv_problem *p;
    dt_dev dev;
    dt_dtype dtype;
    dt_layout layout;
    dt_math math; /* the column path's f32 products: strict or TF32 */
    const void *x, *w;
    const float *bias;
    void *y;
    dt_conv_stats *stats;
    const void *dy;
    void *dx;
    float beta_x;
    float *dw;
    float beta_w;
} dt_conv_call;

/* An engine: its name (the run log's, and the conv_algo that forces it where there is one),
 * whether it runs pass `pass` of p on target t, and its launches. backward runs both backward
 * passes a call asks for in one sweep, so that an engine that computes them from shared work
 * (the column path: one chunk loop, one column buffer, one relayout of dy) does it once; the
 * plan hands it dx and dw together when it gives it both passes. */
typedef struct {
    const char *name;
    int (*supports)(const dt_conv_problem *p, dt_conv_pass pass, dt_conv_target t);
    void (*fprop)(const dt_conv_call *c);
    void (*backward)(const dt_conv_call *c);
} dt_conv_engine;

extern const dt_conv_engine dt_conv_engines[DT_CONV_ENGINES];

/* ---- the plan (conv_plan.c): the engine of each pass of one conv */

typedef struct {
    dt_conv_engine_id fprop, dgrad, wgrad;
} dt_conv_plan;

/* The plan of a dense problem p (groups 1) with bf16 channels-last tensors under algo, on
 * target t; a pure function of the shape and the device kind, so every run, replica and replay
 * of a step makes the same choice (bitwise reproducible). */
dt_conv_plan dt_conv_plan_bf16(const dt_conv_problem *p, dt_conv_algo algo, dt_conv_target t);

/* The plan of a grouped problem (groups > 1), any dtype and layout: every pass on the depthwise
 * family where it takes them all on t and algo is not gemm (which keeps the column path: the
 * reference, for comparison); else every pass on the column path (the other engines are
 * dense). A pure function of the problem, the algorithm and the device kind. */
dt_conv_plan dt_conv_plan_grouped(const dt_conv_problem *p, dt_conv_algo algo, dt_conv_target t);

#ifdef __cplusplus
}
#endif
#endif
