/* dt_layers.h: the differentiable CNN ops: convolution, batch norm, pooling, the loss.
 * Every op checks shapes, dtypes, layouts and devices (fatal error naming them), picks its
 * kernels from op tables by (device, dtype, layout) - a combination an op lacks is refused with
 * a message naming what it has - and records its node on the tape. */
#ifndef DT_LAYERS_H
#define DT_LAYERS_H

#include "core/dt_api.h"

#include <stddef.h>
#include <stdio.h>

#include "ops/conv/conv_geom.h" /* dt_conv_geom, dt_conv_algo */
#include "core/dt_autograd.h"
#include "core/dt_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

/* A data-parallel trainer's cross-replica sum of batch-norm statistics (its fields:
 * ops/batchnorm/batchnorm.h, where the kernels call it). */
typedef struct dt_bn_sync dt_bn_sync;

/* ---- conv2d ----
 * x [N, Cin, H, W], w [Cout, Cin, kh, kw], bias [Cout] (f32) or NULL -> [N, Cout, Ho, Wo] in
 * x's dtype and layout: f32 NCHW, f32 NHWC or bf16 NHWC, the weight in the same dtype and
 * layout (NHWC: stored [Cout, kh, kw, Cin]). math: how f32 products are computed (strict or
 * TF32); bf16 products accumulate in fp32. The weight gradient is f32 (a working copy's goes
 * to its master). Implemented as im2col + GEMM over chunks of images whose column buffer fits
 * the budget (dt_conv_set_col_budget), so memory stays bounded for any batch size. */
dt_tensor *dt_conv2d(dt_tensor *x, dt_tensor *w, dt_tensor *bias, dt_conv_geom g, dt_math math);
/* The same with the engine of a bf16 NHWC conv's passes chosen (conv_engine.h, docs/conv.md "The
 * plan"): auto (the measured winner per shape: what dt_conv2d runs, DT_CONV_ALGO_DEFAULT), gemm
 * (im2col + cuBLAS everywhere), igemm128 / igemm64 (the implicit GEMM with that tile wherever it
 * runs - on the CPU too, through its twins), sm90 (the Hopper engine), measure (each pass on the
 * engine timed fastest for its shape, once a process: conv_geom.h). A model holds it in its config (conv_algo). */
dt_tensor *dt_conv2d_algo(dt_tensor *x, dt_tensor *w, dt_tensor *bias, dt_conv_geom g, dt_math math,
                          dt_conv_algo algo);
/* The same, and where the pass can (the Hopper engine's fprop on the GPU, the implicit GEMM's
 * twin on the CPU) the statistics of y as stored for the batch norm that follows, in *stats
 * (conv_geom.h's dt_conv_stats: the caller frees stats->sums; NULL when none were made).
 * dt_conv_bn is its user. */
dt_tensor *dt_conv2d_stats(dt_tensor *x, dt_tensor *w, dt_tensor *bias, dt_conv_geom g, dt_math math,
                           dt_conv_algo algo, dt_conv_stats *stats);
/* The same in `groups` groups (ResNeXt's grouped 3x3, groups = Cin: depthwise): w [Cout, Cin /
 * groups, kh, kw] (NHWC: stored [Cout, kh, kw, Cin / groups]), output channels [j*Cout/groups,
 * (j+1)*Cout/groups) of group j from its input channels [j*Cin/groups, (j+1)*Cin/groups);
 * groups divides Cin and Cout; 1 is dt_conv2d. A depthwise conv (groups = Cin, Cout a multiple
 * of Cin) runs every pass on the depthwise family (ops/conv/depthwise.h: a direct stencil, no
 * columns; on the GPU where its tiles fit); any other runs im2col + one GEMM per group (per
 * group and tap in NHWC) on the grouped weight as stored (docs/conv.md "Groups", "Depthwise").
 * The plan is dt_conv_plan_grouped's (conv_engine.h) under DT_CONV_ALGO_DEFAULT. */
dt_tensor *dt_conv2d_grouped(dt_tensor *x, dt_tensor *w, dt_tensor *bias, dt_conv_geom g, int64_t groups, dt_math math);
/* The same under algo: DT_CONV_ALGO_GEMM keeps a depthwise conv on the column path (the
 * reference, for comparison); every other algorithm plans as auto (the engines take no groups). */
dt_tensor *dt_conv2d_grouped_algo(dt_tensor *x, dt_tensor *w, dt_tensor *bias, dt_conv_geom g, int64_t groups,
                                  dt_math math, dt_conv_algo algo);
