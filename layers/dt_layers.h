/* dt_layers.h: the differentiable CNN ops: convolution, batch norm, pooling, the loss.
 * Tensors are NCHW float32. Every op checks shapes and devices (fatal error naming them),
 * runs the CPU twin or the CUDA version by device, and records its node on the tape. */
#ifndef DT_LAYERS_H
#define DT_LAYERS_H

#include <stddef.h>

#include "batchnorm.h" /* dt_bn_sync */
#include "conv_geom.h"
#include "dt_autograd.h"
#include "dt_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- conv2d ----
 * x [N, Cin, H, W], w [Cout, Cin, kh, kw], bias [Cout] or NULL -> [N, Cout, Ho, Wo].
 * Implemented as im2col + GEMM over chunks of images whose column buffer fits the budget
 * (dt_conv_set_col_budget), so memory stays bounded for any batch size. */
dt_tensor *dt_conv2d(dt_tensor *x, dt_tensor *w, dt_tensor *bias, dt_conv_geom g);
void dt_conv_set_col_budget(size_t bytes); /* default 256 MiB; env DT_COL_BUDGET_MB */
size_t dt_conv_col_budget(void);
/* Images per chunk for a column buffer of `col_floats_per_image` elements (4 bytes each, 2 in
 * the bf16 precision). */
int64_t dt_conv_chunk(int64_t N, int64_t col_floats_per_image);
/* Output spatial size; fatal with the shapes when the input is too small. */
void dt_conv_out_hw(const char *op, const dt_tensor *x, dt_conv_geom g, int64_t *Ho, int64_t *Wo);

/* ---- batchnorm2d (+ optional fused ReLU) ----
 * Module state: affine weight/bias (parameters) and running statistics. Training mode
 * normalizes with the batch statistics and updates running_mean/var with `momentum` (running
 * variance uses the unbiased estimate, as PyTorch); eval mode uses the running statistics.
 * sync (set by a data-parallel trainer with sync_bn=1, NULL otherwise): training statistics
 * and their gradient over the batches of all replicas (kernels/batchnorm.h). */
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
dt_tensor *dt_batchnorm2d(dt_tensor *x, dt_batchnorm *bn, int training, int fuse_relu);

/* ---- pooling ---- */
/* Max pooling (PyTorch semantics: padding is -inf, the first maximum wins). */
dt_tensor *dt_maxpool2d(dt_tensor *x, int k, int stride, int pad);
/* [N, C, H, W] -> [N, C] */
dt_tensor *dt_global_avgpool(dt_tensor *x);

/* ---- loss and metrics ----
 * logits [N, K]; labels [N] holding class indices as floats (exact below 2^24). Mean over the
 * batch of the cross-entropy with label smoothing eps: target = (1-eps)*onehot + eps/K. */
dt_tensor *dt_softmax_cross_entropy(dt_tensor *logits, dt_tensor *labels, float smoothing);
/* Counts rows whose label is among the top-1 and top-5 logits (ties broken by lower index).
 * Returns the two counts via out[0], out[1] (host). No gradient. */
void dt_topk_correct(const dt_tensor *logits, const dt_tensor *labels, float out[2]);

#ifdef __cplusplus
}
#endif
#endif
