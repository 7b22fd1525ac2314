/* conv_geom.h: what a 2-D convolution is asked - its geometry (kernel, stride, padding,
 * dilation) and the whole problem (the shapes, the groups), shared by plain and deformable
 * convolutions, their kernels and their layers, and the algorithm a caller asks for a bf16
 * channels-last conv (dt_conv_algo: the plan's choice, or one engine forced; docs/conv.md "The
 * plan", conv_engine.h). */
#ifndef DT_CONV_GEOM_H
#define DT_CONV_GEOM_H

#include "core/dt_api.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

typedef struct {
    int kh, kw; /* kernel size */
    int sh, sw; /* stride */
    int ph, pw; /* zero padding */
    int dh, dw; /* dilation */
} dt_conv_geom;

/* A square k x k kernel with the same stride/padding/dilation in both directions. */
static inline dt_conv_geom dt_geom(int k, int stride, int pad, int dil) {
    dt_conv_geom g = {k, k, stride, stride, pad, pad, dil, dil};
    return g;
}

/* Output size along one axis; <= 0 means the input is too small for the kernel. */
static inline int64_t dt_conv_out_size(int64_t in, int k, int s, int p, int d) {
    return (in + 2 * (int64_t)p - (int64_t)d * (k - 1) - 1) / s + 1; /* int64: a caller's 65536 x 196607 */
}

/* One convolution problem, what every convolution path is given (the implicit GEMM and the
 * Hopper engine, their plan, the deformable plan and the deformable kernels' float64
 * reference): logical tensors
 * x [N, C, H, W], w [Cout, C / groups, kh, kw], y [N, Cout, Ho, Wo]; each of the `groups`
 * groups maps C / groups input channels to Cout / groups outputs (1: a dense conv). How the
 * tensors are stored (dtype, layout) is each entry point's; a path that does not take a problem
 * (groups > 1 on the implicit GEMM, say) says so through its supports function. */
typedef struct {
    int64_t N, C, H, W;   /* the input */
    int64_t Cout, Ho, Wo; /* the output */
    dt_conv_geom g;
    int64_t groups;
} dt_conv_problem;

/* The statistics a conv's fprop made of its output y for the batch norm that follows (conv +
 * batch-norm statistics, dt_conv_bn): sums [groups][Cout][2] double = (sum y, sum y^2) of each
 * channel over each of `groups` row ranges of y as stored, on the conv's device, allocated by
 * the conv (dt_dev_alloc) and freed by its caller (dt_dev_free); sums NULL: none made (the path
 * has no statistics epilogue). The batch norm adds the groups in group order. */
typedef struct {
    double *sums;
    int64_t groups;
} dt_conv_stats;

/* The problem of x [N, C, H, W] under g with Cout outputs in `groups` groups; Ho, Wo from
 * dt_conv_out_size (<= 0: the input is too small; the caller checks). */
static inline dt_conv_problem dt_conv_problem_of(int64_t N, int64_t C, int64_t H, int64_t W, int64_t Cout,
                                                 dt_conv_geom g, int64_t groups) {
    dt_conv_problem p = {N, C, H, W, Cout, dt_conv_out_size(H, g.kh, g.sh, g.ph, g.dh),
                         dt_conv_out_size(W, g.kw, g.sw, g.pw, g.dw), g, groups};
    return p;
}

static inline int dt_conv_problem_same(const dt_conv_problem *a, const dt_conv_problem *b) {
    return a->N == b->N && a->C == b->C && a->H == b->H && a->W == b->W && a->Cout == b->Cout && a->Ho == b->Ho &&
           a->Wo == b->Wo && a->groups == b->groups && a->g.kh == b->g.kh && a->g.kw == b->g.kw &&
           a->g.sh == b->g.sh && a->g.sw == b->g.sw && a->g.ph == b->g.ph && a->g.pw == b->g.pw &&
           a->g.dh == b->g.dh && a->g.dw == b->g.dw;
}

/* A pointwise conv: 1x1, stride 1, no padding - with channels-last tensors the input [N*H*W, C]
 * is its own column matrix (no im2col), and the engines read it densely. */
static inline int dt_conv_geom_pointwise(dt_conv_geom g) {
    return g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
}

/* The dgrad of a stride-1 conv g is itself a stride-1 conv of dy with the taps mirrored: same
 * kernel and dilation, padding (k - 1) d - p on each axis (negative when p exceeds the window:
 * such a dgrad is not a plain conv). */
static inline dt_conv_geom dt_conv_dgrad_geom(dt_conv_geom g) {
    dt_conv_geom d = g;
    d.ph = (g.kh - 1) * g.dh - g.ph, d.pw = (g.kw - 1) * g.dw - g.pw;
    return d;
}

/* auto: the measured winner per shape (dt_conv_plan_bf16, conv_engine.h); gemm: im2col + cuBLAS
 * everywhere (the reference path); igemm128 / igemm64: every supported pass on the mma.sync
 * implicit GEMM with that tile; sm90: every pass the Hopper engine supports on it, the others as
 * auto (tests, ablation; refused on a GPU without it); measure: each pass on the engine that
 * ran it fastest when its problem was first planned in the process (cuDNN's benchmark mode: the
 * candidates timed on the conv's own tensors, the choice kept for every later conv of that
 * problem; the CPU plans as auto). A timed choice can differ between runs, and the bits with it:
 * the log's plan says what ran. */
typedef enum {
    DT_CONV_ALGO_AUTO = 0,
    DT_CONV_ALGO_GEMM,
    DT_CONV_ALGO_IGEMM128,
    DT_CONV_ALGO_IGEMM64,
    DT_CONV_ALGO_SM90,
    DT_CONV_ALGO_MEASURE
} dt_conv_algo;
/* The default is the plan: inside the bf16 ResNet-18 step (graphs, batch 64, H200) it takes
 * 4.48 ms on an H200 (the Hopper engine) where im2col + cuBLAS everywhere takes 7.29 (docs/PERF.md
 * section 18). */
#define DT_CONV_ALGO_DEFAULT DT_CONV_ALGO_AUTO

const char *dt_conv_algo_name(dt_conv_algo a);
int dt_conv_algo_parse(const char *s); /* -1 when s names none */

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
