/* deform_nhwc.cuh: the row kernels of the channels-last deformable path - the sampling
 * (k_sample, a row a sample, its body sample_row) and the dx gather (k_gather, a row a (pixel,
 * group)) - shared by their launchers (deform_nhwc.cu: contracts in deform_nhwc.h, thread
 * mapping in its header comment) and the deformable kernel lab (bench/lab/deform_lab.cu, which
 * runs them at other lane counts beside its own variants of the row walk and the gather's hit
 * loop). Included by .cu files only. */
#ifndef DT_K_DEFORM_NHWC_CUH
#define DT_K_DEFORM_NHWC_CUH

#include <stdint.h>

#include "core/dt_lanes.cuh"
#include "ops/deform/deform_chunk.h"

namespace dt_deft {

constexpr int THREADS = 256; /* every row kernel's block */

/* Rows r = first, first + step, ... of this thread's lane group (grid-stride over groups). */
#define DT_DEFT_FOR_ROWS(r, rows, L)                                                                     \
    for (int r = blockIdx.x * (THREADS / (L)) + threadIdx.x / (L); r < (rows); r += gridDim.x * (THREADS / (L)))

/* ------------------------------------------------------------------ sampling */

/* m * (w0 v0 + w1 v1 + w2 v2 + w3 v3) of a sample's four corner vectors, in this order (as
 * dt_bilin_value): every sampling kernel's arithmetic */
template <typename V> __device__ __forceinline__ V bilin_blend(const dt_bilin &b, float m, const V (&val)[4]) {
    V s = vscale(b.w[0], val[0]);
    vfma(s, b.w[1], val[1]);
    vfma(s, b.w[2], val[2]);
    vfma(s, b.w[3], val[3]);
    return vscale(m, s);
}

/* Writes colT's segment of one sample (k, g) at position q for the lane's vectors. */
template <int VEC, int L, typename T>
__device__ __forceinline__ void sample_row(const dt_deform_chunk &c, const T *__restrict__ xT,
                                           const float *__restrict__ om, int q, int k, int g, int lane,
                                           T *__restrict__ colT) {
    typedef typename dt_vec<VEC>::T V;
    int i;
    float m;
    dt_bilin b = dt_sample_bilin(&c, om, q, k, g, &i, &m);
    const T *corner[4]; /* the corners' channel rows of group g */
    const T *plane = xT + (int64_t)i * c.H * c.W * c.C + (int64_t)g * c.Cg;
#pragma unroll
    for (int t = 0; t < 4; t++) corner[t] = b.ok[t] ? plane + dt_bilin_index(&b, t, c.W) * c.C : nullptr;
    T *out = colT + (int64_t)q * c.KC + (int64_t)k * c.C + (int64_t)g * c.Cg;
    const int NV = c.Cg / VEC;
    for (int v = lane; v < NV; v += L) {
        V val[4];
#pragma unroll
        for (int t = 0; t < 4; t++) {
            if (corner[t]) cload(corner[t], v, val[t]);
            else vzero(val[t]);
        }
        cstore(out, v, bilin_blend(b, m, val));
    }
}

template <int VEC, int L, typename T>
__global__ void __launch_bounds__(THREADS) k_sample(dt_deform_chunk c, const T *__restrict__ xT,
                                                   const float *__restrict__ om, T *__restrict__ colT) {
    const int lane = threadIdx.x % L;
    DT_DEFT_FOR_ROWS(s, c.S, L) {
        int q, k, g;
        dt_sample_decode(&c, (uint32_t)s, &q, &k, &g);
        sample_row<VEC, L, T>(c, xT, om, q, k, g, lane, colT);
    }
}

/* ------------------------------------------------------------------ gather */

/* The gather's row r = (pixel pix of the chunk, offset group g), r = pix*G + g. Returns the
 * index key of the samples whose top-left corner is the pixel; the pixel is corner t - the
 * top-left (t=0), top-right (1), bottom-left (2) or bottom-right (3) - of the samples whose
 * top-left is (iy - t/2, ix - t%2), key gather_key(c, base, t). */
__device__ __forceinline__ int64_t gather_row(const dt_deform_chunk &c, int r, uint32_t &pix, int &g) {
    uint32_t rest, iu;
    g = (int)dt_fastdiv_divmod((uint32_t)r, c.fG, &pix);
    const int ix = (int)dt_fastdiv_divmod(pix, c.fW, &rest);
    const int iy = (int)dt_fastdiv_divmod(rest, c.fH, &iu);
    return ((int64_t)((int)iu * c.G + g) * (c.H + 1) + iy + 1) * (c.W + 1) + ix + 1;
}
__device__ __forceinline__ int64_t gather_key(const dt_deform_chunk &c, int64_t base, int t) {
    return base - (t & 1) - (t >> 1) * (c.W + 1);
}

/* A chunk of the row's channel vectors: the lane's v = v0 + lane + u*L, u < VPL (those past NV
 * are left alone). gather_begin reads x's vectors (0 past NV) and zeroes the sums; gather_end
 * writes the sums to dx with beta. */
template <int L, int VPL, typename T, typename V>
__device__ __forceinline__ void gather_begin(const T *xr, int v0, int lane, int NV, V (&xv)[VPL], V (&acc)[VPL]) {
#pragma unroll
    for (int u = 0; u < VPL; u++) {
        int v = v0 + lane + u * L;
        if (v < NV) cload(xr, v, xv[u]);
        else vzero(xv[u]);
        vzero(acc[u]);
    }
}
template <int L, int VPL, typename TO, typename V>
__device__ __forceinline__ void gather_end(TO *out, int v0, int lane, int NV, const V (&acc)[VPL], float beta) {
#pragma unroll
    for (int u = 0; u < VPL; u++) {
        int v = v0 + lane + u * L;
        if (v < NV) cstore_beta(out, v, acc[u], beta);
    }
}

/* A group of L lanes per (pixel, offset group), a vector a lane (VPL = 4 when the group is
 * wider than 32 vectors; channel chunks of L*VPL vectors beyond, re-walking the index). One hit
 * at a time: loading several ahead, or 4 vectors a lane, was measured slower (the lab).
 * x and dcol of T; the sums fp32; dx (of TO: T, or float for a sum another kernel finishes;
 * NULL: D only) written once, with beta. */
template <int VEC, int L, int VPL, typename T, typename TO>
__global__ void __launch_bounds__(THREADS) k_gather(dt_deform_chunk c, const uint32_t *__restrict__ order,
                                                   const uint32_t *__restrict__ start, const float *__restrict__ wm,
                                                   const T *__restrict__ xT, const T *__restrict__ dcolT, float beta,
                                                   TO *__restrict__ dxT, float *__restrict__ D) {
    typedef typename dt_vec<VEC>::T V;
    const int lane = threadIdx.x % L, NV = c.Cg / VEC;
    const unsigned mask = group_mask<L>();
    DT_DEFT_FOR_ROWS(r, c.npix * c.G, L) {
        uint32_t pix;
        int g;
        const int64_t base = gather_row(c, r, pix, g);
        const T *xr = xT + (int64_t)pix * c.C + (int64_t)g * c.Cg;
        TO *out = dxT ? dxT + (int64_t)pix * c.C + (int64_t)g * c.Cg : nullptr;
        for (int v0 = 0; v0 < NV; v0 += L * VPL) {
            V xv[VPL], acc[VPL];
            gather_begin<L>(xr, v0, lane, NV, xv, acc);
#pragma unroll
            for (int t = 0; t < 4; t++) {
                const int64_t key = gather_key(c, base, t);
                const uint32_t e1 = __ldg(start + key + 1);
                for (uint32_t e = __ldg(start + key); e < e1; e++) {
                    const uint32_t s = __ldg(order + e);
                    const float w = __ldg(wm + 4 * (int64_t)s + t);
                    /* s = (q*K + k)*G + g: its dcol row segment starts at (q*K + k)*C + g*Cg */
                    uint32_t qk;
                    dt_fastdiv_divmod(s, c.fG, &qk);
                    const T *row = dcolT + (int64_t)qk * c.C + (int64_t)g * c.Cg;
                    float part = 0.0f;
#pragma unroll
                    for (int u = 0; u < VPL; u++) {
                        int v = v0 + lane + u * L;
                        if (v < NV) {
                            V d;
                            cload(row, v, d);
                            vfma(acc[u], w, d);
                            part += vdot(d, xv[u]);
                        }
                    }
                    part = group_sum<L>(part, mask);
                    if (lane == 0) D[4 * (int64_t)s + t] = v0 == 0 ? part : D[4 * (int64_t)s + t] + part;
                }
            }
            if (out) gather_end<L>(out, v0, lane, NV, acc, beta);
        }
    }
}

} /* namespace dt_deft */
#endif
