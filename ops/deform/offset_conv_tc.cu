/* The offset conv's three implicit GEMMs on tensor cores (contracts: offset_conv.h; why and
 * the numbers: docs/deft.md, "Reduced precision"). Used by the _cuda entry points for bf16
 * plans and f32 plans with TF32 products when C % 32 == 0; strict f32 plans keep the FFMA
 * kernels of offset_conv.cu.
 *
 * bf16 plans: x is bf16 and goes into shared memory as stored (8 bytes a quad of channels);
 * the fp32 operands (w, dom) are rounded once on their way in, to nearest even. TF32 (f32
 * plans): every operand is rounded on its way in (cvt.rna: to nearest, ties away). Products
 * and sums are fp32 (wmma accumulators); om, dw, db fp32, dx in the plan's dtype (rounded
 * once, after the caller's fp32 `add` and beta). Tiles (8 warps each, every warp owning whole
 * 16x16 accumulator tiles):
 *   fwd  (halo, the default) block = an output tile of 8 rows x 16 columns x 32 offset
 *        channels; a step = a 32-channel chunk: the tile's input footprint + halo and the
 *        chunk's weights for all taps staged once, then every tap multiplies from shared memory
 *        (warp w: tile row w). (flat, the fallback for K > 16 or footprints beyond shared
 *        memory) block = 128 positions of the flat list; a step = one tap x 32 channels.
 *        Steps split over blockIdx.z when blocks are few (partials summed by k_fwd_finish).
 *   dw   (halo) block = 32 offset channels x (all taps x 32 channels) over a range of tiles;
 *        warp t = tap t; per tile the footprint and the tile's dom rows are staged; A = dom^T
 *        (read column-major from the dom rows), B = the footprint pixels the tap reads. The
 *        bias gradient: k_db_parts. (flat) block = 32 offset channels x 128 columns (k*C + c)
 *        over a range of positions, steps of 64 positions; its db block sums dom in fp32.
 *        Ranges over blockIdx.z, summed in order by k_sum_parts.
 *   dx   block = 128 pixels x 64 channels; a step = one tap x 32 offset channels; A = the dom
 *        row of the position that reads the pixel through the tap (0 if none), B = the tap's
 *        weights [32 oc][64 ch]; warp w: pixels 16w..16w+15, four 16-channel tiles.
 * Every sum runs in a fixed order (one warp per tile, steps in sequence): deterministic.
 * Measured (one bf16 step, batch 64): halo forward 0.99 ms vs flat 1.10, halo dW 1.09 vs 1.83;
 * TF32 1.82 / 1.61 vs 1.81 / 2.70 (docs/deft.md). */
#include <cuda_bf16.h>
#include <mma.h>

#include "core/dt_kernel_util.cuh"
#include "ops/deform/offset_conv.cuh"
#include "ops/deform/offset_conv.h"
#include "ops/deform/offset_conv_tc.h"

using namespace nvcuda;

