/* The convolution lab (issue 20): implicit-GEMM tensor-core convolutions in bf16 channels last,
 * in all three directions - forward (fprop), input gradient (dgrad), weight gradient (wgrad) -
 * next to the library's im2col + cuBLAS path. Same
 * habit as deform_lab.cu: every variant is validated on fresh random inputs against a CPU
 * reference (double, from the same bf16 values) and against the library's path, then timed;
 * only winners move into kernels/. First run on the H200 (fprop): docs/conv.md and
 * docs/PERF.md section 13.
 *
 * The problem, shapes on every buffer:
 *   x [N, H, W, C]        bf16 NHWC            (C % 8 == 0: the stem's C = 3 is padded to 8
 *   w [Cout, kh, kw, C]   bf16 (NHWC weight)    with zero channels in x and w, see PadC below)
 *   y [N, Ho, Wo, Cout]   bf16 NHWC (or fp32), fp32 accumulation, one rounding at the end
 *   dy [N, Ho, Wo, Cout], dx [N, H, W, C]   bf16 (dgrad);   dw [Cout, kh, kw, C] fp32 (wgrad)
 * fprop's GEMM: M = N*Ho*Wo, Ngemm = Cout, K = kh*kw*C (k in the order (r, t, c), w's storage),
 *   A[m][k] = x[n][ho*sh - ph + r*dh][wo*sw - pw + t*dw][c] (0 outside), B[k][co] = w[co][r][t][c],
 *   y[m][co] = sum_k A[m][k] B[k][co]   (y [M, Cout] row-major IS the NHWC output).
 * dgrad's GEMM: M = N*H*W, Ngemm = C, K = kh*kw*Cout, A = dy gathered through the mirrored taps,
 *   B^T = w with its channel axes swapped (gemm_view below). Both run one kernel, k_igemm, whose
 *   loaders differ only in the address of a tap.
 * wgrad's GEMM: dw [Cout, K] = dy^T . A, the reduction over M = N*Ho*Wo split into fp32 partials
 *   summed in split order (deterministic); k_igemm_wgrad reads both operands m-major and
 *   transposes them into the mma fragments with ldmatrix.trans.
 *
 * Variants (VARIANTS[] below):
 *   ref_cublas         deftc's own dt_conv2d on GPU tensors (bf16 NHWC: im2col + cublasGemmEx);
 *                      the number to beat and a second reference. On the stem it runs the real
 *                      C = 3 problem (what the library does today), the others the padded one.
 *   igemm_128x128      implicit GEMM, mma.sync m16n8k16 bf16 -> fp32, CTA tile 128x128x32,
 *                      8 warps (2 x 4) of 64x32, 4-stage cp.async pipeline, ldmatrix.x4
 *   igemm_64x64        the same with a 64x64x32 tile, 4 warps (2 x 2) of 32x32 (small late layers)
 *   igemm_1x1_128x128  the 128 tile specialized for 1x1 stride-1 unpadded convs (A = x itself:
 *                      no tap arithmetic, one pointer per row)
 *   igemm_128x128_f32  the 128 tile writing fp32 y (no rounding; the accumulators as they are)
 *   igemm_128x128_splitk  the 128 tile with split-K for the shapes with too few tiles to fill
 *                      the GPU: fp32 partials per split, summed in split order, rounded once
 *   ref_cublas_dgrad   the library's dgrad: dcol = dy . w (cuBLAS, bf16), then col2im_nhwc
 *   igemm_128x128_dgrad, igemm_64x64_dgrad   dgrad on the implicit GEMM (stride 2: the taps
 *                      that no output reads are zero-filled, not skipped - a first version)
 *   ref_cublas_wgrad   the library's wgrad: im2col_nhwc, then dw = dy^T . col (cuBLAS, fp32 out)
 *   igemm_128x128_wgrad, igemm_64x128_wgrad   wgrad tiles of 128 (64: the 64-channel layers)
 *                      output channels x 128 k, split over M to fill two waves
 * The split-K, dgrad and wgrad variants were written after the first run and have not run yet.
 *
 *   build/conv_lab [--batch 64] [--reps 20] [--shapes l1,l4,r50,odd,...] [--csv FILE] [--quick]
 *                  [--seed S] [--skip-time] [--pass fprop,dgrad,wgrad]   (make lab; GPU only)
 *   --shapes: names, or the groups r18, r50, odd, all (default all); --quick: 5 reps after 1
 *   warm-up, 1024 samples a shape, and (without --shapes) r18,odd only; --seed: the inputs of
 *   an earlier run (the default seed is the time; it is printed); --pass: the passes to run
 *   (default all three); exit status 1 on any FAIL.
 * Validation lines first, then one table: per shape, pass and variant PASS/FAIL, ms (median of
 * reps after warm-up, CUDA events), TFLOP/s (the conv's 2*N*Ho*Wo*Cout*kh*kw*C, the real C) and
 * the time relative to the pass's library path. A variant that fails a shape is not timed on it. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_common.h"
#include "dt_alloc.h"
#include "dt_autograd.h"
#include "dt_common.h"
#include "dt_cuda.h"
#include "dt_device.h"
#include "dt_gemm_call.h"
#include "dt_layers.h"
#include "dt_rng.h"
#include "dt_tensor.h"
#include "im2col.h"

typedef __nv_bfloat16 bf16;

/* ================================================================== the kernels */

/* One convolution as the kernels see it. x, w, y device pointers (cudaMalloc'd: 256-byte
 * aligned, so every 8-channel chunk is 16-byte aligned when C % 8 == 0 and Cout % 8 == 0). */
struct conv_params {
    const bf16 *x; /* [N, H, W, C] */
    const bf16 *w; /* [Cout, KH, KW, C] = B^T [Cout, K] */
    void *y;       /* [N, Ho, Wo, Cout] = [M, Cout], bf16 or fp32 */
    int N, H, W, C, Cout, KH, KW, SH, SW, PH, PW, DH, DW, Ho, Wo;
    int M, K; /* M = N*Ho*Wo, K = KH*KW*C */
};

/* The GEMM a kernel runs, for either pass (fprop_view / dgrad_view build it from a problem):
 *   y [M, NO] = A [M, K] . B [K, NO],   B^T = b [NO, K] row-major (K contiguous),
 *   row m = (n, oh, ow) of an [N, OH, OW] output image; k = (r, t, ac): tap (r, t) of the KH x KW
 *   window and channel ac of A's source a [N, AH, AW, AC] (AC % 8 == 0, NO % 8 == 0).
 * fprop: a = x, (AH, AW, AC) = (H, W, C), (OH, OW) = (Ho, Wo), NO = Cout, b = w [Cout, KH, KW, C];
 *   A[m][k] = x at (oh*SH - PH + r*DH, ow*SW - PW + t*DW).
 * dgrad: a = dy, (AH, AW, AC) = (Ho, Wo, Cout), (OH, OW) = (H, W), NO = C, b = wT [C, KH, KW, Cout]
 *   (w with its channel axes swapped, made once); A[m][k] = dy at ((h + PH - r*DH) / SH,
 *   (w + PW - t*DW) / SW) where both divide exactly and land inside, else 0 - the adjoint of
 *   fprop's gather, so dx = A . B is exact, and for stride 2 three taps in four are zeros. */
struct gemm_view {
    const bf16 *a, *b;
    void *y; /* bf16, or fp32 (F32OUT; split-K's [splits, M, NO] workspace) */
    int N, AH, AW, AC, OH, OW, NO, KH, KW, SH, SW, PH, PW, DH, DW;
    int M, K;
};

/* ---- PTX wrappers. Sources of the operand layouts: the PTX ISA ("Matrix fragments for
 * mma.m16n8k16 with floating point type", "ldmatrix", "cp.async"); checked against the
 * lane/register table of TVM's mma_sync page. */

/* 16 bytes global -> shared, bypassing L1 (.cg). src_bytes < 16 zero-fills the rest: 0 reads
 * nothing and writes 16 zero bytes (padding, rows past M, k past K); src must still be a valid
 * address, so callers pass the tensor's base then. */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, int src_bytes) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
/* waits until at most N of this thread's committed groups are still in flight */
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* ldmatrix .x4: four 8x8 b16 matrices. Lanes 8j..8j+7 give the addresses of the 8 rows (16
 * bytes each) of matrix j; afterwards register j of lane l holds matrix j's row l/4, columns
 * 2*(l%4) and 2*(l%4)+1 (the lower column in the lower 16 bits). */
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void *smem_row) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem_row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

/* The same with .trans: register j of lane l holds matrix j's column l/4, rows 2*(l%4) and
 * 2*(l%4)+1 - the fragments of the transposed matrix, for operands stored reduction-major. */
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void *smem_row) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem_row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

/* d += a . b for one 16x8x16 tile; fragment layout (g = lane/4, q = lane%4; a register holds two
 * bf16, the lower index in the lower half):
 *
 *   operand   register   elements held by lane (g, q)
 *   A 16x16   a[0]       A[g    ][2q, 2q+1]
 *   (row)     a[1]       A[g + 8][2q, 2q+1]
 *             a[2]       A[g    ][2q+8, 2q+9]
 *             a[3]       A[g + 8][2q+8, 2q+9]
 *   B 16x8    b[0]       B[2q, 2q+1    ][g]     (k pairs of column n = g: "col" = B^T row-major)
 *   (col)     b[1]       B[2q+8, 2q+9  ][g]
 *   C/D 16x8  d[0], d[1] D[g    ][2q], D[g    ][2q+1]
 *   (f32)     d[2], d[3] D[g + 8][2q], D[g + 8][2q+1]
 *
 * So A comes from ldmatrix.x4 on a row-major [16 rows][16 k] block with matrix 0 = rows 0-7 /
 * k 0-7, 1 = rows 8-15 / k 0-7, 2 = rows 0-7 / k 8-15, 3 = rows 8-15 / k 8-15 (lane l points
 * at row l%16, k 8*(l/16)); B from ldmatrix.x4 on B^T [n][k] (w's own layout), matrix 0 = n 0-7
 * / k 0-7 -> b[0] of n-tile 0, 1 = n 0-7 / k 8-15 -> b[1] of n-tile 0, 2 and 3 the same for
 * n 8-15 (lane l points at n (l%8) + 8*(l/16), k 8*((l/8)%2)). */
