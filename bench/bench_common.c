#include "bench/bench_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/pointwise/convert.h"
#include "core/dt_alloc.h"
#include "core/dt_autograd.h"
#include "core/dt_device.h"
#include "ops/pointwise/dt_shared_kernels.h"
#include "ops/init/dt_init.h"
#include "ops/dt_ops.h"
#include "core/dt_param.h"
#include "core/dt_timer.h"
#include "ops/linear/gemm.h"

const dt_bench_shape DT_RESNET18_SHAPES[7] = {
    {"l1", 64, 64, 56, 1, 4},    {"l2a", 64, 128, 56, 2, 1},  {"l2", 128, 128, 28, 1, 3}, {"l3a", 128, 256, 28, 2, 1},
    {"l3", 256, 256, 14, 1, 3}, {"l4a", 256, 512, 14, 2, 1}, {"l4", 512, 512, 7, 1, 3},
};

static int parse_int_list(const char *s, int *out, int max) {
    int n = 0;
    while (*s && n < max) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v <= 0) return -1;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

static void load_torch(dt_bench_opts *o, dt_err *err) {
    (void)err;
    FILE *f = fopen(o->torch, "r");
    if (!f) {
        fprintf(stderr, "bench: warning: cannot read --torch %s; ratios to cuDNN left out\n", o->torch);
        return;
    }
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char name[32];
        double pf, pb, df, db;
        if (sscanf(line, "%31s %lf %lf %lf %lf", name, &pf, &pb, &df, &db) != 5) continue;
        for (int i = 0; i < 7; i++)
            if (!strcmp(name, DT_RESNET18_SHAPES[i].name)) {
                o->torch_plain_f[i] = pf;
                o->torch_plain_fb[i] = pb;
                o->torch_dcn_f[i] = df;
                o->torch_dcn_fb[i] = db;
            }
    }
    fclose(f);
}

