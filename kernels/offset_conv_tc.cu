/* The offset conv's three implicit GEMMs on tensor cores (contracts: offset_conv.h; why and
 * the numbers: docs/deft.md, "Reduced precision"). Used by the _cuda entry points in the tf32
 * and bf16 precisions when C % 32 == 0; the fp32 precision keeps the FFMA kernels of
 * offset_conv.cu.
 *
 * Operands are rounded once, on their way into shared memory, to bf16 (round to nearest even)
 * or TF32 (cvt.rna: to nearest, ties away); products and sums are fp32 (wmma accumulators),
 * results fp32. Tiles (8 warps each, every warp owning whole 16x16 accumulator tiles):
 *   fwd  block = 128 positions x 32 offset channels; a step = one tap x 32 input channels;
 *        A = xT rows (positions x channels), B = weights packed [NT][K][C][32]; warp w: rows
 *        16w..16w+15, both 16-channel halves. Steps split over blockIdx.z when blocks are few
 *        (partials summed in order by k_fwd_finish).
 *   dw   block = 32 offset channels x 128 columns (k*C + c) x a range of positions; a step =
 *        64 positions; A = dom^T (offset channels x positions, read column-major from the
 *        dom rows), B = the positions' input rows at each column's tap; warp w: columns
 *        16w..16w+15, both offset-channel halves. The db block also sums dom in fp32. Ranges
 *        over blockIdx.z, summed in order by k_sum_parts.
 *   dx   block = 128 pixels x 64 channels; a step = one tap x 32 offset channels; A = the dom
 *        row of the position that reads the pixel through the tap (0 if none), B = the tap's
 *        weights [32 oc][64 ch]; warp w: pixels 16w..16w+15, four 16-channel tiles.
 * Every sum runs in a fixed order (one warp per tile, steps in sequence): deterministic. */
#include <cuda_bf16.h>
#include <mma.h>

#include "dt_kernel_util.cuh"
#include "offset_conv.cuh"
#include "offset_conv.h"
#include "offset_conv_tc.h"

using namespace nvcuda;

