/* depthwise_rb.cuh: register-blocked depthwise kernels (issue 38 items 2 and 5), the lab's
 * variant `rb` of bench/lab/depthwise_lab.cu beside the shipping tile kernels of
 * ops/conv/depthwise.cu, which runs these instead for bf16 by default and for f32 where
 * DT_DW_KERNEL=1 (or dt_dw_set_kernel(DT_DW_KERNEL_RB)) asks, wherever plan_of() takes the
 * problem (the H200's lab numbers: depthwise.h, docs/PERF.md section 25).
 *
 * Problem: ops/conv/depthwise.h's, restricted to channel multiplier M = 1 (Cout = C), NHWC,
 * C even, fp32 or bf16 activations and weights (fp32 accumulate), fp32 dw:
 *   x, dx [N, H, W, C]   y, dy [N, Ho, Wo, C]   w [C][kh][kw]   bias [C] fp32 or NULL
 *
 * Why the shipping kernels are slow (docs/logs/2026-12-04/c2_dw_*.txt: 2-26 % of the floor):
 * each thread computes one output, each FMA reads two shared-memory operands (the staged x and
 * the staged w), and nothing stays in registers between taps. Here:
 *
 *  - A thread owns a channel PAIR (bf16x2 / float2 loads: 4 or 8 bytes; a warp's 32 pairs read
 *    64 consecutive channels of one position, one or two 128-byte lines) and a RUN of R = 8
 *    outputs of one residue class of one row: ox_j = rho + q*(j0 + j), j = 0..R-1, with q = d /
 *    gcd(d, s) classes (fwd, wgrad) or q = d (dgrad, on the virtual stride-1 grid). The outputs
 *    of a class read inputs d apart, m = s / gcd(d, s) input steps an output step, so output j,
 *    tap t reads input "class unit" u = m*j + t: a sliding window of whole elements whatever
 *    the dilation - the bytes a thread loads do not grow with d.
 *  - Taps go in chunks of KC (compile time; k = 64 -> 4 chunks of 16): the chunk's window of
 *    (R-1)*m + KC inputs is loaded once into registers (__ldg, reuse between threads through
 *    L1: the RB runs of a block are consecutive runs of the list - (class, run) pairs of a row,
 *    then the next row - so their windows overlap), then R*KC FMAs a channel each read one register x and one weight. A weight is
 *    one shared-memory read (float2, staged once a block, [tap][channel] so a warp reads
 *    consecutive channels) for R FMAs a channel; an input one global/L1 load for up to KC.
 *    With R = 8, KC = 16: 23 loads + 16 shared reads for 256 FMAs.
 *  - fwd sums each output's taps in row-major order with fmaf, bias last, one rounding on the
 *    store: the CPU twin's order (a padded row is skipped instead of adding zero products: the
 *    same value but for the sign of a zero sum).
 *  - dgrad is the transposed stencil: dx at ix_j = rho + d*(j0 + j) sums w[t] * dy at the
 *    virtual stride-1 position u = ix + p - t*d (dy[u / s] where s divides u, zero elsewhere),
 *    t ascending (the twin's order); the window of the chunk is the R + KC - 1 positions
 *    u = rho + p + d*(j0 - kc - (KC-1) + i), i = 0..R+KC-2, tap t = kc + tl read at i = j - tl +
 *    KC - 1. Strided dgrad multiplies zeros where s does not divide u (the lab's strided
 *    shapes are MobileNetV2's 3x3 s2: memory-bound, the FMAs are not the floor).
 *  - wgrad: block (g, channel slice, tap chunk) owns a fixed contiguous range of the (n, row,
 *    class, run) list; lane rl of its RB walks runs rl, rl + RB, ... of it, keeping KC fp32 sums
 *    a channel in registers (dy_j streamed, the x window as in fwd: acc[t] += dy_j * x[m*j + t]).
 *    At the end the block adds its lanes' sums in lane order (shared memory), writes one partial
 *    per weight, part[g][c][tap], and k_rb_wgrad_reduce adds the G partials in g order in
 *    double: no atomics, bitwise the same run to run (G is a function of the shape only). */
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

