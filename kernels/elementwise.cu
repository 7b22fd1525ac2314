/* CUDA versions of elementwise.h: one grid-stride kernel each, memory-bound. */
#include "dt_kernel_util.cuh"
#include "elementwise.h"

namespace {

__global__ void k_fill(int64_t n, float v, float *x) { DT_GRID_STRIDE(i, n) x[i] = v; }
__global__ void k_add(int64_t n, const float *a, const float *b, float *y) { DT_GRID_STRIDE(i, n) y[i] = a[i] + b[i]; }
__global__ void k_mul(int64_t n, const float *a, const float *b, float *y) { DT_GRID_STRIDE(i, n) y[i] = a[i] * b[i]; }
__global__ void k_axpby(int64_t n, float alpha, const float *x, float beta, float *y) {
    DT_GRID_STRIDE(i, n) y[i] = beta == 0.0f ? alpha * x[i] : beta * y[i] + alpha * x[i];
}
__global__ void k_mul_bwd(int64_t n, const float *dy, const float *b, float beta, float *da) {
    DT_GRID_STRIDE(i, n) dt_store_beta(&da[i], dy[i] * b[i], beta);
}
__global__ void k_relu_fwd(int64_t n, const float *x, float *y) { DT_GRID_STRIDE(i, n) y[i] = fmaxf(x[i], 0.0f); }
__global__ void k_relu_bwd(int64_t n, const float *y, const float *dy, float beta, float *dx) {
    DT_GRID_STRIDE(i, n) dt_store_beta(&dx[i], y[i] > 0.0f ? dy[i] : 0.0f, beta);
}
__global__ void k_sigmoid_fwd(int64_t n, const float *x, float *y) {
    DT_GRID_STRIDE(i, n) y[i] = 1.0f / (1.0f + expf(-x[i]));
}
__global__ void k_sigmoid_bwd(int64_t n, const float *y, const float *dy, float beta, float *dx) {
    DT_GRID_STRIDE(i, n) dt_store_beta(&dx[i], dy[i] * y[i] * (1.0f - y[i]), beta);
}
__global__ void k_add_relu(int64_t n, const float *a, const float *b, float *y) {
    DT_GRID_STRIDE(i, n) y[i] = fmaxf(a[i] + b[i], 0.0f);
}
__global__ void k_broadcast_scalar(int64_t n, const float *s, float alpha, float beta, float *dx) {
    float v = alpha * s[0];
    DT_GRID_STRIDE(i, n) dt_store_beta(&dx[i], v, beta);
}

__global__ void k_scale_shift(int64_t n, float a, float b, float *x) { DT_GRID_STRIDE(i, n) x[i] = a * x[i] + b; }

}  // namespace

#define LAUNCH(kernel, n, ...)                                                    \
    do {                                                                          \
        if ((n) <= 0) return;                                                     \
        kernel<<<dt_grid_for((n), 256), 256, 0, dt_stream()>>>((n), __VA_ARGS__); \
        DT_CHECK_LAUNCH();                                                        \
    } while (0)

extern "C" {
void dt_fill_cuda(int64_t n, float v, float *x) { LAUNCH(k_fill, n, v, x); }
void dt_add_cuda(int64_t n, const float *a, const float *b, float *y) { LAUNCH(k_add, n, a, b, y); }
void dt_mul_cuda(int64_t n, const float *a, const float *b, float *y) { LAUNCH(k_mul, n, a, b, y); }
void dt_axpby_cuda(int64_t n, float alpha, const float *x, float beta, float *y) { LAUNCH(k_axpby, n, alpha, x, beta, y); }
void dt_mul_bwd_cuda(int64_t n, const float *dy, const float *b, float beta, float *da) { LAUNCH(k_mul_bwd, n, dy, b, beta, da); }
void dt_relu_fwd_cuda(int64_t n, const float *x, float *y) { LAUNCH(k_relu_fwd, n, x, y); }
void dt_relu_bwd_cuda(int64_t n, const float *y, const float *dy, float beta, float *dx) { LAUNCH(k_relu_bwd, n, y, dy, beta, dx); }
void dt_sigmoid_fwd_cuda(int64_t n, const float *x, float *y) { LAUNCH(k_sigmoid_fwd, n, x, y); }
void dt_sigmoid_bwd_cuda(int64_t n, const float *y, const float *dy, float beta, float *dx) { LAUNCH(k_sigmoid_bwd, n, y, dy, beta, dx); }
void dt_add_relu_fwd_cuda(int64_t n, const float *a, const float *b, float *y) { LAUNCH(k_add_relu, n, a, b, y); }
void dt_scale_shift_cuda(int64_t n, float a, float b, float *x) { LAUNCH(k_scale_shift, n, a, b, x); }
void dt_broadcast_scalar_cuda(int64_t n, const float *s, float alpha, float beta, float *dx) { LAUNCH(k_broadcast_scalar, n, s, alpha, beta, dx); }
}
