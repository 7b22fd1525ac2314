/* conv_lab_variants.cuh: the conv lab's own loaders and epilogues for the library's
 * implicit-GEMM templates (ops/conv/conv_igemm.cuh), plugged into k_igemm and k_igemm_wgrad
 * through their policy parameters (the A loader, the epilogue, wgrad's B loader, the view type).
 * Each was measured in the lab and none ships (docs/conv.md "In the lab", docs/PERF.md sections
 * 14-17), so they live here and the library's header holds what the library runs:
 *   a_pointwise     A of a 1x1 stride-1 unpadded conv: x [M, C] itself, one pointer a row
 *   a_deform        the deformable conv's main GEMM: A[m][(t, c)] = mask * bilinear(x, channel c,
 *                   at tap t's position plus its offsets) - the sampled column matrix (deft's
 *                   colT), made in registers from the four corner 16-byte chunks and stored to
 *                   shared memory, never to global memory; the same fp32 arithmetic as deft's
 *                   sampling kernel (w0 v0, then fma w1 v1, w2 v2, w3 v3, times the mask, one
 *                   rounding), so the tile holds exactly the values colT would
 *   wb_deform       the same sampler as wgrad's B operand: dW = dy^T . colT
 *   epi_f32         fp32 y [M, NO], the accumulators as they are
 *   epi_splitk      split-K: split z = blockIdx.y sums its range of k tiles into the fp32
 *                   workspace [splits, M, NO] (k_splitk_sum<bf16> adds the splits in order)
 *   epi_bf16_stats  the library's bf16 epilogue plus the batch norm's statistics of the stored y
 * Included by bench/lab/conv_lab.cu only. */
#ifndef DT_CONV_LAB_VARIANTS_CUH
#define DT_CONV_LAB_VARIANTS_CUH

#include "core/dt_lanes.cuh"
#include "ops/conv/conv_igemm.cuh"
#include "ops/deform/deform_bilinear.h"

namespace dt_igemm {
/* four bf16 of y as a float4 (dt_lanes.cuh's vector moves), for k_splitk_sum<bf16>
 * (epi_splitk's second pass) */
template <> struct out4<bf16> {
    __device__ __forceinline__ static float4 load(const bf16 *y) { return bf16x4_to_float4(*reinterpret_cast<const uint2 *>(y)); }
    __device__ __forceinline__ static void store(bf16 *y, float4 a) { cstore(y, 0, a); }
};
} /* namespace dt_igemm */

