/* elementwise.h: pointwise ops on contiguous float arrays of n elements.
 * Backward entry points follow the gradient convention of dt_autograd.h: the result is
 * written when beta == 0 and added when beta == 1. Every op has a CPU twin (_cpu) and a CUDA
 * version (_cuda) with the same arguments; device pointers for _cuda. */
#ifndef DT_K_ELEMENTWISE_H
#define DT_K_ELEMENTWISE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DT_DECL_ELEMENTWISE(sfx)                                                             \
    void dt_fill_##sfx(int64_t n, float v, float *x);                                        \
    void dt_add_##sfx(int64_t n, const float *a, const float *b, float *y);                  \
    void dt_mul_##sfx(int64_t n, const float *a, const float *b, float *y);                  \
    /* y = beta*y + alpha*x */                                                               \
    void dt_axpby_##sfx(int64_t n, float alpha, const float *x, float beta, float *y);       \
    /* da = beta*da + dy*b */                                                                \
    void dt_mul_bwd_##sfx(int64_t n, const float *dy, const float *b, float beta, float *da); \
    void dt_relu_fwd_##sfx(int64_t n, const float *x, float *y);                             \
    /* dx = beta*dx + dy*(y > 0) */                                                          \
    void dt_relu_bwd_##sfx(int64_t n, const float *y, const float *dy, float beta, float *dx); \
    void dt_sigmoid_fwd_##sfx(int64_t n, const float *x, float *y);                          \
    /* dx = beta*dx + dy*y*(1-y) */                                                          \
    void dt_sigmoid_bwd_##sfx(int64_t n, const float *y, const float *dy, float beta, float *dx); \
    /* y = relu(a + b): the residual join of a ResNet block */                               \
    void dt_add_relu_fwd_##sfx(int64_t n, const float *a, const float *b, float *y);         \
    /* x = a*x + b */                                                                          \
    void dt_scale_shift_##sfx(int64_t n, float a, float b, float *x);                         \
    /* dx = beta*dx + alpha*s, s a single float in the same memory space (scalar broadcast) */ \
    void dt_broadcast_scalar_##sfx(int64_t n, const float *s, float alpha, float beta, float *dx);

DT_DECL_ELEMENTWISE(cpu)
DT_DECL_ELEMENTWISE(cuda)

#ifdef __cplusplus
}
#endif
#endif
