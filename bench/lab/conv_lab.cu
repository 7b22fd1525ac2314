/* The convolution lab (issue 20): implicit-GEMM tensor-core convolutions in bf16 channels last,
 * in all three directions - forward (fprop), input gradient (dgrad), weight gradient (wgrad) -
 * next to the library's im2col + cuBLAS path. Same habit as deform_lab.cu: every variant is
 * validated on fresh random inputs against a CPU reference (double, from the same bf16 values)
 * and against the library's path, then timed; only winners ship. The kernels are the library's
 * own templates (ops/conv/conv_igemm.cuh: the problem, the GEMM views, the tiles, the loaders and
 * the epilogue it runs), with the loaders and epilogues only this lab runs plugged into them
 * (bench/lab/conv_lab_variants.cuh); the library instantiates the measured winners
 * (ops/conv/conv_igemm.cu) and its plan (ops/conv/conv_plan.c) picks them per shape from this
 * lab's table. Results: docs/conv.md, docs/PERF.md sections 13-14.
 * The stem's C = 3 is padded to 8 here (zero channels in x and w, see PadC below); the library
 * keeps the stem on im2col + GEMM.
 *
 * Variants (VARIANTS[] below):
 *   ref_cublas         deftc's own dt_conv2d on GPU tensors (bf16 NHWC: im2col + cublasGemmEx);
 *                      the number to beat and a second reference. On the stem it runs the real
 *                      C = 3 problem (what the library does today), the others the padded one.
 *   igemm_128x128      implicit GEMM, mma.sync m16n8k16 bf16 -> fp32, CTA tile 128x128x32,
 *                      8 warps (2 x 4) of 64x32, 4-stage cp.async pipeline, ldmatrix.x4
 *   igemm_64x64        the same with a 64x64x32 tile, 4 warps (2 x 2) of 32x32 (small late layers)
 *   igemm_1x1_128x128  the 128 tile specialized for 1x1 stride-1 unpadded convs (A = x itself:
 *                      no tap arithmetic, one pointer per row: a_pointwise)
 *   igemm_128x128_f32  the 128 tile writing fp32 y (no rounding; the accumulators as they are:
 *                      epi_f32)
 *   igemm_128x128_splitk  the 128 tile with split-K for the shapes with too few tiles to fill
 *                      the GPU: fp32 partials per split, summed in split order, rounded once
 *                      (epi_splitk)
 *   ref_cublas_dgrad   the library's dgrad: dcol = dy . w (cuBLAS, bf16), then col2im_nhwc
 *   igemm_128x128_dgrad, igemm_64x64_dgrad   dgrad on the implicit GEMM (stride 2: the taps
 *                      that no output reads are zero-filled, not skipped - a first version)
 *   ref_cublas_wgrad   the library's wgrad: im2col_nhwc, then dw = dy^T . col (cuBLAS, fp32 out)
 *   igemm_128x128_wgrad, igemm_64x128_wgrad   wgrad tiles of 128 (64: the 64-channel layers)
 *                      output channels x 128 k, split over M to fill two waves
 *   igemm_128x128_dgrad_split, igemm_64x64_dgrad_split   strided dgrad as one sub-GEMM per
 *                      output parity class over its taps only (a_dgrad_split; ships for strided convs)
 *   ref_deft_deform    the deformable conv's forward main GEMM as the library runs it (deft, bf16):
 *                      the sampling kernel writes colT [M, K*C], cuBLAS multiplies it by w
 *   ref_deft_dwgrad, igemm_128x128_dwgrad, igemm_64x128_dwgrad   the deformable conv's weight
 *                      gradient dW = dy^T . colT: deft re-samples colT and runs cuBLAS; the igemm
 *                      variants sample the B operand in the wgrad kernel's loader (wb_deform;
 *                      lose 1.6-6.3x)
 *   igemm_128x128_deform, igemm_64x64_deform   the same GEMM with the a_deform loader: the
 *                      bilinear samples made in registers from the four corner chunks and
 *                      stored to shared memory only (issue 20's third part; lose 1.2-5.7x)
 *   igemm_128x128_bnstats  the 128 tile with the batch norm's statistics of y in its epilogue
 *                      (epi_bf16_stats: per row slab and channel, then two ordered passes: mean,
 *                      invstd), against
 *   igemm_128x128+bn_stats_pass  the same tile followed by the library's statistics pass over y
 *                      (both validated against double sums of their own y; even: 2.499 vs 2.487 ms)
 *   igemm_128x128_w64, _k64, _w64_k64, igemm_128x256_w64, igemm_256x128_w64, igemm_1x1_w64_k64,
 *   igemm_128x128_w64_dgrad, _w64_k64_dgrad, igemm_128x128_w64_wgrad   the tile sweep: 64x64 warp
 *                      tiles (half the ldmatrix per mma), BK = 64 (half the barriers), 8-warp
 *                      128x256 / 256x128 CTAs; _k64 (128x128x64, 3 stages) wins every fprop shape
 *                      and is the library's fprop 128 tile (docs/conv.md)
 *
 *   build/conv_lab [--batch 64] [--reps 20] [--shapes l1,l4,r50,odd,...] [--csv FILE] [--quick]
 *                  [--seed S] [--skip-time] [--pass fprop,dgrad,wgrad,deform,dwgrad]   (make lab; GPU only)
 *   --shapes: names, or the groups r18, r50, odd, all (default all); --quick: 5 reps after 1
 *   warm-up, 1024 samples a shape, and (without --shapes) r18,odd only; --seed: the inputs of
 *   an earlier run (the default seed is the time; it is printed); --pass: the passes to run
 *   (default all five); exit status 1 on any FAIL.
 * Validation lines first, then one table: per shape, pass and variant PASS/FAIL, ms (median of
 * reps after warm-up, CUDA events), TFLOP/s (the conv's 2*N*Ho*Wo*Cout*kh*kw*C, the real C) and
 * the time relative to the pass's library path. A variant that fails a shape is not timed on it. */
#include <stdlib.h>

#include "core/dt_common.h"
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_common.h"
#include "core/dt_alloc.h"
#include "core/dt_autograd.h"
#include "core/dt_common.h"
#include "core/dt_cuda.h"
#include "core/dt_device.h"
#include "ops/linear/dt_gemm_call.h"
#include "ops/dt_layers.h"
#include "core/dt_rng.h"
#include "core/dt_tensor.h"
#include "bench/lab/conv_lab_variants.cuh"
#include "ops/deform/deform_nhwc.h"
#include "ops/deform/deform_plan.h"
#include "ops/batchnorm/batchnorm.h"
#include "ops/conv/im2col.h"

/* ================================================================== the kernels: ops/conv/conv_igemm.cuh and
 * the lab's loaders and epilogues for it, bench/lab/conv_lab_variants.cuh */

using namespace dt_igemm;
using namespace conv_lab;

/* ================================================================== shapes */

typedef struct {
    const char *name;
    int n, h, w, c, cout, k, s, pad, dil; /* n = 0: the run's --batch */
    int r18, r50;                         /* how many of this conv ResNet-18 / -50 have */
    int odd;                              /* a validation shape: every output checked */
} conv_shape;

/* ResNet-18 (l*) and ResNet-50 v1.5 (b*: c1 = 1x1 reduce of a stage's first block, c1x = of the
 * others, c2a = the strided 3x3, c3 = 1x1 expand, ds = the downsample; the stride-1 3x3s are the
 * l* shapes) at 224x224, then odd shapes (edges of every tile: M and Cout not multiples of the
 * tiles, dilation, C = 8, padding of C = 3 and 5). */
