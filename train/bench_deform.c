/* Deformable conv timings for build/bench.
 *
 * Modes: "unfused", "deft", each optionally followed by knob settings, e.g.
 *   deft:stage=0   deft:fuse=0   deft:swizzle=0   deft:halo=3   deft:tile=4x8   deft:det=1
 *   unfused:det=1
 * For each shape: layer forward and forward+backward (gradients of the input, the weight and
 * the offset conv), with offsets ~ N(0, sigma) px (offset-conv weights N(0, sigma/sqrt(C*9))).
 * Ratios: to our plain conv, to cuDNN's plain conv and torchvision's DCN (--torch), and to the
 * "columns materialized" floor measured here: the three main-conv GEMMs + the three offset-
 * conv GEMMs + 4 passes over the column buffer at the measured copy bandwidth.
 * Kernel table: the sampling kernels alone - bytes and FLOPs counted, achieved GB/s and
 * arithmetic intensity (FLOP/byte) of unfused im2col vs the fused DefT forward. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "deform.h"
#include "deft.h"
#include "dt_alloc.h"
#include "dt_autograd.h"
#include "dt_deform.h"
#include "dt_init.h"
#include "dt_layers.h"
#include "dt_timer.h"

typedef struct {
    dt_deform_mode mode;
    dt_deft_knobs k;
    char label[32];
} mode_spec;

static int parse_mode(const char *s, mode_spec *m, char *err, int errlen) {
    char buf[64];
    snprintf(buf, sizeof buf, "%s", s);
    snprintf(m->label, sizeof m->label, "%s", s);
    m->k = dt_deft_knobs_default();
    char *colon = strchr(buf, ':');
    if (colon) *colon = 0;
    int md = dt_deform_mode_parse(buf);
    if (md < 0) return snprintf(err, errlen, "unknown mode '%s' (unfused or deft)", buf), -1;
    m->mode = (dt_deform_mode)md;
    for (char *t = colon ? strtok(colon + 1, ",:") : NULL; t; t = strtok(NULL, ",:")) {
        int a, b;
        if (sscanf(t, "stage=%d", &a) == 1) m->k.stage = a;
        else if (sscanf(t, "fuse=%d", &a) == 1) m->k.fuse_offset = a;
        else if (sscanf(t, "swizzle=%d", &a) == 1) m->k.swizzle = a;
        else if (sscanf(t, "halo=%d", &a) == 1) m->k.halo = a;
        else if (sscanf(t, "det=%d", &a) == 1) m->k.deterministic = a;
        else if (sscanf(t, "tile=%dx%d", &a, &b) == 2) { m->k.tile_h = a; m->k.tile_w = b; }
        else return snprintf(err, errlen, "unknown knob '%s' in mode %s (stage= fuse= swizzle= halo= det= tile=HxW)", t, s), -1;
    }
    return 0;
}

typedef struct {
    dt_deform_conv *l;
    dt_tensor *x, *gy;
    int backward;
} run_arg;

static void layer_run(void *p) {
    run_arg *a = p;
    dt_scope_begin();
    if (a->backward) {
        a->x->grad_valid = 0;
        a->l->weight->grad_valid = a->l->off_weight->grad_valid = a->l->off_bias->grad_valid = 0;
        dt_tensor *y = dt_deform_conv_forward(a->l, a->x);
        dt_backward_with(y, a->gy);
    } else {
        dt_set_grad_enabled(0);
        dt_deform_conv_forward(a->l, a->x);
        dt_set_grad_enabled(1);
    }
    dt_scope_end();
}

typedef struct {
    float *src, *dst;
    size_t bytes;
} copy_arg;
static void copy_run(void *p) {
    copy_arg *c = p;
    dt_copy_d2d(c->dst, c->src, c->bytes);
}

/* Device-to-device copy bandwidth (bytes read + written per second), 1 GiB. */
static double copy_bandwidth(void) {
    copy_arg c;
    c.bytes = (size_t)1 << 30;
    c.src = dt_gpu_malloc(c.bytes);
    c.dst = dt_gpu_malloc(c.bytes);
    dt_memset_gpu(c.src, 0x3f, c.bytes);
    double ms = dt_bench_time(copy_run, &c, 3, 10);
    dt_gpu_free(c.src);
    dt_gpu_free(c.dst);
    return 2.0 * c.bytes / (ms * 1e-3);
}

