/* CUDA versions of offset_conv.h (the algorithm and register tiles: offset_conv.cuh and
 * docs/deft.md).
 *
 * fwd          blocks of 16 position groups x 4 positions (64 positions), one offset-channel
 *              tile each (blockIdx.y); when that gives too few blocks (small maps, wide
 *              channels), the taps are split over blockIdx.z and the parts summed in a fixed
 *              order by k_fwd_finish.
 * bwd_weight   block = (tap k, 32 input-channel vectors, one offset-channel tile) x a range of
 *              positions (blockIdx.z); 128 threads = CVB lanes over channel vectors x 128/CVB
 *              position slices. Each thread accumulates OCT x VEC weight gradients over its
 *              slice's positions; slices are summed through shared memory, ranges by
 *              k_sum_parts, both in a fixed order.
 * bwd_input    a group of L lanes (over channel vectors) per tile of TPX consecutive pixels;
 *              for each tap, the output position that reads the pixel through it (if any) and
 *              the OC x C weights of that tap: TPX x VEC outputs a lane.
 * All three are deterministic. Each is templated on the plan's tensor type T (float or bf16):
 * x is read as stored and widened, the products are fp32 FMAs, dx is written in T (rounded
 * once, after the caller's fp32 `add` and beta). bf16 plans and TF32 products run the
 * tensor-core kernels of offset_conv_tc.cu instead when C % 32 == 0 - and on the Hopper engine
 * (offset_conv_sm90.h) the forward and weight gradient of bf16 plans with C % 64 == 0, and their
 * input gradient at stride 1; these are the fallback for other channel counts. */
#include "core/dt_kernel_util.cuh"
#include "ops/pointwise/layout.h"
#include "ops/deform/offset_conv.cuh"
#include "ops/deform/offset_conv.h"
#include "ops/deform/offset_conv_sm90.h"
#include "ops/deform/offset_conv_tc.h"

namespace {

const int FWD_THREADS = 128, FWD_TMP = 4, FWD_GROUPS = FWD_THREADS / OFF_S; /* 64 positions a block */

template <int VEC, int OCT, typename T>
__global__ void __launch_bounds__(FWD_THREADS) k_fwd(dt_deform_chunk c, const float4 *__restrict__ wpack,
                                                      const float *__restrict__ bias, const T *__restrict__ xT,
                                                      float *__restrict__ out, int ktaps, int split) {
    const int lane = threadIdx.x % OFF_S, grp = threadIdx.x / OFF_S;
    const int q0 = (blockIdx.x * FWD_GROUPS + grp) * FWD_TMP, ot = blockIdx.y, z = blockIdx.z;
    int qs[FWD_TMP];
#pragma unroll
    for (int t = 0; t < FWD_TMP; t++) qs[t] = q0 + t < c.Q ? q0 + t : -1;
    float acc[FWD_TMP][OCT];
#pragma unroll
    for (int t = 0; t < FWD_TMP; t++)
#pragma unroll
        for (int o = 0; o < OCT; o++) acc[t][o] = 0.0f;
    const int k0 = z * ktaps, k1 = min(c.K, k0 + ktaps);
    offconv_accumulate<VEC, FWD_TMP, OCT, T>(c, wpack, ot, k0, k1, xT, qs, lane, acc);
    /* every lane holds the sums; lane l writes the entries e with e % OFF_S == l */
#pragma unroll
    for (int t = 0; t < FWD_TMP; t++)
#pragma unroll
        for (int o = 0; o < OCT; o++) {
            int oc = ot * OCT + o;
            if ((t * OCT + o) % OFF_S != lane || qs[t] < 0 || oc >= c.OCS) continue;
            if (split) out[((int64_t)z * c.Q + qs[t]) * c.OCS + oc] = acc[t][o];
            else out[(int64_t)qs[t] * c.OCS + oc] = offconv_finish(c, oc, acc[t][o], bias);
        }
}

const int DW_THREADS = 128;

template <int VEC, int OCT, typename T>
__global__ void __launch_bounds__(DW_THREADS) k_dw(dt_deform_chunk c, int cvb, int ncvb, int qchunk,
                                                   const T *__restrict__ xT, const float *__restrict__ dom,
                                                   float *__restrict__ partw, float *__restrict__ partb) {
    typedef typename dt_vec<VEC>::T V;
    __shared__ float red[DW_THREADS * 4 * VEC];
    __shared__ float redb[DW_THREADS / 4][OCT];
    const int J = OCT / 4, NVC = c.C / VEC, QS = DW_THREADS / cvb;
    const int lane = threadIdx.x % cvb, slice = threadIdx.x / cvb;
    const int k = blockIdx.x / ncvb, cv = (blockIdx.x % ncvb) * cvb + lane, ot = blockIdx.y, z = blockIdx.z;
    const bool db_block = k == 0 && blockIdx.x % ncvb == 0;
    uint32_t kyu;
    const int kx = (int)dt_fastdiv_divmod((uint32_t)k, c.fkw, &kyu), ky = (int)kyu;
    const int qbeg = z * qchunk, qend = min(c.Q, qbeg + qchunk);
    float acc[OCT][VEC], dacc[OCT];
#pragma unroll
    for (int o = 0; o < OCT; o++) {
        dacc[o] = 0.0f;
#pragma unroll
        for (int ci = 0; ci < VEC; ci++) acc[o][ci] = 0.0f;
    }
    for (int q = qbeg + slice; q < qend; q += QS) {
        int i, oy, ox;
        dt_position_decode(&c, q, &i, &oy, &ox);
        int iy = oy * c.sh - c.ph + ky * c.dh, ix = ox * c.sw - c.pw + kx * c.dw;
        V xv;
        if (cv < NVC && iy >= 0 && iy < c.H && ix >= 0 && ix < c.W)
            cload(xT + (((int64_t)i * c.H + iy) * c.W + ix) * c.C, cv, xv);
        else vzero(xv);
        const float4 *dr = reinterpret_cast<const float4 *>(dom + (int64_t)q * c.OCS + ot * OCT);
#pragma unroll
        for (int j = 0; j < J; j++) {
            float4 d = ot * OCT + 4 * j < c.OCS ? __ldg(dr + j) : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int ci = 0; ci < VEC; ci++) {
                float a = vget(xv, ci);
                acc[4 * j][ci] = fmaf(d.x, a, acc[4 * j][ci]);
                acc[4 * j + 1][ci] = fmaf(d.y, a, acc[4 * j + 1][ci]);
                acc[4 * j + 2][ci] = fmaf(d.z, a, acc[4 * j + 2][ci]);
                acc[4 * j + 3][ci] = fmaf(d.w, a, acc[4 * j + 3][ci]);
            }
            if (db_block) {
                dacc[4 * j] += d.x;
                dacc[4 * j + 1] += d.y;
                dacc[4 * j + 2] += d.z;
                dacc[4 * j + 3] += d.w;
            }
        }
    }
    /* slices -> one value, 4 output channels a round, slice 0 adding in slice order */
#pragma unroll
    for (int j = 0; j < J; j++) {
#pragma unroll
        for (int e = 0; e < 4; e++)
#pragma unroll
            for (int ci = 0; ci < VEC; ci++) red[(threadIdx.x * 4 + e) * VEC + ci] = acc[4 * j + e][ci];
        __syncthreads();
        if (slice == 0 && cv < NVC) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int oc = ot * OCT + 4 * j + e;
#pragma unroll
                for (int ci = 0; ci < VEC; ci++) {
                    float s = 0.0f;
                    for (int t = 0; t < QS; t++) s += red[((t * cvb + lane) * 4 + e) * VEC + ci];
                    if (oc < c.OC) partw[(((int64_t)z * c.OC + oc) * c.C + cv * VEC + ci) * c.K + k] = s;
                }
            }
        }
        __syncthreads();
    }
    if (db_block) { /* every lane of a slice holds the same sums */
        if (lane == 0)
#pragma unroll
            for (int o = 0; o < OCT; o++) redb[slice][o] = dacc[o];
        __syncthreads();
        if (threadIdx.x < OCT && ot * OCT + (int)threadIdx.x < c.OC) {
            float s = 0.0f;
            for (int t = 0; t < QS; t++) s += redb[t][threadIdx.x];
            partb[(int64_t)z * c.OC + ot * OCT + threadIdx.x] = s;
        }
    }
}