__device__ __forceinline__ void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* ---- the mainloop every kernel here runs: a STAGES-deep cp.async pipeline over n tiles of
 * the reduction, STAGES-1 tiles in flight before the first mma, one commit group per tile
 * (empty groups past the end keep the counting uniform). load(st, t) issues tile t's copies
 * into stage st; mma(st) consumes stage st. On return every copy has landed. */
template <int STAGES, typename Load, typename Mma> __device__ __forceinline__ void cp_async_mainloop(int n, Load load, Mma mma) {
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < n) load(s, s);
        cp_async_commit();
    }
    for (int t = 0; t < n; t++) {
        /* groups committed: STAGES-1+t; at most STAGES-2 pending -> tile t has landed (this
         * thread's part); the barrier makes everyone's visible and also says that every warp
         * is done with stage (t-1) % STAGES, which the prefetch below overwrites */
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        const int nt = t + STAGES - 1;
        if (nt < n) load(nt % STAGES, nt);
        cp_async_commit();
        mma(t % STAGES);
    }
    cp_async_wait<0>();
}

template <int MI, int NI> __device__ __forceinline__ void zero_acc(float (&acc)[MI][NI][4]) {
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < NI; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;
}

/* acc[i][j] += af[i] . bfr[j] over a warp's MI x NI mma tiles */
template <int MI, int NI>
__device__ __forceinline__ void mma_tiles(float (&acc)[MI][NI][4], const uint32_t (&af)[MI][4], const uint32_t (&bfr)[NI][2]) {
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < NI; j++) mma_bf16_16816(acc[i][j], af[i], bfr[j]);
}

/* A warp's fp32 accumulators to out [rows, cols] (row-major, leading dimension cols), the warp's
 * tile at (row0, col0): each lane stores its (row, 2 columns) pairs as float2 (cols % 8 == 0, so
 * a pair is wholly in or out) - 32 bytes per 4 lanes, full sectors. */
template <int MI, int NI>
__device__ __forceinline__ void store_acc_f32(const float (&acc)[MI][NI][4], float *out, int rows, int cols, int row0, int col0,
                                              int lane) {
    const int g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = row0 + i * 16 + g + 8 * h;
            if (row >= rows) continue;
#pragma unroll
            for (int j = 0; j < NI; j++) {
                const int col = col0 + j * 8 + 2 * q;
                if (col < cols)
                    *reinterpret_cast<float2 *>(out + (int64_t)row * cols + col) = make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
            }
        }
}

/* ---- the tile configuration. BK = 32 bf16 = four 16-byte chunks per smem row; a row is padded
 * to 40 elements (80 bytes) so that the 8 row addresses of one ldmatrix matrix (80 bytes apart)
 * fall on 8 distinct 16-byte bank groups of the 128-byte bank line (80*i mod 128 = 0, 80, 32,
 * 112, 64, 16, 96, 48): no bank conflicts on the reads, at most 2-way on the cp.async writes. */
constexpr int BK = 32, PITCH = BK + 8;

template <int BM, int BN, int WM, int WN, int STAGES> struct tile_cfg {
    static constexpr int WARPS_M = BM / WM, WARPS_N = BN / WN, THREADS = 32 * WARPS_M * WARPS_N;
    static constexpr int MI = WM / 16, NI = WN / 8;             /* mma tiles per warp */
    static constexpr int A_IT = BM * 4 / THREADS, B_IT = BN * 4 / THREADS; /* 16-B chunks a thread */
    static constexpr int ROWS_PER_PASS = THREADS / 4;
    static constexpr int CPITCH = BN + 8; /* the epilogue's bf16 C tile row (bank-conflict free) */
    static constexpr size_t PIPE_BYTES = (size_t)STAGES * (BM + BN) * PITCH * sizeof(bf16);
    static constexpr size_t EPI_BYTES = (size_t)BM * CPITCH * sizeof(bf16);
    static constexpr size_t SMEM = PIPE_BYTES > EPI_BYTES ? PIPE_BYTES : EPI_BYTES;
    static_assert(BM % WM == 0 && BN % WN == 0 && WM % 16 == 0 && WN % 16 == 0, "warp tile");
    static_assert(A_IT * THREADS == BM * 4 && B_IT * THREADS == BN * 4, "loader: whole chunks a thread");
    static_assert(NI % 2 == 0, "B fragments come in pairs of n-tiles (one ldmatrix.x4)");
};

/* The implicit GEMM (gemm_view: fprop or dgrad). One CTA computes y[m0 .. m0+BM) x [n0 .. n0+BN); grid.x = one CTA per
 * tile, the n-tile fastest (the CTAs that share an A tile - the big operand - run together, so
 * it is read from DRAM once and from L2 after; all of w fits in L2).
 *
 * Loader: thread tid owns 16-byte chunk kc = tid % 4 (channels 8kc .. 8kc+7 of the k slice) of
 * rows tid/4 + i*THREADS/4 of A (and of B). Row decoding (n, ho, wo) happens once per CTA; per
 * k slice each thread decodes its k = kt*BK + 8kc into (r, t, c) once (C % 8 == 0, so the
 * 8 channels of a chunk never straddle two taps, and K % 8 == 0, so a chunk is wholly in or
 * out of K). ONE: 1x1, stride 1, no padding - A is x [M, C] itself. SPLITK: grid.y splits the k
 * tiles into gridDim.y contiguous ranges; split z writes its fp32 partial tile to y + z*M*Cout
 * (a workspace [splits, M, Cout]) and k_splitk_sum adds the splits in order: for the shapes
 * whose tiles are too few to fill the GPU (layer3-4: M = N*Ho*Wo is small, K long). */