#ifdef DT_CUDA
typedef struct {
    dt_deform_shape s;
    dt_deft_cfg c;
    const float *x, *woff, *boff;
    float *off, *mask, *col;
    int deft;
} kern_arg;
static void kern_run(void *p) {
    kern_arg *k = p;
    if (k->deft) dt_deft_fwd_cuda(&k->c, k->x, k->woff, k->boff, k->off, k->mask, k->col);
    else dt_deform_im2col_cuda(&k->s, k->x, k->off, k->mask, k->col);
}
#endif

#ifdef DT_CUDA
void dt_bench_deform_breakdown(const dt_bench_opts *o, FILE *csv);
#endif

void dt_bench_deform(const dt_bench_opts *o, FILE *csv) {
    mode_spec modes[DT_BENCH_MAX];
    int nm = 0;
    for (int i = 0; i < o->nmodes; i++) {
        char err[256];
        if (parse_mode(o->modes[i], &modes[nm], err, sizeof err)) {
            fprintf(stderr, "bench: %s\n", err);
            exit(2);
        }
        nm++;
    }
    double bw = copy_bandwidth();
    int version = o->mask ? 2 : 1;
    printf("\n## deformable conv (DCNv%d), offsets ~ N(0, %.2f) px, device copy bandwidth %.0f GB/s\n", version, o->sigma,
           bw / 1e9);
    /* per-mode sums over ResNet-18 */
    double sum_fb[DT_BENCH_MAX] = {0}, sum_tv = 0, sum_cudnn = 0, sum_floor = 0, sum_plain = 0;
    int have_torch = 1;
    printf("%-5s %-22s %8s %8s %6s %8s %7s %7s %8s %7s %5s\n", "layer", "mode", "fwd ms", "f+b ms", "/plain", "TV f+b",
           "TV/us", "/cuDNN", "floor", "/floor", "halo");
    for (int si = 0; si < o->nshapes; si++) {
        const dt_bench_shape *sh = o->shapes[si];
        int idx = (int)(sh - DT_RESNET18_SHAPES);
        int64_t N = o->batch, Ho = (sh->h - 1) / sh->stride + 1, P = Ho * Ho, CK = (int64_t)sh->cin * 9;
        int64_t OC = (version == 2 ? 27 : 18);
        dt_conv_geom g = dt_geom(3, sh->stride, 1, 1);
        /* floors and our plain conv, measured here */
        double gemm_main = dt_bench_gemm_floor(sh->cout, CK, N * P, o->warmup, o->reps);
        double gemm_off = dt_bench_gemm_floor(OC, CK, N * P, o->warmup, o->reps);
        double col_bytes = (double)CK * N * P * 4;
        double floor_ms = gemm_main + gemm_off + 4 * col_bytes / bw * 1e3;
        dt_tensor *x = dt_bench_randn(N, sh->cin, sh->h, sh->h, 1.0f, 100 + si);
        dt_tensor *gy = dt_bench_randn(N, sh->cout, Ho, Ho, 1.0f, 200 + si);
        dt_requires_grad(x);
        dt_tensor *w = dt_bench_randn(sh->cout, sh->cin, 3, 3, sqrtf(2.0f / (9 * sh->cin)), 300 + si);
        double plain_fb = dt_bench_conv_fb(x, w, gy, g, o->warmup, o->reps);
        dt_tensor_free(w);
        double tv = o->torch_dcn_fb[idx], cud = o->torch_plain_fb[idx];
        if (tv < 0 || cud < 0) have_torch = 0;
        sum_tv += sh->count * tv;
        sum_cudnn += sh->count * cud;
        sum_floor += sh->count * floor_ms;
        sum_plain += sh->count * plain_fb;
        for (int mi = 0; mi < nm; mi++) {
            dt_deform_conv l;
            dt_set_seed(400 + si);
            dt_init_reseed();
            dt_deform_conv_init(&l, NULL, "bench", sh->cin, sh->cout, g, 1, version, 0, 0.0f, DT_GPU);
            dt_init_normal(l.off_weight, 0.0f, o->sigma / sqrtf((float)CK));
            l.mode = modes[mi].mode;
            l.knobs = modes[mi].k;
            run_arg a = {&l, x, gy, 0};
            double fwd = dt_bench_time(layer_run, &a, o->warmup, o->reps);
            a.backward = 1;
            double fb = dt_bench_time(layer_run, &a, o->warmup, o->reps);
            sum_fb[mi] += sh->count * fb;
            char halo[16] = "-";
            if (l.mode == DT_DEFORM_DEFT) snprintf(halo, sizeof halo, "%d%s", l.cur_halo, l.knobs.halo < 0 ? "a" : "");
            printf("%-5s %-22s %8.3f %8.3f %6.2f %8.3f %7.2f %7.2f %8.3f %7.2f %5s\n", sh->name, modes[mi].label, fwd, fb,
                   fb / plain_fb, tv, tv > 0 ? tv / fb : NAN, cud > 0 ? fb / cud : NAN, floor_ms, fb / floor_ms, halo);
            if (csv)
                fprintf(csv, "deform,%s,%s,,%.4f,%.4f,,%.4f,%.4f,%.4f,%.4f,%s\n", sh->name, modes[mi].label, fwd, fb, floor_ms,
                        cud, tv, plain_fb, halo);
            fflush(stdout);
            dt_tensor_free(l.weight);
            dt_tensor_free(l.off_weight);
            dt_tensor_free(l.off_bias);
        }
        dt_tensor_free(x);
        dt_tensor_free(gy);
    }
    printf("sums over ResNet-18's 16 3x3 convs: plain (ours) %.2f ms, floor %.2f ms", sum_plain, sum_floor);
    if (have_torch) printf(", cuDNN %.2f ms, torchvision DCN %.2f ms", sum_cudnn, sum_tv);
    printf("\n");
    for (int mi = 0; mi < nm; mi++) {
        printf("  %-22s %8.2f ms  /floor %.2f", modes[mi].label, sum_fb[mi], sum_fb[mi] / sum_floor);
        if (have_torch) printf("  TV/ours %.2f  /cuDNN %.2f", sum_tv / sum_fb[mi], sum_fb[mi] / sum_cudnn);
        printf("\n");
        if (csv) fprintf(csv, "deform_sum,all,%s,,,%.4f,,%.4f,%.4f,%.4f,%.4f,\n", modes[mi].label, sum_fb[mi], sum_floor, sum_cudnn, sum_tv, sum_plain);
    }

#ifdef DT_CUDA
    /* Kernel table: the sampling kernels alone on one chunk. */
    printf("\n## sampling kernels alone (forward): counted bytes and FLOPs\n");
    printf("%-5s %10s %9s %7s %10s %9s %7s %8s\n", "layer", "im2col ms", "GB/s", "FLOP/B", "deft ms", "GB/s", "FLOP/B",
           "AI ratio");
    for (int si = 0; si < o->nshapes; si++) {
        const dt_bench_shape *sh = o->shapes[si];
        int64_t N = o->batch, Ho = (sh->h - 1) / sh->stride + 1, P = Ho * Ho, CK = (int64_t)sh->cin * 9;
        int64_t OC = version == 2 ? 27 : 18, GK = 9;
        int64_t nb = dt_conv_chunk(N, CK * P);
        dt_conv_geom g = dt_geom(3, sh->stride, 1, 1);
        dt_tensor *x = dt_bench_randn(nb, sh->cin, sh->h, sh->h, 1.0f, 500 + si);
        dt_tensor *woff = dt_bench_randn(OC, sh->cin, 3, 3, o->sigma / sqrtf((float)CK), 600 + si);
        dt_tensor *boff = dt_bench_randn(1, 1, 1, OC, 0.0f, 1);
        dt_tensor *off = dt_bench_randn(nb, 2 * GK, Ho, Ho, o->sigma, 700 + si);
        dt_tensor *mask = version == 2 ? dt_bench_randn(nb, GK, Ho, Ho, 0.2f, 800 + si) : NULL;
        float *col = dt_gpu_malloc((size_t)CK * nb * P * sizeof(float));
        kern_arg k;
        k.s = (dt_deform_shape){nb, sh->cin, sh->h, sh->h, Ho, Ho, 1, g};
        dt_deft_knobs kn = dt_deft_knobs_default();
        k.c = (dt_deft_cfg){(int)nb, sh->cin, sh->h, sh->h, (int)Ho, (int)Ho, 1, version == 2, g, kn.tile_h, kn.tile_w, 2,
                            kn.swizzle, kn.stage, 0};
        k.x = x->data;
        k.woff = woff->data;
        k.boff = boff->data;
        k.off = off->data;
        k.mask = mask ? mask->data : NULL;
        k.col = col;
        k.deft = 0;
        double t_un = dt_bench_time(kern_run, &k, o->warmup, o->reps);
        k.deft = 1;
        double t_df = dt_bench_time(kern_run, &k, o->warmup, o->reps);
        double ncol = (double)CK * nb * P, nx = (double)nb * sh->cin * sh->h * sh->h, noff = (double)nb * OC * P;
        double bytes_un = 4 * (ncol + nx + noff), flops_un = 9 * ncol;                   /* 4 FMA + mask per value */
        double bytes_df = 4 * (ncol + nx + noff + (double)OC * CK), flops_df = flops_un + 2.0 * OC * CK * nb * P;
        double ai_un = flops_un / bytes_un, ai_df = flops_df / bytes_df;
        printf("%-5s %10.3f %9.0f %7.2f %10.3f %9.0f %7.2f %8.2f\n", sh->name, t_un, bytes_un / t_un / 1e6, ai_un, t_df,
               bytes_df / t_df / 1e6, ai_df, ai_df / ai_un);
        if (csv)
            fprintf(csv, "kernel,%s,im2col_vs_deft,,%.4f,%.4f,%.2f,%.0f,%.0f,%.3f,%.3f,\n", sh->name, t_un, t_df,
                    ai_df / ai_un, bytes_un / t_un / 1e6, bytes_df / t_df / 1e6, ai_un, ai_df);
        dt_gpu_free(col);
        dt_tensor_free(x);
        dt_tensor_free(woff);
        dt_tensor_free(boff);
        dt_tensor_free(off);
        dt_tensor_free(mask);
    }
    dt_bench_deform_breakdown(o, csv);
#endif
}

