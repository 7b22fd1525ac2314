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
 * All three are deterministic. */
#include "dt_kernel_util.cuh"
#include "layout.h"
#include "offset_conv.cuh"
#include "offset_conv.h"

namespace {

const int FWD_THREADS = 128, FWD_TMP = 4, FWD_GROUPS = FWD_THREADS / OFF_S; /* 64 positions a block */

template <int VEC, int OCT>
__global__ void __launch_bounds__(FWD_THREADS) k_fwd(dt_deform_chunk c, const float4 *__restrict__ wpack,
                                                      const float *__restrict__ bias, const float *__restrict__ xT,
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
    offconv_accumulate<VEC, FWD_TMP, OCT>(c, wpack, ot, k0, k1, xT, qs, lane, acc);
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

/* om = finish(sum over the tap splits, in order). */
__global__ void k_fwd_finish(dt_deform_chunk c, int nz, const float *__restrict__ part, const float *__restrict__ bias,
                             float *__restrict__ om) {
    const int64_t n = (int64_t)c.Q * c.OCS;
    DT_GRID_STRIDE(e, n) {
        float s = 0.0f;
        for (int z = 0; z < nz; z++) s += part[z * n + e];
        om[e] = offconv_finish(c, (int)(e % c.OCS), s, bias);
    }
}

const int DW_THREADS = 128;

template <int VEC, int OCT>
__global__ void __launch_bounds__(DW_THREADS) k_dw(dt_deform_chunk c, int cvb, int ncvb, int qchunk,
                                                   const float *__restrict__ xT, const float *__restrict__ dom,
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
            xv = vload(reinterpret_cast<const V *>(xT + (((int64_t)i * c.H + iy) * c.W + ix) * c.C) + cv);
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

/* out[e] = beta*out[e] + sum_z part[z*n + e], z in order (beta 0 overwrites). */
__global__ void k_sum_parts(int64_t n, int nz, const float *__restrict__ part, float beta, float *__restrict__ out) {
    DT_GRID_STRIDE(e, n) {
        float s = 0.0f;
        for (int z = 0; z < nz; z++) s += part[z * n + e];
        out[e] = beta == 0.0f ? s : beta * out[e] + s;
    }
}

const int DX_THREADS = 128, DX_TPX = 8;

template <int VEC>
__global__ void __launch_bounds__(DX_THREADS) k_dx(dt_deform_chunk c, int L, int nchunks, const float *__restrict__ wT,
                                                   const float *__restrict__ dom, float beta, float *__restrict__ dxT) {
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
            V *dst = reinterpret_cast<V *>(dxT + (int64_t)p * c.C) + cv;
            if (beta == 0.0f) *dst = acc[t];
            else {
                V old = *dst;
                vfma(old, 1.0f, acc[t]);
                *dst = old;
            }
        }
    }
}

bool vec4_ok(const dt_deform_plan *p) { return p->C % 4 == 0; }

int64_t wpack_floats(const dt_deform_plan *p) {
    int oct = offconv_oct(p->OC);
    int64_t nt = (p->OC + oct - 1) / oct;
    return nt * oct * p->K * p->C;
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
    int64_t nvc = vec4_ok(p) ? p->C / 4 : p->C;
    *cvb = dt_lanes_for(nvc, 8);
    *ncvb = (int)((nvc + *cvb - 1) / *cvb);
}

}  // namespace

extern "C" {

size_t dt_offconv_ws_bytes_cuda(const dt_deform_plan *p, int64_t nb) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    int oct = offconv_oct(p->OC), nt = (int)((p->OC + oct - 1) / oct), cvb, ncvb, kt, nzf, qchunk, nzw;
    fwd_split(c, nt, &kt, &nzf);
    dw_shape(p, &cvb, &ncvb);
    dw_split(c, cvb, ncvb, nt, &qchunk, &nzw);
    size_t fwd = (size_t)wpack_floats(p) + (nzf > 1 ? (size_t)nzf * c.Q * c.OCS : 0);
    size_t dw = (size_t)nzw * p->OC * (p->C * p->K + 1);
    size_t dx = (size_t)p->OC * p->K * p->C;
    size_t m = fwd > dw ? fwd : dw;
    return (m > dx ? m : dx) * sizeof(float) + 256;
}