const int DX_THREADS = 128, DX_TPX = 8;

template <int VEC, typename T>
__global__ void __launch_bounds__(DX_THREADS) k_dx(dt_deform_chunk c, int L, int nchunks, const float *__restrict__ wT,
                                                   const float *__restrict__ dom, const float *__restrict__ add,
                                                   float beta, T *__restrict__ dxT) {
    typedef typename dt_vec<VEC>::T V;
    const int NVC = c.C / VEC, lane = threadIdx.x % L;
    const int ntiles = (c.npix + DX_TPX - 1) / DX_TPX, items = ntiles * nchunks;
    const int groups = gridDim.x * (DX_THREADS / L);
    for (int item = blockIdx.x * (DX_THREADS / L) + threadIdx.x / L; item < items; item += groups) {
        const int tile = item / nchunks, cv = (item - tile * nchunks) * L + lane;
        const bool active = cv < NVC;
        int img[DX_TPX], ty0[DX_TPX], tx0[DX_TPX];
#pragma unroll
        for (int t = 0; t < DX_TPX; t++) {
            int p = tile * DX_TPX + t;
            img[t] = -1;
            ty0[t] = tx0[t] = 0;
            if (p < c.npix) {
                uint32_t rest, ii;
                int ix = (int)dt_fastdiv_divmod((uint32_t)p, c.fW, &rest);
                int iy = (int)dt_fastdiv_divmod(rest, c.fH, &ii);
                img[t] = (int)ii;
                ty0[t] = iy + c.ph;
                tx0[t] = ix + c.pw;
            }
        }
        V acc[DX_TPX];
#pragma unroll
        for (int t = 0; t < DX_TPX; t++) vzero(acc[t]);
        for (int k = 0; k < c.K; k++) {
            uint32_t kyu;
            const int kx = (int)dt_fastdiv_divmod((uint32_t)k, c.fkw, &kyu), ky = (int)kyu;
            int qd[DX_TPX];
            bool any = false;
#pragma unroll
            for (int t = 0; t < DX_TPX; t++) {
                int ty = ty0[t] - ky * c.dh, tx = tx0[t] - kx * c.dw;
                qd[t] = -1;
                if (img[t] >= 0 && ty >= 0 && tx >= 0 && ty % c.sh == 0 && tx % c.sw == 0 && ty / c.sh < c.Ho &&
                    tx / c.sw < c.Wo) {
                    qd[t] = (img[t] * c.Ho + ty / c.sh) * c.Wo + tx / c.sw;
                    any = true;
                }
            }
            if (!any) continue;
            for (int o = 0; o < c.OC; o += 4) {
                V w[4];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    if (active && o + e < c.OC)
                        w[e] = vload(reinterpret_cast<const V *>(wT + ((int64_t)(o + e) * c.K + k) * c.C) + cv);
                    else vzero(w[e]);
                }
#pragma unroll
                for (int t = 0; t < DX_TPX; t++) {
                    if (qd[t] < 0) continue;
                    float4 d = __ldg(reinterpret_cast<const float4 *>(dom + (int64_t)qd[t] * c.OCS + o));
                    vfma(acc[t], d.x, w[0]);
                    vfma(acc[t], d.y, w[1]);
                    vfma(acc[t], d.z, w[2]);
                    vfma(acc[t], d.w, w[3]);
                }
            }
        }
        if (!active) continue;
#pragma unroll
        for (int t = 0; t < DX_TPX; t++) {
            int p = tile * DX_TPX + t;
            if (p >= c.npix) continue;
            V v = acc[t];
            if (add) {
                V a;
                cload(add + (int64_t)p * c.C, cv, a);
                vadd(v, a);
            }
            cstore_beta(dxT + (int64_t)p * c.C, cv, v, beta);
        }
    }
}