static const conv_shape SHAPES[] = {
    {"stem", 0, 224, 224, 3, 64, 7, 2, 3, 1, 1, 1, 0},
    {"l1", 0, 56, 56, 64, 64, 3, 1, 1, 1, 4, 3, 0},
    {"l2a", 0, 56, 56, 64, 128, 3, 2, 1, 1, 1, 0, 0},
    {"l2ds", 0, 56, 56, 64, 128, 1, 2, 0, 1, 1, 0, 0},
    {"l2", 0, 28, 28, 128, 128, 3, 1, 1, 1, 3, 3, 0},
    {"l3a", 0, 28, 28, 128, 256, 3, 2, 1, 1, 1, 0, 0},
    {"l3ds", 0, 28, 28, 128, 256, 1, 2, 0, 1, 1, 0, 0},
    {"l3", 0, 14, 14, 256, 256, 3, 1, 1, 1, 3, 5, 0},
    {"l4a", 0, 14, 14, 256, 512, 3, 2, 1, 1, 1, 0, 0},
    {"l4ds", 0, 14, 14, 256, 512, 1, 2, 0, 1, 1, 0, 0},
    {"l4", 0, 7, 7, 512, 512, 3, 1, 1, 1, 3, 2, 0},
    {"b1.c1", 0, 56, 56, 64, 64, 1, 1, 0, 1, 0, 1, 0},
    {"b1.c3", 0, 56, 56, 64, 256, 1, 1, 0, 1, 0, 4, 0}, /* conv3 x3 + the stride-1 downsample */
    {"b1.c1x", 0, 56, 56, 256, 64, 1, 1, 0, 1, 0, 2, 0},
    {"b2.c1", 0, 56, 56, 256, 128, 1, 1, 0, 1, 0, 1, 0},
    {"b2.c2a", 0, 56, 56, 128, 128, 3, 2, 1, 1, 0, 1, 0},
    {"b2.c3", 0, 28, 28, 128, 512, 1, 1, 0, 1, 0, 4, 0},
    {"b2.ds", 0, 56, 56, 256, 512, 1, 2, 0, 1, 0, 1, 0},
    {"b2.c1x", 0, 28, 28, 512, 128, 1, 1, 0, 1, 0, 3, 0},
    {"b3.c1", 0, 28, 28, 512, 256, 1, 1, 0, 1, 0, 1, 0},
    {"b3.c2a", 0, 28, 28, 256, 256, 3, 2, 1, 1, 0, 1, 0},
    {"b3.c3", 0, 14, 14, 256, 1024, 1, 1, 0, 1, 0, 6, 0},
    {"b3.ds", 0, 28, 28, 512, 1024, 1, 2, 0, 1, 0, 1, 0},
    {"b3.c1x", 0, 14, 14, 1024, 256, 1, 1, 0, 1, 0, 5, 0},
    {"b4.c1", 0, 14, 14, 1024, 512, 1, 1, 0, 1, 0, 1, 0},
    {"b4.c2a", 0, 14, 14, 512, 512, 3, 2, 1, 1, 0, 1, 0},
    {"b4.c3", 0, 7, 7, 512, 2048, 1, 1, 0, 1, 0, 3, 0},
    {"b4.ds", 0, 14, 14, 1024, 2048, 1, 2, 0, 1, 0, 1, 0},
    {"b4.c1x", 0, 7, 7, 2048, 512, 1, 1, 0, 1, 0, 2, 0},
    {"odd.3x3", 2, 9, 11, 16, 24, 3, 1, 1, 1, 0, 0, 1},
    {"odd.3x3s2", 3, 10, 7, 8, 40, 3, 2, 1, 1, 0, 0, 1},
    {"odd.dil2", 1, 13, 12, 24, 136, 3, 1, 2, 2, 0, 0, 1},
    {"odd.1x1", 3, 5, 9, 40, 72, 1, 1, 0, 1, 0, 0, 1},
    {"odd.1x1s2", 2, 9, 9, 32, 200, 1, 2, 0, 1, 0, 0, 1},
    {"odd.stem", 2, 20, 18, 3, 16, 7, 2, 3, 1, 0, 0, 1},
    {"odd.5x5c5", 1, 11, 11, 5, 8, 5, 1, 2, 1, 0, 0, 1},
};
enum { NSHAPES = sizeof SHAPES / sizeof *SHAPES };

/* ================================================================== one problem on the GPU */

typedef struct {
    const conv_shape *sh;
    int n, creal;     /* batch; the shape's real C (3 for the stem) */
    conv_params p;    /* the padded problem (C % 8 == 0) the igemm variants run */
    dt_bf16 *hx, *hw; /* host copies (as stored): x [N, H, W, C], w [Cout, KH, KW, C] */
    bf16 *dx, *dw;    /* device x, w (padded) */
    void *dy;         /* device y [M, Cout], room for fp32 */
    dt_tensor *tx, *tw; /* the library's tensors for ref_cublas: real C, bf16 NHWC */
    dt_conv_geom g;
    /* dgrad: dy random, dx = the output */
    dt_bf16 *hdy;     /* host dy [N, Ho, Wo, Cout] */
    bf16 *ddy, *dwT;  /* device dy, and w with its channel axes swapped: wT [C, KH, KW, Cout] */
    void *ddx;        /* device dx [N, H, W, C], room for fp32 */
    float *ddw;       /* wgrad: device dw [Cout, KH, KW, C] fp32 */
    gemm_view vf, vd; /* the GEMMs of fprop and dgrad (gemm_view) */
    gemm_view vw;     /* wgrad's output only: M = Cout rows of NO = K columns, y = ddw */
    /* deform (the 3x3 shapes whose C is not padded): the deformable conv's main GEMM on x and w
     * with offsets om [M, OCS] fp32 ~ N(0, 1) px, G offset groups and a mask on the odd shapes
     * (G = 2 where C / 2 is a multiple of 8); y = dy. dp: deft's bf16 NHWC plan, one chunk */
    int G, has_mask;
    float *hom, *dom; /* host and device om */
    dt_deform_plan dp;
    deform_view vdef; /* vdef.d.om == NULL: not a deform shape */
    deform_conv pdef; /* deform_wgrad: p with the offsets (output: ddw, as wgrad's) */
} problem;

/* fills `n` bf16 with U(-a, a) (never all zero; bf16(0) only where a draw rounds to it) */
static void fill_uniform_bf16(dt_bf16 *h, int64_t n, float a, dt_rng *r) {
    for (int64_t i = 0; i < n; i++) h[i] = dt_bf16_from_float(a * (2.0f * dt_rng_uniform(r) - 1.0f));
}