#ifdef DT_CUDA
/* ---- per-step breakdown of one chunk: which kernel costs what ---- */

#include "bias.h"
#include "gemm.h"
#include "im2col.h"

typedef struct {
    int which;
    dt_deform_shape s;
    dt_deft_cfg c;
    int64_t Cout, OC, CK, bP;
    const float *x, *w, *woff, *boff, *dy;
    float *off, *mask, *col, *col2, *t, *dx, *dom, *dw, *dwoff;
    void *ws, *ws_det;
} step_arg;

enum { S_OFFCONV, S_IM2COL_DEF, S_DEFT_FUSED, S_DEFT_SAMPLE, S_GEMM_FWD, S_GEMM_DW, S_GEMM_DCOL, S_COORD, S_COL2IM,
       S_COL2IM_DET, S_DEFT_BWD, S_DEFT_BWD_NOSTAGE, S_OFFCONV_BWD, S_NSTEPS };
static const char *STEP_NAMES[S_NSTEPS] = {
    "offset conv (im2col+GEMM)", "deform im2col (unfused)", "deft fwd fused (offconv+sample)", "deft sample only",
    "main GEMM fwd (+relayout)", "main GEMM dW", "main GEMM dcol", "coord grad (unfused)", "col2im atomics (unfused)",
    "col2im deterministic", "deft bwd (staged)", "deft bwd (stage=0)", "offset conv bwd (im2col+2 GEMM+col2im)"};

