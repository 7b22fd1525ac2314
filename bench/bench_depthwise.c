/* build/bench --what depthwise: the depthwise family (ops/conv/depthwise.h) through
 * dt_conv2d_grouped (groups = C) on
 *   - issue 38's 1-D grid (the JAX user's): batch 32, output length 1024, kernel 1/4/16/64,
 *     channels 32/128/512, dilation 1, 2, 4, ..., 128, no padding, stride 1 - the input grows
 *     with the dilation, 1024 + (k-1) d, so the output stays 1024 (tensors [32, C, 1, W]);
 *   - MobileNetV2's depthwise 3x3s at 224 input (pad 1, stride 1 and 2), batch --batch (256 for
 *     the numbers);
 * fwd and fwd + bwd (dx and dW), median ms of --reps after --warmup, in --precision (fp32: f32
 * NCHW; bf16: bf16 NHWC, fp32 weight gradient), --conv-algo gemm for the column path instead.
 * The floor per point is the larger of its bytes at the device's measured copy rate (a 1 GiB
 * device-to-device copy, read + write) and its FMAs at the fp32 FMA rate, SMs x 128 lanes x
 * the clock, taken as 1.98 GHz (the H100/H200 SXM boost clock: the library reads no clock;
 * the header line prints the rate used). bf16 runs count fp32 FMAs too (the kernels widen).
 * Bytes: fwd reads x and w, writes y; the backward reads dy twice (dgrad, wgrad), x once,
 * writes dx and dW (fp32). FMAs: N Cout Ho Wo kh kw a pass. cuDNN's times come from
 * bench/torch_depthwise.py's output (--torch FILE: lines `dw1d PREC k C d fwd fb` and
 * `dw2d PREC name fwd fb`, ms). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_common.h"
#include "bench/dw_shapes.h"
#include "core/dt_alloc.h"
#include "core/dt_autograd.h"
#include "core/dt_device.h"
#include "ops/dt_layers.h"

#define CLOCK_GHZ 1.98

typedef struct {
    dt_tensor *x, *w, *gy; /* w: the fp32 master (a parameter) */
    dt_conv_geom g;
    int64_t groups;
    dt_math math;
    dt_conv_algo algo;
    int backward;
} dw_run_arg;

static void dw_run(void *p) {
    dw_run_arg *a = p;
    dt_scope_begin();
    if (a->backward) {
        a->x->grad_valid = 0; /* overwrite, like a fresh step */
        a->w->grad_valid = 0;
        dt_tensor *y = dt_conv2d_grouped_algo(a->x, dt_bench_operand(a->w), NULL, a->g, a->groups, a->math, a->algo);
        dt_backward_with(y, a->gy);
    } else {
        dt_set_grad_enabled(0);
        dt_conv2d_grouped_algo(a->x, dt_bench_operand(a->w), NULL, a->g, a->groups, a->math, a->algo);
        dt_set_grad_enabled(1);
    }
    dt_scope_end();
}

/* cuDNN's (fwd, f+b) ms for a key line of --torch ("dw1d fp32 4 128 8"), or -1 */
static void torch_times(const char *file, const char *key, double *f, double *fb) {
    *f = *fb = -1;
    FILE *t = file[0] ? fopen(file, "r") : NULL;
    if (!t) return;
    char line[256];
    const size_t n = strlen(key);
    while (fgets(line, sizeof line, t))
        if (!strncmp(line, key, n) && line[n] == ' ' && sscanf(line + n, "%lf %lf", f, fb) != 2) *f = *fb = -1;
    fclose(t);
}

typedef struct {
    double copy_bps, fma_ps; /* the floor's rates */
    FILE *csv;
} dw_ctx;