static void problem_make(problem *pr, const conv_shape *sh, int batch, uint64_t seed) {
    memset(pr, 0, sizeof *pr);
    pr->sh = sh;
    pr->n = sh->n ? sh->n : batch;
    pr->creal = sh->c;
    const int C = (sh->c + 7) / 8 * 8; /* PadC: zero channels up to a multiple of 8 */
    conv_params *p = &pr->p;
    p->N = pr->n, p->H = sh->h, p->W = sh->w, p->C = C, p->Cout = sh->cout;
    p->KH = p->KW = sh->k, p->SH = p->SW = sh->s, p->PH = p->PW = sh->pad, p->DH = p->DW = sh->dil;
    p->Ho = (int)dt_conv_out_size(sh->h, sh->k, sh->s, sh->pad, sh->dil);
    p->Wo = (int)dt_conv_out_size(sh->w, sh->k, sh->s, sh->pad, sh->dil);
    p->M = p->N * p->Ho * p->Wo, p->K = p->KH * p->KW * C;
    if (sh->cout % 8) dt_fatal("conv_lab: %s: Cout %d is not a multiple of 8", sh->name, sh->cout);
    pr->g = dt_geom(sh->k, sh->s, sh->pad, sh->dil);
    const int64_t nx = (int64_t)p->N * p->H * p->W * C, nw = (int64_t)p->Cout * p->K;
    dt_rng r;
    dt_rng_seed(&r, seed);
    pr->hx = (dt_bf16 *)dt_xmalloc(sizeof(dt_bf16) * (size_t)nx);
    pr->hw = (dt_bf16 *)dt_xmalloc(sizeof(dt_bf16) * (size_t)nw);
    fill_uniform_bf16(pr->hx, nx, 1.0f, &r);
    fill_uniform_bf16(pr->hw, nw, sqrtf(3.0f / (float)(sh->k * sh->k * sh->c)), &r); /* y ~ unit scale */
    if (C != sh->c) { /* the padding channels are zero in x and w */
        for (int64_t i = 0; i < nx; i++)
            if ((int)(i % C) >= sh->c) pr->hx[i] = 0;
        for (int64_t i = 0; i < nw; i++)
            if ((int)(i % C) >= sh->c) pr->hw[i] = 0;
    }
    pr->dx = (bf16 *)dt_gpu_malloc(sizeof(bf16) * (size_t)nx);
    pr->dw = (bf16 *)dt_gpu_malloc(sizeof(bf16) * (size_t)nw);
    pr->dy = dt_gpu_malloc(sizeof(float) * (size_t)p->M * p->Cout);
    dt_copy_h2d(pr->dx, pr->hx, sizeof(bf16) * (size_t)nx);
    dt_copy_h2d(pr->dw, pr->hw, sizeof(bf16) * (size_t)nw);
    p->x = pr->dx, p->w = pr->dw, p->y = pr->dy;
    /* dgrad's operands: dy U(-1, 1), wT[c][r][t][co] = w[co][r][t][c] */
    const int64_t ndy = (int64_t)p->M * p->Cout, ndx = (int64_t)p->N * p->H * p->W * C;
    pr->hdy = (dt_bf16 *)dt_xmalloc(sizeof(dt_bf16) * (size_t)ndy);
    fill_uniform_bf16(pr->hdy, ndy, 1.0f, &r);
    dt_bf16 *hwT = (dt_bf16 *)dt_xmalloc(sizeof(dt_bf16) * (size_t)nw);
    const int taps = p->KH * p->KW;
    for (int co = 0; co < p->Cout; co++)
        for (int tp = 0; tp < taps; tp++)
            for (int c = 0; c < C; c++)
                hwT[((int64_t)c * taps + tp) * p->Cout + co] = pr->hw[((int64_t)co * taps + tp) * C + c];
    pr->ddy = (bf16 *)dt_gpu_malloc(sizeof(bf16) * (size_t)ndy);
    pr->dwT = (bf16 *)dt_gpu_malloc(sizeof(bf16) * (size_t)nw);
    pr->ddx = dt_gpu_malloc(sizeof(float) * (size_t)ndx);
    dt_copy_h2d(pr->ddy, pr->hdy, sizeof(bf16) * (size_t)ndy);
    dt_copy_h2d(pr->dwT, hwT, sizeof(bf16) * (size_t)nw);
    free(hwT);
    gemm_view v = {};
    v.N = p->N, v.KH = p->KH, v.KW = p->KW, v.SH = p->SH, v.SW = p->SW, v.PH = p->PH, v.PW = p->PW, v.DH = p->DH,
    v.DW = p->DW;
    pr->vf = v, pr->vd = v;
    pr->vf.a = pr->dx, pr->vf.b = pr->dw, pr->vf.y = pr->dy;
    pr->vf.AH = p->H, pr->vf.AW = p->W, pr->vf.AC = C, pr->vf.OH = p->Ho, pr->vf.OW = p->Wo, pr->vf.NO = p->Cout;
    pr->vf.M = p->M, pr->vf.K = p->K;
    pr->vd.a = pr->ddy, pr->vd.b = pr->dwT, pr->vd.y = pr->ddx;
    pr->vd.AH = p->Ho, pr->vd.AW = p->Wo, pr->vd.AC = p->Cout, pr->vd.OH = p->H, pr->vd.OW = p->W, pr->vd.NO = C;
    pr->vd.M = p->N * p->H * p->W, pr->vd.K = taps * p->Cout;
    pr->ddw = (float *)dt_gpu_malloc(sizeof(float) * (size_t)nw);
    pr->vw = v;
    pr->vw.M = p->Cout, pr->vw.NO = p->K, pr->vw.K = p->M, pr->vw.y = pr->ddw;
    if (sh->k == 3 && C == sh->c) { /* the deformable pass's offsets */
        pr->G = sh->odd && C % 16 == 0 ? 2 : 1;
        pr->has_mask = sh->odd;
        const dt_deform_knobs kn = dt_deform_knobs_default();
        const size_t budget = (size_t)1 << 40; /* one chunk */
        const char *e = dt_deform_plan_init(&pr->dp, p->N, C, p->H, p->W, p->Cout, pr->g, pr->G, pr->has_mask, DT_DEFORM_DEFT,
                                            &kn, budget);
        if (!e) e = dt_deform_plan_types(&pr->dp, DT_BF16, DT_NHWC, DT_MATH_FP32, budget);
        if (e) dt_fatal("conv_lab: %s: deform plan: %s", sh->name, e);
        const int64_t OCS = pr->dp.OCS, GK = pr->dp.GK, nom = (int64_t)p->M * OCS;
        pr->hom = (float *)dt_xmalloc(sizeof(float) * (size_t)nom);
        for (int64_t m = 0; m < p->M; m++)
            for (int64_t j = 0; j < OCS; j++)
                pr->hom[m * OCS + j] = j < 2 * GK ? dt_rng_normal(&r) : j < pr->dp.OC ? dt_rng_uniform(&r) : 0.0f;
        pr->dom = (float *)dt_gpu_malloc(sizeof(float) * (size_t)nom);
        dt_copy_h2d(pr->dom, pr->hom, sizeof(float) * (size_t)nom);
        const deform_src d = {pr->dom, (int)OCS, (int)pr->dp.Cg, (int)GK, pr->has_mask};
        static_cast<gemm_view &>(pr->vdef) = pr->vf;
        pr->vdef.d = d;
        static_cast<conv_params &>(pr->pdef) = *p;
        pr->pdef.d = d;
    }
    /* the library's tensors hold the real C (the stem runs as the library runs it today) */
    pr->tx = dt_tensor_new4_as(DT_GPU, DT_BF16, DT_NHWC, p->N, sh->c, p->H, p->W);
    pr->tw = dt_tensor_new4_as(DT_GPU, DT_BF16, DT_NHWC, p->Cout, sh->c, p->KH, p->KW);
    if (C == sh->c) {
        dt_tensor_upload(pr->tx, pr->hx);
        dt_tensor_upload(pr->tw, pr->hw);
    } else {
        const int64_t px = nx / C, pw = nw / C;
        dt_bf16 *ux = (dt_bf16 *)dt_xmalloc(sizeof(dt_bf16) * (size_t)(px * sh->c));
        dt_bf16 *uw = (dt_bf16 *)dt_xmalloc(sizeof(dt_bf16) * (size_t)(pw * sh->c));
        for (int64_t i = 0; i < px; i++)
            for (int c = 0; c < sh->c; c++) ux[i * sh->c + c] = pr->hx[i * C + c];
        for (int64_t i = 0; i < pw; i++)
            for (int c = 0; c < sh->c; c++) uw[i * sh->c + c] = pr->hw[i * C + c];
        dt_tensor_upload(pr->tx, ux);
        dt_tensor_upload(pr->tw, uw);
        free(ux), free(uw);
    }
}

static void problem_free(problem *pr) {
    free(pr->hx), free(pr->hw);
    dt_gpu_free(pr->dx), dt_gpu_free(pr->dw), dt_gpu_free(pr->dy);
    free(pr->hdy);
    dt_gpu_free(pr->ddy), dt_gpu_free(pr->dwT), dt_gpu_free(pr->ddx), dt_gpu_free(pr->ddw);
    free(pr->hom), dt_gpu_free(pr->dom);
    dt_tensor_free(pr->tx), dt_tensor_free(pr->tw);
}

/* ================================================================== the variants */

enum { PASS_FPROP = 0, PASS_DGRAD = 1, PASS_WGRAD = 2, PASS_DEFORM = 3, PASS_DEFORM_WGRAD = 4, NPASSES = 5 };
static const char *PASS_NAME[] = {"fprop", "dgrad", "wgrad", "deform", "dwgrad"};

typedef struct {
    const char *name;
    int pass;
    int f32out; /* writes fp32 y */
    int (*supports)(const problem *);
    void (*run)(problem *);
    int ref;    /* the library's own path for this pass: the others are compared with it */
    /* an output besides y to validate (the batch norm's statistics), or NULL; 1 when it passes */
    int (*extra)(const problem *, const void *hy);
} variant;

static const gemm_view *view_of(const problem *pr, int pass) {
    return pass == PASS_DGRAD                                 ? &pr->vd
           : pass == PASS_WGRAD || pass == PASS_DEFORM_WGRAD ? &pr->vw
           : pass == PASS_DEFORM                             ? &pr->vdef
                                                             : &pr->vf;
}

static int any_shape(const problem *pr) { (void)pr; return 1; }
static int one_by_one(const problem *pr) {
    const conv_params *p = &pr->p;
    return p->KH == 1 && p->KW == 1 && p->SH == 1 && p->SW == 1 && p->PH == 0 && p->PW == 0;
}

/* ref_cublas: the library's conv (no autograd, its own output tensor inside a scope; the copy
 * into pr->dy is outside the timed call, see copy_ref_out) */
static dt_tensor *ref_last;
static void run_ref(problem *pr) {
    dt_set_grad_enabled(0);
    ref_last = dt_conv2d(pr->tx, pr->tw, NULL, pr->g, DT_MATH_FP32);
    dt_set_grad_enabled(1);
}
static void run_128(problem *pr) { launch_igemm<128, 128, 64, 32, 4, a_im2col>(pr->vf); }
static void run_64(problem *pr) { launch_igemm<64, 64, 32, 32, 4, a_im2col>(pr->vf); }
static void run_1x1(problem *pr) { launch_igemm<128, 128, 64, 32, 4, a_pointwise>(pr->vf); }
static void run_128_f32(problem *pr) { launch_igemm<128, 128, 64, 32, 4, a_im2col, epi_f32>(pr->vf); }
/* the tile-shape sweep: 64x64 warp tiles (4 warps a 128x128 CTA: half the ldmatrix per mma of
 * 64x32), BK = 64 (half the barriers per mma), and the 8-warp 128x256 / 256x128 CTAs */
static void run_128_w64(problem *pr) { launch_igemm<128, 128, 64, 64, 4, a_im2col>(pr->vf); }
static void run_128_k64(problem *pr) { launch_igemm<128, 128, 64, 32, 3, a_im2col, epi_bf16, 64>(pr->vf); }
static void run_128_w64_k64(problem *pr) { launch_igemm<128, 128, 64, 64, 3, a_im2col, epi_bf16, 64>(pr->vf); }
static void run_128x256(problem *pr) { launch_igemm<128, 256, 64, 64, 3, a_im2col>(pr->vf); }
static void run_256x128(problem *pr) { launch_igemm<256, 128, 64, 64, 3, a_im2col>(pr->vf); }
static void run_1x1_w64_k64(problem *pr) { launch_igemm<128, 128, 64, 64, 3, a_pointwise, epi_bf16, 64>(pr->vf); }
static int cout_ge_256(const problem *pr) { return pr->p.Cout >= 256; }

/* Split-K for the 128x128 tile: as many splits as fill two waves (two 80 KiB CTAs an SM), each
 * at least 8 k tiles (256 of K); a shape that already fills the GPU, or whose K is too short,
 * is not this variant's (splits < 2). */
