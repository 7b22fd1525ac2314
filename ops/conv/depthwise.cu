/* CUDA kernels of depthwise.h: the direct stencil on tiles staged in shared memory.
 *
 * A block owns one tile (depthwise.h's dt_dw_tile) of one image and CB channels (blockIdx.y =
 * channel slice): TH x TW positions of one residue class - positions q apart - so that the
 * inputs its windows read are themselves a regular grid d apart, staged once as an fp32 tile
 * of ((TH-1)*m + k) rows x columns; a dilated window is then a unit-step walk of the tile, and
 * the bytes a block loads do not grow with the dilation (a contiguous tile of TW outputs would
 * stage (TW-1)*s + (k-1)*d + 1 inputs, mostly halo once d*k passes TW). Channels are the
 * innermost axis in NHWC: a thread stages and computes V channels (V*elem = 16 bytes: float4 /
 * 8 bf16) when C is a multiple of V and the pointers are 16-byte aligned, else 1; NCHW (f32)
 * stages along W, one element a thread. fwd and dgrad sum with __fmaf_rn in the CPU twins'
 * order (a zero product for a padded tap) and round once on the store: bit for bit the twins.
 * wgrad: a fixed grid of blocks per channel slice, each walking the tiles b, b + G, b + 2G, ...
 * with one thread owning each (tap, multiplier, channel) sum in shared memory; each block's
 * fp32 sums go to a partial buffer and a second kernel adds the G partials of each weight in
 * block order in double - no atomics, bitwise reproducible run to run. */
#include <cuda_bf16.h>

#include "core/dt_alloc.h"
#include "core/dt_dtype.cuh"
#include "core/dt_kernel_util.cuh"
#include "ops/conv/depthwise.h"