namespace {

__device__ __forceinline__ float4 ldg4(const float *p) { return __ldg(reinterpret_cast<const float4 *>(p)); }
__device__ __forceinline__ float4 zero4() { return make_float4(0.f, 0.f, 0.f, 0.f); }

/* Operand traits: shared-memory element type S, wmma element type F, k of one mma; X the
 * plan's tensor type (x, dx) and XQ a quad of its channels as loaded from global memory. */
template <bool BF>
struct tc;
template <>
struct tc<true> {
    typedef __nv_bfloat16 S;
    typedef __nv_bfloat16 F;
    typedef __nv_bfloat16 X;
    typedef uint2 XQ; /* 4 bf16 */
    static const int KS = 16, PAD = 8; /* ldm: a multiple of 8 bf16 (16 bytes), padded off 128 B */
    static __device__ __forceinline__ S cvt(float v) { return __float2bfloat16_rn(v); }
    static __device__ __forceinline__ XQ ldq(const X *p) { return __ldg(reinterpret_cast<const uint2 *>(p)); }
    static __device__ __forceinline__ XQ zq() { return make_uint2(0u, 0u); }
    /* bf16 x is already an operand: copied as stored */
    static __device__ __forceinline__ void putq(S *dst, XQ q) { *reinterpret_cast<uint2 *>(dst) = q; }
};
template <>
struct tc<false> {
    typedef float S;
    typedef wmma::precision::tf32 F;
    typedef float X;
    typedef float4 XQ;
    static const int KS = 8, PAD = 4;
    static __device__ __forceinline__ S cvt(float v) { return wmma::__float_to_tf32(v); }
    static __device__ __forceinline__ XQ ldq(const X *p) { return ldg4(p); }
    static __device__ __forceinline__ XQ zq() { return zero4(); }
    static __device__ __forceinline__ void putq(S *dst, XQ q) {
        dst[0] = cvt(q.x);
        dst[1] = cvt(q.y);
        dst[2] = cvt(q.z);
        dst[3] = cvt(q.w);
    }
};

/* Four fp32 values (w, dom) rounded into an operand. */
template <bool BF>
__device__ __forceinline__ void put4(typename tc<BF>::S *dst, float4 v) {
    dst[0] = tc<BF>::cvt(v.x);
    dst[1] = tc<BF>::cvt(v.y);
    dst[2] = tc<BF>::cvt(v.z);
    dst[3] = tc<BF>::cvt(v.w);
}

const int THREADS = 256, OCT = 32;

/* ------------------------------------------------------------------ forward */

const int F_BM = 128, F_BC = 32;

template <bool BF>
struct fwd_smem {
    typedef typename tc<BF>::S S;
    static const int LA = F_BC + tc<BF>::PAD, LB = OCT + tc<BF>::PAD, LO = OCT + 4;
    union {
        struct {
            S A[2][F_BM][LA]; /* positions x channels */
            S B[2][F_BC][LB]; /* channels x offset channels */
        } in;
        float out[F_BM][LO]; /* the block's sums, for the epilogue */
    };
};

template <bool BF>
__global__ void __launch_bounds__(THREADS) k_fwd_tc(dt_deform_chunk c, const float *__restrict__ wv,
                                                    const float *__restrict__ bias,
                                                    const typename tc<BF>::X *__restrict__ xT, float *__restrict__ out,
                                                    int steps_per_split, int split) {
    typedef tc<BF> T;
    typedef fwd_smem<BF> SM;
    __shared__ __align__(128) SM sm;
    const int tid = threadIdx.x, warp = tid >> 5;
    const int q0 = blockIdx.x * F_BM, ot = blockIdx.y, z = blockIdx.z;
    const int ncc = c.C / F_BC, nsteps = c.K * ncc;
    const int s0 = z * steps_per_split, s1 = min(nsteps, s0 + steps_per_split);
    /* loader: positions lp + 32j (j < 4), channel quad lcq; weights row tid/8, quad tid%8 */
    const int lp = tid >> 3, lcq = tid & 7;
    int limg[4], ly0[4], lx0[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        int q = q0 + lp + 32 * j, oy = 0, ox = 0;
        limg[j] = -1;
        if (q < c.Q) dt_position_decode(&c, q, &limg[j], &oy, &ox);
        ly0[j] = oy * c.sh - c.ph;
        lx0[j] = ox * c.sw - c.pw;
    }
    typename T::XQ ra[4];
    float4 rb;
    auto load = [&](int s) {
        const int k = s / ncc, cc0 = (s - k * ncc) * F_BC;
        uint32_t kyu;
        const int kx = (int)dt_fastdiv_divmod((uint32_t)k, c.fkw, &kyu), ky = (int)kyu;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int iy = ly0[j] + ky * c.dh, ix = lx0[j] + kx * c.dw;
            bool ok = limg[j] >= 0 && iy >= 0 && iy < c.H && ix >= 0 && ix < c.W;
            ra[j] = ok ? T::ldq(xT + (((int64_t)limg[j] * c.H + iy) * c.W + ix) * c.C + cc0 + 4 * lcq) : T::zq();
        }
        rb = ldg4(wv + (((int64_t)ot * c.K + k) * c.C + cc0 + (tid >> 3)) * OCT + 4 * (tid & 7));
    };
    auto store = [&](int buf) {
#pragma unroll
        for (int j = 0; j < 4; j++) T::putq(&sm.in.A[buf][lp + 32 * j][4 * lcq], ra[j]);
        put4<BF>(&sm.in.B[buf][tid >> 3][4 * (tid & 7)], rb);
    };
    wmma::fragment<wmma::accumulator, 16, 16, T::KS, float> acc[2];
    wmma::fill_fragment(acc[0], 0.0f);
    wmma::fill_fragment(acc[1], 0.0f);
    if (s0 < s1) {
        load(s0);
        store(0);
    }
    __syncthreads();
    for (int s = s0; s < s1; s++) {
        const int buf = (s - s0) & 1;
        if (s + 1 < s1) load(s + 1);
#pragma unroll
        for (int kk = 0; kk < F_BC; kk += T::KS) {
            wmma::fragment<wmma::matrix_a, 16, 16, T::KS, typename T::F, wmma::row_major> a;
            wmma::fragment<wmma::matrix_b, 16, 16, T::KS, typename T::F, wmma::row_major> b;
            wmma::load_matrix_sync(a, &sm.in.A[buf][16 * warp][kk], SM::LA);
#pragma unroll
            for (int n = 0; n < 2; n++) {
                wmma::load_matrix_sync(b, &sm.in.B[buf][kk][16 * n], SM::LB);
                wmma::mma_sync(acc[n], a, b, acc[n]);
            }
        }
        if (s + 1 < s1) store(buf ^ 1);
        __syncthreads();
    }
    wmma::store_matrix_sync(&sm.out[16 * warp][0], acc[0], SM::LO, wmma::mem_row_major);
    wmma::store_matrix_sync(&sm.out[16 * warp][16], acc[1], SM::LO, wmma::mem_row_major);
    __syncthreads();
    for (int e = tid; e < F_BM * OCT; e += THREADS) {
        const int pos = e / OCT, o = e - pos * OCT, q = q0 + pos, oc = ot * OCT + o;
        if (q >= c.Q || oc >= c.OCS) continue;
        const float sum = sm.out[pos][o];
        if (split) out[((int64_t)z * c.Q + q) * c.OCS + oc] = sum;
        else out[(int64_t)q * c.OCS + oc] = offconv_finish(c, oc, sum, bias);
    }
}

/* ------------------------------------------------------------------ weight gradient */

const int W_BQ = 64, W_BN = 128;

template <bool BF>
struct dw_smem {
    typedef typename tc<BF>::S S;
    static const int LX = W_BN + tc<BF>::PAD, LD = OCT + tc<BF>::PAD, LO = W_BN + 4;
    union {
        struct {
            S X[2][W_BQ][LX]; /* positions x columns */
            S D[2][W_BQ][LD]; /* positions x offset channels */
        } in;
        float out[OCT][LO];
        float4 dsum[THREADS];
    };
};