static int splitk_splits(const problem *pr) {
    const gemm_view *p = &pr->vf;
    const int64_t tiles = (int64_t)((p->M + 127) / 128) * ((p->NO + 127) / 128);
    const int64_t want = (2 * (int64_t)dt_gpu_sm_count() + tiles - 1) / tiles, most = ((p->K + 31) / 32) / 8;
    return (int)(want < most ? want : most);
}
static int splitk_fits(const problem *pr) { return splitk_splits(pr) >= 2; }
static void run_128_splitk(problem *pr) {
    const int splits = splitk_splits(pr);
    const int64_t n = (int64_t)pr->vf.M * pr->vf.NO;
    float *ws = (float *)dt_gpu_malloc(sizeof(float) * (size_t)(splits * n)); /* cached after the first call */
    gemm_view q = pr->vf;
    q.y = ws;
    launch_igemm<128, 128, 64, 32, 4, a_im2col, epi_splitk>(q, splits);
    launch_splitk_sum<bf16>(ws, splits, n, 0.0f, (bf16 *)pr->vf.y);
    dt_gpu_free(ws);
}

/* fprop + the batch norm's statistics of y (issue 20's fused epilogue): the 128 tile with the
 * per-(row tile, channel) sums in its epilogue and a small final kernel (bn_stats_final), against
 * the same tile followed by the library's own statistics pass over y (dt_bn_stats_bf16_nhwc_cuda,
 * what batchnorm's forward runs: y read once more). Both give mean and invstd [Cout] fp32. */
/* The batch norm's statistics from the epilogue's partials stats [2][slabs][C] (fp32), in two
 * fixed-order passes (deterministic) wide enough to fill the GPU - the stem has 12544 slabs of
 * 64 channels, which one thread a channel would walk serially:
 *   1. block (chunk, 32 channels), 32 x 8 threads: lane y adds slabs y, y+8, ... of its chunk in
 *      double, then the 8 lanes are added in order -> part [2][chunks][C] (double);
 *   2. a thread a channel adds the chunks in order: mean = sum / M, var = sum(y^2) / M - mean^2
 *      (biased, as training's normalization uses), invstd = 1 / sqrt(var + eps). */
static const int BN_CHUNKS = 128, BN_LANES = 8;
static __global__ void k_bn_stats_chunks(const float *__restrict__ stats, int64_t slabs, int C,
                                         double *__restrict__ part) {
    __shared__ double red[2][BN_LANES][32];
    const int c = blockIdx.y * 32 + threadIdx.x, y = threadIdx.y;
    const int64_t per = (slabs + BN_CHUNKS - 1) / BN_CHUNKS, t0 = blockIdx.x * per;
    const int64_t t1 = t0 + per < slabs ? t0 + per : slabs;
    double s = 0, s2 = 0;
    if (c < C)
        for (int64_t t = t0 + y; t < t1; t += BN_LANES) {
            s += stats[t * C + c];
            s2 += stats[(slabs + t) * C + c];
        }
    red[0][y][threadIdx.x] = s, red[1][y][threadIdx.x] = s2;
    __syncthreads();
    if (y || c >= C) return;
    for (int l = 1; l < BN_LANES; l++) s += red[0][l][threadIdx.x], s2 += red[1][l][threadIdx.x];
    part[(int64_t)blockIdx.x * C + c] = s;
    part[((int64_t)BN_CHUNKS + blockIdx.x) * C + c] = s2;
}
static __global__ void k_bn_stats_final(const double *__restrict__ part, int C, int64_t M, float eps,
                                        float *__restrict__ mean, float *__restrict__ invstd) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double s = 0, s2 = 0;
    for (int k = 0; k < BN_CHUNKS; k++) s += part[(int64_t)k * C + c], s2 += part[((int64_t)BN_CHUNKS + k) * C + c];
    const double mu = s / (double)M, var = s2 / (double)M - mu * mu;
    mean[c] = (float)mu;
    invstd[c] = (float)(1.0 / sqrt((var > 0 ? var : 0) + (double)eps));
}
/* part: [2][BN_CHUNKS][C] double scratch */
static void bn_stats_final(const float *stats, int64_t slabs, int C, int64_t M, float eps, double *part, float *mean,
                           float *invstd) {
    k_bn_stats_chunks<<<dim3(BN_CHUNKS, (C + 31) / 32), dim3(32, BN_LANES), 0, dt_stream()>>>(stats, slabs, C, part);
    DT_CHECK_LAUNCH();
    k_bn_stats_final<<<(C + 127) / 128, 128, 0, dt_stream()>>>(part, C, M, eps, mean, invstd);
    DT_CHECK_LAUNCH();
}
static float *g_mean, *g_invstd; /* [Cout] fp32: the last stats variant's output */
static void stats_out(const problem *pr) {
    dt_gpu_free(g_mean), dt_gpu_free(g_invstd); /* the caching allocator hands the blocks back */
    g_mean = (float *)dt_gpu_malloc(sizeof(float) * (size_t)pr->p.Cout);
    g_invstd = (float *)dt_gpu_malloc(sizeof(float) * (size_t)pr->p.Cout);
}
static const float BN_EPS = 1e-5f;
static void run_128_bnstats(problem *pr) {
    stats_out(pr);
    typedef tile_cfg<128, 128, 64, 32, 4> cfg;
    const int64_t slabs = (int64_t)((pr->vf.M + 127) / 128) * stats_groups<cfg::THREADS, 128>();
    /* (2, slabs, Cout) fp32 and (2, BN_CHUNKS, Cout) double; cached by the allocator after the first call */
    float *ws = (float *)dt_gpu_malloc(sizeof(float) * 2 * (size_t)slabs * pr->vf.NO);
    double *part = (double *)dt_gpu_malloc(sizeof(double) * 2 * BN_CHUNKS * (size_t)pr->vf.NO);
    stats_view q;
    static_cast<gemm_view &>(q) = pr->vf;
    q.stats = ws;
    launch_igemm<128, 128, 64, 32, 4, a_im2col, epi_bf16_stats>(q);
    bn_stats_final(ws, slabs, q.NO, q.M, BN_EPS, part, g_mean, g_invstd);
    dt_gpu_free(ws);
    dt_gpu_free(part);
}
static void run_128_then_bn_stats(problem *pr) {
    stats_out(pr);
    launch_igemm<128, 128, 64, 32, 4, a_im2col>(pr->vf);
    void *ws = dt_gpu_malloc(dt_bn_ws_bytes(pr->p.Cout));
    dt_bn_stats_bf16_nhwc_cuda(pr->p.N, pr->p.Cout, (int64_t)pr->p.Ho * pr->p.Wo, pr->vf.y, 1, BN_EPS, 0.1f, NULL, NULL,
                               g_mean, g_invstd, ws, NULL);
    dt_gpu_free(ws);
}
/* mean and invstd against double sums of the variant's own y (bf16 [M, Cout] in hy): |d mean|
 * <= 1e-5 (1 + |mean|), invstd within 1e-4 relative - fp32 sums of at most 128 values, then
 * double */
static int check_bn_stats(const problem *pr, const void *hy) {
    const int M = pr->vf.M, C = pr->vf.NO;
    const dt_bf16 *y = (const dt_bf16 *)hy;
    float *hm = (float *)dt_xmalloc(sizeof(float) * (size_t)C), *hi = (float *)dt_xmalloc(sizeof(float) * (size_t)C);
    dt_copy_d2h(hm, g_mean, sizeof(float) * (size_t)C);
    dt_copy_d2h(hi, g_invstd, sizeof(float) * (size_t)C);
    double worst_m = 0, worst_i = 0;
    int ok = 1;
    for (int c = 0; c < C; c++) {
        double s = 0, s2 = 0;
        for (int64_t m = 0; m < M; m++) {
            const double v = dt_bf16_to_float(y[m * C + c]);
            s += v, s2 += v * v;
        }
        const double mu = s / M, var = s2 / M - mu * mu, is = 1.0 / sqrt((var > 0 ? var : 0) + BN_EPS);
        const double em = fabs(hm[c] - mu) / (1e-5 * (1 + fabs(mu))), ei = fabs(hi[c] - is) / (1e-4 * is);
        worst_m = em > worst_m ? em : worst_m, worst_i = ei > worst_i ? ei : worst_i;
        ok &= em <= 1 && ei <= 1 && isfinite(hm[c]) && isfinite(hi[c]);
    }
    printf("           batch-norm statistics of y (%d channels): %s, worst mean %.2f and invstd %.2f of tol\n", C,
           ok ? "PASS" : "FAIL", worst_m, worst_i);
    free(hm), free(hi);
    return ok;
}

/* dgrad. The library's path (what conv2d's backward runs for a bf16 NHWC conv whose columns fit
 * the budget, as these do): dcol [N*Ho*Wo, KH*KW*C] = dy . w in bf16 (cuBLAS), then col2im_nhwc
 * sums each dx element's column entries (fp32, one rounding; dcol itself was rounded: two
 * roundings in all); a 1x1 stride-1 unpadded conv's dx is the GEMM itself. The stem has no
 * dgrad (the images need no gradient), and a padded C would not match the library's: shapes
 * whose C is padded are skipped. */