static void step_run(void *p) {
    step_arg *a = p;
    const dt_deform_shape *s = &a->s;
    dt_deft_grad_out go = {a->dom, a->dom + 2 * 9 * s->G * a->s.Ho * a->s.Wo, a->OC * s->Ho * s->Wo, a->OC * s->Ho * s->Wo, 0, 0, 1};
    switch (a->which) {
    case S_OFFCONV:
        dt_im2col_cuda(a->x, s->nb, s->C, s->H, s->W, s->g, s->Ho, s->Wo, a->col);
        dt_gemm_cuda(0, 0, a->OC, a->bP, a->CK, 1.0f, a->woff, a->CK, a->col, a->bP, 0.0f, a->t, a->bP);
        dt_cnhw_to_nchw_cuda(a->t, s->nb, a->OC, s->Ho * s->Wo, a->boff, a->dom);
        break;
    case S_IM2COL_DEF: dt_deform_im2col_cuda(s, a->x, a->off, a->mask, a->col); break;
    case S_DEFT_FUSED: dt_deft_fwd_cuda(&a->c, a->x, a->woff, a->boff, a->off, a->mask, a->col); break;
    case S_DEFT_SAMPLE: dt_deft_fwd_cuda(&a->c, a->x, NULL, NULL, a->off, a->mask, a->col); break;
    case S_GEMM_FWD:
        dt_gemm_cuda(0, 0, a->Cout, a->bP, a->CK, 1.0f, a->w, a->CK, a->col, a->bP, 0.0f, a->t, a->bP);
        dt_cnhw_to_nchw_cuda(a->t, s->nb, a->Cout, s->Ho * s->Wo, NULL, a->col2);
        break;
    case S_GEMM_DW: dt_gemm_cuda(0, 1, a->Cout, a->CK, a->bP, 1.0f, a->dy, a->bP, a->col, a->bP, 0.0f, a->dw, a->CK); break;
    case S_GEMM_DCOL: dt_gemm_cuda(1, 0, a->CK, a->bP, a->Cout, 1.0f, a->w, a->CK, a->dy, a->bP, 0.0f, a->col2, a->bP); break;
    case S_COORD: dt_deform_col2im_coord_cuda(s, a->col2, a->x, a->off, a->mask, a->dom, 0.0f, NULL, 0.0f); break;
    case S_COL2IM: dt_deform_col2im_cuda(s, a->col2, a->off, a->mask, a->dx); break;
    case S_COL2IM_DET: dt_deform_col2im_det_cuda(s, a->col2, a->off, a->mask, 0.0f, a->dx, a->ws_det); break;
    case S_DEFT_BWD:
    case S_DEFT_BWD_NOSTAGE: {
        dt_deft_cfg c = a->c;
        c.stage = a->which == S_DEFT_BWD;
        dt_deft_bwd_cuda(&c, a->col2, a->x, a->off, a->mask, a->dx, 0.0f, &go, a->ws);
        break;
    }
    case S_OFFCONV_BWD:
        dt_im2col_cuda(a->x, s->nb, s->C, s->H, s->W, s->g, s->Ho, s->Wo, a->col);
        dt_gemm_cuda(0, 1, a->OC, a->CK, a->bP, 1.0f, a->t, a->bP, a->col, a->bP, 0.0f, a->dwoff, a->CK);
        dt_gemm_cuda(1, 0, a->CK, a->bP, a->OC, 1.0f, a->woff, a->CK, a->t, a->bP, 0.0f, a->col, a->bP);
        dt_col2im_cuda(a->col, s->nb, s->C, s->H, s->W, s->g, s->Ho, s->Wo, 1.0f, a->dx);
        break;
    }
}