/* ------------------------------------------------------------------ shared-memory tiles
 * The fast path (C a multiple of 4): classic register-blocked SIMT GEMMs with operands staged
 * in shared memory, double-buffered (the next tile's global loads are in flight while this
 * one is multiplied), one barrier a tile. Each kernel keeps one operand broadcast across a
 * warp (the thin offset-channel side) so that a shared-memory load feeds 20-32 FMAs. */

/* An asynchronous copy of BYTES (16: through L2 only; 8) into shared memory, zeros when !pred. */
template <int BYTES>
__device__ __forceinline__ void cp_async(void *smem, const void *gmem, bool pred) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    if (BYTES == 16) asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(pred ? 16 : 0));
    else asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(s), "l"(gmem), "r"(pred ? 8 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
__device__ __forceinline__ float4 ldg4(const float *p) { return __ldg(reinterpret_cast<const float4 *>(p)); }
__device__ __forceinline__ void fma4(float4 &a, float s, float4 b) {
    a.x = fmaf(s, b.x, a.x);
    a.y = fmaf(s, b.y, a.y);
    a.z = fmaf(s, b.z, a.z);
    a.w = fmaf(s, b.w, a.w);
}

/* Forward: block = 128 positions x one tile of OCT offset channels; a step = one tap x 32
 * input channels (A: As[32 ch][128 pos], transposed on the way in; B: Bs[32 ch][OCT]).
 * Warp w multiplies channels 4w..4w+3 of the step for all 128 positions (lane l: positions l,
 * l+32, l+64, l+96), so B loads are warp-wide broadcasts; the 8 warps' partial sums are added
 * at the end through shared memory, in warp order. Steps split over blockIdx.z when blocks
 * are few (summed by k_fwd_finish). Weights: wv [NT][K][C][OCT] (offset channels last). */
const int FT_THREADS = 256, FT_BM = 128, FT_BC = 32;

template <int OCT, typename T>
__global__ void __launch_bounds__(FT_THREADS, 1) k_fwd_tiled(dt_deform_chunk c, const float *__restrict__ wv,
                                                             const float *__restrict__ bias, const T *__restrict__ xT,
                                                             float *__restrict__ out, int steps_per_split, int split) {
    __shared__ __align__(16) float As[2][FT_BC][FT_BM + 1];
    __shared__ __align__(16) float Bs[2][FT_BC][OCT];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int q0 = blockIdx.x * FT_BM, ot = blockIdx.y, z = blockIdx.z;
    const int ncc = (c.C + FT_BC - 1) / FT_BC, nsteps = c.K * ncc;
    const int s0 = z * steps_per_split, s1 = min(nsteps, s0 + steps_per_split);
    /* loader: positions lp + 32j (j < 4), channel quad lcq of the step */
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
    const int BQ4 = OCT / 4; /* float4s in a B row */
    float4 ra[4], rb = make_float4(0.f, 0.f, 0.f, 0.f);
    auto load = [&](int s) {
        const int k = s / ncc, cc0 = (s - k * ncc) * FT_BC;
        uint32_t kyu;
        const int kx = (int)dt_fastdiv_divmod((uint32_t)k, c.fkw, &kyu), ky = (int)kyu;
        const int ch = cc0 + 4 * lcq;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int iy = ly0[j] + ky * c.dh, ix = lx0[j] + kx * c.dw;
            bool ok = limg[j] >= 0 && iy >= 0 && iy < c.H && ix >= 0 && ix < c.W && ch < c.C;
            if (ok) cload(xT + (((int64_t)limg[j] * c.H + iy) * c.W + ix) * c.C + ch, 0, ra[j]);
            else ra[j] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
        if (tid < FT_BC * BQ4) {
            int row = tid / BQ4, col = tid - row * BQ4, chb = cc0 + row;
            rb = chb < c.C ? ldg4(wv + (((int64_t)ot * c.K + k) * c.C + chb) * OCT + 4 * col) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    };
    auto store = [&](int buf) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int pos = lp + 32 * j;
            As[buf][4 * lcq][pos] = ra[j].x;
            As[buf][4 * lcq + 1][pos] = ra[j].y;
            As[buf][4 * lcq + 2][pos] = ra[j].z;
            As[buf][4 * lcq + 3][pos] = ra[j].w;
        }
        if (tid < FT_BC * BQ4) {
            int row = tid / BQ4, col = tid - row * BQ4;
            *reinterpret_cast<float4 *>(&Bs[buf][row][4 * col]) = rb;
        }
    };
    float acc[4][OCT];
#pragma unroll
    for (int t = 0; t < 4; t++)
#pragma unroll
        for (int o = 0; o < OCT; o++) acc[t][o] = 0.0f;
    if (s0 < s1) {
        load(s0);
        store(0);
    }
    __syncthreads();
    for (int s = s0; s < s1; s++) {
        const int buf = (s - s0) & 1;
        if (s + 1 < s1) load(s + 1);
#pragma unroll
        for (int cc = 0; cc < 4; cc++) {
            const int ch = 4 * warp + cc;
            float a[4];
#pragma unroll
            for (int t = 0; t < 4; t++) a[t] = As[buf][ch][lane + 32 * t];
#pragma unroll
            for (int j = 0; j < OCT / 4; j++) {
                float4 b = *reinterpret_cast<const float4 *>(&Bs[buf][ch][4 * j]);
#pragma unroll
                for (int t = 0; t < 4; t++) {
                    acc[t][4 * j] = fmaf(a[t], b.x, acc[t][4 * j]);
                    acc[t][4 * j + 1] = fmaf(a[t], b.y, acc[t][4 * j + 1]);
                    acc[t][4 * j + 2] = fmaf(a[t], b.z, acc[t][4 * j + 2]);
                    acc[t][4 * j + 3] = fmaf(a[t], b.w, acc[t][4 * j + 3]);
                }
            }
        }
        if (s + 1 < s1) store(buf ^ 1);
        __syncthreads();
    }
    /* the 8 warps' sums, 4 offset channels a round: red[warp][position][4] */
    float *red = &As[0][0][0];
#pragma unroll
    for (int r = 0; r < OCT / 4; r++) {
#pragma unroll
        for (int t = 0; t < 4; t++)
            *reinterpret_cast<float4 *>(&red[((warp * FT_BM) + lane + 32 * t) * 4]) =
                make_float4(acc[t][4 * r], acc[t][4 * r + 1], acc[t][4 * r + 2], acc[t][4 * r + 3]);
        __syncthreads();
        const int pos = tid & (FT_BM - 1), e0 = (tid >> 7) * 2, q = q0 + pos;
#pragma unroll
        for (int e = e0; e < e0 + 2; e++) {
            float sum = 0.0f;
#pragma unroll
            for (int w = 0; w < FT_THREADS / 32; w++) sum += red[((w * FT_BM) + pos) * 4 + e];
            const int oc = ot * OCT + 4 * r + e;
            if (q < c.Q && oc < c.OCS) {
                if (split) out[((int64_t)z * c.Q + q) * c.OCS + oc] = sum;
                else out[(int64_t)q * c.OCS + oc] = offconv_finish(c, oc, sum, bias);
            }
        }
        __syncthreads();
    }
}

