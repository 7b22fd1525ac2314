/* bench_common.h: options, shapes, timing helpers and the table printers of build/bench. */
#ifndef DT_BENCH_COMMON_H
#define DT_BENCH_COMMON_H

#include <stdio.h>

#include "core/dt_common.h"
#include "core/dt_tensor.h"
#include "ops/dt_layers.h" /* dt_conv_algo */

#ifdef __cplusplus
extern "C" {
#endif

#define DT_BENCH_MAX 16

typedef struct {
    const char *name;
    int cin, cout, h, stride;
    int count; /* how many of this shape ResNet-18 has */
} dt_bench_shape;

extern const dt_bench_shape DT_RESNET18_SHAPES[7];

typedef struct {
    int batch, reps, warmup, mask;
    int what_conv, what_deform, what_depthwise; /* --what: depthwise only when named */
    float sigma;
    char precision[8]; /* fp32 | tf32 | bf16 (dt_dtype.h), and what it means for the tensors: */
    dt_dtype dtype;    /* activations and products: f32 (fp32, tf32) or bf16 */
    dt_layout layout;  /* NCHW (fp32, tf32) or NHWC (bf16) */
    dt_math math;      /* f32 products: strict or TF32 */
    dt_conv_algo conv_algo; /* --conv-algo: the plain convs' engine in bf16 (default auto) */
    int nshapes;
    const dt_bench_shape *shapes[7];
    int nbudgets;
    int budgets_mb[DT_BENCH_MAX];
    int nmodes;
    char modes[DT_BENCH_MAX][32];
    char torch[512], csv[512];
    /* parsed from --torch: per shape, plain f+b, plain fwd, dcn fwd, dcn f+b (ms); <0 if absent */
    double torch_plain_fb[7], torch_plain_f[7], torch_dcn_f[7], torch_dcn_fb[7];
} dt_bench_opts;

int dt_bench_parse(dt_bench_opts *o, int argc, char **argv, dt_err *err);
/* Median of reps timings of fn(arg) with CUDA events, after warmup calls. */
double dt_bench_time(void (*fn)(void *), void *arg, int warmup, int reps);
/* Bytes read + written a second by a 1 GiB device-to-device copy (the memory-bound floors' rate). */
double dt_bench_copy_rate(void);
void dt_bench_conv(const dt_bench_opts *o, FILE *csv);
void dt_bench_deform(const dt_bench_opts *o, FILE *csv);
/* The depthwise sweep (bench_depthwise.c): the 1-D grid of issue 38 and MobileNetV2's 3x3s. */
void dt_bench_depthwise(const dt_bench_opts *o, FILE *csv);
/* The per-step table of the deformable paths (CUDA builds; bench_deform_steps.c). */
void dt_bench_deform_breakdown(const dt_bench_opts *o, FILE *csv);
/* GEMM floor: the three full-batch cuBLAS GEMMs of a conv (fwd, data grad, weight grad), in the
 * precision of o (bf16: bf16 operands, bf16 outputs but the fp32 weight gradient). */
double dt_bench_gemm_floor(const dt_bench_opts *o, int64_t M, int64_t K, int64_t NP, int warmup, int reps);
/* Plain conv2d forward+backward time (median), for ratios: x and gy from dt_bench_act, w from
 * dt_bench_weight, products as o says. */
#include "ops/conv/conv_geom.h"
double dt_bench_conv_fb(const dt_bench_opts *o, dt_tensor *x, dt_tensor *w, dt_tensor *gy, dt_conv_geom g, int warmup,
                        int reps);
/* An f32 NCHW GPU tensor ~ N(0, std), reproducible from seed. */
dt_tensor *dt_bench_randn(int64_t n, int64_t c, int64_t h, int64_t w, float std, uint64_t seed);
/* The same values as an activation of o's precision: f32 NCHW, or bf16 NHWC. */
dt_tensor *dt_bench_act(const dt_bench_opts *o, int64_t n, int64_t c, int64_t h, int64_t w, float std, uint64_t seed);
/* A conv weight [cout, cin, kh, kw] ~ N(0, std): an fp32 parameter (its gradient buffer lives
 * between runs) in o's layout; in bf16 with its bf16 working copy, rounded now. */
dt_tensor *dt_bench_weight(const dt_bench_opts *o, int64_t cout, int64_t cin, int64_t kh, int64_t kw, float std,
                           uint64_t seed);
/* The operand a product takes for weight w: its working copy when it has one, else w. */
dt_tensor *dt_bench_operand(dt_tensor *w);
/* Gives master w (a parameter) a bf16 working copy rounded from it now (bf16 runs). */
void dt_bench_make_work(dt_tensor *w);

#ifdef __cplusplus
}
#endif
#endif
