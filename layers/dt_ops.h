/* dt_ops.h: differentiable tensor ops (pointwise, reductions, reshape, matmul, linear).
 * Each returns a new tensor (in the current scope) and records a tape node when gradients
 * are on and an input requires one. Inputs must be on one device; shapes are checked and a
 * mismatch is a fatal error naming both shapes. */
#ifndef DT_OPS_H
#define DT_OPS_H

#include "dt_autograd.h"
#include "dt_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

dt_tensor *dt_add(dt_tensor *a, dt_tensor *b);      /* same shapes */
dt_tensor *dt_mul(dt_tensor *a, dt_tensor *b);      /* same shapes */
dt_tensor *dt_relu(dt_tensor *x);
dt_tensor *dt_sigmoid(dt_tensor *x);
dt_tensor *dt_add_relu(dt_tensor *a, dt_tensor *b); /* relu(a + b), one pass */
dt_tensor *dt_sum(dt_tensor *x);                    /* [1] */
dt_tensor *dt_mean(dt_tensor *x);                   /* [1] */
/* Same data, new shape (numel must match); the gradient flows back unchanged. */
dt_tensor *dt_reshape(dt_tensor *x, int ndim, const int64_t *shape);
dt_tensor *dt_flatten2(dt_tensor *x);               /* [N, ...] -> [N, rest] */
/* Channels [c0, c1) of x: [N, C, H, W] -> [N, c1 - c0, H, W] (a copy). */
dt_tensor *dt_slice_channels(dt_tensor *x, int64_t c0, int64_t c1);

/* a [M, K] x b [K, N] -> [M, N] */
dt_tensor *dt_matmul(dt_tensor *a, dt_tensor *b);
/* x [B, in], w [out, in], bias [out] or NULL -> [B, out] = x w^T + bias (PyTorch's Linear) */
dt_tensor *dt_linear(dt_tensor *x, dt_tensor *w, dt_tensor *bias);

/* out[0] = alpha * sum(x[0..n)) on the device of `dev` (deterministic; workspace internal). */
void dt_sum_raw(dt_dev dev, int64_t n, const float *x, float alpha, float *out);

/* Reads a one-element tensor (synchronizes with the device). */
float dt_item(const dt_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