/* Weight gradient: block = 128 consecutive columns (k*C + c) x one offset-channel tile x a
 * range of positions (blockIdx.z); a step = 64 positions (Xs[64 pos][128 col] of T, widened
 * when read, and Ds[64 pos][OCT], both copied with cp.async, a quad of channels a lane: 16
 * bytes of f32 or 8 of bf16; 78 KB of shared memory for the two f32 buffers, 46 for bf16). Warp w takes positions w, w+8, ... of the step; lane l columns 4l..4l+3, so the
 * dom row is a warp-wide broadcast. Warps' partial sums are added in warp order at the end;
 * the db block (blockIdx.x == 0) also sums dom. (32-position steps were measured 1.3x slower
 * on l1: too little work between barriers for 8 warps an SM.) */
const int WT_THREADS = 256, WT_BQ = 64, WT_BN = 128;

template <int OCT, typename T>
size_t dw_tiled_smem() {
    return (size_t)2 * WT_BQ * (WT_BN * sizeof(T) + OCT * sizeof(float));
}

template <int OCT, typename T>
__global__ void __launch_bounds__(WT_THREADS, 1) k_dw_tiled(dt_deform_chunk c, int qchunk, const T *__restrict__ xT,
                                                            const float *__restrict__ dom, float *__restrict__ partw,
                                                            float *__restrict__ partb) {
    extern __shared__ __align__(16) unsigned char dw_smem[];
    T(*Xs)[WT_BQ][WT_BN] = reinterpret_cast<T(*)[WT_BQ][WT_BN]>(dw_smem);
    float(*Ds)[WT_BQ][OCT] = reinterpret_cast<float(*)[WT_BQ][OCT]>(dw_smem + 2 * WT_BQ * WT_BN * sizeof(T));
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int ot = blockIdx.y, z = blockIdx.z, BQ4 = OCT / 4;
    const int col = blockIdx.x * WT_BN + 4 * lane; /* this lane's 4 columns (one tap: C % 4 == 0) */
    const bool colok = col < c.KC, db_block = blockIdx.x == 0;
    const int kk = colok ? col / c.C : 0, ch = col - kk * c.C;
    uint32_t kyu;
    const int kkx = (int)dt_fastdiv_divmod((uint32_t)kk, c.fkw, &kyu), kky = (int)kyu;
    const int qbeg = z * qchunk, qend = min(c.Q, qbeg + qchunk), ntiles = (qend - qbeg + WT_BQ - 1) / WT_BQ;
    auto load = [&](int tile, int buf) {
        const int qt = qbeg + tile * WT_BQ;
#pragma unroll
        for (int j = 0; j < WT_BQ / 8; j++) {
            const int pos = warp + 8 * j, q = qt + pos;
            bool ok = false;
            int64_t at = 0;
            if (q < qend && colok) {
                int i, oy, ox;
                dt_position_decode(&c, q, &i, &oy, &ox);
                int iy = oy * c.sh - c.ph + kky * c.dh, ix = ox * c.sw - c.pw + kkx * c.dw;
                ok = iy >= 0 && iy < c.H && ix >= 0 && ix < c.W;
                at = (((int64_t)i * c.H + iy) * c.W + ix) * c.C + ch;
            }
            cp_async<4 * sizeof(T)>(&Xs[buf][pos][4 * lane], xT + (ok ? at : 0), ok);
        }
        for (int idx = tid; idx < WT_BQ * BQ4; idx += WT_THREADS) {
            const int pos = idx / BQ4, j = idx - pos * BQ4, q = qt + pos, oc = ot * OCT + 4 * j;
            const bool ok = q < qend && oc < c.OCS;
            cp_async<16>(&Ds[buf][pos][4 * j], dom + (ok ? (int64_t)q * c.OCS + oc : 0), ok);
        }
        cp_async_commit();
    };
    float4 acc[OCT];
    float dacc[OCT];
#pragma unroll
    for (int o = 0; o < OCT; o++) {
        acc[o] = make_float4(0.f, 0.f, 0.f, 0.f);
        dacc[o] = 0.0f;
    }
    if (ntiles > 0) load(0, 0);
    for (int tile = 0; tile < ntiles; tile++) {
        const int buf = tile & 1;
        if (tile + 1 < ntiles) {
            load(tile + 1, buf ^ 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
#pragma unroll
        for (int pp = 0; pp < WT_BQ / 8; pp++) {
            const int pos = warp + 8 * pp;
            float4 x;
            cload_rw(&Xs[buf][pos][4 * lane], 0, x);
#pragma unroll
            for (int j = 0; j < OCT / 4; j++) {
                const float4 d = *reinterpret_cast<const float4 *>(&Ds[buf][pos][4 * j]);
                fma4(acc[4 * j], d.x, x);
                fma4(acc[4 * j + 1], d.y, x);
                fma4(acc[4 * j + 2], d.z, x);
                fma4(acc[4 * j + 3], d.w, x);
                if (db_block) {
                    dacc[4 * j] += d.x;
                    dacc[4 * j + 1] += d.y;
                    dacc[4 * j + 2] += d.z;
                    dacc[4 * j + 3] += d.w;
                }
            }
        }
        __syncthreads();
    }
    /* the 8 warps' sums, 4 offset channels a round: red[warp][lane][4 oc] (float4 of columns;
     * 16 KB, inside Xs) */
    float4 *red = reinterpret_cast<float4 *>(dw_smem);
#pragma unroll
    for (int r = 0; r < OCT / 4; r++) {
#pragma unroll
        for (int e = 0; e < 4; e++) red[(warp * 32 + lane) * 4 + e] = acc[4 * r + e];
        __syncthreads();
        if (tid < 128) {
            const int e = tid >> 5, l = tid & 31, oc = ot * OCT + 4 * r + e;
            const int cl = blockIdx.x * WT_BN + 4 * l;
            float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int w = 0; w < WT_THREADS / 32; w++) fma4(s, 1.0f, red[(w * 32 + l) * 4 + e]);
            if (cl < c.KC && oc < c.OC) {
                const int k2 = cl / c.C, c2 = cl - k2 * c.C;
                float *dst = partw + (((int64_t)z * c.OC + oc) * c.C + c2) * c.K + k2;
                dst[0] = s.x;
                dst[c.K] = s.y;
                dst[2 * c.K] = s.z;
                dst[3 * c.K] = s.w;
            }
        }
        __syncthreads();
    }
    if (db_block) { /* every lane of a warp holds the same sums */
        float *redb = reinterpret_cast<float *>(dw_smem);
        if (lane == 0)
#pragma unroll
            for (int o = 0; o < OCT; o++) redb[warp * OCT + o] = dacc[o];
        __syncthreads();
        if (tid < OCT && ot * OCT + tid < c.OC) {
            float s = 0.0f;
            for (int w = 0; w < WT_THREADS / 32; w++) s += redb[w * OCT + tid];
            partb[(int64_t)z * c.OC + ot * OCT + tid] = s;
        }
    }
}

/* Input gradient: block = 128 consecutive pixels x 64 channels; a step = one tap x up to 28
 * offset channels: As[28 oc][128 px] = dom of the output position that reads the pixel
 * through the tap (0 when none), transposed on the way in; Ws[28 oc][64 ch] = the tap's
 * weights. Thread = 8 pixels (a warp-half broadcast) x 4 channels: 32 FMAs per 3 loads. */
const int XT_THREADS = 256, XT_BP = 128, XT_BC = 64, XT_BO = 28;

template <typename T>
__global__ void __launch_bounds__(XT_THREADS) k_dx_tiled(dt_deform_chunk c, const float *__restrict__ wT,
                                                         const float *__restrict__ dom, const float *__restrict__ add,
                                                         float beta, T *__restrict__ dxT) {
    __shared__ __align__(16) float As[2][XT_BO][XT_BP];
    __shared__ __align__(16) float Ws[2][XT_BO][XT_BC];
    const int tid = threadIdx.x, cq = tid & 15, pg = tid >> 4;
    const int p0 = blockIdx.x * XT_BP, cb = blockIdx.y * XT_BC;
    const int noc = (c.OCS + XT_BO - 1) / XT_BO, nsteps = c.K * noc;
    /* loader: pixel lp of the tile, offset-channel quads lo + 2j (j < 4, < 7) */
    const int lp = tid & (XT_BP - 1), lo = tid >> 7;
    int limg, lty, ltx;
    offconv_pixel(c, p0 + lp, &limg, &lty, &ltx);
    float4 ra[4], rw[2];
    auto load = [&](int s) {
        const int k = s / noc, oc0 = (s - k * noc) * XT_BO;
        const int64_t q = offconv_reader(c, limg, lty, ltx, k);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int oq = lo + 2 * j, oc = oc0 + 4 * oq;
            ra[j] = q >= 0 && oq < XT_BO / 4 && oc < c.OCS ? ldg4(dom + q * c.OCS + oc) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int idx = tid + XT_THREADS * j, row = idx >> 4, qd = idx & 15, oc = oc0 + row, ch = cb + 4 * qd;
            rw[j] = row < XT_BO && oc < c.OC && ch < c.C ? ldg4(wT + ((int64_t)oc * c.K + k) * c.C + ch)
                                                         : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    };
    auto store = [&](int buf) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int oq = lo + 2 * j;
            if (oq >= XT_BO / 4) continue;
            As[buf][4 * oq][lp] = ra[j].x;
            As[buf][4 * oq + 1][lp] = ra[j].y;
            As[buf][4 * oq + 2][lp] = ra[j].z;
            As[buf][4 * oq + 3][lp] = ra[j].w;
        }
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int idx = tid + XT_THREADS * j, row = idx >> 4, qd = idx & 15;
            if (row < XT_BO) *reinterpret_cast<float4 *>(&Ws[buf][row][4 * qd]) = rw[j];
        }
    };
    float4 acc[8];