void dt_conv_set_col_budget(size_t bytes); /* default 256 MiB; env DT_COL_BUDGET_MB */
/* One line per distinct bf16 NHWC conv problem, and per grouped problem of any format, planned
 * so far in this process: its shape, the algorithm, whether the Hopper engine was there, and the
 * engine of each pass (gemm, igemm128, igemm64, sm90, depthwise). The trainer writes it to the run's log after its first step. */
void dt_conv_plan_print(FILE *f);
size_t dt_conv_col_budget(void);
/* Images per chunk for a column buffer of `col_elems_per_image` elements of elem_bytes each. */
int64_t dt_conv_chunk(int64_t N, int64_t col_elems_per_image, size_t elem_bytes);
/* Output spatial size; fatal with the shapes when the input is too small. */
void dt_conv_out_hw(const char *op, const dt_tensor *x, dt_conv_geom g, int64_t *Ho, int64_t *Wo);

/* ---- batchnorm2d (+ fused ReLU, + fused residual add) ----
 * x [N, C, H, W] f32 NCHW, f32 NHWC or bf16 NHWC -> y like x; the affine weight/bias, the
 * running statistics and the batch mean/1/std are fp32 [C] in every case (ops/batchnorm/batchnorm.h).
 * Module state: affine weight/bias (parameters) and running statistics. Training mode
 * normalizes with the batch statistics and updates running_mean/var with `momentum` (running
 * variance uses the unbiased estimate, as PyTorch); eval mode uses the running statistics.
 * sync (set by a data-parallel trainer with sync_bn=1, NULL otherwise): training statistics
 * and their gradient over the batches of all replicas (ops/batchnorm/batchnorm.h). */
typedef struct {
    int64_t C;
    float eps, momentum;
    dt_tensor *weight, *bias;             /* [C] parameters (gamma, beta) */
    dt_tensor *running_mean, *running_var; /* [C] buffers */
    const dt_bn_sync *sync;
} dt_batchnorm;

/* Makes weight=1, bias=0, running mean 0 / var 1 on `dev`; params appended to ps if given. */
struct dt_params_s;
void dt_batchnorm_init(dt_batchnorm *bn, void *params /* dt_params* or NULL */, const char *name,
                       int64_t C, dt_dev dev);
void dt_batchnorm_free(dt_batchnorm *bn); /* frees the buffers (not params in a list) */
/* bn(x), relu(bn(x)) when fuse_relu. */
dt_tensor *dt_batchnorm2d(dt_tensor *x, dt_batchnorm *bn, int training, int fuse_relu);
/* relu(bn(x) + skip) - a ResNet block's join - as one op: one pass forward, one backward (the
 * skip's gradient from the same kernels); skip like x (shape, dtype, layout), not x itself. */
dt_tensor *dt_batchnorm2d_add_relu(dt_tensor *x, dt_tensor *skip, dt_batchnorm *bn, int training);
/* conv + batch-norm statistics: act(bn(conv(x, w)) + skip) - dt_conv2d_algo (no bias) then
 * dt_batchnorm2d (skip NULL; ReLU when relu) or dt_batchnorm2d_add_relu (skip given, relu 1),
 * the same two tape nodes and the same function - where, in training, the conv's pass makes
 * the batch norm's statistics in its epilogue (dt_conv2d_stats), so that the batch norm does
 * not read its input for them. */
dt_tensor *dt_conv_bn(dt_tensor *x, dt_tensor *w, dt_conv_geom g, dt_math math, dt_conv_algo algo, dt_batchnorm *bn,
                      dt_tensor *skip, int training, int relu);

/* ---- pooling: f32 NCHW, f32 NHWC, bf16 NHWC (ops/pool/pool.h) ---- */
/* Max pooling, y like x (PyTorch semantics: padding is -inf, the first maximum wins); the
 * argmax indices are kept for the backward as an int32 tensor in y's layout. */
dt_tensor *dt_maxpool2d(dt_tensor *x, int k, int stride, int pad);
/* [N, C, H, W] -> [N, C] row-major in x's dtype: the mean over H*W, computed in fp32 or wider. */
dt_tensor *dt_global_avgpool(dt_tensor *x);

/* ---- loss and metrics ----
 * logits [N, K] f32 or bf16 (fp32 math inside; the gradient in the logits' dtype); labels [N]
 * int32 class indices. The loss: an f32 [1], the mean over the batch of the cross-entropy
 * with label smoothing eps: target = (1-eps)*onehot + eps/K. */
dt_tensor *dt_softmax_cross_entropy(dt_tensor *logits, dt_tensor *labels, float smoothing);
/* Counts rows whose label is among the top-1 and top-5 logits (ties broken by lower index).
 * Returns the two counts via out[0], out[1] (host). No gradient. */
void dt_topk_correct(const dt_tensor *logits, const dt_tensor *labels, float out[2]);

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