template <bool BF>
__global__ void __launch_bounds__(THREADS) k_dw_tc(dt_deform_chunk c, int qchunk, const typename tc<BF>::X *__restrict__ xT,
                                                   const float *__restrict__ dom, float *__restrict__ partw,
                                                   float *__restrict__ partb) {
    typedef tc<BF> T;
    typedef dw_smem<BF> SM;
    extern __shared__ __align__(128) unsigned char dw_raw[];
    SM &sm = *reinterpret_cast<SM *>(dw_raw);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int ot = blockIdx.y, z = blockIdx.z;
    const bool db_block = blockIdx.x == 0;
    /* loader: columns 4*lane.. of the block (one tap each, C % 4 == 0), positions warp + 8j */
    const int col = blockIdx.x * W_BN + 4 * lane;
    const bool colok = col < c.KC;
    const int kk = colok ? col / c.C : 0, ch = col - kk * c.C;
    uint32_t kyu;
    const int kkx = (int)dt_fastdiv_divmod((uint32_t)kk, c.fkw, &kyu), kky = (int)kyu;
    const int qbeg = z * qchunk, qend = min(c.Q, qbeg + qchunk), ntiles = (qend - qbeg + W_BQ - 1) / W_BQ;
    /* dom loader: entries idx = tid + 256j (j < 2): position idx/8, offset-channel quad idx%8 */
    const int dq = tid & 7, doc = ot * OCT + 4 * dq;
    typename T::XQ rx[W_BQ / 8];
    float4 rd[2], dsum = zero4();
    auto load = [&](int tile) {
        const int qt = qbeg + tile * W_BQ;
#pragma unroll
        for (int j = 0; j < W_BQ / 8; j++) {
            const int q = qt + warp + 8 * j;
            rx[j] = T::zq();
            if (q < qend && colok) {
                int i, oy, ox;
                dt_position_decode(&c, q, &i, &oy, &ox);
                int iy = oy * c.sh - c.ph + kky * c.dh, ix = ox * c.sw - c.pw + kkx * c.dw;
                if (iy >= 0 && iy < c.H && ix >= 0 && ix < c.W)
                    rx[j] = T::ldq(xT + (((int64_t)i * c.H + iy) * c.W + ix) * c.C + ch);
            }
        }
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int q = qt + ((tid + THREADS * j) >> 3);
            rd[j] = q < qend && doc < c.OCS ? ldg4(dom + (int64_t)q * c.OCS + doc) : zero4();
        }
    };
    auto store = [&](int buf) {
#pragma unroll
        for (int j = 0; j < W_BQ / 8; j++) T::putq(&sm.in.X[buf][warp + 8 * j][4 * lane], rx[j]);
#pragma unroll
        for (int j = 0; j < 2; j++) {
            put4<BF>(&sm.in.D[buf][(tid + THREADS * j) >> 3][4 * dq], rd[j]);
            if (db_block) { /* the bias gradient from the fp32 values, positions in order */
                dsum.x += rd[j].x;
                dsum.y += rd[j].y;
                dsum.z += rd[j].z;
                dsum.w += rd[j].w;
            }
        }
    };
    wmma::fragment<wmma::accumulator, 16, 16, T::KS, float> acc[2];
    wmma::fill_fragment(acc[0], 0.0f);
    wmma::fill_fragment(acc[1], 0.0f);
    if (ntiles > 0) {
        load(0);
        store(0);
    }
    __syncthreads();
    for (int tile = 0; tile < ntiles; tile++) {
        const int buf = tile & 1;
        if (tile + 1 < ntiles) load(tile + 1);
#pragma unroll
        for (int k = 0; k < W_BQ; k += T::KS) {
            wmma::fragment<wmma::matrix_b, 16, 16, T::KS, typename T::F, wmma::row_major> b;
            wmma::load_matrix_sync(b, &sm.in.X[buf][k][16 * warp], SM::LX);
#pragma unroll
            for (int m = 0; m < 2; m++) {
                /* A[oc][pos] = D[pos][oc]: column-major with the D rows' stride */
                wmma::fragment<wmma::matrix_a, 16, 16, T::KS, typename T::F, wmma::col_major> a;
                wmma::load_matrix_sync(a, &sm.in.D[buf][k][16 * m], SM::LD);
                wmma::mma_sync(acc[m], a, b, acc[m]);
            }
        }
        if (tile + 1 < ntiles) store(buf ^ 1);
        __syncthreads();
    }
    wmma::store_matrix_sync(&sm.out[0][16 * warp], acc[0], SM::LO, wmma::mem_row_major);
    wmma::store_matrix_sync(&sm.out[16][16 * warp], acc[1], SM::LO, wmma::mem_row_major);
    __syncthreads();
    for (int e = tid; e < OCT * W_BN; e += THREADS) {
        const int o = e / W_BN, cl = blockIdx.x * W_BN + (e - o * W_BN), oc = ot * OCT + o;
        if (cl >= c.KC || oc >= c.OC) continue;
        const int k2 = cl / c.C, c2 = cl - k2 * c.C;
        partw[(((int64_t)z * c.OC + oc) * c.C + c2) * c.K + k2] = sm.out[o][e - o * W_BN];
    }
    if (db_block) { /* the 32 threads of each quad, in thread order */
        __syncthreads();
        sm.dsum[tid] = dsum;
        __syncthreads();
        if (tid < 8) {
            float4 s = zero4();
            for (int t = tid; t < THREADS; t += 8) {
                s.x += sm.dsum[t].x;
                s.y += sm.dsum[t].y;
                s.z += sm.dsum[t].z;
                s.w += sm.dsum[t].w;
            }
            const float v[4] = {s.x, s.y, s.z, s.w};
            for (int e = 0; e < 4; e++)
                if (ot * OCT + 4 * tid + e < c.OC) partb[(int64_t)z * c.OC + ot * OCT + 4 * tid + e] = v[e];
        }
    }
}

