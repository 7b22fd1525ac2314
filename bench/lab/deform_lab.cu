/* The deformable kernel lab (llm.c's dev/cuda habit): variants of the deft path's kernels,
 * each validated against the CPU twin on fresh random inputs, then timed on the ResNet-18
 * shapes (one chunk of a batch of 64, scaled to the batch). Only the winners run in the
 * product; the others stay here so that the comparison can be re-run (docs/deft.md has the
 * numbers):
 *
 *   offconv  the offset conv: lane-group kernels (any C) vs shared-memory tiled GEMMs
 *   gemm     the main dW GEMM on channels-last columns: dW = dYT^T col vs dW^T = col^T dYT
 *   gather   the dx gather (the library's k_gather, a lane a vector) against the lab's
 *            k_gather_ahead: 4 hits loaded ahead (2 for 256 channels), rows grid-strided or in a
 *            contiguous range a block
 *   sample   the sampling with a lane a vector (the library's k_sample at 16 or 32 lanes,
 *            strided; k_sample_blocked: the library's row body in blocked rows) against the
 *            product's (about 4 vectors a lane)
 *   bf16     the product's kernels on a bf16 plan (bf16 x and columns read as stored: sampling,
 *            gather into bf16 dx or an fp32 sum, the tensor-core offset conv), next to the two
 *            conversion passes of the bridge they replaced (x widened to fp32, the fp32 input
 *            gradient rounded to bf16); compare with the f32 rows of the other groups
 *   sampler  the bf16 forward's sampling + main GEMM: k_sample's columns through the Hopper
 *            engine's GEMM or cuBLAS's, against the engine's fprop with the sampling as its A
 *            producer (dt_conv_sm90_fprop_deform, this lab's bench/lab/deform_sampler_sm90.cu: one
 *            launch, no columns in memory; it lost on every shape and left the library); validated
 *            bit for bit against the first on every shape, and against the CPU twins (sampling +
 *            a double GEMM) within bf16 rounding on small odd shapes; a mismatch exits 1
 *
 *   build/deform_lab [--batch 64] [--reps 20] [--shape l1] [--what offconv,gemm,gather,sample,bf16,sampler]
 *                    [--skip-validate]      (make lab; GPU only; --skip-validate for profilers)
 * Validation lines first (relative error against the CPU twin; only the groups of --what), then
 * one table. */
#include <stdlib.h>

#include "core/dt_common.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_common.h"
#include "ops/pointwise/convert.h"
#include "ops/deform/deform_chunk.h"
#include "ops/deform/deform_nhwc.cuh"
#include "ops/deform/deform_nhwc.h"
#include "ops/deform/deform_plan.h"
#include "core/dt_alloc.h"
#include "core/dt_common.h"
#include "core/dt_device.h"
#include "core/dt_kernel_util.cuh"
#include "core/dt_lanes.cuh"
#include "ops/dt_layers.h"
#include "ops/linear/gemm.h"
#include "ops/pointwise/layout.h"
#include "ops/deform/offset_conv.h"
#include "bench/lab/deform_sampler_sm90.h"

/* ------------------------------------------------------------------ lab variants */

/* The library's row kernels (ops/deform/deform_nhwc.cuh: k_sample, sample_row, k_gather) run here
 * as they are, at the lab's lane choice; what the lab adds are the two choices they do not
 * make - the row walk (BLOCKED: a contiguous range of rows a block, against the library's
 * grid-stride loop over lane groups) and, for the gather, HB hits loaded ahead of their sums.
 * Both were measured slower and stay here (deform_nhwc.cu's header comment). */
using dt_deft::THREADS;

/* This thread's lane group's rows: first, first + step, ... below end; BLOCKED: a contiguous
 * range of rows a block, its groups strided inside it; else the library's grid-stride walk
 * (DT_DEFT_FOR_ROWS). */
template <int L, bool BLOCKED> struct row_walk {
    int first, end, step;
    __device__ __forceinline__ explicit row_walk(int rows) {
        first = blockIdx.x * (THREADS / L) + threadIdx.x / L, end = rows, step = gridDim.x * (THREADS / L);
        if (BLOCKED) {
            const int per = (rows + gridDim.x - 1) / gridDim.x;
            first = min(rows, (int)blockIdx.x * per) + threadIdx.x / L;
            end = min(rows, (int)blockIdx.x * per + per);
            step = THREADS / L;
        }
    }
};

/* The sampling in blocked rows: the library's row body (sample_row) on row_walk's rows. */
template <int L>
__global__ void __launch_bounds__(THREADS) k_sample_blocked(dt_deform_chunk c, const float *__restrict__ xT,
                                                           const float *__restrict__ om, float *__restrict__ colT) {
    const int lane = threadIdx.x % L;
    const row_walk<L, true> w(c.S);
    for (int s = w.first; s < w.end; s += w.step) {
        int q, k, g;
        dt_sample_decode(&c, (uint32_t)s, &q, &k, &g);
        dt_deft::sample_row<4, L, float>(c, xT, om, q, k, g, lane, colT);
    }
}

/* A variant of the library's k_gather (f32, float4 vectors, beta 0, dx always written) whose
 * hit loop loads HB hits - their ids, weights and dcol vectors - before it sums any of them,
 * on row_walk's rows. Same arithmetic order as k_gather, so the results are the same. */