#include "core/dt_common.h"
#include "core/dt_cuda.h"
#include "core/dt_dtype.cuh"
#include "ops/conv/conv_geom.h"

namespace dw_rb {

/* R: outputs a thread (one class, consecutive in it), a template parameter of the kernels: 8
 * (the default: 23 loads for 256 FMAs at k = 64) or 4 (half the registers, twice the threads -
 * for the memory-bound shapes; the lab's variant rb4) */
/* at most, a block; two blocks an SM (<= 128 registers; the one spill: 28 bytes in wgrad at KC =
 * 16 and stride step 2, a shape the lab does not have), three at R = 4 with KC < 16 (<= 80) */
constexpr int THREADS = 256;

/* two consecutive channels at p (4- or 8-byte aligned: C even), widened to fp32 */
__device__ __forceinline__ float2 ld2(const float *p) { return __ldg(reinterpret_cast<const float2 *>(p)); }
__device__ __forceinline__ float2 ld2(const __nv_bfloat16 *p) {
    const unsigned u = __ldg(reinterpret_cast<const unsigned *>(p));
    return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u)); /* bf16 -> fp32 is exact */
}
/* two channels to p, each rounded once (round to nearest even, as dt_st) */
__device__ __forceinline__ void st2(float *p, float2 v) { *reinterpret_cast<float2 *>(p) = v; }
__device__ __forceinline__ void st2(__nv_bfloat16 *p, float2 v) {
    *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(v.x, v.y);
}
__device__ __forceinline__ float2 old2(const float *p) { return *reinterpret_cast<const float2 *>(p); }
__device__ __forceinline__ float2 old2(const __nv_bfloat16 *p) {
    const __nv_bfloat162 b = *reinterpret_cast<const __nv_bfloat162 *>(p);
    return make_float2(__low2float(b), __high2float(b));
}
__device__ __forceinline__ void fma2(float2 &acc, float2 a, float2 b) {
    acc.x = __fmaf_rn(a.x, b.x, acc.x);
    acc.y = __fmaf_rn(a.y, b.y, acc.y);
}

/* xr[u] = the pair at column c0 + step*u of row `row` (C channels a column), zero outside
 * [0, W); one bounds test for the window when it lies inside (1-D unpadded: always) */
template <typename T, int WIN>
__device__ __forceinline__ void load_window(const T *__restrict__ row, int64_t C, int64_t W, int64_t c0, int64_t step,
                                            float2 *xr) {
    if (c0 >= 0 && c0 + step * (WIN - 1) < W) {
        const T *q = row + c0 * C;
        const int64_t st = step * C;
#pragma unroll
        for (int u = 0; u < WIN; u++) xr[u] = ld2(q + u * st);
    } else {
#pragma unroll
        for (int u = 0; u < WIN; u++) {
            const int64_t ix = c0 + step * u;
            xr[u] = ix >= 0 && ix < W ? ld2(row + ix * C) : make_float2(0.0f, 0.0f);
        }
    }
}

/* The launch plan of one pass (host-made, a pure function of the problem). Along W a row's
 * positions (outputs for fwd / wgrad, inputs for dgrad) split into q classes of ncls (at most)
 * each, a class into runs of R; a row's "class runs" pr = rho * runs + r. The list of all runs,
 * f = (n * rows + row) * PR + pr, is cut into blocks of RB consecutive runs - across rows, so
 * that a narrow row (MobileNetV2's 7 x 7: one run) does not leave a block's lanes idle. */
struct plan {
    int q, m;        /* classes, input steps an output step (dgrad: d, 1) */
    int R;           /* outputs a run */
    int64_t runs;    /* runs a class: ceil(ceil(cols / q) / R) */
    int64_t PR;      /* runs a row: q * runs */
    int64_t n_runs;  /* runs in all: N * rows * PR */
    int64_t blocks;  /* fwd / dgrad blocks a channel slice: ceil(n_runs / RB) */
    int PB, RB;      /* channel pairs and runs a block, PB * RB <= THREADS */
    int KC;          /* taps a chunk (divides kw) */
    int64_t rows;    /* Ho (fwd, wgrad) or H (dgrad) */
};