/* ------------------------------------------------------------------ halo tiles (fwd, dw)
 *
 * Taken as a flat list of positions, the forward and the weight gradient read x once per tap
 * (9x the input for 3x3). Taken as output tiles of H_R rows x 16 columns, a tile's input
 * footprint (+ halo) is staged once per 32-channel chunk and every tap reads it from shared
 * memory: the 16 positions of a tile row through tap (ky, kx) are 16 footprint pixels at the
 * constant stride sw, i.e. one wmma operand with ldm = sw * LP. Positions past the map's edge
 * compute values that are never written (fwd) or are multiplied by a zero dom row (dw). */

const int H_R = 8, H_C = 16;

struct halo {
    int tx, ty, tiles; /* tiles per image: columns, rows, both */
    int FH, FW;        /* footprint rows, columns */
};

halo halo_of(const dt_deform_chunk &c) {
    halo h;
    h.tx = (c.Wo + H_C - 1) / H_C;
    h.ty = (c.Ho + H_R - 1) / H_R;
    h.tiles = h.tx * h.ty;
    h.FH = (H_R - 1) * c.sh + (c.kh - 1) * c.dh + 1;
    h.FW = (H_C - 1) * c.sw + (c.kw - 1) * c.dw + 1;
    return h;
}

/* Footprint pitch in elements: 32 channels + padding, a multiple of 32 bytes (wmma's pointer
 * alignment for any pixel): 48 bf16 (96 B), 40 floats (160 B). */
template <bool BF>
struct lp {
    static const int LP = BF ? 48 : 40;
};

/* Stages the footprint of the tile at output (oy0, ox0) of image i, channels [cc0, cc0 + 32),
 * into F [FH*FW][LP] (0 outside the image). */
template <bool BF>
__device__ __forceinline__ void stage_footprint(const dt_deform_chunk &c, const halo &h,
                                                const typename tc<BF>::X *__restrict__ xT, int i, int oy0, int ox0,
                                                int cc0, typename tc<BF>::S *F) {
    typedef tc<BF> T;
    const int iy0 = oy0 * c.sh - c.ph, ix0 = ox0 * c.sw - c.pw, n = h.FH * h.FW * 8;
    for (int e = threadIdx.x; e < n; e += blockDim.x) {
        const int pix = e >> 3, quad = e & 7, fy = pix / h.FW, fx = pix - fy * h.FW, iy = iy0 + fy, ix = ix0 + fx;
        const bool ok = iy >= 0 && iy < c.H && ix >= 0 && ix < c.W;
        T::putq(F + pix * lp<BF>::LP + 4 * quad,
                ok ? T::ldq(xT + (((int64_t)i * c.H + iy) * c.W + ix) * c.C + cc0 + 4 * quad) : T::zq());
    }
}

template <bool BF>
size_t fwd_halo_smem(const dt_deform_chunk &c) {
    halo h = halo_of(c);
    size_t in = ((size_t)h.FH * h.FW * lp<BF>::LP + (size_t)c.K * F_BC * (OCT + tc<BF>::PAD)) * sizeof(typename tc<BF>::S);
    size_t out = (size_t)F_BM * (OCT + 4) * sizeof(float);
    return in > out ? in : out;
}

/* Forward: block = one tile x 32 offset channels (warp w: tile row w); a step = a chunk of 32
 * input channels, all taps; chunks split over blockIdx.z when blocks are few. */