template <int L, int VPL, int HB, bool BLOCKED>
__global__ void __launch_bounds__(THREADS) k_gather_ahead(dt_deform_chunk c, const uint32_t *__restrict__ order,
                                                         const uint32_t *__restrict__ start, const float *__restrict__ wm,
                                                         const float *__restrict__ xT, const float *__restrict__ dcolT,
                                                         float *__restrict__ dxT, float *__restrict__ D) {
    const int lane = threadIdx.x % L, NV = c.Cg / 4;
    const unsigned mask = group_mask<L>();
    const row_walk<L, BLOCKED> w(c.npix * c.G);
    for (int r = w.first; r < w.end; r += w.step) {
        uint32_t pix;
        int g;
        const int64_t base = dt_deft::gather_row(c, r, pix, g);
        const float *xr = xT + (int64_t)pix * c.C + (int64_t)g * c.Cg;
        float *out = dxT + (int64_t)pix * c.C + (int64_t)g * c.Cg;
        for (int v0 = 0; v0 < NV; v0 += L * VPL) {
            float4 xv[VPL], acc[VPL];
            dt_deft::gather_begin<L>(xr, v0, lane, NV, xv, acc);
#pragma unroll
            for (int t = 0; t < 4; t++) {
                const int64_t key = dt_deft::gather_key(c, base, t);
                const uint32_t e1 = __ldg(start + key + 1);
                for (uint32_t e = __ldg(start + key); e < e1; e += HB) {
                    uint32_t sid[HB];
                    float hw[HB], part[HB];
                    float4 d[HB][VPL];
#pragma unroll
                    for (int h = 0; h < HB; h++) sid[h] = e + h < e1 ? __ldg(order + e + h) : 0u;
#pragma unroll
                    for (int h = 0; h < HB; h++) {
                        hw[h] = part[h] = 0.0f;
#pragma unroll
                        for (int u = 0; u < VPL; u++) vzero(d[h][u]);
                        if (e + h >= e1) continue;
                        hw[h] = __ldg(wm + 4 * (int64_t)sid[h] + t);
                        int q, k, gg;
                        dt_sample_decode(&c, sid[h], &q, &k, &gg);
                        const float4 *row = reinterpret_cast<const float4 *>(dcolT + (int64_t)q * c.KC + (int64_t)k * c.C +
                                                                             (int64_t)g * c.Cg);
#pragma unroll
                        for (int u = 0; u < VPL; u++) {
                            const int v = v0 + lane + u * L;
                            if (v < NV) d[h][u] = vload(row + v);
                        }
                    }
#pragma unroll
                    for (int h = 0; h < HB; h++)
#pragma unroll
                        for (int u = 0; u < VPL; u++) {
                            vfma(acc[u], hw[h], d[h][u]);
                            part[h] += vdot(d[h][u], xv[u]);
                        }
#pragma unroll
                    for (int h = 0; h < HB; h++) {
                        if (e + h >= e1) break;
                        const float sum = group_sum<L>(part[h], mask);
                        if (lane == 0) D[4 * (int64_t)sid[h] + t] = v0 == 0 ? sum : D[4 * (int64_t)sid[h] + t] + sum;
                    }
                }
            }
            dt_deft::gather_end<L>(out, v0, lane, NV, acc, 0.0f);
        }
    }
}

/* The lab's launchers, at a vector a lane: 16 lanes for 64 channels, 32 above (the library's
 * gather makes the same choice; its sampling takes about 4 vectors a lane). */
static int lanes_of(const dt_deform_plan *p) { return dt_lanes_for(p->Cg / 4, 4); }

/* variant 0: the library's k_gather, rows grid-strided, one hit at a time; 1: HB hits ahead;
 * 2: HB hits ahead, blocked rows */
static void gather_variant(int variant, const dt_deform_plan *p, int64_t nb, const dt_deform_index *idx, const float *xT,
                           const float *dcol, float *dxT, float *D) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    int L = lanes_of(p), nv = (int)(p->Cg / 4), rows = c.npix * c.G;
    int blocks = variant == 2 ? 8 * dt_gpu_sm_count() : dt_grid_for((int64_t)rows * L, THREADS);
#define G(L_, VPL, HB, BL) \
    k_gather_ahead<L_, VPL, HB, BL><<<blocks, THREADS, 0, dt_stream()>>>(c, idx->order, idx->start, idx->wm, xT, dcol, dxT, D)
#define GV(L_, VPL, HBMAX)                                                                                              \
    do {                                                                                                                \
        if (variant == 0)                                                                                               \
            dt_deft::k_gather<4, L_, VPL, float, float><<<blocks, THREADS, 0, dt_stream()>>>(                           \
                c, idx->order, idx->start, idx->wm, xT, dcol, 0.0f, dxT, D);                                            \
        else if (variant == 1) G(L_, VPL, HBMAX, false);                                                                \
        else G(L_, VPL, HBMAX, true);                                                                                   \
    } while (0)
    if (L == 16) GV(16, 1, 4);
    else if (nv <= 32) GV(32, 1, 4);
    else GV(32, 4, 2);
#undef GV
#undef G
    DT_CHECK_LAUNCH();
}

/* strided: the library's k_sample at a vector a lane; blocked: k_sample_blocked */
static void sample_variant(int blocked, const dt_deform_plan *p, int64_t nb, const float *xT, const float *om, float *col) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    int L = lanes_of(p);
    int blocks = blocked ? 8 * dt_gpu_sm_count() : dt_grid_for((int64_t)c.S * L, THREADS);
    if (L == 16) {
        if (blocked) k_sample_blocked<16><<<blocks, THREADS, 0, dt_stream()>>>(c, xT, om, col);
        else dt_deft::k_sample<4, 16, float><<<blocks, THREADS, 0, dt_stream()>>>(c, xT, om, col);
    } else {
        if (blocked) k_sample_blocked<32><<<blocks, THREADS, 0, dt_stream()>>>(c, xT, om, col);
        else dt_deft::k_sample<4, 32, float><<<blocks, THREADS, 0, dt_stream()>>>(c, xT, om, col);
    }
    DT_CHECK_LAUNCH();
}

/* ------------------------------------------------------------------ helpers */

/* whether the comma-separated list `what` names group g ("sample" is not "sampler") */
static int has_group(const char *what, const char *g) {
    const size_t n = strlen(g);
    for (const char *t = what; t; t = strchr(t, ',') ? strchr(t, ',') + 1 : NULL)
        if (!strncmp(t, g, n) && (t[n] == ',' || t[n] == 0)) return 1;
    return 0;
}