/* block-local channel pair / run lane of this thread, and the block's first channel */
struct lane {
    int pl, rl;
    int64_t c0, c; /* block's first channel, this thread's first channel */
};
__device__ __forceinline__ lane lane_of(const plan &a) {
    lane l;
    l.pl = threadIdx.x % a.PB, l.rl = threadIdx.x / a.PB;
    l.c0 = (int64_t)blockIdx.y * 2 * a.PB, l.c = l.c0 + 2 * l.pl;
    return l;
}

/* The staged weights' row stride: 2*PB channels + 2 floats (float2 reads stay 8-byte aligned;
 * the transposing stores below hit two banks a row instead of one) */
__device__ __forceinline__ int ws_stride(const plan &a) { return 2 * a.PB + 2; }

/* ws[tap][cl] = w[c0 + cl][tap] as fp32, cl < 2*PB, zero past C; read from w with the taps
 * fastest (coalesced: a channel's taps are contiguous), stored transposed so that a warp's
 * reads of one tap are consecutive channels */
template <typename T>
__device__ void stage_w(const dt_conv_problem &p, const plan &a, int64_t c0, const T *__restrict__ w, float *ws) {
    const int CB = 2 * a.PB, taps = p.g.kh * p.g.kw, S = ws_stride(a);
    for (int e = threadIdx.x; e < taps * CB; e += blockDim.x) {
        const int tap = e % taps, cl = e / taps;
        const int64_t c = c0 + cl;
        ws[tap * S + cl] = c < p.C ? dt_ld(w + c * taps + tap) : 0.0f;
    }
}

/* Run f of the list: (n, row, rho, first position j0 in the class); false past the list */
__device__ __forceinline__ bool run_of(const plan &a, int64_t f, int64_t *n, int64_t *row, int64_t *rho, int64_t *j0) {
    if (a.n_runs < ((int64_t)1 << 31)) { /* 32-bit divisions (the wgrad asks once a run) */
        const unsigned u = (unsigned)f, PR = (unsigned)a.PR, rows = (unsigned)a.rows, runs = (unsigned)a.runs;
        const unsigned pr = u % PR, nr = u / PR;
        *row = nr % rows, *n = nr / rows;
        *rho = pr / runs, *j0 = (int64_t)(pr % runs) * a.R;
    } else {
        const int64_t pr = f % a.PR, nr = f / a.PR;
        *row = nr % a.rows, *n = nr / a.rows;
        *rho = pr / a.runs, *j0 = (pr % a.runs) * a.R;
    }
    return f < a.n_runs;
}