static int dgrad_shape(const problem *pr) { return pr->creal == pr->p.C; }
static void run_ref_dgrad(problem *pr) {
    const conv_params *p = &pr->p;
    const int64_t Mo = (int64_t)p->M, R = (int64_t)p->K;
    if (one_by_one(pr)) {
        dt_gemm_call(DT_GPU, DT_BF16, DT_MATH_FP32, 0, 0, Mo, R, p->Cout, 1.0f, pr->ddy, p->Cout, pr->dw, R, 0.0f,
                     pr->ddx, DT_BF16, R);
        return;
    }
    void *dcol = dt_gpu_malloc(sizeof(bf16) * (size_t)(Mo * R)); /* cached after the first call */
    dt_gemm_call(DT_GPU, DT_BF16, DT_MATH_FP32, 0, 0, Mo, R, p->Cout, 1.0f, pr->ddy, p->Cout, pr->dw, R, 0.0f, dcol,
                 DT_BF16, R);
    dt_col2im_nhwc_bf16_cuda(dcol, p->N, p->C, p->H, p->W, pr->g, p->Ho, p->Wo, 0.0f, pr->ddx);
    dt_gpu_free(dcol);
}
static void run_128_dgrad(problem *pr) { launch_igemm<128, 128, 64, 32, 4, a_dgrad>(pr->vd); }
static void run_64_dgrad(problem *pr) { launch_igemm<64, 64, 32, 32, 4, a_dgrad>(pr->vd); }
/* the strided dgrad split by output parity (a_dgrad_split): strided shapes, kernels up to 8x8 */
static int strided_dgrad_shape(const problem *pr) {
    return dgrad_shape(pr) && (pr->p.SH > 1 || pr->p.SW > 1) && pr->p.KH <= 8 && pr->p.KW <= 8;
}
static void run_128_dgrad_split(problem *pr) { launch_igemm<128, 128, 64, 32, 4, a_dgrad_split>(pr->vd); }
static void run_64_dgrad_split(problem *pr) { launch_igemm<64, 64, 32, 32, 4, a_dgrad_split>(pr->vd); }
static void run_128_w64_dgrad(problem *pr) { launch_igemm<128, 128, 64, 64, 4, a_dgrad>(pr->vd); }
static void run_128_w64_k64_dgrad(problem *pr) { launch_igemm<128, 128, 64, 64, 3, a_dgrad, epi_bf16, 64>(pr->vd); }

/* wgrad. The library's path: col [N*Ho*Wo, K] = im2col_nhwc(x) (a 1x1 stride-1 unpadded conv:
 * x itself), dw = dy^T . col in fp32 (cuBLAS, bf16 operands). It runs the padded problem here
 * (the stem with C = 8: the igemm variants' K), so on the stem it is not the library's own time. */
static void run_ref_wgrad(problem *pr) {
    const conv_params *p = &pr->p;
    const void *col = pr->dx;
    void *buf = NULL;
    if (!one_by_one(pr)) {
        buf = dt_gpu_malloc(sizeof(bf16) * (size_t)((int64_t)p->M * p->K)); /* cached after the first call */
        dt_im2col_nhwc_bf16_cuda(pr->dx, p->N, p->C, p->H, p->W, pr->g, p->Ho, p->Wo, buf);
        col = buf;
    }
    dt_gemm_call(DT_GPU, DT_BF16, DT_MATH_FP32, 1, 0, p->Cout, p->K, p->M, 1.0f, pr->ddy, p->Cout, col, p->K, 0.0f,
                 pr->ddw, DT_F32, p->K);
    dt_gpu_free(buf);
}
static void run_128_wgrad(problem *pr) { launch_wgrad<128, 128, 64, 32, 4>(pr->p, pr->ddy, 0.0f, pr->ddw); }
static void run_64_wgrad(problem *pr) { launch_wgrad<64, 128, 32, 32, 4>(pr->p, pr->ddy, 0.0f, pr->ddw); }
static void run_128_w64_wgrad(problem *pr) { launch_wgrad<128, 128, 64, 64, 4>(pr->p, pr->ddy, 0.0f, pr->ddw); }

/* deform: the deformable conv's forward main GEMM. The library's deft path: colT [M, K*C] bf16 =
 * the sampling kernel (deform_nhwc.h), then y = colT . w^T (cuBLAS, bf16) - the column matrix
 * written and read back; the igemm variants sample into shared memory (a_deform) instead. */
static int deform_shape(const problem *pr) { return pr->vdef.d.om != NULL; }
static void run_ref_deform(problem *pr) {
    const dt_deform_plan *dp = &pr->dp;
    const int64_t Q = pr->p.M, KC = dp->KC;
    void *colT = dt_gpu_malloc(sizeof(bf16) * (size_t)(Q * KC)); /* cached after the first call */
    dt_deform_sample_nhwc_cuda(dp, dp->prob.N, pr->dx, pr->dom, colT);
    dt_gemm_call(DT_GPU, DT_BF16, DT_MATH_FP32, 0, 1, Q, pr->p.Cout, KC, 1.0f, colT, KC, pr->dw, KC, 0.0f, pr->dy, DT_BF16,
                 pr->p.Cout);
    dt_gpu_free(colT);
}
static void run_128_deform(problem *pr) { launch_igemm<128, 128, 64, 32, 4, a_deform>(pr->vdef); }
static void run_64_deform(problem *pr) { launch_igemm<64, 64, 32, 32, 4, a_deform>(pr->vdef); }
/* dwgrad: the deformable conv's weight gradient dW [Cout, K*C] fp32 = dy^T . colT. The library:
 * the sampling re-made for the backward (deft's colconv backward re-fills colT), then cuBLAS;
 * the igemm variants sample the B operand in the wgrad kernel's loader (wb_deform) instead. */
static void run_ref_deform_wgrad(problem *pr) {
    const dt_deform_plan *dp = &pr->dp;
    const int64_t Q = pr->p.M, KC = dp->KC;
    void *colT = dt_gpu_malloc(sizeof(bf16) * (size_t)(Q * KC)); /* cached after the first call */
    dt_deform_sample_nhwc_cuda(dp, dp->prob.N, pr->dx, pr->dom, colT);
    dt_gemm_call(DT_GPU, DT_BF16, DT_MATH_FP32, 1, 0, pr->p.Cout, KC, Q, 1.0f, pr->ddy, pr->p.Cout, colT, KC, 0.0f, pr->ddw,
                 DT_F32, KC);
    dt_gpu_free(colT);
}
static void run_128_deform_wgrad(problem *pr) { launch_wgrad<128, 128, 64, 32, 4, wb_deform>(pr->pdef, pr->ddy, 0.0f, pr->ddw); }
static void run_64_deform_wgrad(problem *pr) { launch_wgrad<64, 128, 32, 32, 4, wb_deform>(pr->pdef, pr->ddy, 0.0f, pr->ddw); }

static const variant VARIANTS[] = {
    {"ref_cublas", PASS_FPROP, 0, any_shape, run_ref, 1, NULL},
    {"igemm_128x128", PASS_FPROP, 0, any_shape, run_128, 0, NULL},
    {"igemm_64x64", PASS_FPROP, 0, any_shape, run_64, 0, NULL},
    {"igemm_1x1_128x128", PASS_FPROP, 0, one_by_one, run_1x1, 0, NULL},
    {"igemm_128x128_f32", PASS_FPROP, 1, any_shape, run_128_f32, 0, NULL},
    {"igemm_128x128_splitk", PASS_FPROP, 0, splitk_fits, run_128_splitk, 0, NULL},
    {"igemm_128x128_w64", PASS_FPROP, 0, any_shape, run_128_w64, 0, NULL},
    {"igemm_128x128_k64", PASS_FPROP, 0, any_shape, run_128_k64, 0, NULL},
    {"igemm_128x128_w64_k64", PASS_FPROP, 0, any_shape, run_128_w64_k64, 0, NULL},
    {"igemm_128x256_w64", PASS_FPROP, 0, cout_ge_256, run_128x256, 0, NULL},
    {"igemm_256x128_w64", PASS_FPROP, 0, any_shape, run_256x128, 0, NULL},
    {"igemm_1x1_w64_k64", PASS_FPROP, 0, one_by_one, run_1x1_w64_k64, 0, NULL},
    {"igemm_128x128_bnstats", PASS_FPROP, 0, any_shape, run_128_bnstats, 0, check_bn_stats},
    {"igemm_128x128+bn_stats_pass", PASS_FPROP, 0, any_shape, run_128_then_bn_stats, 0, check_bn_stats},
    {"ref_cublas_dgrad", PASS_DGRAD, 0, dgrad_shape, run_ref_dgrad, 1, NULL},
    {"igemm_128x128_dgrad", PASS_DGRAD, 0, dgrad_shape, run_128_dgrad, 0, NULL},
    {"igemm_64x64_dgrad", PASS_DGRAD, 0, dgrad_shape, run_64_dgrad, 0, NULL},
    {"igemm_128x128_dgrad_split", PASS_DGRAD, 0, strided_dgrad_shape, run_128_dgrad_split, 0, NULL},
    {"igemm_64x64_dgrad_split", PASS_DGRAD, 0, strided_dgrad_shape, run_64_dgrad_split, 0, NULL},
    {"igemm_128x128_w64_dgrad", PASS_DGRAD, 0, dgrad_shape, run_128_w64_dgrad, 0, NULL},
    {"igemm_128x128_w64_k64_dgrad", PASS_DGRAD, 0, dgrad_shape, run_128_w64_k64_dgrad, 0, NULL},
    {"ref_cublas_wgrad", PASS_WGRAD, 1, any_shape, run_ref_wgrad, 1, NULL},
    {"igemm_128x128_wgrad", PASS_WGRAD, 1, any_shape, run_128_wgrad, 0, NULL},
    {"igemm_64x128_wgrad", PASS_WGRAD, 1, any_shape, run_64_wgrad, 0, NULL},
    {"igemm_128x128_w64_wgrad", PASS_WGRAD, 1, any_shape, run_128_w64_wgrad, 0, NULL},
    {"ref_deft_deform", PASS_DEFORM, 0, deform_shape, run_ref_deform, 1, NULL},
    {"igemm_128x128_deform", PASS_DEFORM, 0, deform_shape, run_128_deform, 0, NULL},
    {"igemm_64x64_deform", PASS_DEFORM, 0, deform_shape, run_64_deform, 0, NULL},
    {"ref_deft_dwgrad", PASS_DEFORM_WGRAD, 1, deform_shape, run_ref_deform_wgrad, 1, NULL},
    {"igemm_128x128_dwgrad", PASS_DEFORM_WGRAD, 1, deform_shape, run_128_deform_wgrad, 0, NULL},
    {"igemm_64x128_dwgrad", PASS_DEFORM_WGRAD, 1, deform_shape, run_64_deform_wgrad, 0, NULL},
};
enum { NVARIANTS = sizeof VARIANTS / sizeof *VARIANTS };

