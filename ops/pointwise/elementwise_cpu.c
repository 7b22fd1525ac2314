/* CPU twins of elementwise.h: the plain loops, with the CUDA kernels' expressions (fp32 math
 * between an exact widen and one rounding per store). */
#include <math.h>

#include "core/dt_dtype.h"
#include "ops/pointwise/elementwise.h"

/* y[i] = EXPR(a, b) for i < n, a and b the fp32 values of the operands at i */
#define MAP2(t, n, A, B, Y, EXPR)                                                        \
    for (int64_t i = 0; i < (n); i++) {                                                  \
        float a = dt_elem_ld(A, t, i), b = dt_elem_ld(B, t, i);                          \
        dt_elem_st(Y, t, i, (EXPR));                                                     \
    }
#define MAP1(t, n, X, Y, EXPR)                                                           \
    for (int64_t i = 0; i < (n); i++) {                                                  \
        float a = dt_elem_ld(X, t, i);                                                   \
        dt_elem_st(Y, t, i, (EXPR));                                                     \
    }
/* dx[i] (beta) EXPR(u, g), u and g the values of the saved operand and of dy at i */
#define GRAD(t, n, U, DY, beta, DX, EXPR)                                                \
    for (int64_t i = 0; i < (n); i++) {                                                  \
        float u = dt_elem_ld(U, t, i), g = dt_elem_ld(DY, t, i);                         \
        dt_elem_st_beta(DX, t, i, (EXPR), beta);                                         \
    }

static void add(dt_dtype t, int64_t n, const void *x, const void *y, void *out) { MAP2(t, n, x, y, out, a + b) }
static void mul(dt_dtype t, int64_t n, const void *x, const void *y, void *out) { MAP2(t, n, x, y, out, a * b) }
static void add_relu(dt_dtype t, int64_t n, const void *x, const void *y, void *out) {
    MAP2(t, n, x, y, out, a + b > 0.0f ? a + b : 0.0f)
}
static void relu(dt_dtype t, int64_t n, const void *x, void *out) { MAP1(t, n, x, out, a > 0.0f ? a : 0.0f) }
static void relu6(dt_dtype t, int64_t n, const void *x, void *out) {
    MAP1(t, n, x, out, a > 0.0f ? (a < 6.0f ? a : 6.0f) : 0.0f)
}
static void sigmoid(dt_dtype t, int64_t n, const void *x, void *out) { MAP1(t, n, x, out, 1.0f / (1.0f + expf(-a))) }
static void mul_bwd(dt_dtype t, int64_t n, const void *b, const void *dy, float beta, void *dx) {
    GRAD(t, n, b, dy, beta, dx, g * u)
}
static void relu_bwd(dt_dtype t, int64_t n, const void *y, const void *dy, float beta, void *dx) {
    GRAD(t, n, y, dy, beta, dx, u > 0.0f ? g : 0.0f)
}
static void relu6_bwd(dt_dtype t, int64_t n, const void *y, const void *dy, float beta, void *dx) {
    GRAD(t, n, y, dy, beta, dx, u > 0.0f && u < 6.0f ? g : 0.0f)
}
static void sigmoid_bwd(dt_dtype t, int64_t n, const void *y, const void *dy, float beta, void *dx) {
    GRAD(t, n, y, dy, beta, dx, g * u * (1.0f - u))
}
static void accumulate(dt_dtype t, int64_t n, const void *g, float beta, void *dx) {
    for (int64_t i = 0; i < n; i++) dt_elem_st_beta(dx, t, i, dt_elem_ld(g, t, i), beta);
}
static void broadcast_scalar(dt_dtype t, int64_t n, const float *s, float alpha, float beta, void *dx) {
    float v = alpha * s[0];
    for (int64_t i = 0; i < n; i++) dt_elem_st_beta(dx, t, i, v, beta);
}

#define DT_EW_TWINS(name, dtype)                                                                                       \
    void dt_add_##name##_cpu(int64_t n, const void *a, const void *b, void *y) { add(dtype, n, a, b, y); }             \
    void dt_mul_##name##_cpu(int64_t n, const void *a, const void *b, void *y) { mul(dtype, n, a, b, y); }             \
    void dt_add_relu_fwd_##name##_cpu(int64_t n, const void *a, const void *b, void *y) { add_relu(dtype, n, a, b, y); } \
    void dt_relu_fwd_##name##_cpu(int64_t n, const void *x, void *y) { relu(dtype, n, x, y); }                         \
    void dt_relu6_fwd_##name##_cpu(int64_t n, const void *x, void *y) { relu6(dtype, n, x, y); }                       \
    void dt_sigmoid_fwd_##name##_cpu(int64_t n, const void *x, void *y) { sigmoid(dtype, n, x, y); }                   \
    void dt_mul_bwd_##name##_cpu(int64_t n, const void *u, const void *dy, float beta, void *dx) {                     \
        mul_bwd(dtype, n, u, dy, beta, dx);                                                                            \
    }                                                                                                                  \
    void dt_relu_bwd_##name##_cpu(int64_t n, const void *y, const void *dy, float beta, void *dx) {                    \
        relu_bwd(dtype, n, y, dy, beta, dx);                                                                           \
    }                                                                                                                  \
    void dt_relu6_bwd_##name##_cpu(int64_t n, const void *y, const void *dy, float beta, void *dx) {                   \
        relu6_bwd(dtype, n, y, dy, beta, dx);                                                                          \
    }                                                                                                                  \
    void dt_sigmoid_bwd_##name##_cpu(int64_t n, const void *y, const void *dy, float beta, void *dx) {                 \
        sigmoid_bwd(dtype, n, y, dy, beta, dx);                                                                        \
    }                                                                                                                  \
    void dt_accumulate_##name##_cpu(int64_t n, const void *g, float beta, void *dx) { accumulate(dtype, n, g, beta, dx); } \
    void dt_broadcast_scalar_##name##_cpu(int64_t n, const float *s, float alpha, float beta, void *dx) {              \
        broadcast_scalar(dtype, n, s, alpha, beta, dx);                                                                \
    }

DT_EW_TWINS(f32, DT_F32)
DT_EW_TWINS(bf16, DT_BF16)

/* ---- f32 helpers ---- */

void dt_fill_cpu(int64_t n, float v, float *x) { for (int64_t i = 0; i < n; i++) x[i] = v; }
