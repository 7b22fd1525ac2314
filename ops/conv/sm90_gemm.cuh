/* sm90_gemm.cuh: the Hopper GEMM engine (sm_90a only): wgmma tensor-core MMAs on 128-byte-
 * swizzled shared-memory tiles, TMA bulk copies, an mbarrier ring of stages, a producer
 * warpgroup feeding two consumer warpgroups, a persistent grid. One mainloop; what varies is
 * the A-operand producer (a TMA copy of a dense row-major A, an implicit im2col gather of an
 * NHWC image by TMA or cp.async, or a producer defined outside this header) and the epilogue.
 * The plan and the numbers: docs/conv.md.
 *
 * The GEMM, shapes on every buffer (row-major, bf16 operands, fp32 accumulation):
 *   y [M, N] bf16 = A [M, K] . B^T + bias,   B = b [N, K] (K contiguous: a weight [Cout, kh, kw, C]
 *   is that matrix with K = kh*kw*C), bias [N] fp32 or NULL, y rounded once.
 *   A_TMA:    A = a [M, K] in device memory.
 *   A_IM2COL: A[m][k] = x[n][ho*SH - PH + r*DH][wo*SW - PW + t*DW][c], 0 outside the image, for
 *             m = (n, ho, wo) of the [Nimg, Ho, Wo] output and k = (r, t, c) - the weight's
 *             storage order; x [Nimg, H, W, C] bf16 NHWC with C % 8 == 0 (a 16-byte chunk of 8
 *             channels never straddles two taps). y [M, N] is then the NHWC output itself.
 *   A_EXT:    A made in shared memory by a producer class outside this header (tile_cfg's EXT,
 *             a_needs below), on the engine's ring, mainloop and epilogue. The library has none:
 *             it is how a lab runs a producer that lost (the deformable lab's bilinear sampling,
 *             bench/lab/deform_sampler_sm90.cu).
 * Requirements: K % 8 == 0 and N % 8 == 0 (TMA's 16-byte strides, the epilogue's pairs; the
 * fp32 epilogue EPI_F32 takes any N, its rows ldy wide);
 * pointers 16-byte aligned. Any M, N, K otherwise: the tails are zero-filled (TMA's out-of-
 * bounds fill, cp.async's zero fill) and masked in the epilogue.
 *
 * The CTA: 384 threads = warpgroup 0 (the producer, few registers after setmaxnreg) and
 * warpgroups 1-2 (the consumers, BM/2 rows of the BM x BN tile each, m64nBNk16 wgmmas). Per
 * stage s of the ring: A tile [BM][64] and B tile [BN][64] bf16, each row 128 bytes with the
 * 16-byte chunks XOR-swizzled by (row % 8) - the layout TMA writes with SWIZZLE_128B and wgmma's
 * 128B-swizzle descriptors read; full[s] (the producer's copies landed: TMA transaction bytes
 * plus, for A_IM2COL and A_EXT, one arrival per producer thread) and empty[s] (every consumer
 * warp has finished reading it). Each CTA walks tiles blockIdx.x, + gridDim.x, ... in a grouped
 * order (GROUP_M tile rows at a time, so an A row band and the B panels stay in L2). */
#ifndef DT_SM90_GEMM_CUH
#define DT_SM90_GEMM_CUH

#include <cuda.h> /* CUtensorMap (the type only: the map is encoded through the runtime's driver entry point) */
#include <cuda_bf16.h>
#include <limits.h>
#include <stdint.h>

namespace dt_sm90 {

typedef __nv_bfloat16 bf16;

/* A_TMA: a dense A by TMA. A_TMA_IM2COL: the im2col of x by TMA's im2col mode - one copy per
 * (tap, 64-channel block) brings BM consecutive output positions' pixels, wrapping across rows
 * and images, 0 outside the image (needs C % 64 == 0, so that a k-slice is one tap's channel
 * block). A_IM2COL: the same gather by the producer warpgroup's cp.async, any C % 8 == 0, through
 * L2 only (cp.async.cg); A_IM2COL_L1 the same through L1 too (cp.async.ca), for a gather whose
 * windows overlap a lot within a tile - the stem's 7x7/2 over 8 channels, each pixel in ~12
 * windows, would otherwise bring M*K*2 bytes (629 MB at batch 64) from L2 (the lab's variants;
 * the library runs none yet). A_EXT: tile_cfg's producer class (a_needs). */
enum a_producer { A_TMA = 0, A_IM2COL = 1, A_TMA_IM2COL = 2, A_EXT = 3, A_IM2COL_L1 = 4 };
/* the im2col gathers by cp.async (no tensor map for A), and the producers whose threads write the
 * A tile (cp.async or stores: one arrival each on full[s]) */
__host__ __device__ constexpr bool a_gathers(int ap) { return ap == A_IM2COL || ap == A_IM2COL_L1; }
__host__ __device__ constexpr bool a_by_threads(int ap) { return a_gathers(ap) || ap == A_EXT; }

/* What a launch computes (see the header comment). The im2col fields are read by A_IM2COL only. */
struct gemm_args {
    int M, N, K;
    bf16 *y;           /* [M, N] */
    const float *bias; /* [N] or NULL */
    float beta;        /* y = round(beta * y + acc + bias): 0 writes y without reading it */
    const bf16 *x;     /* A_IM2COL: [Nimg, H, W, C] */
    int H, W, C, Ho, Wo, KW, SH, SW, PH, PW, DH, DW;
    int cblocks; /* A_TMA_IM2COL: C / 64 */
    int tiles_m, tiles_n;
    /* or NULL: the per-channel statistics of y as stored (the batch norm that follows the conv),
     * stats [ceil(M / 64)][N][2] double = (sum y, sum y^2) of column n over the 64-row group g,
     * rows g*64 .. g*64+63 below M (EPI_TMA only: they are read back from the staging tile) */
    double *stats;
    /* EPI_F32: yf [M, ldy] fp32 instead of y - columns n < N are acc + bias, those from
     * sigmoid_from on through the logistic function, columns N .. ldy-1 zero (ldy even, >= N) */
    float *yf;
    int ldy, sigmoid_from;
    /* EPI_DIRECT / EPI_TMA: or NULL, add [M, N] fp32 summed with acc + bias before beta y and the
     * one rounding (the deformable layer's input gradient: its sampling part, summed in fp32) */
    const float *add;
};

/* ---- PTX wrappers (PTX ISA: "mbarrier", "cp.async.bulk.tensor", "wgmma", "setmaxnreg"). */

__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(uint64_t *bar, int arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals));
}
/* one arrival that also announces `bytes` of TMA transactions this phase waits for */
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t *bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
/* an arrival made when all of this thread's earlier cp.async copies have landed (.noinc: it
 * is one of the arrivals the barrier was initialized to expect) */