/* Runs variant v once, its output (its pass's y: pr->dy or pr->ddx) poisoned first (0xFF bytes: bf16 0xFFFF and fp32
 * 0xFFFFFFFF are NaN, so an element left unwritten fails). ref_cublas writes its own tensor: a
 * block of the same size is poisoned and released first, so that the caching allocator most
 * likely hands that block out (best effort; the library's kernels are also checked on poisoned
 * memory by make test-gpu). */
static void run_once(const variant *v, problem *pr) {
    const gemm_view *vw = view_of(pr, v->pass);
    const size_t ybytes = (size_t)pr->p.M * pr->p.Cout * (v->f32out ? 4 : 2);
    dt_memset_gpu(vw->y, 0xff, sizeof(float) * (size_t)vw->M * vw->NO);
    if (v->run == run_ref) {
        dt_scope_begin();
        dt_tensor *pz = dt_tensor_new4_as(DT_GPU, DT_BF16, DT_NHWC, pr->p.N, pr->p.Cout, pr->p.Ho, pr->p.Wo);
        dt_memset_gpu(pz->data, 0xff, ybytes);
        dt_tensor_release(pz);
        run_ref(pr);
        DT_CHECK(cudaMemcpyAsync(pr->dy, ref_last->data, ybytes, cudaMemcpyDeviceToDevice, dt_stream()));
        dt_scope_end();
    } else {
        v->run(pr);
    }
    dt_gpu_sync();
}

/* timed call: ref_cublas inside a scope (its output goes back to the caching allocator) */
typedef struct {
    const variant *v;
    problem *pr;
} timed_arg;
static void timed(void *a_) {
    timed_arg *a = (timed_arg *)a_;
    if (a->v->run == run_ref) {
        dt_scope_begin();
        run_ref(a->pr);
        dt_scope_end();
    } else {
        a->v->run(a->pr);
    }
}

/* ================================================================== validation */

/* The CPU reference of y[m][co] in double from the bf16 values, and sum_k |a*b| (the error
 * scale: bf16 rounding of y is <= 2^-8 |y| <= 2^-8 S, fp32 accumulation adds ~K 2^-24 S). */
static double ref_fprop(const problem *pr, int m, int co, double *abs_sum) {
    const conv_params *p = &pr->p;
    const int hw = p->Ho * p->Wo, n = m / hw, rem = m - n * hw, ho = rem / p->Wo, wo = rem - ho * p->Wo;
    double s = 0, sa = 0;
    for (int r = 0; r < p->KH; r++) {
        const int hi = ho * p->SH - p->PH + r * p->DH;
        if (hi < 0 || hi >= p->H) continue;
        for (int t = 0; t < p->KW; t++) {
            const int wi = wo * p->SW - p->PW + t * p->DW;
            if (wi < 0 || wi >= p->W) continue;
            const dt_bf16 *xa = pr->hx + (((int64_t)n * p->H + hi) * p->W + wi) * p->C;
            const dt_bf16 *wb = pr->hw + (int64_t)co * p->K + (int64_t)(r * p->KW + t) * p->C;
            for (int c = 0; c < p->C; c++) {
                const double prod = (double)dt_bf16_to_float(xa[c]) * (double)dt_bf16_to_float(wb[c]);
                s += prod, sa += fabs(prod);
            }
        }
    }
    *abs_sum = sa;
    return s;
}

/* dgrad's reference: dx[n][h][w][c] = sum over the taps (r, t) that some output position
 * (ho, wo) reads it through, and over co, of dy[n][ho][wo][co] * w[co][r][t][c]. */
static double ref_dgrad(const problem *pr, int m, int c, double *abs_sum) {
    const conv_params *p = &pr->p;
    const int hw = p->H * p->W, n = m / hw, rem = m - n * hw, h = rem / p->W, w = rem - h * p->W;
    double s = 0, sa = 0;
    for (int r = 0; r < p->KH; r++) {
        const int hh = h + p->PH - r * p->DH;
        if (hh < 0 || hh % p->SH || hh / p->SH >= p->Ho) continue;
        for (int t = 0; t < p->KW; t++) {
            const int ww = w + p->PW - t * p->DW;
            if (ww < 0 || ww % p->SW || ww / p->SW >= p->Wo) continue;
            const dt_bf16 *dya = pr->hdy + (((int64_t)n * p->Ho + hh / p->SH) * p->Wo + ww / p->SW) * p->Cout;
            for (int co = 0; co < p->Cout; co++) {
                const double prod = (double)dt_bf16_to_float(dya[co]) *
                                    (double)dt_bf16_to_float(pr->hw[(int64_t)co * p->K + (int64_t)(r * p->KW + t) * p->C + c]);
                s += prod, sa += fabs(prod);
            }
        }
    }
    *abs_sum = sa;
    return s;
}

/* wgrad's reference: dw[co][k] = sum over m = (n, ho, wo) of dy[n][ho][wo][co] times x at
 * output m's tap (r, t) of k = (r, t, c), channel c (0 outside). */
static double ref_wgrad(const problem *pr, int co, int k, double *abs_sum) {
    const conv_params *p = &pr->p;
    const int tap = k / p->C, c = k - tap * p->C, r = tap / p->KW, t = tap - r * p->KW;
    double s = 0, sa = 0;
    for (int n = 0; n < p->N; n++)
        for (int ho = 0; ho < p->Ho; ho++) {
            const int hi = ho * p->SH - p->PH + r * p->DH;
            if (hi < 0 || hi >= p->H) continue;
            for (int wo = 0; wo < p->Wo; wo++) {
                const int wi = wo * p->SW - p->PW + t * p->DW;
                if (wi < 0 || wi >= p->W) continue;
                const double prod =
                    (double)dt_bf16_to_float(pr->hdy[(((int64_t)n * p->Ho + ho) * p->Wo + wo) * p->Cout + co]) *
                    (double)dt_bf16_to_float(pr->hx[(((int64_t)n * p->H + hi) * p->W + wi) * p->C + c]);
                s += prod, sa += fabs(prod);
            }
        }
    *abs_sum = sa;
    return s;
}

/* The sampled column value colT[m][k] of deform_src's offsets, in double (0 outside). */
static double sample_at(const problem *pr, int m, int k) {
    const conv_params *p = &pr->p;
    const int hw = p->Ho * p->Wo, n = m / hw, rem = m - n * hw, ho = rem / p->Wo, wo = rem - ho * p->Wo;
    const int K = p->KH * p->KW, tap = k / p->C, c = k - tap * p->C, g = c / (p->C / pr->G), r = tap / p->KW, t = tap % p->KW;
    const float *row = pr->hom + (int64_t)m * pr->dp.OCS;
    const int j = g * K + tap;
    const double mk = pr->has_mask ? row[2 * pr->G * K + j] : 1.0;
    const dt_bilin b = dt_bilin_make((float)(ho * p->SH - p->PH + r * p->DH) + row[2 * j],
                                     (float)(wo * p->SW - p->PW + t * p->DW) + row[2 * j + 1], p->H, p->W);
    const dt_bf16 *xn = pr->hx + (int64_t)n * p->H * p->W * p->C;
    double v = 0;
    for (int q = 0; q < 4; q++)
        if (b.ok[q]) v += (double)b.w[q] * dt_bf16_to_float(xn[dt_bilin_index(&b, q, p->W) * p->C + c]);
    return mk * v;
}

/* deform's reference: y[m][co] = sum over k = (tap, c) of w[co][k] times colT[m][k], the sample
 * of sample_at. */
static double ref_deform(const problem *pr, int m, int co, double *abs_sum) {
    const conv_params *p = &pr->p;
    double s = 0, sa = 0;
    for (int k = 0; k < p->K; k++) {
        const double prod = sample_at(pr, m, k) * dt_bf16_to_float(pr->hw[(int64_t)co * p->K + k]);
        s += prod, sa += fabs(prod);
    }
    *abs_sum = sa;
    return s;
}