#pragma unroll
    for (int t = 0; t < 8; t++) acc[t] = make_float4(0.f, 0.f, 0.f, 0.f);
    load(0);
    store(0);
    __syncthreads();
    for (int s = 0; s < nsteps; s++) {
        const int buf = s & 1;
        if (s + 1 < nsteps) load(s + 1);
#pragma unroll 4
        for (int o = 0; o < XT_BO; o++) {
            const float4 a0 = *reinterpret_cast<const float4 *>(&As[buf][o][8 * pg]);
            const float4 a1 = *reinterpret_cast<const float4 *>(&As[buf][o][8 * pg + 4]);
            const float4 w = *reinterpret_cast<const float4 *>(&Ws[buf][o][4 * cq]);
            fma4(acc[0], a0.x, w);
            fma4(acc[1], a0.y, w);
            fma4(acc[2], a0.z, w);
            fma4(acc[3], a0.w, w);
            fma4(acc[4], a1.x, w);
            fma4(acc[5], a1.y, w);
            fma4(acc[6], a1.z, w);
            fma4(acc[7], a1.w, w);
        }
        if (s + 1 < nsteps) store(buf ^ 1);
        __syncthreads();
    }
    const int ch = cb + 4 * cq;
    if (ch >= c.C) return;
#pragma unroll
    for (int t = 0; t < 8; t++) {
        const int p = p0 + 8 * pg + t;
        if (p >= c.npix) continue;
        const int64_t at = (int64_t)p * c.C + ch;
        float4 v = acc[t];
        if (add) vadd(v, ldg4(add + at));
        cstore_beta(dxT + at, 0, v, beta);
    }
}