static float *randn_host(int64_t n, float std, uint64_t seed) {
    dt_rng r;
    dt_rng_seed(&r, seed);
    float *h = (float *)malloc(sizeof(float) * (size_t)n);
    dt_rng_fill_normal(&r, h, n, 0.0f, std);
    return h;
}
static float *up(const float *h, int64_t n) {
    float *d = (float *)dt_gpu_malloc(sizeof(float) * (size_t)n);
    dt_copy_h2d(d, h, sizeof(float) * (size_t)n);
    return d;
}
/* ||h - ref|| / ||ref|| over the entries where ref is not NaN (inf with a NaN in h) */
static double err_host(const float *h, const float *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(ref[i])) continue;
        if (isnan(h[i])) num = INFINITY;
        num += ((double)h[i] - ref[i]) * ((double)h[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    return sqrt(num) / (den > 0 ? sqrt(den) : 1e-30);
}
/* the same for a device array d [n] of fp32 */
static double err_vs(const float *d, const float *ref, int64_t n) {
    float *h = (float *)malloc(sizeof(float) * (size_t)n);
    dt_copy_d2h(h, d, sizeof(float) * (size_t)n);
    double e = err_host(h, ref, n);
    free(h);
    return e;
}
/* bf16 copies: of host values (rounded), on the device; a host array of bf16 widened */
static dt_bf16 *bf16_host(const float *h, int64_t n) {
    dt_bf16 *b = (dt_bf16 *)malloc(sizeof(dt_bf16) * (size_t)n);
    for (int64_t i = 0; i < n; i++) b[i] = dt_bf16_from_float(h[i]);
    return b;
}
static void *up_bf16(const float *h, int64_t n) {
    dt_bf16 *b = bf16_host(h, n);
    void *d = dt_gpu_malloc(sizeof(dt_bf16) * (size_t)n);
    dt_copy_h2d(d, b, sizeof(dt_bf16) * (size_t)n);
    free(b);
    return d;
}
static float *widened(const dt_bf16 *b, int64_t n) {
    float *h = (float *)malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) h[i] = dt_bf16_to_float(b[i]);
    return h;
}
/* err_vs for a device array d [n] of bf16 against the CPU twin's bf16 result ref */
static double err_vs_bf16(const void *d, const dt_bf16 *ref, int64_t n) {
    dt_bf16 *h = (dt_bf16 *)malloc(sizeof(dt_bf16) * (size_t)n);
    dt_copy_d2h(h, d, sizeof(dt_bf16) * (size_t)n);
    float *a = widened(h, n), *b = widened(ref, n);
    double e = err_host(a, b, n);
    free(h), free(a), free(b);
    return e;
}
static dt_deform_plan plan_for(int n, int c, int h, int w, int cout, dt_conv_geom g, int G, int mask, size_t budget) {
    dt_deform_plan p;
    dt_deform_knobs k = dt_deform_knobs_default();
    const char *bad = dt_deform_plan_init(&p, n, c, h, w, cout, g, G, mask, DT_DEFORM_DEFT, &k, budget);
    if (bad) dt_fatal("lab: %s", bad);
    return p;
}
/* p's bf16 twin: bf16 NHWC tensors, the same chunk (half the column budget: bf16 columns are
 * half the bytes). */
static dt_deform_plan bf16_plan(const dt_deform_plan *p, size_t budget) {
    dt_deform_plan b = *p;
    const char *bad = dt_deform_plan_types(&b, DT_BF16, DT_NHWC, DT_MATH_FP32, budget / 2);
    if (bad) dt_fatal("lab: %s", bad);
    return b;
}
/* om [Q, OCS] with offsets ~ N(0, sigma) px and (with mask) values in (0, 1). */
static float *om_host(const dt_deform_plan *p, int64_t nb, float sigma, uint64_t seed) {
    int64_t Q = nb * p->P;
    float *om = randn_host(Q * p->OCS, sigma, seed);
    for (int64_t q = 0; q < Q; q++)
        for (int64_t o = 2 * p->GK; o < p->OCS; o++) om[q * p->OCS + o] = o < p->OC ? 0.5f + 0.4f * sinf((float)(q + o)) : 0.0f;
    return om;
}

/* ------------------------------------------------------------------ validation */

static void validate_offconv(int tiles) {
    static const struct { int n, c, h, w, stride, dil, G, mask; } V[] = {
        {2, 64, 13, 11, 1, 1, 1, 0}, {3, 8, 9, 10, 2, 1, 1, 1}, {2, 132, 7, 9, 1, 2, 2, 1}, {1, 36, 6, 7, 1, 1, 4, 0}};
    dt_offconv_use_tiles(tiles);
    for (size_t vi = 0; vi < sizeof V / sizeof *V; vi++) {
        dt_deform_plan p = plan_for(V[vi].n, V[vi].c, V[vi].h, V[vi].w, 8, dt_geom(3, V[vi].stride, V[vi].dil, V[vi].dil),
                                    V[vi].G, V[vi].mask, (size_t)1 << 40);
        int64_t nb = p.prob.N, Q = nb * p.P, nx = nb * p.prob.H * p.prob.W * p.prob.C;
        float *xT = randn_host(nx, 1.0f, 1 + vi), *w = randn_host(p.OC * p.KC, 0.1f, 2 + vi), *b = randn_host(p.OC, 0.5f, 3 + vi);
        float *dom = randn_host(Q * p.OCS, 1.0f, 4 + vi), *dx0 = randn_host(nx, 1.0f, 5 + vi);
        for (int64_t q = 0; q < Q; q++)
            for (int64_t o = p.OC; o < p.OCS; o++) dom[q * p.OCS + o] = 0.0f;
        float *om = (float *)malloc(Q * p.OCS * 4), *dw = (float *)malloc(p.OC * p.KC * 4), *db = (float *)malloc(p.OC * 4);
        float *dx = (float *)malloc(nx * 4);
        memcpy(dx, dx0, nx * 4);
        dt_offconv_fwd_cpu(&p, nb, xT, w, b, om, NULL);
        dt_offconv_bwd_cpu(&p, nb, xT, dom, w, 0.0f, dw, 0.0f, db, NULL, 1.0f, dx, NULL);
        float *gx = up(xT, nx), *gw = up(w, p.OC * p.KC), *gb = up(b, p.OC), *gdom = up(dom, Q * p.OCS), *gdx = up(dx0, nx);
        float *gom = (float *)dt_gpu_malloc(Q * p.OCS * 4), *gdw = (float *)dt_gpu_malloc(p.OC * p.KC * 4);
        float *gdb = (float *)dt_gpu_malloc(p.OC * 4);
        void *ws = dt_gpu_malloc(dt_offconv_ws_bytes_cuda(&p, nb));
        dt_offconv_fwd_cuda(&p, nb, gx, gw, gb, gom, ws);
        dt_offconv_bwd_cuda(&p, nb, gx, gdom, gw, 0.0f, gdw, 0.0f, gdb, NULL, 1.0f, gdx, ws);
        printf("validate offconv %-5s C %3lld s%d d%d G%d mask %d: fwd %.1e  dW %.1e  db %.1e  dx %.1e\n",
               tiles ? "tiles" : "lanes", (long long)p.prob.C, V[vi].stride, V[vi].dil, V[vi].G, V[vi].mask,
               err_vs(gom, om, Q * p.OCS), err_vs(gdw, dw, p.OC * p.KC), err_vs(gdb, db, p.OC), err_vs(gdx, dx, nx));
        float *hs[] = {xT, w, b, dom, dx0, om, dw, db, dx};
        for (size_t i = 0; i < sizeof hs / sizeof *hs; i++) free(hs[i]);
        float *gs[] = {gx, gw, gb, gdom, gdx, gom, gdw, gdb};
        for (size_t i = 0; i < sizeof gs / sizeof *gs; i++) dt_gpu_free(gs[i]);
        dt_gpu_free(ws);
    }
    dt_offconv_use_tiles(1);
}