__device__ __forceinline__ void mbar_arrive_cp_async(uint64_t *bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
/* spins until the phase of parity `parity` has completed */
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(smem_addr(bar)), "r"(parity)
                     : "memory");
    } while (!done);
}

/* TMA: the box at (c0 = column, c1 = row) of a 2-D tensor map into shared memory, completing on bar */
__device__ __forceinline__ void tma_load_2d(void *dst, const CUtensorMap *map, uint64_t *bar, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
                     smem_addr(dst)),
                 "l"((uint64_t)map), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
                 : "memory");
}

/* TMA store: the box at (c0, c1) of a 2-D tensor map from shared memory (clipped at the tensor's
 * edges), in this thread's bulk group */
__device__ __forceinline__ void tma_store_2d(const CUtensorMap *map, const void *src, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"((uint64_t)map),
                 "r"(smem_addr(src)), "r"(c0), "r"(c1)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
/* this thread's bulk groups: all but N have finished reading their shared-memory source */
template <int N> __device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
/* ... and all but N have completed their writes */
template <int N> __device__ __forceinline__ void bulk_wait() {
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

/* TMA im2col: BM pixels x the map's channels, starting at the window origin (w, h) of image n
 * and channel c, each pixel moved by the tap offset (ow, oh) - the box of the 4-D NHWC map. */
__device__ __forceinline__ void tma_load_im2col(void *dst, const CUtensorMap *map, uint64_t *bar, int c, int w, int h,
                                                int n, uint16_t ow, uint16_t oh) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2], {%7, %8};\n" ::"r"(
                     smem_addr(dst)),
                 "l"((uint64_t)map), "r"(smem_addr(bar)), "r"(c), "r"(w), "r"(h), "r"(n), "h"(ow), "h"(oh)
                 : "memory");
}

/* 16 bytes global -> shared; src_bytes 0 reads nothing and writes zeros (src must still be valid);
 * L1: cached in L1 too (.ca), else in L2 only (.cg) */
template <bool L1 = false> __device__ __forceinline__ void cp_async16_zfill(void *dst, const void *src, int src_bytes) {
    if constexpr (L1)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes)
                     : "memory");
    else
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes)
                     : "memory");
}

/* named barrier among `threads` threads (the producer warpgroup: id 1, 128) */
__device__ __forceinline__ void bar_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/* generic-proxy writes (cp.async, st.shared) before async-proxy reads (wgmma, TMA) */
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void fence_mbar_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

template <int R> __device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R> __device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* The shared-memory matrix descriptor of a K-major tile whose rows are 128 bytes (64 bf16 of
 * K) with the 128-byte swizzle, the tile 1024-byte aligned: start address >> 4 (bits 0-13),
 * leading byte offset unused by this layout (1, bits 16-29), stride byte offset 1024 >> 4 (the
 * distance between groups of 8 rows, bits 32-45), base offset 0, swizzle mode 1 = 128 B (bits
 * 62-63). The k16 slice kk of the tile starts 32*kk bytes in: descriptor + 2*kk. */
