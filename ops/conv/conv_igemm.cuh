/* conv_igemm.cuh: the implicit-GEMM tensor-core convolution's device code (bf16 channels last,
 * fp32 accumulation), shared by the library's launchers (conv_igemm.cu) and the kernel lab
 * (bench/lab/conv_lab.cu, which validates and times these same templates in more tile
 * configurations than ship, and adds its own loaders and epilogues through the customization
 * points below: bench/lab/conv_lab_variants.cuh). The algorithm, the tiles and the numbers:
 * docs/conv.md.
 *
 * The problem, shapes on every buffer:
 *   x [N, H, W, C]        bf16 NHWC            (C % 8 == 0, Cout % 8 == 0: a 16-byte chunk
 *   w [Cout, kh, kw, C]   bf16 (NHWC weight)    of 8 channels never straddles two taps)
 *   y [N, Ho, Wo, Cout]   bf16 NHWC, fp32 accumulation, one rounding at the end
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
 * What varies is a policy type of the kernel's: the A-operand loader (a_conv below: im2col,
 * dgrad zero-filled or split by output parity; the lab adds a 1x1 conv's rows and the deformable
 * sampler), the epilogue (epi_bf16: bf16 with bias and beta; the lab adds fp32, split-K
 * partials and the batch norm's statistics) and wgrad's B loader (wb_im2col; the lab adds the
 * deformable sampler's); the mainloop (cp_async_mainloop) is one.
 * Every sum has a fixed order (no atomics): the results are bitwise reproducible. */
#ifndef DT_K_CONV_IGEMM_CUH
#define DT_K_CONV_IGEMM_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <stdint.h>

#include "core/dt_alloc.h"
#include "core/dt_common.h"
#include "core/dt_cuda.h"
#include "core/dt_device.h"