static void validate_gather_sample(void) {
    static const int CH[3] = {64, 128, 256};
    for (int ci = 0; ci < 3; ci++) {
        dt_deform_plan p = plan_for(2, CH[ci], 11, 13, 8, dt_geom(3, 1, 1, 1), 1, 1, (size_t)1 << 40);
        int64_t nb = p.prob.N, Q = nb * p.P, nx = nb * p.prob.H * p.prob.W * p.prob.C, S = Q * p.K * p.G;
        float *xT = randn_host(nx, 1.0f, 20 + ci), *om = om_host(&p, nb, 1.5f, 21 + ci), *dcol = randn_host(Q * p.KC, 1.0f, 22 + ci);
        void *cws = malloc(dt_deform_index_ws_bytes_cpu(&p, nb));
        dt_deform_index ic, ig;
        dt_deform_index_build_cpu(&p, nb, om, cws, &ic);
        float *dx = (float *)malloc(nx * 4), *D = (float *)malloc(S * 16), *col = (float *)malloc(Q * p.KC * 4);
        for (int64_t e = 0; e < S * 4; e++) D[e] = NAN;
        dt_deform_gather_dx_cpu(&p, nb, &ic, xT, dcol, 0.0f, dx, DT_F32, D);
        dt_deform_sample_nhwc_cpu(&p, nb, xT, om, col);
        float *gx = up(xT, nx), *gom = up(om, Q * p.OCS), *gdcol = up(dcol, Q * p.KC);
        float *gdx = (float *)dt_gpu_malloc(nx * 4), *gD = (float *)dt_gpu_malloc(S * 16), *gcol = (float *)dt_gpu_malloc(Q * p.KC * 4);
        void *gws = dt_gpu_malloc(dt_deform_index_ws_bytes_cuda(&p, nb));
        dt_deform_index_build_cuda(&p, nb, gom, gws, &ig);
        for (int v = 0; v < 3; v++) {
            dt_memset_gpu(gdx, 0xff, nx * 4);
            gather_variant(v, &p, nb, &ig, gx, gdcol, gdx, gD);
            printf("validate gather variant %d C %3d: dx %.1e  D %.1e\n", v, CH[ci], err_vs(gdx, dx, nx), err_vs(gD, D, S * 4));
        }
        for (int v = 0; v < 2; v++) {
            dt_memset_gpu(gcol, 0xff, Q * p.KC * 4);
            sample_variant(v, &p, nb, gx, gom, gcol);
            printf("validate sample %s C %3d: %.1e\n", v ? "blocked" : "strided", CH[ci], err_vs(gcol, col, Q * p.KC));
        }
        free(xT); free(om); free(dcol); free(cws); free(dx); free(D); free(col);
        dt_gpu_free(gx); dt_gpu_free(gom); dt_gpu_free(gdcol); dt_gpu_free(gdx); dt_gpu_free(gD); dt_gpu_free(gcol);
        dt_gpu_free(gws);
    }
}

/* The bf16 plan's kernels against their CPU twins (same plan): bf16 results compared as bf16
 * (one rounding apart at most where the two sum in another order). C 64 and 96 run the offset
 * conv on tensor cores, 20 its FFMA tiles, 13 its lane kernels and scalar sampling. */
