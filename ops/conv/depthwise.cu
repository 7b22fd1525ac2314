/* CUDA kernels of depthwise.h: the direct stencil on tiles staged in shared memory.
 *
 * A block owns one tile (depthwise.h's dt_dw_tile) of one image and CB channels (blockIdx.y =
 * channel slice): on each axis, T positions of each of R consecutive residue classes -
 * positions q apart within a class - so that the inputs a class's windows read are themselves
 * a regular grid d apart, staged once as fp32, (T-1)*m + k of them a class (the classes
 * interleaved: staged index l*R + rho); a dilated window is then a unit-step walk of its
 * class, and the bytes a block loads do not grow with the dilation (a contiguous tile of T
 * outputs would stage (T-1)*s + (k-1)*d + 1 inputs, mostly halo once d*k passes T; R classes
 * fill a block where a class is short: 1-D at dilation 128 holds 8 of 1024 outputs a class). Channels are the
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
#include "ops/conv/depthwise_rb.cuh"

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

/* The block's tile: image n, class groups (gh, gw) - classes [g*R, g*R + R) - and tile
 * (th, tw) of each class */
struct tile_pos {
    int64_t n, gh, gw, th, tw;
};
__device__ __forceinline__ tile_pos decode(int64_t b, const dt_dw_tile &t) {
    tile_pos q;
    q.tw = b % t.ntw, b /= t.ntw;
    q.gw = b % t.ngw, b /= t.ngw;
    q.th = b % t.nth, b /= t.nth;
    q.gh = b % t.ngh, q.n = b / t.ngh;
    return q;
}

/* One axis of a tile: local index L = l * R + rho (position l of class g*R + rho, classes
 * interleaved so that consecutive L are consecutive classes). */
struct axis {
    int64_t cls; /* the class, or >= q: none (the last group's surplus) */
    int l;
};
__device__ __forceinline__ axis split(int L, int R, int64_t g) {
    axis a;
    a.cls = g * R + L % R, a.l = L / R;
    return a;
}

/* Staged index of x element (LI, LJ, cl) of a tile SH x SW x CB: NHWC [LI][LJ][cl], NCHW
 * [cl][LI][LJ] (a warp reads consecutive channels or consecutive columns) */
template <bool NHWC>
__device__ __forceinline__ int64_t xs_at(const dt_dw_tile &t, int LI, int LJ, int cl) {
    const int SH = t.IH * t.RH, SW = t.IW * t.RW;
    return NHWC ? ((int64_t)LI * SW + LJ) * t.CB + cl : ((int64_t)cl * SH + LI) * SW + LJ;
}

/* Stages the fwd footprint of tile q: staged row LI = li*RH + rho of class r = gh*RH + rho is
 * input row r*sh - ph + dh*(mh*th*TH + li) (columns likewise), fp32, zero outside the image,
 * past C and for classes past q. */
template <typename T, bool NHWC, int V>
__device__ void stage_x(const dt_conv_problem &p, const dt_dw_tile &t, const tile_pos &q, int c0,
                        const T *__restrict__ x, float *xs) {
    const dt_conv_geom g = p.g;
    const int SH = t.IH * t.RH, SW = t.IW * t.RW, nv = t.CB / V, n_el = SH * SW * nv;
    for (int e = threadIdx.x; e < n_el; e += blockDim.x) {
        int LI, LJ, cl;
        if (NHWC) cl = (e % nv) * V, LJ = (e / nv) % SW, LI = e / nv / SW;
        else LJ = e % SW, LI = (e / SW) % SH, cl = e / SW / SH;
        const axis ay = split(LI, t.RH, q.gh), ax = split(LJ, t.RW, q.gw);
        const int64_t iy = ay.cls * g.sh - g.ph + (int64_t)g.dh * (t.mh * q.th * t.TH + ay.l);
        const int64_t ix = ax.cls * g.sw - g.pw + (int64_t)g.dw * (t.mw * q.tw * t.TW + ax.l), c = c0 + cl;
        float v[V];
        if (ay.cls < t.qh && ax.cls < t.qw && iy >= 0 && iy < p.H && ix >= 0 && ix < p.W && c < p.C) {
            if (NHWC) ldv<T, V>(x + ((q.n * p.H + iy) * p.W + ix) * p.C + c, v);
            else ldv<T, V>(x + ((q.n * p.C + c) * p.H + iy) * p.W + ix, v);
        } else {
#pragma unroll
            for (int i = 0; i < V; i++) v[i] = 0.0f;
        }
#pragma unroll
        for (int i = 0; i < V; i++) xs[xs_at<NHWC>(t, LI, LJ, cl + i)] = v[i];
    }
}

