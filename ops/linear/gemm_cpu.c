/* CPU twin of gemm.h: packed panels and a register-blocked micro-kernel, threaded over tiles of
 * C, with one kernel per instruction set picked at run time.
 *
 * Why it looks like this: the CPU trains the first run (configs/sample_cpu.cfg), whose products
 * are small and lopsided - 16 x 147 x 8192 for a weight gradient, 16 x 8192 x 147 for a forward,
 * 144 x 2048 x 16 for a column gradient. The loop this replaces kept four rows of C in L1 and
 * loaded and stored them for every k (L1-bound, 7-25 GFLOP/s on one core), packed op(B) on the
 * calling thread alone, and threaded over rows of C only, so a product with 16 rows ran on one
 * core. Here an MR x 16 tile of C lives in registers for a whole K panel, both operands are
 * copied into the order the kernel reads them (op(B) read in place when it is already row-major),
 * and the work is split over tiles in both directions.
 *
 * Every element of C is still computed by one thread as beta*C (0 when beta == 0, so NaN in C
 * never reaches the result) plus the products (alpha*a)*b added in increasing k: the result does
 * not depend on the thread count or on the tiling. The kernels differ only in whether a*b + c is
 * rounded once (FMA: the AVX2 and AVX-512 kernels) or twice (the baseline x86-64 / other-arch
 * kernel, bitwise the loop this replaces); a machine always picks the same one, so a run stays
 * bitwise reproducible on it. DT_GEMM_ISA=base|avx2|avx512 forces one (no higher than the CPU
 * has), as dt_gemm_cpu_use does for the tests. */
#include <stdlib.h>
#include <string.h>

#include "core/dt_alloc.h"
#include "core/dt_common.h"
#include "core/dt_parallel.h"
#include "ops/linear/gemm.h"

#define KC 256    /* K panel: an MR x KC slice of A and a KC x NR slice of B stay in L1 */
#define NR 16     /* columns of the register tile: one v16 */
#define MR_MAX 8  /* rows of the register tile, at most (the AVX-512 kernel's) */
#define MB_MAX 96 /* rows of C per work unit: its packed A block (MB x KC) stays in L2 */

/* The micro-kernel's vectors: 4 floats (SSE, any other architecture's compiler splits them as it
 * can), 8 (AVX2) or 16 (AVX-512); the register tile's row is NR floats, NR / width vectors. Each
 * kernel uses its own machine's width, so that the tile is kept in registers (a 16-float vector
 * on AVX2 is split late and lands on the stack). */
typedef float v4 __attribute__((vector_size(4 * sizeof(float))));
typedef float v8 __attribute__((vector_size(8 * sizeof(float))));
typedef float v16 __attribute__((vector_size(16 * sizeof(float))));
/* The same, for loads and stores at any float's address (C and B read in place are not aligned):
 * plain vector accesses, which the compiler keeps in registers where a memcpy went through the
 * stack. */
typedef float v4u __attribute__((vector_size(4 * sizeof(float)), aligned(4), may_alias));
typedef float v8u __attribute__((vector_size(8 * sizeof(float)), aligned(4), may_alias));
typedef float v16u __attribute__((vector_size(16 * sizeof(float)), aligned(4), may_alias));

typedef struct {
    int ta, tb;
    int64_t M, N, K;
    float alpha, beta;
    const float *A;
    int64_t lda;
    const float *B;
    int64_t ldb;
    float *C;
    int64_t ldc;
    int mr;         /* the kernel's tile rows */
    int64_t mb;     /* rows per work unit, a multiple of mr */
    int64_t panels; /* NR-wide column panels of C; a work unit is (row block, panel) */
} gemm_job;

static inline float a_at(const gemm_job *j, int64_t i, int64_t k) {
    return j->ta ? j->A[k * j->lda + i] : j->A[i * j->lda + k];
}