template <bool BF>
__global__ void __launch_bounds__(THREADS) k_fwd_halo(dt_deform_chunk c, halo h, const float *__restrict__ wv,
                                                      const float *__restrict__ bias,
                                                      const typename tc<BF>::X *__restrict__ xT, float *__restrict__ out,
                                                      int chunks_per_split, int split) {
    typedef tc<BF> T;
    typedef typename T::S S;
    const int LP = lp<BF>::LP, LB = OCT + T::PAD, LO = OCT + 4;
    extern __shared__ __align__(128) unsigned char fh_raw[];
    S *F = reinterpret_cast<S *>(fh_raw);
    S *Wt = F + h.FH * h.FW * LP;                 /* [K][32 ch][LB] */
    float *O = reinterpret_cast<float *>(fh_raw); /* [128][LO], after the last step */
    const int tid = threadIdx.x, warp = tid >> 5;
    const int i = blockIdx.x / h.tiles, t = blockIdx.x - i * h.tiles, tyi = t / h.tx;
    const int oy0 = tyi * H_R, ox0 = (t - tyi * h.tx) * H_C, ot = blockIdx.y, z = blockIdx.z;
    const int nch = c.C / F_BC, ch0 = z * chunks_per_split, ch1 = min(nch, ch0 + chunks_per_split);
    wmma::fragment<wmma::accumulator, 16, 16, T::KS, float> acc[2];
    wmma::fill_fragment(acc[0], 0.0f);
    wmma::fill_fragment(acc[1], 0.0f);
    for (int ch = ch0; ch < ch1; ch++) {
        const int cc0 = ch * F_BC;
        stage_footprint<BF>(c, h, xT, i, oy0, ox0, cc0, F);
        for (int e = tid; e < c.K * F_BC * 8; e += THREADS) {
            const int k = e / (F_BC * 8), r = (e >> 3) & (F_BC - 1), quad = e & 7;
            put4<BF>(Wt + (k * F_BC + r) * LB + 4 * quad, ldg4(wv + (((int64_t)ot * c.K + k) * c.C + cc0 + r) * OCT + 4 * quad));
        }
        __syncthreads();
        for (int k = 0; k < c.K; k++) {
            uint32_t kyu;
            const int kx = (int)dt_fastdiv_divmod((uint32_t)k, c.fkw, &kyu), ky = (int)kyu;
            const S *arow = F + ((warp * c.sh + ky * c.dh) * h.FW + kx * c.dw) * LP;
#pragma unroll
            for (int kk = 0; kk < F_BC; kk += T::KS) {
                wmma::fragment<wmma::matrix_a, 16, 16, T::KS, typename T::F, wmma::row_major> a;
                wmma::load_matrix_sync(a, arow + kk, c.sw * LP);
#pragma unroll
                for (int n = 0; n < 2; n++) {
                    wmma::fragment<wmma::matrix_b, 16, 16, T::KS, typename T::F, wmma::row_major> b;
                    wmma::load_matrix_sync(b, Wt + (k * F_BC + kk) * LB + 16 * n, LB);
                    wmma::mma_sync(acc[n], a, b, acc[n]);
                }
            }
        }
        __syncthreads();
    }
    wmma::store_matrix_sync(O + (16 * warp) * LO, acc[0], LO, wmma::mem_row_major);
    wmma::store_matrix_sync(O + (16 * warp) * LO + 16, acc[1], LO, wmma::mem_row_major);
    __syncthreads();
    for (int e = tid; e < F_BM * OCT; e += THREADS) {
        const int pos = e / OCT, o = e - pos * OCT, oy = oy0 + pos / H_C, ox = ox0 + pos % H_C, oc = ot * OCT + o;
        if (oy >= c.Ho || ox >= c.Wo || oc >= c.OCS) continue;
        const int64_t q = ((int64_t)i * c.Ho + oy) * c.Wo + ox;
        const float sum = O[pos * LO + o];
        if (split) out[((int64_t)z * c.Q + q) * c.OCS + oc] = sum;
        else out[q * c.OCS + oc] = offconv_finish(c, oc, sum, bias);
    }
}

template <bool BF>
size_t dw_halo_smem(const dt_deform_chunk &c) {
    halo h = halo_of(c);
    size_t in = ((size_t)h.FH * h.FW * lp<BF>::LP + (size_t)F_BM * (OCT + tc<BF>::PAD)) * sizeof(typename tc<BF>::S);
    size_t out = (size_t)c.K * OCT * (F_BC + 4) * sizeof(float);
    return in > out ? in : out;
}

/* Weight gradient: block = 32 offset channels x (all K taps x a chunk of 32 input channels)
 * over a range of tiles (blockIdx.z); warp t = tap t (K <= 16). Per tile: the footprint and
 * the tile's dom rows (0 past the map) staged; each warp multiplies dom^T (offset channels x
 * the 16 positions of a tile row) by the footprint pixels its tap reads for them. The bias
 * gradient is k_db_parts'. */