static void validate_bf16(void) {
    static const struct { int c, G, mask; } V[] = {{64, 1, 0}, {96, 2, 1}, {20, 1, 1}, {13, 1, 0}};
    for (size_t vi = 0; vi < sizeof V / sizeof *V; vi++) {
        const size_t budget = (size_t)1 << 40;
        dt_deform_plan p = plan_for(2, V[vi].c, 11, 13, 8, dt_geom(3, 1, 1, 1), V[vi].G, V[vi].mask, budget);
        dt_deform_plan pb = bf16_plan(&p, budget);
        const int64_t nb = pb.prob.N, Q = nb * pb.P, nx = nb * pb.prob.H * pb.prob.W * pb.prob.C, S = Q * pb.K * pb.G, nc = Q * pb.KC;
        const int64_t nom = Q * pb.OCS, nw = pb.OC * pb.KC;
        float *x = randn_host(nx, 1.0f, 40 + vi), *dcol = randn_host(nc, 1.0f, 41 + vi), *om = om_host(&pb, nb, 1.5f, 42 + vi);
        float *w = randn_host(nw, 0.1f, 43 + vi), *b = randn_host(pb.OC, 0.5f, 44 + vi), *dom = randn_host(nom, 1.0f, 45 + vi);
        float *sum = randn_host(nx, 1.0f, 46 + vi); /* the sampling's fp32 part of dx, for the offset conv's dx */
        for (int64_t q = 0; q < Q; q++)
            for (int64_t o = pb.OC; o < pb.OCS; o++) dom[q * pb.OCS + o] = 0.0f;
        dt_bf16 *xh = bf16_host(x, nx), *dcolh = bf16_host(dcol, nc);
        /* the CPU twins */
        dt_bf16 *col = (dt_bf16 *)malloc(nc * 2), *dxg = (dt_bf16 *)malloc(nx * 2), *dxo = (dt_bf16 *)malloc(nx * 2);
        float *dxs = (float *)malloc(nx * 4), *D = (float *)malloc(S * 16), *om2 = (float *)malloc(nom * 4);
        float *dw = (float *)malloc(nw * 4), *db = (float *)malloc(pb.OC * 4);
        void *cws = malloc(dt_deform_index_ws_bytes_cpu(&pb, nb));
        dt_deform_index ic, ig;
        dt_deform_index_build_cpu(&pb, nb, om, cws, &ic);
        for (int64_t e = 0; e < S * 4; e++) D[e] = NAN;
        dt_deform_sample_nhwc_cpu(&pb, nb, xh, om, col);
        dt_deform_gather_dx_cpu(&pb, nb, &ic, xh, dcolh, 0.0f, dxg, DT_BF16, D);
        dt_deform_gather_dx_cpu(&pb, nb, &ic, xh, dcolh, 0.0f, dxs, DT_F32, D);
        dt_offconv_fwd_cpu(&pb, nb, xh, w, b, om2, NULL);
        dt_offconv_bwd_cpu(&pb, nb, xh, dom, w, 0.0f, dw, 0.0f, db, sum, 0.0f, dxo, NULL);
        /* the GPU */
        void *gx = up_bf16(x, nx), *gdcol = up_bf16(dcol, nc), *gcol = dt_gpu_malloc(nc * 2), *gdxg = dt_gpu_malloc(nx * 2);
        void *gdxo = dt_gpu_malloc(nx * 2);
        float *gom = up(om, nom), *gw = up(w, nw), *gb = up(b, pb.OC), *gdom = up(dom, nom), *gsum = up(sum, nx);
        float *gdxs = (float *)dt_gpu_malloc(nx * 4), *gD = (float *)dt_gpu_malloc(S * 16);
        float *gom2 = (float *)dt_gpu_malloc(nom * 4), *gdw = (float *)dt_gpu_malloc(nw * 4), *gdb = (float *)dt_gpu_malloc(pb.OC * 4);
        size_t w1 = dt_offconv_ws_bytes_cuda(&pb, nb), w2 = dt_deform_index_ws_bytes_cuda(&pb, nb);
        void *ws = dt_gpu_malloc(w1), *gws = dt_gpu_malloc(w2);
        dt_deform_index_build_cuda(&pb, nb, gom, gws, &ig);
        dt_memset_gpu(gcol, 0xff, nc * 2), dt_memset_gpu(gdxg, 0xff, nx * 2), dt_memset_gpu(gdxo, 0xff, nx * 2);
        dt_memset_gpu(gdxs, 0xff, nx * 4);
        dt_deform_sample_nhwc_cuda(&pb, nb, gx, gom, gcol);
        dt_deform_gather_dx_cuda(&pb, nb, &ig, gx, gdcol, 0.0f, gdxg, DT_BF16, gD);
        dt_deform_gather_dx_cuda(&pb, nb, &ig, gx, gdcol, 0.0f, gdxs, DT_F32, gD);
        dt_offconv_fwd_cuda(&pb, nb, gx, gw, gb, gom2, ws);
        dt_offconv_bwd_cuda(&pb, nb, gx, gdom, gw, 0.0f, gdw, 0.0f, gdb, gsum, 0.0f, gdxo, ws);
        printf("validate bf16 C %3d G%d mask %d: sample %.1e  gather dx %.1e  sum %.1e  D %.1e  offconv fwd %.1e  dW %.1e  "
               "db %.1e  dx %.1e\n", V[vi].c, V[vi].G, V[vi].mask, err_vs_bf16(gcol, col, nc), err_vs_bf16(gdxg, dxg, nx),
               err_vs(gdxs, dxs, nx), err_vs(gD, D, S * 4), err_vs(gom2, om2, nom), err_vs(gdw, dw, nw), err_vs(gdb, db, pb.OC),
               err_vs_bf16(gdxo, dxo, nx));
        void *hs[] = {x, dcol, om, w, b, dom, sum, xh, dcolh, col, dxg, dxo, dxs, D, om2, dw, db, cws};
        for (size_t i = 0; i < sizeof hs / sizeof *hs; i++) free(hs[i]);
        void *gs[] = {gx, gdcol, gcol, gdxg, gdxo, gom, gw, gb, gdom, gsum, gdxs, gD, gom2, gdw, gdb, ws, gws};
        for (size_t i = 0; i < sizeof gs / sizeof *gs; i++) dt_gpu_free(gs[i]);
    }
}

/* The sampler's checks (a mismatch counted in g_sampler_bad: the lab exits 1). Every launch is
 * followed by a synchronization and its line printed and flushed first, so that a kernel that
 * never finishes (an mbarrier waiting forever) names itself under `timeout`. */
static int g_sampler_bad;

static void sampler_step(const char *what) {
    printf("  ... %s\n", what);
    fflush(stdout);
}

/* The fused forward of a bf16 plan's chunk against k_sample's columns through the engine's GEMM on
 * the same tile (dt_conv_sm90_fprop_deform_cols): every element the same bits. The outputs are
 * poisoned with different patterns, so that an element neither writes differs too. Returns the
 * fused y on the host (bf16, [Q, Cout]). */
static dt_bf16 *sampler_bitwise(const char *name, const dt_deform_plan *pb, int64_t nb, const void *gx, const float *gom,
                                const void *gw, const float *gbias) {
    const dt_deform_chunk c = dt_deform_chunk_make(pb, nb);
    const int64_t Q = nb * pb->P, ny = Q * pb->prob.Cout;
    void *gy = dt_gpu_malloc(ny * 2), *gref = dt_gpu_malloc(ny * 2), *gcol = dt_gpu_malloc(Q * pb->KC * 2);
    dt_memset_gpu(gy, 0xff, ny * 2), dt_memset_gpu(gref, 0x7f, ny * 2);
    char what[160];
    snprintf(what, sizeof what, "%s: fused launch", name);
    sampler_step(what);
    dt_conv_sm90_fprop_deform(&c, pb->prob.Cout, gx, gom, gw, gbias, gy);
    dt_gpu_sync();
    snprintf(what, sizeof what, "%s: k_sample + the engine's GEMM", name);
    sampler_step(what);
    dt_deform_sample_nhwc_cuda(pb, nb, gx, gom, gcol);
    dt_conv_sm90_fprop_deform_cols(&c, pb->prob.Cout, gcol, gw, gbias, gref);
    dt_gpu_sync();
    dt_bf16 *y = (dt_bf16 *)malloc(ny * 2), *ref = (dt_bf16 *)malloc(ny * 2);
    dt_copy_d2h(y, gy, ny * 2), dt_copy_d2h(ref, gref, ny * 2);
    int64_t differ = 0, first = -1;
    for (int64_t i = 0; i < ny; i++)
        if (y[i] != ref[i]) differ++, first = first < 0 ? i : first;
    g_sampler_bad += differ != 0;
    if (differ)
        printf("validate sampler %-40s FAIL: %lld of %lld elements differ from k_sample + the engine's GEMM (first at "
               "%lld: 0x%04x vs 0x%04x)\n", name, (long long)differ, (long long)ny, (long long)first, y[first], ref[first]);
    else
        printf("validate sampler %-40s bitwise equal to k_sample + the engine's GEMM (%lld elements)\n", name, (long long)ny);
    free(ref);
    dt_gpu_free(gy), dt_gpu_free(gref), dt_gpu_free(gcol);
    return y;
}