void dt_offconv_fwd_cuda(const dt_deform_plan *p, int64_t nb, const float *xT, const float *w, const float *b, float *om,
                         void *ws) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    if (c.Q <= 0) return;
    const int oct = offconv_oct(p->OC), nt = (int)((p->OC + oct - 1) / oct);
    float4 *wpack = (float4 *)ws;
    float *part = (float *)ws + wpack_floats(p);
    int64_t npack = wpack_floats(p) / 4;
    if (vec4_ok(p)) k_offconv_pack<4><<<dt_grid_for(npack, 256), 256, 0, dt_stream()>>>(c, oct, nt, w, wpack);
    else k_offconv_pack<1><<<dt_grid_for(npack, 256), 256, 0, dt_stream()>>>(c, oct, nt, w, wpack);
    DT_CHECK_LAUNCH();
    int ktaps, nz;
    fwd_split(c, nt, &ktaps, &nz);
    dim3 grid((c.Q + FWD_GROUPS * FWD_TMP - 1) / (FWD_GROUPS * FWD_TMP), nt, nz);
    float *dst = nz > 1 ? part : om;
#define FWD(V, O) k_fwd<V, O><<<grid, FWD_THREADS, 0, dt_stream()>>>(c, wpack, b, xT, dst, ktaps, nz > 1)
    if (vec4_ok(p)) {
        if (oct == 20) FWD(4, 20);
        else FWD(4, 28);
    } else {
        if (oct == 20) FWD(1, 20);
        else FWD(1, 28);
    }
#undef FWD
    DT_CHECK_LAUNCH();
    if (nz > 1) {
        k_fwd_finish<<<dt_grid_for((int64_t)c.Q * c.OCS, 256), 256, 0, dt_stream()>>>(c, nz, part, b, om);
        DT_CHECK_LAUNCH();
    }
}

void dt_offconv_bwd_weight_cuda(const dt_deform_plan *p, int64_t nb, const float *xT, const float *dom, float beta_w,
                                float *dw, float beta_b, float *db, void *ws) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    const int oct = offconv_oct(p->OC), nt = (int)((p->OC + oct - 1) / oct);
    int cvb, ncvb, qchunk, nz;
    dw_shape(p, &cvb, &ncvb);
    dw_split(c, cvb, ncvb, nt, &qchunk, &nz);
    float *partw = (float *)ws, *partb = partw + (int64_t)nz * p->OC * p->C * p->K;
    if (c.Q > 0) {
        dim3 grid((unsigned)(p->K * ncvb), nt, nz);
#define DW(V, O) k_dw<V, O><<<grid, DW_THREADS, 0, dt_stream()>>>(c, cvb, ncvb, qchunk, xT, dom, partw, partb)
        if (vec4_ok(p)) {
            if (oct == 20) DW(4, 20);
            else DW(4, 28);
        } else {
            if (oct == 20) DW(1, 20);
            else DW(1, 28);
        }
#undef DW
        DT_CHECK_LAUNCH();
    } else {
        nz = 0;
    }
    int64_t nw = p->OC * p->C * p->K;
    if (dw) {
        k_sum_parts<<<dt_grid_for(nw, 256), 256, 0, dt_stream()>>>(nw, nz, partw, beta_w, dw);
        DT_CHECK_LAUNCH();
    }
    if (db) {
        k_sum_parts<<<1, 256, 0, dt_stream()>>>(p->OC, nz, partb, beta_b, db);
        DT_CHECK_LAUNCH();
    }
}

void dt_offconv_bwd_input_cuda(const dt_deform_plan *p, int64_t nb, const float *dom, const float *w, float beta,
                               float *dxT, void *ws) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    if (c.npix <= 0) return;
    float *wT = (float *)ws; /* [OC, K, C] */
    dt_nchw_to_nhwc_cuda(p->OC, p->C, p->K, w, p->C, wT);
    int64_t nvc = vec4_ok(p) ? p->C / 4 : p->C;
    int L = dt_lanes_for(nvc, 4), nchunks = (int)((nvc + L - 1) / L);
    int64_t items = (int64_t)(c.npix + DX_TPX - 1) / DX_TPX * nchunks;
    int blocks = dt_grid_for(items * L, DX_THREADS);
    if (vec4_ok(p)) k_dx<4><<<blocks, DX_THREADS, 0, dt_stream()>>>(c, L, nchunks, wT, dom, beta, dxT);
    else k_dx<1><<<blocks, DX_THREADS, 0, dt_stream()>>>(c, L, nchunks, wT, dom, beta, dxT);
    DT_CHECK_LAUNCH();
}
}