template <bool BF>
__global__ void k_dw_halo(dt_deform_chunk c, halo h, int tiles_per_split, const typename tc<BF>::X *__restrict__ xT,
                          const float *__restrict__ dom, float *__restrict__ partw) {
    typedef tc<BF> T;
    typedef typename T::S S;
    const int LP = lp<BF>::LP, LD = OCT + T::PAD, LO = F_BC + 4;
    extern __shared__ __align__(128) unsigned char dh_raw[];
    S *F = reinterpret_cast<S *>(dh_raw);
    S *D = F + h.FH * h.FW * LP;                  /* [128 positions][LD] */
    float *O = reinterpret_cast<float *>(dh_raw); /* [K][32 oc][LO], at the end */
    const int tid = threadIdx.x, warp = tid >> 5, nthreads = blockDim.x;
    const int cc0 = blockIdx.x * F_BC, ot = blockIdx.y, z = blockIdx.z, k = warp;
    const int ntiles = c.nb * h.tiles, t0 = z * tiles_per_split, t1 = min(ntiles, t0 + tiles_per_split);
    uint32_t kyu;
    const int kx = (int)dt_fastdiv_divmod((uint32_t)k, c.fkw, &kyu), ky = (int)kyu;
    wmma::fragment<wmma::accumulator, 16, 16, T::KS, float> acc[2][2];
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int n = 0; n < 2; n++) wmma::fill_fragment(acc[m][n], 0.0f);
    for (int tt = t0; tt < t1; tt++) {
        const int i = tt / h.tiles, t = tt - i * h.tiles, tyi = t / h.tx;
        const int oy0 = tyi * H_R, ox0 = (t - tyi * h.tx) * H_C;
        stage_footprint<BF>(c, h, xT, i, oy0, ox0, cc0, F);
        for (int e = tid; e < F_BM * 8; e += nthreads) {
            const int pos = e >> 3, quad = e & 7, oy = oy0 + pos / H_C, ox = ox0 + pos % H_C, oc = ot * OCT + 4 * quad;
            const bool ok = oy < c.Ho && ox < c.Wo && oc < c.OCS;
            put4<BF>(D + pos * LD + 4 * quad, ok ? ldg4(dom + (((int64_t)i * c.Ho + oy) * c.Wo + ox) * c.OCS + oc) : zero4());
        }
        __syncthreads();
        for (int r = 0; r < H_R; r++) {
            const S *brow = F + ((r * c.sh + ky * c.dh) * h.FW + kx * c.dw) * LP;
#pragma unroll
            for (int kk = 0; kk < H_C; kk += T::KS) {
                wmma::fragment<wmma::matrix_b, 16, 16, T::KS, typename T::F, wmma::row_major> b[2];
#pragma unroll
                for (int n = 0; n < 2; n++) wmma::load_matrix_sync(b[n], brow + kk * c.sw * LP + 16 * n, c.sw * LP);
#pragma unroll
                for (int m = 0; m < 2; m++) {
                    /* A[oc][pos] = D[pos][oc]: column-major */
                    wmma::fragment<wmma::matrix_a, 16, 16, T::KS, typename T::F, wmma::col_major> a;
                    wmma::load_matrix_sync(a, D + (r * H_C + kk) * LD + 16 * m, LD);
#pragma unroll
                    for (int n = 0; n < 2; n++) wmma::mma_sync(acc[m][n], a, b[n], acc[m][n]);
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int n = 0; n < 2; n++)
            wmma::store_matrix_sync(O + (k * OCT + 16 * m) * LO + 16 * n, acc[m][n], LO, wmma::mem_row_major);
    __syncthreads();
    for (int e = tid; e < c.K * OCT * F_BC; e += nthreads) {
        const int kk = e / (OCT * F_BC), o = (e / F_BC) % OCT, cl = e % F_BC, oc = ot * OCT + o;
        if (oc < c.OC) partw[(((int64_t)z * c.OC + oc) * c.C + cc0 + cl) * c.K + kk] = O[(kk * OCT + o) * LO + cl];
    }
}

/* Bias-gradient parts for the halo dW: part z = the fp32 sum of dom over positions [z*qchunk,
 * (z+1)*qchunk), 8 position lanes a channel then the lanes in order (deterministic). */
__global__ void k_db_parts(dt_deform_chunk c, int qchunk, const float *__restrict__ dom, float *__restrict__ partb) {
    const int64_t q0 = (int64_t)blockIdx.x * qchunk, q1 = min((int64_t)c.Q, q0 + qchunk);
    dom_slab_sums(dom, c.OCS, c.OC, c.OC, q0, q1, nullptr, 0, partb + (int64_t)blockIdx.x * c.OC);
}

/* ------------------------------------------------------------------ input gradient */

const int X_BP = 128, X_BC = 64;

template <bool BF>
struct dx_smem {
    typedef typename tc<BF>::S S;
    static const int LA = OCT + tc<BF>::PAD, LW = X_BC + tc<BF>::PAD;
    S A[2][X_BP][LA]; /* pixels x offset channels */
    S W[2][OCT][LW];  /* offset channels x channels */
    float out[8][16][16 + 4]; /* a warp's tile, for the epilogue */
};

template <bool BF>
__global__ void __launch_bounds__(THREADS) k_dx_tc(dt_deform_chunk c, const float *__restrict__ wT,
                                                   const float *__restrict__ dom, const float *__restrict__ add,
                                                   float beta, typename tc<BF>::X *__restrict__ dxT) {
    typedef tc<BF> T;
    typedef dx_smem<BF> SM;
    extern __shared__ __align__(128) unsigned char dx_raw[];
    SM &sm = *reinterpret_cast<SM *>(dx_raw);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int p0 = blockIdx.x * X_BP, cb = blockIdx.y * X_BC;
    const int noc = (c.OCS + OCT - 1) / OCT, nsteps = c.K * noc;
    /* loader: pixel lp, offset-channel quads lo + 2j (j < 4); weights rows idx/16, quad idx%16 */
    const int lp = tid & (X_BP - 1), lo = tid >> 7;
    int limg, lty, ltx;
    offconv_pixel(c, p0 + lp, &limg, &lty, &ltx);
    float4 ra[4], rw[2];
    auto load = [&](int s) {
        const int k = s / noc, oc0 = (s - k * noc) * OCT;
        const int64_t q = offconv_reader(c, limg, lty, ltx, k);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int oc = oc0 + 4 * (lo + 2 * j);
            ra[j] = q >= 0 && oc < c.OCS ? ldg4(dom + q * c.OCS + oc) : zero4();
        }
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int idx = tid + THREADS * j, row = idx >> 4, oc = oc0 + row, ch = cb + 4 * (idx & 15);
            rw[j] = oc < c.OC && ch < c.C ? ldg4(wT + ((int64_t)oc * c.K + k) * c.C + ch) : zero4();
        }
    };
    auto store = [&](int buf) {
#pragma unroll
        for (int j = 0; j < 4; j++) put4<BF>(&sm.A[buf][lp][4 * (lo + 2 * j)], ra[j]);
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int idx = tid + THREADS * j;
            put4<BF>(&sm.W[buf][idx >> 4][4 * (idx & 15)], rw[j]);
        }
    };
    wmma::fragment<wmma::accumulator, 16, 16, T::KS, float> acc[4];