/* ---- fwd: y[n, oy, ox, c] = sum over (ky, kx) of x[n, oy*sh - ph + ky*dh, ox*sw - pw + kx*dw, c] * w[c][ky][kx] (+ bias) */
template <typename T, int KC, int MS, int R>
__global__ void __launch_bounds__(THREADS, R == 4 && KC < 16 ? 3 : 2) k_rb_fwd(dt_conv_problem p, plan a, const T *__restrict__ x,
                                                    const T *__restrict__ w, const float *__restrict__ bias,
                                                    T *__restrict__ y) {
    extern __shared__ float ws[]; /* [kh*kw][ws_stride] */
    const lane l = lane_of(a);
    stage_w(p, a, l.c0, w, ws);
    __syncthreads();
    int64_t n, oy, rho, j0;
    if (!run_of(a, (int64_t)blockIdx.x * a.RB + l.rl, &n, &oy, &rho, &j0) || l.c >= p.C) return;
    const dt_conv_geom g = p.g;
    const int S = ws_stride(a);
    constexpr int WIN = (R - 1) * MS + KC;
    float2 acc[R];
#pragma unroll
    for (int j = 0; j < R; j++) acc[j] = make_float2(0.0f, 0.0f);
    for (int ky = 0; ky < g.kh; ky++) {
        const int64_t iy = oy * g.sh - g.ph + (int64_t)ky * g.dh;
        if (iy < 0 || iy >= p.H) continue;
        const T *xrow = x + (n * p.H + iy) * p.W * p.C + l.c;
        for (int kc = 0; kc < g.kw; kc += KC) {
            /* the chunk's window: u = m*j + t, input column rho*sw - pw + dw*(m*j0 + kc + u) */
            const int64_t ix0 = rho * g.sw - g.pw + (int64_t)g.dw * (MS * j0 + kc);
            float2 xr[WIN];
            load_window<T, WIN>(xrow, p.C, p.W, ix0, g.dw, xr);
            const float *wr = ws + (ky * g.kw + kc) * S + 2 * l.pl;
#pragma unroll
            for (int t = 0; t < KC; t++) {
                const float2 wv = *reinterpret_cast<const float2 *>(wr + t * S);
#pragma unroll
                for (int j = 0; j < R; j++) fma2(acc[j], xr[j * MS + t], wv);
            }
        }
    }
    const float2 b = bias ? make_float2(bias[l.c], bias[l.c + 1]) : make_float2(0.0f, 0.0f);
#pragma unroll
    for (int j = 0; j < R; j++) {
        const int64_t ox = rho + (int64_t)a.q * (j0 + j);
        if (ox >= p.Wo) break;
        float2 v = acc[j];
        if (bias) v.x = __fadd_rn(v.x, b.x), v.y = __fadd_rn(v.y, b.y);
        st2(y + ((n * p.Ho + oy) * p.Wo + ox) * p.C + l.c, v);
    }
}

/* ---- dgrad: dx[n, iy, ix, c] = beta dx + sum over (ky, kx) of w[c][ky][kx] * dy at the virtual
 * stride-1 position (iy + ph - ky*dh, ix + pw - kx*dw) (dy[u / s] where s divides u) */
template <typename T, int KC, int R>
__global__ void __launch_bounds__(THREADS, R == 4 && KC < 16 ? 3 : 2) k_rb_dgrad(dt_conv_problem p, plan a, const T *__restrict__ dy,
                                                      const T *__restrict__ w, float beta, T *__restrict__ dx) {
    extern __shared__ float ws[]; /* [kh*kw][ws_stride] */
    const lane l = lane_of(a);
    stage_w(p, a, l.c0, w, ws);
    __syncthreads();
    int64_t n, iy, rho, j0;
    if (!run_of(a, (int64_t)blockIdx.x * a.RB + l.rl, &n, &iy, &rho, &j0) || l.c >= p.C) return;
    const dt_conv_geom g = p.g;
    const int S = ws_stride(a);
    constexpr int WIN = R + KC - 1;
    float2 acc[R];
#pragma unroll
    for (int j = 0; j < R; j++) acc[j] = make_float2(0.0f, 0.0f);
    for (int ky = 0; ky < g.kh; ky++) {
        const int64_t uy = iy + g.ph - (int64_t)ky * g.dh;
        if (uy < 0 || uy % g.sh != 0 || uy / g.sh >= p.Ho) continue;
        const T *drow = dy + (n * p.Ho + uy / g.sh) * p.Wo * p.C + l.c;
        for (int kc = 0; kc < g.kw; kc += KC) {
            const int64_t u0 = rho + g.pw + (int64_t)g.dw * (j0 - kc - (KC - 1));
            float2 dr[WIN];
            if (g.sw == 1) {
                load_window<T, WIN>(drow, p.C, p.Wo, u0, g.dw, dr);
            } else {
#pragma unroll
                for (int i = 0; i < WIN; i++) {
                    const int64_t ux = u0 + (int64_t)g.dw * i;
                    dr[i] = ux >= 0 && ux % g.sw == 0 && ux / g.sw < p.Wo ? ld2(drow + ux / g.sw * p.C) : make_float2(0.0f, 0.0f);
                }
            }
            const float *wr = ws + (ky * g.kw + kc) * S + 2 * l.pl;
#pragma unroll
            for (int t = 0; t < KC; t++) {
                const float2 wv = *reinterpret_cast<const float2 *>(wr + t * S);
#pragma unroll
                for (int j = 0; j < R; j++) fma2(acc[j], dr[j - t + KC - 1], wv);
            }
        }
    }
#pragma unroll
    for (int j = 0; j < R; j++) {
        const int64_t ix = rho + (int64_t)g.dw * (j0 + j);
        if (ix >= p.W) break;
        T *o = dx + ((n * p.H + iy) * p.W + ix) * p.C + l.c;
        float2 v = acc[j];
        if (beta != 0.0f) {
            const float2 b = old2(o);
            v.x = __fmaf_rn(beta, b.x, v.x), v.y = __fmaf_rn(beta, b.y, v.y);
        }
        st2(o, v);
    }
}