namespace conv_lab {

using dt_igemm::bf16;

/* ---- the deformable sampler (a_deform, wb_deform) */

/* Its source: om [M, ocs] fp32, the offset conv's output per output position - (dy, dx) of tap
 * t of offset group g at columns 2*(g*KH*KW + t) and +1, the mask (after its sigmoid) at
 * 2*gk + g*KH*KW + t when has_mask; gk = G*KH*KW; cg = C / G (a multiple of 8: a chunk is in
 * one group). */
struct deform_src {
    const float *om;
    int ocs, cg, gk, has_mask;
};
/* The views the deformable loaders read: fprop's GEMM, wgrad's problem, with the offsets. */
struct deform_view : dt_igemm::gemm_view {
    deform_src d;
};
struct deform_conv : dt_igemm::conv_params {
    deform_src d;
};

/* One 16-byte chunk of the sampled column matrix in flight: its four corner chunks (zero where
 * the corner is outside, or the chunk is not in range), their bilinear weights and the mask. */
struct deform_chunk {
    uint4 v[4];
    float w[4], mask;
};

/* Fetches the chunk of output position m (row m of om), tap (r, t) = tap, channels c .. c+7 of
 * the image at img [AH, AW, C]; (h0, w0): the position's window origin (ho*SH - PH, wo*SW - PW).
 * ok == false (past M or K) leaves zeros. The loads are issued here; deform_blend uses them. */
__device__ __forceinline__ void deform_fetch(const deform_src &d, bool ok, int m, const bf16 *img, int h0, int w0, int r,
                                             int t, int tap, int c, int KHW, int DH, int DW, int AH, int AW, int C,
                                             deform_chunk &out) {
    out.mask = 0.0f;
#pragma unroll
    for (int q = 0; q < 4; q++) out.v[q] = make_uint4(0, 0, 0, 0), out.w[q] = 0.0f;
    if (!ok) return;
    const int j = (c / d.cg) * KHW + tap; /* offset group g = c / cg */
    const float *row = d.om + (int64_t)m * d.ocs;
    out.mask = d.has_mask ? row[d.gk * 2 + j] : 1.0f;
    const dt_bilin b = dt_bilin_make((float)(h0 + r * DH) + row[2 * j], (float)(w0 + t * DW) + row[2 * j + 1], AH, AW);
#pragma unroll
    for (int q = 0; q < 4; q++) {
        out.w[q] = b.w[q];
        if (b.ok[q]) out.v[q] = __ldg(reinterpret_cast<const uint4 *>(img + dt_bilin_index(&b, q, AW) * C + c));
    }
}

/* The chunk's 8 samples: mask * (w0 v0 + w1 v1 + w2 v2 + w3 v3) per channel in fp32 (deft's
 * sampling order: a product, then three fmas, then the mask), each rounded once to bf16. */
__device__ __forceinline__ uint4 deform_blend(const deform_chunk &d) {
    const bf16 *v[4];
#pragma unroll
    for (int q = 0; q < 4; q++) v[q] = reinterpret_cast<const bf16 *>(&d.v[q]);
    uint4 out;
    __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&out);
#pragma unroll
    for (int e = 0; e < 4; e++) {
        float s2[2];
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int ch = 2 * e + u;
            float s = d.w[0] * __bfloat162float(v[0][ch]);
            s = fmaf(d.w[1], __bfloat162float(v[1][ch]), s);
            s = fmaf(d.w[2], __bfloat162float(v[2][ch]), s);
            s = fmaf(d.w[3], __bfloat162float(v[3][ch]), s);
            s2[u] = d.mask * s;
        }
        h[e] = __floats2bfloat162_rn(s2[0], s2[1]);
    }
    return out;
}

/* ---- A loaders (k_igemm's interface: conv_igemm.cuh, "k_igemm's A-operand loaders") */

/* a_pointwise: a 1x1 stride-1 unpadded conv's A is x [M, C] itself - no tap arithmetic */
template <class T> struct a_pointwise : dt_igemm::a_whole {
    const bf16 *row[T::A_IT]; /* x's row m, or NULL past M */
    __device__ __forceinline__ void rows(const dt_igemm::gemm_view &p, int m0, int krow) {
#pragma unroll
        for (int i = 0; i < T::A_IT; i++) {
            const int m = m0 + krow + i * T::ROWS_PER_PASS;
            row[i] = m < M ? p.a + (int64_t)m * p.AC : nullptr;
        }
    }
    __device__ __forceinline__ int load(const dt_igemm::gemm_view &p, const smem &, bf16 *da, int k, bool kin) const {
#pragma unroll
        for (int i = 0; i < T::A_IT; i++) {
            const bool ok = kin && row[i] != nullptr;
            dt_igemm::cp_async16(da + i * T::ROWS_PER_PASS * T::PITCH, ok ? row[i] + k : p.a, ok ? 16 : 0);
        }
        return k;
    }
};

/* a_deform: fprop's rows and taps (a_im2col's), the samples instead of x's chunks: load issues
 * the corner loads into registers, fill blends them into the stage after its mma (while the
 * next tiles' loads are in flight). View: deform_view. */