namespace {

/* V contiguous elements at p, widened */
template <typename T, int V>
__device__ __forceinline__ void ldv(const T *p, float *v) {
    if constexpr (V * sizeof(T) == 16) {
        const uint4 u = __ldg(reinterpret_cast<const uint4 *>(p));
        const T *e = reinterpret_cast<const T *>(&u);
#pragma unroll
        for (int i = 0; i < V; i++) v[i] = dt_ld(e + i);
    } else {
#pragma unroll
        for (int i = 0; i < V; i++) v[i] = dt_ld(p + i);
    }
}

/* V contiguous elements to p, each rounded once */
template <typename T, int V>
__device__ __forceinline__ void stv(T *p, const float *v) {
    if constexpr (V * sizeof(T) == 16) {
        uint4 u;
        T *e = reinterpret_cast<T *>(&u);
#pragma unroll
        for (int i = 0; i < V; i++) dt_st(e + i, v[i]);
        *reinterpret_cast<uint4 *>(p) = u;
    } else {
#pragma unroll
        for (int i = 0; i < V; i++) dt_st(p + i, v[i]);
    }
}

/* The block's tile: image n, residue classes (rh, rw), tile (th, tw) of its class */
struct tile_pos {
    int64_t n;
    int rh, rw;
    int64_t th, tw;
};
__device__ __forceinline__ tile_pos decode(int64_t b, const dt_dw_tile &t) {
    tile_pos q;
    q.tw = b % t.ntw, b /= t.ntw;
    q.rw = (int)(b % t.qw), b /= t.qw;
    q.th = b % t.nth, b /= t.nth;
    q.rh = (int)(b % t.qh), q.n = b / t.qh;
    return q;
}

/* Stages the fwd footprint of tile q: xs[li][lj][cl] (NHWC) or xs[cl][li][lj] (NCHW), fp32, the
 * input at row iy0 + dh*li, column ix0 + dw*lj, zero outside the image and past C. */
template <typename T, bool NHWC, int V>
__device__ void stage_x(const dt_conv_problem &p, const dt_dw_tile &t, const tile_pos &q, int c0,
                        const T *__restrict__ x, float *xs) {
    const dt_conv_geom g = p.g;
    const int64_t iy0 = (int64_t)q.rh * g.sh - g.ph + (int64_t)g.dh * t.mh * q.th * t.TH;
    const int64_t ix0 = (int64_t)q.rw * g.sw - g.pw + (int64_t)g.dw * t.mw * q.tw * t.TW;
    const int nv = t.CB / V, n_el = t.IH * t.IW * nv;
    for (int e = threadIdx.x; e < n_el; e += blockDim.x) {
        int li, lj, cl;
        if (NHWC) cl = (e % nv) * V, lj = (e / nv) % t.IW, li = e / nv / t.IW;
        else lj = e % t.IW, li = (e / t.IW) % t.IH, cl = e / t.IW / t.IH;
        const int64_t iy = iy0 + (int64_t)g.dh * li, ix = ix0 + (int64_t)g.dw * lj, c = c0 + cl;
        float v[V];
        if (iy >= 0 && iy < p.H && ix >= 0 && ix < p.W && c < p.C) {
            if (NHWC) ldv<T, V>(x + ((q.n * p.H + iy) * p.W + ix) * p.C + c, v);
            else ldv<T, V>(x + ((q.n * p.C + c) * p.H + iy) * p.W + ix, v);
        } else {
#pragma unroll
            for (int i = 0; i < V; i++) v[i] = 0.0f;
        }
#pragma unroll
        for (int i = 0; i < V; i++)
            xs[NHWC ? ((int64_t)li * t.IW + lj) * t.CB + cl + i : ((int64_t)(cl + i) * t.IH + li) * t.IW + lj] = v[i];
    }
}

/* Stages n_rows x n_cols positions of the outputs' channels [c0*M, (c0+CB)*M) into
 * s[li][lj][k] (k = cl*M + m), fp32: position (li, lj) is output (oy, ox) = at(li, lj), or
 * zero where at() says none (oy < 0). NHWC loads V consecutive k (Cout % V == 0 then). */
template <typename T, bool NHWC, int V, typename At>
__device__ void stage_out(const dt_conv_problem &p, int CB, int64_t n, int c0, int n_rows, int n_cols, At at,
                          const T *__restrict__ dy, float *s) {
    const int64_t M = p.Cout / p.C, K = CB * M, nv = K / V, n_el = (int64_t)n_rows * n_cols * nv;
    for (int64_t e = threadIdx.x; e < n_el; e += blockDim.x) {
        int li, lj;
        int64_t k;
        if (NHWC) k = (e % nv) * V, lj = (int)((e / nv) % n_cols), li = (int)(e / nv / n_cols);
        else lj = (int)(e % n_cols), li = (int)((e / n_cols) % n_rows), k = e / n_cols / n_rows;
        int64_t oy, ox;
        at(li, lj, &oy, &ox);
        const int64_t co = c0 * M + k;
        float v[V];
        if (oy >= 0 && co < p.Cout) {
            if (NHWC) ldv<T, V>(dy + ((n * p.Ho + oy) * p.Wo + ox) * p.Cout + co, v);
            else ldv<T, V>(dy + ((n * p.Cout + co) * p.Ho + oy) * p.Wo + ox, v);
        } else {
#pragma unroll
            for (int i = 0; i < V; i++) v[i] = 0.0f;
        }
#pragma unroll
        for (int i = 0; i < V; i++) s[((int64_t)li * n_cols + lj) * K + k + i] = v[i];
    }
}

/* ws[tap][m][cl] = w[(c0 + cl)*M + m][tap], zero past C */
template <typename T>
__device__ void stage_w(const dt_conv_problem &p, int CB, int c0, const T *__restrict__ w, float *ws) {
    const int64_t M = p.Cout / p.C, taps = (int64_t)p.g.kh * p.g.kw, n_el = taps * M * CB;
    for (int64_t e = threadIdx.x; e < n_el; e += blockDim.x) {
        const int cl = (int)(e % CB);
        const int64_t m = (e / CB) % M, tap = e / CB / M, c = c0 + cl;
        ws[e] = c < p.C ? dt_ld(w + (c * M + m) * taps + tap) : 0.0f;
    }
}

template <typename T, bool NHWC, int V>
__global__ void k_dw_fwd(dt_conv_problem p, dt_dw_tile t, const T *__restrict__ x, const T *__restrict__ w,
                         const float *__restrict__ bias, T *__restrict__ y) {
    extern __shared__ float sm[];
    float *xs = sm, *ws = sm + (int64_t)t.IH * t.IW * t.CB;
    const tile_pos q = decode(blockIdx.x, t);
    const int c0 = blockIdx.y * t.CB;
    const dt_conv_geom g = p.g;
    const int64_t M = p.Cout / p.C;
    stage_x<T, NHWC, V>(p, t, q, c0, x, xs);
    stage_w(p, t.CB, c0, w, ws);
    __syncthreads();
    const int nv = t.CB / V, n_items = t.TH * t.TW * nv;
    for (int e = threadIdx.x; e < n_items; e += blockDim.x) {
        int i, j, cl;
        if (NHWC) cl = (e % nv) * V, j = (e / nv) % t.TW, i = e / nv / t.TW;
        else j = e % t.TW, i = (e / t.TW) % t.TH, cl = e / t.TW / t.TH;
        const int64_t oy = q.rh + (int64_t)t.qh * (q.th * t.TH + i), ox = q.rw + (int64_t)t.qw * (q.tw * t.TW + j);
        const int64_t c = c0 + cl;
        if (oy >= p.Ho || ox >= p.Wo || c >= p.C) continue;
        for (int64_t m = 0; m < M; m++) {
            float acc[V];
#pragma unroll
            for (int v = 0; v < V; v++) acc[v] = 0.0f;
            for (int ky = 0; ky < g.kh; ky++) {
                const int li = t.mh * i + ky;
                for (int kx = 0; kx < g.kw; kx++) {
                    const int lj = t.mw * j + kx;
                    const float *wr = ws + ((int64_t)(ky * g.kw + kx) * M + m) * t.CB + cl;
#pragma unroll
                    for (int v = 0; v < V; v++) {
                        const float xv = xs[NHWC ? ((int64_t)li * t.IW + lj) * t.CB + cl + v
                                                 : ((int64_t)(cl + v) * t.IH + li) * t.IW + lj];
                        acc[v] = __fmaf_rn(xv, wr[v], acc[v]);
                    }
                }
            }
            if (bias) {
#pragma unroll
                for (int v = 0; v < V; v++) acc[v] = __fadd_rn(acc[v], bias[(c + v) * M + m]);
            }
            if (NHWC && M == 1) {
                stv<T, V>(y + ((q.n * p.Ho + oy) * p.Wo + ox) * p.Cout + c, acc);
            } else {
#pragma unroll
                for (int v = 0; v < V; v++) {
                    const int64_t co = (c + v) * M + m;
                    dt_st(y + (NHWC ? ((q.n * p.Ho + oy) * p.Wo + ox) * p.Cout + co : ((q.n * p.Cout + co) * p.Ho + oy) * p.Wo + ox),
                          acc[v]);
                }
            }
        }
    }
}

/* dx tile: input positions iy = rh + dh*(th*TH + i), ix likewise (classes mod d); staged dy row
 * li is the virtual stride-1 position u = rh + ph + dh*(th*TH + li - (kh-1)), the output u / sh
 * when sh divides u and it lies in [0, Ho) */
template <typename T, bool NHWC, int V>
__global__ void k_dw_dgrad(dt_conv_problem p, dt_dw_tile t, const T *__restrict__ dy, const T *__restrict__ w,
                           float beta, T *__restrict__ dx) {
    extern __shared__ float sm[];
    const int64_t M = p.Cout / p.C, K = t.CB * M;
    float *ds = sm, *ws = sm + (int64_t)t.IH * t.IW * K;
    const tile_pos q = decode(blockIdx.x, t);
    const int c0 = blockIdx.y * t.CB;
    const dt_conv_geom g = p.g;
    const int64_t uy0 = q.rh + g.ph + (int64_t)g.dh * (q.th * t.TH - (g.kh - 1));
    const int64_t ux0 = q.rw + g.pw + (int64_t)g.dw * (q.tw * t.TW - (g.kw - 1));
    const int64_t Ho = p.Ho, Wo = p.Wo;
    auto at = [=](int li, int lj, int64_t *oy, int64_t *ox) {
        const int64_t uy = uy0 + (int64_t)g.dh * li, ux = ux0 + (int64_t)g.dw * lj;
        const bool ok = uy >= 0 && ux >= 0 && uy % g.sh == 0 && ux % g.sw == 0 && uy / g.sh < Ho && ux / g.sw < Wo;
        *oy = ok ? uy / g.sh : -1, *ox = ok ? ux / g.sw : -1;
    };
    stage_out<T, NHWC, V>(p, t.CB, q.n, c0, t.IH, t.IW, at, dy, ds);
    stage_w(p, t.CB, c0, w, ws);
    __syncthreads();
    const int nv = t.CB / V, n_items = t.TH * t.TW * nv;
    for (int e = threadIdx.x; e < n_items; e += blockDim.x) {
        int i, j, cl;
        if (NHWC) cl = (e % nv) * V, j = (e / nv) % t.TW, i = e / nv / t.TW;
        else j = e % t.TW, i = (e / t.TW) % t.TH, cl = e / t.TW / t.TH;
        const int64_t iy = q.rh + (int64_t)g.dh * (q.th * t.TH + i), ix = q.rw + (int64_t)g.dw * (q.tw * t.TW + j);
        const int64_t c = c0 + cl;
        if (iy >= p.H || ix >= p.W || c >= p.C) continue;
        float acc[V];
#pragma unroll
        for (int v = 0; v < V; v++) acc[v] = 0.0f;
        for (int64_t m = 0; m < M; m++)
            for (int ky = 0; ky < g.kh; ky++) {
                const int li = i - ky + g.kh - 1;
                for (int kx = 0; kx < g.kw; kx++) {
                    const int lj = j - kx + g.kw - 1;
                    const float *wr = ws + ((int64_t)(ky * g.kw + kx) * M + m) * t.CB + cl;
                    const float *dr = ds + ((int64_t)li * t.IW + lj) * K + m;
#pragma unroll
                    for (int v = 0; v < V; v++) acc[v] = __fmaf_rn(dr[(cl + v) * M], wr[v], acc[v]);
                }
            }
        T *o = dx + (NHWC ? ((q.n * p.H + iy) * p.W + ix) * p.C + c : ((q.n * p.C + c) * p.H + iy) * p.W + ix);
        if (NHWC) {
            if (beta != 0.0f) {
                float old[V];
#pragma unroll
                for (int v = 0; v < V; v++) old[v] = dt_ld(o + v);
#pragma unroll
                for (int v = 0; v < V; v++) acc[v] = __fmaf_rn(beta, old[v], acc[v]);
            }
            stv<T, V>(o, acc);
        } else {
            dt_st(o, beta == 0.0f ? acc[0] : __fmaf_rn(beta, dt_ld(o), acc[0]));
        }
    }
}

/* wgrad: block (b, slice) walks tiles b, b + G, ... (G = gridDim.x) in that order; item
 * (tap, m, cl), cl fastest, is owned by thread item % blockDim.x, which adds each tile's fp32
 * sum over its TH x TW positions (row-major) to its shared-memory sum; at the end the block's
 * sums go to part[b][co][tap] */
template <typename T, bool NHWC, int V>
__global__ void k_dw_wgrad(dt_conv_problem p, dt_dw_tile t, int64_t n_tiles, const T *__restrict__ x,
                           const T *__restrict__ dy, float *__restrict__ part) {
    extern __shared__ float sm[];
    const int64_t M = p.Cout / p.C, K = t.CB * M, taps = (int64_t)p.g.kh * p.g.kw;
    float *xs = sm, *ds = xs + (int64_t)t.IH * t.IW * t.CB, *acc = ds + (int64_t)t.TH * t.TW * K;
    const int c0 = blockIdx.y * t.CB;
    const int64_t n_items = taps * K;
    for (int64_t e = threadIdx.x; e < n_items; e += blockDim.x) acc[e] = 0.0f;
    for (int64_t b = blockIdx.x; b < n_tiles; b += gridDim.x) {
        const tile_pos q = decode(b, t);
        __syncthreads(); /* the previous tile's reads are done */
        stage_x<T, NHWC, V>(p, t, q, c0, x, xs);
        const int64_t y0 = q.rh + (int64_t)t.qh * q.th * t.TH, x0 = q.rw + (int64_t)t.qw * q.tw * t.TW, Ho = p.Ho, Wo = p.Wo;
        const int qh = t.qh, qw = t.qw;
        auto at = [=](int i, int j, int64_t *oy, int64_t *ox) {
            const int64_t y = y0 + (int64_t)qh * i, xx = x0 + (int64_t)qw * j;
            const bool ok = y < Ho && xx < Wo;
            *oy = ok ? y : -1, *ox = ok ? xx : -1;
        };
        stage_out<T, NHWC, V>(p, t.CB, q.n, c0, t.TH, t.TW, at, dy, ds);
        __syncthreads();
        for (int64_t e = threadIdx.x; e < n_items; e += blockDim.x) {
            const int cl = (int)(e % t.CB);
            const int64_t m = (e / t.CB) % M, tap = e / t.CB / M;
            const int ky = (int)(tap / p.g.kw), kx = (int)(tap % p.g.kw);
            float s = 0.0f;
            for (int i = 0; i < t.TH; i++)
                for (int j = 0; j < t.TW; j++) {
                    const int li = t.mh * i + ky, lj = t.mw * j + kx;
                    const float xv = xs[NHWC ? ((int64_t)li * t.IW + lj) * t.CB + cl : ((int64_t)cl * t.IH + li) * t.IW + lj];
                    s = __fmaf_rn(ds[((int64_t)i * t.TW + j) * K + (int64_t)cl * M + m], xv, s);
                }
            acc[e] = __fadd_rn(acc[e], s);
        }
    }
    __syncthreads();
    for (int64_t e = threadIdx.x; e < n_items; e += blockDim.x) {
        const int cl = (int)(e % t.CB);
        const int64_t m = (e / t.CB) % M, tap = e / t.CB / M, c = c0 + cl;
        if (c < p.C) part[((int64_t)blockIdx.x * p.Cout + c * M + m) * taps + tap] = acc[e];
    }
}

/* dw[i] = beta dw[i] + the G partials of weight i added in block order (double) */
__global__ void k_dw_wgrad_reduce(const float *__restrict__ part, int64_t G, int64_t n, float beta, float *__restrict__ dw) {
    DT_GRID_STRIDE(i, n) {
        double s = 0.0;
        for (int64_t b = 0; b < G; b++) s += part[b * n + i];
        dw[i] = beta == 0.0f ? (float)s : __fmaf_rn(beta, dw[i], (float)s);
    }
}

void require_tile(const dt_conv_problem *p, int pass, dt_dw_tile *t) {
    if (!dt_dw_problem(p))
        dt_fatal("depthwise conv: %lld groups of %lld channels -> %lld is not depthwise", (long long)p->groups,
                 (long long)p->C, (long long)p->Cout);
    if (!dt_dw_tile_of(p, pass, DT_DW_SMEM_LIMIT, t))
        dt_fatal("depthwise conv: a %dx%d kernel with %lld outputs a channel does not fit a tile in %zu bytes of "
                 "shared memory (dt_dw_gpu_supported: the plan keeps it on the column path)",
                 p->g.kh, p->g.kw, (long long)(p->Cout / p->C), DT_DW_SMEM_LIMIT);
}

/* the channel vector of an NHWC tensor pair: 16 bytes when C (and Cout) are multiples of it
 * and the pointers are aligned */
template <typename T>
bool vec_ok(const dt_conv_problem *p, const void *a, const void *b) {
    const int v = 16 / (int)sizeof(T);
    return p->C % v == 0 && ((uintptr_t)a % 16) == 0 && ((uintptr_t)b % 16) == 0;
}

dim3 grid_of(const dt_conv_problem *p, const dt_dw_tile &t, int64_t classes_h, int64_t classes_w) {
    const int64_t nx = p->N * classes_h * t.nth * classes_w * t.ntw, ny = (p->C + t.CB - 1) / t.CB;
    if (nx >= ((int64_t)1 << 31) || ny > 65535) dt_fatal("depthwise conv: a grid of %lld x %lld blocks is too large", (long long)nx, (long long)ny);
    return dim3((unsigned)nx, (unsigned)ny);
}

/* threads a block: one an item (position, channel vector) up to 256, whole warps - a tile of a
 * residue class can hold few positions (1-D at dilation 128: 8 a class of 1024 outputs) */
int threads_for(const dt_dw_tile &t, int V) {
    const int items = t.TH * t.TW * (t.CB / V), warps = (items + 31) / 32;
    return warps >= 8 ? 256 : warps * 32;
}

template <typename T, bool NHWC>
void fwd(const dt_conv_problem *p, const void *x, const void *w, const float *bias, void *y) {
    dt_dw_tile t;
    require_tile(p, DT_DW_FWD, &t);
    const dim3 grid = grid_of(p, t, t.qh, t.qw);
    const T *xt = (const T *)x, *wt = (const T *)w;
    T *yt = (T *)y;
    if constexpr (NHWC) {
        if (vec_ok<T>(p, x, y)) k_dw_fwd<T, true, 16 / sizeof(T)><<<grid, threads_for(t, 16 / sizeof(T)), t.smem, dt_stream()>>>(*p, t, xt, wt, bias, yt);
        else k_dw_fwd<T, true, 1><<<grid, threads_for(t, 1), t.smem, dt_stream()>>>(*p, t, xt, wt, bias, yt);
    } else {
        k_dw_fwd<T, false, 1><<<grid, threads_for(t, 1), t.smem, dt_stream()>>>(*p, t, xt, wt, bias, yt);
    }
    DT_CHECK_LAUNCH();
}

template <typename T, bool NHWC>
void dgrad(const dt_conv_problem *p, const void *dy, const void *w, float beta, void *dx) {
    dt_dw_tile t;
    require_tile(p, DT_DW_DGRAD, &t);
    const dim3 grid = grid_of(p, t, t.qh, t.qw);
    const T *dyt = (const T *)dy, *wt = (const T *)w;
    T *dxt = (T *)dx;
    if constexpr (NHWC) {
        if (vec_ok<T>(p, dy, dx)) k_dw_dgrad<T, true, 16 / sizeof(T)><<<grid, threads_for(t, 16 / sizeof(T)), t.smem, dt_stream()>>>(*p, t, dyt, wt, beta, dxt);
        else k_dw_dgrad<T, true, 1><<<grid, threads_for(t, 1), t.smem, dt_stream()>>>(*p, t, dyt, wt, beta, dxt);
    } else {
        k_dw_dgrad<T, false, 1><<<grid, threads_for(t, 1), t.smem, dt_stream()>>>(*p, t, dyt, wt, beta, dxt);
    }
    DT_CHECK_LAUNCH();
}

template <typename T, bool NHWC>
void wgrad(const dt_conv_problem *p, const void *x, const void *dy, float beta, float *dw) {
    dt_dw_tile t;
    require_tile(p, DT_DW_WGRAD, &t);
    const dim3 all = grid_of(p, t, t.qh, t.qw);
    const int64_t n_tiles = all.x, taps = (int64_t)p->g.kh * p->g.kw, n = p->Cout * taps;
    /* about 4 blocks an SM over all slices, never more than the tiles: a function of the shape
     * and the device's SM count, fixed for a run */
    int64_t G = (int64_t)dt_gpu_sm_count() * 4 / all.y;
    G = G < 1 ? 1 : G > n_tiles ? n_tiles : G;
    float *part = (float *)dt_gpu_malloc(sizeof(float) * (size_t)(G * n));
    const dim3 grid((unsigned)G, all.y);
    const T *xt = (const T *)x, *dyt = (const T *)dy;
    if constexpr (NHWC) {
        if (vec_ok<T>(p, x, dy)) k_dw_wgrad<T, true, 16 / sizeof(T)><<<grid, 256, t.smem, dt_stream()>>>(*p, t, n_tiles, xt, dyt, part);
        else k_dw_wgrad<T, true, 1><<<grid, 256, t.smem, dt_stream()>>>(*p, t, n_tiles, xt, dyt, part);
    } else {
        k_dw_wgrad<T, false, 1><<<grid, 256, t.smem, dt_stream()>>>(*p, t, n_tiles, xt, dyt, part);
    }
    DT_CHECK_LAUNCH();
    k_dw_wgrad_reduce<<<dt_grid_for(n, 256), 256, 0, dt_stream()>>>(part, G, n, beta, dw);
    DT_CHECK_LAUNCH();
    dt_gpu_free(part);
}

} // namespace

#define DW_CUDA(fmt, T, NHWC)                                                                                        \
    extern "C" void dt_dw_fwd_##fmt##_cuda(const dt_conv_problem *p, const void *x, const void *w, const float *bias, \
                                           void *y) {                                                                \
        fwd<T, NHWC>(p, x, w, bias, y);                                                                              \
    }                                                                                                                \
    extern "C" void dt_dw_dgrad_##fmt##_cuda(const dt_conv_problem *p, const void *dy, const void *w, float beta,     \
                                             void *dx) {                                                             \
        dgrad<T, NHWC>(p, dy, w, beta, dx);                                                                          \
    }                                                                                                                \
    extern "C" void dt_dw_wgrad_##fmt##_cuda(const dt_conv_problem *p, const void *x, const void *dy, float beta,     \
                                             float *dw) {                                                            \
        wgrad<T, NHWC>(p, x, dy, beta, dw);                                                                          \
    }

DW_CUDA(f32_nchw, float, false)
DW_CUDA(f32_nhwc, float, true)
DW_CUDA(bf16_nhwc, __nv_bfloat16, true)
