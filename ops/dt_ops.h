/* dt_ops.h: differentiable tensor ops (pointwise, reductions, reshape, matmul, linear).
 * Each returns a new tensor (in the current scope) and records a tape node when gradients
 * are on and an input requires one. Inputs must be on one device; shapes are checked and a
 * mismatch is a fatal error naming both shapes. */
#ifndef DT_OPS_H
#define DT_OPS_H

#include "core/dt_api.h"

#include "core/dt_autograd.h"
#include "core/dt_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

/* Pointwise ops, any layout, f32 or bf16 (fp32 math, one rounding per element): the inputs
 * share shape, dtype and layout, and the output inherits them. */
dt_tensor *dt_add(dt_tensor *a, dt_tensor *b);
dt_tensor *dt_mul(dt_tensor *a, dt_tensor *b);
dt_tensor *dt_relu(dt_tensor *x);
dt_tensor *dt_relu6(dt_tensor *x);                  /* min(max(x, 0), 6) (MobileNetV2); dx 0 at both kinks */
dt_tensor *dt_sigmoid(dt_tensor *x);
/* Inverted dropout (nn.Dropout): in training, element i is zeroed with probability p (0 <= p < 1)
 * and the others scaled by 1 / (1 - p); the mask is a counter-based hash of (seed, the counter's
 * next value, i), the same on the CPU and the GPU (ops/pointwise/dropout.h). Each call advances
 * `counter` (dt_dropout_counter_new: a device-side int64, so a replayed CUDA graph draws a fresh
 * mask) on the device; the backward recomputes the call's mask. x itself when !training or p == 0. */
dt_tensor *dt_dropout(dt_tensor *x, float p, uint64_t seed, dt_tensor *counter, int training);
dt_tensor *dt_dropout_counter_new(dt_dev dev); /* unscoped, 0; free with dt_tensor_free */
int64_t dt_dropout_counter_value(const dt_tensor *counter); /* its value (copied to the host: tests) */
dt_tensor *dt_add_relu(dt_tensor *a, dt_tensor *b); /* relu(a + b), one pass */
/* f32 or bf16 x -> an f32 [1]: the sum (mean) in double, deterministic. */
dt_tensor *dt_sum(dt_tensor *x);
dt_tensor *dt_mean(dt_tensor *x);
/* Same data, new shape (numel must match); the gradient flows back unchanged. Row-major
 * tensors only, or NHWC ones with H = W = 1 (dt_tensor_view). */
dt_tensor *dt_reshape(dt_tensor *x, int ndim, const int64_t *shape);
dt_tensor *dt_flatten2(dt_tensor *x);               /* [N, ...] -> [N, rest] */
/* Channels [c0, c1) of an f32 NCHW x: [N, C, H, W] -> [N, c1 - c0, H, W] (a copy). */
dt_tensor *dt_slice_channels(dt_tensor *x, int64_t c0, int64_t c1);

/* x in another dtype and/or layout (x itself when it already is): values rounded as dt_dtype.h
 * says; the gradient converts back. */
dt_tensor *dt_convert(dt_tensor *x, dt_dtype dtype, dt_layout layout);

/* The loader's batch into a model's input, on x's device in one pass (ToTensor + Normalize):
 * x [N, H, W, 3] u8 (row-major: RGB interleaved) -> [N, 3, H, W] in dtype and layout (f32 NCHW,
 * f32 NHWC or bf16 NHWC), y(n, c, h, w) = (x(n, h, w, c) / 255 - mean[c]) / std[c] in fp32, bf16
 * rounded once from it. No gradient (the input is integer). mean / std: host arrays (the loader
 * uses dt_imagenet_mean / dt_imagenet_std, data/dt_transform.h). */
dt_tensor *dt_normalize_images(const dt_tensor *x, const float mean[3], const float std[3], dt_dtype dtype,
                               dt_layout layout);

/* a [M, K] x b [K, N] -> [M, N]; both f32 (products strict or TF32 by math) or both bf16
 * (fp32 sums, result rounded to bf16). */
dt_tensor *dt_matmul(dt_tensor *a, dt_tensor *b, dt_math math);
/* x [B, in], w [out, in], bias [out] (f32) or NULL -> [B, out] = x w^T + bias (PyTorch's
 * Linear), in x's dtype: f32, or bf16 with the weight's bf16 working copy. */
dt_tensor *dt_linear(dt_tensor *x, dt_tensor *w, dt_tensor *bias, dt_math math);

/* out[0] = alpha * sum(x[0..n)), x of `dtype` (f32 or bf16), out one fp32, both on `dev`
 * (deterministic; workspace internal). */
void dt_sum_raw(dt_dev dev, dt_dtype dtype, int64_t n, const void *x, float alpha, float *out);

/* Reads a one-element tensor of any dtype (synchronizes with the device). */
float dt_item(const dt_tensor *t);

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