/* alpha * op(A)[i0 .. i0+rows, pc .. pc+kc] as panels of mr rows, k-major within a panel
 * ([panel][k][r]); rows past M are zeros. */
static inline __attribute__((always_inline)) void pack_a(const gemm_job *j, int mr, int64_t i0, int64_t rows,
                                                         int64_t pc, int64_t kc, float *ap) {
    for (int64_t p = 0; p < rows; p += mr, ap += kc * mr)
        for (int r = 0; r < mr; r++) {
            if (p + r >= rows) {
                for (int64_t k = 0; k < kc; k++) ap[k * mr + r] = 0.0f;
            } else if (j->ta) {
                for (int64_t k = 0; k < kc; k++) ap[k * mr + r] = j->alpha * a_at(j, i0 + p + r, pc + k);
            } else {
                const float *src = j->A + (i0 + p + r) * j->lda + pc;
                for (int64_t k = 0; k < kc; k++) ap[k * mr + r] = j->alpha * src[k];
            }
        }
}

/* op(B)[pc .. pc+kc, n0 .. n0+cols] as one NR-wide panel ([k][c]), columns past N zeros.
 * Returns the panel and its row stride: B itself when it is row-major and the panel whole. */
static inline const float *panel_b(const gemm_job *j, int64_t n0, int64_t cols, int64_t pc, int64_t kc, float *bp,
                                   int64_t *stride) {
    if (!j->tb && cols == NR) {
        *stride = j->ldb;
        return j->B + pc * j->ldb + n0;
    }
    *stride = NR;
    if (j->tb) {
        for (int64_t c = 0; c < NR; c++) {
            const float *src = j->B + (n0 + c) * j->ldb + pc;
            if (c < cols)
                for (int64_t k = 0; k < kc; k++) bp[k * NR + c] = src[k];
            else
                for (int64_t k = 0; k < kc; k++) bp[k * NR + c] = 0.0f;
        }
    } else {
        for (int64_t k = 0; k < kc; k++)
            for (int64_t c = 0; c < NR; c++) bp[k * NR + c] = c < cols ? j->B[(pc + k) * j->ldb + n0 + c] : 0.0f;
    }
    return bp;
}

/* C tile [rows x cols] (at most mr x NR) = (first panel: beta * C, else C) + ap . bp over kc.
 * The tile is in registers for the whole panel; a tile at C's edge goes through a local copy.
 * One definition per vector type VT (a C macro standing in for a template). */
#define DEFINE_MICRO(NAME, VT, VTU)                                                                                \
    static inline __attribute__((always_inline)) void NAME(int mr, int64_t kc, const float *restrict ap,       \
                                                           const float *restrict bp, int64_t bs, float *c,      \
                                                           int64_t ldc, int rows, int cols, int first, float beta) { \
        enum { NV = NR / (sizeof(VT) / sizeof(float)) };                                                       \
        VT acc[MR_MAX][NV];                                                                                    \
        float edge[MR_MAX][NR];                                                                                \
        int whole = rows == mr && cols == NR;                                                                  \
        float *t = whole ? c : &edge[0][0];                                                                    \
        int64_t ldt = whole ? ldc : NR;                                                                        \
        if (!whole)                                                                                            \
            for (int r = 0; r < mr; r++)                                                                       \
                for (int n = 0; n < NR; n++) edge[r][n] = r < rows && n < cols ? c[r * ldc + n] : 0.0f;        \
        for (int r = 0; r < mr; r++)                                                                           \
            for (int v = 0; v < NV; v++) {                                                                     \
                if (first && beta == 0.0f) {                                                                   \
                    acc[r][v] = (VT){0};                                                                       \
                } else {                                                                                       \
                    acc[r][v] = *(const VTU *)(t + r * ldt + v * (NR / NV));                                   \
                    if (first) acc[r][v] *= beta;                                                              \
                }                                                                                              \
            }                                                                                                  \
        for (int64_t k = 0; k < kc; k++) {                                                                     \
            VT b[NV];                                                                                          \
            for (int v = 0; v < NV; v++) b[v] = *(const VTU *)(bp + k * bs + v * (NR / NV));                   \
            const float *a = ap + k * mr;                                                                      \
            for (int r = 0; r < mr; r++)                                                                       \
                for (int v = 0; v < NV; v++) acc[r][v] += a[r] * b[v];                                         \
        }                                                                                                      \
        for (int r = 0; r < mr; r++)                                                                           \
            for (int v = 0; v < NV; v++) *(VTU *)(t + r * ldt + v * (NR / NV)) = acc[r][v];                   \
        if (!whole)                                                                                            \
            for (int r = 0; r < rows; r++)                                                                     \
                for (int n = 0; n < cols; n++) c[r * ldc + n] = edge[r][n];                                    \
    }