__device__ __forceinline__ uint64_t desc_sw128(const void *tile) {
    const uint64_t a = smem_addr(tile);
    return ((a & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}

/* d[BN/2] += A (64 x 16, descriptor da) . B (16 x BN, descriptor db); scale_d 0: d = A . B.
 * Accumulator layout (PTX "wgmma 64xNx16 D fragments"): thread t of the warpgroup, warp w = t/32,
 * lane l: d[4j + 2h + e] = D[16w + l/4 + 8h][8j + 2(l%4) + e], j < BN/8, h, e in {0, 1}. */
template <int BN, int TRANS = 0> struct wgmma_op;
#include "ops/conv/sm90_wgmma_ops.inc"

/* ---- the kernel */

/* The epilogue: EPI_DIRECT stores each thread's bf16 pairs to y; EPI_TMA writes the consumer's
 * WM x BN tile to a swizzled shared-memory staging buffer and stores it with TMA (full 128-byte
 * lines, the edges clipped by the map), overlapping the next tile's mainloop; EPI_F32 stores
 * fp32 pairs to yf, unrounded (the deformable layer's offset conv: its offsets and mask stay
 * fp32, gemm_args). */
enum epilogue { EPI_DIRECT = 0, EPI_TMA = 1, EPI_F32 = 2 };

/* What producer AP asks of the CTA: the registers of the producer and of each consumer after
 * setmaxnreg, the bytes of its row table a tile row, and the launch's arguments (gemm_args, or a
 * struct derived from it that carries the producer's own inputs). The built-in producers' are
 * here (A_IM2COL's table: per tile row the image's first pixel, h0, w0, -); A_EXT's come from its
 * class EXT, which also makes the A tiles: all 128 producer threads call
 *   EXT::produce<CFG>(p, sA, sB, full, empty, table, &map_b, ntiles, nk, tid)
 * and it walks the CTA's tiles and k-slices as the built-in producers do - per slice: wait on
 * empty[s], thread 0 brings the B tile by TMA (expecting B_BYTES on full[s]), every thread writes
 * its part of the swizzled A tile, fences it towards the async proxy and arrives on full[s]. */
template <int AP, class EXT> struct a_needs {
    static_assert(AP == A_EXT, "a producer class is A_EXT's");
    static constexpr int PRODUCER_REGS = EXT::PRODUCER_REGS, CONSUMER_REGS = EXT::CONSUMER_REGS;
    static constexpr int ROW_BYTES = EXT::ROW_BYTES;
    typedef typename EXT::args args;
};
template <int AP> struct a_needs<AP, void> {
    static_assert(AP != A_EXT, "A_EXT: tile_cfg names its producer class");
    static constexpr int PRODUCER_REGS = a_gathers(AP) ? 56 : 40, CONSUMER_REGS = a_gathers(AP) ? 224 : 232;
    static constexpr int ROW_BYTES = 16;
    typedef gemm_args args;
};

template <int BM_, int BN_, int STAGES_, int AP_, int EPI_ = EPI_TMA, class EXT_ = void> struct tile_cfg {
    static constexpr int BM = BM_, BN = BN_, STAGES = STAGES_, AP = AP_, EPI = EPI_;
    typedef EXT_ EXT;                            /* A_EXT: the producer class; void otherwise */
    typedef a_needs<AP_, EXT_> needs;            /* what the producer asks of the CTA */
    typedef typename needs::args args;           /* the kernel's arguments */
    static constexpr int BK = 64;                /* 64 bf16 = one 128-byte swizzled row */
    static constexpr int CONSUMERS = 2;          /* consumer warpgroups */
    static constexpr int WM = BM / CONSUMERS;    /* rows per consumer */
    static constexpr int MI = WM / 64;           /* m64 wgmmas per consumer per k16 */
    static constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;
    static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
    static constexpr int GROUP_M = 8;
    /* registers after setmaxnreg: the CTA keeps what it was launched with, 384 threads x 168
     * (__launch_bounds__(384, 1): 65536 / 384 rounded down to 8), and a setmaxnreg.inc that
     * asks for more than the others gave back waits forever - so 128 * (producer + 2 * consumer)
     * <= 64512 */
    static constexpr int PRODUCER_REGS = needs::PRODUCER_REGS, CONSUMER_REGS = needs::CONSUMER_REGS;
    static_assert(128 * (PRODUCER_REGS + CONSUMERS * CONSUMER_REGS) <= 384 * 168,
                  "setmaxnreg: the warpgroups' registers within the CTA's launch allocation");
    static constexpr int ROWS_BYTES = BM * needs::ROW_BYTES; /* the producer's row table */
    /* EPI_TMA: per consumer a [BN/64][WM][64] bf16 staging tile, 128-byte swizzled */
    static constexpr int STAGING_BYTES = EPI == EPI_TMA ? BM * BN * 2 : 0;
    /* EPI_TMA: per consumer a [128 threads][4] double scratch for the statistics' slab sums */
    static constexpr int STATS_BYTES = EPI == EPI_TMA ? CONSUMERS * 128 * 4 * 8 : 0;
    /* dynamic shared memory: the ring, the staging tiles, the statistics scratch, 2 * STAGES
     * barriers, the producer's row table, 1 KB to align */
    static constexpr int SMEM = STAGES * STAGE_BYTES + STAGING_BYTES + STATS_BYTES + 2 * STAGES * 8 + ROWS_BYTES + 1024;
    static_assert(SMEM <= 227 * 1024, "shared memory: at most 227 KB a CTA");
    static_assert(WM == 64 || WM == 128, "a consumer takes 64 or 128 rows");
    static_assert(BN == 64 || BN == 128 || BN == 256, "BN is a wgmma N");
    static_assert(MI * BN <= 256, "accumulators: at most 128 fp32 registers a thread");
};

/* tile t of the grouped order -> (tile row tm, tile column tn) */
__device__ __forceinline__ void tile_coords(int t, int tiles_m, int tiles_n, int group_m, int &tm, int &tn) {
    const int per_group = group_m * tiles_n;
    const int first = (t / per_group) * group_m;
    const int rows = min(group_m, tiles_m - first);
    const int r = t % per_group;
    tm = first + r % rows;
    tn = r / rows;
}

/* The batch norm's statistics of one consumer's WM x BN piece of y, from the staging tile the
 * TMA store reads too (both only read it; the next tile's epilogue waits for both: the store by
 * bulk_wait_read, these reads by its named barrier). Thread tid takes the column pair pi =
 * tid % (BN/2) - a warp one 128-byte row of a 64-column block, conflict-free - and a slab of
 * ROWS = WM / T rows (T = 128 / (BN/2) threads a pair), summed in fp32 (at most 64 bf16 values,
 * their squares exact); the slabs of a 64-row group are added in slab order in double, and
 * the group's (sum, sum of squares) pair of each column is stored - an order fixed by the shape. */
template <class CFG>
__device__ __forceinline__ void tile_stats(const gemm_args &p, const uint8_t *stg, double *scratch, int row0, int col0,
                                           int tid, int cw) {
    constexpr int WM = CFG::WM, P2 = CFG::BN / 2, T = 128 / P2, ROWS = WM / T, SPG = 64 / ROWS;
    static_assert(ROWS <= 64 && 64 % ROWS == 0, "a slab lies within one 64-row group");
    const int pi = tid % P2, q = tid / P2, cloc = 2 * pi, c64 = cloc % 64;
    const uint8_t *blk = stg + (cloc / 64) * (WM * 128);
    float s1a = 0.0f, s2a = 0.0f, s1b = 0.0f, s2b = 0.0f;
#pragma unroll 4
    for (int i = 0; i < ROWS; i++) {
        const int r = q * ROWS + i;
        if (row0 + r >= p.M) break;
        const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(
            blk + r * 128 + ((((c64 >> 3) ^ (r & 7)) << 4) | ((c64 & 7) << 1))));
        s1a += v.x, s2a = fmaf(v.x, v.x, s2a), s1b += v.y, s2b = fmaf(v.y, v.y, s2b);
    }
    double *mine = scratch + tid * 4;
    mine[0] = s1a, mine[1] = s2a, mine[2] = s1b, mine[3] = s2b;
    bar_sync(2 + cw, 128);
    const int col = col0 + cloc, group = row0 / 64 + q / SPG;
    if (q % SPG == 0 && col < p.N && group * 64 < p.M) {
        double a = 0.0, b = 0.0, c = 0.0, d = 0.0;
#pragma unroll
        for (int k = 0; k < SPG; k++) {
            const double *o = scratch + (tid + k * P2) * 4;
            a += o[0], b += o[1], c += o[2], d += o[3];
        }
        double *out = p.stats + ((int64_t)group * p.N + col) * 2;
        reinterpret_cast<double2 *>(out)[0] = make_double2(a, b); /* 32-byte aligned: col is even */
        reinterpret_cast<double2 *>(out)[1] = make_double2(c, d);
    }
    bar_sync(2 + cw, 128); /* the scratch is free for the next tile */
}

template <class CFG>
__global__ void __launch_bounds__(384, 1)
    k_sm90_gemm(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                const __grid_constant__ CUtensorMap map_y, const __grid_constant__ typename CFG::args p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BM = CFG::BM, BN = CFG::BN, STAGES = CFG::STAGES, BK = CFG::BK;
    extern __shared__ uint8_t smem_raw[];
    /* the 128-byte swizzle repeats every 1024 bytes: tiles start 1024-aligned */
    uint8_t *smem = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    uint8_t *sA = smem;                               /* [STAGES][BM][64] bf16, swizzled */
    uint8_t *sB = smem + STAGES * CFG::A_BYTES;       /* [STAGES][BN][64] bf16, swizzled */
    uint8_t *staging = smem + STAGES * CFG::STAGE_BYTES; /* EPI_TMA: [CONSUMERS][BN/64][WM][64] bf16 */
    double *stats_scratch = (double *)(staging + CFG::STAGING_BYTES); /* [CONSUMERS][128][4] */
    uint64_t *full = (uint64_t *)((uint8_t *)stats_scratch + CFG::STATS_BYTES);
    uint64_t *empty = full + STAGES;
    int4 *rows = (int4 *)(empty + STAGES); /* A_IM2COL(_L1), A_EXT: the producer's row table (ROWS_BYTES) */

    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            mbar_init(&full[s], a_by_threads(CFG::AP) ? 1 + 128 : 1);
            mbar_init(&empty[s], CFG::CONSUMERS * 4); /* lane 0 of every consumer warp */
        }
        fence_mbar_init();
    }
    __syncthreads();

    const int ntiles = p.tiles_m * p.tiles_n;
    const int nk = (p.K + BK - 1) / BK;

    if (wg == 0) {
        /* ---- producer */
        setmaxnreg_dec<CFG::PRODUCER_REGS>();
        int it = 0;
        if (CFG::AP == A_TMA || CFG::AP == A_TMA_IM2COL) {
            if (tid != 0) return;
            for (int t = blockIdx.x; t < ntiles; t += gridDim.x) {
                int tm, tn;
                tile_coords(t, p.tiles_m, p.tiles_n, CFG::GROUP_M, tm, tn);
                /* A_TMA_IM2COL: the window origin of the tile's first output position */
                int n0 = 0, h0 = 0, w0 = 0;
                if (CFG::AP == A_TMA_IM2COL) {
                    const int m0 = tm * BM, HoWo = p.Ho * p.Wo;
                    n0 = m0 / HoWo;
                    const int rem = m0 - n0 * HoWo, ho = rem / p.Wo;
                    h0 = ho * p.SH - p.PH, w0 = (rem - ho * p.Wo) * p.SW - p.PW;
                }
                int tap = 0, cb = 0; /* A_TMA_IM2COL: k-slice kt = (tap, channel block cb) */
                for (int kt = 0; kt < nk; kt++, it++) {
                    const int s = it % STAGES;
                    mbar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
                    mbar_arrive_expect_tx(&full[s], CFG::STAGE_BYTES);
                    if (CFG::AP == A_TMA) {
                        tma_load_2d(sA + s * CFG::A_BYTES, &map_a, &full[s], kt * BK, tm * BM);
                    } else {
                        const int r = tap / p.KW, q = tap - r * p.KW;
                        tma_load_im2col(sA + s * CFG::A_BYTES, &map_a, &full[s], cb * BK, w0, h0, n0,
                                        (uint16_t)(q * p.DW), (uint16_t)(r * p.DH));
                        if (++cb == p.cblocks) cb = 0, tap++;
                    }
                    tma_load_2d(sB + s * CFG::B_BYTES, &map_b, &full[s], kt * BK, tn * BN);
                }
            }
        } else if constexpr (CFG::AP == A_EXT) {
            CFG::EXT::template produce<CFG>(p, sA, sB, full, empty, rows, &map_b, ntiles, nk, tid);
        } else {
            /* im2col: thread tid copies the 16-byte chunk j = tid % 8 (channels 8j..8j+7 of the
             * k-slice) of rows tid/8 + 16 i; a row's swizzled chunk is j ^ (row % 8), and
             * row % 8 = (tid / 8) % 8 for all of them. */
            const int j = tid & 7, r0 = tid >> 3, sw = ((r0 & 7) ^ j) << 4;
            const int HoWo = p.Ho * p.Wo;
            for (int t = blockIdx.x; t < ntiles; t += gridDim.x) {
                int tm, tn;
                tile_coords(t, p.tiles_m, p.tiles_n, CFG::GROUP_M, tm, tn);
                bar_sync(1, 128); /* the previous tile's rows are no longer read */
                for (int r = tid; r < BM; r += 128) {
                    const int m = tm * BM + r;
                    int4 e = make_int4(0, INT_MIN / 2, INT_MIN / 2, 0); /* past M: every tap outside */
                    if (m < p.M) {
                        const int n = m / HoWo, rem = m - n * HoWo, ho = rem / p.Wo, wo = rem - ho * p.Wo;
                        e = make_int4(n * p.H * p.W, ho * p.SH - p.PH, wo * p.SW - p.PW, 0);
                    }
                    rows[r] = e;
                }
                bar_sync(1, 128);
                for (int kt = 0; kt < nk; kt++, it++) {
                    const int s = it % STAGES;
                    mbar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
                    if (tid == 0) {
                        mbar_arrive_expect_tx(&full[s], CFG::B_BYTES);
                        tma_load_2d(sB + s * CFG::B_BYTES, &map_b, &full[s], kt * BK, tn * BN);
                    }
                    const int k = kt * BK + 8 * j;
                    const int tap = k / p.C, c = k - tap * p.C;
                    const int r = tap / p.KW, q = tap - r * p.KW;
                    const int dh = k < p.K ? r * p.DH : INT_MIN / 2, dw = q * p.DW;
                    uint8_t *dst = sA + s * CFG::A_BYTES + r0 * 128 + sw;
#pragma unroll 4
                    for (int i = 0; i < BM / 16; i++) {
                        const int4 e = rows[r0 + 16 * i];
                        const int h = e.y + dh, w = e.z + dw;
                        const bool ok = (unsigned)h < (unsigned)p.H && (unsigned)w < (unsigned)p.W;
                        const bf16 *src = ok ? p.x + ((int64_t)(e.x + h * p.W + w) * p.C + c) : p.x;
                        cp_async16_zfill<CFG::AP == A_IM2COL_L1>(dst + i * 16 * 128, src, ok ? 16 : 0);
                    }
                    mbar_arrive_cp_async(&full[s]);
                }
            }
        }
    } else {
        /* ---- consumers */
        setmaxnreg_inc<CFG::CONSUMER_REGS>();
        const int cw = wg - 1, warp = tid / 32, lane = tid % 32;
        float acc[CFG::MI][BN / 2];
#pragma unroll
        for (int mi = 0; mi < CFG::MI; mi++)
#pragma unroll
            for (int i = 0; i < BN / 2; i++) acc[mi][i] = 0.0f;
        int it = 0;
        for (int t = blockIdx.x; t < ntiles; t += gridDim.x) {
            int tm, tn;
            tile_coords(t, p.tiles_m, p.tiles_n, CFG::GROUP_M, tm, tn);
            int prev = -1;
            for (int kt = 0; kt < nk; kt++, it++) {
                const int s = it % STAGES;
                mbar_wait(&full[s], (it / STAGES) & 1);
                /* cp.async or the producer's stores wrote it (generic proxy) */
                if (a_by_threads(CFG::AP)) fence_proxy_async();
                const uint8_t *a = sA + s * CFG::A_BYTES + cw * CFG::WM * 128;
                const uint64_t db = desc_sw128(sB + s * CFG::B_BYTES);
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < BK / 16; kk++)
#pragma unroll
                    for (int mi = 0; mi < CFG::MI; mi++)
                        wgmma_op<BN>::mma(acc[mi], desc_sw128(a + mi * 64 * 128) + 2 * kk, db + 2 * kk,
                                          (kt | kk) != 0);
                wgmma_commit();
                /* keep this stage's MMAs in flight; the previous stage's are done: release it */
                wgmma_wait<1>();
                if (prev >= 0 && lane == 0) mbar_arrive(&empty[prev]);
                prev = s;
            }
            wgmma_wait<0>();
            if (prev >= 0 && lane == 0) mbar_arrive(&empty[prev]);

            /* epilogue: fp32 (+ beta y, + bias), rounded once to bf16 */
            uint8_t *stg = staging + cw * (CFG::STAGING_BYTES / CFG::CONSUMERS);
            if (CFG::EPI == EPI_TMA) {
                if (tid == 0) bulk_wait_read<0>(); /* the previous tile's store has read the staging tile */
                bar_sync(2 + cw, 128);
            }
#pragma unroll
            for (int mi = 0; mi < CFG::MI; mi++) {
                const int rloc = mi * 64 + warp * 16 + lane / 4; /* row within the consumer's WM rows */
                const int row0 = tm * BM + cw * CFG::WM + rloc;
#pragma unroll
                for (int jn = 0; jn < BN / 8; jn++) {
                    const int cloc = jn * 8 + 2 * (lane % 4), col = tn * BN + cloc;
                    if (CFG::EPI == EPI_F32) {
#pragma unroll
                        for (int h = 0; h < 2; h++) {
                            const int row = row0 + 8 * h;
                            if (row >= p.M || col >= p.ldy) continue;
                            float v[2];
#pragma unroll
                            for (int e = 0; e < 2; e++) {
                                const int n = col + e;
                                v[e] = n < p.N ? acc[mi][4 * jn + 2 * h + e] + (p.bias ? p.bias[n] : 0.0f) : 0.0f;
                                if (n < p.N && n >= p.sigmoid_from) v[e] = 1.0f / (1.0f + expf(-v[e]));
                            }
                            *reinterpret_cast<float2 *>(p.yf + (int64_t)row * p.ldy + col) = make_float2(v[0], v[1]);
                        }
                        continue;
                    }
                    const bool col_ok = col < p.N;
                    const float b0 = p.bias && col_ok ? p.bias[col] : 0.0f, b1 = p.bias && col_ok ? p.bias[col + 1] : 0.0f;
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int row = row0 + 8 * h;
                        float v0 = acc[mi][4 * jn + 2 * h] + b0, v1 = acc[mi][4 * jn + 2 * h + 1] + b1;
                        __nv_bfloat162 *dst = reinterpret_cast<__nv_bfloat162 *>(p.y + (int64_t)row * p.N + col);
                        if (p.add && row < p.M && col_ok) {
                            const float2 a = *reinterpret_cast<const float2 *>(p.add + (int64_t)row * p.N + col);
                            v0 += a.x, v1 += a.y;
                        }
                        if (p.beta != 0.0f && row < p.M && col_ok) {
                            const float2 old = __bfloat1622float2(*dst);
                            v0 = fmaf(p.beta, old.x, v0), v1 = fmaf(p.beta, old.y, v1);
                        }
                        const __nv_bfloat162 out = __floats2bfloat162_rn(v0, v1);
                        if (CFG::EPI == EPI_DIRECT) {
                            if (row < p.M && col_ok) *dst = out;
                        } else {
                            /* staging: column block cloc / 64, row r = rloc + 8h, its 16-byte chunk
                             * (cloc % 64) / 8 XOR r % 8 - TMA's 128-byte swizzle; a warp's 32 pairs land
                             * in 8 rows x 4 words of distinct chunks: no bank conflicts */
                            const int r = rloc + 8 * h, c64 = cloc % 64;
                            uint8_t *at = stg + (cloc / 64) * (CFG::WM * 128) + r * 128 +
                                          ((((c64 >> 3) ^ (r & 7)) << 4) | ((c64 & 7) << 1));
                            *reinterpret_cast<__nv_bfloat162 *>(at) = out;
                        }
                    }
                }
            }
            if (CFG::EPI == EPI_TMA) {
                fence_proxy_async(); /* the staging writes before TMA reads them */
                bar_sync(2 + cw, 128);
                if (tid == 0) {
#pragma unroll
                    for (int jb = 0; jb < BN / 64; jb++)
                        tma_store_2d(&map_y, stg + jb * (CFG::WM * 128), tn * BN + jb * 64, tm * BM + cw * CFG::WM);
                    bulk_commit();
                }
                if (p.stats) tile_stats<CFG>(p, stg, stats_scratch + cw * 128 * 4, tm * BM + cw * CFG::WM, tn * BN, tid, cw);
            }
        }
        if (CFG::EPI == EPI_TMA && tid == 0) bulk_wait<0>(); /* y written before the kernel ends */
    }