/* ------------------------------------------------------------------ host side */

/* The tiled FFMA kernels need C % 4 == 0 (quads of channels); dt_offconv_use_tiles(0) forces
 * the lane kernels for every plan that runs FFMA (tests and the kernel lab compare the two). */
int g_use_tiles = 1;

bool tiles_ok(const dt_deform_plan *p) { return g_use_tiles && p->prob.C % 4 == 0; }

bool vec4_ok(const dt_deform_plan *p) { return p->prob.C % 4 == 0; }

/* The tensor-core kernels: bf16 plans, or f32 ones with TF32 products, when C % 32 == 0 -
 * decided by the plan alone, so that the CPU twin knows which operands were rounded. */
bool use_tc(const dt_deform_plan *p) {
    return (p->dtype == DT_BF16 || p->math == DT_MATH_TF32) && dt_offconv_tc_ok(p);
}

int64_t wpack_floats(const dt_deform_plan *p) {
    int oct = offconv_oct(p->OC);
    int64_t nt = (p->OC + oct - 1) / oct;
    return nt * oct * p->K * p->prob.C;
}

/* Tap splits of the forward: enough blocks for ~4 waves of 132-SM-sized work. */
void fwd_split(const dt_deform_chunk &c, int nt, int *ktaps, int *nz) {
    int64_t blocks = (int64_t)((c.Q + FWD_GROUPS * FWD_TMP - 1) / (FWD_GROUPS * FWD_TMP)) * nt;
    int64_t want = 4 * (int64_t)dt_gpu_sm_count();
    int z = blocks >= want ? 1 : (int)((want + blocks - 1) / blocks);
    if (z > c.K) z = c.K;
    *ktaps = (c.K + z - 1) / z;
    *nz = (c.K + *ktaps - 1) / *ktaps;
}

/* Position ranges of bwd_weight. */
void dw_split(const dt_deform_chunk &c, int cvb, int ncvb, int nt, int *qchunk, int *nz) {
    int64_t blocks = (int64_t)c.K * ncvb * nt, want = 4 * (int64_t)dt_gpu_sm_count();
    int64_t z = blocks >= want ? 1 : (want + blocks - 1) / blocks;
    int64_t per = DW_THREADS / cvb * 8; /* at least 8 positions a slice */
    int64_t zmax = (c.Q + per - 1) / per;
    if (z > zmax) z = zmax;
    if (z < 1) z = 1;
    *qchunk = (int)((c.Q + z - 1) / z);
    *nz = (int)((c.Q + *qchunk - 1) / *qchunk);
}

void dw_shape(const dt_deform_plan *p, int *cvb, int *ncvb) {
    int64_t nvc = vec4_ok(p) ? p->prob.C / 4 : p->prob.C;
    *cvb = dt_lanes_for(nvc, 8);
    *ncvb = (int)((nvc + *cvb - 1) / *cvb);
}

/* Step splits of the tiled forward and position ranges of the tiled dW: never fewer than 8
 * steps or 8 tiles a block. */
void fwd_tiled_split(const dt_deform_chunk &c, int nt, int *steps, int *nz) {
    const int T = c.K * ((c.C + FT_BC - 1) / FT_BC);
    offconv_split((int64_t)((c.Q + FT_BM - 1) / FT_BM) * nt, T, (T + 7) / 8, steps, nz);
}

void dw_tiled_split(const dt_deform_chunk &c, int nt, int *qchunk, int *nz) {
    offconv_split((int64_t)((c.KC + WT_BN - 1) / WT_BN) * nt, c.Q, (c.Q + 8 * WT_BQ - 1) / (8 * WT_BQ), qchunk, nz);
}

}  // namespace