/* (a) small odd shapes against the CPU twins - the bf16 sampling (dt_deform_sample_nhwc_cpu) and a
 * double GEMM over its columns - within one bf16 rounding plus fp32 reassociation: |y - ref| <=
 * 2^-7 |ref| + 2^-9 max |ref|; (b) the ResNet-18 shapes at `batch` (one chunk), offsets ~ N(0, 1 px),
 * bit for bit against the engine's GEMM over k_sample's columns. */
static void validate_sampler(int batch, const char *only) {
    if (!dt_gpu_has_sm90a()) {
        printf("validate sampler: this GPU or build has no Hopper engine (sm_90a): skipped\n");
        return;
    }
    static const struct { int n, c, h, w, cout, stride, dil, G, mask; } V[] = {
        {3, 128, 13, 11, 72, 1, 1, 2, 1}, {3, 64, 13, 11, 64, 2, 1, 1, 1}, {1, 192, 9, 7, 128, 1, 2, 3, 0}};
    for (size_t vi = 0; vi < sizeof V / sizeof *V; vi++) {
        const size_t budget = (size_t)1 << 40;
        dt_deform_plan p = plan_for(V[vi].n, V[vi].c, V[vi].h, V[vi].w, V[vi].cout, dt_geom(3, V[vi].stride, 1, V[vi].dil),
                                    V[vi].G, V[vi].mask, budget);
        dt_deform_plan pb = bf16_plan(&p, budget);
        const int64_t nb = pb.prob.N, Q = nb * pb.P, nx = nb * pb.prob.H * pb.prob.W * pb.prob.C, nw = pb.prob.Cout * pb.KC;
        float *x = randn_host(nx, 1.0f, 60 + vi), *w = randn_host(nw, 1.0f / sqrtf((float)pb.KC), 61 + vi);
        float *bias = randn_host(pb.prob.Cout, 1.0f, 62 + vi), *om = om_host(&pb, nb, 1.0f, 63 + vi);
        dt_bf16 *xh = bf16_host(x, nx), *wh = bf16_host(w, nw), *col = (dt_bf16 *)malloc(Q * pb.KC * 2);
        dt_deform_sample_nhwc_cpu(&pb, nb, xh, om, col);
        double *ref = (double *)malloc(sizeof(double) * Q * pb.prob.Cout), big = 0;
        for (int64_t q = 0; q < Q; q++)
            for (int64_t o = 0; o < pb.prob.Cout; o++) {
                double acc = bias[o];
                for (int64_t k = 0; k < pb.KC; k++)
                    acc += (double)dt_bf16_to_float(col[q * pb.KC + k]) * dt_bf16_to_float(wh[o * pb.KC + k]);
                ref[q * pb.prob.Cout + o] = acc;
                big = fmax(big, fabs(acc));
            }
        void *gx = up_bf16(x, nx), *gw = up_bf16(w, nw);
        float *gom = up(om, Q * pb.OCS), *gbias = up(bias, pb.prob.Cout);
        char name[96];
        snprintf(name, sizeof name, "N %d C %d %dx%d s%d d%d G%d mask %d -> %d", V[vi].n, V[vi].c, V[vi].h, V[vi].w,
                 V[vi].stride, V[vi].dil, V[vi].G, V[vi].mask, V[vi].cout);
        dt_bf16 *y = sampler_bitwise(name, &pb, nb, gx, gom, gw, gbias);
        int64_t over = 0;
        double worst = 0;
        for (int64_t i = 0; i < Q * pb.prob.Cout; i++) {
            const double e = fabs(dt_bf16_to_float(y[i]) - ref[i]), bound = ldexp(fabs(ref[i]), -7) + ldexp(big, -9);
            over += !(e <= bound); /* NaN counts */
            worst = fmax(worst, e / bound);
        }
        g_sampler_bad += over != 0;
        printf("validate sampler %-40s %s against the CPU twins: %lld elements past the bound, worst %.2f of it\n", name,
               over ? "FAIL" : "ok", (long long)over, worst);
        free(x), free(w), free(bias), free(om), free(xh), free(wh), free(col), free(ref), free(y);
        dt_gpu_free(gx), dt_gpu_free(gw), dt_gpu_free(gom), dt_gpu_free(gbias);
    }
    for (int si = 0; si < 7; si++) {
        const dt_bench_shape *sh = &DT_RESNET18_SHAPES[si];
        if (only && strcmp(only, sh->name)) continue;
        dt_deform_plan p = plan_for(batch, sh->cin, sh->h, sh->h, sh->cout, dt_geom(3, sh->stride, 1, 1), 1, 0,
                                    dt_conv_col_budget());
        dt_deform_plan pb = bf16_plan(&p, dt_conv_col_budget());
        const int64_t nb = pb.nb, Q = nb * pb.P, nx = nb * pb.prob.H * pb.prob.W * pb.prob.C, nw = pb.prob.Cout * pb.KC;
        float *h;
        void *gx = up_bf16(h = randn_host(nx, 1.0f, 70 + si), nx);
        free(h);
        void *gw = up_bf16(h = randn_host(nw, 1.0f / sqrtf((float)pb.KC), 71 + si), nw);
        free(h);
        float *gbias = up(h = randn_host(pb.prob.Cout, 1.0f, 72 + si), pb.prob.Cout);
        free(h);
        float *gom = up(h = om_host(&pb, nb, 1.0f, 73 + si), Q * pb.OCS);
        free(h);
        char name[96];
        snprintf(name, sizeof name, "%s (batch %lld)", sh->name, (long long)nb);
        free(sampler_bitwise(name, &pb, nb, gx, gom, gw, gbias));
        dt_gpu_free(gx), dt_gpu_free(gw), dt_gpu_free(gbias), dt_gpu_free(gom);
    }
}

/* ------------------------------------------------------------------ timing */

enum { T_FWD_L, T_FWD_T, T_DW_L, T_DW_T, T_DX_L, T_DX_T, T_GEMM_DW, T_GEMM_DWT, T_GATHER0, T_GATHER1, T_GATHER2,
       T_GATHER_P, T_SAMPLE0, T_SAMPLE1, T_SAMPLE_P, T_SAMPLE_B, T_GATHER_B, T_GATHER_BS, T_FWD_B, T_DW_B, T_DX_B,
       T_BRIDGE_X, T_BRIDGE_DX, T_SAMPLER_BLAS, T_SAMPLER_COLS, T_SAMPLER_FUSED, T_N };