template <int BM, int BN, int WM, int WN, int STAGES, bool ONE, bool F32OUT, bool SPLITK, bool DGRAD>
__global__ void __launch_bounds__(tile_cfg<BM, BN, WM, WN, STAGES>::THREADS) k_igemm(gemm_view p) {
    typedef tile_cfg<BM, BN, WM, WN, STAGES> T;
    static_assert(!SPLITK || F32OUT, "split-K writes fp32 partial sums");
    static_assert(!(ONE && DGRAD), "the 1x1 path is fprop's");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sA = reinterpret_cast<bf16 *>(smem_raw); /* [STAGES][BM][PITCH] */
    bf16 *sB = sA + STAGES * BM * PITCH;          /* [STAGES][BN][PITCH] */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int warp_m = warp / T::WARPS_N, warp_n = warp % T::WARPS_N;
    const int ntn = (p.NO + BN - 1) / BN;
    const int m0 = (int)(blockIdx.x / ntn) * BM, n0 = (int)(blockIdx.x % ntn) * BN;
    const int kc = tid & 3;

    /* per A row: the image's base, and its window's origin: fprop the top-left source position
     * (tap (r, t) reads h0 + r*DH), dgrad the output position plus the padding (tap (r, t)
     * reads (h0 - r*DH) / SH). A row past M gets h0 = -2^30: every tap falls outside, zero-filled */
    const bf16 *a_base[T::A_IT];
    int a_h0[T::A_IT], a_w0[T::A_IT];
#pragma unroll
    for (int i = 0; i < T::A_IT; i++) {
        const int m = m0 + (tid >> 2) + i * T::ROWS_PER_PASS;
        a_base[i] = p.a;
        a_h0[i] = -(1 << 30);
        a_w0[i] = 0;
        if (m < p.M) {
            if (ONE) {
                a_base[i] = p.a + (int64_t)m * p.AC;
                a_h0[i] = 0;
            } else {
                const int hw = p.OH * p.OW, n = m / hw, rem = m - n * hw, ho = rem / p.OW, wo = rem - ho * p.OW;
                a_base[i] = p.a + (int64_t)n * p.AH * p.AW * p.AC;
                a_h0[i] = DGRAD ? ho + p.PH : ho * p.SH - p.PH;
                a_w0[i] = DGRAD ? wo + p.PW : wo * p.SW - p.PW;
            }
        }
    }
    /* per B row (an output channel): w's row, or NULL past Cout */
    const bf16 *b_row[T::B_IT];
#pragma unroll
    for (int i = 0; i < T::B_IT; i++) {
        const int co = n0 + (tid >> 2) + i * T::ROWS_PER_PASS;
        b_row[i] = co < p.NO ? p.b + (int64_t)co * p.K : nullptr;
    }

    /* issue the cp.asyncs of k tile kt into pipeline stage st */
    auto load_tile = [&](int st, int kt) {
        const int k = kt * BK + kc * 8;
        const bool kin = k < p.K;
        int r = 0, t = 0, c = k;
        if (!ONE) {
            const int tap = k / p.AC;
            c = k - tap * p.AC;
            r = tap / p.KW;
            t = tap - r * p.KW;
        }
        bf16 *da = sA + (st * BM + (tid >> 2)) * PITCH + kc * 8;
#pragma unroll
        for (int i = 0; i < T::A_IT; i++) {
            const bf16 *src = p.a;
            int bytes = 0;
            if (ONE) {
                if (kin && a_h0[i] == 0) src = a_base[i] + k, bytes = 16;
            } else if (DGRAD) {
                const int hh = a_h0[i] - r * p.DH, ww = a_w0[i] - t * p.DW;
                if (kin && hh >= 0 && ww >= 0 && hh % p.SH == 0 && ww % p.SW == 0) {
                    const int hi = hh / p.SH, wi = ww / p.SW;
                    if (hi < p.AH && wi < p.AW) src = a_base[i] + ((int64_t)hi * p.AW + wi) * p.AC + c, bytes = 16;
                }
            } else {
                const int hi = a_h0[i] + r * p.DH, wi = a_w0[i] + t * p.DW;
                if (kin && (unsigned)hi < (unsigned)p.AH && (unsigned)wi < (unsigned)p.AW)
                    src = a_base[i] + ((int64_t)hi * p.AW + wi) * p.AC + c, bytes = 16;
            }
            cp_async16(da + i * T::ROWS_PER_PASS * PITCH, src, bytes);
        }
        bf16 *db = sB + (st * BN + (tid >> 2)) * PITCH + kc * 8;
#pragma unroll
        for (int i = 0; i < T::B_IT; i++) {
            const bool ok = kin && b_row[i] != nullptr;
            cp_async16(db + i * T::ROWS_PER_PASS * PITCH, ok ? b_row[i] + k : p.b, ok ? 16 : 0);
        }
    };

    float acc[T::MI][T::NI][4];
    zero_acc(acc);
    /* this CTA's k tiles: kt0 .. kt0 + KT - 1 (all of them without split-K; a split past the
     * end has none and writes 0) */
    const int KT_ALL = (p.K + BK - 1) / BK;
    int kt0 = 0, KT = KT_ALL;
    if (SPLITK) {
        const int per = (KT_ALL + (int)gridDim.y - 1) / (int)gridDim.y;
        kt0 = min(KT_ALL, (int)blockIdx.y * per);
        KT = min(KT_ALL - kt0, per);
    }
    cp_async_mainloop<STAGES>(
        KT, [&](int st, int t) { load_tile(st, kt0 + t); },
        [&](int st) {
            const bf16 *a_s = sA + st * BM * PITCH, *b_s = sB + st * BN * PITCH;
#pragma unroll
            for (int kk = 0; kk < BK; kk += 16) {
                uint32_t af[T::MI][4], bfr[T::NI][2];
#pragma unroll
                for (int i = 0; i < T::MI; i++) {
                    const int row = warp_m * WM + i * 16 + (lane & 15), col = kk + (lane >> 4) * 8;
                    ldmatrix_x4(af[i], a_s + row * PITCH + col);
                }
#pragma unroll
                for (int j = 0; j < T::NI / 2; j++) {
                    const int row = warp_n * WN + j * 16 + (lane & 7) + ((lane >> 4) << 3);
                    const int col = kk + ((lane >> 3) & 1) * 8;
                    uint32_t r4[4];
                    ldmatrix_x4(r4, b_s + row * PITCH + col);
                    bfr[2 * j][0] = r4[0], bfr[2 * j][1] = r4[1];
                    bfr[2 * j + 1][0] = r4[2], bfr[2 * j + 1][1] = r4[3];
                }
                mma_tiles(acc, af, bfr);
            }
        });
    __syncthreads(); /* the pipeline's smem is reused by the epilogue */

    if (F32OUT) { /* fp32 y (split-K: this split's slice of the workspace) */
        float *y = static_cast<float *>(p.y) + (SPLITK ? (int64_t)blockIdx.y * p.M * p.NO : 0);
        store_acc_f32(acc, y, p.M, p.NO, m0 + warp_m * WM, n0 + warp_n * WN, lane);
        return;
    }
    const int g = lane >> 2, q = lane & 3;
    /* bf16 y: round once (nearest even) into a [BM][BN+8] smem tile, then 16-byte coalesced
     * stores of whole rows. Writes: lane (g, q) at word 68g + q of its rows (mod 32: 4g + q, all
     * distinct) - no conflicts. */
    bf16 *sC = reinterpret_cast<bf16 *>(smem_raw);
#pragma unroll
    for (int i = 0; i < T::MI; i++)
#pragma unroll
        for (int j = 0; j < T::NI; j++) {
            const int row = warp_m * WM + i * 16 + g, col = warp_n * WN + j * 8 + 2 * q;
            *reinterpret_cast<__nv_bfloat162 *>(sC + row * T::CPITCH + col) = __floats2bfloat162_rn(acc[i][j][0], acc[i][j][1]);
            *reinterpret_cast<__nv_bfloat162 *>(sC + (row + 8) * T::CPITCH + col) =
                __floats2bfloat162_rn(acc[i][j][2], acc[i][j][3]);
        }
    __syncthreads();
    bf16 *y = static_cast<bf16 *>(p.y);
    constexpr int CH = BN / 8; /* 16-byte chunks per tile row */
    for (int idx = tid; idx < BM * CH; idx += T::THREADS) {
        const int row = idx / CH, ch = idx % CH, m = m0 + row, co = n0 + ch * 8;
        if (m < p.M && co < p.NO)
            *reinterpret_cast<uint4 *>(y + (int64_t)m * p.NO + co) = *reinterpret_cast<const uint4 *>(sC + row * T::CPITCH + ch * 8);
    }
}

/* split-K's second pass: y[i] = ws[0][i] + ws[1][i] + ... + ws[splits-1][i], the splits added
 * in order (deterministic), rounded once to OUT (bf16: fprop's y; float: wgrad's dw, as it is).
 * ws [splits, n] fp32, y [n], n % 4 == 0 (Cout % 8 == 0): four elements a thread, float4 loads. */
__device__ __forceinline__ void store4(bf16 *y, float4 a) {
    __nv_bfloat162 lo = __floats2bfloat162_rn(a.x, a.y), hi = __floats2bfloat162_rn(a.z, a.w);
    uint2 out;
    out.x = *reinterpret_cast<uint32_t *>(&lo);
    out.y = *reinterpret_cast<uint32_t *>(&hi);
    *reinterpret_cast<uint2 *>(y) = out;
}
__device__ __forceinline__ void store4(float *y, float4 a) { *reinterpret_cast<float4 *>(y) = a; }
template <typename OUT> __global__ void k_splitk_sum(const float *__restrict__ ws, int splits, int64_t n, OUT *__restrict__ y) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x * 4;
    for (int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 4; i < n; i += stride) {
        float4 a = *reinterpret_cast<const float4 *>(ws + i);
        for (int z = 1; z < splits; z++) {
            const float4 b = *reinterpret_cast<const float4 *>(ws + (int64_t)z * n + i);
            a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
        }
        store4(y + i, a);
    }
}
template <typename OUT> static void launch_splitk_sum(const float *ws, int splits, int64_t n, OUT *y) {
    const int64_t blocks = (n / 4 + 255) / 256;
    k_splitk_sum<OUT><<<(unsigned)(blocks < 4096 ? blocks : 4096), 256, 0, dt_stream()>>>(ws, splits, n, y);
    DT_CHECK_LAUNCH();
}

/* wgrad: dw [Cout, K] fp32 = dy^T [Cout, M] . A [M, K], A = fprop's implicit im2col of x, the
 * reduction over M = N*Ho*Wo (long: 200704 for layer1 at batch 64), so it is split over
 * gridDim.y into contiguous m ranges whose fp32 partial tiles go to ws [splits, Cout, K] and are
 * summed in split order (k_splitk_sum<float>: deterministic). One CTA computes dw[i0 .. i0+BM)
 * x [j0 .. j0+BN) (i = co, j = k = (r, t, c)) over its m range, BKW = 32 m a stage.
 * Both operands are stored m-major in shared memory, as they come from global memory - dy's
 * rows [m][co] and A's rows [m][k] (8 consecutive k are 8 channels of one tap: 16 bytes of x) -
 * and reach the mma through ldmatrix.trans: A-fragments from the [m][co] tile, B-fragments
 * (k pairs along m) from the [m][k] tile. Rows padded to BM + 8 (BN + 8) elements, 16 bytes
 * past a multiple of 128: the 8 rows of an 8x8 matrix fall on distinct bank groups. */
constexpr int BKW = 32;
template <int BM, int BN, int WM, int WN, int STAGES> struct wgrad_cfg {
    static constexpr int WARPS_M = BM / WM, WARPS_N = BN / WN, THREADS = 32 * WARPS_M * WARPS_N;
    static constexpr int MI = WM / 16, NI = WN / 8;
    static constexpr int APITCH = BM + 8, BPITCH = BN + 8;
    static constexpr int A_CH = BM / 8, B_CH = BN / 8; /* 16-byte chunks of a tile row */
    static constexpr int A_IT = BKW * A_CH / THREADS, B_IT = BKW * B_CH / THREADS;
    static constexpr size_t SMEM = (size_t)STAGES * BKW * (APITCH + BPITCH) * sizeof(bf16);
    static_assert(A_IT * THREADS == BKW * A_CH && B_IT * THREADS == BKW * B_CH, "loader: whole chunks a thread");
    static_assert(THREADS % A_CH == 0 && THREADS % B_CH == 0, "a thread keeps its chunk column");
    static_assert(NI % 2 == 0 && WM % 16 == 0 && BM % WM == 0 && BN % WN == 0, "warp tile");
};

