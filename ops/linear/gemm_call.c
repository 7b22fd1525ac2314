/* The products' op table (dt_gemm_call.h). */
#include "ops/linear/dt_gemm_call.h"

#include "core/dt_kernel.h"
#include "ops/linear/gemm.h"

typedef void gemm_fn(dt_math math, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                     int64_t lda, const void *B, int64_t ldb, float beta, void *C, dt_dtype c_dtype, int64_t ldc);
DT_OP_TABLE(gemm_k, "gemm", gemm_fn,
            DT_TWINS(gemm_k, dt_gemm_f32, DT_F32, DT_ANY_LAYOUT), DT_TWINS(gemm_k, dt_gemm_bf16, DT_BF16, DT_ANY_LAYOUT))

void dt_gemm_call(dt_dev dev, dt_dtype dtype, dt_math math, int ta, int tb, int64_t M, int64_t N, int64_t K,
                  float alpha, const void *A, int64_t lda, const void *B, int64_t ldb, float beta, void *C,
                  dt_dtype c_dtype, int64_t ldc) {
    DT_PICK(gemm_k, dev, dtype, DT_NCHW)(math, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, c_dtype, ldc);
}