#endif
}

/* ---- the weight gradient on the same machinery:
 *   dw [Cout, K] fp32 = beta dw + sum over m < M of dy[m][co] A[m][k],   A = the im2col of x as above,
 * a GEMM with M' = Cout, N' = K and the reduction over the M output positions, split into
 * `splits` contiguous ranges of 64-row steps whose fp32 partials [splits][Cout][K] are summed in
 * split order by k_sm90_wgrad_reduce (deterministic; splits == 1 writes dw itself). Both
 * operands are stored reduction-major - dy [M, Cout] read in tiled TMA boxes [64 m][64 co], A in
 * TMA im2col boxes [64 m][64 c] of one tap (C % 64 == 0), or with B_COLS from a materialized
 * column matrix cols [M, Kp] (Kp >= K, a multiple of 8; columns K .. Kp-1 zero) in tiled boxes
 * [64 m][64 k] - which wgmma takes as MN-major tiles (imm-trans 1). The CTA: CO output channels x
 * BN columns of K (wgrad_cfg). */
struct wgrad_args {
    int M, Cout, K;
    float *dw;   /* [Cout, K] */
    float beta;  /* dw = beta dw + ...: 0 writes dw without reading it */
    float *part; /* splits > 1: [splits][Cout][K] */
    int splits, steps_per_split;
    int C, Ho, Wo, KW, SH, SW, PH, PW, DH, DW;
    int tiles_co, tiles_k;
};