template <class T> struct a_deform : dt_igemm::a_im2col<T> {
    typedef dt_igemm::a_im2col<T> im2col;
    int m[T::A_IT];             /* the row (om's), -1 past M */
    deform_chunk ch[T::A_IT];   /* the chunks between load and fill */
    __device__ __forceinline__ void rows(const dt_igemm::gemm_view &p, int m0, int krow) {
        im2col::rows(p, m0, krow);
#pragma unroll
        for (int i = 0; i < T::A_IT; i++) {
            const int mi = m0 + krow + i * T::ROWS_PER_PASS;
            m[i] = mi < this->M ? mi : -1;
        }
    }
    __device__ __forceinline__ int load(const deform_view &p, const typename im2col::smem &sh, bf16 *, int k, bool kin) {
        int r, t, c, tap;
        this->decode(p, sh, k, kin, r, t, c, tap);
#pragma unroll
        for (int i = 0; i < T::A_IT; i++)
            deform_fetch(p.d, kin && m[i] >= 0, m[i], this->base[i], this->h0[i], this->w0[i], r, t, tap, c, p.KH * p.KW, p.DH,
                         p.DW, p.AH, p.AW, p.AC, ch[i]);
        return k;
    }
    __device__ __forceinline__ void fill(bf16 *da) const {
#pragma unroll
        for (int i = 0; i < T::A_IT; i++)
            *reinterpret_cast<uint4 *>(da + i * T::ROWS_PER_PASS * T::PITCH) = deform_blend(ch[i]);
    }
};

/* ---- wgrad's B loader (k_igemm_wgrad's interface: conv_igemm.cuh, "wgrad's B loaders") */

/* wb_deform: B = colT, the samples of output position m at column kb's tap and channels.
 * Problem: deform_conv. */
template <class T> struct wb_deform : dt_igemm::wb_im2col<T> {
    deform_chunk ch[T::B_IT];
    __device__ __forceinline__ void load(const deform_conv &p, bf16 *, int m, int i) {
        int n = 0, ho = 0, wo = 0;
        if (m < p.M) {
            const int hw = p.Ho * p.Wo;
            n = m / hw, ho = (m - n * hw) / p.Wo, wo = m - n * hw - ho * p.Wo;
        }
        deform_fetch(p.d, this->in && m < p.M, m, p.x + (int64_t)n * p.H * p.W * p.C, ho * p.SH - p.PH, wo * p.SW - p.PW,
                     this->rr, this->tt, this->tap, this->cb, p.KH * p.KW, p.DH, p.DW, p.H, p.W, p.C, ch[i]);
    }
    __device__ __forceinline__ void fill(bf16 *dst, int i) const { *reinterpret_cast<uint4 *>(dst) = deform_blend(ch[i]); }
};

/* ---- epilogues (k_igemm's interface: conv_igemm.cuh, "k_igemm's epilogues"); the fp32 ones
 * write the GEMM's rows as they are (not with a_dgrad_split, whose rows are scattered) */

/* the warp's accumulators to fp32 y [M, NO] */
template <class T>
__device__ __forceinline__ void store_f32(const float (&acc)[T::MI][T::NI][4], float *y, const dt_igemm::gemm_view &p, int m0,
                                          int n0, int tid) {
    const int lane = tid & 31, warp = tid >> 5, warp_m = warp / T::WARPS_N, warp_n = warp % T::WARPS_N;
    dt_igemm::store_acc_f32(acc, y, p.M, p.NO, m0 + warp_m * T::WM, n0 + warp_n * T::WN, lane);
}

struct epi_f32 {
    __device__ __forceinline__ static void k_range(int, int &, int &) {}
    template <class T, class A, class V>
    __device__ __forceinline__ static void store(const V &p, const float (&acc)[T::MI][T::NI][4], unsigned char *, const A &,
                                                 int m0, int n0, int tid) {
        store_f32<T>(acc, static_cast<float *>(p.y), p, m0, n0, tid);
    }
};

/* split-K: gridDim.y splits of the k tiles into contiguous ranges (a split past the end has
 * none and writes 0); split z's fp32 partial tile to y + z*M*NO (p.y: the workspace) - for the
 * shapes whose tiles are too few to fill the GPU (layer3-4: M = N*Ho*Wo is small, K long) */