extern "C" {

void dt_offconv_use_tiles(int on) { g_use_tiles = on; }

static size_t ws_bytes(const dt_deform_plan *p, int64_t nb) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    int oct = offconv_oct(p->OC), nt = (int)((p->OC + oct - 1) / oct), cvb, ncvb, kt, nzf, qchunk, nzw;
    fwd_split(c, nt, &kt, &nzf);
    dw_shape(p, &cvb, &ncvb);
    dw_split(c, cvb, ncvb, nt, &qchunk, &nzw);
    int steps, nzf2, qchunk2, nzw2;
    fwd_tiled_split(c, nt, &steps, &nzf2);
    dw_tiled_split(c, nt, &qchunk2, &nzw2);
    if (nzf2 > nzf) nzf = nzf2;
    if (nzw2 > nzw) nzw = nzw2;
    size_t fwd = (size_t)wpack_floats(p) + (nzf > 1 ? (size_t)nzf * c.Q * c.OCS : 0);
    size_t dw = (size_t)nzw * p->OC * (p->prob.C * p->K + 1);
    size_t dx = (size_t)p->OC * p->K * p->prob.C;
    size_t m = fwd > dw ? fwd : dw, tc = dt_offconv_tc_ok(p) ? dt_offconv_tc_ws_bytes(p, nb) : 0;
    /* the engine's, for every bf16 plan (whether a chunk runs on it is decided at the call) */
    const size_t engine = p->dtype == DT_BF16 ? dt_offconv_sm90_ws_bytes(p, nb) : 0;
    m = (m > dx ? m : dx) * sizeof(float) + 256;
    if (engine > tc) tc = engine;
    return m > tc ? m : tc;
}

/* The splits depend on the chunk's size: the last chunk of a batch (N % nb images) may split
 * further than a full one (more partial sums), so the workspace covers both. */
size_t dt_offconv_ws_bytes_cuda(const dt_deform_plan *p, int64_t nb) {
    size_t a = ws_bytes(p, nb), b = p->prob.N % nb ? ws_bytes(p, p->prob.N % nb) : 0;
    return a > b ? a : b;
}

void dt_offconv_fwd_cuda(const dt_deform_plan *p, int64_t nb, const void *xT, const float *w, const float *b, float *om,
                         void *ws) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    if (c.Q <= 0) return;
    const int oct = offconv_oct(p->OC), nt = (int)((p->OC + oct - 1) / oct);
    float *part = (float *)ws + wpack_floats(p);
    int64_t npack = wpack_floats(p);
    if (dt_offconv_sm90_ok(p, nb)) {
        dt_offconv_sm90_fwd(p, nb, xT, w, b, om, ws);
        return;
    }
    if (use_tc(p)) {
        dt_offconv_tc_fwd(p, nb, xT, w, b, om, ws);
        return;
    }
    if (tiles_ok(p)) {
        k_pack_wv<<<dt_grid_for(npack, 256), 256, 0, dt_stream()>>>(c, oct, nt, w, (float *)ws);
        DT_CHECK_LAUNCH();
        int steps, nz;
        fwd_tiled_split(c, nt, &steps, &nz);
        dim3 grid((c.Q + FT_BM - 1) / FT_BM, nt, nz);
        float *dst = nz > 1 ? part : om;
        dt_dispatch_plan_dtype(p->dtype, [&](auto *tag) {
            typedef DT_TAG_TYPE(tag) T;
            if (oct == 20) k_fwd_tiled<20, T><<<grid, FT_THREADS, 0, dt_stream()>>>(c, (float *)ws, b, (const T *)xT, dst, steps, nz > 1);
            else k_fwd_tiled<28, T><<<grid, FT_THREADS, 0, dt_stream()>>>(c, (float *)ws, b, (const T *)xT, dst, steps, nz > 1);
        });
        DT_CHECK_LAUNCH();
        if (nz > 1) {
            k_fwd_finish<<<dt_grid_for((int64_t)c.Q * c.OCS, 256), 256, 0, dt_stream()>>>(c, nz, part, b, om);
            DT_CHECK_LAUNCH();
        }
        return;
    }
    float4 *wpack = (float4 *)ws; /* fp32 weights: plans that round them run the tensor cores */
    if (vec4_ok(p)) k_offconv_pack<4><<<dt_grid_for(npack / 4, 256), 256, 0, dt_stream()>>>(c, oct, nt, w, 0, wpack);
    else k_offconv_pack<1><<<dt_grid_for(npack / 4, 256), 256, 0, dt_stream()>>>(c, oct, nt, w, 0, wpack);
    DT_CHECK_LAUNCH();
    int ktaps, nz;
    fwd_split(c, nt, &ktaps, &nz);
    dim3 grid((c.Q + FWD_GROUPS * FWD_TMP - 1) / (FWD_GROUPS * FWD_TMP), nt, nz);
    float *dst = nz > 1 ? part : om;
    dt_dispatch_plan_dtype(p->dtype, [&](auto *tag) {
        typedef DT_TAG_TYPE(tag) T;
#define FWD(V, O) k_fwd<V, O, T><<<grid, FWD_THREADS, 0, dt_stream()>>>(c, wpack, b, (const T *)xT, dst, ktaps, nz > 1)
        if (vec4_ok(p)) {
            if (oct == 20) FWD(4, 20);
            else FWD(4, 28);
        } else {
            if (oct == 20) FWD(1, 20);
            else FWD(1, 28);
        }
#undef FWD
    });
    DT_CHECK_LAUNCH();
    if (nz > 1) {
        k_fwd_finish<<<dt_grid_for((int64_t)c.Q * c.OCS, 256), 256, 0, dt_stream()>>>(c, nz, part, b, om);
        DT_CHECK_LAUNCH();
    }
}

