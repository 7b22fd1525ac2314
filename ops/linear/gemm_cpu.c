/* CPU twin of gemm.h. Blocked so that a panel of op(B) stays in cache, threaded over rows of
 * C (each row computed by one thread in a fixed order, so results do not depend on the
 * thread count), and with a 4-row register block so the compiler vectorizes the inner loop
 * over columns. Not a BLAS, but fast enough to train small models on the CPU. */
#include <stdlib.h>
#include <string.h>

#include "core/dt_common.h"
#include "core/dt_parallel.h"
#include "ops/linear/gemm.h"

#define KC 256
#define NC 512

typedef struct {
    int ta;
    int64_t M, N, K, kc, nc, pc, jc;
    float alpha, beta;
    const float *A;
    int64_t lda;
    const float *Bp; /* packed panel [kc][nc] */
    float *C;
    int64_t ldc;
} gemm_job;

static inline float a_at(const gemm_job *j, int64_t i, int64_t k) {
    return j->ta ? j->A[k * j->lda + i] : j->A[i * j->lda + k];
}

static void rows_block(void *ctx, int64_t b, int64_t e) {
    const gemm_job *j = ctx;
    float arow[4][KC];
    for (int64_t i0 = b * 4; i0 < e * 4 && i0 < j->M; i0 += 4) {
        int rows = j->M - i0 < 4 ? (int)(j->M - i0) : 4;
        for (int r = 0; r < 4; r++)
            for (int64_t k = 0; k < j->kc; k++)
                arow[r][k] = r < rows ? j->alpha * a_at(j, i0 + r, j->pc + k) : 0.0f;
        float *c[4];
        for (int r = 0; r < 4; r++) c[r] = j->C + (i0 + (r < rows ? r : 0)) * j->ldc + j->jc;
        /* First K panel applies beta (exactly: beta == 0 overwrites). */
        if (j->pc == 0)
            for (int r = 0; r < rows; r++)
                for (int64_t n = 0; n < j->nc; n++) c[r][n] = j->beta == 0.0f ? 0.0f : j->beta * c[r][n];
        if (rows == 4) {
            for (int64_t k = 0; k < j->kc; k++) {
                const float *bk = j->Bp + k * j->nc;
                float a0 = arow[0][k], a1 = arow[1][k], a2 = arow[2][k], a3 = arow[3][k];
                float *c0 = c[0], *c1 = c[1], *c2 = c[2], *c3 = c[3];
                for (int64_t n = 0; n < j->nc; n++) {
                    float bv = bk[n];
                    c0[n] += a0 * bv;
                    c1[n] += a1 * bv;
                    c2[n] += a2 * bv;
                    c3[n] += a3 * bv;
                }
            }
        } else {
            for (int r = 0; r < rows; r++)
                for (int64_t k = 0; k < j->kc; k++) {
                    const float *bk = j->Bp + k * j->nc;
                    float a = arow[r][k];
                    for (int64_t n = 0; n < j->nc; n++) c[r][n] += a * bk[n];
                }
        }
    }
}

void dt_gemm_cpu(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                 int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0 || alpha == 0.0f) {
        for (int64_t i = 0; i < M; i++)
            for (int64_t n = 0; n < N; n++) C[i * ldc + n] = beta == 0.0f ? 0.0f : beta * C[i * ldc + n];
        return;
    }
    float *Bp = dt_xmalloc(sizeof(float) * KC * NC);
    gemm_job j = {.ta = ta, .M = M, .N = N, .K = K, .alpha = alpha, .beta = beta, .A = A, .lda = lda, .Bp = Bp, .C = C, .ldc = ldc};
    for (int64_t jc = 0; jc < N; jc += NC) {
        j.jc = jc;
        j.nc = N - jc < NC ? N - jc : NC;
        for (int64_t pc = 0; pc < K; pc += KC) {
            j.pc = pc;
            j.kc = K - pc < KC ? K - pc : KC;
            for (int64_t k = 0; k < j.kc; k++)
                for (int64_t n = 0; n < j.nc; n++)
                    Bp[k * j.nc + n] = tb ? B[(jc + n) * ldb + pc + k] : B[(pc + k) * ldb + jc + n];
            dt_parallel_for(dt_ceil_div(M, 4), 4, rows_block, &j);
        }
    }
    free(Bp);
}

void dt_gemm_f32_cpu(dt_math math, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                     int64_t lda, const void *B, int64_t ldb, float beta, void *C, dt_dtype c_dtype, int64_t ldc) {
    (void)math; /* the CPU has no TF32: fp32 */
    if (c_dtype != DT_F32) dt_fatal("gemm (f32): the result must be f32, not %s", dt_dtype_name(c_dtype));
    dt_gemm_cpu(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* bf16 twin: widen the operands (their stored extent: rows x ld), the fp32 product, and the
 * one rounding of C when it is bf16. */
static float *widen(const dt_bf16 *x, int64_t rows, int64_t cols, int64_t ld) {
    int64_t n = rows > 0 ? (rows - 1) * ld + cols : 0;
    float *y = dt_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) y[i] = dt_bf16_to_float(x[i]);
    return y;
}

void dt_gemm_bf16_cpu(dt_math math, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                      int64_t lda, const void *B, int64_t ldb, float beta, void *C, dt_dtype c_dtype, int64_t ldc) {
    (void)math;
    if (M <= 0 || N <= 0) return;
    float *a = ta ? widen(A, K, M, lda) : widen(A, M, K, lda);
    float *b = tb ? widen(B, N, K, ldb) : widen(B, K, N, ldb);
    if (c_dtype == DT_F32) {
        dt_gemm_cpu(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, C, ldc);
    } else {
        float *c = beta != 0.0f ? widen(C, M, N, ldc) : dt_xmalloc((size_t)((M - 1) * ldc + N) * sizeof(float));
        dt_gemm_cpu(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
        for (int64_t i = 0; i < M; i++)
            for (int64_t n = 0; n < N; n++) ((dt_bf16 *)C)[i * ldc + n] = dt_bf16_from_float(c[i * ldc + n]);
        free(c);
    }
    free(a);
    free(b);
}