struct epi_splitk {
    __device__ __forceinline__ static void k_range(int KT_ALL, int &kt0, int &KT) {
        const int per = (KT_ALL + (int)gridDim.y - 1) / (int)gridDim.y;
        kt0 = min(KT_ALL, (int)blockIdx.y * per);
        KT = min(KT_ALL - kt0, per);
    }
    template <class T, class A, class V>
    __device__ __forceinline__ static void store(const V &p, const float (&acc)[T::MI][T::NI][4], unsigned char *, const A &,
                                                 int m0, int n0, int tid) {
        store_f32<T>(acc, static_cast<float *>(p.y) + (int64_t)blockIdx.y * p.M * p.NO, p, m0, n0, tid);
    }
};

/* The batch norm's statistics of y in the epilogue: per row tile of BM rows, cut into
 * stats_groups slabs of consecutive rows (one per group of BN threads), the sums of the stored
 * (rounded) y and of y^2 over a slab's rows in row order, fp32, into
 * stats [2][ceil(M / BM) * stats_groups][NO] (the lab's bn_stats_final reduces them in a fixed
 * order). View: stats_view; loaders whose output rows are the GEMM's (not a_dgrad_split). */
struct stats_view : dt_igemm::gemm_view {
    float *stats;
};
/* slabs per row tile: one group of BN threads a slab, as many groups as the CTA's threads hold
 * (1 when BN >= THREADS) */
template <int THREADS, int BN> __host__ __device__ constexpr int stats_groups() { return THREADS / BN > 0 ? THREADS / BN : 1; }

struct epi_bf16_stats {
    __device__ __forceinline__ static void k_range(int, int &, int &) {}
    template <class T, class A>
    __device__ __forceinline__ static void store(const stats_view &p, const float (&acc)[T::MI][T::NI][4], unsigned char *smem,
                                                 const A &a, int m0, int n0, int tid) {
        constexpr int BM = T::BM, BN = T::BN;
        float *sC = dt_igemm::stage_acc<T>(acc, smem, tid);
        __syncthreads();
        /* the library's stores; each chunk's stored values back into the tile for the column sums */
        dt_igemm::store_rows_bf16<T>(p, sC, a, m0, n0, tid, [&](int row, int ch, const __nv_bfloat162 *h) {
            float *c = sC + row * T::CPITCH + ch * 8;
#pragma unroll
            for (int e = 0; e < 4; e++) c[2 * e] = __low2float(h[e]), c[2 * e + 1] = __high2float(h[e]);
        });
        /* thread (group, column) sums its slab's rows of one column in order (deterministic),
         * every thread busy; the tile's rows past M are not summed */
        __syncthreads();
        constexpr int G = stats_groups<T::THREADS, BN>();
        constexpr int SLAB = BM / G;
        const int tiles = (p.M + BM - 1) / BM, rows = a.M - m0 < BM ? a.M - m0 : BM;
        static_assert(BM % G == 0, "whole slabs");
        const int64_t slabs = (int64_t)tiles * G;
        for (int idx = tid; idx < G * BN; idx += T::THREADS) {
            const int grp = idx / BN, c = idx % BN, co = n0 + c;
            if (co >= p.NO) continue;
            const int r0 = grp * SLAB, r1 = r0 + SLAB < rows ? r0 + SLAB : rows;
            float s = 0.0f, s2 = 0.0f;
            for (int r = r0; r < r1; r++) {
                const float v = sC[r * T::CPITCH + c];
                s += v;
                s2 = fmaf(v, v, s2);
            }
            const int64_t slab = (int64_t)(m0 / BM) * G + grp;
            p.stats[slab * p.NO + co] = s;
            p.stats[(slabs + slab) * p.NO + co] = s2;
        }
    }
};

} /* namespace conv_lab */
#endif
