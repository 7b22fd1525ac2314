/* sm90_gemm_lab: the Hopper GEMM engine (sm90_gemm.cuh) validated, then timed beside cuBLAS -
 * as a plain GEMM (dense A by TMA) on squares and on every conv-as-GEMM shape of ResNet-18/-50,
 * and as the implicit-GEMM conv forward (A gathered by im2col on the fly) on the same convs.
 *
 * Validation per variant and shape, on fresh random inputs (never zeros): y poisoned with NaN,
 * then y against cuBLAS's fp32-output product of the same bf16 operands (for the conv: of the
 * materialized im2col matrix): every element written, max |y - ref| <= 2^-7 |ref| + 2^-9 max|ref|
 * (one bf16 rounding plus fp32 reassociation), and 64 sampled elements of ref against a float64
 * host sum (which checks the reference and the layouts themselves).
 * Timing: CUDA events around each launch, median of REPS after WARM.
 *
 *   build/sm90_gemm_lab [--quick] [--shapes squares,r18,r50] [--batch N] [--csv FILE]
 *
 * Needs an sm_90 GPU (H100/H200) and a build for sm_90a (the Makefile's lab rule). */
#include <stdlib.h>

#include "core/dt_common.h"
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <vector>

#include "ops/conv/conv_sm90.h"
#include "ops/conv/sm90_gemm.cuh"

using dt_sm90::bf16;