#pragma unroll
    for (int n = 0; n < 4; n++) wmma::fill_fragment(acc[n], 0.0f);
    load(0);
    store(0);
    __syncthreads();
    for (int s = 0; s < nsteps; s++) {
        const int buf = s & 1;
        if (s + 1 < nsteps) load(s + 1);
#pragma unroll
        for (int kk = 0; kk < OCT; kk += T::KS) {
            wmma::fragment<wmma::matrix_a, 16, 16, T::KS, typename T::F, wmma::row_major> a;
            wmma::load_matrix_sync(a, &sm.A[buf][16 * warp][kk], SM::LA);
#pragma unroll
            for (int n = 0; n < 4; n++) {
                wmma::fragment<wmma::matrix_b, 16, 16, T::KS, typename T::F, wmma::row_major> b;
                wmma::load_matrix_sync(b, &sm.W[buf][kk][16 * n], SM::LW);
                wmma::mma_sync(acc[n], a, b, acc[n]);
            }
        }
        if (s + 1 < nsteps) store(buf ^ 1);
        __syncthreads();
    }
    /* each warp writes its 16 pixels x 64 channels through its staging tile: + add, with beta,
     * rounded once to the plan's dtype */
#pragma unroll
    for (int n = 0; n < 4; n++) {
        wmma::store_matrix_sync(&sm.out[warp][0][0], acc[n], 16 + 4, wmma::mem_row_major);
        __syncwarp();
        for (int e = lane; e < 16 * 16; e += 32) {
            const int r = e >> 4, cc = e & 15, p = p0 + 16 * warp + r, chn = cb + 16 * n + cc;
            if (p < c.npix && chn < c.C) {
                const int64_t at = (int64_t)p * c.C + chn;
                float v = sm.out[warp][r][cc];
                if (add) v = add[at] + v;
                cstore_beta(dxT + at, 0, v, beta);
            }
        }
        __syncwarp();
    }
}

/* ------------------------------------------------------------------ host side */

int nt_of(const dt_deform_plan *p) { return (int)((p->OC + OCT - 1) / OCT); }

/* Splits (offconv_split): the flat kernels never fewer than 8 steps or tiles a block; the
 * halo forward splits its channel chunks, the halo dW its tiles (at least 4 a block). */
void fwd_split(const dt_deform_chunk &c, int nt, int *steps, int *nz) {
    const int T = c.K * (c.C / F_BC);
    offconv_split((int64_t)((c.Q + F_BM - 1) / F_BM) * nt, T, (T + 7) / 8, steps, nz);
}

void dw_split(const dt_deform_chunk &c, int nt, int *qchunk, int *nz) {
    offconv_split((int64_t)((c.KC + W_BN - 1) / W_BN) * nt, c.Q, (c.Q + 8 * W_BQ - 1) / (8 * W_BQ), qchunk, nz);
}

void fwd_halo_split(const dt_deform_chunk &c, const halo &h, int nt, int *chunks, int *nz) {
    offconv_split((int64_t)c.nb * h.tiles * nt, c.C / F_BC, c.C / F_BC, chunks, nz);
}

void dw_halo_split(const dt_deform_chunk &c, const halo &h, int nt, int *per, int *nz) {
    const int ntiles = c.nb * h.tiles;
    offconv_split((int64_t)(c.C / F_BC) * nt, ntiles, (ntiles + 3) / 4, per, nz);
}

int g_halo = 1; /* dt_offconv_use_halo */

/* The halo kernels' limits: K <= 16 (a warp a tap in dW) and the footprint in shared memory;
 * beyond them, the flat kernels. */
bool halo_ok(const dt_deform_chunk &c) {
    return g_halo && c.K <= 16 && fwd_halo_smem<false>(c) <= 200 * 1024 && dw_halo_smem<false>(c) <= 200 * 1024;
}

template <typename K>
void allow_smem(K kernel, size_t bytes) {
    dt_gpu_func_smem((const void *)kernel, bytes);
}

}  // namespace

void dt_offconv_use_halo(int on) { g_halo = on; }

int dt_offconv_tc_ok(const dt_deform_plan *p) { return dt_offconv_rounds(p) && p->prob.C % F_BC == 0; }

static size_t ws_bytes(const dt_deform_plan *p, int64_t nb) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    int nt = nt_of(p), steps, nzf, qchunk, nzw;
    fwd_split(c, nt, &steps, &nzf);
    dw_split(c, nt, &qchunk, &nzw);
    if (halo_ok(c)) {
        halo h = halo_of(c);
        int a, b;
        fwd_halo_split(c, h, nt, &a, &b);
        if (b > nzf) nzf = b;
        dw_halo_split(c, h, nt, &a, &b);
        if (b > nzw) nzw = b;
    }
    size_t fwd = (size_t)nt * OCT * p->K * p->prob.C + (nzf > 1 ? (size_t)nzf * c.Q * c.OCS : 0);
    size_t dw = (size_t)nzw * p->OC * (p->prob.C * p->K + 1);
    size_t dx = (size_t)p->OC * p->K * p->prob.C;
    size_t m = fwd > dw ? fwd : dw;
    return (m > dx ? m : dx) * sizeof(float) + 256;
}

/* The splits depend on the chunk's size: the last chunk of a batch (N % nb images) may split
 * further than a full one, so the workspace covers both. */
size_t dt_offconv_tc_ws_bytes(const dt_deform_plan *p, int64_t nb) {
    size_t a = ws_bytes(p, nb), b = p->prob.N % nb ? ws_bytes(p, p->prob.N % nb) : 0;
    return a > b ? a : b;
}

/* The kernels' operand generation: bf16 plans (bf16 x, bf16 operands) or TF32. */
typedef tc<true>::X bf16_t;
static bool is_bf16(const dt_deform_plan *p) { return p->dtype == DT_BF16; }