/* CO 64: the two consumers share the 64-channel dy block and split the BN = 2 BNC columns of K;
 * CO 128: consumer cw takes dy block cw (64 channels) and all BN = BNC columns. */
template <int CO_, int BNC_, int STAGES_, bool B_COLS_ = false> struct wgrad_cfg {
    static constexpr int CO = CO_, BNC = BNC_, STAGES = STAGES_, BN = CO == 64 ? 2 * BNC : BNC;
    static constexpr bool B_COLS = B_COLS_;
    static constexpr int BLOCK = 64 * 64 * 2; /* one [64 m][64] bf16 TMA box */
    static constexpr int A_BYTES = (CO / 64) * BLOCK, B_BYTES = (BN / 64) * BLOCK, STAGE_BYTES = A_BYTES + B_BYTES;
    static_assert(CO == 64 || CO == 128, "64 or 128 output channels a CTA");
    static constexpr int SMEM = STAGES * STAGE_BYTES + 2 * STAGES * 8 + 1024;
    /* a 64-row reduction step's time on one SM, measured (the lab, H200: 1.1-1.3 us for the 64x256
     * and 128x256 tiles on l1-l4): the split's cost model */
    static constexpr double STEP_US = 1.1;
    static_assert(BNC == 64 || BNC == 128 || BNC == 256, "a consumer takes 64, 128 or 256 columns of K");
    static_assert(SMEM <= 227 * 1024, "shared memory: at most 227 KB a CTA");
};

