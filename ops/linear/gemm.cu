/* gemm.h on cuBLAS. Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, so we
 * pass B first with the same transpose flags and swap M and N. */
#include "core/dt_kernel_util.cuh"
#include "ops/linear/gemm.h"

static void check_dims(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc) {
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX || lda > INT32_MAX || ldb > INT32_MAX || ldc > INT32_MAX)
        dt_fatal("gemm: a dimension exceeds 2^31 (M=%lld N=%lld K=%lld); split the call",
                 (long long)M, (long long)N, (long long)K);
}

extern "C" void dt_gemm_cuda(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                             const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                             float *C, int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    check_dims(M, N, K, lda, ldb, ldc);
    DT_CUBLAS(cublasSetMathMode(dt_cublas(), CUBLAS_PEDANTIC_MATH));
    DT_CUBLAS(cublasSgemm(dt_cublas(), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                          (int)N, (int)M, (int)K, &alpha, B, (int)ldb, A, (int)lda, &beta, C, (int)ldc));
}

extern "C" void dt_gemm_batched_cuda(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                                     const float *A, int64_t lda, int64_t sA, const float *B,
                                     int64_t ldb, int64_t sB, float beta, float *C, int64_t ldc,
                                     int64_t sC, int64_t count) {
    if (M <= 0 || N <= 0 || count <= 0) return;
    check_dims(M, N, K, lda, ldb, ldc);
    DT_CUBLAS(cublasSetMathMode(dt_cublas(), CUBLAS_PEDANTIC_MATH));
    DT_CUBLAS(cublasSgemmStridedBatched(dt_cublas(), tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                        ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K, &alpha,
                                        B, (int)ldb, sB, A, (int)lda, sA, &beta, C, (int)ldc, sC,
                                        (int)count));
}

/* The math mode is the handle's, so it is set for each call: strict fp32 never meets a TF32
 * mode left by another op (setting it is host-side only). */
extern "C" void dt_gemm_f32_cuda(dt_math math, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                                 const void *A, int64_t lda, const void *B, int64_t ldb, float beta, void *C,
                                 dt_dtype c_dtype, int64_t ldc) {
    if (c_dtype != DT_F32) dt_fatal("gemm (f32): the result must be f32, not %s", dt_dtype_name(c_dtype));
    if (M <= 0 || N <= 0) return;
    check_dims(M, N, K, lda, ldb, ldc);
    DT_CUBLAS(cublasSetMathMode(dt_cublas(), math == DT_MATH_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH));
    DT_CUBLAS(cublasSgemm(dt_cublas(), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M,
                          (int)K, &alpha, (const float *)B, (int)ldb, (const float *)A, (int)lda, &beta, (float *)C,
                          (int)ldc));
}

extern "C" void dt_gemm_bf16_cuda(dt_math math, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                                  const void *A, int64_t lda, const void *B, int64_t ldb, float beta, void *C,
                                  dt_dtype c_dtype, int64_t ldc) {
    (void)math;
    if (c_dtype != DT_F32 && c_dtype != DT_BF16) dt_fatal("gemm (bf16): the result must be f32 or bf16");
    if (M <= 0 || N <= 0) return;
    check_dims(M, N, K, lda, ldb, ldc);
    /* fp32 compute with bf16 inputs: Hopper's bf16 tensor cores (products exact in fp32) */
    DT_CUBLAS(cublasSetMathMode(dt_cublas(), CUBLAS_DEFAULT_MATH));
    DT_CUBLAS(cublasGemmEx(dt_cublas(), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M,
                           (int)K, &alpha, B, CUDA_R_16BF, (int)ldb, A, CUDA_R_16BF, (int)lda, &beta, C,
                           c_dtype == DT_BF16 ? CUDA_R_16BF : CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT));
}