void dt_offconv_tc_fwd(const dt_deform_plan *p, int64_t nb, const void *xT, const float *w, const float *b, float *om,
                       void *ws) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    if (c.Q <= 0) return;
    const int nt = nt_of(p);
    const int64_t npack = (int64_t)nt * OCT * p->K * p->prob.C;
    float *wv = (float *)ws, *part = wv + npack;
    k_pack_wv<<<dt_grid_for(npack, 256), 256, 0, dt_stream()>>>(c, OCT, nt, w, wv);
    DT_CHECK_LAUNCH();
    int steps, nz;
    if (halo_ok(c)) {
        halo h = halo_of(c);
        fwd_halo_split(c, h, nt, &steps, &nz);
        dim3 grid((unsigned)(c.nb * h.tiles), nt, nz);
        float *dst = nz > 1 ? part : om;
        if (is_bf16(p)) {
            allow_smem(k_fwd_halo<true>, fwd_halo_smem<true>(c));
            k_fwd_halo<true><<<grid, THREADS, fwd_halo_smem<true>(c), dt_stream()>>>(c, h, wv, b, (const bf16_t *)xT, dst,
                                                                                    steps, nz > 1);
        } else {
            allow_smem(k_fwd_halo<false>, fwd_halo_smem<false>(c));
            k_fwd_halo<false><<<grid, THREADS, fwd_halo_smem<false>(c), dt_stream()>>>(c, h, wv, b, (const float *)xT, dst,
                                                                                      steps, nz > 1);
        }
    } else {
        fwd_split(c, nt, &steps, &nz);
        dim3 grid((c.Q + F_BM - 1) / F_BM, nt, nz);
        float *dst = nz > 1 ? part : om;
        if (is_bf16(p)) k_fwd_tc<true><<<grid, THREADS, 0, dt_stream()>>>(c, wv, b, (const bf16_t *)xT, dst, steps, nz > 1);
        else k_fwd_tc<false><<<grid, THREADS, 0, dt_stream()>>>(c, wv, b, (const float *)xT, dst, steps, nz > 1);
    }
    DT_CHECK_LAUNCH();
    if (nz > 1) {
        k_fwd_finish<<<dt_grid_for((int64_t)c.Q * c.OCS, 256), 256, 0, dt_stream()>>>(c, nz, part, b, om);
        DT_CHECK_LAUNCH();
    }
}

int dt_offconv_tc_bwd_weight(const dt_deform_plan *p, int64_t nb, const void *xT, const float *dom, float *partw,
                             float **partb) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    const int nt = nt_of(p);
    int qchunk, nz;
    if (c.Q > 0 && halo_ok(c)) {
        halo h = halo_of(c);
        int per;
        dw_halo_split(c, h, nt, &per, &nz);
        *partb = partw + (int64_t)nz * p->OC * p->prob.C * p->K;
        dim3 grid((unsigned)(p->prob.C / F_BC), nt, nz);
        if (is_bf16(p)) {
            allow_smem(k_dw_halo<true>, dw_halo_smem<true>(c));
            k_dw_halo<true><<<grid, 32 * c.K, dw_halo_smem<true>(c), dt_stream()>>>(c, h, per, (const bf16_t *)xT, dom, partw);
        } else {
            allow_smem(k_dw_halo<false>, dw_halo_smem<false>(c));
            k_dw_halo<false><<<grid, 32 * c.K, dw_halo_smem<false>(c), dt_stream()>>>(c, h, per, (const float *)xT, dom, partw);
        }
        DT_CHECK_LAUNCH();
        k_db_parts<<<nz, 256, 0, dt_stream()>>>(c, (c.Q + nz - 1) / nz, dom, *partb);
        DT_CHECK_LAUNCH();
        return nz;
    }
    dw_split(c, nt, &qchunk, &nz);
    if (c.Q <= 0) nz = 0;
    *partb = partw + (int64_t)nz * p->OC * p->prob.C * p->K;
    if (!nz) return 0;
    dim3 grid((unsigned)((p->KC + W_BN - 1) / W_BN), nt, nz);
    if (is_bf16(p)) {
        allow_smem(k_dw_tc<true>, sizeof(dw_smem<true>));
        k_dw_tc<true><<<grid, THREADS, sizeof(dw_smem<true>), dt_stream()>>>(c, qchunk, (const bf16_t *)xT, dom, partw, *partb);
    } else {
        allow_smem(k_dw_tc<false>, sizeof(dw_smem<false>));
        k_dw_tc<false><<<grid, THREADS, sizeof(dw_smem<false>), dt_stream()>>>(c, qchunk, (const float *)xT, dom, partw, *partb);
    }
    DT_CHECK_LAUNCH();
    return nz;
}

void dt_offconv_tc_bwd_input(const dt_deform_plan *p, int64_t nb, const float *dom, const float *wT, const float *add,
                             float beta, void *dxT) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    if (c.npix <= 0) return;
    dim3 grid((unsigned)((c.npix + X_BP - 1) / X_BP), (unsigned)((p->prob.C + X_BC - 1) / X_BC));
    if (is_bf16(p)) {
        allow_smem(k_dx_tc<true>, sizeof(dx_smem<true>));
        k_dx_tc<true><<<grid, THREADS, sizeof(dx_smem<true>), dt_stream()>>>(c, wT, dom, add, beta, (bf16_t *)dxT);
    } else {
        allow_smem(k_dx_tc<false>, sizeof(dx_smem<false>));
        k_dx_tc<false><<<grid, THREADS, sizeof(dx_smem<false>), dt_stream()>>>(c, wT, dom, add, beta, (float *)dxT);
    }
    DT_CHECK_LAUNCH();
}