namespace dt_igemm {

typedef __nv_bfloat16 bf16;

/* One convolution as the kernels see it (wgrad's problem). x, w, y device pointers (from the
 * caching allocator: 256-byte aligned, so every 8-channel chunk is 16-byte aligned when
 * C % 8 == 0 and Cout % 8 == 0). */
struct conv_params {
    const bf16 *x; /* [N, H, W, C] */
    const bf16 *w; /* [Cout, KH, KW, C] = B^T [Cout, K] */
    void *y;       /* [N, Ho, Wo, Cout] = [M, Cout] */
    int N, H, W, C, Cout, KH, KW, SH, SW, PH, PW, DH, DW, Ho, Wo;
    int M, K; /* M = N*Ho*Wo, K = KH*KW*C */
};

/* The GEMM a kernel runs, for either pass (conv_igemm.cu's passes build it from a problem):
 *   y [M, NO] = A [M, K] . B [K, NO],   B^T = b [NO, K] row-major (K contiguous),
 *   row m = (n, oh, ow) of an [N, OH, OW] output image; k = (r, t, ac): tap (r, t) of the KH x KW
 *   window and channel ac of A's source a [N, AH, AW, AC] (AC % 8 == 0, NO % 8 == 0).
 * fprop: a = x, (AH, AW, AC) = (H, W, C), (OH, OW) = (Ho, Wo), NO = Cout, b = w [Cout, KH, KW, C];
 *   A[m][k] = x at (oh*SH - PH + r*DH, ow*SW - PW + t*DW).
 * dgrad: a = dy, (AH, AW, AC) = (Ho, Wo, Cout), (OH, OW) = (H, W), NO = C, b = wT [C, KH, KW, Cout]
 *   (w with its channel axes swapped, made once); A[m][k] = dy at ((h + PH - r*DH) / SH,
 *   (w + PW - t*DW) / SW) where both divide exactly and land inside, else 0 - the adjoint of
 *   fprop's gather, so dx = A . B is exact, and for stride 2 three taps in four are zeros.
 * A loader or an epilogue that needs more (the lab's offsets, its statistics buffer) takes a
 * view type derived from this one; k_igemm passes its view type through. */
struct gemm_view {
    const bf16 *a, *b;
    void *y; /* bf16 [M, NO] (a lab epilogue may write fp32 there) */
    const float *bias; /* [NO] fp32 added before the rounding, or NULL */
    float beta;        /* y = round(beta * y + acc (+ bias)): 0 writes, 1 accumulates (dx) */
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
 * into stage st; mma(st) consumes stage st; fill(st), after the mma, finishes stage st's tile
 * where its loads went to registers (the lab's deformable loader: the blend and the shared-memory
 * store happen while the next tiles' copies are in flight; a no-op for the others). On return
 * every copy has landed. */
template <int STAGES, typename Load, typename Mma, typename Fill>
__device__ __forceinline__ void cp_async_mainloop(int n, Load load, Mma mma, Fill fill) {
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < n) load(s, s), fill(s);
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
        if (nt < n) fill(nt % STAGES); /* stage nt % STAGES is read from iteration nt on, after its barrier */
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


/* ---- the tile configuration. BK bf16 of k a stage (32 or 64) = BK/8 16-byte chunks per smem
 * row; a row is padded to BK + 8 elements (80 or 144 bytes) so that the 8 row addresses of one
 * ldmatrix matrix fall on 8 distinct 16-byte bank groups of the 128-byte bank line (80*i mod 128
 * = 0, 80, 32, 112, 64, 16, 96, 48; 144*i mod 128 = 0, 16, 32, ...): no bank conflicts on the
 * reads, at most 2-way on the cp.async writes. */
template <int BM_, int BN_, int WM_, int WN_, int STAGES_, int BK_ = 32> struct tile_cfg {
    static constexpr int BM = BM_, BN = BN_, WM = WM_, WN = WN_, STAGES = STAGES_; /* CTA and warp tiles */
    static constexpr int BK = BK_, PITCH = BK + 8, CPR = BK / 8; /* CPR: 16-byte chunks a row */
    static constexpr int WARPS_M = BM / WM, WARPS_N = BN / WN, THREADS = 32 * WARPS_M * WARPS_N;
    static constexpr int MI = WM / 16, NI = WN / 8;             /* mma tiles per warp */
    static constexpr int A_IT = BM * CPR / THREADS, B_IT = BN * CPR / THREADS; /* 16-B chunks a thread */
    static constexpr int ROWS_PER_PASS = THREADS / CPR;
    static constexpr int CPITCH = BN + 8; /* the epilogue's fp32 C tile row (bank-conflict free) */
    static constexpr size_t PIPE_BYTES = (size_t)STAGES * (BM + BN) * PITCH * sizeof(bf16);
    static constexpr size_t EPI_BYTES = (size_t)BM * CPITCH * sizeof(float);
    static constexpr size_t SMEM = PIPE_BYTES > EPI_BYTES ? PIPE_BYTES : EPI_BYTES;
    static_assert(BK == 32 || BK == 64, "BK");
    static_assert(BM % WM == 0 && BN % WN == 0 && WM % 16 == 0 && WN % 16 == 0, "warp tile");
    static_assert(A_IT * THREADS == BM * CPR && B_IT * THREADS == BN * CPR, "loader: whole chunks a thread");
    static_assert(NI % 2 == 0, "B fragments come in pairs of n-tiles (one ldmatrix.x4)");
};

/* ---- k_igemm's A-operand loaders: what A[m][k] is, the one part of the kernel that differs
 * between the convolutions it runs (CUTLASS's "iterators"). B is always b [NO, K] as stored.
 * A loader is a class template over the tile configuration T; k_igemm holds one object a
 * thread (its A rows' state) and its shared-memory part (A::smem), and calls
 *   host:   rows0(p)    the rows grid x is sized for;  classes(p)  grid z;  check(p)  refuses what
 *                       the loader cannot run (a grid z over 65535 among it)
 *   device: begin(p, sh, m0)   this CTA's GEMM: rows M and reduction K (the view's, or a parity
 *                              class's); false when the CTA has no rows (it returns at once)
 *           rows(p, m0, krow)  the thread's A rows m0 + krow + i*ROWS_PER_PASS, i < A_IT
 *           load(p, sh, da, k, kin)  issues the thread's chunks of k slice column k (kin: k < K)
 *                              into da (row i at i*ROWS_PER_PASS*PITCH); returns B's column for k
 *           fill(da)           after the stage's mma: finishes chunks that load kept in registers
 *           out_row(p, m)      the output row of GEMM row m
 * a_whole holds the defaults (the view's GEMM, one class, rows as they are, nothing to fill).
 * The library's loaders are a_conv's three kinds:
 *   A_IM2COL       fprop: x at tap (r, t) of output position m's window, 0 outside (cp.async)
 *   A_DGRAD        dgrad: dy through the mirrored taps, 0 where no output reads the pixel
 *   A_DGRAD_SPLIT  dgrad of a strided conv as SH*SW sub-GEMMs, one per output parity class
 *                  (h % SH, w % SW) = blockIdx.z: a class's pixels are read through the same taps
 *                  (those with (ph + PH - r*DH) % SH == 0, likewise for t), so its GEMM runs those
 *                  taps only - K = taps * Cout, about a quarter of A_DGRAD's for stride 2, whose
 *                  other taps are zero-filled. Rows m are the class's pixels (n, hq, wq) at
 *                  (hq*SH + ph, wq*SW + pw); the epilogue writes them to their dx rows. B's k maps
 *                  through the class's tap list. (CUTLASS's strided dgrad does the same split.)
 * The lab's (bench/lab/conv_lab_variants.cuh): a 1x1 conv's rows and the deformable sampler. */
struct a_whole {
    struct smem {};
    int M, K; /* this CTA's GEMM: rows and reduction */
    static int64_t rows0(const gemm_view &p) { return p.M; }
    static int classes(const gemm_view &) { return 1; }
    static void check(const gemm_view &) {}
    __device__ __forceinline__ bool begin(const gemm_view &p, smem &, int) {
        M = p.M, K = p.K;
        return true;
    }
    __device__ __forceinline__ void fill(bf16 *) const {}
    __device__ __forceinline__ int64_t out_row(const gemm_view &, int m) const { return m; }
};

enum conv_kind { A_IM2COL = 0, A_DGRAD = 1, A_DGRAD_SPLIT = 2 };

template <class T, int KIND> struct a_conv : a_whole {
    static constexpr bool SPLIT = KIND == A_DGRAD_SPLIT, DGRAD = KIND != A_IM2COL;
    /* A_DGRAD_SPLIT: the class's taps - rows r[0 .. n[0]) x columns t[0 .. n[1]) of the window */
    struct smem {
        int r[SPLIT ? 8 : 1], t[SPLIT ? 8 : 1], n[2];
    };
    /* A_DGRAD_SPLIT: this CTA's parity class (ph, pw), its rows (n, hq, wq) over OHc x OWc
     * pixels an image, nt taps a window row */
    int ph, pw, OHc, OWc, nt;
    /* per A row: the image's base, and its window's origin: fprop the top-left source position
     * (tap (r, t) reads h0 + r*DH), dgrad the output position plus the padding (tap (r, t)
     * reads (h0 - r*DH) / SH). A row past M gets h0 = -2^30: every tap falls outside, zero-filled */
    const bf16 *base[T::A_IT];
    int h0[T::A_IT], w0[T::A_IT];

    /* A_DGRAD_SPLIT: one grid z per parity class, x sized for class 0 (the largest) */
    static int64_t rows0(const gemm_view &p) {
        return SPLIT ? (int64_t)p.N * ((p.OH + p.SH - 1) / p.SH) * ((p.OW + p.SW - 1) / p.SW) : p.M;
    }
    static int classes(const gemm_view &p) { return SPLIT ? p.SH * p.SW : 1; }
    static void check(const gemm_view &p) {
        if (SPLIT && (p.SH * p.SW > 65535 || p.KH > 8 || p.KW > 8))
            dt_fatal("conv2d (implicit GEMM): the split dgrad takes kernels up to 8x8 and up to 65535 parity classes "
                     "(kernel %dx%d, stride %dx%d)", p.KH, p.KW, p.SH, p.SW);
    }

    __device__ __forceinline__ bool begin(const gemm_view &p, smem &sh, int m0) {
        ph = 0, pw = 0, OHc = p.OH, OWc = p.OW, M = p.M, K = p.K, nt = 1;
        if (!SPLIT) return true;
        ph = (int)blockIdx.z / p.SW, pw = (int)blockIdx.z % p.SW;
        OHc = (p.OH - ph + p.SH - 1) / p.SH, OWc = (p.OW - pw + p.SW - 1) / p.SW;
        M = p.N * OHc * OWc;
        if (m0 >= M) return false; /* the grid is sized for class 0, the largest */
        if (threadIdx.x == 0) {
            int nr = 0, ntt = 0;
            for (int r = 0; r < p.KH && nr < 8; r++)
                if (((ph + p.PH - r * p.DH) % p.SH + p.SH) % p.SH == 0) sh.r[nr++] = r;
            for (int t = 0; t < p.KW && ntt < 8; t++)
                if (((pw + p.PW - t * p.DW) % p.SW + p.SW) % p.SW == 0) sh.t[ntt++] = t;
            sh.n[0] = nr, sh.n[1] = ntt;
        }
        __syncthreads();
        nt = sh.n[1];
        K = sh.n[0] * sh.n[1] * p.AC;
        return true;
    }

    __device__ __forceinline__ void rows(const gemm_view &p, int m0, int krow) {
#pragma unroll
        for (int i = 0; i < T::A_IT; i++) {
            const int m = m0 + krow + i * T::ROWS_PER_PASS;
            base[i] = p.a;
            h0[i] = -(1 << 30);
            w0[i] = 0;
            if (m < M) {
                const int hw = OHc * OWc, n = m / hw, rem = m - n * hw;
                int ho = rem / OWc, wo = rem - ho * OWc;
                if (SPLIT) ho = ho * p.SH + ph, wo = wo * p.SW + pw; /* the class's pixel */
                base[i] = p.a + (int64_t)n * p.AH * p.AW * p.AC;
                h0[i] = DGRAD ? ho + p.PH : ho * p.SH - p.PH;
                w0[i] = DGRAD ? wo + p.PW : wo * p.SW - p.PW;
            }
        }
    }

    /* k -> its tap (r, t) of the window and channel c of A's source; A_DGRAD_SPLIT: the class's
     * tap i = tap, row i / nt and column i % nt of its list (a class without taps has K = 0:
     * nothing is in range) */
    __device__ __forceinline__ void decode(const gemm_view &p, const smem &sh, int k, bool kin, int &r, int &t, int &c,
                                           int &tap) const {
        tap = k / p.AC;
        c = k - tap * p.AC;
        r = 0, t = 0;
        if (SPLIT) {
            if (kin) r = sh.r[tap / nt], t = sh.t[tap % nt];
        } else {
            r = tap / p.KW;
            t = tap - r * p.KW;
        }
    }

    __device__ __forceinline__ int load(const gemm_view &p, const smem &sh, bf16 *da, int k, bool kin) const {
        int r, t, c, tap;
        decode(p, sh, k, kin, r, t, c, tap);
#pragma unroll
        for (int i = 0; i < T::A_IT; i++) {
            const bf16 *src = p.a;
            int bytes = 0;
            if (DGRAD) {
                const int hh = h0[i] - r * p.DH, ww = w0[i] - t * p.DW;
                if (kin && hh >= 0 && ww >= 0 && hh % p.SH == 0 && ww % p.SW == 0) {
                    const int hi = hh / p.SH, wi = ww / p.SW;
                    if (hi < p.AH && wi < p.AW) src = base[i] + ((int64_t)hi * p.AW + wi) * p.AC + c, bytes = 16;
                }
            } else {
                const int hi = h0[i] + r * p.DH, wi = w0[i] + t * p.DW;
                if (kin && (unsigned)hi < (unsigned)p.AH && (unsigned)wi < (unsigned)p.AW)
                    src = base[i] + ((int64_t)hi * p.AW + wi) * p.AC + c, bytes = 16;
            }
            cp_async16(da + i * T::ROWS_PER_PASS * T::PITCH, src, bytes);
        }
        return SPLIT ? (r * p.KW + t) * p.AC + c : k; /* B's column: the full-window k */
    }

    /* A_DGRAD_SPLIT: the class pixel of row m -> its dx row */
    __device__ __forceinline__ int64_t out_row(const gemm_view &p, int m) const {
        if (!SPLIT) return m;
        const int hw = OHc * OWc, n = m / hw, rem = m - n * hw, hq = rem / OWc, wq = rem - hq * OWc;
        return ((int64_t)n * p.OH + hq * p.SH + ph) * p.OW + wq * p.SW + pw;
    }
};
template <class T> using a_im2col = a_conv<T, A_IM2COL>;
template <class T> using a_dgrad = a_conv<T, A_DGRAD>;
template <class T> using a_dgrad_split = a_conv<T, A_DGRAD_SPLIT>;

/* ---- k_igemm's epilogues: where a CTA's accumulators go. An epilogue is a type with
 *   k_range(KT_ALL, kt0, KT)   the k tiles kt0 .. kt0 + KT - 1 the CTA sums (all of them; the
 *                              lab's split-K: a range a grid y)
 *   store<T>(p, acc, smem, a, m0, n0, tid)   after the mainloop, whose shared memory it may use
 * The library's is epi_bf16; stage_acc and store_rows_bf16 are its steps, which the lab's
 * epilogues (bench/lab/conv_lab_variants.cuh: fp32 y, split-K partials, the batch norm's
 * statistics) reuse. */

/* The warp's fp32 accumulators into the CTA's tile sC [BM][BN + 8] fp32 in shared memory
 * (float2 writes: lane (g, q) at word 8g + 2q + row*(BN+8) mod 32 - a half-warp's 16 lanes hit
 * 32 distinct words). The caller synchronizes before reading it. */
template <class T> __device__ __forceinline__ float *stage_acc(const float (&acc)[T::MI][T::NI][4], unsigned char *smem, int tid) {
    const int lane = tid & 31, warp = tid >> 5, warp_m = warp / T::WARPS_N, warp_n = warp % T::WARPS_N;
    const int g = lane >> 2, q = lane & 3;
    float *sC = reinterpret_cast<float *>(smem);
#pragma unroll
    for (int i = 0; i < T::MI; i++)
#pragma unroll
        for (int j = 0; j < T::NI; j++) {
            const int row = warp_m * T::WM + i * 16 + g, col = warp_n * T::WN + j * 8 + 2 * q;
            *reinterpret_cast<float2 *>(sC + row * T::CPITCH + col) = make_float2(acc[i][j][0], acc[i][j][1]);
            *reinterpret_cast<float2 *>(sC + (row + 8) * T::CPITCH + col) = make_float2(acc[i][j][2], acc[i][j][3]);
        }
    return sC;
}

/* sC's rows (GEMM rows m0 .. m0+BM, columns n0 .. n0+BN) to bf16 y: whole rows in 16-byte
 * stores at the loader's output rows, each element rounded once (nearest even) after the bias
 * and beta * y are added in fp32 - the same single rounding as col2im's beta path. Each stored
 * chunk is handed to stored(row, ch, h) too (tile row, 8-channel chunk, its four rounded bf16
 * pairs): the lab's statistics epilogue reads them there. */
template <class T, class A, class Stored>
__device__ __forceinline__ void store_rows_bf16(const gemm_view &p, const float *sC, const A &a, int m0, int n0, int tid,
                                                Stored stored) {
    bf16 *y = static_cast<bf16 *>(p.y);
    constexpr int CH = T::BN / 8; /* 16-byte chunks per tile row */
#pragma unroll 1 /* a loop, as it was measured (unrolled it holds more registers) */
    for (int idx = tid; idx < T::BM * CH; idx += T::THREADS) {
        const int row = idx / CH, ch = idx % CH, m = m0 + row, co = n0 + ch * 8;
        if (m >= a.M || co >= p.NO) continue;
        const int64_t orow = a.out_row(p, m);
        const float4 lo = *reinterpret_cast<const float4 *>(sC + row * T::CPITCH + ch * 8);
        const float4 hi = *reinterpret_cast<const float4 *>(sC + row * T::CPITCH + ch * 8 + 4);
        float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
        if (p.bias) {
#pragma unroll
            for (int e = 0; e < 8; e++) v[e] += p.bias[co + e];
        }
        uint4 *dst = reinterpret_cast<uint4 *>(y + orow * p.NO + co);
        if (p.beta != 0.0f) {
            const uint4 old = *dst;
            const bf16 *o = reinterpret_cast<const bf16 *>(&old);
#pragma unroll
            for (int e = 0; e < 8; e++) v[e] = p.beta * __bfloat162float(o[e]) + v[e];
        }
        uint4 out;
        __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&out);
#pragma unroll
        for (int e = 0; e < 4; e++) h[e] = __floats2bfloat162_rn(v[2 * e], v[2 * e + 1]);
        *dst = out;
        stored(row, ch, h);
    }
}

/* bf16 y [M, NO] with the bias and beta: the fp32 tile through shared memory, then rows */
struct epi_bf16 {
    __device__ __forceinline__ static void k_range(int, int &, int &) {}
    template <class T, class A, class V>
    __device__ __forceinline__ static void store(const V &p, const float (&acc)[T::MI][T::NI][4], unsigned char *smem,
                                                 const A &a, int m0, int n0, int tid) {
        const float *sC = stage_acc<T>(acc, smem, tid);
        __syncthreads();
        store_rows_bf16<T>(p, sC, a, m0, n0, tid, [](int, int, const __nv_bfloat162 *) {});
    }
};

/* The implicit GEMM (gemm_view: fprop or dgrad), tile configuration T, A loader A<T>, epilogue
 * E, view type V (gemm_view or one derived from it, for the loader and the epilogue). One CTA
 * computes y[m0 .. m0+BM) x [n0 .. n0+BN); grid.x = one CTA per tile, the n-tile fastest (the
 * CTAs that share an A tile - the big operand - run together, so it is read from DRAM once and
 * from L2 after; all of w fits in L2).
 *
 * Loader: thread tid owns 16-byte chunk kc = tid % CPR (channels 8kc .. 8kc+7 of the k slice) of
 * rows tid/CPR + i*THREADS/CPR of A (and of B). Row decoding (n, ho, wo) happens once per CTA; per
 * k slice each thread decodes its k = kt*BK + 8kc into (r, t, c) once (C % 8 == 0, so the
 * 8 channels of a chunk never straddle two taps, and K % 8 == 0, so a chunk is wholly in or
 * out of K). */
template <class T, template <class> class A, class E, class V>
__global__ void __launch_bounds__(T::THREADS) k_igemm(V p) {
    constexpr int BM = T::BM, BN = T::BN, WM = T::WM, WN = T::WN, STAGES = T::STAGES, BK = T::BK, PITCH = T::PITCH;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sA = reinterpret_cast<bf16 *>(smem_raw); /* [STAGES][BM][PITCH] */
    bf16 *sB = sA + STAGES * BM * PITCH;          /* [STAGES][BN][PITCH] */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int warp_m = warp / T::WARPS_N, warp_n = warp % T::WARPS_N;
    const int ntn = (p.NO + BN - 1) / BN;
    const int m0 = (int)(blockIdx.x / ntn) * BM, n0 = (int)(blockIdx.x % ntn) * BN;
    const int kc = tid % T::CPR, krow = tid / T::CPR; /* this thread's chunk column and first row */

    __shared__ typename A<T>::smem a_sh;
    A<T> a;
    if (!a.begin(p, a_sh, m0)) return;
    a.rows(p, m0, krow);
    /* per B row (an output channel): w's row, or NULL past Cout */
    const bf16 *b_row[T::B_IT];
#pragma unroll
    for (int i = 0; i < T::B_IT; i++) {
        const int co = n0 + krow + i * T::ROWS_PER_PASS;
        b_row[i] = co < p.NO ? p.b + (int64_t)co * p.K : nullptr;
    }

    /* issue the copies of k tile kt into pipeline stage st (A's, then B's at the column A's
     * loader maps k to) */
    auto load_tile = [&](int st, int kt) {
        const int k = kt * BK + kc * 8;
        const bool kin = k < a.K;
        const int kb = a.load(p, a_sh, sA + (st * BM + krow) * PITCH + kc * 8, k, kin);
        bf16 *db = sB + (st * BN + krow) * PITCH + kc * 8;
#pragma unroll
        for (int i = 0; i < T::B_IT; i++) {
            const bool ok = kin && b_row[i] != nullptr;
            cp_async16(db + i * T::ROWS_PER_PASS * PITCH, ok ? b_row[i] + kb : p.b, ok ? 16 : 0);
        }
    };
    auto fill_tile = [&](int st) { a.fill(sA + (st * BM + krow) * PITCH + kc * 8); };

    float acc[T::MI][T::NI][4];
    zero_acc(acc);
    /* this CTA's k tiles: kt0 .. kt0 + KT - 1 */
    const int KT_ALL = (a.K + BK - 1) / BK;
    int kt0 = 0, KT = KT_ALL;
    E::k_range(KT_ALL, kt0, KT);
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
        },
        fill_tile);
    __syncthreads(); /* the pipeline's smem is reused by the epilogue */
    E::template store<T>(p, acc, smem_raw, a, m0, n0, tid);
}