/* ---- wgrad: block (g, slice, chunk) sums dy * x over its runs for taps (ky, kc..kc+KC) of its
 * channels; part[g][c][tap] (fp32) = the block's sum, its lanes added in lane order.
 * blockIdx.z = ky * (kw / KC) + kc / KC. `per`: runs a block (the last takes the rest). */
template <typename T, int KC, int MS, int R>
__global__ void __launch_bounds__(THREADS, R == 4 && KC < 16 ? 3 : 2) k_rb_wgrad(dt_conv_problem p, plan a, int64_t per, const T *__restrict__ x,
                                                      const T *__restrict__ dy, float *__restrict__ part) {
    extern __shared__ float red[]; /* [RB][KC][2*PB] */
    const lane l = lane_of(a);
    const dt_conv_geom g = p.g;
    const int nkc = g.kw / KC, ky = blockIdx.z / nkc, kc = blockIdx.z % nkc * KC;
    const int64_t b0 = blockIdx.x * per, b1 = b0 + per < a.n_runs ? b0 + per : a.n_runs;
    constexpr int WIN = (R - 1) * MS + KC;
    float2 acc[KC];
#pragma unroll
    for (int t = 0; t < KC; t++) acc[t] = make_float2(0.0f, 0.0f);
    if (l.c < p.C)
        for (int64_t e = b0 + l.rl; e < b1; e += a.RB) {
            int64_t n, oy, rho, j0;
            run_of(a, e, &n, &oy, &rho, &j0);
            const int64_t iy = oy * g.sh - g.ph + (int64_t)ky * g.dh;
            if (iy < 0 || iy >= p.H) continue;
            const T *xrow = x + (n * p.H + iy) * p.W * p.C + l.c;
            const T *drow = dy + (n * p.Ho + oy) * p.Wo * p.C + l.c;
            const int64_t ix0 = rho * g.sw - g.pw + (int64_t)g.dw * (MS * j0 + kc);
            float2 xr[WIN];
            load_window<T, WIN>(xrow, p.C, p.W, ix0, g.dw, xr);
#pragma unroll
            for (int j = 0; j < R; j++) {
                const int64_t ox = rho + (int64_t)a.q * (j0 + j);
                if (ox >= p.Wo) break;
                const float2 d = ld2(drow + ox * p.C);
#pragma unroll
                for (int t = 0; t < KC; t++) fma2(acc[t], d, xr[j * MS + t]);
            }
        }
    const int CB = 2 * a.PB;
#pragma unroll
    for (int t = 0; t < KC; t++) {
        red[(l.rl * KC + t) * CB + 2 * l.pl] = acc[t].x;
        red[(l.rl * KC + t) * CB + 2 * l.pl + 1] = acc[t].y;
    }
    __syncthreads();
    const int taps = g.kh * g.kw;
    for (int e = threadIdx.x; e < KC * CB; e += blockDim.x) {
        const int cl = e % CB, t = e / CB;
        const int64_t c = l.c0 + cl;
        float s = 0.0f;
        for (int r = 0; r < a.RB; r++) s = __fadd_rn(s, red[(r * KC + t) * CB + cl]);
        if (c < p.C) part[((int64_t)blockIdx.x * p.C + c) * taps + ky * g.kw + kc + t] = s;
    }
}

