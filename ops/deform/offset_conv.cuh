/* offset_conv.cuh: the core of the implicit-GEMM offset conv forward, shared by its own
 * kernel (offset_conv.cu) and DefT's fused tile kernel (deform_nhwc.cu).
 *
 * Register tile: a group of OFF_S lanes owns TMP output positions and OCT offset channels
 * (TMP*OCT accumulators a lane); its lanes split the input channel vectors (lane l takes
 * vectors l, l + OFF_S, ...), so each x load is one coalesced 16-byte vector a lane and each
 * weight float4 (4 output channels of one input channel) serves TMP positions. After the
 * reduction loop the group's partial sums are added with a fixed butterfly (group_sum). The
 * input T is float or bf16 (widened on the load: the products are fp32 FMAs either way).
 *
 * Weights are repacked once a call (offconv_pack) so that lane cv's float4s are consecutive:
 *   wpack[(((ot*K + k)*VEC + ci)*J + j)*NVC + cv] = W[ot*OCT + 4j + 0..3][cv*VEC + ci][k]
 * (J = OCT/4 float4s per tile, NVC = C/VEC vectors, 0 beyond OC), rounded to bf16 values when
 * the plan's offset conv multiplies bf16 operands (dt_offconv_rounds, bf16 plans).
 * Included by .cu files only. */
#ifndef DT_OFFSET_CONV_CUH
#define DT_OFFSET_CONV_CUH

#include <cuda_bf16.h>

#include "ops/deform/deform_chunk.h"
#include "core/dt_lanes.cuh"