/* dwgrad's reference: dW[co][k] = sum over m of dy[m][co] * colT[m][k]. */
static double ref_deform_wgrad(const problem *pr, int co, int k, double *abs_sum) {
    const conv_params *p = &pr->p;
    double s = 0, sa = 0;
    for (int m = 0; m < p->M; m++) {
        const double prod = (double)dt_bf16_to_float(pr->hdy[(int64_t)m * p->Cout + co]) * sample_at(pr, m, k);
        s += prod, sa += fabs(prod);
    }
    *abs_sum = sa;
    return s;
}

static double ref_at(const problem *pr, int pass, int m, int col, double *abs_sum) {
    return pass == PASS_DGRAD           ? ref_dgrad(pr, m, col, abs_sum)
           : pass == PASS_WGRAD         ? ref_wgrad(pr, m, col, abs_sum)
           : pass == PASS_DEFORM        ? ref_deform(pr, m, col, abs_sum)
           : pass == PASS_DEFORM_WGRAD  ? ref_deform_wgrad(pr, m, col, abs_sum)
                                        : ref_fprop(pr, m, col, abs_sum);
}

static float y_at(const void *h, int f32, int64_t i) {
    return f32 ? ((const float *)h)[i] : dt_bf16_to_float(((const dt_bf16 *)h)[i]);
}

typedef struct {
    int ok;
    int64_t checked, bad, nan;     /* against the CPU reference (sampled, or all for odd shapes) */
    double worst;                  /* max |y - ref| / tolerance */
    int64_t vs_n, vs_same, vs_bad; /* against ref_cublas: all elements */
    double vs_max;
} check;

/* The samples: every (m, co) of an odd shape, else `samples` random ones plus the corners
 * (first and last row and column: the edge tiles). */
static int64_t make_samples(const problem *pr, const gemm_view *p, int samples, dt_rng *r, int **ms, int **cs) {
    const int64_t all = (int64_t)p->M * p->NO;
    const int64_t ns = pr->sh->odd ? all : samples + 4;
    *ms = (int *)dt_xmalloc(sizeof(int) * (size_t)ns);
    *cs = (int *)dt_xmalloc(sizeof(int) * (size_t)ns);
    for (int64_t i = 0; i < ns; i++) {
        if (pr->sh->odd) (*ms)[i] = (int)(i / p->NO), (*cs)[i] = (int)(i % p->NO);
        else if (i < 4) (*ms)[i] = i & 1 ? p->M - 1 : 0, (*cs)[i] = i & 2 ? p->NO - 1 : 0;
        else (*ms)[i] = (int)dt_rng_below(r, (uint32_t)p->M), (*cs)[i] = (int)dt_rng_below(r, (uint32_t)p->NO);
    }
    return ns;
}

/* hy: the variant's y [M, NO] (its pass's view p) on the host; ref, sabs: the CPU reference at
 * the samples; hc: the pass's library output (fp32 when hc_f32, else bf16) or NULL. dgrad's
 * library output rounds twice (dcol, then dx), so there the comparison with it is reported, not
 * required: the double reference is the judge. */
static check check_output(const gemm_view *p, int pass, const void *hy, int f32, int64_t ns, const int *ms,
                          const int *cs, const double *ref, const double *sabs, const void *hc, int hc_f32) {
    check k;
    memset(&k, 0, sizeof k);
    const int64_t all = (int64_t)p->M * p->NO;
    double smean = 0;
    for (int64_t i = 0; i < all; i++)
        if (isnan(y_at(hy, f32, i))) k.nan++;
    for (int64_t i = 0; i < ns; i++) {
        const double y = y_at(hy, f32, (int64_t)ms[i] * p->NO + cs[i]);
        const double tol = ldexp(sabs[i], -7) + 1e-3, e = fabs(y - ref[i]);
        smean += sabs[i] / (double)ns;
        if (!(e <= tol)) k.bad++;
        if (e / tol > k.worst || isnan(e)) k.worst = isnan(e) ? INFINITY : e / tol;
    }
    k.checked = ns;
    /* against ref_cublas, every element: bitwise equal, or within one bf16 rounding of the larger
     * plus the fp32 accumulation differences (absolute: 1e-3 + 2^-16 times the mean S) */
    if (hc) {
        const double abs_tol = 1e-3 + ldexp(smean, -16);
        for (int64_t i = 0; i < all; i++) {
            const float a = y_at(hy, f32, i), b = y_at(hc, hc_f32, i);
            k.vs_n++;
            if (f32 == hc_f32 && !memcmp((const char *)hy + i * (f32 ? 4 : 2), (const char *)hc + i * (f32 ? 4 : 2), f32 ? 4 : 2)) {
                k.vs_same++;
                continue;
            }
            const double d = fabs((double)a - b), lim = ldexp(fmax(fabs(a), fabs(b)), -7) + abs_tol;
            if (!(d <= lim)) k.vs_bad++;
            if (d > k.vs_max || isnan(d)) k.vs_max = isnan(d) ? INFINITY : d;
        }
    }
    k.ok = k.bad == 0 && k.nan == 0 && (k.vs_bad == 0 || pass == PASS_DGRAD);
    return k;
}

/* ================================================================== main: validate, time, table */

typedef struct {
    const char *shape, *variant, *pass, *status;
    double ms, tflops, vs_ref;
    int r18, r50;
} row;

static int shape_picked(const conv_shape *sh, const char *list) {
    if (!list) return 1; /* default: every shape */
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (!strcmp(tok, "all")) return 1;
        if (!strcmp(tok, "r18") && sh->r18) return 1;
        if (!strcmp(tok, "r50") && sh->r50) return 1;
        if (!strcmp(tok, "odd") && sh->odd) return 1;
        if (!strcmp(tok, sh->name)) return 1;
    }
    return 0;
}

static void usage(void) {
    fprintf(stderr, "usage: conv_lab [--batch N] [--reps N] [--shapes NAME,...|r18|r50|odd|all] [--csv FILE] [--quick] "
                    "[--seed S] [--skip-time] [--pass fprop,dgrad,wgrad,deform,dwgrad]\nshapes:");
    for (int i = 0; i < NSHAPES; i++) fprintf(stderr, " %s", SHAPES[i].name);
    fprintf(stderr, "\n");
}