/* dw[i] = beta dw[i] + the G partials of weight i added in g order (double) */
static __global__ void k_rb_wgrad_reduce(const float *__restrict__ part, int64_t G, int64_t n, float beta,
                                  float *__restrict__ dw) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        double s = 0.0;
        for (int64_t b = 0; b < G; b++) s += part[b * n + i];
        dw[i] = beta == 0.0f ? (float)s : __fmaf_rn(beta, dw[i], (float)s);
    }
}

/* ---- host side: plans and launches (on dt_stream()) */

enum { FWD = 0, DGRAD = 1, WGRAD = 2 };

static inline int gcd_i(int a, int b) {
    while (b) {
        const int t = a % b;
        a = b, b = t;
    }
    return a;
}
static inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* KC for a row of kw taps: the instantiated chunk sizes that divide it */
static inline int kc_for(int kw) {
    if (kw % 16 == 0) return 16;
    if (kw == 7 || kw == 4 || kw == 3) return kw;
    return 1;
}

/* the plan of pass for p; false when this variant does not take p (M > 1, C odd, a stride
 * step m past 2, a grid past CUDA's limits) */
static inline bool plan_of(const dt_conv_problem *p, int pass, plan *a, int R = 8) {
    const dt_conv_geom g = p->g;
    if (p->Cout != p->C || p->groups != p->C || p->C % 2 != 0) return false;
    if (pass == DGRAD) {
        a->q = g.dw, a->m = 1;
    } else {
        const int gg = gcd_i(g.dw, g.sw);
        a->q = g.dw / gg, a->m = g.sw / gg;
        if (a->m > 2) return false;
    }
    if ((pass != WGRAD) && sizeof(float) * (size_t)g.kh * g.kw * (2 * 32 + 2) > 48 * 1024) return false; /* the weights a block */
    a->rows = pass == DGRAD ? p->H : p->Ho;
    const int64_t cols = pass == DGRAD ? p->W : p->Wo;
    if (R != 8 && R != 4) return false;
    a->R = R;
    a->runs = cdiv(cdiv(cols, a->q), R);
    const int64_t pairs = p->C / 2, nb = cdiv(pairs, 32);
    a->PB = (int)cdiv(pairs, nb);
    a->RB = THREADS / a->PB;
    a->PR = (int64_t)a->q * a->runs;
    a->n_runs = p->N * a->rows * a->PR;
    a->blocks = cdiv(a->n_runs, a->RB);
    a->KC = kc_for(g.kw);
    return a->blocks < ((int64_t)1 << 31) && nb <= 65535;
}

static inline bool supported(const dt_conv_problem *p, int pass, int R = 8) {
    plan a;
    return plan_of(p, pass, &a, R);
}

/* instantiated (KC, MS) pairs, dispatched at run time */
#define DW_RB_KC_SWITCH(KC, BODY)                                           \
    switch (KC) {                                                           \
    case 16: { constexpr int KC_ = 16; BODY; } break;                       \
    case 7: { constexpr int KC_ = 7; BODY; } break;                         \
    case 4: { constexpr int KC_ = 4; BODY; } break;                         \
    case 3: { constexpr int KC_ = 3; BODY; } break;                         \
    default: { constexpr int KC_ = 1; BODY; } break;                        \
    }

/* R_ (4 or 8) as a compile-time constant for BODY */
#define DW_RB_R_SWITCH(R, BODY)                                             \
    if ((R) == 4) {                                                         \
        constexpr int R_ = 4;                                               \
        BODY;                                                               \
    } else {                                                                \
        constexpr int R_ = 8;                                               \
        BODY;                                                               \
    }

template <typename T>
void fwd(const dt_conv_problem *p, const T *x, const T *w, const float *bias, T *y, int R = 8) {
    plan a;
    if (!plan_of(p, FWD, &a, R)) dt_fatal("depthwise rb: fwd does not take this problem");
    const dim3 grid((unsigned)a.blocks, (unsigned)cdiv(p->C / 2, a.PB));
    const size_t smem = sizeof(float) * (size_t)p->g.kh * p->g.kw * (2 * a.PB + 2);
    if (smem > 48 * 1024) dt_fatal("depthwise rb: %zu bytes of weights a block", smem);
    const int threads = a.PB * a.RB;
    if (a.m == 1) {
        DW_RB_R_SWITCH(R, DW_RB_KC_SWITCH(a.KC, (k_rb_fwd<T, KC_, 1, R_><<<grid, threads, smem, dt_stream()>>>(*p, a, x, w, bias, y))));
    } else {
        DW_RB_R_SWITCH(R, DW_RB_KC_SWITCH(a.KC, (k_rb_fwd<T, KC_, 2, R_><<<grid, threads, smem, dt_stream()>>>(*p, a, x, w, bias, y))));
    }
    DT_CHECK_LAUNCH();
}