/* the descriptor of an MN-major tile of [rows of the reduction][64 MN] blocks, 128-byte rows with
 * the 128-byte swizzle: 8-row groups SBO = 1024 bytes apart, 64-wide MN blocks LBO apart (cute's
 * canonical MN-major SW128 layout ((8,8,m),(8,k)):((1,8,LBO),(64,SBO)) in elements). The k16
 * slice kk starts 16 rows = 2048 bytes in. */
__device__ __forceinline__ uint64_t desc_mn_sw128(const void *tile, uint32_t lbo_bytes) {
    const uint64_t a = smem_addr(tile);
    return ((a & 0x3FFFF) >> 4) | ((uint64_t)(lbo_bytes >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}

template <class CFG>
__global__ void __launch_bounds__(384, 1)
    k_sm90_wgrad(const __grid_constant__ CUtensorMap map_dy, const __grid_constant__ CUtensorMap map_x, const wgrad_args p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int STAGES = CFG::STAGES, BNC = CFG::BNC, BN = CFG::BN;
    extern __shared__ uint8_t smem_raw[];
    uint8_t *smem = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    uint8_t *sA = smem;                         /* [STAGES][CO/64][64 m][64 co] */
    uint8_t *sB = smem + STAGES * CFG::A_BYTES; /* [STAGES][BN/64][64 m][64 k] */
    uint64_t *full = (uint64_t *)(smem + STAGES * CFG::STAGE_BYTES);
    uint64_t *empty = full + STAGES;
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], 2 * 4);
        }
        fence_mbar_init();
    }
    __syncthreads();
    const int tco = blockIdx.x % p.tiles_co, tk = blockIdx.x / p.tiles_co;
    const int total = (p.M + 63) / 64;
    const int first = blockIdx.y * p.steps_per_split, last = min(total, first + p.steps_per_split);
    if (wg == 0) {
        setmaxnreg_dec<40>();
        if (tid != 0) return;
        const int HoWo = p.Ho * p.Wo;
        /* the 64-column blocks of K this tile has (the last tile may have fewer) */
        const int nb = min(BN / 64, (p.K - tk * BN + 63) / 64);
        int it = 0;
        for (int step = first; step < last; step++, it++) {
            const int s = it % STAGES;
            mbar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
            mbar_arrive_expect_tx(&full[s], CFG::A_BYTES + nb * CFG::BLOCK);
            const int m0 = step * 64, n0 = m0 / HoWo, rem = m0 - n0 * HoWo, ho = rem / p.Wo;
            const int h0 = ho * p.SH - p.PH, w0 = (rem - ho * p.Wo) * p.SW - p.PW;
#pragma unroll
            for (int cb = 0; cb < CFG::CO / 64; cb++)
                tma_load_2d(sA + s * CFG::A_BYTES + cb * CFG::BLOCK, &map_dy, &full[s], tco * CFG::CO + cb * 64, m0);
            for (int jb = 0; jb < nb; jb++) {
                const int k0 = tk * BN + jb * 64;
                if (CFG::B_COLS) {
                    tma_load_2d(sB + s * CFG::B_BYTES + jb * CFG::BLOCK, &map_x, &full[s], k0, m0);
                    continue;
                }
                const int tap = k0 / p.C, c0 = k0 - tap * p.C, r = tap / p.KW, q = tap - r * p.KW;
                tma_load_im2col(sB + s * CFG::B_BYTES + jb * CFG::BLOCK, &map_x, &full[s], c0, w0, h0, n0,
                                (uint16_t)(q * p.DW), (uint16_t)(r * p.DH));
            }
        }
    } else {
        setmaxnreg_inc<232>();
        const int cw = wg - 1, warp = tid / 32, lane = tid % 32;
        float acc[BNC / 2];
#pragma unroll
        for (int i = 0; i < BNC / 2; i++) acc[i] = 0.0f;
        int it = 0, prev = -1;
        for (int step = first; step < last; step++, it++) {
            const int s = it % STAGES;
            mbar_wait(&full[s], (it / STAGES) & 1);
            const uint8_t *a = sA + s * CFG::A_BYTES + (CFG::CO == 128 ? cw * CFG::BLOCK : 0);
            const uint8_t *b = sB + s * CFG::B_BYTES + (CFG::CO == 64 ? cw * (BNC / 64) * CFG::BLOCK : 0);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
                wgmma_op<BNC, 1>::mma(acc, desc_mn_sw128(a + kk * 2048, CFG::BLOCK),
                                      desc_mn_sw128(b + kk * 2048, CFG::BLOCK), (it | kk) != 0);
            wgmma_commit();
            wgmma_wait<1>();
            if (prev >= 0 && lane == 0) mbar_arrive(&empty[prev]);
            prev = s;
        }
        wgmma_wait<0>();
        /* epilogue: rows co, columns k; fp32 pairs to dw (one split) or to this split's partial */
        float *dst = p.splits == 1 ? p.dw : p.part + (int64_t)blockIdx.y * p.Cout * p.K;
        const float beta = p.splits == 1 ? p.beta : 0.0f;
#pragma unroll
        for (int jn = 0; jn < BNC / 8; jn++) {
            const int k = tk * BN + (CFG::CO == 64 ? cw * BNC : 0) + jn * 8 + 2 * (lane % 4);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int co = tco * CFG::CO + (CFG::CO == 128 ? cw * 64 : 0) + warp * 16 + lane / 4 + 8 * h;
                if (co >= p.Cout || k >= p.K) continue;
                float *at = dst + (int64_t)co * p.K + k;
                const float v0 = acc[4 * jn + 2 * h], v1 = acc[4 * jn + 2 * h + 1];
                if (p.K % 2 == 0) { /* an even K: the pair is 8-byte aligned */
                    float2 v = make_float2(v0, v1);
                    if (beta != 0.0f) {
                        const float2 old = *reinterpret_cast<float2 *>(at);
                        v.x = fmaf(beta, old.x, v.x), v.y = fmaf(beta, old.y, v.y);
                    }
                    *reinterpret_cast<float2 *>(at) = v;
                } else { /* an odd K (the stem's 147): rows start at odd offsets, one element at a time */
                    at[0] = beta != 0.0f ? fmaf(beta, at[0], v0) : v0;
                    if (k + 1 < p.K) at[1] = beta != 0.0f ? fmaf(beta, at[1], v1) : v1;
                }
            }
        }
    }