static const char *NAMES[T_N] = {"offconv fwd, lanes", "offconv fwd, tiles", "offconv dW+db, lanes", "offconv dW+db, tiles",
                                 "offconv dx, lanes", "offconv dx, tiles", "main dW = dYT^T col", "main dW^T = col^T dYT",
                                 "gather 1 vec/lane strided", "gather 1 vec/lane, HB4", "gather 1 vec/lane, blocked",
                                 "gather (product)", "sample 1 vec/lane", "sample 1 vec/lane, blocked", "sample (product)",
                                 "bf16 sample", "bf16 gather -> bf16 dx", "bf16 gather -> fp32 sum",
                                 "bf16 offconv fwd (tc)", "bf16 offconv dW+db (tc)", "bf16 offconv dx + sum (tc)",
                                 "bridge: x to fp32 (gone)", "bridge: dx to bf16 (gone)",
                                 "k_sample + cuBLAS (no bias)", "k_sample + engine GEMM", "engine, sampling producer"};
static const char *GROUP[T_N] = {"offconv", "offconv", "offconv", "offconv", "offconv", "offconv", "gemm", "gemm",
                                 "gather", "gather", "gather", "gather", "sample", "sample", "sample",
                                 "bf16", "bf16", "bf16", "bf16", "bf16", "bf16", "bf16", "bf16",
                                 "sampler", "sampler", "sampler"};

typedef struct {
    int which;
    dt_deform_plan p, pb; /* the f32 plan and its bf16 twin (same chunk) */
    int64_t nb;
    float *xT, *w, *b, *om, *dom, *dw, *db, *dxT, *col, *dyt, *dW, *dWt, *D;
    void *xh, *colh, *dxh; /* bf16: x, the columns, dx */
    void *wh, *yh;         /* bf16: the main weight [Cout, K*C], its output [Q, Cout] (sampler) */
    float *bias;           /* [Cout] */
    void *ws;
    dt_deform_index idx;
} arg;

static void run(void *v) {
    arg *a = (arg *)v;
    dt_deform_plan *p = &a->p;
    const int64_t bP = a->nb * p->P, nx = a->nb * p->prob.H * p->prob.W * p->prob.C;
    int w = a->which;
    dt_offconv_use_tiles(!(w == T_FWD_L || w == T_DW_L || w == T_DX_L));
    switch (w) {
    case T_FWD_L: case T_FWD_T: dt_offconv_fwd_cuda(p, a->nb, a->xT, a->w, a->b, a->om, a->ws); break;
    case T_DW_L: case T_DW_T: dt_offconv_bwd_cuda(p, a->nb, a->xT, a->dom, a->w, 0.0f, a->dw, 0.0f, a->db, NULL, 0.0f, NULL, a->ws); break;
    case T_DX_L: case T_DX_T: dt_offconv_bwd_cuda(p, a->nb, a->xT, a->dom, a->w, 0.0f, NULL, 0.0f, NULL, NULL, 0.0f, a->dxT, a->ws); break;
    case T_GEMM_DW: dt_gemm_cuda(1, 0, p->prob.Cout, p->KC, bP, 1.0f, a->dyt, p->prob.Cout, a->col, p->KC, 0.0f, a->dW, p->KC); break;
    case T_GEMM_DWT:
        dt_gemm_cuda(1, 0, p->KC, p->prob.Cout, bP, 1.0f, a->col, p->KC, a->dyt, p->prob.Cout, 0.0f, a->dWt, p->prob.Cout);
        dt_nhwc_to_nchw_cuda(1, p->prob.Cout, p->KC, a->dWt, p->prob.Cout, NULL, 0.0f, a->dW);
        break;
    case T_GATHER0: case T_GATHER1: case T_GATHER2:
        gather_variant(w - T_GATHER0, p, a->nb, &a->idx, a->xT, a->col, a->dxT, a->D);
        break;
    case T_GATHER_P: dt_deform_gather_dx_cuda(p, a->nb, &a->idx, a->xT, a->col, 0.0f, a->dxT, DT_F32, a->D); break;
    case T_SAMPLE0: case T_SAMPLE1: sample_variant(w - T_SAMPLE0, p, a->nb, a->xT, a->om, a->col); break;
    case T_SAMPLE_P: dt_deform_sample_nhwc_cuda(p, a->nb, a->xT, a->om, a->col); break;
    case T_SAMPLE_B: dt_deform_sample_nhwc_cuda(&a->pb, a->nb, a->xh, a->om, a->colh); break;
    case T_GATHER_B: dt_deform_gather_dx_cuda(&a->pb, a->nb, &a->idx, a->xh, a->colh, 0.0f, a->dxh, DT_BF16, a->D); break;
    case T_GATHER_BS: dt_deform_gather_dx_cuda(&a->pb, a->nb, &a->idx, a->xh, a->colh, 0.0f, a->dxT, DT_F32, a->D); break;
    case T_FWD_B: dt_offconv_fwd_cuda(&a->pb, a->nb, a->xh, a->w, a->b, a->om, a->ws); break;
    case T_DW_B: dt_offconv_bwd_cuda(&a->pb, a->nb, a->xh, a->dom, a->w, 0.0f, a->dw, 0.0f, a->db, NULL, 0.0f, NULL, a->ws); break;
    case T_DX_B: dt_offconv_bwd_cuda(&a->pb, a->nb, a->xh, a->dom, a->w, 0.0f, NULL, 0.0f, NULL, a->dxT, 0.0f, a->dxh, a->ws); break;
    case T_BRIDGE_X: dt_convert_cuda(1, 1, nx, a->xh, DT_BF16, DT_NCHW, 0.0f, a->xT, DT_F32, DT_NCHW); break;
    case T_BRIDGE_DX: dt_convert_cuda(1, 1, nx, a->dxT, DT_F32, DT_NCHW, 0.0f, a->dxh, DT_BF16, DT_NCHW); break;
    case T_SAMPLER_BLAS: case T_SAMPLER_COLS: case T_SAMPLER_FUSED: {
        const dt_deform_chunk c = dt_deform_chunk_make(&a->pb, a->nb);
        if (w == T_SAMPLER_FUSED) {
            dt_conv_sm90_fprop_deform(&c, p->prob.Cout, a->xh, a->om, a->wh, a->bias, a->yh);
            break;
        }
        dt_deform_sample_nhwc_cuda(&a->pb, a->nb, a->xh, a->om, a->colh);
        if (w == T_SAMPLER_COLS) dt_conv_sm90_fprop_deform_cols(&c, p->prob.Cout, a->colh, a->wh, a->bias, a->yh);
        else dt_gemm_bf16_cuda(DT_MATH_FP32, 0, 1, bP, p->prob.Cout, p->KC, 1.0f, a->colh, p->KC, a->wh, p->KC, 0.0f, a->yh, DT_BF16, p->prob.Cout);
        break;
    }
    }
    dt_offconv_use_tiles(1);
}

