/* CPU twins of elementwise.h: the plain loops. */
#include <math.h>

#include "elementwise.h"

#define STORE(dst, v, beta) ((dst) = (beta) == 0.0f ? (v) : (dst) + (v))

void dt_fill_cpu(int64_t n, float v, float *x) { for (int64_t i = 0; i < n; i++) x[i] = v; }
void dt_add_cpu(int64_t n, const float *a, const float *b, float *y) { for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i]; }
void dt_mul_cpu(int64_t n, const float *a, const float *b, float *y) { for (int64_t i = 0; i < n; i++) y[i] = a[i] * b[i]; }

void dt_axpby_cpu(int64_t n, float alpha, const float *x, float beta, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = beta == 0.0f ? alpha * x[i] : beta * y[i] + alpha * x[i];
}

void dt_mul_bwd_cpu(int64_t n, const float *dy, const float *b, float beta, float *da) {
    for (int64_t i = 0; i < n; i++) STORE(da[i], dy[i] * b[i], beta);
}

void dt_relu_fwd_cpu(int64_t n, const float *x, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void dt_relu_bwd_cpu(int64_t n, const float *y, const float *dy, float beta, float *dx) {
    for (int64_t i = 0; i < n; i++) STORE(dx[i], y[i] > 0.0f ? dy[i] : 0.0f, beta);
}

void dt_sigmoid_fwd_cpu(int64_t n, const float *x, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = 1.0f / (1.0f + expf(-x[i]));
}

void dt_sigmoid_bwd_cpu(int64_t n, const float *y, const float *dy, float beta, float *dx) {
    for (int64_t i = 0; i < n; i++) STORE(dx[i], dy[i] * y[i] * (1.0f - y[i]), beta);
}

void dt_add_relu_fwd_cpu(int64_t n, const float *a, const float *b, float *y) {
    for (int64_t i = 0; i < n; i++) {
        float v = a[i] + b[i];
        y[i] = v > 0.0f ? v : 0.0f;
    }
}

void dt_broadcast_scalar_cpu(int64_t n, const float *s, float alpha, float beta, float *dx) {
    float v = alpha * s[0];
    for (int64_t i = 0; i < n; i++) STORE(dx[i], v, beta);
}

void dt_scale_shift_cpu(int64_t n, float a, float b, float *x) {
    for (int64_t i = 0; i < n; i++) x[i] = a * x[i] + b;
}