#endif
}

/* The split of wgrad's reduction: the one of 1 .. steps that minimizes the modelled time -
 * waves of CTAs (tiles x splits over the SMs, one CTA an SM) x steps a CTA x step_us, plus
 * the reduction of the partials (read and written once: 8 bytes an element of each split, at
 * ~3 TB/s) - so that a grid of 1.09 waves (twice the time of 1.0) is never chosen. A pure
 * function of the shape and the SM count: the same split, and the same bits, on every run. */
static inline int sm90_wgrad_splits(int tiles, int steps, int64_t out_elems, int sms, double step_us) {
    int best = 1;
    double best_t = 1e30;
    for (int s = 1; s <= steps && s <= 4 * sms; s++) {
        const int per = (steps + s - 1) / s, used = (steps + per - 1) / per; /* splits that get steps */
        if (used != s) continue;
        const double waves = (double)((tiles * s + sms - 1) / sms);
        const double t = waves * per * step_us + (s > 1 ? (double)s * out_elems * 8.0 / 3.0e6 : 0.0);
        if (t < best_t) best_t = t, best = s;
    }
    return best;
}

/* dw[i] = beta dw[i] + ((part[0][i] + part[1][i]) + ...) in split order: n = Cout * K (static: each
 * file that includes this header has its own) */
static __global__ void k_sm90_wgrad_reduce(float *dw, const float *part, int64_t n, int splits, float beta) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float s = part[i];
        for (int q = 1; q < splits; q++) s += part[(int64_t)q * n + i];
        dw[i] = beta != 0.0f ? fmaf(beta, dw[i], s) : s;
    }
}

} // namespace dt_sm90

#endif
