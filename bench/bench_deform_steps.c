/* The per-step breakdown of build/bench --what deform: every kernel of both deformable paths
 * timed alone on one chunk of the layer's batch (fresh random inputs), scaled to the batch;
 * f32 tensors, products strict or TF32 (--precision fp32 or tf32).
 * The deft rows are the pieces of one deft training step; the unfused rows the NCHW
 * three-operator pieces beside them; "col CN/NC" compares the two orientations of the main
 * GEMMs. Then the sums the targets are stated in (forward, backward, offset conv f+b,
 * dx + offset + mask gradients) and the achieved bandwidth of the memory-bound steps. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_common.h"

#ifdef DT_CUDA
#include "ops/deform/deform_nchw.h"
#include "ops/deform/deform_nhwc.h"
#include "core/dt_alloc.h"
#include "ops/deform/dt_deform.h"
#include "ops/dt_layers.h"
#include "ops/pointwise/elementwise.h"
#include "ops/linear/gemm.h"
#include "ops/conv/im2col.h"
#include "ops/pointwise/layout.h"
#include "ops/deform/offset_conv.h"

enum {
    S_X_NHWC, S_OFFCONV, S_OFFCONV_GEMM, S_SAMPLE, S_TILE_FUSE, S_TILE_STAGE, S_TILE_BOTH, S_GEMM_FWD_NC, S_IM2COL_NCHW,
    S_GEMM_FWD_CN, S_DY_NHWC, S_GEMM_DW_NC, S_GEMM_DCOL_NC, S_INDEX, S_GATHER, S_OFFGRADS, S_SCATTER, S_OFFCONV_DW,
    S_OFFCONV_DX, S_DX_NCHW, S_COORD, S_COL2IM, S_COL2IM_DET, S_OFFCONV_BWD_GEMM, S_GEMM_DW_CN, S_GEMM_DCOL_CN, S_N
};
static const char *STEP_NAMES[S_N] = {
    "fwd: x to channels-last", "fwd: offset conv (implicit GEMM)", "fwd: offset conv (im2col+cuBLAS, unfused)",
    "fwd: sampling", "fwd: tile fuse=1 (offconv+sampling)", "fwd: tile stage=1 (halo 1)", "fwd: tile fuse=1 stage=1",
    "fwd: main GEMM, col NC (+ y to NCHW)", "fwd: deform im2col NCHW (unfused)", "fwd: main GEMM, col CN (unfused)",
    "bwd: dy to channels-last", "bwd: main GEMM dW, col NC", "bwd: main GEMM dcol, col NC", "bwd: inverse index (sort)",
    "bwd: gather dx (+ corner dots)", "bwd: offset/mask grads", "bwd: dx by float4 atomics (+ grads)",
    "bwd: offset conv dW + db", "bwd: offset conv dx", "bwd: dx to NCHW", "bwd: coord grads (unfused)",
    "bwd: col2im atomics (unfused)", "bwd: col2im fixed point (unfused det)", "bwd: offset conv (im2col+GEMMs, unfused)",
    "bwd: main GEMM dW, col CN (unfused)", "bwd: main GEMM dcol, col CN (unfused)"};

typedef struct {
    int which;
    dt_deform_plan p, pt; /* pt: the plan the tile steps run with */
    int64_t nb, bP, HW;
    const float *x, *w, *woff, *boff, *dy, *off, *mask;
    float *xT, *wT, *om, *col, *dcol, *colcn, *dcolcn, *t, *dxT, *dx, *dom, *D, *dw, *dwoff, *dboff, *offn;
    void *ws;
    dt_deform_index idx;
    dt_math math; /* the products: strict fp32 or TF32 (--precision) */
} step_arg;

/* The f32 GEMMs of the steps, with the run's products. */
static void gemm(const step_arg *a, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                 const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    dt_gemm_f32_cuda(a->math, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, DT_F32, ldc);
}