DEFINE_MICRO(micro4, v4, v4u)
DEFINE_MICRO(micro8, v8, v8u)
DEFINE_MICRO(micro16, v16, v16u)

/* Work units [u0, u1): unit u is row block u / panels, column panel u % panels. A thread's units
 * are consecutive, so it packs each row block's A once per K panel for all its panels. */
static inline __attribute__((always_inline)) void units_body(const gemm_job *j, int mr, int vw, int64_t u0,
                                                             int64_t u1) {
    float *ap = NULL, *bp = NULL;
    if (posix_memalign((void **)&ap, 64, sizeof(float) * j->mb * KC) || posix_memalign((void **)&bp, 64, sizeof(float) * KC * NR))
        dt_fatal("gemm (cpu): out of host memory for the packed panels");
    for (int64_t u = u0; u < u1;) {
        int64_t rb = u / j->panels, q0 = u % j->panels;
        int64_t q1 = (rb + 1) * j->panels <= u1 ? j->panels : u1 - rb * j->panels;
        int64_t i0 = rb * j->mb, rows = j->M - i0 < j->mb ? j->M - i0 : j->mb;
        for (int64_t pc = 0; pc < j->K; pc += KC) {
            int64_t kc = j->K - pc < KC ? j->K - pc : KC;
            pack_a(j, mr, i0, rows, pc, kc, ap);
            for (int64_t q = q0; q < q1; q++) {
                int64_t n0 = q * NR, cols = j->N - n0 < NR ? j->N - n0 : NR, bs;
                const float *b = panel_b(j, n0, cols, pc, kc, bp, &bs);
                for (int64_t p = 0; p < rows; p += mr) {
                    float *c = j->C + (i0 + p) * j->ldc + n0;
                    int tr = (int)(rows - p < mr ? rows - p : mr);
                    if (vw == 16) micro16(mr, kc, ap + p * kc, b, bs, c, j->ldc, tr, (int)cols, pc == 0, j->beta);
                    else if (vw == 8) micro8(mr, kc, ap + p * kc, b, bs, c, j->ldc, tr, (int)cols, pc == 0, j->beta);
                    else micro4(mr, kc, ap + p * kc, b, bs, c, j->ldc, tr, (int)cols, pc == 0, j->beta);
                }
            }
        }
        u = (rb + 1) * j->panels;
    }
    dt_dev_free(DT_CPU, ap);
    dt_dev_free(DT_CPU, bp);
}

/* One instance of the body per instruction set: the same source, compiled for each. */
static void units_base(void *ctx, int64_t b, int64_t e) { units_body(ctx, 2, 4, b, e); }
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma"))) static void units_avx2(void *ctx, int64_t b, int64_t e) { units_body(ctx, 4, 8, b, e); }
__attribute__((target("avx512f"))) static void units_avx512(void *ctx, int64_t b, int64_t e) { units_body(ctx, 8, 16, b, e); }
#define DT_GEMM_X86 1
#endif

typedef struct {
    const char *name;
    dt_range_fn fn;
    int mr;
} gemm_kernel;