template <int BM, int BN, int WM, int WN, int STAGES>
__global__ void __launch_bounds__(wgrad_cfg<BM, BN, WM, WN, STAGES>::THREADS)
    k_igemm_wgrad(conv_params p, const bf16 *__restrict__ dy, float *__restrict__ ws) {
    typedef wgrad_cfg<BM, BN, WM, WN, STAGES> T;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sA = reinterpret_cast<bf16 *>(smem_raw); /* [STAGES][BKW][APITCH]: dy rows, co */
    bf16 *sB = sA + STAGES * BKW * T::APITCH;     /* [STAGES][BKW][BPITCH]: A rows, k */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int warp_m = warp / T::WARPS_N, warp_n = warp % T::WARPS_N;
    const int ntn = (p.K + BN - 1) / BN;
    const int i0 = (int)(blockIdx.x / ntn) * BM, j0 = (int)(blockIdx.x % ntn) * BN;
    /* this CTA's m tiles: mt0 .. mt0 + MT - 1 */
    const int MT_ALL = (p.M + BKW - 1) / BKW, per = (MT_ALL + (int)gridDim.y - 1) / (int)gridDim.y;
    const int mt0 = min(MT_ALL, (int)blockIdx.y * per), MT = min(MT_ALL - mt0, per);

    /* a thread's chunk columns are fixed: dy's co = i0 + 8*ac, A's k = j0 + 8*bc, decoded once */
    const int ac = tid % T::A_CH, bc = tid % T::B_CH;
    const int co = i0 + 8 * ac;
    const int kb = j0 + 8 * bc, tap = kb / p.C, cb = kb - tap * p.C, rr = tap / p.KW, tt = tap - rr * p.KW;
    const bool a_col_in = co < p.Cout, b_col_in = kb < p.K;

    auto load_tile = [&](int st, int mt) {
        const int mbase = mt * BKW;
#pragma unroll
        for (int i = 0; i < T::A_IT; i++) {
            const int row = tid / T::A_CH + i * (T::THREADS / T::A_CH), m = mbase + row;
            const bool ok = a_col_in && m < p.M;
            cp_async16(sA + (st * BKW + row) * T::APITCH + 8 * ac, ok ? dy + (int64_t)m * p.Cout + co : dy, ok ? 16 : 0);
        }
#pragma unroll
        for (int i = 0; i < T::B_IT; i++) {
            const int row = tid / T::B_CH + i * (T::THREADS / T::B_CH), m = mbase + row;
            const bf16 *src = p.x;
            int bytes = 0;
            if (b_col_in && m < p.M) {
                const int hw = p.Ho * p.Wo, n = m / hw, rem = m - n * hw, ho = rem / p.Wo, wo = rem - ho * p.Wo;
                const int hi = ho * p.SH - p.PH + rr * p.DH, wi = wo * p.SW - p.PW + tt * p.DW;
                if ((unsigned)hi < (unsigned)p.H && (unsigned)wi < (unsigned)p.W)
                    src = p.x + (((int64_t)n * p.H + hi) * p.W + wi) * p.C + cb, bytes = 16;
            }
            cp_async16(sB + (st * BKW + row) * T::BPITCH + 8 * bc, src, bytes);
        }
    };

    float acc[T::MI][T::NI][4];
    zero_acc(acc);
    cp_async_mainloop<STAGES>(
        MT, [&](int st, int t) { load_tile(st, mt0 + t); },
        [&](int st) {
            const bf16 *a_s = sA + st * BKW * T::APITCH, *b_s = sB + st * BKW * T::BPITCH;
#pragma unroll
            for (int kk = 0; kk < BKW; kk += 16) {
                uint32_t af[T::MI][4], bfr[T::NI][2];
                /* A (rows i = co, reduction m): matrix j of the x4 = stored rows m kk + 8*(j/2) ..,
                 * columns co + 8*(j%2): lane l addresses stored row kk + 8*(l/16) + l%8, column
                 * 8*((l/8)%2) of its 16-wide block */
#pragma unroll
                for (int i = 0; i < T::MI; i++) {
                    const int col = warp_m * WM + i * 16 + ((lane >> 3) & 1) * 8, row = kk + (lane >> 4) * 8 + (lane & 7);
                    ldmatrix_x4_trans(af[i], a_s + row * T::APITCH + col);
                }
                /* B (reduction m, columns j = k): matrices (rows m kk.., cols j..), (m kk+8.., j..),
                 * (m kk.., j+8..), (m kk+8.., j+8..) = b[0], b[1] of n-tile 2j, then of 2j+1 */
#pragma unroll
                for (int j = 0; j < T::NI / 2; j++) {
                    const int col = warp_n * WN + j * 16 + (lane >> 4) * 8, row = kk + ((lane >> 3) & 1) * 8 + (lane & 7);
                    uint32_t r4[4];
                    ldmatrix_x4_trans(r4, b_s + row * T::BPITCH + col);
                    bfr[2 * j][0] = r4[0], bfr[2 * j][1] = r4[1];
                    bfr[2 * j + 1][0] = r4[2], bfr[2 * j + 1][1] = r4[3];
                }
                mma_tiles(acc, af, bfr);
            }
        });

    /* this split's fp32 partial tile: dw rows i (co), columns j (k); pairs of columns whole
     * (K % 8 == 0) */
    store_acc_f32(acc, ws + (int64_t)blockIdx.y * p.Cout * p.K, p.Cout, p.K, i0 + warp_m * WM, j0 + warp_n * WN, lane);
}

/* wgrad's launcher: splits fill two waves of the GPU, each at least 8 m tiles (256 rows). */
template <int BM, int BN, int WM, int WN, int STAGES> static int wgrad_splits(const conv_params &p) {
    typedef wgrad_cfg<BM, BN, WM, WN, STAGES> T;
    const int64_t tiles = (int64_t)((p.Cout + BM - 1) / BM) * ((p.K + BN - 1) / BN);
    int per_sm = 0;
    DT_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_igemm_wgrad<BM, BN, WM, WN, STAGES>, T::THREADS,
                                                           T::SMEM));
    const int64_t want = ((int64_t)(per_sm > 0 ? per_sm : 1) * dt_gpu_sm_count() * 2 + tiles - 1) / tiles;
    const int64_t most = ((p.M + BKW - 1) / BKW) / 8;
    const int64_t s = want < most ? want : most;
    return (int)(s < 1 ? 1 : s > 65535 ? 65535 : s);
}
template <int BM, int BN, int WM, int WN, int STAGES>
static void launch_wgrad(const conv_params &p, const bf16 *dy, float *dw) {
    typedef wgrad_cfg<BM, BN, WM, WN, STAGES> T;
    auto kern = k_igemm_wgrad<BM, BN, WM, WN, STAGES>;
    static int attr_set = 0;
    if (!attr_set) {
        DT_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)T::SMEM));
        attr_set = 1;
    }
    const int splits = wgrad_splits<BM, BN, WM, WN, STAGES>(p);
    const int64_t n = (int64_t)p.Cout * p.K, tiles = (int64_t)((p.Cout + BM - 1) / BM) * ((p.K + BN - 1) / BN);
    float *ws = (float *)dt_gpu_malloc(sizeof(float) * (size_t)(splits * n)); /* cached after the first call */
    kern<<<dim3((unsigned)tiles, (unsigned)splits), T::THREADS, T::SMEM, dt_stream()>>>(p, dy, ws);
    DT_CHECK_LAUNCH();
    launch_splitk_sum<float>(ws, splits, n, dw);
    dt_gpu_free(ws);
}

/* The launcher of one tile configuration (raises the dynamic smem limit once per kernel);
 * splits > 1: split-K (F32OUT, p.y the [splits, M, Cout] workspace). */
template <int BM, int BN, int WM, int WN, int STAGES, bool ONE, bool F32OUT, bool SPLITK = false, bool DGRAD = false>
static void launch_igemm(const gemm_view &p, int splits = 1) {
    typedef tile_cfg<BM, BN, WM, WN, STAGES> T;
    auto kern = k_igemm<BM, BN, WM, WN, STAGES, ONE, F32OUT, SPLITK, DGRAD>;
    static int attr_set = 0;
    if (!attr_set) {
        DT_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)T::SMEM));
        attr_set = 1;
    }
    const int64_t tiles = (int64_t)((p.M + BM - 1) / BM) * ((p.NO + BN - 1) / BN);
    if (tiles > INT_MAX) dt_fatal("conv_lab: %lld tiles", (long long)tiles);
    kern<<<dim3((unsigned)tiles, (unsigned)splits), T::THREADS, T::SMEM, dt_stream()>>>(p);
    DT_CHECK_LAUNCH();
}

/* ================================================================== shapes */

typedef struct {
    const char *name;
    int n, h, w, c, cout, k, s, pad, dil; /* n = 0: the run's --batch */
    int r18, r50;                         /* how many of this conv ResNet-18 / -50 have */
    int odd;                              /* a validation shape: every output checked */
} conv_shape;

/* ResNet-18 (l*) and ResNet-50 v1.5 (b*: c1 = 1x1 reduce of a stage's first block, c1x = of the
 * others, c2a = the strided 3x3, c3 = 1x1 expand, ds = the downsample; the stride-1 3x3s are the
 * l* shapes) at 224x224, then odd shapes (edges of every tile: M and Cout not multiples of the
 * tiles, dilation, C = 8, padding of C = 3 and 5). */
static const conv_shape SHAPES[] = {
    {"stem", 0, 224, 224, 3, 64, 7, 2, 3, 1, 1, 1, 0},
    {"l1", 0, 56, 56, 64, 64, 3, 1, 1, 1, 4, 3, 0},
    {"l2a", 0, 56, 56, 64, 128, 3, 2, 1, 1, 1, 0, 0},
    {"l2ds", 0, 56, 56, 64, 128, 1, 2, 0, 1, 1, 0, 0},
    {"l2", 0, 28, 28, 128, 128, 3, 1, 1, 1, 3, 3, 0},
    {"l3a", 0, 28, 28, 128, 256, 3, 2, 1, 1, 1, 0, 0},
    {"l3ds", 0, 28, 28, 128, 256, 1, 2, 0, 1, 1, 0, 0},
    {"l3", 0, 14, 14, 256, 256, 3, 1, 1, 1, 3, 5, 0},
    {"l4a", 0, 14, 14, 256, 512, 3, 2, 1, 1, 1, 0, 0},
    {"l4ds", 0, 14, 14, 256, 512, 1, 2, 0, 1, 1, 0, 0},
    {"l4", 0, 7, 7, 512, 512, 3, 1, 1, 1, 3, 2, 0},
    {"b1.c1", 0, 56, 56, 64, 64, 1, 1, 0, 1, 0, 1, 0},
    {"b1.c3", 0, 56, 56, 64, 256, 1, 1, 0, 1, 0, 4, 0}, /* conv3 x3 + the stride-1 downsample */
    {"b1.c1x", 0, 56, 56, 256, 64, 1, 1, 0, 1, 0, 2, 0},
    {"b2.c1", 0, 56, 56, 256, 128, 1, 1, 0, 1, 0, 1, 0},
    {"b2.c2a", 0, 56, 56, 128, 128, 3, 2, 1, 1, 0, 1, 0},
    {"b2.c3", 0, 28, 28, 128, 512, 1, 1, 0, 1, 0, 4, 0},
    {"b2.ds", 0, 56, 56, 256, 512, 1, 2, 0, 1, 0, 1, 0},
    {"b2.c1x", 0, 28, 28, 512, 128, 1, 1, 0, 1, 0, 3, 0},
    {"b3.c1", 0, 28, 28, 512, 256, 1, 1, 0, 1, 0, 1, 0},
    {"b3.c2a", 0, 28, 28, 256, 256, 3, 2, 1, 1, 0, 1, 0},
    {"b3.c3", 0, 14, 14, 256, 1024, 1, 1, 0, 1, 0, 6, 0},
    {"b3.ds", 0, 28, 28, 512, 1024, 1, 2, 0, 1, 0, 1, 0},
    {"b3.c1x", 0, 14, 14, 1024, 256, 1, 1, 0, 1, 0, 5, 0},
    {"b4.c1", 0, 14, 14, 1024, 512, 1, 1, 0, 1, 0, 1, 0},
    {"b4.c2a", 0, 14, 14, 512, 512, 3, 2, 1, 1, 0, 1, 0},
    {"b4.c3", 0, 7, 7, 512, 2048, 1, 1, 0, 1, 0, 3, 0},
    {"b4.ds", 0, 14, 14, 1024, 2048, 1, 2, 0, 1, 0, 1, 0},
    {"b4.c1x", 0, 7, 7, 2048, 512, 1, 1, 0, 1, 0, 2, 0},
    {"odd.3x3", 2, 9, 11, 16, 24, 3, 1, 1, 1, 0, 0, 1},
    {"odd.3x3s2", 3, 10, 7, 8, 40, 3, 2, 1, 1, 0, 0, 1},
    {"odd.dil2", 1, 13, 12, 24, 136, 3, 1, 2, 2, 0, 0, 1},
    {"odd.1x1", 3, 5, 9, 40, 72, 1, 1, 0, 1, 0, 0, 1},
    {"odd.1x1s2", 2, 9, 9, 32, 200, 1, 2, 0, 1, 0, 0, 1},
    {"odd.stem", 2, 20, 18, 3, 16, 7, 2, 3, 1, 0, 0, 1},
    {"odd.5x5c5", 1, 11, 11, 5, 8, 5, 1, 2, 1, 0, 0, 1},
};
enum { NSHAPES = sizeof SHAPES / sizeof *SHAPES };