static void step_run(void *v) {
    step_arg *a = v;
    dt_deform_plan *p = &a->p;
    int64_t nb = a->nb, C = p->prob.C, Cout = p->prob.Cout, P = p->P, KC = p->KC, bP = a->bP, OC = p->OC;
    switch (a->which) {
    case S_X_NHWC: dt_nchw_to_nhwc_cuda(nb, C, a->HW, a->x, C, a->xT); break;
    case S_OFFCONV: dt_offconv_fwd_cuda(p, nb, a->xT, a->woff, a->boff, a->om, a->ws); break;
    case S_OFFCONV_GEMM:
        dt_im2col_cuda(a->x, nb, C, p->prob.H, p->prob.W, p->prob.g, p->prob.Ho, p->prob.Wo, a->colcn);
        gemm(a, 0, 0, OC, bP, KC, 1.0f, a->woff, KC, a->colcn, bP, 0.0f, a->t, bP);
        dt_cnhw_to_nchw_cuda(a->t, nb, OC, P, a->boff, a->offn);
        break;
    case S_SAMPLE: dt_deform_sample_nhwc_cuda(p, nb, a->xT, a->om, a->col); break;
    case S_TILE_FUSE:
    case S_TILE_STAGE:
    case S_TILE_BOTH: {
        dt_deform_plan q = a->pt;
        q.knobs.fuse_offset = a->which != S_TILE_STAGE;
        q.knobs.stage = a->which != S_TILE_FUSE;
        dt_deform_tile_forward_cuda(&q, nb, a->xT, q.knobs.fuse_offset ? a->woff : NULL, a->boff, a->om, a->col, a->ws);
        break;
    }
    case S_GEMM_FWD_NC:
        gemm(a, 0, 1, bP, Cout, KC, 1.0f, a->col, KC, a->wT, KC, 0.0f, a->t, Cout);
        dt_nhwc_to_nchw_cuda(nb, Cout, P, a->t, Cout, NULL, 0.0f, a->dx);
        break;
    case S_IM2COL_NCHW: dt_deform_im2col_cuda(p, nb, a->x, a->off, a->mask, a->colcn); break;
    case S_GEMM_FWD_CN:
        gemm(a, 0, 0, Cout, bP, KC, 1.0f, a->w, KC, a->colcn, bP, 0.0f, a->t, bP);
        dt_cnhw_to_nchw_cuda(a->t, nb, Cout, P, NULL, a->dx);
        break;
    case S_DY_NHWC: dt_nchw_to_nhwc_cuda(nb, Cout, P, a->dy, Cout, a->t); break;
    case S_GEMM_DW_NC: gemm(a, 1, 0, KC, Cout, bP, 1.0f, a->col, KC, a->t, Cout, 0.0f, a->dw, Cout); break; /* dW^T */
    case S_GEMM_DCOL_NC: gemm(a, 0, 0, bP, KC, Cout, 1.0f, a->t, Cout, a->wT, KC, 0.0f, a->dcol, KC); break;
    case S_INDEX: dt_deform_index_build_cuda(p, nb, a->om, a->ws, &a->idx); break;
    case S_GATHER: dt_deform_gather_dx_cuda(p, nb, &a->idx, a->xT, a->dcol, 0.0f, a->dxT, DT_F32, a->D); break;
    case S_OFFGRADS: dt_deform_offset_grads_cuda(p, nb, a->om, a->D, 1, a->dom); break;
    case S_SCATTER:
        dt_fill_cuda(nb * a->HW * C, 0.0f, a->dxT);
        dt_deform_scatter_dx_cuda(p, nb, a->xT, a->om, a->dcol, 1, a->dxT, a->dom);
        break;
    case S_OFFCONV_DW: dt_offconv_bwd_cuda(p, nb, a->xT, a->dom, a->woff, 0.0f, a->dwoff, 0.0f, a->dboff, NULL, 0.0f, NULL, a->ws); break;
    case S_OFFCONV_DX: dt_offconv_bwd_cuda(p, nb, a->xT, a->dom, a->woff, 0.0f, NULL, 0.0f, NULL, NULL, 1.0f, a->dxT, a->ws); break;
    case S_DX_NCHW: dt_nhwc_to_nchw_cuda(nb, C, a->HW, a->dxT, C, NULL, 0.0f, a->dx); break;
    case S_COORD: dt_deform_col2im_coord_cuda(p, nb, a->dcolcn, a->x, a->off, a->mask, a->offn, 0.0f, NULL, 0.0f); break;
    case S_COL2IM: dt_deform_col2im_cuda(p, nb, a->dcolcn, a->off, a->mask, a->dx); break;
    case S_COL2IM_DET: dt_deform_col2im_det_cuda(p, nb, a->dcolcn, a->off, a->mask, 0.0f, a->dx); break;
    case S_OFFCONV_BWD_GEMM:
        dt_im2col_cuda(a->x, nb, C, p->prob.H, p->prob.W, p->prob.g, p->prob.Ho, p->prob.Wo, a->colcn);
        gemm(a, 0, 1, OC, KC, bP, 1.0f, a->t, bP, a->colcn, bP, 0.0f, a->dwoff, KC);
        gemm(a, 1, 0, KC, bP, OC, 1.0f, a->woff, KC, a->t, bP, 0.0f, a->colcn, bP);
        dt_col2im_cuda(a->colcn, nb, C, p->prob.H, p->prob.W, p->prob.g, p->prob.Ho, p->prob.Wo, 1.0f, a->dx);
        break;
    case S_GEMM_DW_CN: gemm(a, 0, 1, Cout, KC, bP, 1.0f, a->t, bP, a->colcn, bP, 0.0f, a->dw, KC); break;
    case S_GEMM_DCOL_CN: gemm(a, 1, 0, KC, bP, Cout, 1.0f, a->w, KC, a->t, bP, 0.0f, a->dcolcn, bP); break;
    }
}