#define CK(call)                                                                                                        \
    do {                                                                                                                \
        cudaError_t e_ = (call);                                                                                        \
        if (e_ != cudaSuccess) {                                                                                        \
            fprintf(stderr, "sm90_gemm_lab: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));       \
            exit(1);                                                                                                    \
        }                                                                                                               \
    } while (0)
#define CKB(call)                                                                                                       \
    do {                                                                                                                \
        cublasStatus_t s_ = (call);                                                                                     \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                              \
            fprintf(stderr, "sm90_gemm_lab: %s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, #call, (int)s_);        \
            exit(1);                                                                                                    \
        }                                                                                                               \
    } while (0)

static int g_reps = 20, g_warm = 3;
static bool g_wgrad = true;
static const char *g_only;    /* --only NAME: just this shape */
static const char *g_variant; /* --variant NAME: just this variant (and cuBLAS) */
static FILE *g_csv;
static cublasHandle_t g_blas;
static int g_sms;

/* ---- tensor maps: the library's (ops/conv/conv_sm90.cu), so that the lab reads its operands
 * exactly as the library's passes do */

static CUtensorMap map_rows(const bf16 *a, int rows, int cols, int box_rows) {
    return dt_sm90_map_rows(a, rows, cols, box_rows);
}

/* x [N, H, W, C] for a conv of kernel KH x KW, stride S, padding P, dilation 1 */
static CUtensorMap map_im2col(const bf16 *x, int N, int H, int W, int C, int KH, int KW, int S, int P, int pixels) {
    const dt_conv_geom g = {KH, KW, S, S, P, P, 1, 1};
    return dt_sm90_map_im2col(x, N, H, W, C, g, dt_conv_out_size(H, KH, S, P, 1), dt_conv_out_size(W, KW, S, P, 1), pixels);
}

/* ---- the problem */

struct conv_shape {
    const char *name;
    int N, C, H, W, Cout, KH, KW, S, P;
};

struct problem {
    std::string name;
    int M, N, K;
    bool conv;
    conv_shape cs; /* conv: the convolution (its im2col is A) */
    int Ho, Wo;
};

/* ---- variants */

struct variant {
    const char *name;
    int BM, BN, AP;
    void (*launch)(const problem &, const bf16 *a, const bf16 *b, const bf16 *x, const float *bias, float beta, bf16 *y);
};

template <class CFG>
static void launch_cfg(const problem &pb, const bf16 *a, const bf16 *b, const bf16 *x, const float *bias, float beta,
                       bf16 *y) {
    dt_sm90::gemm_args p = {};
    p.M = pb.M, p.N = pb.N, p.K = pb.K, p.y = y, p.bias = bias, p.beta = beta;
    if (pb.conv) {
        const conv_shape &c = pb.cs;
        p.x = x, p.H = c.H, p.W = c.W, p.C = c.C, p.Ho = pb.Ho, p.Wo = pb.Wo, p.KW = c.KW, p.SH = c.S, p.SW = c.S;
        p.PH = c.P, p.PW = c.P, p.DH = 1, p.DW = 1, p.cblocks = c.C / 64;
    }
    p.tiles_m = (pb.M + CFG::BM - 1) / CFG::BM;
    p.tiles_n = (pb.N + CFG::BN - 1) / CFG::BN;
    static CUtensorMap ma, mb, my;
    static const void *ma_for, *mb_for, *my_for;
    static int ma_key[2], mb_key[2], my_key[2];
    /* maps are re-encoded only when the operand changes (host work kept out of the timings) */
    if (CFG::AP == dt_sm90::A_TMA && (ma_for != a || ma_key[0] != pb.M || ma_key[1] != pb.K)) {
        ma = map_rows(a, pb.M, pb.K, CFG::BM);
        ma_for = a, ma_key[0] = pb.M, ma_key[1] = pb.K;
    }
    if (CFG::AP == dt_sm90::A_TMA_IM2COL && (ma_for != x || ma_key[0] != pb.M || ma_key[1] != pb.K)) {
        const conv_shape &c = pb.cs;
        ma = map_im2col(x, c.N, c.H, c.W, c.C, c.KH, c.KW, c.S, c.P, CFG::BM);
        ma_for = x, ma_key[0] = pb.M, ma_key[1] = pb.K;
    }
    if (mb_for != b || mb_key[0] != pb.N || mb_key[1] != pb.K) {
        mb = map_rows(b, pb.N, pb.K, CFG::BN);
        mb_for = b, mb_key[0] = pb.N, mb_key[1] = pb.K;
    }
    if (CFG::EPI == dt_sm90::EPI_TMA && (my_for != y || my_key[0] != pb.M || my_key[1] != pb.N)) {
        my = map_rows(y, pb.M, pb.N, CFG::WM);
        my_for = y, my_key[0] = pb.M, my_key[1] = pb.N;
    }
    static bool attr;
    if (!attr) {
        CK(cudaFuncSetAttribute(dt_sm90::k_sm90_gemm<CFG>, cudaFuncAttributeMaxDynamicSharedMemorySize, CFG::SMEM));
        attr = true;
    }
    const int grid = std::min(p.tiles_m * p.tiles_n, g_sms);
    dt_sm90::k_sm90_gemm<CFG><<<grid, 384, CFG::SMEM>>>(dt_sm90::a_gathers(CFG::AP) ? mb : ma, mb,
                                                        CFG::EPI == dt_sm90::EPI_TMA ? my : mb, p);
    CK(cudaGetLastError());
}

#define V(bm, bn, st, ap, epi, nm) {nm, bm, bn, dt_sm90::ap, launch_cfg<dt_sm90::tile_cfg<bm, bn, st, dt_sm90::ap, dt_sm90::epi>>}
static const variant g_variants[] = {
    /* dense A by TMA: the mainloop as a plain GEMM; direct stores beside the TMA-store epilogue */
    V(128, 256, 4, A_TMA, EPI_DIRECT, "tma_128x256_d"),
    V(128, 128, 6, A_TMA, EPI_DIRECT, "tma_128x128_d"),
    V(128, 64, 8, A_TMA, EPI_DIRECT, "tma_128x64_d"),
    V(128, 256, 3, A_TMA, EPI_TMA, "tma_128x256"),
    V(256, 128, 3, A_TMA, EPI_TMA, "tma_256x128"),
    V(128, 128, 5, A_TMA, EPI_TMA, "tma_128x128"),
    V(128, 64, 8, A_TMA, EPI_TMA, "tma_128x64"),
    V(256, 64, 4, A_TMA, EPI_TMA, "tma_256x64"),
    /* the implicit GEMM: im2col by the producer's cp.async (any C % 8), by TMA's im2col mode (C % 64) */
    V(256, 64, 5, A_IM2COL, EPI_DIRECT, "im2col_256x64_d"),
    V(256, 64, 4, A_IM2COL, EPI_TMA, "im2col_256x64"),
    V(128, 128, 5, A_IM2COL, EPI_TMA, "im2col_128x128"),
    V(128, 64, 6, A_IM2COL, EPI_TMA, "im2col_128x64"),
    /* the same gather through L1 (cp.async.ca): the stem's windows overlap ~12-fold */
    V(128, 64, 6, A_IM2COL_L1, EPI_TMA, "im2col_l1_128x64"),
    V(256, 64, 4, A_IM2COL_L1, EPI_TMA, "im2col_l1_256x64"),
    V(128, 128, 5, A_IM2COL_L1, EPI_TMA, "im2col_l1_128x128"),
    V(128, 128, 6, A_TMA_IM2COL, EPI_DIRECT, "tmaim2col_128x128_d"),
    V(256, 64, 5, A_TMA_IM2COL, EPI_DIRECT, "tmaim2col_256x64_d"),
    V(128, 256, 3, A_TMA_IM2COL, EPI_TMA, "tmaim2col_128x256"),
    V(256, 128, 3, A_TMA_IM2COL, EPI_TMA, "tmaim2col_256x128"),
    V(128, 128, 5, A_TMA_IM2COL, EPI_TMA, "tmaim2col_128x128"),
    V(128, 64, 8, A_TMA_IM2COL, EPI_TMA, "tmaim2col_128x64"),
    V(256, 64, 4, A_TMA_IM2COL, EPI_TMA, "tmaim2col_256x64"),
};
#undef V

/* ---- device helpers */

__device__ __forceinline__ uint32_t hash32(uint64_t i, uint32_t seed) {
    uint64_t z = i * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (uint32_t)(z ^ (z >> 31));
}
/* uniform in [-1, 1), rounded to bf16 */
__global__ void k_fill(bf16 *a, int64_t n, uint32_t seed) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        a[i] = __float2bfloat16((hash32(i, seed) >> 8) * (2.0f / 16777216.0f) - 1.0f);
}
__global__ void k_fill_f32(float *a, int64_t n, uint32_t seed) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        a[i] = (hash32(i, seed) >> 8) * (2.0f / 16777216.0f) - 1.0f;
}
__global__ void k_poison(bf16 *a, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        a[i] = __ushort_as_bfloat16((unsigned short)0x7FC1);
}
/* the materialized im2col matrix of the conv: a [M, K], k = (r, t, c) */
__global__ void k_im2col(const bf16 *x, bf16 *a, conv_shape c, int Ho, int Wo) {
    const int64_t K = (int64_t)c.KH * c.KW * c.C, total = (int64_t)c.N * Ho * Wo * K;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t m = i / K;
        const int k = (int)(i - m * K);
        const int ch = k % c.C, tap = k / c.C, r = tap / c.KW, t = tap % c.KW;
        const int wo = (int)(m % Wo), ho = (int)(m / Wo % Ho), n = (int)(m / ((int64_t)Wo * Ho));
        const int h = ho * c.S - c.P + r, w = wo * c.S - c.P + t;
        a[i] = (h >= 0 && h < c.H && w >= 0 && w < c.W) ? x[(((int64_t)n * c.H + h) * c.W + w) * c.C + ch]
                                                        : __float2bfloat16(0.0f);
    }
}
/* per row-block maximum error statistics: out[0] = count of bad elements, [1] = unwritten (NaN) */
__global__ void k_compare(const bf16 *y, const float *ref, const float *bias, int64_t M, int N, float ref_max,
                          unsigned long long *out) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < M * N; i += (int64_t)gridDim.x * blockDim.x) {
        const float v = __bfloat162float(y[i]);
        const float r = ref[i] + (bias ? bias[i % N] : 0.0f);
        if (isnan(v)) atomicAdd(&out[1], 1ull);
        else if (fabsf(v - r) > fabsf(r) * (1.0f / 128.0f) + ref_max * (1.0f / 512.0f)) atomicAdd(&out[0], 1ull);
    }
}

