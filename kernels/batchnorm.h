/* batchnorm.h: 2-D batch normalization over x: [N, C, P] (P = H*W), statistics per channel
 * over the N*P elements M of that channel.
 *
 * stats:    training: mean[c], invstd[c] = 1/sqrt(var_biased + eps) from the batch, and the
 *           running estimates updated with momentum m (running_var gets the unbiased
 *           var * M/(M-1), as PyTorch); eval: mean/invstd from the running estimates.
 * apply:    y = (x - mean) * invstd * w + b, then max(y, 0) when relu (BN+ReLU fused).
 * backward: g = dy masked by (y > 0) when relu; xhat = (x - mean) * invstd;
 *           db = sum g, dw = sum g*xhat, and
 *           training: dx = w*invstd * (g - db/M - xhat*dw/M);  eval: dx = w*invstd*g.
 *           Each gradient is written (beta 0) or added (beta 1); NULL skips it.
 * Sums are taken in double, in an order fixed by the shape (deterministic). The CUDA
 * versions need a workspace of dt_bn_cuda_ws_bytes(N, C) bytes.
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

/* sums: (C, 2) doubles where the kernel's data lives (device memory for _cuda), summed in
 * place across replicas, in stream order. */
typedef struct {
    void (*allreduce)(void *ctx, double *sums, int64_t n);
    void *ctx;
    int ranks;
} dt_bn_sync;

#define DT_DECL_BN(sfx)                                                                           \
    void dt_bn_stats_##sfx(int64_t N, int64_t C, int64_t P, const float *x, int training, float eps, \
                           float momentum, float *running_mean, float *running_var, float *mean,  \
                           float *invstd, void *ws, const dt_bn_sync *sync);                      \
    void dt_bn_apply_##sfx(int64_t N, int64_t C, int64_t P, const float *x, const float *mean,    \
                           const float *invstd, const float *w, const float *b, int relu, float *y); \
    void dt_bn_backward_##sfx(int64_t N, int64_t C, int64_t P, const float *x, const float *y,    \
                              const float *dy, const float *mean, const float *invstd,             \
                              const float *w, int relu, int training, float *dx, float beta_x,     \
                              float *dw, float beta_w, float *db, float beta_b, void *ws,          \
                              const dt_bn_sync *sync);

DT_DECL_BN(cpu)
DT_DECL_BN(cuda)
size_t dt_bn_cuda_ws_bytes(int64_t N, int64_t C);
/* Same size, callable in any build (0 without CUDA). */
static inline size_t dt_bn_cuda_ws_bytes_any(int64_t N, int64_t C) {
#ifdef DT_CUDA
    return dt_bn_cuda_ws_bytes(N, C);
#else
    (void)N; (void)C;
    return 0;
#endif
}

#ifdef __cplusplus
}
#endif
#endif