static const gemm_kernel k_kernels[] = {
    {"base", units_base, 2},
#ifdef DT_GEMM_X86
    {"avx2", units_avx2, 4},
    {"avx512", units_avx512, 8},
#endif
};
enum { N_KERNELS = sizeof k_kernels / sizeof k_kernels[0] };

static int cpu_has(int k) {
#ifdef DT_GEMM_X86
    __builtin_cpu_init();
    if (k == 1) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (k == 2) return __builtin_cpu_supports("avx512f");
#endif
    return k == 0;
}

static int g_kernel = -1; /* index into k_kernels, chosen on the first product */

int dt_gemm_cpu_use(const char *isa) {
    for (int k = 0; k < N_KERNELS; k++)
        if (!strcmp(isa, k_kernels[k].name)) {
            if (!cpu_has(k)) return 0;
            g_kernel = k;
            return 1;
        }
    return 0;
}

const char *dt_gemm_cpu_isa(void) {
    if (g_kernel < 0) {
        int best = 0;
        for (int k = 1; k < N_KERNELS; k++)
            if (cpu_has(k)) best = k;
        const char *want = getenv("DT_GEMM_ISA");
        if (want && *want) {
            int k = 0;
            while (k < N_KERNELS && strcmp(want, k_kernels[k].name)) k++;
            if (k == N_KERNELS) dt_fatal("DT_GEMM_ISA=%s: not one of base, avx2, avx512", want);
            if (!cpu_has(k)) dt_fatal("DT_GEMM_ISA=%s: this CPU has no %s", want, want);
            best = k;
        }
        g_kernel = best;
    }
    return k_kernels[g_kernel].name;
}

void dt_gemm_cpu(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                 int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0 || alpha == 0.0f) {
        for (int64_t i = 0; i < M; i++)
            for (int64_t n = 0; n < N; n++) C[i * ldc + n] = beta == 0.0f ? 0.0f : beta * C[i * ldc + n];
        return;
    }
    dt_gemm_cpu_isa();
    const gemm_kernel *kern = &k_kernels[g_kernel];
    int nt = dt_parallel_threads();
    int64_t panels = dt_ceil_div(N, NR), row_tiles = dt_ceil_div(M, kern->mr);
    /* Row blocks: as few as MB_MAX allows, but enough that there are two units per thread when
     * C has few panels (a 128 x 32 product has 2); equal in size, whole tiles. */
    int64_t blocks = dt_ceil_div(M, MB_MAX), want = dt_ceil_div(2 * nt, panels);
    if (blocks < want) blocks = want;
    if (blocks > row_tiles) blocks = row_tiles;
    int64_t mb = dt_ceil_div(row_tiles, blocks) * kern->mr;
    gemm_job j = {.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .alpha = alpha, .beta = beta, .A = A, .lda = lda,
                  .B = B, .ldb = ldb, .C = C, .ldc = ldc, .mr = kern->mr, .mb = mb, .panels = panels};
    int64_t units = dt_ceil_div(M, mb) * panels;
    /* A thread's share is worth the hand-off from about 64 K multiply-adds up. */
    int64_t per_unit = mb * NR * K, grain = per_unit >= 65536 ? 1 : dt_ceil_div(65536, per_unit);
    dt_parallel_for(units, grain, kern->fn, &j);
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
    float *y = dt_dev_alloc(DT_CPU, (size_t)(n > 0 ? n : 1) * sizeof(float));
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
        float *c = beta != 0.0f ? widen(C, M, N, ldc) : dt_dev_alloc(DT_CPU, (size_t)((M - 1) * ldc + N) * sizeof(float));
        dt_gemm_cpu(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
        for (int64_t i = 0; i < M; i++)
            for (int64_t n = 0; n < N; n++) ((dt_bf16 *)C)[i * ldc + n] = dt_bf16_from_float(c[i * ldc + n]);
        dt_dev_free(DT_CPU, c);
    }
    dt_dev_free(DT_CPU, a);
    dt_dev_free(DT_CPU, b);
}