namespace {

/* Operand traits: shared-memory element type S, wmma element type F, k of one mma. */
template <bool BF>
struct tc;
template <>
struct tc<true> {
    typedef __nv_bfloat16 S;
    typedef __nv_bfloat16 F;
    static const int KS = 16, PAD = 8; /* ldm: a multiple of 8 bf16 (16 bytes), padded off 128 B */
    static __device__ __forceinline__ S cvt(float v) { return __float2bfloat16_rn(v); }
};
template <>
struct tc<false> {
    typedef float S;
    typedef wmma::precision::tf32 F;
    static const int KS = 8, PAD = 4;
    static __device__ __forceinline__ S cvt(float v) { return wmma::__float_to_tf32(v); }
};

template <bool BF>
__device__ __forceinline__ void put4(typename tc<BF>::S *dst, float4 v) {
    dst[0] = tc<BF>::cvt(v.x);
    dst[1] = tc<BF>::cvt(v.y);
    dst[2] = tc<BF>::cvt(v.z);
    dst[3] = tc<BF>::cvt(v.w);
}

__device__ __forceinline__ float4 ldg4(const float *p) { return __ldg(reinterpret_cast<const float4 *>(p)); }
__device__ __forceinline__ float4 zero4() { return make_float4(0.f, 0.f, 0.f, 0.f); }

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
                                                    const float *__restrict__ bias, const float *__restrict__ xT,
                                                    float *__restrict__ out, int steps_per_split, int split) {
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
    float4 ra[4], rb;
    auto load = [&](int s) {
        const int k = s / ncc, cc0 = (s - k * ncc) * F_BC;
        uint32_t kyu;
        const int kx = (int)dt_fastdiv_divmod((uint32_t)k, c.fkw, &kyu), ky = (int)kyu;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int iy = ly0[j] + ky * c.dh, ix = lx0[j] + kx * c.dw;
            bool ok = limg[j] >= 0 && iy >= 0 && iy < c.H && ix >= 0 && ix < c.W;
            ra[j] = ok ? ldg4(xT + (((int64_t)limg[j] * c.H + iy) * c.W + ix) * c.C + cc0 + 4 * lcq) : zero4();
        }
        rb = ldg4(wv + (((int64_t)ot * c.K + k) * c.C + cc0 + (tid >> 3)) * OCT + 4 * (tid & 7));
    };
    auto store = [&](int buf) {
#pragma unroll
        for (int j = 0; j < 4; j++) put4<BF>(&sm.in.A[buf][lp + 32 * j][4 * lcq], ra[j]);
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
__global__ void __launch_bounds__(THREADS) k_dw_tc(dt_deform_chunk c, int qchunk, const float *__restrict__ xT,
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
    float4 rx[W_BQ / 8], rd[2], dsum = zero4();
    auto load = [&](int tile) {
        const int qt = qbeg + tile * W_BQ;
#pragma unroll
        for (int j = 0; j < W_BQ / 8; j++) {
            const int q = qt + warp + 8 * j;
            rx[j] = zero4();
            if (q < qend && colok) {
                int i, oy, ox;
                dt_position_decode(&c, q, &i, &oy, &ox);
                int iy = oy * c.sh - c.ph + kky * c.dh, ix = ox * c.sw - c.pw + kkx * c.dw;
                if (iy >= 0 && iy < c.H && ix >= 0 && ix < c.W) rx[j] = ldg4(xT + (((int64_t)i * c.H + iy) * c.W + ix) * c.C + ch);
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
        for (int j = 0; j < W_BQ / 8; j++) put4<BF>(&sm.in.X[buf][warp + 8 * j][4 * lane], rx[j]);
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
                                                   const float *__restrict__ dom, float beta, float *__restrict__ dxT) {
    typedef tc<BF> T;
    typedef dx_smem<BF> SM;
    extern __shared__ __align__(128) unsigned char dx_raw[];
    SM &sm = *reinterpret_cast<SM *>(dx_raw);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int p0 = blockIdx.x * X_BP, cb = blockIdx.y * X_BC;
    const int noc = (c.OCS + OCT - 1) / OCT, nsteps = c.K * noc;
    /* loader: pixel lp, offset-channel quads lo + 2j (j < 4); weights rows idx/16, quad idx%16 */
    const int lp = tid & (X_BP - 1), lo = tid >> 7;
    int limg = -1, lty = 0, ltx = 0;
    {
        int p = p0 + lp;
        if (p < c.npix) {
            uint32_t rest, ii;
            int ix = (int)dt_fastdiv_divmod((uint32_t)p, c.fW, &rest);
            int iy = (int)dt_fastdiv_divmod(rest, c.fH, &ii);
            limg = (int)ii;
            lty = iy + c.ph;
            ltx = ix + c.pw;
        }
    }
    float4 ra[4], rw[2];
    auto load = [&](int s) {
        const int k = s / noc, oc0 = (s - k * noc) * OCT;
        uint32_t kyu;
        const int kx = (int)dt_fastdiv_divmod((uint32_t)k, c.fkw, &kyu), ky = (int)kyu;
        const int ty = lty - ky * c.dh, tx = ltx - kx * c.dw;
        int64_t q = -1;
        if (limg >= 0 && ty >= 0 && tx >= 0 && ty % c.sh == 0 && tx % c.sw == 0 && ty / c.sh < c.Ho && tx / c.sw < c.Wo)
            q = ((int64_t)limg * c.Ho + ty / c.sh) * c.Wo + tx / c.sw;
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
    /* each warp writes its 16 pixels x 64 channels through its staging tile, with beta */
#pragma unroll
    for (int n = 0; n < 4; n++) {
        wmma::store_matrix_sync(&sm.out[warp][0][0], acc[n], 16 + 4, wmma::mem_row_major);
        __syncwarp();
        for (int e = lane; e < 16 * 16; e += 32) {
            const int r = e >> 4, cc = e & 15, p = p0 + 16 * warp + r, chn = cb + 16 * n + cc;
            if (p < c.npix && chn < c.C) {
                float *d = dxT + (int64_t)p * c.C + chn;
                const float v = sm.out[warp][r][cc];
                *d = beta == 0.0f ? v : beta * *d + v;
            }
        }
        __syncwarp();
    }
}

/* ------------------------------------------------------------------ host side */

int nt_of(const dt_deform_plan *p) { return (int)((p->OC + OCT - 1) / OCT); }

/* Splits: about 2 waves of blocks (132 SMs), never fewer than 8 steps or tiles a block. */
void fwd_split(const dt_deform_chunk &c, int nt, int *steps, int *nz) {
    const int T = c.K * (c.C / F_BC);
    int64_t blocks = (int64_t)((c.Q + F_BM - 1) / F_BM) * nt, want = 2 * (int64_t)dt_gpu_sm_count();
    int z = blocks >= want ? 1 : (int)((want + blocks - 1) / blocks);
    if (z > (T + 7) / 8) z = (T + 7) / 8;
    if (z < 1) z = 1;
    *steps = (T + z - 1) / z;
    *nz = (T + *steps - 1) / *steps;
}

void dw_split(const dt_deform_chunk &c, int nt, int *qchunk, int *nz) {
    int64_t blocks = (int64_t)((c.KC + W_BN - 1) / W_BN) * nt, want = 2 * (int64_t)dt_gpu_sm_count();
    int64_t z = blocks >= want ? 1 : (want + blocks - 1) / blocks;
    int64_t zmax = (c.Q + 8 * W_BQ - 1) / (8 * W_BQ);
    if (z > zmax) z = zmax;
    if (z < 1) z = 1;
    *qchunk = (int)((c.Q + z - 1) / z);
    *nz = (int)((c.Q + *qchunk - 1) / *qchunk);
}

template <typename K>
void allow_smem(K kernel, size_t bytes) {
    DT_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

}  // namespace

int dt_offconv_tc_ok(const dt_deform_plan *p) { return dt_offconv_rounds(p) && p->C % F_BC == 0; }

static size_t ws_bytes(const dt_deform_plan *p, int64_t nb) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    int nt = nt_of(p), steps, nzf, qchunk, nzw;
    fwd_split(c, nt, &steps, &nzf);
    dw_split(c, nt, &qchunk, &nzw);
    size_t fwd = (size_t)nt * OCT * p->K * p->C + (nzf > 1 ? (size_t)nzf * c.Q * c.OCS : 0);
    size_t dw = (size_t)nzw * p->OC * (p->C * p->K + 1);
    size_t dx = (size_t)p->OC * p->K * p->C;
    size_t m = fwd > dw ? fwd : dw;
    return (m > dx ? m : dx) * sizeof(float) + 256;
}

/* The splits depend on the chunk's size: the last chunk of a batch (N % nb images) may split
 * further than a full one, so the workspace covers both. */
size_t dt_offconv_tc_ws_bytes(const dt_deform_plan *p, int64_t nb) {
    size_t a = ws_bytes(p, nb), b = p->N % nb ? ws_bytes(p, p->N % nb) : 0;
    return a > b ? a : b;
}

void dt_offconv_tc_fwd(const dt_deform_plan *p, int64_t nb, int bf16, const float *xT, const float *w, const float *b,
                       float *om, void *ws) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    if (c.Q <= 0) return;
    const int nt = nt_of(p);
    const int64_t npack = (int64_t)nt * OCT * p->K * p->C;
    float *wv = (float *)ws, *part = wv + npack;
    k_pack_wv<<<dt_grid_for(npack, 256), 256, 0, dt_stream()>>>(c, OCT, nt, w, wv);
    DT_CHECK_LAUNCH();
    int steps, nz;
    fwd_split(c, nt, &steps, &nz);
    dim3 grid((c.Q + F_BM - 1) / F_BM, nt, nz);
    float *dst = nz > 1 ? part : om;
    if (bf16) k_fwd_tc<true><<<grid, THREADS, 0, dt_stream()>>>(c, wv, b, xT, dst, steps, nz > 1);
    else k_fwd_tc<false><<<grid, THREADS, 0, dt_stream()>>>(c, wv, b, xT, dst, steps, nz > 1);
    DT_CHECK_LAUNCH();
    if (nz > 1) {
        k_fwd_finish<<<dt_grid_for((int64_t)c.Q * c.OCS, 256), 256, 0, dt_stream()>>>(c, nz, part, b, om);
        DT_CHECK_LAUNCH();
    }
}

int dt_offconv_tc_bwd_weight(const dt_deform_plan *p, int64_t nb, int bf16, const float *xT, const float *dom,
                             float *partw, float **partb) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    const int nt = nt_of(p);
    int qchunk, nz;
    dw_split(c, nt, &qchunk, &nz);
    if (c.Q <= 0) nz = 0;
    *partb = partw + (int64_t)nz * p->OC * p->C * p->K;
    if (!nz) return 0;
    dim3 grid((unsigned)((p->KC + W_BN - 1) / W_BN), nt, nz);
    if (bf16) {
        allow_smem(k_dw_tc<true>, sizeof(dw_smem<true>));
        k_dw_tc<true><<<grid, THREADS, sizeof(dw_smem<true>), dt_stream()>>>(c, qchunk, xT, dom, partw, *partb);
    } else {
        allow_smem(k_dw_tc<false>, sizeof(dw_smem<false>));
        k_dw_tc<false><<<grid, THREADS, sizeof(dw_smem<false>), dt_stream()>>>(c, qchunk, xT, dom, partw, *partb);
    }
    DT_CHECK_LAUNCH();
    return nz;
}

void dt_offconv_tc_bwd_input(const dt_deform_plan *p, int64_t nb, int bf16, const float *dom, const float *wT, float beta,
                             float *dxT) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    if (c.npix <= 0) return;
    dim3 grid((unsigned)((c.npix + X_BP - 1) / X_BP), (unsigned)((p->C + X_BC - 1) / X_BC));
    if (bf16) {
        allow_smem(k_dx_tc<true>, sizeof(dx_smem<true>));
        k_dx_tc<true><<<grid, THREADS, sizeof(dx_smem<true>), dt_stream()>>>(c, wT, dom, beta, dxT);
    } else {
        allow_smem(k_dx_tc<false>, sizeof(dx_smem<false>));
        k_dx_tc<false><<<grid, THREADS, sizeof(dx_smem<false>), dt_stream()>>>(c, wT, dom, beta, dxT);
    }
    DT_CHECK_LAUNCH();
}
