/* gemm.h on cuBLAS. Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, so we
 * pass B first with the same transpose flags and swap M and N. */
#include "dt_kernel_util.cuh"
#include "gemm.h"

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
    DT_CUBLAS(cublasSgemm(dt_cublas(), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                          (int)N, (int)M, (int)K, &alpha, B, (int)ldb, A, (int)lda, &beta, C, (int)ldc));
}

extern "C" void dt_gemm_batched_cuda(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                                     const float *A, int64_t lda, int64_t sA, const float *B,
                                     int64_t ldb, int64_t sB, float beta, float *C, int64_t ldc,
                                     int64_t sC, int64_t count) {
    if (M <= 0 || N <= 0 || count <= 0) return;
    check_dims(M, N, K, lda, ldb, ldc);
    DT_CUBLAS(cublasSgemmStridedBatched(dt_cublas(), tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                        ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K, &alpha,
                                        B, (int)ldb, sB, A, (int)lda, sA, &beta, C, (int)ldc, sC,
                                        (int)count));
}

extern "C" void dt_gemm_bf16_cuda(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const dt_bf16 *A,
                                  int64_t lda, const dt_bf16 *B, int64_t ldb, float beta, void *C, int c_bf16,
                                  int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    check_dims(M, N, K, lda, ldb, ldc);
    /* fp32 compute with bf16 inputs: Hopper's bf16 tensor cores (products exact in fp32) */
    DT_CUBLAS(cublasGemmEx(dt_cublas(), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M,
                           (int)K, &alpha, B, CUDA_R_16BF, (int)ldb, A, CUDA_R_16BF, (int)lda, &beta, C,
                           c_bf16 ? CUDA_R_16BF : CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