/* The weight and bias gradients on the tensor-core or FFMA kernels. */
static void bwd_weight(const dt_deform_plan *p, int64_t nb, const void *xT, const float *dom, float beta_w, float *dw,
                       float beta_b, float *db, void *ws) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    const int oct = offconv_oct(p->OC), nt = (int)((p->OC + oct - 1) / oct);
    int nz = 0;
    float *partw = (float *)ws;
    if (use_tc(p)) {
        float *pb;
        nz = dt_offconv_tc_bwd_weight(p, nb, xT, dom, partw, &pb);
    } else if (tiles_ok(p)) {
        int qchunk;
        dw_tiled_split(c, nt, &qchunk, &nz);
        float *partb = partw + (int64_t)nz * p->OC * p->prob.C * p->K;
        if (c.Q > 0) {
            dim3 grid((unsigned)((p->KC + WT_BN - 1) / WT_BN), nt, nz);
            dt_dispatch_plan_dtype(p->dtype, [&](auto *tag) {
                typedef DT_TAG_TYPE(tag) T;
#define DWT(O)                                                                                                      \
    do {                                                                                                            \
        dt_gpu_func_smem((const void *)k_dw_tiled<O, T>, dw_tiled_smem<O, T>());                                    \
        k_dw_tiled<O, T><<<grid, WT_THREADS, dw_tiled_smem<O, T>(), dt_stream()>>>(c, qchunk, (const T *)xT, dom,   \
                                                                                  partw, partb);                    \
    } while (0)
                if (oct == 20) DWT(20);
                else DWT(28);
#undef DWT
            });
            DT_CHECK_LAUNCH();
        } else {
            nz = 0;
        }
    } else {
        int cvb, ncvb, qchunk;
        dw_shape(p, &cvb, &ncvb);
        dw_split(c, cvb, ncvb, nt, &qchunk, &nz);
        float *partb = partw + (int64_t)nz * p->OC * p->prob.C * p->K;
        if (c.Q > 0) {
            dim3 grid((unsigned)(p->K * ncvb), nt, nz);
            dt_dispatch_plan_dtype(p->dtype, [&](auto *tag) {
                typedef DT_TAG_TYPE(tag) T;
#define DW(V, O) k_dw<V, O, T><<<grid, DW_THREADS, 0, dt_stream()>>>(c, cvb, ncvb, qchunk, (const T *)xT, dom, partw, partb)
                if (vec4_ok(p)) {
                    if (oct == 20) DW(4, 20);
                    else DW(4, 28);
                } else {
                    if (oct == 20) DW(1, 20);
                    else DW(1, 28);
                }
#undef DW
            });
            DT_CHECK_LAUNCH();
        } else {
            nz = 0;
        }
    }
    float *partb = partw + (int64_t)nz * p->OC * p->prob.C * p->K;
    int64_t nw = p->OC * p->prob.C * p->K;
    if (dw) {
        k_sum_parts<<<dt_grid_for(nw, 256), 256, 0, dt_stream()>>>(nw, nz, partw, beta_w, dw);
        DT_CHECK_LAUNCH();
    }
    if (db) {
        k_sum_parts<<<1, 256, 0, dt_stream()>>>(p->OC, nz, partb, beta_b, db);
        DT_CHECK_LAUNCH();
    }
}

/* The input gradient on the tensor-core or FFMA kernels. */
static void bwd_input(const dt_deform_plan *p, int64_t nb, const float *dom, const float *w, const float *add, float beta,
                      void *dxT, void *ws) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    if (c.npix <= 0) return;
    float *wT = (float *)ws; /* [OC, K, C] */
    dt_nchw_to_nhwc_cuda(p->OC, p->prob.C, p->K, w, p->prob.C, wT);
    if (use_tc(p)) {
        dt_offconv_tc_bwd_input(p, nb, dom, wT, add, beta, dxT);
        return;
    }
    if (tiles_ok(p)) {
        dim3 grid((unsigned)((c.npix + XT_BP - 1) / XT_BP), (unsigned)((p->prob.C + XT_BC - 1) / XT_BC));
        dt_dispatch_plan_dtype(p->dtype, [&](auto *tag) {
            typedef DT_TAG_TYPE(tag) T;
            k_dx_tiled<T><<<grid, XT_THREADS, 0, dt_stream()>>>(c, wT, dom, add, beta, (T *)dxT);
        });
        DT_CHECK_LAUNCH();
        return;
    }
    int64_t nvc = vec4_ok(p) ? p->prob.C / 4 : p->prob.C;
    int L = dt_lanes_for(nvc, 4), nchunks = (int)((nvc + L - 1) / L);
    int64_t items = (int64_t)(c.npix + DX_TPX - 1) / DX_TPX * nchunks;
    int blocks = dt_grid_for(items * L, DX_THREADS);
    dt_dispatch_plan_dtype(p->dtype, [&](auto *tag) {
        typedef DT_TAG_TYPE(tag) T;
        if (vec4_ok(p)) k_dx<4, T><<<blocks, DX_THREADS, 0, dt_stream()>>>(c, L, nchunks, wT, dom, add, beta, (T *)dxT);
        else k_dx<1, T><<<blocks, DX_THREADS, 0, dt_stream()>>>(c, L, nchunks, wT, dom, add, beta, (T *)dxT);
    });
    DT_CHECK_LAUNCH();
}

/* The engine (offset_conv_sm90.h) takes the chunk's weight gradient - and at stride 1 its input
 * gradient, from the same bf16 copy of dom; what it does not take runs on the other kernels,
 * the weight gradient first (both use ws, in stream order). */
void dt_offconv_bwd_cuda(const dt_deform_plan *p, int64_t nb, const void *xT, const float *dom, const float *w,
                         float beta_w, float *dw, float beta_b, float *db, const float *add, float beta, void *dxT,
                         void *ws) {
    if (dt_offconv_sm90_ok(p, nb)) {
        const int dx_here = dxT && dt_offconv_sm90_dx_ok(p, nb);
        dt_offconv_sm90_bwd(p, nb, xT, dom, w, beta_w, dw, beta_b, db, add, beta, dx_here ? dxT : NULL, ws);
        if (dxT && !dx_here) bwd_input(p, nb, dom, w, add, beta, dxT, ws);
        return;
    }
    if (dw || db) bwd_weight(p, nb, xT, dom, beta_w, dw, beta_b, db, ws);
    if (dxT) bwd_input(p, nb, dom, w, add, beta, dxT, ws);
}
}