/* out = ref + y: what an accumulating launch (beta 1) onto y must produce */
__global__ void k_add_bf16(float *out, const float *ref, const bf16 *y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = ref[i] + __bfloat162float(y[i]);
}

static void fill(bf16 *a, int64_t n, uint32_t seed) { k_fill<<<1024, 256>>>(a, n, seed); CK(cudaGetLastError()); }

/* ref [M, N] fp32 = a [M, K] . b [N, K]^T with cuBLAS (column-major: ref^T = b . a^T) */
static void blas_ref(const bf16 *a, const bf16 *b, float *ref, int M, int N, int K) {
    const float one = 1.0f, zero = 0.0f;
    CKB(cublasGemmEx(g_blas, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, b, CUDA_R_16BF, K, a, CUDA_R_16BF, K, &zero, ref,
                     CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
static void blas_bf16(const bf16 *a, const bf16 *b, bf16 *y, int M, int N, int K) {
    const float one = 1.0f, zero = 0.0f;
    CKB(cublasGemmEx(g_blas, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, b, CUDA_R_16BF, K, a, CUDA_R_16BF, K, &zero, y,
                     CUDA_R_16BF, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

template <class F> static double time_ms(F f) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < g_warm; i++) f();
    std::vector<float> t;
    for (int i = 0; i < g_reps; i++) {
        CK(cudaEventRecord(e0));
        f();
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms);
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

static float bf2f(bf16 v) { return __bfloat162float(v); }

/* 64 elements of ref against a float64 host sum of the same bf16 operands */
static bool spot_check(const bf16 *a_d, const bf16 *b_d, const float *ref_d, int M, int N, int K) {
    std::vector<bf16> arow(K), brow(K);
    uint32_t s = 12345;
    for (int q = 0; q < 64; q++) {
        s = s * 1664525u + 1013904223u;
        const int m = (int)(s % (uint32_t)M);
        s = s * 1664525u + 1013904223u;
        const int n = (int)(s % (uint32_t)N);
        CK(cudaMemcpy(arow.data(), a_d + (int64_t)m * K, K * sizeof(bf16), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(brow.data(), b_d + (int64_t)n * K, K * sizeof(bf16), cudaMemcpyDeviceToHost));
        double sum = 0, mag = 0;
        for (int k = 0; k < K; k++) {
            sum += (double)bf2f(arow[k]) * bf2f(brow[k]);
            mag += fabs((double)bf2f(arow[k]) * bf2f(brow[k]));
        }
        float r;
        CK(cudaMemcpy(&r, ref_d + (int64_t)m * N + n, sizeof(float), cudaMemcpyDeviceToHost));
        if (fabs(r - sum) > 1e-5 * mag + 1e-6) {
            fprintf(stderr, "  reference check failed at (%d, %d): cuBLAS %g, float64 %g\n", m, n, r, sum);
            return false;
        }
    }
    return true;
}

static int g_failures;

__global__ void k_compare_f32(const float *y, const float *ref, int64_t n, float ref_max, unsigned long long *out) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float v = y[i], r = ref[i];
        if (isnan(v)) atomicAdd(&out[1], 1ull);
        else if (fabsf(v - r) > fabsf(r) * 2e-3f + ref_max * 2e-4f) atomicAdd(&out[0], 1ull);
    }
}
__global__ void k_poison_f32(float *a, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        a[i] = __int_as_float(0x7FC00001);
}

struct wgrad_variant {
    const char *name;
    int CO, BN; /* the CTA's output channels and columns of K */
    void (*launch)(const problem &, const bf16 *dy, const bf16 *x, float *dw, float *part, int splits, float beta);
    int (*model_splits)(int tiles, int steps, int64_t out_elems);
};

template <class CFG> static int model_splits(int tiles, int steps, int64_t out_elems) {
    return dt_sm90::sm90_wgrad_splits(tiles, steps, out_elems, g_sms, CFG::STEP_US);
}

template <class CFG>
static void launch_wgrad(const problem &pb, const bf16 *dy, const bf16 *x, float *dw, float *part, int splits,
                         float beta) {
    const conv_shape &c = pb.cs;
    dt_sm90::wgrad_args p = {};
    p.M = pb.M, p.Cout = pb.N, p.K = pb.K, p.dw = dw, p.beta = beta, p.part = part;
    p.C = c.C, p.Ho = pb.Ho, p.Wo = pb.Wo, p.KW = c.KW, p.SH = p.SW = c.S, p.PH = p.PW = c.P, p.DH = p.DW = 1;
    p.tiles_co = (pb.N + CFG::CO - 1) / CFG::CO, p.tiles_k = (pb.K + CFG::BN - 1) / CFG::BN;
    const int total = (pb.M + 63) / 64;
    p.steps_per_split = (total + splits - 1) / splits;
    p.splits = (total + p.steps_per_split - 1) / p.steps_per_split;
    static CUtensorMap mdy, mx;
    static const void *dy_for, *x_for;
    static int key[2];
    if (dy_for != dy || x_for != x || key[0] != pb.M || key[1] != pb.K) {
        mdy = map_rows(dy, pb.M, pb.N, 64);
        mx = map_im2col(x, c.N, c.H, c.W, c.C, c.KH, c.KW, c.S, c.P, 64);
        dy_for = dy, x_for = x, key[0] = pb.M, key[1] = pb.K;
    }
    static bool attr;
    if (!attr) {
        CK(cudaFuncSetAttribute(dt_sm90::k_sm90_wgrad<CFG>, cudaFuncAttributeMaxDynamicSharedMemorySize, CFG::SMEM));
        attr = true;
    }
    dt_sm90::k_sm90_wgrad<CFG><<<dim3(p.tiles_co * p.tiles_k, p.splits), 384, CFG::SMEM>>>(mdy, mx, p);
    CK(cudaGetLastError());
    if (p.splits > 1) {
        dt_sm90::k_sm90_wgrad_reduce<<<1024, 256>>>(dw, part, (int64_t)pb.N * pb.K, p.splits, beta);
        CK(cudaGetLastError());
    }
}

#define WV(co, bnc, st, nm) {nm, co, co == 64 ? 2 * bnc : bnc, launch_wgrad<dt_sm90::wgrad_cfg<co, bnc, st>>, \
                             model_splits<dt_sm90::wgrad_cfg<co, bnc, st>>}
static const wgrad_variant g_wgrad_variants[] = {
    WV(64, 64, 8, "wgrad_64x128"),
    WV(64, 128, 5, "wgrad_64x256"),
    WV(128, 128, 6, "wgrad_128x128"),
    WV(128, 256, 4, "wgrad_128x256"),
};
#undef WV

/* dw [Cout, K] = dy^T . A (the materialized im2col a), beside cuBLAS's fp32 product */
static void run_wgrad(const problem &pb, const bf16 *a, const bf16 *x, uint32_t seed) {
    const int64_t M = pb.M, Cout = pb.N, K = pb.K;
    bf16 *dy;
    float *ref, *dw, *part;
    unsigned long long *cnt;
    CK(cudaMalloc(&dy, M * Cout * sizeof(bf16)));
    CK(cudaMalloc(&ref, Cout * K * sizeof(float)));
    CK(cudaMalloc(&dw, Cout * K * sizeof(float)));
    /* the most splits any variant below asks for: 2 CTAs a multiprocessor over the fewest tiles */
    const int64_t fewest_tiles = (Cout + 127) / 128 * ((K + 255) / 256);
    const int64_t max_splits = (2 * g_sms + fewest_tiles - 1) / fewest_tiles;
    CK(cudaMalloc(&part, max_splits * Cout * K * sizeof(float)));
    CK(cudaMalloc(&cnt, 2 * sizeof(unsigned long long)));
    fill(dy, M * Cout, seed + 5);
    const float one = 1.0f, zero = 0.0f;
    /* column-major: ref^T [K x Cout] = a^T (K x M) . dy (M x Cout) */
    auto blas = [&] {
        CKB(cublasGemmEx(g_blas, CUBLAS_OP_N, CUBLAS_OP_T, (int)K, (int)Cout, (int)M, &one, a, CUDA_R_16BF, (int)K, dy,
                         CUDA_R_16BF, (int)Cout, &zero, ref, CUDA_R_32F, (int)K, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    blas();
    CK(cudaDeviceSynchronize());
    float ref_max = 0;
    {
        std::vector<float> h(Cout * K);
        CK(cudaMemcpy(h.data(), ref, h.size() * sizeof(float), cudaMemcpyDeviceToHost));
        for (float v : h) ref_max = std::max(ref_max, fabsf(v));
    }
    const double flop = 2.0 * M * Cout * K;
    const double t_blas = time_ms(blas);
    printf("  wgrad %-12s cuBLAS %8.4f ms %6.1f TFLOP/s\n", "", t_blas, flop / t_blas * 1e-9);
    if (g_csv) fprintf(g_csv, "%s_wgrad,%d,%d,%d,cublas,%.5f,1\n", pb.name.c_str(), pb.N, pb.K, pb.M, t_blas);
    for (const wgrad_variant &v : g_wgrad_variants) {
        if (g_variant && strcmp(g_variant, v.name)) continue;
        if (v.CO > Cout) continue;
        const int tiles = (int)((Cout + v.CO - 1) / v.CO * ((K + v.BN - 1) / v.BN));
        const int total = (int)((M + 63) / 64);
        /* the library's choice (the cost model) beside one wave rounded down and up */
        const int split_opts[] = {
            v.model_splits(tiles, total, Cout * K),
            std::max(1, std::min(total, g_sms / tiles)),
            std::max(1, std::min(total, (g_sms + tiles - 1) / tiles)),
        };
        for (int splits : split_opts) {
            if (splits == 1 && tiles < g_sms / 4 && total > 64) continue; /* a handful of CTAs: not worth timing */
            k_poison_f32<<<1024, 256>>>(dw, Cout * K);
            CK(cudaMemset(cnt, 0, 2 * sizeof(unsigned long long)));
            v.launch(pb, dy, x, dw, part, splits, 0.0f);
            CK(cudaDeviceSynchronize());
            k_compare_f32<<<1024, 256>>>(dw, ref, Cout * K, ref_max, cnt);
            unsigned long long h[2];
            CK(cudaMemcpy(h, cnt, sizeof h, cudaMemcpyDeviceToHost));
            const bool ok = h[0] == 0 && h[1] == 0;
            if (!ok) g_failures++;
            const double t = ok ? time_ms([&] { v.launch(pb, dy, x, dw, part, splits, 0.0f); }) : 0.0;
            printf("  %-14s split %4d %s %8.4f ms %6.1f TFLOP/s  %5.2fx cuBLAS", v.name, splits, ok ? "ok  " : "FAIL", t,
                   ok ? flop / t * 1e-9 : 0.0, ok ? t / t_blas : 0.0);
            if (!ok) printf("   (%llu elements off, %llu unwritten)", h[0], h[1]);
            printf("\n");
            if (g_csv)
                fprintf(g_csv, "%s_wgrad,%d,%d,%d,%s_s%d,%.5f,%d\n", pb.name.c_str(), pb.N, pb.K, pb.M, v.name, splits, t, ok);
        }
    }
    CK(cudaFree(dy));
    CK(cudaFree(ref));
    CK(cudaFree(dw));
    CK(cudaFree(part));
    CK(cudaFree(cnt));
}

static void run_problem(const problem &pb, bool all_variants) {
    const int64_t M = pb.M, N = pb.N, K = pb.K;
    bf16 *a, *b, *y, *x = NULL;
    float *ref, *ref_beta, *bias;
    unsigned long long *cnt;
    CK(cudaMalloc(&a, M * K * sizeof(bf16)));
    CK(cudaMalloc(&b, N * K * sizeof(bf16)));
    CK(cudaMalloc(&y, M * N * sizeof(bf16)));
    CK(cudaMalloc(&ref, M * N * sizeof(float)));
    CK(cudaMalloc(&ref_beta, M * N * sizeof(float)));
    CK(cudaMalloc(&bias, N * sizeof(float)));
    CK(cudaMalloc(&cnt, 2 * sizeof(unsigned long long)));
    static uint32_t seed = 1;
    seed += 7;
    fill(b, N * K, seed + 1);
    k_fill_f32<<<64, 256>>>(bias, N, seed + 2);
    if (pb.conv) {
        const conv_shape &c = pb.cs;
        const int64_t nx = (int64_t)c.N * c.H * c.W * c.C;
        CK(cudaMalloc(&x, nx * sizeof(bf16)));
        fill(x, nx, seed);
        k_im2col<<<4096, 256>>>(x, a, c, pb.Ho, pb.Wo);
        CK(cudaGetLastError());
    } else {
        fill(a, M * K, seed);
    }
    blas_ref(a, b, ref, pb.M, pb.N, pb.K);
    CK(cudaDeviceSynchronize());
    const bool ref_ok = spot_check(a, b, ref, pb.M, pb.N, pb.K);
    if (!ref_ok) g_failures++;
    /* max |ref| for the absolute part of the bound */
    float ref_max = 0;
    {
        std::vector<float> h(std::min<int64_t>(M * N, 1 << 20));
        CK(cudaMemcpy(h.data(), ref, h.size() * sizeof(float), cudaMemcpyDeviceToHost));
        for (float v : h) ref_max = std::max(ref_max, fabsf(v));
    }
    const double flop = 2.0 * M * N * K;
    const double t_blas = time_ms([&] { blas_bf16(a, b, y, pb.M, pb.N, pb.K); });
    printf("%-22s M %7d N %5d K %5d   cuBLAS %8.4f ms %6.1f TFLOP/s\n", pb.name.c_str(), pb.M, pb.N, pb.K, t_blas,
           flop / t_blas * 1e-9);
    if (g_csv) fprintf(g_csv, "%s,%d,%d,%d,cublas,%.5f,1\n", pb.name.c_str(), pb.M, pb.N, pb.K, t_blas);
    double best = 1e30;
    const char *best_name = "-";
    for (const variant &v : g_variants) {
        if (g_variant && strcmp(g_variant, v.name)) continue;
        if (v.AP != dt_sm90::A_TMA && !pb.conv) continue;
        if (v.AP == dt_sm90::A_TMA_IM2COL && pb.cs.C % 64) continue; /* a k-slice must be one tap */
        /* a tile wider than N only computes padding: skip unless asked for all */
        if (!all_variants && v.BN > 64 && v.BN / 2 >= pb.N) continue;
        /* the implicit GEMMs add a bias; the TMA-store ones with odd N also accumulate (beta 1) onto
         * a y of known values, which the reference adds back */
        const float *bb = (v.AP != dt_sm90::A_TMA) ? bias : NULL;
        const float beta = (v.AP != dt_sm90::A_TMA && pb.name.compare(0, 3, "odd") == 0) ? 1.0f : 0.0f;
        if (beta != 0.0f) {
            fill(y, M * N, seed + 3);
            k_add_bf16<<<1024, 256>>>(ref_beta, ref, y, M * N);
        } else {
            k_poison<<<1024, 256>>>(y, M * N);
        }
        CK(cudaMemset(cnt, 0, 2 * sizeof(unsigned long long)));
        v.launch(pb, a, b, x, bb, beta, y);
        CK(cudaDeviceSynchronize());
        k_compare<<<1024, 256>>>(y, beta != 0.0f ? ref_beta : ref, bb, M, pb.N, ref_max, cnt);
        unsigned long long h[2];
        CK(cudaMemcpy(h, cnt, sizeof h, cudaMemcpyDeviceToHost));
        const bool ok = h[0] == 0 && h[1] == 0;
        if (!ok) g_failures++;
        const double t = ok ? time_ms([&] { v.launch(pb, a, b, x, bb, 0.0f, y); }) : 0.0;
        printf("  %-18s %s %8.4f ms %6.1f TFLOP/s  %5.2fx cuBLAS", v.name, ok ? "ok  " : "FAIL", t,
               ok ? flop / t * 1e-9 : 0.0, ok ? t / t_blas : 0.0);
        if (!ok) printf("   (%llu elements off, %llu unwritten)", h[0], h[1]);
        printf("\n");
        if (g_csv) fprintf(g_csv, "%s,%d,%d,%d,%s,%.5f,%d\n", pb.name.c_str(), pb.M, pb.N, pb.K, v.name, t, ok);
        if (ok && t < best) best = t, best_name = v.name;
    }
    printf("  best %-18s %8.4f ms = %.2fx cuBLAS\n", best_name, best, best / t_blas);
    if (pb.conv && pb.cs.C % 64 == 0 && g_wgrad) run_wgrad(pb, a, x, seed);
    fflush(stdout);
    CK(cudaFree(a));
    CK(cudaFree(b));
    CK(cudaFree(y));
    CK(cudaFree(ref));
    CK(cudaFree(ref_beta));
    CK(cudaFree(bias));
    CK(cudaFree(cnt));
    if (x) CK(cudaFree(x));
}

static problem conv_problem(const conv_shape &c) {
    problem p;
    p.name = c.name;
    p.conv = true;
    p.cs = c;
    p.Ho = (c.H + 2 * c.P - c.KH) / c.S + 1;
    p.Wo = (c.W + 2 * c.P - c.KW) / c.S + 1;
    p.M = c.N * p.Ho * p.Wo;
    p.N = c.Cout;
    p.K = c.KH * c.KW * c.C;
    return p;
}

int main(int argc, char **argv) {
    dt_set_fatal_handler(exit); /* a failure outside a guarded call ends this program (dt_common.h) */
    std::string shapes = "squares,r18,r50";
    bool quick = false, all = false;
    int batch = 64;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = true;
        else if (!strcmp(argv[i], "--all")) all = true;
        else if (!strcmp(argv[i], "--no-wgrad")) g_wgrad = false;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) g_only = argv[++i];
        else if (!strcmp(argv[i], "--variant") && i + 1 < argc) g_variant = argv[++i];
        else if (!strcmp(argv[i], "--shapes") && i + 1 < argc) shapes = argv[++i];
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--csv") && i + 1 < argc) {
            g_csv = fopen(argv[++i], "w");
            if (!g_csv) {
                perror(argv[i]);
                return 1;
            }
            fprintf(g_csv, "shape,M,N,K,variant,ms,valid\n");
        } else {
            fprintf(stderr,
                    "usage: %s [--quick] [--all] [--no-wgrad] [--shapes squares,r18,r50,odd] [--only SHAPE] [--variant NAME] "
                    "[--batch N] [--csv FILE]\n",
                    argv[0]);
            return 2;
        }
    }
    if (batch < 1) {
        fprintf(stderr, "sm90_gemm_lab: --batch must be >= 1\n");
        return 2;
    }
    if (quick) g_reps = 7, g_warm = 2;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major != 9) {
        fprintf(stderr, "sm90_gemm_lab: needs a Hopper GPU (sm_90), found %s (sm_%d%d)\n", prop.name, prop.major,
                prop.minor);
        return 1;
    }
    g_sms = prop.multiProcessorCount;
    CKB(cublasCreate(&g_blas));
    printf("sm90_gemm_lab on %s (%d SMs), batch %d, median of %d\n", prop.name, g_sms, batch, g_reps);

    if (shapes.find("squares") != std::string::npos) {
        const int sq[] = {8192, 4096};
        for (int s : sq) {
            problem p;
            p.name = "square" + std::to_string(s);
            p.M = p.N = p.K = s;
            p.conv = false;
            run_problem(p, all);
        }
        problem odd;
        odd.name = "odd_1000x200x136";
        odd.M = 1000, odd.N = 200, odd.K = 136, odd.conv = false;
        run_problem(odd, true);
    }
    const int B = batch;
    std::vector<conv_shape> convs;
    if (shapes.find("r18") != std::string::npos) {
        const conv_shape r18[] = {
            {"stem7x7_c8", B, 8, 224, 224, 64, 7, 7, 2, 3}, {"l1", B, 64, 56, 56, 64, 3, 3, 1, 1},
            {"l2a", B, 64, 56, 56, 128, 3, 3, 2, 1},        {"l2", B, 128, 28, 28, 128, 3, 3, 1, 1},
            {"l2ds", B, 64, 56, 56, 128, 1, 1, 2, 0},       {"l3a", B, 128, 28, 28, 256, 3, 3, 2, 1},
            {"l3", B, 256, 14, 14, 256, 3, 3, 1, 1},        {"l3ds", B, 128, 28, 28, 256, 1, 1, 2, 0},
            {"l4a", B, 256, 14, 14, 512, 3, 3, 2, 1},       {"l4", B, 512, 7, 7, 512, 3, 3, 1, 1},
            {"l4ds", B, 256, 14, 14, 512, 1, 1, 2, 0},
        };
        convs.insert(convs.end(), r18, r18 + sizeof r18 / sizeof r18[0]);
    }
    if (shapes.find("r50") != std::string::npos) {
        const conv_shape r50[] = {
            {"r50_l1_1x1_64_64", B, 64, 56, 56, 64, 1, 1, 1, 0},     {"r50_l1_1x1_64_256", B, 64, 56, 56, 256, 1, 1, 1, 0},
            {"r50_l1_1x1_256_64", B, 256, 56, 56, 64, 1, 1, 1, 0},   {"r50_l2_1x1_256_128", B, 256, 56, 56, 128, 1, 1, 1, 0},
            {"r50_l2_3x3_128_s2", B, 128, 56, 56, 128, 3, 3, 2, 1},  {"r50_l2_1x1_128_512", B, 128, 28, 28, 512, 1, 1, 1, 0},
            {"r50_l2_1x1_512_128", B, 512, 28, 28, 128, 1, 1, 1, 0}, {"r50_l3_1x1_512_256", B, 512, 28, 28, 256, 1, 1, 1, 0},
            {"r50_l3_3x3_256", B, 256, 14, 14, 256, 3, 3, 1, 1},     {"r50_l3_1x1_256_1024", B, 256, 14, 14, 1024, 1, 1, 1, 0},
            {"r50_l3_1x1_1024_256", B, 1024, 14, 14, 256, 1, 1, 1, 0}, {"r50_l4_1x1_1024_512", B, 1024, 14, 14, 512, 1, 1, 1, 0},
            {"r50_l4_3x3_512", B, 512, 7, 7, 512, 3, 3, 1, 1},       {"r50_l4_1x1_512_2048", B, 512, 7, 7, 2048, 1, 1, 1, 0},
            {"r50_l4_1x1_2048_512", B, 2048, 7, 7, 512, 1, 1, 1, 0},
        };
        convs.insert(convs.end(), r50, r50 + sizeof r50 / sizeof r50[0]);
    }
    if (shapes.find("odd") != std::string::npos) {
        /* tails everywhere: M, N not multiples of a tile, C not of 64, a prime batch */
        const conv_shape odd[] = {{"odd_b3_c24_13x11_n40", 3, 24, 13, 11, 40, 3, 3, 1, 1},
                                  {"odd_b1_c8_9x9_n8_s2", 1, 8, 9, 9, 8, 3, 3, 2, 1},
                                  {"odd_b5_c72_7x7_n200", 5, 72, 7, 7, 200, 3, 3, 1, 1},
                                  {"odd_b7_c64_15x9_n72_s2", 7, 64, 15, 9, 72, 3, 3, 2, 1},
                                  {"odd_b2_c128_10x13_n136", 2, 128, 10, 13, 136, 3, 3, 1, 1},
                                  {"odd_b3_c64_9x7_n64_1x1s2", 3, 64, 9, 7, 64, 1, 1, 2, 0}};
        convs.insert(convs.end(), odd, odd + sizeof odd / sizeof odd[0]);
    }
    for (const conv_shape &c : convs)
        if (!g_only || !strcmp(g_only, c.name)) run_problem(conv_problem(c), all || shapes.find("odd") != std::string::npos);
    if (g_csv) fclose(g_csv);
    printf("%s: %d failure(s)\n", g_failures ? "FAILED" : "all valid", g_failures);
    return g_failures ? 1 : 0;
}