/* split-K's second pass: y[i] = beta * y[i] + (ws[0][i] + ws[1][i] + ... + ws[splits-1][i]),
 * the splits added in order (deterministic), rounded once to OUT (float: wgrad's dw, as it is;
 * the lab adds bf16, fprop's y; beta 1: a weight gradient accumulated into, beta 0: y is not
 * read). ws [splits, n] fp32, y [n], n % 4 == 0 (Cout % 8 == 0): four elements a thread, float4
 * loads. out4<OUT> moves four elements of y as a float4. */
template <typename OUT> struct out4;
template <> struct out4<float> {
    __device__ __forceinline__ static float4 load(const float *y) { return *reinterpret_cast<const float4 *>(y); }
    __device__ __forceinline__ static void store(float *y, float4 a) { *reinterpret_cast<float4 *>(y) = a; }
};
template <typename OUT>
__global__ void k_splitk_sum(const float *__restrict__ ws, int splits, int64_t n, float beta, OUT *__restrict__ y) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x * 4;
    for (int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 4; i < n; i += stride) {
        float4 a = *reinterpret_cast<const float4 *>(ws + i);
        for (int z = 1; z < splits; z++) {
            const float4 b = *reinterpret_cast<const float4 *>(ws + (int64_t)z * n + i);
            a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
        }
        if (beta != 0.0f) {
            const float4 o = out4<OUT>::load(y + i);
            a.x = beta * o.x + a.x, a.y = beta * o.y + a.y, a.z = beta * o.z + a.z, a.w = beta * o.w + a.w;
        }
        out4<OUT>::store(y + i, a);
    }
}
template <typename OUT> static void launch_splitk_sum(const float *ws, int splits, int64_t n, float beta, OUT *y) {
    const int64_t blocks = (n / 4 + 255) / 256;
    k_splitk_sum<OUT><<<(unsigned)(blocks < 4096 ? blocks : 4096), 256, 0, dt_stream()>>>(ws, splits, n, beta, y);
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

/* wgrad's B loaders: the [m][k] tile of A. A thread keeps one chunk column kb = j0 + 8*bc and
 * walks B_IT rows of each BKW-row tile; a loader is a class template over the configuration T
 * with
 *   col(p, kb)          decodes the column once: tap (rr, tt) of the window, channel cb
 *   load(p, dst, m, i)  issues the chunk of row m (the thread's i-th of the tile) into dst
 *   fill(dst, i)        after the stage's mma: finishes a chunk that load kept in registers
 * The library's is wb_im2col (x's window, cp.async); the lab adds the deformable sampler's
 * (bench/lab/conv_lab_variants.cuh). */
template <class T> struct wb_im2col {
    int tap, cb, rr, tt;
    bool in; /* kb < K */
    __device__ __forceinline__ void col(const conv_params &p, int kb) {
        tap = kb / p.C, cb = kb - tap * p.C, rr = tap / p.KW, tt = tap - rr * p.KW;
        in = kb < p.K;
    }
    __device__ __forceinline__ void load(const conv_params &p, bf16 *dst, int m, int) const {
        const bf16 *src = p.x;
        int bytes = 0;
        if (in && m < p.M) {
            const int hw = p.Ho * p.Wo, n = m / hw, rem = m - n * hw, ho = rem / p.Wo, wo = rem - ho * p.Wo;
            const int hi = ho * p.SH - p.PH + rr * p.DH, wi = wo * p.SW - p.PW + tt * p.DW;
            if ((unsigned)hi < (unsigned)p.H && (unsigned)wi < (unsigned)p.W)
                src = p.x + (((int64_t)n * p.H + hi) * p.W + wi) * p.C + cb, bytes = 16;
        }
        cp_async16(dst, src, bytes);
    }
    __device__ __forceinline__ void fill(bf16 *, int) const {}
};

template <int BM, int BN, int WM, int WN, int STAGES, template <class> class B, class P>
__global__ void __launch_bounds__(wgrad_cfg<BM, BN, WM, WN, STAGES>::THREADS)
    k_igemm_wgrad(P p, const bf16 *__restrict__ dy, float *__restrict__ ws) {
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
    const bool a_col_in = co < p.Cout;
    B<T> b;
    b.col(p, j0 + 8 * bc);

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
            const int row = tid / T::B_CH + i * (T::THREADS / T::B_CH);
            b.load(p, sB + (st * BKW + row) * T::BPITCH + 8 * bc, mbase + row, i);
        }
    };
    auto fill_tile = [&](int st) {
#pragma unroll
        for (int i = 0; i < T::B_IT; i++) {
            const int row = tid / T::B_CH + i * (T::THREADS / T::B_CH);
            b.fill(sB + (st * BKW + row) * T::BPITCH + 8 * bc, i);
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
        },
        fill_tile);

    /* this split's fp32 partial tile: dw rows i (co), columns j (k); pairs of columns whole
     * (K % 8 == 0) */
    store_acc_f32(acc, ws + (int64_t)blockIdx.y * p.Cout * p.K, p.Cout, p.K, i0 + warp_m * WM, j0 + warp_n * WN, lane);
}