/* ================================================================== one problem on the GPU */

typedef struct {
    const conv_shape *sh;
    int n, creal;     /* batch; the shape's real C (3 for the stem) */
    conv_params p;    /* the padded problem (C % 8 == 0) the igemm variants run */
    dt_bf16 *hx, *hw; /* host copies (as stored): x [N, H, W, C], w [Cout, KH, KW, C] */
    bf16 *dx, *dw;    /* device x, w (padded) */
    void *dy;         /* device y [M, Cout], room for fp32 */
    dt_tensor *tx, *tw; /* the library's tensors for ref_cublas: real C, bf16 NHWC */
    dt_conv_geom g;
    /* dgrad: dy random, dx = the output */
    dt_bf16 *hdy;     /* host dy [N, Ho, Wo, Cout] */
    bf16 *ddy, *dwT;  /* device dy, and w with its channel axes swapped: wT [C, KH, KW, Cout] */
    void *ddx;        /* device dx [N, H, W, C], room for fp32 */
    float *ddw;       /* wgrad: device dw [Cout, KH, KW, C] fp32 */
    gemm_view vf, vd; /* the GEMMs of fprop and dgrad (gemm_view) */
    gemm_view vw;     /* wgrad's output only: M = Cout rows of NO = K columns, y = ddw */
} problem;

/* fills `n` bf16 with U(-a, a) (never all zero; bf16(0) only where a draw rounds to it) */
static void fill_uniform_bf16(dt_bf16 *h, int64_t n, float a, dt_rng *r) {
    for (int64_t i = 0; i < n; i++) h[i] = dt_bf16_from_float(a * (2.0f * dt_rng_uniform(r) - 1.0f));
}

static void problem_make(problem *pr, const conv_shape *sh, int batch, uint64_t seed) {
    memset(pr, 0, sizeof *pr);
    pr->sh = sh;
    pr->n = sh->n ? sh->n : batch;
    pr->creal = sh->c;
    const int C = (sh->c + 7) / 8 * 8; /* PadC: zero channels up to a multiple of 8 */
    conv_params *p = &pr->p;
    p->N = pr->n, p->H = sh->h, p->W = sh->w, p->C = C, p->Cout = sh->cout;
    p->KH = p->KW = sh->k, p->SH = p->SW = sh->s, p->PH = p->PW = sh->pad, p->DH = p->DW = sh->dil;
    p->Ho = (int)dt_conv_out_size(sh->h, sh->k, sh->s, sh->pad, sh->dil);
    p->Wo = (int)dt_conv_out_size(sh->w, sh->k, sh->s, sh->pad, sh->dil);
    p->M = p->N * p->Ho * p->Wo, p->K = p->KH * p->KW * C;
    if (sh->cout % 8) dt_fatal("conv_lab: %s: Cout %d is not a multiple of 8", sh->name, sh->cout);
    pr->g = dt_geom(sh->k, sh->s, sh->pad, sh->dil);
    const int64_t nx = (int64_t)p->N * p->H * p->W * C, nw = (int64_t)p->Cout * p->K;
    dt_rng r;
    dt_rng_seed(&r, seed);
    pr->hx = (dt_bf16 *)dt_xmalloc(sizeof(dt_bf16) * (size_t)nx);
    pr->hw = (dt_bf16 *)dt_xmalloc(sizeof(dt_bf16) * (size_t)nw);
    fill_uniform_bf16(pr->hx, nx, 1.0f, &r);
    fill_uniform_bf16(pr->hw, nw, sqrtf(3.0f / (float)(sh->k * sh->k * sh->c)), &r); /* y ~ unit scale */
    if (C != sh->c) { /* the padding channels are zero in x and w */
        for (int64_t i = 0; i < nx; i++)
            if ((int)(i % C) >= sh->c) pr->hx[i] = 0;
        for (int64_t i = 0; i < nw; i++)
            if ((int)(i % C) >= sh->c) pr->hw[i] = 0;
    }
    pr->dx = (bf16 *)dt_gpu_malloc(sizeof(bf16) * (size_t)nx);
    pr->dw = (bf16 *)dt_gpu_malloc(sizeof(bf16) * (size_t)nw);
    pr->dy = dt_gpu_malloc(sizeof(float) * (size_t)p->M * p->Cout);
    dt_copy_h2d(pr->dx, pr->hx, sizeof(bf16) * (size_t)nx);
    dt_copy_h2d(pr->dw, pr->hw, sizeof(bf16) * (size_t)nw);
    p->x = pr->dx, p->w = pr->dw, p->y = pr->dy;
    /* dgrad's operands: dy U(-1, 1), wT[c][r][t][co] = w[co][r][t][c] */
    const int64_t ndy = (int64_t)p->M * p->Cout, ndx = (int64_t)p->N * p->H * p->W * C;
    pr->hdy = (dt_bf16 *)dt_xmalloc(sizeof(dt_bf16) * (size_t)ndy);
    fill_uniform_bf16(pr->hdy, ndy, 1.0f, &r);
    dt_bf16 *hwT = (dt_bf16 *)dt_xmalloc(sizeof(dt_bf16) * (size_t)nw);
    const int taps = p->KH * p->KW;
    for (int co = 0; co < p->Cout; co++)
        for (int tp = 0; tp < taps; tp++)
            for (int c = 0; c < C; c++)
                hwT[((int64_t)c * taps + tp) * p->Cout + co] = pr->hw[((int64_t)co * taps + tp) * C + c];
    pr->ddy = (bf16 *)dt_gpu_malloc(sizeof(bf16) * (size_t)ndy);
    pr->dwT = (bf16 *)dt_gpu_malloc(sizeof(bf16) * (size_t)nw);
    pr->ddx = dt_gpu_malloc(sizeof(float) * (size_t)ndx);
    dt_copy_h2d(pr->ddy, pr->hdy, sizeof(bf16) * (size_t)ndy);
    dt_copy_h2d(pr->dwT, hwT, sizeof(bf16) * (size_t)nw);
    free(hwT);
    gemm_view v = {};
    v.N = p->N, v.KH = p->KH, v.KW = p->KW, v.SH = p->SH, v.SW = p->SW, v.PH = p->PH, v.PW = p->PW, v.DH = p->DH,
    v.DW = p->DW;
    pr->vf = v, pr->vd = v;
    pr->vf.a = pr->dx, pr->vf.b = pr->dw, pr->vf.y = pr->dy;
    pr->vf.AH = p->H, pr->vf.AW = p->W, pr->vf.AC = C, pr->vf.OH = p->Ho, pr->vf.OW = p->Wo, pr->vf.NO = p->Cout;
    pr->vf.M = p->M, pr->vf.K = p->K;
    pr->vd.a = pr->ddy, pr->vd.b = pr->dwT, pr->vd.y = pr->ddx;
    pr->vd.AH = p->Ho, pr->vd.AW = p->Wo, pr->vd.AC = p->Cout, pr->vd.OH = p->H, pr->vd.OW = p->W, pr->vd.NO = C;
    pr->vd.M = p->N * p->H * p->W, pr->vd.K = taps * p->Cout;
    pr->ddw = (float *)dt_gpu_malloc(sizeof(float) * (size_t)nw);
    pr->vw = v;
    pr->vw.M = p->Cout, pr->vw.NO = p->K, pr->vw.K = p->M, pr->vw.y = pr->ddw;
    /* the library's tensors hold the real C (the stem runs as the library runs it today) */
    pr->tx = dt_tensor_new4_as(DT_GPU, DT_BF16, DT_NHWC, p->N, sh->c, p->H, p->W);
    pr->tw = dt_tensor_new4_as(DT_GPU, DT_BF16, DT_NHWC, p->Cout, sh->c, p->KH, p->KW);
    if (C == sh->c) {
        dt_tensor_upload(pr->tx, pr->hx);
        dt_tensor_upload(pr->tw, pr->hw);
    } else {
        const int64_t px = nx / C, pw = nw / C;
        dt_bf16 *ux = (dt_bf16 *)dt_xmalloc(sizeof(dt_bf16) * (size_t)(px * sh->c));
        dt_bf16 *uw = (dt_bf16 *)dt_xmalloc(sizeof(dt_bf16) * (size_t)(pw * sh->c));
        for (int64_t i = 0; i < px; i++)
            for (int c = 0; c < sh->c; c++) ux[i * sh->c + c] = pr->hx[i * C + c];
        for (int64_t i = 0; i < pw; i++)
            for (int c = 0; c < sh->c; c++) uw[i * sh->c + c] = pr->hw[i * C + c];
        dt_tensor_upload(pr->tx, ux);
        dt_tensor_upload(pr->tw, uw);
        free(ux), free(uw);
    }
}

