/* The GEMM ops' cases (dt_opcase.h): linear, x [B, in] w^T + bias, in f32 (strict products) and
 * bf16 (the weight's bf16 working copy, fp32 sums; the weight's gradient in its f32 master), with
 * and without bias, batch 1, a prime batch, sizes off and on multiples of 8, ResNet's head; and
 * matmul a [M, K] b [K, N] of two activations. */
#include "tests/dt_opcase.h"
#include "ops/dt_ops.h"
#include "tests/dt_test.h"

typedef struct {
    int matmul; /* else linear */
    int bias;
} gemm_arg;

static dt_tensor *build(const dt_opcase *c, dt_tensor **in, void *state) {
    (void)state;
    const gemm_arg *a = c->arg;
    if (a->matmul) return dt_matmul(in[0], in[1], DT_MATH_FP32);
    return dt_linear(in[0], in[1], a->bias ? in[2] : NULL, DT_MATH_FP32);
}

/* gradcheck: 0 (every mode) or -1 (too large for finite differences: parity and perf only) */
#define LINEAR(label, b, i, o, with_bias, wstd, gradcheck)                                                          \
    {.name = label, .ops = {"gemm"}, .n_in = 3, .grad_tol = gradcheck,                                         \
     .in = {{2, {b, i}, DT_IN_ACT, 1.0f, 1}, {2, {o, i}, DT_IN_WEIGHT, wstd, 1}, {1, {o}, DT_IN_F32, 1.0f, with_bias}}, \
     .build = build, .arg = &(const gemm_arg){.bias = with_bias}}
#define MATMUL(label, m, k, n, gradcheck)                                                                           \
    {.name = label, .ops = {"gemm"}, .n_in = 2, .grad_tol = gradcheck,                                         \
     .in = {{2, {m, k}, DT_IN_ACT, 1.0f, 1}, {2, {k, n}, DT_IN_ACT, 0.3f, 1}}, .build = build,                      \
     .arg = &(const gemm_arg){.matmul = 1}}

static const dt_opcase linear_cases[] = {
    LINEAR("linear 5x7 -> 4, bias", 5, 7, 4, 1, 0.4f, 0),
    LINEAR("linear batch 1, 13 -> 11, no bias", 1, 13, 11, 0, 0.3f, 0),
    LINEAR("linear prime batch 7, 33 -> 10, bias", 7, 33, 10, 1, 0.2f, 0),
    LINEAR("linear 16x64 -> 24 (multiples of 8), bias", 16, 64, 24, 1, 0.15f, 0),
    LINEAR("linear ResNet head 64x512 -> 1000, bias", 64, 512, 1000, 1, 0.05f, -1),
    MATMUL("matmul 5x7 . 7x3", 5, 7, 3, 0),
    MATMUL("matmul 67x129 . 129x45", 67, 129, 45, -1),
};
DT_OPCASES(linear, linear_cases)