int dt_bench_parse(dt_bench_opts *o, int argc, char **argv, dt_err *err) {
    memset(o, 0, sizeof *o);
    o->batch = 64;
    o->reps = 30;
    o->warmup = 5;
    o->sigma = 1.0f;
    strcpy(o->precision, "fp32");
    o->conv_algo = DT_CONV_ALGO_DEFAULT;
    o->what_conv = o->what_deform = 1;
    o->nbudgets = 1;
    o->budgets_mb[0] = 0; /* 0: the library default */
    for (int i = 0; i < 7; i++) {
        o->shapes[i] = &DT_RESNET18_SHAPES[i];
        o->torch_plain_fb[i] = o->torch_plain_f[i] = o->torch_dcn_f[i] = o->torch_dcn_fb[i] = -1;
    }
    o->nshapes = 7;
    strcpy(o->modes[0], "unfused");
    strcpy(o->modes[1], "deft");
    o->nmodes = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int has = v != NULL;
        if (!strcmp(a, "--mask")) { o->mask = 1; continue; }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            return dt_errf(err, "usage: build/bench [--what conv|deform|all|depthwise] [--batch N] [--shapes l1,l2a,...] [--reps N] "
                                "[--warmup N] [--budgets MB,MB,...] [--sigma PX] [--mask] [--modes m1,m2,...] [--precision fp32|tf32|bf16] "
                                "[--conv-algo auto|gemm|igemm128|igemm64|sm90|measure] [--torch FILE] [--csv FILE]\n"
                                "Times single layers at ResNet-18's 3x3 conv shapes (224x224 input; a Bottleneck's 3x3 convs "
                                "at the same planes have these shapes but l2a, l3a, l4a, whose input has as many channels as "
                                "the output). Whole training steps of any model: build/train configs/synthetic_timing.cfg "
                                "model=resnet50 ... (bench/reproduce.sh MODEL=, bench/gpu_run.sh resnet50).");
        }
        if (!has) return dt_errf(err, "option %s needs a value", a);
        i++;
        if (!strcmp(a, "--batch")) { o->batch = atoi(v); if (o->batch < 1) return dt_errf(err, "--batch %s: need a positive integer", v); }
        else if (!strcmp(a, "--reps")) { o->reps = atoi(v); if (o->reps < 1) return dt_errf(err, "--reps %s: need a positive integer", v); }
        else if (!strcmp(a, "--warmup")) o->warmup = atoi(v);
        else if (!strcmp(a, "--sigma")) o->sigma = (float)atof(v);
        else if (!strcmp(a, "--conv-algo")) {
            int c = dt_conv_algo_parse(v);
            if (c < 0) return dt_errf(err, "--conv-algo %s: one of auto, gemm, igemm128, igemm64, sm90, measure", v);
            o->conv_algo = (dt_conv_algo)c;
        }
        else if (!strcmp(a, "--precision")) {
            dt_precision p;
            if (dt_precision_parse(v, &p)) return dt_errf(err, "--precision %s: one of fp32, tf32, bf16", v);
            snprintf(o->precision, sizeof o->precision, "%s", v);
        }
        else if (!strcmp(a, "--torch")) snprintf(o->torch, sizeof o->torch, "%s", v);
        else if (!strcmp(a, "--csv")) snprintf(o->csv, sizeof o->csv, "%s", v);
        else if (!strcmp(a, "--budgets")) {
            o->nbudgets = parse_int_list(v, o->budgets_mb, DT_BENCH_MAX);
            if (o->nbudgets < 1) return dt_errf(err, "--budgets %s: need MB values like 16,64,256", v);
        } else if (!strcmp(a, "--what")) {
            o->what_conv = !strcmp(v, "conv") || !strcmp(v, "all");
            o->what_deform = !strcmp(v, "deform") || !strcmp(v, "all");
            o->what_depthwise = !strcmp(v, "depthwise");
            if (!o->what_conv && !o->what_deform && !o->what_depthwise)
                return dt_errf(err, "--what %s: one of conv, deform, all, depthwise", v);
        } else if (!strcmp(a, "--shapes")) {
            o->nshapes = 0;
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
                int found = 0;
                for (int k = 0; k < 7; k++)
                    if (!strcmp(t, DT_RESNET18_SHAPES[k].name)) { o->shapes[o->nshapes++] = &DT_RESNET18_SHAPES[k]; found = 1; }
                if (!found) return dt_errf(err, "--shapes: unknown shape '%s' (valid: l1 l2a l2 l3a l3 l4a l4)", t);
            }
        } else if (!strcmp(a, "--modes")) {
            o->nmodes = 0;
            char buf[512];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *t = strtok(buf, ","); t && o->nmodes < DT_BENCH_MAX; t = strtok(NULL, ","))
                snprintf(o->modes[o->nmodes++], 32, "%s", t);
        } else return dt_errf(err, "unknown option %s (try --help)", a);
    }
    dt_precision prec = DT_PREC_FP32;
    dt_precision_parse(o->precision, &prec); /* checked above */
    o->dtype = dt_precision_act_dtype(prec);
    o->layout = dt_precision_layout(prec);
    o->math = dt_precision_math(prec);
    if (o->torch[0]) load_torch(o, err);
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double dt_bench_time(void (*fn)(void *), void *arg, int warmup, int reps) {
    for (int i = 0; i < warmup; i++) fn(arg);
    dt_gpu_sync();
    double *t = dt_xmalloc(reps * sizeof(double));
    dt_gpu_timer *tm = dt_gpu_timer_new();
    for (int i = 0; i < reps; i++) {
        dt_gpu_timer_start(tm);
        fn(arg);
        dt_gpu_timer_stop(tm);
        t[i] = dt_gpu_timer_ms(tm);
    }
    dt_gpu_timer_free(tm);
    qsort(t, reps, sizeof *t, cmp_double);
    double m = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
    free(t);
    return m;
}

typedef struct {
    void *src, *dst;
    size_t bytes;
} copy_arg;
static void copy_run(void *p) {
    copy_arg *c = p;
    dt_copy_d2d(c->dst, c->src, c->bytes);
}
double dt_bench_copy_rate(void) {
    copy_arg c = {dt_gpu_malloc((size_t)1 << 30), dt_gpu_malloc((size_t)1 << 30), (size_t)1 << 30};
    dt_memset_gpu(c.src, 0x3f, c.bytes);
    const double ms = dt_bench_time(copy_run, &c, 3, 10);
    dt_gpu_free(c.src), dt_gpu_free(c.dst);
    return 2.0 * (double)c.bytes / (ms * 1e-3);
}

dt_tensor *dt_bench_randn(int64_t n, int64_t c, int64_t h, int64_t w, float std, uint64_t seed) {
    dt_tensor *t = dt_tensor_new4(DT_GPU, n, c, h, w);
    dt_set_seed(seed);
    dt_init_reseed();
    dt_init_normal(t, 0.0f, std);
    return t;
}