static void problem_free(problem *pr) {
    free(pr->hx), free(pr->hw);
    dt_gpu_free(pr->dx), dt_gpu_free(pr->dw), dt_gpu_free(pr->dy);
    free(pr->hdy);
    dt_gpu_free(pr->ddy), dt_gpu_free(pr->dwT), dt_gpu_free(pr->ddx), dt_gpu_free(pr->ddw);
    dt_tensor_free(pr->tx), dt_tensor_free(pr->tw);
}

/* ================================================================== the variants */

enum { PASS_FPROP = 0, PASS_DGRAD = 1, PASS_WGRAD = 2, NPASSES = 3 };
static const char *PASS_NAME[] = {"fprop", "dgrad", "wgrad"};

typedef struct {
    const char *name;
    int pass;
    int f32out; /* writes fp32 y */
    int (*supports)(const problem *);
    void (*run)(problem *);
    int ref;    /* the library's own path for this pass: the others are compared with it */
} variant;

static const gemm_view *view_of(const problem *pr, int pass) {
    return pass == PASS_DGRAD ? &pr->vd : pass == PASS_WGRAD ? &pr->vw : &pr->vf;
}

static int any_shape(const problem *pr) { (void)pr; return 1; }
static int one_by_one(const problem *pr) {
    const conv_params *p = &pr->p;
    return p->KH == 1 && p->KW == 1 && p->SH == 1 && p->SW == 1 && p->PH == 0 && p->PW == 0;
}

/* ref_cublas: the library's conv (no autograd, its own output tensor inside a scope; the copy
 * into pr->dy is outside the timed call, see copy_ref_out) */
static dt_tensor *ref_last;
static void run_ref(problem *pr) {
    dt_set_grad_enabled(0);
    ref_last = dt_conv2d(pr->tx, pr->tw, NULL, pr->g, DT_MATH_FP32);
    dt_set_grad_enabled(1);
}
static void run_128(problem *pr) { launch_igemm<128, 128, 64, 32, 4, false, false>(pr->vf); }
static void run_64(problem *pr) { launch_igemm<64, 64, 32, 32, 4, false, false>(pr->vf); }
static void run_1x1(problem *pr) { launch_igemm<128, 128, 64, 32, 4, true, false>(pr->vf); }
static void run_128_f32(problem *pr) { launch_igemm<128, 128, 64, 32, 4, false, true>(pr->vf); }

/* Split-K for the 128x128 tile: as many splits as fill two waves (two 80 KiB CTAs an SM), each
 * at least 8 k tiles (256 of K); a shape that already fills the GPU, or whose K is too short,
 * is not this variant's (splits < 2). */
static int splitk_splits(const problem *pr) {
    const gemm_view *p = &pr->vf;
    const int64_t tiles = (int64_t)((p->M + 127) / 128) * ((p->NO + 127) / 128);
    const int64_t want = (2 * (int64_t)dt_gpu_sm_count() + tiles - 1) / tiles, most = ((p->K + BK - 1) / BK) / 8;
    return (int)(want < most ? want : most);
}
static int splitk_fits(const problem *pr) { return splitk_splits(pr) >= 2; }
static void run_128_splitk(problem *pr) {
    const int splits = splitk_splits(pr);
    const int64_t n = (int64_t)pr->vf.M * pr->vf.NO;
    float *ws = (float *)dt_gpu_malloc(sizeof(float) * (size_t)(splits * n)); /* cached after the first call */
    gemm_view q = pr->vf;
    q.y = ws;
    launch_igemm<128, 128, 64, 32, 4, false, true, true>(q, splits);
    launch_splitk_sum<bf16>(ws, splits, n, (bf16 *)pr->vf.y);
    dt_gpu_free(ws);
}

/* dgrad. The library's path (what conv2d's backward runs for a bf16 NHWC conv whose columns fit
 * the budget, as these do): dcol [N*Ho*Wo, KH*KW*C] = dy . w in bf16 (cuBLAS), then col2im_nhwc
 * sums each dx element's column entries (fp32, one rounding; dcol itself was rounded: two
 * roundings in all); a 1x1 stride-1 unpadded conv's dx is the GEMM itself. The stem has no
 * dgrad (the images need no gradient), and a padded C would not match the library's: shapes
 * whose C is padded are skipped. */
static int dgrad_shape(const problem *pr) { return pr->creal == pr->p.C; }
static void run_ref_dgrad(problem *pr) {
    const conv_params *p = &pr->p;
    const int64_t Mo = (int64_t)p->M, R = (int64_t)p->K;
    if (one_by_one(pr)) {
        dt_gemm_call(DT_GPU, DT_BF16, DT_MATH_FP32, 0, 0, Mo, R, p->Cout, 1.0f, pr->ddy, p->Cout, pr->dw, R, 0.0f,
                     pr->ddx, DT_BF16, R);
        return;
    }
    void *dcol = dt_gpu_malloc(sizeof(bf16) * (size_t)(Mo * R)); /* cached after the first call */
    dt_gemm_call(DT_GPU, DT_BF16, DT_MATH_FP32, 0, 0, Mo, R, p->Cout, 1.0f, pr->ddy, p->Cout, pr->dw, R, 0.0f, dcol,
                 DT_BF16, R);
    dt_col2im_nhwc_bf16_cuda(dcol, p->N, p->C, p->H, p->W, pr->g, p->Ho, p->Wo, 0.0f, pr->ddx);
    dt_gpu_free(dcol);
}
static void run_128_dgrad(problem *pr) { launch_igemm<128, 128, 64, 32, 4, false, false, false, true>(pr->vd); }
static void run_64_dgrad(problem *pr) { launch_igemm<64, 64, 32, 32, 4, false, false, false, true>(pr->vd); }

/* wgrad. The library's path: col [N*Ho*Wo, K] = im2col_nhwc(x) (a 1x1 stride-1 unpadded conv:
 * x itself), dw = dy^T . col in fp32 (cuBLAS, bf16 operands). It runs the padded problem here
 * (the stem with C = 8: the igemm variants' K), so on the stem it is not the library's own time. */
static void run_ref_wgrad(problem *pr) {
    const conv_params *p = &pr->p;
    const void *col = pr->dx;
    void *buf = NULL;
    if (!one_by_one(pr)) {
        buf = dt_gpu_malloc(sizeof(bf16) * (size_t)((int64_t)p->M * p->K)); /* cached after the first call */
        dt_im2col_nhwc_bf16_cuda(pr->dx, p->N, p->C, p->H, p->W, pr->g, p->Ho, p->Wo, buf);
        col = buf;
    }
    dt_gemm_call(DT_GPU, DT_BF16, DT_MATH_FP32, 1, 0, p->Cout, p->K, p->M, 1.0f, pr->ddy, p->Cout, col, p->K, 0.0f,
                 pr->ddw, DT_F32, p->K);
    dt_gpu_free(buf);
}
static void run_128_wgrad(problem *pr) { launch_wgrad<128, 128, 64, 32, 4>(pr->p, pr->ddy, pr->ddw); }
static void run_64_wgrad(problem *pr) { launch_wgrad<64, 128, 32, 32, 4>(pr->p, pr->ddy, pr->ddw); }

static const variant VARIANTS[] = {
    {"ref_cublas", PASS_FPROP, 0, any_shape, run_ref, 1},
    {"igemm_128x128", PASS_FPROP, 0, any_shape, run_128, 0},
    {"igemm_64x64", PASS_FPROP, 0, any_shape, run_64, 0},
    {"igemm_1x1_128x128", PASS_FPROP, 0, one_by_one, run_1x1, 0},
    {"igemm_128x128_f32", PASS_FPROP, 1, any_shape, run_128_f32, 0},
    {"igemm_128x128_splitk", PASS_FPROP, 0, splitk_fits, run_128_splitk, 0},
    {"ref_cublas_dgrad", PASS_DGRAD, 0, dgrad_shape, run_ref_dgrad, 1},
    {"igemm_128x128_dgrad", PASS_DGRAD, 0, dgrad_shape, run_128_dgrad, 0},
    {"igemm_64x64_dgrad", PASS_DGRAD, 0, dgrad_shape, run_64_dgrad, 0},
    {"ref_cublas_wgrad", PASS_WGRAD, 1, any_shape, run_ref_wgrad, 1},
    {"igemm_128x128_wgrad", PASS_WGRAD, 1, any_shape, run_128_wgrad, 0},
    {"igemm_64x128_wgrad", PASS_WGRAD, 1, any_shape, run_64_wgrad, 0},
};
enum { NVARIANTS = sizeof VARIANTS / sizeof *VARIANTS };

/* Runs variant v once, its output (its pass's y: pr->dy or pr->ddx) poisoned first (0xFF bytes: bf16 0xFFFF and fp32
 * 0xFFFFFFFF are NaN, so an element left unwritten fails). ref_cublas writes its own tensor: a
 * block of the same size is poisoned and released first, so that the caching allocator most
 * likely hands that block out (best effort; the library's kernels are also checked on poisoned
 * memory by make test-gpu). */
static void run_once(const variant *v, problem *pr) {
    const gemm_view *vw = view_of(pr, v->pass);
    const size_t ybytes = (size_t)pr->p.M * pr->p.Cout * (v->f32out ? 4 : 2);
    dt_memset_gpu(vw->y, 0xff, sizeof(float) * (size_t)vw->M * vw->NO);
    if (v->run == run_ref) {
        dt_scope_begin();
        dt_tensor *pz = dt_tensor_new4_as(DT_GPU, DT_BF16, DT_NHWC, pr->p.N, pr->p.Cout, pr->p.Ho, pr->p.Wo);
        dt_memset_gpu(pz->data, 0xff, ybytes);
        dt_tensor_release(pz);
        run_ref(pr);
        DT_CHECK(cudaMemcpyAsync(pr->dy, ref_last->data, ybytes, cudaMemcpyDeviceToDevice, dt_stream()));
        dt_scope_end();
    } else {
        v->run(pr);
    }
    dt_gpu_sync();
}