namespace { /* internal linkage in every .cu that includes this */

/* out[e] = beta*out[e] + sum_z part[z*n + e], z in order (beta 0 overwrites). */
__global__ void k_sum_parts(int64_t n, int nz, const float *__restrict__ part, float beta, float *__restrict__ out) {
    DT_GRID_STRIDE(e, n) {
        float s = 0.0f;
        for (int z = 0; z < nz; z++) s += part[z * n + e];
        out[e] = beta == 0.0f ? s : beta * out[e] + s;
    }
}

/* The bias gradient's part of one slab of positions [q0, q1) of dom [Q, OCS] fp32: part[o] =
 * the fp32 sum of dom's column o < OC, by a 256-thread block of 8 position lanes x 32 columns -
 * lane l sums positions q0 + l, q0 + l + 8, ... and the 8 lanes are added in order
 * (deterministic). domb not NULL: the same read also stores dom rounded to bf16, domb [Q, ldb]
 * with columns OC .. ncols-1 zero (ncols = OC without domb). part NULL: no sums. The halo and
 * flat dW's k_db_parts and the Hopper engine's k_dom_prep are this loop, so their bias
 * gradients are the same bits. */
__device__ __forceinline__ void dom_slab_sums(const float *__restrict__ dom, int64_t OCS, int OC, int ncols, int64_t q0,
                                              int64_t q1, __nv_bfloat16 *__restrict__ domb, int64_t ldb,
                                              float *__restrict__ part) {
    __shared__ float red[8][32];
    const int o = threadIdx.x & 31, l = threadIdx.x >> 5;
    for (int oc0 = 0; oc0 < ncols; oc0 += 32) {
        const int oc = oc0 + o;
        float s = 0.0f;
        if (oc < ncols) {
#pragma unroll 8
            for (int64_t q = q0 + l; q < q1; q += 8) {
                const float v = oc < OC ? __ldg(dom + q * OCS + oc) : 0.0f;
                if (domb) domb[q * ldb + oc] = __float2bfloat16_rn(v);
                s += v;
            }
        }
        if (!part) continue; /* the same for the whole block */
        red[l][o] = s;
        __syncthreads();
        if (l == 0 && oc < OC) {
            float t = 0.0f;
            for (int j = 0; j < 8; j++) t += red[j][o];
            part[oc] = t;
        }
        __syncthreads();
    }
}

#define OFF_S 8 /* lanes per position group: 8 x 16 B = one 128-byte line of a pixel's channels */

/* Output channels per tile: 20 (OC <= 20: 18 = DCNv1 with one group) or 28 (27 = DCNv2),
 * whichever pads less for larger OC. */
static inline int offconv_oct(int64_t OC) {
    if (OC <= 20) return 20;
    int64_t t20 = (OC + 19) / 20 * 20, t28 = (OC + 27) / 28 * 28;
    return t28 <= t20 ? 28 : 20;
}

template <int VEC, int TMP, int OCT, typename T>
__device__ __forceinline__ void offconv_accumulate(const dt_deform_chunk &c, const float4 *__restrict__ wpack, int ot,
                                                   int k0, int k1, const T *__restrict__ xT, const int (&qs)[TMP],
                                                   int lane, float (&acc)[TMP][OCT]) {
    typedef typename dt_vec<VEC>::T V;
    const int NVC = c.C / VEC, J = OCT / 4;
    int img[TMP], y0[TMP], x0[TMP];
#pragma unroll
    for (int t = 0; t < TMP; t++) {
        int oy = 0, ox = 0;
        img[t] = -1;
        if (qs[t] >= 0) dt_position_decode(&c, qs[t], &img[t], &oy, &ox);
        y0[t] = oy * c.sh - c.ph;
        x0[t] = ox * c.sw - c.pw;
    }
    for (int k = k0; k < k1; k++) {
        uint32_t kyu;
        int kx = (int)dt_fastdiv_divmod((uint32_t)k, c.fkw, &kyu), ky = (int)kyu;
        const T *xp[TMP]; /* the pixel's channel row */
#pragma unroll
        for (int t = 0; t < TMP; t++) {
            int iy = y0[t] + ky * c.dh, ix = x0[t] + kx * c.dw;
            bool ok = img[t] >= 0 && iy >= 0 && iy < c.H && ix >= 0 && ix < c.W;
            xp[t] = ok ? xT + (((int64_t)img[t] * c.H + iy) * c.W + ix) * c.C : nullptr;
        }
        const float4 *wk = wpack + (int64_t)(ot * c.K + k) * VEC * J * NVC;
        for (int cv = lane; cv < NVC; cv += OFF_S) {
            V xv[TMP];
#pragma unroll
            for (int t = 0; t < TMP; t++) {
                if (xp[t]) cload(xp[t], cv, xv[t]);
                else vzero(xv[t]);
            }
#pragma unroll
            for (int ci = 0; ci < VEC; ci++) {
#pragma unroll
                for (int j = 0; j < J; j++) {
                    float4 w = __ldg(wk + (ci * J + j) * NVC + cv);
#pragma unroll
                    for (int t = 0; t < TMP; t++) {
                        float a = vget(xv[t], ci);
                        acc[t][4 * j] = fmaf(a, w.x, acc[t][4 * j]);
                        acc[t][4 * j + 1] = fmaf(a, w.y, acc[t][4 * j + 1]);
                        acc[t][4 * j + 2] = fmaf(a, w.z, acc[t][4 * j + 2]);
                        acc[t][4 * j + 3] = fmaf(a, w.w, acc[t][4 * j + 3]);
                    }
                }
            }
        }
    }
    const unsigned mask = group_mask<OFF_S>();
#pragma unroll
    for (int t = 0; t < TMP; t++)
#pragma unroll
        for (int o = 0; o < OCT; o++) acc[t][o] = group_sum<OFF_S>(acc[t][o], mask);
}

/* The final value of offset-conv channel oc (< OCS) from its sum: bias added, mask channels
 * through the sigmoid, padding 0. */
__device__ __forceinline__ float offconv_finish(const dt_deform_chunk &c, int oc, float sum, const float *__restrict__ bias) {
    if (oc >= c.OC) return 0.0f;
    float v = sum + (bias ? __ldg(bias + oc) : 0.0f);
    return oc >= 2 * c.GK ? 1.0f / (1.0f + __expf(-v)) : v;
}

/* A summed dimension of `items` split over blockIdx.z: when `blocks` (the grid without the
 * split) are fewer than ~2 waves (132 SMs), into parts enough to fill them, at most max_parts;
 * *per = items a part, *nz = parts. The parts are summed in order afterwards (deterministic). */
static inline void offconv_split(int64_t blocks, int64_t items, int64_t max_parts, int *per, int *nz) {
    int64_t want = 2 * (int64_t)dt_gpu_sm_count();
    int64_t z = blocks >= want ? 1 : (want + blocks - 1) / blocks;
    if (z > max_parts) z = max_parts;
    if (z < 1) z = 1;
    *per = (int)((items + z - 1) / z);
    *nz = (int)((items + *per - 1) / *per);
}

/* The input gradient's tap search. Pixel p of the chunk as its image and padded coordinates
 * (iy + ph, ix + pw); img = -1 past the chunk's pixels. */
__device__ __forceinline__ void offconv_pixel(const dt_deform_chunk &c, int p, int *img, int *ty, int *tx) {
    *img = -1;
    *ty = *tx = 0;
    if (p >= c.npix) return;
    uint32_t rest, ii;
    int ix = (int)dt_fastdiv_divmod((uint32_t)p, c.fW, &rest);
    int iy = (int)dt_fastdiv_divmod(rest, c.fH, &ii);
    *img = (int)ii;
    *ty = iy + c.ph;
    *tx = ix + c.pw;
}

/* The output position that reads that pixel through tap k, or -1. */
__device__ __forceinline__ int64_t offconv_reader(const dt_deform_chunk &c, int img, int ty, int tx, int k) {
    uint32_t kyu;
    const int kx = (int)dt_fastdiv_divmod((uint32_t)k, c.fkw, &kyu), ky = (int)kyu;
    ty -= ky * c.dh;
    tx -= kx * c.dw;
    if (img < 0 || ty < 0 || tx < 0 || ty % c.sh || tx % c.sw || ty / c.sh >= c.Ho || tx / c.sw >= c.Wo) return -1;
    return ((int64_t)img * c.Ho + ty / c.sh) * c.Wo + tx / c.sw;
}

/* om = finish(sum over the splits of the forward, in order). */
__global__ void k_fwd_finish(dt_deform_chunk c, int nz, const float *__restrict__ part, const float *__restrict__ bias,
                             float *__restrict__ om) {
    const int64_t n = (int64_t)c.Q * c.OCS;
    DT_GRID_STRIDE(e, n) {
        float s = 0.0f;
        for (int z = 0; z < nz; z++) s += part[z * n + e];
        om[e] = offconv_finish(c, (int)(e % c.OCS), s, bias);
    }
}

/* wv [NT][K][C][OCT] from W [OC, C, K] (0 beyond OC): the tiled and tensor-core forwards. */
__global__ void k_pack_wv(dt_deform_chunk c, int OCT, int NT, const float *__restrict__ w, float *__restrict__ wv) {
    const int64_t n = (int64_t)NT * c.K * c.C * OCT;
    DT_GRID_STRIDE(e, n) {
        int o = (int)(e % OCT);
        int64_t r = e / OCT;
        int ch = (int)(r % c.C);
        r /= c.C;
        int k = (int)(r % c.K), ot = (int)(r / c.K), oc = ot * OCT + o;
        wv[e] = oc < c.OC ? w[((int64_t)oc * c.C + ch) * c.K + k] : 0.0f;
    }
}

/* wpack from W [OC, C, K] (see the header comment); bf16 != 0 rounds the weights to bf16. */
template <int VEC>
__global__ void k_offconv_pack(dt_deform_chunk c, int OCT, int NT, const float *__restrict__ w, int bf16,
                               float4 *__restrict__ wpack) {
    const int J = OCT / 4, NVC = c.C / VEC;
    const int64_t n = (int64_t)NT * c.K * VEC * J * NVC;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = e;
        int cv = (int)(r % NVC);
        r /= NVC;
        int j = (int)(r % J);
        r /= J;
        int ci = (int)(r % VEC);
        r /= VEC;
        int k = (int)(r % c.K), ot = (int)(r / c.K);
        int ch = cv * VEC + ci;
        float v[4];
        for (int q = 0; q < 4; q++) {
            int oc = ot * OCT + 4 * j + q;
            v[q] = oc < c.OC ? w[((int64_t)oc * c.C + ch) * c.K + k] : 0.0f;
            if (bf16) v[q] = __bfloat162float(__float2bfloat16_rn(v[q]));
        }
        wpack[e] = make_float4(v[0], v[1], v[2], v[3]);
    }
}

}  // namespace

#endif