/* x (f32 NCHW, caller-owned; freed) in another dtype and layout: a caller-owned copy. */
static dt_tensor *converted(dt_tensor *x, dt_dtype dtype, dt_layout layout) {
    if (x->dtype == dtype && x->layout == layout) return x;
    int g = dt_grad_enabled();
    dt_set_grad_enabled(0);
    dt_tensor *y = dt_convert(x, dtype, layout); /* no scope is open: the caller owns it */
    dt_set_grad_enabled(g);
    dt_tensor_free(x);
    return y;
}

dt_tensor *dt_bench_act(const dt_bench_opts *o, int64_t n, int64_t c, int64_t h, int64_t w, float std, uint64_t seed) {
    return converted(dt_bench_randn(n, c, h, w, std, seed), o->dtype, o->layout);
}

void dt_bench_make_work(dt_tensor *w) {
    dt_tensor *wk = dt_param_make_work(NULL, w);
    DT_PICK(dt_convert_k, w->dev, DT_F32, DT_NCHW)(1, 1, w->numel, w->data, DT_F32, DT_NCHW, 0.0f, wk->data, DT_BF16,
                                                  DT_NCHW);
}

dt_tensor *dt_bench_weight(const dt_bench_opts *o, int64_t cout, int64_t cin, int64_t kh, int64_t kw, float std,
                           uint64_t seed) {
    dt_tensor *v = converted(dt_bench_randn(cout, cin, kh, kw, std, seed), DT_F32, o->layout);
    dt_tensor *w = dt_param_new(NULL, "bench weight", 4, v->shape, v->dev, o->layout, 1);
    dt_tensor_copy(w, v);
    dt_tensor_free(v);
    if (o->dtype == DT_BF16) dt_bench_make_work(w);
    return w;
}

dt_tensor *dt_bench_operand(dt_tensor *w) { return w->param && w->param->work ? w->param->work : w; }

typedef struct {
    int64_t M, K, NP;
    dt_dtype dtype;
    dt_math math;
    void *A, *B, *C, *D;
    float *E;
} floor_arg;

static void floor_run(void *p) {
    floor_arg *f = p;
    (void)f;
    /* forward: C[M, NP] = A[M, K] B[K, NP]; data grad: D[K, NP] = A^T C; weight grad: E[M, K] = C B^T
     * (bf16: A, B, C, D bf16, the weight gradient E fp32, as the convs compute them) */
#ifdef DT_CUDA
    void (*gemm)(dt_math, int, int, int64_t, int64_t, int64_t, float, const void *, int64_t, const void *, int64_t, float,
                 void *, dt_dtype, int64_t) = f->dtype == DT_BF16 ? dt_gemm_bf16_cuda : dt_gemm_f32_cuda;
    gemm(f->math, 0, 0, f->M, f->NP, f->K, 1.0f, f->A, f->K, f->B, f->NP, 0.0f, f->C, f->dtype, f->NP);
    gemm(f->math, 1, 0, f->K, f->NP, f->M, 1.0f, f->A, f->K, f->C, f->NP, 0.0f, f->D, f->dtype, f->NP);
    gemm(f->math, 0, 1, f->M, f->K, f->NP, 1.0f, f->C, f->NP, f->B, f->NP, 0.0f, f->E, DT_F32, f->K);
#endif
}

double dt_bench_gemm_floor(const dt_bench_opts *o, int64_t M, int64_t K, int64_t NP, int warmup, int reps) {
    dt_tensor *A = converted(dt_bench_randn(1, 1, M, K, 0.1f, 1), o->dtype, DT_NCHW);
    dt_tensor *B = converted(dt_bench_randn(1, 1, K, NP, 1.0f, 2), o->dtype, DT_NCHW);
    dt_tensor *C = converted(dt_bench_randn(1, 1, M, NP, 1.0f, 3), o->dtype, DT_NCHW);
    dt_tensor *D = converted(dt_bench_randn(1, 1, K, NP, 1.0f, 4), o->dtype, DT_NCHW);
    dt_tensor *E = dt_bench_randn(1, 1, M, K, 1.0f, 5);
    floor_arg f = {M, K, NP, o->dtype, o->math, A->data, B->data, C->data, D->data, E->data};
    double ms = dt_bench_time(floor_run, &f, warmup, reps);
    dt_tensor_free(A); dt_tensor_free(B); dt_tensor_free(C); dt_tensor_free(D); dt_tensor_free(E);
    return ms;
}