/* times one depthwise problem and prints its row (label: the table's first columns) */
static void dw_point(const dt_bench_opts *o, const dw_ctx *c, const char *table, const char *label, const char *key,
                     int64_t N, int64_t C, int64_t H, int64_t W, dt_conv_geom g, uint64_t seed) {
    const int64_t Ho = dt_conv_out_size(H, g.kh, g.sh, g.ph, g.dh), Wo = dt_conv_out_size(W, g.kw, g.sw, g.pw, g.dw);
    dt_tensor *x = dt_bench_act(o, N, C, H, W, 1.0f, seed);
    dt_tensor *w = dt_bench_weight(o, C, 1, g.kh, g.kw, sqrtf(1.0f / (float)(g.kh * g.kw)), seed + 1);
    dt_tensor *gy = dt_bench_act(o, N, C, Ho, Wo, 1.0f, seed + 2);
    dt_requires_grad(x);
    dw_run_arg a = {x, w, gy, g, C, o->math, o->conv_algo, 0};
    const double fwd = dt_bench_time(dw_run, &a, o->warmup, o->reps);
    a.backward = 1;
    const double fb = dt_bench_time(dw_run, &a, o->warmup, o->reps);
    const double e = (double)dt_dtype_size(o->dtype), nx = (double)(N * C * H * W), ny = (double)(N * C * Ho * Wo);
    const double nw = (double)(C * g.kh * g.kw), fmas = ny * g.kh * g.kw;
    const double bytes_f = e * (nx + ny + nw), bytes_fb = bytes_f + e * (2 * ny + 2 * nx + nw) + 4.0 * nw;
    const double floor_f = 1e3 * fmax(bytes_f / c->copy_bps, fmas / c->fma_ps);
    const double floor_fb = 1e3 * fmax(bytes_fb / c->copy_bps, 3 * fmas / c->fma_ps);
    double tf, tfb;
    torch_times(o->torch, key, &tf, &tfb);
    printf("%-28s %8.4f %8.4f %8.4f %8.4f %6.1f %6.1f %8.4f %8.4f %6.2f %6.2f\n", label, fwd, fb, floor_f, floor_fb,
           100 * floor_f / fwd, 100 * floor_fb / fb, tf, tfb, tf > 0 ? tf / fwd : NAN, tfb > 0 ? tfb / fb : NAN);
    if (c->csv)
        fprintf(c->csv, "%s,%s,%s,%lld,%.5f,%.5f,%.5f,%.5f,%.5f,%.5f,%.5f,%.5f\n", table, key, o->precision,
                (long long)C, fwd, fb, floor_f, floor_fb, tf, tfb, bytes_f, fmas);
    dt_tensor_free(x), dt_tensor_free(w), dt_tensor_free(gy);
}

static void header(void) {
    printf("%-28s %8s %8s %8s %8s %6s %6s %8s %8s %6s %6s\n", "shape", "fwd ms", "f+b ms", "fwd flr", "f+b flr",
           "%flr", "%flr", "cuDNN f", "cuDNN fb", "x cud", "x cud");
}

void dt_bench_depthwise(const dt_bench_opts *o, FILE *csv) {
    dw_ctx c = {dt_bench_copy_rate(), (double)dt_gpu_sm_count() * 128 * CLOCK_GHZ * 1e9, csv};
    printf("\n## depthwise conv (dt_conv2d_grouped, groups = C, conv_algo %s), %s %s; floor: copy %.0f GB/s, fp32 FMA "
           "%.1f T/s (%d SMs x 128 x %.2f GHz); %%flr = 100 x floor / time; x cud = cuDNN's time / ours\n",
           dt_conv_algo_name(o->conv_algo), dt_dtype_name(o->dtype), dt_layout_name(o->layout), c.copy_bps / 1e9,
           c.fma_ps / 1e12, dt_gpu_sm_count(), CLOCK_GHZ);
    if (csv) fprintf(csv, "table,key,precision,channels,fwd_ms,fb_ms,fwd_floor_ms,fb_floor_ms,cudnn_fwd_ms,cudnn_fb_ms,fwd_bytes,fwd_fmas\n");
    printf("\n### 1-D: batch 32, output length 1024, stride 1, no padding, input 1024 + (k-1) d\n");
    header();
    static const int ks[] = {1, 4, 16, 64}, cs[] = {32, 128, 512};
    uint64_t seed = 100;
    for (int ki = 0; ki < 4; ki++)
        for (int ci = 0; ci < 3; ci++)
            for (int d = 1; d <= 128; d *= 2) {
                char label[64], key[64];
                snprintf(label, sizeof label, "k %d C %d d %d", ks[ki], cs[ci], d);
                snprintf(key, sizeof key, "dw1d %s %d %d %d", o->precision, ks[ki], cs[ci], d);
                const dt_conv_geom g = {1, ks[ki], 1, 1, 0, 0, 1, d};
                dw_point(o, &c, "dw1d", label, key, 32, cs[ci], 1, 1024 + (int64_t)(ks[ki] - 1) * d, g, seed += 3);
            }
    printf("\n### MobileNetV2's depthwise 3x3s (224 input, pad 1), batch %d\n", o->batch);
    header();
    for (int i = 0; i < DT_DW_MBV2_SHAPES; i++) {
        const dt_dw_mbv2_shape *m = &dt_dw_mbv2_shapes[i];
        char key[64];
        snprintf(key, sizeof key, "dw2d %s %s", o->precision, m->name);
        for (char *k = key; *k; k++)
            if (*k == ' ' && k > key + 4 + strlen(o->precision) + 1) *k = '_';
        dw_point(o, &c, "dw2d", m->name, key, o->batch, m->c, m->h, m->h, dt_geom(3, m->s, 1, 1), seed += 3);
    }
}