/* The dynamic shared-memory limit is an attribute of a kernel on each device: raised where a
 * launch needs more than was set (dt_gpu_func_smem: a host call, allowed while a stream is
 * captured), as the library's other kernels do. */
template <typename K> static void allow_smem(K kernel, size_t bytes) { dt_gpu_func_smem((const void *)kernel, bytes); }

/* wgrad's launcher: splits fill two waves of the GPU, each at least 8 m tiles (256 rows).
 * B: the B loader (wb_im2col), P: the problem's type (conv_params, or one derived for B). */
template <int BM, int BN, int WM, int WN, int STAGES, template <class> class B, class P> static int wgrad_splits(const P &p) {
    typedef wgrad_cfg<BM, BN, WM, WN, STAGES> T;
    const int64_t tiles = (int64_t)((p.Cout + BM - 1) / BM) * ((p.K + BN - 1) / BN);
    int per_sm = 0; /* CTAs an SM holds */
    DT_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_igemm_wgrad<BM, BN, WM, WN, STAGES, B, P>, T::THREADS,
                                                           T::SMEM));
    const int64_t want = ((int64_t)(per_sm > 0 ? per_sm : 1) * dt_gpu_sm_count() * 2 + tiles - 1) / tiles;
    const int64_t most = ((p.M + BKW - 1) / BKW) / 8;
    const int64_t s = want < most ? want : most;
    return (int)(s < 1 ? 1 : s > 65535 ? 65535 : s);
}
template <int BM, int BN, int WM, int WN, int STAGES, template <class> class B = wb_im2col, class P = conv_params>
static void launch_wgrad(const P &p, const bf16 *dy, float beta, float *dw) {
    typedef wgrad_cfg<BM, BN, WM, WN, STAGES> T;
    auto kern = k_igemm_wgrad<BM, BN, WM, WN, STAGES, B, P>;
    allow_smem(kern, T::SMEM);
    const int splits = wgrad_splits<BM, BN, WM, WN, STAGES, B>(p);
    const int64_t n = (int64_t)p.Cout * p.K, tiles = (int64_t)((p.Cout + BM - 1) / BM) * ((p.K + BN - 1) / BN);
    float *ws = (float *)dt_gpu_malloc(sizeof(float) * (size_t)(splits * n)); /* cached after the first call */
    kern<<<dim3((unsigned)tiles, (unsigned)splits), T::THREADS, T::SMEM, dt_stream()>>>(p, dy, ws);
    DT_CHECK_LAUNCH();
    launch_splitk_sum<float>(ws, splits, n, beta, dw);
    dt_gpu_free(ws);
}

/* The launcher of one tile configuration (raises the dynamic smem limit first): A the loader,
 * E the epilogue, V the view's type; splits: grid y (the lab's split-K epilogue). */
template <int BM, int BN, int WM, int WN, int STAGES, template <class> class A, class E = epi_bf16, int BK_ = 32,
          class V = gemm_view>
static void launch_igemm(const V &p, int splits = 1) {
    typedef tile_cfg<BM, BN, WM, WN, STAGES, BK_> T;
    auto kern = k_igemm<T, A, E, V>;
    allow_smem(kern, T::SMEM);
    const int64_t tiles = (A<T>::rows0(p) + BM - 1) / BM * ((p.NO + BN - 1) / BN);
    if (tiles > INT_MAX) dt_fatal("conv2d (implicit GEMM): %lld tiles is more than a grid holds", (long long)tiles);
    A<T>::check(p); /* grid z: classes(p) <= 65535 */
    kern<<<dim3((unsigned)tiles, (unsigned)splits, (unsigned)A<T>::classes(p)), T::THREADS, T::SMEM, dt_stream()>>>(p);
    DT_CHECK_LAUNCH();
}

} /* namespace dt_igemm */
#endif