static float *gbuf(size_t floats) { return dt_gpu_malloc(floats * sizeof(float) + 256); }

void dt_bench_deform_breakdown(const dt_bench_opts *o, FILE *csv) {
    int version = o->mask ? 2 : 1;
    double bw = 0;
    if (o->dtype != DT_F32) { /* the steps are the f32 kernels, on f32 buffers */
        printf("\n## per-step breakdown: f32 kernels only (--precision fp32 or tf32), not run for --precision %s\n",
               o->precision);
        return;
    }
    printf("\n## per-step breakdown, DCNv%d (ms for the whole batch of %d: one chunk timed, scaled by the chunk count)\n",
           version, o->batch);
    printf("%-44s", "step");
    for (int si = 0; si < o->nshapes; si++) printf(" %7s", o->shapes[si]->name);
    printf("\n");
    double t[7][S_N];
    double gbs_sample[7], gbs_gather[7];
    for (int si = 0; si < o->nshapes; si++) {
        const dt_bench_shape *sh = o->shapes[si];
        step_arg a;
        memset(&a, 0, sizeof a);
        dt_deform_knobs k = dt_deform_knobs_default();
        const char *bad = dt_deform_plan_init(&a.p, o->batch, sh->cin, sh->h, sh->h, sh->cout, dt_geom(3, sh->stride, 1, 1), 1,
                                              version == 2, DT_DEFORM_DEFT, &k, dt_conv_col_budget());
        if (!bad) bad = dt_deform_plan_types(&a.p, DT_F32, DT_NCHW, o->math, dt_conv_col_budget());
        if (bad) dt_fatal("bench: %s", bad);
        a.math = o->math;
        a.pt = a.p;
        a.pt.halo = 1;
        dt_deform_plan *p = &a.p;
        int64_t nb = p->nb, C = p->prob.C, Cout = p->prob.Cout, P = p->P, KC = p->KC, OC = p->OC;
        a.nb = nb;
        a.bP = nb * P;
        a.HW = p->prob.H * p->prob.W;
        double scale = (double)o->batch / nb;
        dt_tensor *x = dt_bench_randn(nb, C, p->prob.H, p->prob.W, 1.0f, 900 + si);
        dt_tensor *w = dt_bench_randn(Cout, C, 3, 3, 0.05f, 901 + si);
        dt_tensor *woff = dt_bench_randn(OC, C, 3, 3, o->sigma / sqrtf((float)KC), 902 + si);
        dt_tensor *boff = dt_bench_randn(1, 1, 1, OC, 0.0f, 1);
        dt_tensor *dy = dt_bench_randn(nb, Cout, p->prob.Ho, p->prob.Wo, 1.0f, 903 + si);
        dt_tensor *off = dt_bench_randn(nb, 2 * p->GK, p->prob.Ho, p->prob.Wo, o->sigma, 904 + si);
        dt_tensor *mask = version == 2 ? dt_bench_randn(nb, p->GK, p->prob.Ho, p->prob.Wo, 0.2f, 905 + si) : NULL;
        a.x = x->data; a.w = w->data; a.woff = woff->data; a.boff = boff->data; a.dy = dy->data;
        a.off = off->data; a.mask = mask ? mask->data : NULL;
        a.xT = gbuf(nb * a.HW * C);
        a.wT = gbuf(Cout * KC);
        a.om = gbuf(a.bP * p->OCS);
        a.col = gbuf(a.bP * KC);
        a.dcol = gbuf(a.bP * KC);
        a.colcn = gbuf(a.bP * KC);
        a.dcolcn = gbuf(a.bP * KC);
        a.t = gbuf(a.bP * (Cout > OC ? Cout : OC));
        a.dxT = gbuf(nb * a.HW * C);
        a.dx = gbuf(nb * a.HW * (C > Cout ? C : Cout));
        a.dom = gbuf(a.bP * p->OCS);
        a.D = gbuf(a.bP * p->K * p->G * 4);
        a.dw = gbuf(Cout * KC);
        a.dwoff = gbuf(OC * KC);
        a.dboff = gbuf(OC);
        a.offn = gbuf(a.bP * OC);
        size_t ws = dt_deform_index_ws_bytes_cuda(p, nb), w2 = dt_offconv_ws_bytes_cuda(p, nb);
        a.ws = dt_gpu_malloc(ws > w2 ? ws : w2);
        dt_memset_gpu(a.dx, 0, nb * a.HW * (C > Cout ? C : Cout) * sizeof(float));
        /* real inputs for every step: channels-last x and weights, offsets from the offset conv,
         * a real dcol (dY W) in both layouts */
        dt_nchw_to_nhwc_cuda(nb, C, a.HW, a.x, C, a.xT);
        dt_nchw_to_nhwc_cuda(Cout, C, p->K, a.w, C, a.wT);
        dt_offconv_fwd_cuda(p, nb, a.xT, a.woff, a.boff, a.om, a.ws);
        dt_nhwc_to_nchw_cuda(nb, 2 * p->GK, P, a.om, p->OCS, NULL, 0.0f, off->data); /* the op's offsets = the conv's */
        a.which = S_DY_NHWC;
        step_run(&a);
        a.which = S_GEMM_DCOL_NC;
        step_run(&a);
        dt_nchw_to_cnhw_cuda(a.dy, nb, Cout, P, a.t + 0); /* t: dy in CN for the CN GEMMs below */
        a.which = S_GEMM_DCOL_CN;
        step_run(&a);
        dt_nchw_to_nhwc_cuda(nb, Cout, P, a.dy, Cout, a.t); /* t: dy in NC again */
        a.which = S_SAMPLE;
        step_run(&a);
        a.which = S_INDEX;
        step_run(&a);
        a.which = S_GATHER;
        step_run(&a);
        a.which = S_OFFGRADS;
        step_run(&a);
        int reps = o->reps < 10 ? o->reps : 10;
        for (int st = 0; st < S_N; st++) {
            /* the CN GEMMs need dy in CN layout in t; everything else reads it in NC */
            int cn = st == S_GEMM_DW_CN || st == S_GEMM_DCOL_CN || st == S_OFFCONV_BWD_GEMM;
            if (cn) dt_nchw_to_cnhw_cuda(a.dy, nb, Cout, P, a.t);
            a.which = st;
            t[si][st] = dt_bench_time(step_run, &a, 2, reps) * scale;
            if (cn) dt_nchw_to_nhwc_cuda(nb, Cout, P, a.dy, Cout, a.t);
            if (st == S_TILE_FUSE || st == S_TILE_BOTH || st == S_OFFCONV) { /* om rewritten: same values */ }
        }
        /* bandwidth: sampling writes colT and reads x and om; the gather reads dcol (4x), x, index */
        double bytes_sample = 4.0 * ((double)a.bP * KC + (double)nb * a.HW * C + (double)a.bP * p->OCS);
        double bytes_gather = 4.0 * ((double)a.bP * KC + 2.0 * nb * a.HW * C) + 28.0 * a.bP * p->K;
        gbs_sample[si] = bytes_sample * scale / (t[si][S_SAMPLE] * 1e-3) / 1e9;
        gbs_gather[si] = bytes_gather * scale / (t[si][S_GATHER] * 1e-3) / 1e9;
        (void)bw;
        float *bufs[] = {a.xT, a.wT, a.om, a.col, a.dcol, a.colcn, a.dcolcn, a.t, a.dxT, a.dx, a.dom, a.D, a.dw, a.dwoff,
                         a.dboff, a.offn};
        for (size_t b = 0; b < sizeof bufs / sizeof *bufs; b++) dt_gpu_free(bufs[b]);
        dt_gpu_free(a.ws);
        dt_tensor_free(x); dt_tensor_free(w); dt_tensor_free(woff); dt_tensor_free(boff); dt_tensor_free(dy);
        dt_tensor_free(off); dt_tensor_free(mask);
    }
    for (int st = 0; st < S_N; st++) {
        printf("%-44s", STEP_NAMES[st]);
        for (int si = 0; si < o->nshapes; si++) printf(" %7.3f", t[si][st]);
        printf("\n");
        if (csv)
            for (int si = 0; si < o->nshapes; si++)
                fprintf(csv, "step,%s,%s,,,%.4f,,,,,,\n", o->shapes[si]->name, STEP_NAMES[st], t[si][st]);
    }
    static const struct { const char *name; int steps[12]; } SUMS[] = {
        {"deft forward (x, offconv, sample, GEMM)", {S_X_NHWC, S_OFFCONV, S_SAMPLE, S_GEMM_FWD_NC, -1}},
        {"deft backward, dx=gather", {S_X_NHWC, S_DY_NHWC, S_SAMPLE, S_GEMM_DW_NC, S_GEMM_DCOL_NC, S_INDEX, S_GATHER,
                                      S_OFFGRADS, S_OFFCONV_DW, S_OFFCONV_DX, S_DX_NCHW, -1}},
        {"offset conv f+b (target l1 <= 0.5)", {S_OFFCONV, S_OFFCONV_DW, S_OFFCONV_DX, -1}},
        {"dx + offset/mask grads, gather (l1 <= 0.8)", {S_INDEX, S_GATHER, S_OFFGRADS, -1}},
        {"dx + offset/mask grads, atomics", {S_SCATTER, -1}},
        {"main GEMMs, col NC", {S_GEMM_FWD_NC, S_GEMM_DW_NC, S_GEMM_DCOL_NC, -1}},
        {"main GEMMs, col CN", {S_GEMM_FWD_CN, S_GEMM_DW_CN, S_GEMM_DCOL_CN, -1}},
    };
    printf("%-44s\n", "sums:");
    for (size_t k = 0; k < sizeof SUMS / sizeof *SUMS; k++) {
        printf("  %-42s", SUMS[k].name);
        for (int si = 0; si < o->nshapes; si++) {
            double s = 0;
            for (int j = 0; SUMS[k].steps[j] >= 0; j++) s += t[si][SUMS[k].steps[j]];
            printf(" %7.3f", s);
        }
        printf("\n");
    }
    printf("  %-42s", "sampling GB/s (colT + x + om)");
    for (int si = 0; si < o->nshapes; si++) printf(" %7.0f", gbs_sample[si]);
    printf("\n  %-42s", "gather GB/s (dcol + x + dx + index)");
    for (int si = 0; si < o->nshapes; si++) printf(" %7.0f", gbs_gather[si]);
    printf("\n");
}
#endif