/* timed call: ref_cublas inside a scope (its output goes back to the caching allocator) */
typedef struct {
    const variant *v;
    problem *pr;
} timed_arg;
static void timed(void *a_) {
    timed_arg *a = (timed_arg *)a_;
    if (a->v->run == run_ref) {
        dt_scope_begin();
        run_ref(a->pr);
        dt_scope_end();
    } else {
        a->v->run(a->pr);
    }
}

/* ================================================================== validation */

/* The CPU reference of y[m][co] in double from the bf16 values, and sum_k |a*b| (the error
 * scale: bf16 rounding of y is <= 2^-8 |y| <= 2^-8 S, fp32 accumulation adds ~K 2^-24 S). */
static double ref_fprop(const problem *pr, int m, int co, double *abs_sum) {
    const conv_params *p = &pr->p;
    const int hw = p->Ho * p->Wo, n = m / hw, rem = m - n * hw, ho = rem / p->Wo, wo = rem - ho * p->Wo;
    double s = 0, sa = 0;
    for (int r = 0; r < p->KH; r++) {
        const int hi = ho * p->SH - p->PH + r * p->DH;
        if (hi < 0 || hi >= p->H) continue;
        for (int t = 0; t < p->KW; t++) {
            const int wi = wo * p->SW - p->PW + t * p->DW;
            if (wi < 0 || wi >= p->W) continue;
            const dt_bf16 *xa = pr->hx + (((int64_t)n * p->H + hi) * p->W + wi) * p->C;
            const dt_bf16 *wb = pr->hw + (int64_t)co * p->K + (int64_t)(r * p->KW + t) * p->C;
            for (int c = 0; c < p->C; c++) {
                const double prod = (double)dt_bf16_to_float(xa[c]) * (double)dt_bf16_to_float(wb[c]);
                s += prod, sa += fabs(prod);
            }
        }
    }
    *abs_sum = sa;
    return s;
}

/* dgrad's reference: dx[n][h][w][c] = sum over the taps (r, t) that some output position
 * (ho, wo) reads it through, and over co, of dy[n][ho][wo][co] * w[co][r][t][c]. */
static double ref_dgrad(const problem *pr, int m, int c, double *abs_sum) {
    const conv_params *p = &pr->p;
    const int hw = p->H * p->W, n = m / hw, rem = m - n * hw, h = rem / p->W, w = rem - h * p->W;
    double s = 0, sa = 0;
    for (int r = 0; r < p->KH; r++) {
        const int hh = h + p->PH - r * p->DH;
        if (hh < 0 || hh % p->SH || hh / p->SH >= p->Ho) continue;
        for (int t = 0; t < p->KW; t++) {
            const int ww = w + p->PW - t * p->DW;
            if (ww < 0 || ww % p->SW || ww / p->SW >= p->Wo) continue;
            const dt_bf16 *dya = pr->hdy + (((int64_t)n * p->Ho + hh / p->SH) * p->Wo + ww / p->SW) * p->Cout;
            for (int co = 0; co < p->Cout; co++) {
                const double prod = (double)dt_bf16_to_float(dya[co]) *
                                    (double)dt_bf16_to_float(pr->hw[(int64_t)co * p->K + (int64_t)(r * p->KW + t) * p->C + c]);
                s += prod, sa += fabs(prod);
            }
        }
    }
    *abs_sum = sa;
    return s;
}

/* wgrad's reference: dw[co][k] = sum over m = (n, ho, wo) of dy[n][ho][wo][co] times x at
 * output m's tap (r, t) of k = (r, t, c), channel c (0 outside). */
static double ref_wgrad(const problem *pr, int co, int k, double *abs_sum) {
    const conv_params *p = &pr->p;
    const int tap = k / p->C, c = k - tap * p->C, r = tap / p->KW, t = tap - r * p->KW;
    double s = 0, sa = 0;
    for (int n = 0; n < p->N; n++)
        for (int ho = 0; ho < p->Ho; ho++) {
            const int hi = ho * p->SH - p->PH + r * p->DH;
            if (hi < 0 || hi >= p->H) continue;
            for (int wo = 0; wo < p->Wo; wo++) {
                const int wi = wo * p->SW - p->PW + t * p->DW;
                if (wi < 0 || wi >= p->W) continue;
                const double prod =
                    (double)dt_bf16_to_float(pr->hdy[(((int64_t)n * p->Ho + ho) * p->Wo + wo) * p->Cout + co]) *
                    (double)dt_bf16_to_float(pr->hx[(((int64_t)n * p->H + hi) * p->W + wi) * p->C + c]);
                s += prod, sa += fabs(prod);
            }
        }
    *abs_sum = sa;
    return s;
}

static double ref_at(const problem *pr, int pass, int m, int col, double *abs_sum) {
    return pass == PASS_DGRAD   ? ref_dgrad(pr, m, col, abs_sum)
           : pass == PASS_WGRAD ? ref_wgrad(pr, m, col, abs_sum)
                                : ref_fprop(pr, m, col, abs_sum);
}

static float y_at(const void *h, int f32, int64_t i) {
    return f32 ? ((const float *)h)[i] : dt_bf16_to_float(((const dt_bf16 *)h)[i]);
}

typedef struct {
    int ok;
    int64_t checked, bad, nan;     /* against the CPU reference (sampled, or all for odd shapes) */
    double worst;                  /* max |y - ref| / tolerance */
    int64_t vs_n, vs_same, vs_bad; /* against ref_cublas: all elements */
    double vs_max;
} check;

/* The samples: every (m, co) of an odd shape, else `samples` random ones plus the corners
 * (first and last row and column: the edge tiles). */
static int64_t make_samples(const problem *pr, const gemm_view *p, int samples, dt_rng *r, int **ms, int **cs) {
    const int64_t all = (int64_t)p->M * p->NO;
    const int64_t ns = pr->sh->odd ? all : samples + 4;
    *ms = (int *)dt_xmalloc(sizeof(int) * (size_t)ns);
    *cs = (int *)dt_xmalloc(sizeof(int) * (size_t)ns);
    for (int64_t i = 0; i < ns; i++) {
        if (pr->sh->odd) (*ms)[i] = (int)(i / p->NO), (*cs)[i] = (int)(i % p->NO);
        else if (i < 4) (*ms)[i] = i & 1 ? p->M - 1 : 0, (*cs)[i] = i & 2 ? p->NO - 1 : 0;
        else (*ms)[i] = (int)dt_rng_below(r, (uint32_t)p->M), (*cs)[i] = (int)dt_rng_below(r, (uint32_t)p->NO);
    }
    return ns;
}

/* hy: the variant's y [M, NO] (its pass's view p) on the host; ref, sabs: the CPU reference at
 * the samples; hc: the pass's library output (fp32 when hc_f32, else bf16) or NULL. dgrad's
 * library output rounds twice (dcol, then dx), so there the comparison with it is reported, not
 * required: the double reference is the judge. */
static check check_output(const gemm_view *p, int pass, const void *hy, int f32, int64_t ns, const int *ms,
                          const int *cs, const double *ref, const double *sabs, const void *hc, int hc_f32) {
    check k;
    memset(&k, 0, sizeof k);
    const int64_t all = (int64_t)p->M * p->NO;
    double smean = 0;
    for (int64_t i = 0; i < all; i++)
        if (isnan(y_at(hy, f32, i))) k.nan++;
    for (int64_t i = 0; i < ns; i++) {
        const double y = y_at(hy, f32, (int64_t)ms[i] * p->NO + cs[i]);
        const double tol = ldexp(sabs[i], -7) + 1e-3, e = fabs(y - ref[i]);
        smean += sabs[i] / (double)ns;
        if (!(e <= tol)) k.bad++;
        if (e / tol > k.worst || isnan(e)) k.worst = isnan(e) ? INFINITY : e / tol;
    }
    k.checked = ns;
    /* against ref_cublas, every element: bitwise equal, or within one bf16 rounding of the larger
     * plus the fp32 accumulation differences (absolute: 1e-3 + 2^-16 times the mean S) */
    if (hc) {
        const double abs_tol = 1e-3 + ldexp(smean, -16);
        for (int64_t i = 0; i < all; i++) {
            const float a = y_at(hy, f32, i), b = y_at(hc, hc_f32, i);
            k.vs_n++;
            if (f32 == hc_f32 && !memcmp((const char *)hy + i * (f32 ? 4 : 2), (const char *)hc + i * (f32 ? 4 : 2), f32 ? 4 : 2)) {
                k.vs_same++;
                continue;
            }
            const double d = fabs((double)a - b), lim = ldexp(fmax(fabs(a), fabs(b)), -7) + abs_tol;
            if (!(d <= lim)) k.vs_bad++;
            if (d > k.vs_max || isnan(d)) k.vs_max = isnan(d) ? INFINITY : d;
        }
    }
    k.ok = k.bad == 0 && k.nan == 0 && (k.vs_bad == 0 || pass == PASS_DGRAD);
    return k;
}

/* ================================================================== main: validate, time, table */

typedef struct {
    const char *shape, *variant, *pass, *status;
    double ms, tflops, vs_ref;
    int r18, r50;
} row;

static int shape_picked(const conv_shape *sh, const char *list) {
    if (!list) return 1; /* default: every shape */
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (!strcmp(tok, "all")) return 1;
        if (!strcmp(tok, "r18") && sh->r18) return 1;
        if (!strcmp(tok, "r50") && sh->r50) return 1;
        if (!strcmp(tok, "odd") && sh->odd) return 1;
        if (!strcmp(tok, sh->name)) return 1;
    }
    return 0;
}

