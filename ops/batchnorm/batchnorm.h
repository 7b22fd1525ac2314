/* batchnorm.h: 2-D batch normalization, optionally fused with a residual add and a ReLU, over
 * x: [N, C, H, W] seen as N*P values per channel (P = H*W), M = N*P values per channel.
 *
 * stats:    training: mean[c], invstd[c] = 1/sqrt(var_biased + eps) from the batch, and the
 *           running estimates updated with momentum m (running_var gets the unbiased
 *           var * M/(M-1), as PyTorch); eval: mean/invstd from the running estimates.
 * apply:    y = act(bn(x) + skip), bn(x) = x*scale + shift with scale = invstd*w and
 *           shift = b - mean*scale; skip optional (NULL), act = max(., 0) when relu.
 * backward: g = dy, masked by (pre-activation > 0) when relu; dskip = beta*dskip + g;
 *           xhat = (x - mean) * invstd; db = sum g, dw = sum g*xhat, and
 *           training: dx = w*invstd * (g - db/M - xhat*dw/M);  eval: dx = w*invstd*g.
 *           Each gradient is written (beta 0) or added (beta 1); NULL skips it.
 *
 * Kernels per (dtype, layout), one signature each (the op tables of ops/batchnorm/batchnorm_op.c):
 *   f32 nchw   x, y, skip, dy, dx, dskip: [N, C, H, W] f32 - the reference, kept bit for bit
 *   f32 nhwc   the same tensors [N, H, W, C] f32
 *   bf16 nhwc  the same tensors [N, H, W, C] bf16 (fp32 arithmetic, one rounding per store)
 * mean, invstd, w, b, running_mean, running_var, dw, db: [C] fp32 in every combination.
 * The ReLU mask: the nchw kernels read it from y (y > 0); the nhwc kernels recompute the
 * pre-activation fma(x, scale, shift) (+ skip) exactly as their forward did and never read y,
 * which saves one tensor read per pass when there is no skip.
 *
 * Sums run in double in an order fixed by the shape alone (deterministic on any GPU).
 * ws: dt_bn_ws_bytes(C) bytes on the kernel's device (dt_dev_alloc): the CUDA kernels keep
 * their per-split partials and the per-channel sums there, the CPU twins the sums.
 *
 * Synchronized batch norm (sync != NULL, training): the per-channel sums (sum x, sum x^2 for
 * the statistics; sum g, sum g*xhat for the input gradient) are summed across the data-parallel
 * replicas by sync->allreduce before use, and M counts the elements of all `ranks` replicas
 * (each holds the same N). dw and db stay this replica's own sums (the trainer averages
 * parameter gradients across replicas afterwards, like every other gradient). */
#ifndef DT_K_BATCHNORM_H
#define DT_K_BATCHNORM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* sums: (C, 2) doubles where the kernel's data lives (device memory for the CUDA kernels),
 * summed in place across replicas, in stream order. */
typedef struct dt_bn_sync {
    void (*allreduce)(void *ctx, double *sums, int64_t n);
    void *ctx;
    int ranks;
} dt_bn_sync;

/* The most row splits a CUDA reduction uses (their partials live in ws). */
#define DT_BN_MAX_SPLITS 256

/* Workspace of one call: (C, DT_BN_MAX_SPLITS) partials then (C) sums, two doubles each, then
 * the NHWC backward's four per-channel coefficients (floats). */
static inline size_t dt_bn_ws_bytes(int64_t C) {
    return (size_t)C * (DT_BN_MAX_SPLITS + 1) * 2 * sizeof(double) + (size_t)C * 4 * sizeof(float);
}

/* x: the input in the entry's dtype and layout. Writes mean, invstd [C]; in training also
 * updates running_mean / running_var (when not NULL). */
typedef void dt_bn_stats_fn(int64_t N, int64_t C, int64_t P, const void *x, int training, float eps,
                            float momentum, float *running_mean, float *running_var, float *mean, float *invstd,
                            void *ws, const dt_bn_sync *sync);
/* y = act(bn(x) + skip); x, skip (or NULL), y in the entry's dtype and layout. */
typedef void dt_bn_apply_fn(int64_t N, int64_t C, int64_t P, const void *x, const float *mean, const float *invstd,
                            const float *w, const float *b, const void *skip, int relu, void *y);
/* The gradients of apply from dy; x, y, skip (the forward's), dy, dx, dskip in the entry's dtype
 * and layout. mean/invstd: what stats returned. */
typedef void dt_bn_backward_fn(int64_t N, int64_t C, int64_t P, const void *x, const void *y, const void *skip,
                               const void *dy, const float *mean, const float *invstd, const float *w,
                               const float *b, int relu, int training, void *dx, float beta_x, void *dskip,
                               float beta_s, float *dw, float beta_w, float *db, float beta_b, void *ws,
                               const dt_bn_sync *sync);

/* Training statistics from the sums the producer of x made (conv + batch-norm statistics,
 * dt_conv_bn): sums [groups][C][2] = (sum x, sum x^2) of each channel over `groups` ranges of
 * its M values, added in group order - then the second half of stats: the channel sums
 * all-reduced when synchronized (M then counts every replica's values), mean, invstd and the
 * running update. One entry for every format (the sums are double wherever x lives). */
typedef void dt_bn_stats_of_sums_fn(int64_t C, int64_t M, const double *sums, int64_t groups, float eps,
                                    float momentum, float *running_mean, float *running_var, float *mean,
                                    float *invstd, const dt_bn_sync *sync);
dt_bn_stats_of_sums_fn dt_bn_stats_of_sums_cpu;
dt_bn_stats_of_sums_fn dt_bn_stats_of_sums_cuda;

#define DT_DECL_BN(sfx)                     \
    dt_bn_stats_fn dt_bn_stats_##sfx;       \
    dt_bn_apply_fn dt_bn_apply_##sfx;       \
    dt_bn_backward_fn dt_bn_backward_##sfx;

DT_DECL_BN(f32_nchw_cpu)
DT_DECL_BN(f32_nhwc_cpu)
DT_DECL_BN(bf16_nhwc_cpu)
DT_DECL_BN(f32_nchw_cuda)
DT_DECL_BN(f32_nhwc_cuda)
DT_DECL_BN(bf16_nhwc_cuda)

#ifdef __cplusplus
}
#endif
#endif