static void time_shapes(int batch, int reps, const char *only, const char *what) {
    double t[7][T_N];
    int shown[7], ns = 0;
    for (int si = 0; si < 7; si++) {
        const dt_bench_shape *sh = &DT_RESNET18_SHAPES[si];
        if (only && strcmp(only, sh->name)) continue;
        shown[ns] = si;
        arg a;
        memset(&a, 0, sizeof a);
        a.p = plan_for(batch, sh->cin, sh->h, sh->h, sh->cout, dt_geom(3, sh->stride, 1, 1), 1, 0, dt_conv_col_budget());
        a.pb = bf16_plan(&a.p, dt_conv_col_budget());
        dt_deform_plan *p = &a.p;
        a.nb = p->nb;
        int64_t nb = p->nb, Q = nb * p->P, nx = nb * p->prob.H * p->prob.W * p->prob.C;
        float *h;
        a.xT = up(h = randn_host(nx, 1.0f, 10 + si), nx), free(h);
        a.w = up(h = randn_host(p->OC * p->KC, 0.05f, 11 + si), p->OC * p->KC), free(h);
        a.b = up(h = randn_host(p->OC, 0.5f, 12 + si), p->OC), free(h);
        a.dom = up(h = randn_host(Q * p->OCS, 1.0f, 13 + si), Q * p->OCS), free(h);
        a.col = up(h = randn_host(Q * p->KC, 1.0f, 14 + si), Q * p->KC), free(h);
        a.dyt = up(h = randn_host(Q * p->prob.Cout, 1.0f, 15 + si), Q * p->prob.Cout), free(h);
        a.om = up(h = om_host(p, nb, 1.0f, 16 + si), Q * p->OCS), free(h);
        a.xh = up_bf16(h = randn_host(nx, 1.0f, 17 + si), nx), free(h);
        a.colh = up_bf16(h = randn_host(Q * p->KC, 1.0f, 18 + si), Q * p->KC), free(h);
        a.dxh = dt_gpu_malloc(nx * 2);
        a.wh = up_bf16(h = randn_host(p->prob.Cout * p->KC, 1.0f / sqrtf((float)p->KC), 19 + si), p->prob.Cout * p->KC), free(h);
        a.bias = up(h = randn_host(p->prob.Cout, 1.0f, 20 + si), p->prob.Cout), free(h);
        a.yh = dt_gpu_malloc(Q * p->prob.Cout * 2);
        a.dw = (float *)dt_gpu_malloc(p->OC * p->KC * 4);
        a.db = (float *)dt_gpu_malloc(p->OC * 4);
        a.dxT = (float *)dt_gpu_malloc(nx * 4);
        a.dW = (float *)dt_gpu_malloc(p->prob.Cout * p->KC * 4);
        a.dWt = (float *)dt_gpu_malloc(p->prob.Cout * p->KC * 4);
        a.D = (float *)dt_gpu_malloc(Q * p->K * 16);
        size_t w1 = dt_offconv_ws_bytes_cuda(p, nb), w2 = dt_deform_index_ws_bytes_cuda(p, nb);
        size_t w3 = dt_offconv_ws_bytes_cuda(&a.pb, nb), wmax = w1 > w2 ? w1 : w2;
        a.ws = dt_gpu_malloc(wmax > w3 ? wmax : w3);
        void *iws = dt_gpu_malloc(w2);
        dt_deform_index_build_cuda(p, nb, a.om, iws, &a.idx);
        double scale = (double)batch / nb;
        for (int w = 0; w < T_N; w++) {
            a.which = w;
            const int engine = w == T_SAMPLER_COLS || w == T_SAMPLER_FUSED; /* sm_90a only */
            t[ns][w] = has_group(what, GROUP[w]) && (!engine || dt_gpu_has_sm90a()) ? dt_bench_time(run, &a, 2, reps) * scale : NAN;
        }
        float *gs[] = {a.xT, a.w, a.b, a.dom, a.col, a.dyt, a.om, a.dw, a.db, a.dxT, a.dW, a.dWt, a.D};
        for (size_t i = 0; i < sizeof gs / sizeof *gs; i++) dt_gpu_free(gs[i]);
        dt_gpu_free(a.xh), dt_gpu_free(a.colh), dt_gpu_free(a.dxh), dt_gpu_free(a.wh), dt_gpu_free(a.yh), dt_gpu_free(a.bias);
        dt_gpu_free(a.ws);
        dt_gpu_free(iws);
        ns++;
    }
    printf("\n## lab timings (ms for the whole batch of %d)\n%-26s", batch, "kernel");
    for (int k = 0; k < ns; k++) printf(" %7s", DT_RESNET18_SHAPES[shown[k]].name);
    printf("\n");
    for (int w = 0; w < T_N; w++) {
        if (!has_group(what, GROUP[w])) continue;
        printf("%-26s", NAMES[w]);
        for (int k = 0; k < ns; k++) printf(" %7.3f", t[k][w]);
        printf("\n");
    }
}

int main(int argc, char **argv) {
    dt_set_fatal_handler(exit); /* a failure outside a guarded call ends this program (dt_common.h) */
    int batch = 64, reps = 20, validate = 1;
    const char *only = NULL, *what = "offconv,gemm,gather,sample,bf16,sampler";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--what") && i + 1 < argc) what = argv[++i];
        else if (!strcmp(argv[i], "--skip-validate")) validate = 0;
        else {
            fprintf(stderr, "usage: deform_lab [--batch N] [--reps N] [--shape l1|l2a|...] [--what offconv,gemm,gather,sample,bf16,sampler] "
                            "[--skip-validate]\n");
            return 2;
        }
    }
    if (dt_gpu_count() == 0) {
        fprintf(stderr, "deform_lab: no CUDA GPU visible\n");
        return 1;
    }
    dt_gpu_init(0);
    if (validate) {
        if (has_group(what, "offconv")) validate_offconv(0), validate_offconv(1);
        if (has_group(what, "gather") || has_group(what, "sample")) validate_gather_sample();
        if (has_group(what, "bf16")) validate_bf16();
        if (has_group(what, "sampler")) validate_sampler(batch, only);
    }
    time_shapes(batch, reps, only, what);
    if (g_sampler_bad) {
        printf("\nsampler: %d validation(s) FAILED\n", g_sampler_bad);
        return 1;
    }
    return 0;
}
