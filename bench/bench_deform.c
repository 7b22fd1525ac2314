/* Deformable conv timings for build/bench.
 *
 * Modes: "unfused", "deft", each optionally followed by knob settings, e.g.
 *   deft:dx=atomic   deft:fuse=1   deft:stage=1:halo=2   deft:swizzle=0   deft:tile=4x8   deft:det=1
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

#include "bench/bench_common.h"
#include "ops/deform/deform_nchw.h"
#include "ops/deform/deform_nhwc.h"
#include "core/dt_alloc.h"
#include "core/dt_autograd.h"
#include "ops/deform/dt_deform.h"
#include "ops/init/dt_init.h"
#include "ops/dt_layers.h"
#include "core/dt_timer.h"

typedef struct {
    dt_deform_mode mode;
    dt_deform_knobs k;
    char label[32];
} mode_spec;

static int parse_mode(const char *s, mode_spec *m, char *err, int errlen) {
    char buf[64];
    snprintf(buf, sizeof buf, "%s", s);
    snprintf(m->label, sizeof m->label, "%s", s);
    m->k = dt_deform_knobs_default();
    char *colon = strchr(buf, ':');
    if (colon) *colon = 0;
    int md = dt_deform_mode_parse(buf);
    if (md < 0) return snprintf(err, errlen, "unknown mode '%s' (unfused or deft)", buf), -1;
    m->mode = (dt_deform_mode)md;
    for (char *t = colon ? strtok(colon + 1, ",:") : NULL; t; t = strtok(NULL, ",:")) {
        int a, b;
        char w[16];
        if (sscanf(t, "stage=%d", &a) == 1) m->k.stage = a;
        else if (sscanf(t, "fuse=%d", &a) == 1) m->k.fuse_offset = a;
        else if (sscanf(t, "swizzle=%d", &a) == 1) m->k.swizzle = a;
        else if (sscanf(t, "halo=%d", &a) == 1) m->k.halo = a;
        else if (sscanf(t, "det=%d", &a) == 1) m->k.deterministic = a;
        else if (sscanf(t, "tile=%dx%d", &a, &b) == 2) { m->k.tile_h = a; m->k.tile_w = b; }
        else if (sscanf(t, "dx=%15s", w) == 1 && dt_deform_dx_parse(w) >= 0) m->k.dx = dt_deform_dx_parse(w);
        else return snprintf(err, errlen, "unknown knob '%s' in mode %s (stage= fuse= swizzle= halo= det= tile=HxW dx=gather|atomic)", t, s), -1;
    }
    if (dt_deform_knobs_validate(&m->k, err, errlen)) return -1;
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
    /* the unfused baseline is f32 NCHW (as PyTorch runs it): it has no bf16 (channels-last) run */
    for (int i = 0; i < nm; i++)
        if (modes[i].mode == DT_DEFORM_UNFUSED && o->dtype != DT_F32) {
            fprintf(stderr, "bench: mode %s: the unfused baseline runs f32 NCHW only, not --precision %s (deft runs "
                            "bf16: --modes deft,...)\n", modes[i].label, o->precision);
            exit(2);
        }
    double bw = dt_bench_copy_rate();
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
        double gemm_main = dt_bench_gemm_floor(o, sh->cout, CK, N * P, o->warmup, o->reps);
        /* the offset conv computes in fp32 (TF32 / bf16 tensor cores as the precision says) */
        double gemm_off = dt_bench_gemm_floor(o, OC, CK, N * P, o->warmup, o->reps);
        double col_bytes = (double)CK * N * P * dt_dtype_size(o->dtype);
        double floor_ms = gemm_main + gemm_off + 4 * col_bytes / bw * 1e3;
        dt_tensor *x = dt_bench_act(o, N, sh->cin, sh->h, sh->h, 1.0f, 100 + si);
        dt_tensor *gy = dt_bench_act(o, N, sh->cout, Ho, Ho, 1.0f, 200 + si);
        dt_requires_grad(x);
        dt_tensor *w = dt_bench_weight(o, sh->cout, sh->cin, 3, 3, sqrtf(2.0f / (9 * sh->cin)), 300 + si);
        double plain_fb = dt_bench_conv_fb(o, x, w, gy, g, o->warmup, o->reps);
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
            dt_deform_conv_init(&l, NULL, "bench", sh->cin, sh->cout, g, 1, version, 0, 0.0f, DT_GPU, o->layout);
            dt_init_normal(l.off_weight, 0.0f, o->sigma / sqrtf((float)CK));
            l.mode = modes[mi].mode;
            l.knobs = modes[mi].k;
            l.math = o->math;
            if (o->dtype == DT_BF16) dt_bench_make_work(l.weight); /* the operand of a bf16 input */
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
    dt_bench_deform_breakdown(o, csv);
#endif
}

