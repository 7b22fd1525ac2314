/* gemm.h: matrix products in row-major terms.
 *   C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C
 * op(A) = A (stored [M,K], lda >= K) or, with ta = 1, A^T (A stored [K,M], lda >= M);
 * likewise B. beta == 0 overwrites C even if it holds NaN.
 * The CUDA version calls cuBLAS (column-major) by computing C^T = op(B)^T op(A)^T, which is
 * the same memory read the other way round. The CPU twin is a blocked, threaded loop. */
#ifndef DT_K_GEMM_H
#define DT_K_GEMM_H

#include <stdint.h>

#include "core/dt_dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

void dt_gemm_cpu(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                 int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
/* The CPU kernel dt_gemm_cpu runs: "base", "avx2" (with FMA) or "avx512" (gemm_cpu.c), the
 * best this CPU has unless DT_GEMM_ISA names a lower one. dt_gemm_cpu_use switches to the one
 * named (the tests run each) and returns 0, changing nothing, when the CPU lacks it. */
const char *dt_gemm_cpu_isa(void);
int dt_gemm_cpu_use(const char *isa);
void dt_gemm_cuda(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                  int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
/* count products C_i = op(A_i) op(B_i) with A_i = A + i*sA etc. (cuBLAS strided batched). */
void dt_gemm_batched_cuda(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                          const float *A, int64_t lda, int64_t sA, const float *B, int64_t ldb,
                          int64_t sB, float beta, float *C, int64_t ldc, int64_t sC, int64_t count);

/* The ops' products, one signature for their op table (ops/linear/gemm_call.c): A and B of the
 * entry's dtype, C fp32 (c_dtype DT_F32) or - bf16 entries only - rounded once to bf16
 * (DT_BF16). f32: strict fp32, or TF32 tensor cores when math is DT_MATH_TF32 (the CPU computes
 * fp32 either way). bf16: products and sums in fp32 (Hopper's bf16 tensor cores); the CPU twin
 * widens A and B to fp32 and runs dt_gemm_cpu - the same arithmetic up to the order of the
 * fp32 sums. Same conventions as dt_gemm otherwise. */
#define DT_DECL_GEMM_TYPED(name)                                                                                 \
    void name(dt_math math, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const void *A, int64_t lda, \
              const void *B, int64_t ldb, float beta, void *C, dt_dtype c_dtype, int64_t ldc);
DT_DECL_GEMM_TYPED(dt_gemm_f32_cpu)
DT_DECL_GEMM_TYPED(dt_gemm_f32_cuda)
DT_DECL_GEMM_TYPED(dt_gemm_bf16_cpu)
DT_DECL_GEMM_TYPED(dt_gemm_bf16_cuda)

#ifdef __cplusplus
}
#endif
#endif