void dt_bench_deform_breakdown(const dt_bench_opts *o, FILE *csv) {
    int version = o->mask ? 2 : 1;
    printf("\n## per-step breakdown (ms for the whole batch of %d: one chunk timed, scaled by the chunk count)\n", o->batch);
    printf("%-40s", "step");
    for (int si = 0; si < o->nshapes; si++) printf(" %7s", o->shapes[si]->name);
    printf("\n");
    double t[7][S_NSTEPS];
    for (int si = 0; si < o->nshapes; si++) {
        const dt_bench_shape *sh = o->shapes[si];
        int64_t N = o->batch, Ho = (sh->h - 1) / sh->stride + 1, P = Ho * Ho, CK = (int64_t)sh->cin * 9, GK = 9;
        int64_t OC = version == 2 ? 27 : 18, nb = dt_conv_chunk(N, CK * P), Cout = sh->cout;
        double scale = (double)N / nb;
        dt_conv_geom g = dt_geom(3, sh->stride, 1, 1);
        step_arg a;
        memset(&a, 0, sizeof a);
        a.s = (dt_deform_shape){nb, sh->cin, sh->h, sh->h, Ho, Ho, 1, g};
        a.c = (dt_deft_cfg){(int)nb, sh->cin, sh->h, sh->h, (int)Ho, (int)Ho, 1, version == 2, g, 0, 0, 2, 1, 1, 0};
        a.Cout = Cout;
        a.OC = OC;
        a.CK = CK;
        a.bP = nb * P;
        dt_tensor *x = dt_bench_randn(nb, sh->cin, sh->h, sh->h, 1.0f, 900 + si);
        dt_tensor *w = dt_bench_randn(Cout, sh->cin, 3, 3, 0.05f, 901 + si);
        dt_tensor *woff = dt_bench_randn(OC, sh->cin, 3, 3, o->sigma / sqrtf((float)CK), 902 + si);
        dt_tensor *boff = dt_bench_randn(1, 1, 1, OC, 0.0f, 1);
        dt_tensor *dy = dt_bench_randn(1, 1, Cout, nb * P, 1.0f, 903 + si);
        dt_tensor *off = dt_bench_randn(nb, 2 * GK, Ho, Ho, o->sigma, 904 + si);
        dt_tensor *mask = version == 2 ? dt_bench_randn(nb, GK, Ho, Ho, 0.2f, 905 + si) : NULL;
        a.x = x->data; a.w = w->data; a.woff = woff->data; a.boff = boff->data; a.dy = dy->data;
        a.off = off->data; a.mask = mask ? mask->data : NULL;
        a.col = dt_gpu_malloc((size_t)CK * nb * P * 4);
        a.col2 = dt_gpu_malloc((size_t)CK * nb * P * 4);
        a.t = dt_gpu_malloc((size_t)(Cout > OC ? Cout : OC) * nb * P * 4);
        a.dx = dt_gpu_malloc((size_t)nb * sh->cin * sh->h * sh->h * 4);
        a.dom = dt_gpu_malloc((size_t)nb * OC * P * 4);
        a.dw = dt_gpu_malloc((size_t)Cout * CK * 4);
        a.dwoff = dt_gpu_malloc((size_t)OC * CK * 4);
        a.ws = dt_gpu_malloc(dt_deft_bwd_ws_bytes(&a.c));
        a.ws_det = dt_gpu_malloc(dt_deform_det_ws_bytes(&a.s));
        dt_memset_gpu(a.dx, 0, (size_t)nb * sh->cin * sh->h * sh->h * 4);
        dt_memset_gpu(a.t, 0, (size_t)(Cout > OC ? Cout : OC) * nb * P * 4);
        /* dcol for the backward steps: a real one (W^T dY) */
        a.which = S_GEMM_DCOL;
        step_run(&a);
        a.which = S_IM2COL_DEF;
        step_run(&a);
        for (int st = 0; st < S_NSTEPS; st++) {
            a.which = st;
            t[si][st] = dt_bench_time(step_run, &a, 2, o->reps < 10 ? o->reps : 10) * scale;
            if (st == S_GEMM_DCOL) { a.which = S_IM2COL_DEF; step_run(&a); } /* col holds samples again */
        }
        dt_gpu_free(a.col); dt_gpu_free(a.col2); dt_gpu_free(a.t); dt_gpu_free(a.dx); dt_gpu_free(a.dom);
        dt_gpu_free(a.dw); dt_gpu_free(a.dwoff); dt_gpu_free(a.ws); dt_gpu_free(a.ws_det);
        dt_tensor_free(x); dt_tensor_free(w); dt_tensor_free(woff); dt_tensor_free(boff); dt_tensor_free(dy);
        dt_tensor_free(off); dt_tensor_free(mask);
    }
    for (int st = 0; st < S_NSTEPS; st++) {
        printf("%-40s", STEP_NAMES[st]);
        for (int si = 0; si < o->nshapes; si++) printf(" %7.3f", t[si][st]);
        printf("\n");
        if (csv)
            for (int si = 0; si < o->nshapes; si++)
                fprintf(csv, "step,%s,%s,,,%.4f,,,,,,\n", o->shapes[si]->name, STEP_NAMES[st], t[si][st]);
    }
}
#endif