template <typename T>
void dgrad(const dt_conv_problem *p, const T *dy, const T *w, float beta, T *dx, int R = 8) {
    plan a;
    if (!plan_of(p, DGRAD, &a, R)) dt_fatal("depthwise rb: dgrad does not take this problem");
    const dim3 grid((unsigned)a.blocks, (unsigned)cdiv(p->C / 2, a.PB));
    const size_t smem = sizeof(float) * (size_t)p->g.kh * p->g.kw * (2 * a.PB + 2);
    if (smem > 48 * 1024) dt_fatal("depthwise rb: %zu bytes of weights a block", smem);
    DW_RB_R_SWITCH(R, DW_RB_KC_SWITCH(a.KC, (k_rb_dgrad<T, KC_, R_><<<grid, a.PB * a.RB, smem, dt_stream()>>>(*p, a, dy, w, beta, dx))));
    DT_CHECK_LAUNCH();
}

/* the wgrad's G: about 1024 blocks in all over (G, slices, chunks), at least RB runs a block -
 * a function of the shape alone, so the partials and their order are fixed */
static inline int64_t wgrad_groups(const dt_conv_problem *p, const plan &a, int64_t *per) {
    const int64_t slices = cdiv(p->C / 2, a.PB), chunks = (int64_t)p->g.kh * (p->g.kw / a.KC);
    int64_t G = cdiv(1024, slices * chunks);
    if (G > a.blocks) G = a.blocks;
    if (G < 1) G = 1;
    *per = cdiv(a.n_runs, G);
    return cdiv(a.n_runs, *per);
}

/* part: scratch of at least wgrad_scratch(p) floats */
static inline size_t wgrad_scratch(const dt_conv_problem *p, int R = 8) {
    plan a;
    int64_t per;
    if (!plan_of(p, WGRAD, &a, R)) return 0;
    return (size_t)(wgrad_groups(p, a, &per) * p->C * p->g.kh * p->g.kw);
}

template <typename T>
void wgrad(const dt_conv_problem *p, const T *x, const T *dy, float beta, float *dw, float *part, int R = 8) {
    plan a;
    if (!plan_of(p, WGRAD, &a, R)) dt_fatal("depthwise rb: wgrad does not take this problem");
    int64_t per;
    const int64_t G = wgrad_groups(p, a, &per), n = p->C * p->g.kh * p->g.kw;
    const dim3 grid((unsigned)G, (unsigned)cdiv(p->C / 2, a.PB), (unsigned)(p->g.kh * (p->g.kw / a.KC)));
    const size_t smem = sizeof(float) * (size_t)a.RB * a.KC * 2 * a.PB;
    if (a.m == 1) {
        DW_RB_R_SWITCH(R, DW_RB_KC_SWITCH(a.KC, (k_rb_wgrad<T, KC_, 1, R_><<<grid, a.PB * a.RB, smem, dt_stream()>>>(*p, a, per, x, dy, part))));
    } else {
        DW_RB_R_SWITCH(R, DW_RB_KC_SWITCH(a.KC, (k_rb_wgrad<T, KC_, 2, R_><<<grid, a.PB * a.RB, smem, dt_stream()>>>(*p, a, per, x, dy, part))));
    }
    DT_CHECK_LAUNCH();
    k_rb_wgrad_reduce<<<(unsigned)cdiv(n, 256) < 4096 ? (unsigned)cdiv(n, 256) : 4096, 256, 0, dt_stream()>>>(part, G, n, beta, dw);
    DT_CHECK_LAUNCH();
}

} // namespace dw_rb
