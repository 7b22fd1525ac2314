/* Plain conv2d timings for build/bench. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench/bench_common.h"
#include "core/dt_alloc.h"
#include "core/dt_autograd.h"
#include "ops/dt_layers.h"

typedef struct {
    dt_tensor *x, *w, *gy; /* w: the fp32 master (a parameter) */
    dt_conv_geom g;
    dt_math math;
    dt_conv_algo algo;
    int backward;
} conv_run_arg;

static void conv_run(void *p) {
    conv_run_arg *a = p;
    dt_scope_begin();
    if (a->backward) {
        a->x->grad_valid = 0; /* overwrite, like a fresh step */
        a->w->grad_valid = 0;
        dt_tensor *y = dt_conv2d_algo(a->x, dt_bench_operand(a->w), NULL, a->g, a->math, a->algo);
        dt_backward_with(y, a->gy);
    } else {
        dt_set_grad_enabled(0);
        dt_conv2d_algo(a->x, dt_bench_operand(a->w), NULL, a->g, a->math, a->algo);
        dt_set_grad_enabled(1);
    }
    dt_scope_end();
}

double dt_bench_conv_fb(const dt_bench_opts *o, dt_tensor *x, dt_tensor *w, dt_tensor *gy, dt_conv_geom g, int warmup,
                        int reps) {
    dt_requires_grad(x); /* w is a parameter: its gradient buffer lives between runs */
    conv_run_arg a = {x, w, gy, g, o->math, o->conv_algo, 1};
    return dt_bench_time(conv_run, &a, warmup, reps);
}

void dt_bench_conv(const dt_bench_opts *o, FILE *csv) {
    size_t default_budget = dt_conv_col_budget();
    for (int bi = 0; bi < o->nbudgets; bi++) {
        int mb = o->budgets_mb[bi] ? o->budgets_mb[bi] : (int)(default_budget >> 20);
        dt_conv_set_col_budget((size_t)mb << 20);
        printf("\n## plain conv2d (im2col + cuBLAS %s), %s %s, column budget %d MiB\n",
               o->dtype == DT_BF16 ? "bf16 GEMM" : o->math == DT_MATH_TF32 ? "TF32 GEMM" : "SGEMM", dt_dtype_name(o->dtype),
               dt_layout_name(o->layout), mb);
        printf("%-5s %9s %9s %9s %9s %8s %9s %8s\n", "layer", "fwd ms", "f+b ms", "TFLOP/s", "cuDNN f+b", "/cuDNN",
               "GEMM flr", "/floor");
        double sum_ours = 0, sum_cudnn = 0, sum_floor = 0;
        int have_all = 1;
        for (int s = 0; s < o->nshapes; s++) {
            const dt_bench_shape *sh = o->shapes[s];
            int idx = (int)(sh - DT_RESNET18_SHAPES);
            int64_t N = o->batch, Ho = (sh->h - 1) / sh->stride + 1;
            dt_tensor *x = dt_bench_act(o, N, sh->cin, sh->h, sh->h, 1.0f, 10 + s);
            /* a parameter: its gradient buffer lives between runs */
            dt_tensor *w = dt_bench_weight(o, sh->cout, sh->cin, 3, 3, sqrtf(2.0f / (9 * sh->cin)), 20 + s);
            dt_tensor *gy = dt_bench_act(o, N, sh->cout, Ho, Ho, 1.0f, 30 + s);
            dt_requires_grad(x);
            conv_run_arg a = {x, w, gy, dt_geom(3, sh->stride, 1, 1), o->math, o->conv_algo, 0};
            double fwd = dt_bench_time(conv_run, &a, o->warmup, o->reps);
            a.backward = 1;
            double fb = dt_bench_time(conv_run, &a, o->warmup, o->reps);
            int64_t K = sh->cin * 9, NP = N * Ho * Ho;
            double flops = 3.0 * 2.0 * sh->cout * K * NP;
            double floor_ms = dt_bench_gemm_floor(o, sh->cout, K, NP, o->warmup, o->reps);
            double cud = o->torch_plain_fb[idx];
            printf("%-5s %9.3f %9.3f %9.1f %9.3f %8.2f %9.3f %8.2f\n", sh->name, fwd, fb, flops / fb / 1e9, cud,
                   cud > 0 ? fb / cud : NAN, floor_ms, fb / floor_ms);
            if (csv)
                fprintf(csv, "conv,%s,plain,%d,%.4f,%.4f,%.2f,%.4f,%.4f,,,\n", sh->name, mb, fwd, fb, flops / fb / 1e9,
                        floor_ms, cud);
            sum_ours += sh->count * fb;
            sum_floor += sh->count * floor_ms;
            if (cud > 0) sum_cudnn += sh->count * cud; else have_all = 0;
            dt_tensor_free(x);
            dt_tensor_free(w);
            dt_tensor_free(gy);
        }
        printf("sum over ResNet-18's 3x3 convs (4 l1, l2a, 3 l2, l3a, 3 l3, l4a, 3 l4): ours %.2f ms", sum_ours);
        if (have_all && sum_cudnn > 0) printf(", cuDNN %.2f ms, ratio %.2f", sum_cudnn, sum_ours / sum_cudnn);
        printf(", GEMM floor %.2f ms (ratio %.2f)\n", sum_floor, sum_ours / sum_floor);
        if (csv) fprintf(csv, "conv_sum,all,plain,%d,,%.4f,,%.4f,%.4f,,,\n", mb, sum_ours, sum_floor, sum_cudnn);
    }
    dt_conv_set_col_budget(default_budget);
}