int main(int argc, char **argv) {
    dt_set_fatal_handler(exit); /* a failure outside a guarded call ends this program (dt_common.h) */
    int batch = 64, reps = 20, warmup = 3, samples = 4096, do_time = 1, quick = 0, passes = 0;
    const char *shapes = NULL, *csv_path = NULL;
    uint64_t seed = (uint64_t)time(NULL);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--shapes") && i + 1 < argc) shapes = argv[++i];
        else if (!strcmp(argv[i], "--csv") && i + 1 < argc) csv_path = argv[++i];
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--quick")) quick = 1, reps = 5, warmup = 1, samples = 1024;
        else if (!strcmp(argv[i], "--skip-time")) do_time = 0;
        else if (!strcmp(argv[i], "--pass") && i + 1 < argc) {
            char buf[64];
            snprintf(buf, sizeof buf, "%s", argv[++i]);
            for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                int found = 0;
                for (int q = 0; q < NPASSES; q++)
                    if (!strcmp(tok, PASS_NAME[q])) passes |= 1 << q, found = 1;
                if (!found) {
                    usage();
                    return 2;
                }
            }
        }
        else {
            usage();
            return 2;
        }
    }
    if (quick && !shapes) shapes = "r18,odd"; /* --quick: ResNet-18's convs and the odd shapes */
    if (!passes) passes = (1 << NPASSES) - 1;  /* default: every pass */
    if (batch < 1 || reps < 1) {
        usage();
        return 2;
    }
    if (dt_gpu_count() == 0) {
        fprintf(stderr, "conv_lab: no CUDA GPU visible\n");
        return 1;
    }
    dt_gpu_init(0);
    setvbuf(stdout, NULL, _IOLBF, 0); /* a crash or a timeout keeps every line printed before it */
    FILE *csv = NULL;
    if (csv_path && !(csv = fopen(csv_path, "w"))) dt_fatal("conv_lab: cannot write %s", csv_path);
    if (csv) fprintf(csv, "shape,pass,variant,status,M,N,K,ms,tflops,vs_ref_cublas,worst_err_over_tol,bitwise_vs_ref_pct\n");
    printf("conv_lab: batch %d, seed %llu (--seed to repeat), %d reps after %d warm-up, %s\n", batch,
           (unsigned long long)seed, reps, warmup, "stem C = 3 padded to 8 for the igemm variants");

    row *rows = (row *)dt_xmalloc(sizeof(row) * NSHAPES * NVARIANTS); /* a variant runs one pass */
    int nrows = 0, fails = 0;
    for (int si = 0; si < NSHAPES; si++) {
        const conv_shape *sh = &SHAPES[si];
        if (!shape_picked(sh, shapes)) continue;
        problem pr;
        problem_make(&pr, sh, batch, dt_hash64(seed ^ (uint64_t)(si + 1)));
        /* the conv's FLOPs, the same for both passes: 2 N Ho Wo Cout KH KW C (the real C) */
        const double flop = 2.0 * pr.p.M * pr.p.Cout * ((double)pr.p.KH * pr.p.KW * pr.creal);
        for (int pass = 0; pass < NPASSES; pass++) {
            if (!(passes & (1 << pass))) continue;
            int runs = 0; /* a pass no variant runs on this shape (deform on a 1x1) has no reference either */
            for (int vi = 0; vi < NVARIANTS; vi++) runs += VARIANTS[vi].pass == pass && VARIANTS[vi].supports(&pr);
            if (!runs) continue;
            const gemm_view *p = view_of(&pr, pass);
            const int64_t all = (int64_t)p->M * p->NO;
            /* the CPU reference at the samples */
            dt_rng r;
            dt_rng_seed(&r, dt_hash64(seed + 1000 + (uint64_t)si + 7919 * (uint64_t)pass));
            int *ms, *cs;
            /* wgrad's reference sums over all N*Ho*Wo positions: an eighth of the samples */
            const int wg = pass == PASS_WGRAD || pass == PASS_DEFORM_WGRAD;
            const int64_t ns = make_samples(&pr, p, wg ? (pass == PASS_WGRAD ? samples / 8 : samples / 32) : samples, &r, &ms, &cs);
            double *ref = (double *)dt_xmalloc(sizeof(double) * (size_t)ns);
            double *sabs = (double *)dt_xmalloc(sizeof(double) * (size_t)ns);
            for (int64_t i = 0; i < ns; i++) ref[i] = ref_at(&pr, pass, ms[i], cs[i], &sabs[i]);
            void *hy = dt_xmalloc(sizeof(float) * (size_t)all);
            void *hc = dt_xmalloc(sizeof(float) * (size_t)all); /* the library's output, as it is stored */
            double ref_ms = NAN;
            int have_ref = 0, hc_f32 = 0;
            for (int vi = 0; vi < NVARIANTS; vi++) {
                const variant *v = &VARIANTS[vi];
                if (v->pass != pass || !v->supports(&pr)) continue;
                row *rw = &rows[nrows++];
                memset(rw, 0, sizeof *rw);
                rw->shape = sh->name, rw->variant = v->name, rw->pass = PASS_NAME[pass], rw->r18 = sh->r18, rw->r50 = sh->r50;
                rw->ms = rw->tflops = rw->vs_ref = NAN;
                run_once(v, &pr);
                dt_copy_d2h(hy, p->y, (size_t)all * (v->f32out ? 4 : 2));
                check k = check_output(p, pass, hy, v->f32out, ns, ms, cs, ref, sabs, v->ref || !have_ref ? NULL : hc,
                                       hc_f32);
                if (v->extra && !v->extra(&pr, hy)) k.ok = 0;
                if (v->ref && k.ok) memcpy(hc, hy, (size_t)all * (v->f32out ? 4 : 2)), have_ref = 1, hc_f32 = v->f32out;
                printf("validate %-10s %-27s %s M %7d N %5d K %5d: %s  cpu %lld/%lld bad (worst %.2f of tol), %lld NaN",
                       sh->name, v->name, PASS_NAME[pass], p->M, p->NO, p->K, k.ok ? "PASS" : "FAIL", (long long)k.bad,
                       (long long)k.checked, k.worst, (long long)k.nan);
                if (k.vs_n)
                    printf(", vs the library %.1f%% bitwise, %lld beyond tol%s, max |diff| %.2e", 100.0 * k.vs_same / k.vs_n,
                           (long long)k.vs_bad, pass == PASS_DGRAD ? " (reported only)" : "", k.vs_max);
                printf("\n");
                rw->status = k.ok ? "PASS" : "FAIL";
                if (!k.ok) fails++;
                if (k.ok && do_time) {
                    timed_arg ta = {v, &pr};
                    rw->ms = dt_bench_time(timed, &ta, warmup, reps);
                    rw->tflops = flop / (rw->ms * 1e-3) / 1e12;
                    if (v->ref) ref_ms = rw->ms;
                    rw->vs_ref = rw->ms / ref_ms;
                }
                if (csv)
                    fprintf(csv, "%s,%s,%s,%s,%d,%d,%d,%.5f,%.2f,%.4f,%.3f,%.2f\n", sh->name, rw->pass, v->name, rw->status,
                            p->M, p->NO, p->K, rw->ms, rw->tflops, rw->vs_ref, k.worst,
                            k.vs_n ? 100.0 * k.vs_same / k.vs_n : NAN);
            }
            free(ms), free(cs), free(ref), free(sabs), free(hy), free(hc);
        }
        problem_free(&pr);
    }

    if (do_time) {
        printf("\n## conv_lab, bf16 NHWC, batch %d (ms: median of %d; TFLOP/s: the conv's FLOPs on the real C; x ref = "
               "ms / the pass's library ms, < 1 is faster)\n",
               batch, reps);
        printf("%-10s %-5s %-27s %-5s %9s %8s %7s\n", "shape", "pass", "variant", "", "ms", "TFLOP/s", "x ref");
        for (int i = 0; i < nrows; i++)
            printf("%-10s %-5s %-27s %-5s %9.4f %8.1f %7.3f\n", rows[i].shape, rows[i].pass, rows[i].variant, rows[i].status,
                   rows[i].ms, rows[i].tflops, rows[i].vs_ref);
        /* per network: each variant's time summed over the convs it ran, weighted by how many
         * the net has (a variant that skipped or failed a shape is marked incomplete); a shape
         * whose pass the library does not run (the stem's dgrad) is not the net's */
        printf("\n%-27s %-5s %14s %14s\n", "variant", "pass", "ResNet-18 ms", "ResNet-50 ms");
        for (int vi = 0; vi < NVARIANTS; vi++) {
            const char *refname = NULL;
            for (int vj = 0; vj < NVARIANTS; vj++)
                if (VARIANTS[vj].pass == VARIANTS[vi].pass && VARIANTS[vj].ref) refname = VARIANTS[vj].name;
            double s18 = 0, s50 = 0;
            int miss18 = 0, miss50 = 0, any = 0;
            for (int si = 0; si < NSHAPES; si++) {
                const conv_shape *sh = &SHAPES[si];
                if (!shape_picked(sh, shapes) || sh->odd) continue;
                double ms = NAN;
                int applies = 0;
                for (int i = 0; i < nrows; i++) {
                    if (strcmp(rows[i].shape, sh->name)) continue;
                    if (refname && !strcmp(rows[i].variant, refname)) applies = 1;
                    if (!strcmp(rows[i].variant, VARIANTS[vi].name)) ms = rows[i].ms;
                }
                if (!applies) continue;
                if (!isnan(ms)) any = 1;
                if (sh->r18) {
                    if (isnan(ms)) miss18++;
                    else s18 += sh->r18 * ms;
                }
                if (sh->r50) {
                    if (isnan(ms)) miss50++;
                    else s50 += sh->r50 * ms;
                }
            }
            if (!any) continue;
            printf("%-27s %-5s %11.3f%-3s %11.3f%-3s\n", VARIANTS[vi].name, PASS_NAME[VARIANTS[vi].pass], s18,
                   miss18 ? " (i)" : "", s50, miss50 ? " (i)" : "");
        }
        printf("(i): incomplete - some of the net's convs not run (shape not picked, not supported, or FAIL)\n");
        /* the plan a per-shape choice would make: each shape's fastest passing variant of each
         * pass, and the nets' sums with it (what the library could ship, against its own path) */
        printf("\n%-10s %-5s %-27s %9s %7s\n", "best", "pass", "variant", "ms", "x ref");
        for (int pass = 0; pass < NPASSES; pass++) {
            double b18 = 0, b50 = 0, r18 = 0, r50 = 0;
            for (int si = 0; si < NSHAPES; si++) {
                const conv_shape *sh = &SHAPES[si];
                if (!shape_picked(sh, shapes) || sh->odd) continue;
                int best = -1;
                for (int i = 0; i < nrows; i++) {
                    if (strcmp(rows[i].shape, sh->name) || strcmp(rows[i].pass, PASS_NAME[pass]) || isnan(rows[i].ms)) continue;
                    if (best < 0 || rows[i].ms < rows[best].ms) best = i;
                }
                if (best < 0) continue;
                const double ref = rows[best].ms / rows[best].vs_ref;
                printf("%-10s %-5s %-27s %9.4f %7.3f\n", sh->name, PASS_NAME[pass], rows[best].variant, rows[best].ms,
                       rows[best].vs_ref);
                b18 += sh->r18 * rows[best].ms, b50 += sh->r50 * rows[best].ms;
                r18 += sh->r18 * ref, r50 += sh->r50 * ref;
            }
            printf("best-of %s: ResNet-18 %.3f ms (library %.3f), ResNet-50 %.3f ms (library %.3f)\n", PASS_NAME[pass], b18, r18,
                   b50, r50);
        }
    }
    printf("\nconv_lab: %d validation failure%s\n", fails, fails == 1 ? "" : "s");
    if (csv) fclose(csv);
    free(rows);
    return fails ? 1 : 0;
}