/* Stages n_rows x n_cols positions of the outputs' channels [c0*M, (c0+CB)*M) into
 * s[LI][LJ][k] (k = cl*M + m), fp32: position (LI, LJ) is output (oy, ox) = at(LI, LJ), or
 * zero where at() says none (oy < 0). NHWC loads V consecutive k (Cout % V == 0 then). */
template <typename T, bool NHWC, int V, typename At>
__device__ void stage_out(const dt_conv_problem &p, int CB, int64_t n, int c0, int n_rows, int n_cols, At at,
                          const T *__restrict__ dy, float *s) {
    const int64_t M = p.Cout / p.C, K = CB * M, nv = K / V, n_el = (int64_t)n_rows * n_cols * nv;
    for (int64_t e = threadIdx.x; e < n_el; e += blockDim.x) {
        int LI, LJ;
        int64_t k;
        if (NHWC) k = (e % nv) * V, LJ = (int)((e / nv) % n_cols), LI = (int)(e / nv / n_cols);
        else LJ = (int)(e % n_cols), LI = (int)((e / n_cols) % n_rows), k = e / n_cols / n_rows;
        int64_t oy, ox;
        at(LI, LJ, &oy, &ox);
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
        for (int i = 0; i < V; i++) s[((int64_t)LI * n_cols + LJ) * K + k + i] = v[i];
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

/* The item (I, J, cl) a thread computes of a tile of PH x PW positions and CB channels: NHWC
 * channels fastest, NCHW columns fastest (coalesced either way) */
template <bool NHWC, int V>
__device__ __forceinline__ void item_of(int e, int PH, int PW, int nv, int *I, int *J, int *cl) {
    if (NHWC) *cl = (e % nv) * V, *J = (e / nv) % PW, *I = e / nv / PW;
    else *J = e % PW, *I = (e / PW) % PH, *cl = e / PW / PH;
}

template <typename T, bool NHWC, int V>
__global__ void k_dw_fwd(dt_conv_problem p, dt_dw_tile t, const T *__restrict__ x, const T *__restrict__ w,
                         const float *__restrict__ bias, T *__restrict__ y) {
    extern __shared__ float sm[];
    float *xs = sm, *ws = sm + (int64_t)t.IH * t.RH * t.IW * t.RW * t.CB;
    const tile_pos q = decode(blockIdx.x, t);
    const int c0 = blockIdx.y * t.CB;
    const dt_conv_geom g = p.g;
    const int64_t M = p.Cout / p.C;
    stage_x<T, NHWC, V>(p, t, q, c0, x, xs);
    stage_w(p, t.CB, c0, w, ws);
    __syncthreads();
    const int PH = t.TH * t.RH, PW = t.TW * t.RW, nv = t.CB / V, n_items = PH * PW * nv;
    for (int e = threadIdx.x; e < n_items; e += blockDim.x) {
        int I, J, cl;
        item_of<NHWC, V>(e, PH, PW, nv, &I, &J, &cl);
        const axis ay = split(I, t.RH, q.gh), ax = split(J, t.RW, q.gw);
        const int64_t oy = ay.cls + (int64_t)t.qh * (q.th * t.TH + ay.l), ox = ax.cls + (int64_t)t.qw * (q.tw * t.TW + ax.l);
        const int64_t c = c0 + cl;
        if (ay.cls >= t.qh || ax.cls >= t.qw || oy >= p.Ho || ox >= p.Wo || c >= p.C) continue;
        const int rho_y = I % t.RH, rho_x = J % t.RW;
        for (int64_t m = 0; m < M; m++) {
            float acc[V];
#pragma unroll
            for (int v = 0; v < V; v++) acc[v] = 0.0f;
            for (int ky = 0; ky < g.kh; ky++) {
                const int LI = (t.mh * ay.l + ky) * t.RH + rho_y;
                for (int kx = 0; kx < g.kw; kx++) {
                    const int LJ = (t.mw * ax.l + kx) * t.RW + rho_x;
                    const float *wr = ws + ((int64_t)(ky * g.kw + kx) * M + m) * t.CB + cl;
#pragma unroll
                    for (int v = 0; v < V; v++) acc[v] = __fmaf_rn(xs[xs_at<NHWC>(t, LI, LJ, cl + v)], wr[v], acc[v]);
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

/* dx tile: input rows iy = r + dh*(th*TH + l) of classes r (mod dh), columns likewise; staged
 * dy row LI = l*RH + rho is the virtual stride-1 position u = r + ph + dh*(th*TH + l - (kh-1)),
 * r = gh*RH + rho: the output u / sh when sh divides u and it lies in [0, Ho) */
template <typename T, bool NHWC, int V>
__global__ void k_dw_dgrad(dt_conv_problem p, dt_dw_tile t, const T *__restrict__ dy, const T *__restrict__ w,
                           float beta, T *__restrict__ dx) {
    extern __shared__ float sm[];
    const int64_t M = p.Cout / p.C, K = t.CB * M;
    const int SH = t.IH * t.RH, SW = t.IW * t.RW;
    float *ds = sm, *ws = sm + (int64_t)SH * SW * K;
    const tile_pos q = decode(blockIdx.x, t);
    const int c0 = blockIdx.y * t.CB;
    const dt_conv_geom g = p.g;
    const int64_t Ho = p.Ho, Wo = p.Wo;
    const dt_dw_tile tt = t;
    auto at = [=](int LI, int LJ, int64_t *oy, int64_t *ox) {
        const axis ay = split(LI, tt.RH, q.gh), ax = split(LJ, tt.RW, q.gw);
        const int64_t uy = ay.cls + g.ph + (int64_t)g.dh * (q.th * tt.TH + ay.l - (g.kh - 1));
        const int64_t ux = ax.cls + g.pw + (int64_t)g.dw * (q.tw * tt.TW + ax.l - (g.kw - 1));
        const bool ok = ay.cls < tt.qh && ax.cls < tt.qw && uy >= 0 && ux >= 0 && uy % g.sh == 0 && ux % g.sw == 0 &&
                        uy / g.sh < Ho && ux / g.sw < Wo;
        *oy = ok ? uy / g.sh : -1, *ox = ok ? ux / g.sw : -1;
    };
    stage_out<T, NHWC, V>(p, t.CB, q.n, c0, SH, SW, at, dy, ds);
    stage_w(p, t.CB, c0, w, ws);
    __syncthreads();
    const int PH = t.TH * t.RH, PW = t.TW * t.RW, nv = t.CB / V, n_items = PH * PW * nv;
    for (int e = threadIdx.x; e < n_items; e += blockDim.x) {
        int I, J, cl;
        item_of<NHWC, V>(e, PH, PW, nv, &I, &J, &cl);
        const axis ay = split(I, t.RH, q.gh), ax = split(J, t.RW, q.gw);
        const int64_t iy = ay.cls + (int64_t)g.dh * (q.th * t.TH + ay.l), ix = ax.cls + (int64_t)g.dw * (q.tw * t.TW + ax.l);
        const int64_t c = c0 + cl;
        if (ay.cls >= t.qh || ax.cls >= t.qw || iy >= p.H || ix >= p.W || c >= p.C) continue;
        const int rho_y = I % t.RH, rho_x = J % t.RW;
        float acc[V];
#pragma unroll
        for (int v = 0; v < V; v++) acc[v] = 0.0f;
        for (int64_t m = 0; m < M; m++)
            for (int ky = 0; ky < g.kh; ky++) {
                const int LI = (ay.l - ky + g.kh - 1) * t.RH + rho_y;
                for (int kx = 0; kx < g.kw; kx++) {
                    const int LJ = (ax.l - kx + g.kw - 1) * t.RW + rho_x;
                    const float *wr = ws + ((int64_t)(ky * g.kw + kx) * M + m) * t.CB + cl;
                    const float *dr = ds + ((int64_t)LI * SW + LJ) * K + m;
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
 * sum over its PH x PW positions (row-major) to its shared-memory sum; at the end the block's
 * sums go to part[b][co][tap] */
template <typename T, bool NHWC, int V>
__global__ void k_dw_wgrad(dt_conv_problem p, dt_dw_tile t, int64_t n_tiles, const T *__restrict__ x,
                           const T *__restrict__ dy, float *__restrict__ part) {
    extern __shared__ float sm[];
    const int64_t M = p.Cout / p.C, K = t.CB * M, taps = (int64_t)p.g.kh * p.g.kw;
    const int PH = t.TH * t.RH, PW = t.TW * t.RW;
    float *xs = sm, *ds = xs + (int64_t)t.IH * t.RH * t.IW * t.RW * t.CB, *acc = ds + (int64_t)PH * PW * K;
    const int c0 = blockIdx.y * t.CB;
    const int64_t n_items = taps * K;
    for (int64_t e = threadIdx.x; e < n_items; e += blockDim.x) acc[e] = 0.0f;
    for (int64_t b = blockIdx.x; b < n_tiles; b += gridDim.x) {
        const tile_pos q = decode(b, t);
        __syncthreads(); /* the previous tile's reads are done */
        stage_x<T, NHWC, V>(p, t, q, c0, x, xs);
        const int64_t Ho = p.Ho, Wo = p.Wo;
        const dt_dw_tile tt = t;
        auto at = [=](int I, int J, int64_t *oy, int64_t *ox) {
            const axis ay = split(I, tt.RH, q.gh), ax = split(J, tt.RW, q.gw);
            const int64_t y = ay.cls + (int64_t)tt.qh * (q.th * tt.TH + ay.l), xx = ax.cls + (int64_t)tt.qw * (q.tw * tt.TW + ax.l);
            const bool ok = ay.cls < tt.qh && ax.cls < tt.qw && y < Ho && xx < Wo;
            *oy = ok ? y : -1, *ox = ok ? xx : -1;
        };
        stage_out<T, NHWC, V>(p, t.CB, q.n, c0, PH, PW, at, dy, ds);
        __syncthreads();
        for (int64_t e = threadIdx.x; e < n_items; e += blockDim.x) {
            const int cl = (int)(e % t.CB);
            const int64_t m = (e / t.CB) % M, tap = e / t.CB / M;
            const int ky = (int)(tap / p.g.kw), kx = (int)(tap % p.g.kw);
            float s = 0.0f;
            for (int I = 0; I < PH; I++) {
                const int LI = (t.mh * (I / t.RH) + ky) * t.RH + I % t.RH;
                for (int J = 0; J < PW; J++) {
                    const int LJ = (t.mw * (J / t.RW) + kx) * t.RW + J % t.RW;
                    s = __fmaf_rn(ds[((int64_t)I * PW + J) * K + (int64_t)cl * M + m], xs[xs_at<NHWC>(t, LI, LJ, cl)], s);
                }
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

void require_tile(const dt_conv_problem *p, dt_conv_pass pass, dt_dw_tile *t) {
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

dim3 grid_of(const dt_conv_problem *p, const dt_dw_tile &t) {
    const int64_t nx = p->N * t.ngh * t.nth * t.ngw * t.ntw, ny = (p->C + t.CB - 1) / t.CB;
    if (nx >= ((int64_t)1 << 31) || ny > 65535) dt_fatal("depthwise conv: a grid of %lld x %lld blocks is too large", (long long)nx, (long long)ny);
    return dim3((unsigned)nx, (unsigned)ny);
}

/* threads a block: one an item (position, channel vector) up to 256, whole warps (a tile the
 * shared memory cut down can hold few positions) */
int threads_for(const dt_dw_tile &t, int V) {
    const int items = t.TH * t.RH * t.TW * t.RW * (t.CB / V), warps = (items + 31) / 32;
    return warps >= 8 ? 256 : warps * 32;
}

/* the register-blocked kernels (depthwise_rb.cuh) for an NHWC pass when they are in use for T
 * (DT_DW_KERNEL_RB, or DT_DW_KERNEL_AUTO and bf16: depthwise.h says why) and they take it: channel
 * pairs, so both tensors aligned to two elements */
template <typename T>
bool use_rb(const dt_conv_problem *p, int pass, const void *a, const void *b) {
    const uintptr_t al = 2 * sizeof(T);
    const int k = dt_dw_kernel();
    const bool want = k == DT_DW_KERNEL_RB || (k == DT_DW_KERNEL_AUTO && sizeof(T) == 2);
    return want && dw_rb::supported(p, pass) && (uintptr_t)a % al == 0 && (uintptr_t)b % al == 0;
}

template <typename T, bool NHWC>
void fwd(const dt_conv_problem *p, const void *x, const void *w, const float *bias, void *y) {
    if constexpr (NHWC) {
        if (use_rb<T>(p, dw_rb::FWD, x, y)) return dw_rb::fwd<T>(p, (const T *)x, (const T *)w, bias, (T *)y);
    }
    dt_dw_tile t;
    require_tile(p, DT_CONV_FPROP, &t);
    const dim3 grid = grid_of(p, t);
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
    if constexpr (NHWC) {
        if (use_rb<T>(p, dw_rb::DGRAD, dy, dx)) return dw_rb::dgrad<T>(p, (const T *)dy, (const T *)w, beta, (T *)dx);
    }
    dt_dw_tile t;
    require_tile(p, DT_CONV_DGRAD, &t);
    const dim3 grid = grid_of(p, t);
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
    if constexpr (NHWC) {
        if (use_rb<T>(p, dw_rb::WGRAD, x, dy)) {
            float *part = (float *)dt_gpu_malloc(sizeof(float) * dw_rb::wgrad_scratch(p));
            dw_rb::wgrad<T>(p, (const T *)x, (const T *)dy, beta, dw, part);
            dt_gpu_free(part);
            return;
        }
    }
    dt_dw_tile t;
    require_tile(p, DT_CONV_WGRAD, &t);
    const dim3 all = grid_of(p, t);
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
