/* elementwise.h: pointwise ops on n contiguous elements - layout-agnostic: an NHWC tensor is
 * as contiguous as an NCHW one, and the ops map element i to element i.
 *
 * The ops' kernels, per dtype (f32, bf16; CPU twin _cpu and CUDA _cuda, the entries of the op
 * tables in ops/pointwise/pointwise_op.c): every value is widened to fp32, computed in fp32 and rounded once
 * on the store, by the twin exactly as by the kernel (same expressions; only expf may differ by
 * an ulp between libm and CUDA). The CUDA kernels move 16-byte packs (4 f32, 8 bf16) when every
 * pointer is 16-byte aligned, one element otherwise; each element is read and written once.
 * The gradient entries follow dt_autograd.h's convention: dx = v when beta == 0 (dx is not
 * read), dx + v when beta == 1. */
#ifndef DT_K_ELEMENTWISE_H
#define DT_K_ELEMENTWISE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* y = f(a, b): add, mul, add_relu (relu(a + b), the residual join) */
typedef void dt_ew_binary_fn(int64_t n, const void *a, const void *b, void *y);
/* y = f(x): relu, relu6 (min(max(x, 0), 6): MobileNetV2's activation), sigmoid */
typedef void dt_ew_unary_fn(int64_t n, const void *x, void *y);
/* dx (beta) f(u, dy): mul_bwd (u: the other factor; dy*u), relu_bwd (u = y; dy*(y > 0)),
 * relu6_bwd (u = y; dy*(0 < y < 6): PyTorch's hardtanh backward, 0 at both kinks),
 * sigmoid_bwd (u = y; dy*y*(1-y)) */
typedef void dt_ew_grad_fn(int64_t n, const void *u, const void *dy, float beta, void *dx);
/* dx (beta) g: a gradient passed on unchanged (add, reshape, slice) */
typedef void dt_ew_accumulate_fn(int64_t n, const void *g, float beta, void *dx);
/* dx (beta) alpha*s[0], s one fp32 on the kernel's device: the gradient of a sum */
typedef void dt_ew_broadcast_fn(int64_t n, const float *s, float alpha, float beta, void *dx);

#define DT_DECL_ELEMENTWISE(sfx)                      \
    dt_ew_binary_fn dt_add_##sfx;                     \
    dt_ew_binary_fn dt_mul_##sfx;                     \
    dt_ew_binary_fn dt_add_relu_fwd_##sfx;            \
    dt_ew_unary_fn dt_relu_fwd_##sfx;                 \
    dt_ew_unary_fn dt_relu6_fwd_##sfx;                \
    dt_ew_unary_fn dt_sigmoid_fwd_##sfx;              \
    dt_ew_grad_fn dt_mul_bwd_##sfx;                   \
    dt_ew_grad_fn dt_relu_bwd_##sfx;                  \
    dt_ew_grad_fn dt_relu6_bwd_##sfx;                 \
    dt_ew_grad_fn dt_sigmoid_bwd_##sfx;               \
    dt_ew_accumulate_fn dt_accumulate_##sfx;          \
    dt_ew_broadcast_fn dt_broadcast_scalar_##sfx;

DT_DECL_ELEMENTWISE(f32_cpu)
DT_DECL_ELEMENTWISE(bf16_cpu)
DT_DECL_ELEMENTWISE(f32_cuda)
DT_DECL_ELEMENTWISE(bf16_cuda)

/* The f32 fill the other kernel families' callers use for workspaces (the shared op table
 * dt_fill_k, ops/pointwise/dt_shared_kernels.h). */
#define DT_DECL_F32_HELPERS(sfx) void dt_fill_##sfx(int64_t n, float v, float *x);

DT_DECL_F32_HELPERS(cpu)
DT_DECL_F32_HELPERS(cuda)

#ifdef __cplusplus
}
#endif
#endif