static void usage(void) {
    fprintf(stderr, "usage: conv_lab [--batch N] [--reps N] [--shapes NAME,...|r18|r50|odd|all] [--csv FILE] [--quick] "
                    "[--seed S] [--skip-time] [--pass fprop,dgrad,wgrad]\nshapes:");
    for (int i = 0; i < NSHAPES; i++) fprintf(stderr, " %s", SHAPES[i].name);
    fprintf(stderr, "\n");
}

int main(int argc, char **argv) {
    int batch = 64, reps = 20, warmup = 3, samples = 4096, do_time = 1, quick = 0, passes = 0;
    const char *shapes = NULL, *csv_path = NULL;
    uint64_t seed = (uint64_t)time(NULL);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--shapes") && i + 1 < argc) shapes = argv[++i];
        else if (!strcmp(argv[i], "--csv") && i + 1 < argc) csv_path = argv[++i];
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--quick")) quick = 1, reps = 5, warmup = 1, samples = 1024;
        else if (!strcmp(argv[i], "--skip-time")) do_time = 0;
        else if (!strcmp(argv[i], "--pass") && i + 1 < argc) {
            char buf[64];
            snprintf(buf, sizeof buf, "%s", argv[++i]);
            for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                int found = 0;
                for (int q = 0; q < NPASSES; q++)
                    if (!strcmp(tok, PASS_NAME[q])) passes |= 1 << q, found = 1;
                if (!found) {
                    usage();
                    return 2;
                }
            }
        }
        else {
            usage();
            return 2;
        }
    }
    if (quick && !shapes) shapes = "r18,odd"; /* --quick: ResNet-18's convs and the odd shapes */
    if (!passes) passes = (1 << NPASSES) - 1;  /* default: every pass */
    if (batch < 1 || reps < 1) {
        usage();
        return 2;
    }
    if (dt_gpu_count() == 0) {
        fprintf(stderr, "conv_lab: no CUDA GPU visible\n");
        return 1;
    }
    dt_gpu_init(0);
    FILE *csv = NULL;
    if (csv_path && !(csv = fopen(csv_path, "w"))) dt_fatal("conv_lab: cannot write %s", csv_path);
    if (csv) fprintf(csv, "shape,pass,variant,status,M,N,K,ms,tflops,vs_ref_cublas,worst_err_over_tol,bitwise_vs_ref_pct\n");
    printf("conv_lab: batch %d, seed %llu (--seed to repeat), %d reps after %d warm-up, %s\n", batch,
           (unsigned long long)seed, reps, warmup, "stem C = 3 padded to 8 for the igemm variants");

    row *rows = (row *)dt_xmalloc(sizeof(row) * NSHAPES * NVARIANTS); /* a variant runs one pass */
    int nrows = 0, fails = 0;
    for (int si = 0; si < NSHAPES; si++) {
        const conv_shape *sh = &SHAPES[si];
        if (!shape_picked(sh, shapes)) continue;
        problem pr;
        problem_make(&pr, sh, batch, dt_hash64(seed ^ (uint64_t)(si + 1)));
        /* the conv's FLOPs, the same for both passes: 2 N Ho Wo Cout KH KW C (the real C) */
        const double flop = 2.0 * pr.p.M * pr.p.Cout * ((double)pr.p.KH * pr.p.KW * pr.creal);
        for (int pass = 0; pass < NPASSES; pass++) {
            if (!(passes & (1 << pass))) continue;
            const gemm_view *p = view_of(&pr, pass);
            const int64_t all = (int64_t)p->M * p->NO;
            /* the CPU reference at the samples */
            dt_rng r;
            dt_rng_seed(&r, dt_hash64(seed + 1000 + (uint64_t)si + 7919 * (uint64_t)pass));
            int *ms, *cs;
            /* wgrad's reference sums over all N*Ho*Wo positions: an eighth of the samples */
            const int64_t ns = make_samples(&pr, p, pass == PASS_WGRAD ? samples / 8 : samples, &r, &ms, &cs);
            double *ref = (double *)dt_xmalloc(sizeof(double) * (size_t)ns);
            double *sabs = (double *)dt_xmalloc(sizeof(double) * (size_t)ns);
            for (int64_t i = 0; i < ns; i++) ref[i] = ref_at(&pr, pass, ms[i], cs[i], &sabs[i]);
            void *hy = dt_xmalloc(sizeof(float) * (size_t)all);
            void *hc = dt_xmalloc(sizeof(float) * (size_t)all); /* the library's output, as it is stored */
            double ref_ms = NAN;
            int have_ref = 0, hc_f32 = 0;
            for (int vi = 0; vi < NVARIANTS; vi++) {
                const variant *v = &VARIANTS[vi];
                if (v->pass != pass || !v->supports(&pr)) continue;
                row *rw = &rows[nrows++];
                memset(rw, 0, sizeof *rw);
                rw->shape = sh->name, rw->variant = v->name, rw->pass = PASS_NAME[pass], rw->r18 = sh->r18, rw->r50 = sh->r50;
                rw->ms = rw->tflops = rw->vs_ref = NAN;
                run_once(v, &pr);
                dt_copy_d2h(hy, p->y, (size_t)all * (v->f32out ? 4 : 2));
                check k = check_output(p, pass, hy, v->f32out, ns, ms, cs, ref, sabs, v->ref || !have_ref ? NULL : hc,
                                       hc_f32);
                if (v->ref && k.ok) memcpy(hc, hy, (size_t)all * (v->f32out ? 4 : 2)), have_ref = 1, hc_f32 = v->f32out;
                printf("validate %-10s %-20s %s M %7d N %5d K %5d: %s  cpu %lld/%lld bad (worst %.2f of tol), %lld NaN",
                       sh->name, v->name, PASS_NAME[pass], p->M, p->NO, p->K, k.ok ? "PASS" : "FAIL", (long long)k.bad,
                       (long long)k.checked, k.worst, (long long)k.nan);
                if (k.vs_n)
                    printf(", vs the library %.1f%% bitwise, %lld beyond tol%s, max |diff| %.2e", 100.0 * k.vs_same / k.vs_n,
                           (long long)k.vs_bad, pass == PASS_DGRAD ? " (reported only)" : "", k.vs_max);
                printf("\n");
                rw->status = k.ok ? "PASS" : "FAIL";
                if (!k.ok) fails++;
                if (k.ok && do_time) {
                    timed_arg ta = {v, &pr};
                    rw->ms = dt_bench_time(timed, &ta, warmup, reps);
                    rw->tflops = flop / (rw->ms * 1e-3) / 1e12;
                    if (v->ref) ref_ms = rw->ms;
                    rw->vs_ref = rw->ms / ref_ms;
                }
                if (csv)
                    fprintf(csv, "%s,%s,%s,%s,%d,%d,%d,%.5f,%.2f,%.4f,%.3f,%.2f\n", sh->name, rw->pass, v->name, rw->status,
                            p->M, p->NO, p->K, rw->ms, rw->tflops, rw->vs_ref, k.worst,
                            k.vs_n ? 100.0 * k.vs_same / k.vs_n : NAN);
            }
            free(ms), free(cs), free(ref), free(sabs), free(hy), free(hc);
        }
        problem_free(&pr);
    }

    if (do_time) {
        printf("\n## conv_lab, bf16 NHWC, batch %d (ms: median of %d; TFLOP/s: the conv's FLOPs on the real C; x ref = "
               "ms / the pass's library ms, < 1 is faster)\n",
               batch, reps);
        printf("%-10s %-5s %-20s %-5s %9s %8s %7s\n", "shape", "pass", "variant", "", "ms", "TFLOP/s", "x ref");
        for (int i = 0; i < nrows; i++)
            printf("%-10s %-5s %-20s %-5s %9.4f %8.1f %7.3f\n", rows[i].shape, rows[i].pass, rows[i].variant, rows[i].status,
                   rows[i].ms, rows[i].tflops, rows[i].vs_ref);
        /* per network: each variant's time summed over the convs it ran, weighted by how many
         * the net has (a variant that skipped or failed a shape is marked incomplete); a shape
         * whose pass the library does not run (the stem's dgrad) is not the net's */
        printf("\n%-20s %-5s %14s %14s\n", "variant", "pass", "ResNet-18 ms", "ResNet-50 ms");
        for (int vi = 0; vi < NVARIANTS; vi++) {
            const char *refname = NULL;
            for (int vj = 0; vj < NVARIANTS; vj++)
                if (VARIANTS[vj].pass == VARIANTS[vi].pass && VARIANTS[vj].ref) refname = VARIANTS[vj].name;
            double s18 = 0, s50 = 0;
            int miss18 = 0, miss50 = 0, any = 0;
            for (int si = 0; si < NSHAPES; si++) {
                const conv_shape *sh = &SHAPES[si];
                if (!shape_picked(sh, shapes) || sh->odd) continue;
                double ms = NAN;
                int applies = 0;
                for (int i = 0; i < nrows; i++) {
                    if (strcmp(rows[i].shape, sh->name)) continue;
                    if (refname && !strcmp(rows[i].variant, refname)) applies = 1;
                    if (!strcmp(rows[i].variant, VARIANTS[vi].name)) ms = rows[i].ms;
                }
                if (!applies) continue;
                if (!isnan(ms)) any = 1;
                if (sh->r18) {
                    if (isnan(ms)) miss18++;
                    else s18 += sh->r18 * ms;
                }
                if (sh->r50) {
                    if (isnan(ms)) miss50++;
                    else s50 += sh->r50 * ms;
                }
            }
            if (!any) continue;
            printf("%-20s %-5s %11.3f%-3s %11.3f%-3s\n", VARIANTS[vi].name, PASS_NAME[VARIANTS[vi].pass], s18,
                   miss18 ? " (i)" : "", s50, miss50 ? " (i)" : "");
        }
        printf("(i): incomplete - some of the net's convs not run (shape not picked, not supported, or FAIL)\n");
    }
    printf("\nconv_lab: %d validation failure%s\n", fails, fails == 1 ? "" : "s");
    if (csv) fclose(csv);
    free(rows);
    return fails ? 1 : 0;
}
