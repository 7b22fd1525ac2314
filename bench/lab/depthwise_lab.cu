/* The depthwise lab (issue 38, items 2 and 5): the shipping depthwise kernels
 * (ops/conv/depthwise.cu, `ship`) beside the register-blocked variant of
 * ops/conv/depthwise_rb.cuh (`rb`: runs of 8 outputs a thread; `rb4`: of 4, half the registers;
 * `lib_rb`: the library's entry points with DT_DW_KERNEL=1, validated only), in the three directions, bf16 NHWC (fp32 accumulate, fp32
 * dw) and fp32 NHWC. Same habit as conv_lab.cu / deform_lab.cu: every variant is validated on
 * fresh random inputs (uniform in [-1, 1), never zeros) against the CPU twin
 * (ops/conv/depthwise_cpu.c), then timed; only a winner ships.
 *
 * Shapes: issue 38's 1-D grid (the JAX user's: batch 32, output length 1024, kernel 1/4/16/64,
 * channels 32/128/512, dilation 1..128, stride 1, no padding; input 1024 + (k-1) d), and
 * MobileNetV2's depthwise 3x3s at 224 input (pad 1, stride 1 and 2) at --batch2d (256).
 *
 * Validation (at --check-batch images, 2 by default: the same geometry, every output checked;
 * --check-batch 0: the timed batch):
 *   fwd, dgrad  |got - ref| <= tol, ref the twin's output. S = the twin run on |x|, |w| (|dy|):
 *               the sum of |products| of each output; fp32: tol = 1e-5 S (the kernels sum in the
 *               twin's order: equal but for a zero's sign), bf16: tol = 2^-7 |ref| + 1e-5 S (the
 *               one rounding of each side to bf16).
 *   wgrad       |got - ref| <= 2e-4 S + 1e-30, ref the twin's double sums, S its sums of |x dy|
 *               (fp32 partial sums over up to N Ho Wo terms); and deterministic: run twice,
 *               bitwise equal (also at the timed batch).
 * A variant that fails is not timed there; any failure: exit status 1.
 *
 * Timing: median of --reps after --warmup launches, each timed with a CUDA event pair, at the
 * timed batch, fresh random inputs. Floor: the larger of the pass's bytes at the device's copy
 * rate (a 1 GiB device-to-device copy, read + write) and its FMAs (N Ho Wo C kh kw) at the fp32
 * FMA rate, SMs x 128 x 1.98 GHz - build/bench --what depthwise's floor, per pass. Bytes: fwd
 * x + w + y, dgrad dy + w + dx, wgrad x + dy + 4 C kh kw.
 *
 *   build/depthwise_lab [--dtype bf16,fp32] [--pass fwd,dgrad,wgrad] [--shapes 1d,2d] [--only SUBSTR]
 *                       [--reps 20] [--warmup 3] [--check-batch 2] [--batch2d 256] [--torch FILE]
 *                       [--skip-time]
 *   --only: shapes whose label contains SUBSTR ("k 64 C 512"); --torch: bench/torch_depthwise.py's
 *   output (cuDNN's fwd and fwd + bwd ms): each shape's fwd and fwd + dgrad + wgrad are then
 *   printed beside cuDNN's. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/conv/depthwise_rb.cuh"
#include "bench/bench_common.h"
#include "bench/dw_shapes.h"
#include "core/dt_alloc.h"
#include "core/dt_common.h"
#include "core/dt_cuda.h"
#include "core/dt_device.h"
#include "core/dt_dtype.h"
#include "ops/conv/depthwise.h"

#define CLOCK_GHZ 1.98

/* ================================================================== shapes */

typedef struct {
    char label[48];  /* the table's name */
    char key[48];    /* bench/torch_depthwise.py's key without the precision: "1d 64 512 8", "2d 112_C_32_s1" */
    int64_t N, C, H, W;
    dt_conv_geom g;
} dw_shape;

static int make_shapes(dw_shape *s, int max, const char *which, int batch2d) {
    int n = 0;
    if (strstr(which, "1d")) {
        static const int ks[] = {1, 4, 16, 64}, cs[] = {32, 128, 512};
        for (int ki = 0; ki < 4; ki++)
            for (int ci = 0; ci < 3; ci++)
                for (int d = 1; d <= 128; d *= 2) {
                    if (n == max) return n;
                    dw_shape *e = &s[n++];
                    snprintf(e->label, sizeof e->label, "k %d C %d d %d", ks[ki], cs[ci], d);
                    snprintf(e->key, sizeof e->key, "%d %d %d", ks[ki], cs[ci], d);
                    e->N = 32, e->C = cs[ci], e->H = 1, e->W = 1024 + (int64_t)(ks[ki] - 1) * d;
                    const dt_conv_geom g = {1, ks[ki], 1, 1, 0, 0, 1, d};
                    e->g = g;
                }
    }
    if (strstr(which, "2d")) {
        for (int i = 0; i < DT_DW_MBV2_SHAPES; i++) {
            const dt_dw_mbv2_shape *m = &dt_dw_mbv2_shapes[i];
            if (n == max) return n;
            dw_shape *e = &s[n++];
            snprintf(e->label, sizeof e->label, "%s", m->name);
            snprintf(e->key, sizeof e->key, "%s", m->name);
            for (char *k = e->key; *k; k++)
                if (*k == ' ') *k = '_';
            e->N = batch2d, e->C = m->c, e->H = e->W = m->h;
            e->g = dt_geom(3, m->s, 1, 1);
        }
    }
    return n;
}

static dt_conv_problem problem_of(const dw_shape *s, int64_t N) {
    return dt_conv_problem_of(N, s->C, s->H, s->W, s->C, s->g, s->C);
}

/* ================================================================== data */

/* p[i] = a uniform value in [-1, 1) from (seed, i) (never exactly zero: an odd multiple of
 * 2^-24), stored in T */
template <typename T>
__global__ void k_fill(T *p, int64_t n, uint64_t seed) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint64_t z = seed + (uint64_t)i * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        const float u = ((float)(uint32_t)(z >> 40) * 2.0f + 1.0f) * (1.0f / 16777216.0f) - 1.0f;
        dt_st(p + i, u);
    }
}
static void fill(void *p, int bf16, int64_t n, uint64_t seed) {
    const unsigned blocks = (unsigned)(n / 256 + 1 < 8192 ? n / 256 + 1 : 8192);
    if (bf16) k_fill<<<blocks, 256, 0, dt_stream()>>>((__nv_bfloat16 *)p, n, seed);
    else k_fill<<<blocks, 256, 0, dt_stream()>>>((float *)p, n, seed);
    DT_CHECK_LAUNCH();
}

/* one problem's device tensors (activation dtype; dw and bias fp32) */
typedef struct {
    dt_conv_problem p;
    int bf16;
    size_t e; /* bytes an element */
    int64_t nx, ny, nw;
    void *x, *w, *y, *dy, *dx;
    float *bias, *dw, *part;
} dev_prob;

static void dev_make(dev_prob *d, const dw_shape *s, int64_t N, int bf16, uint64_t seed) {
    memset(d, 0, sizeof *d);
    d->p = problem_of(s, N);
    d->bf16 = bf16, d->e = bf16 ? 2 : 4;
    d->nx = d->p.N * d->p.C * d->p.H * d->p.W, d->ny = d->p.N * d->p.C * d->p.Ho * d->p.Wo;
    d->nw = d->p.C * d->p.g.kh * d->p.g.kw;
    d->x = dt_gpu_malloc(d->e * d->nx), d->dx = dt_gpu_malloc(d->e * d->nx);
    d->y = dt_gpu_malloc(d->e * d->ny), d->dy = dt_gpu_malloc(d->e * d->ny);
    d->w = dt_gpu_malloc(d->e * d->nw);
    d->bias = (float *)dt_gpu_malloc(sizeof(float) * d->p.C);
    d->dw = (float *)dt_gpu_malloc(sizeof(float) * d->nw);
    const size_t p8 = dw_rb::wgrad_scratch(&d->p, 8), p4 = dw_rb::wgrad_scratch(&d->p, 4), part = p8 > p4 ? p8 : p4;
    d->part = (float *)dt_gpu_malloc(sizeof(float) * (part ? part : 1));
    fill(d->x, bf16, d->nx, seed), fill(d->dy, bf16, d->ny, seed + 1), fill(d->w, bf16, d->nw, seed + 2);
    fill(d->bias, 0, d->p.C, seed + 3);
    dt_memset_gpu(d->y, 0xff, d->e * d->ny), dt_memset_gpu(d->dx, 0xff, d->e * d->nx);
    dt_memset_gpu(d->dw, 0xff, sizeof(float) * d->nw);
    dt_gpu_sync();
}
static void dev_free(dev_prob *d) {
    dt_gpu_free(d->x), dt_gpu_free(d->dx), dt_gpu_free(d->y), dt_gpu_free(d->dy), dt_gpu_free(d->w);
    dt_gpu_free(d->bias), dt_gpu_free(d->dw), dt_gpu_free(d->part);
}

/* ================================================================== the variants */

/* ship: the library's entry points with the tile kernels (DT_DW_KERNEL_TILE); rb, rb4: the
 * register-blocked kernels called directly, runs of R = 8 / 4 outputs; lib_rb: the library's
 * entry points with DT_DW_KERNEL_RB (the wiring: validated, not timed - it is rb). The timed
 * variants come first. */
enum { V_SHIP = 0, V_RB = 1, V_RB4 = 2, V_LIB_RB = 3, N_VAR = 4, N_TIMED = 3 };
static const char *VAR_NAME[N_VAR] = {"ship", "rb", "rb4", "lib_rb"};
enum { P_FWD = 0, P_DGRAD = 1, P_WGRAD = 2, N_PASS = 3 };
static const char *PASS_NAME[N_PASS] = {"fwd", "dgrad", "wgrad"};

static int var_takes(int v, const dt_conv_problem *p, int pass) {
    if (v == V_SHIP || v == V_LIB_RB) return dt_dw_gpu_supported(p);
    return dw_rb::supported(p, pass, v == V_RB4 ? 4 : 8);
}

/* one launch of variant v's pass on d (bias on for fwd: `with_bias`) */
static void run_var(int v, int pass, dev_prob *d, int with_bias) {
    const dt_conv_problem *p = &d->p;
    const float *bias = with_bias ? d->bias : NULL;
    if (v == V_SHIP || v == V_LIB_RB) {
        dt_dw_set_kernel(v == V_SHIP ? DT_DW_KERNEL_TILE : DT_DW_KERNEL_RB);
        if (d->bf16) {
            if (pass == P_FWD) dt_dw_fwd_bf16_nhwc_cuda(p, d->x, d->w, bias, d->y);
            else if (pass == P_DGRAD) dt_dw_dgrad_bf16_nhwc_cuda(p, d->dy, d->w, 0.0f, d->dx);
            else dt_dw_wgrad_bf16_nhwc_cuda(p, d->x, d->dy, 0.0f, d->dw);
        } else {
            if (pass == P_FWD) dt_dw_fwd_f32_nhwc_cuda(p, d->x, d->w, bias, d->y);
            else if (pass == P_DGRAD) dt_dw_dgrad_f32_nhwc_cuda(p, d->dy, d->w, 0.0f, d->dx);
            else dt_dw_wgrad_f32_nhwc_cuda(p, d->x, d->dy, 0.0f, d->dw);
        }
        dt_dw_set_kernel(DT_DW_KERNEL_TILE);
        return;
    }
    typedef __nv_bfloat16 bf;
    const int R = v == V_RB4 ? 4 : 8;
    if (d->bf16) {
        if (pass == P_FWD) dw_rb::fwd<bf>(p, (const bf *)d->x, (const bf *)d->w, bias, (bf *)d->y, R);
        else if (pass == P_DGRAD) dw_rb::dgrad<bf>(p, (const bf *)d->dy, (const bf *)d->w, 0.0f, (bf *)d->dx, R);
        else dw_rb::wgrad<bf>(p, (const bf *)d->x, (const bf *)d->dy, 0.0f, d->dw, d->part, R);
    } else {
        if (pass == P_FWD) dw_rb::fwd<float>(p, (const float *)d->x, (const float *)d->w, bias, (float *)d->y, R);
        else if (pass == P_DGRAD) dw_rb::dgrad<float>(p, (const float *)d->dy, (const float *)d->w, 0.0f, (float *)d->dx, R);
        else dw_rb::wgrad<float>(p, (const float *)d->x, (const float *)d->dy, 0.0f, d->dw, d->part, R);
    }
}

/* ================================================================== validation */

/* host copies of a device problem's inputs, and |.| of them (the error scale) */
typedef struct {
    void *x, *w, *dy, *ax, *aw, *ady; /* activation dtype */
    float *bias, *abias;
} host_in;

static void *host_copy(const void *dev, size_t bytes) {
    void *h = malloc(bytes ? bytes : 1);
    if (!h) dt_fatal("depthwise_lab: out of host memory (%zu bytes)", bytes);
    dt_copy_d2h(h, dev, bytes);
    return h;
}
static void *host_abs(const void *h, int bf16, int64_t n) {
    const size_t e = bf16 ? 2 : 4;
    void *a = malloc(e * (size_t)(n ? n : 1));
    if (!a) dt_fatal("depthwise_lab: out of host memory");
    for (int64_t i = 0; i < n; i++) {
        if (bf16) ((uint16_t *)a)[i] = ((const uint16_t *)h)[i] & 0x7fff;
        else ((float *)a)[i] = fabsf(((const float *)h)[i]);
    }
    return a;
}
static float to_f(const void *h, int bf16, int64_t i) {
    return bf16 ? dt_bf16_to_float(((const dt_bf16 *)h)[i]) : ((const float *)h)[i];
}

/* the twins of the dtype (NHWC) */
static void twin(int pass, const dt_conv_problem *p, int bf16, const void *a, const void *b, const float *bias, void *out) {
    if (bf16) {
        if (pass == P_FWD) dt_dw_fwd_bf16_nhwc_cpu(p, a, b, bias, out);
        else if (pass == P_DGRAD) dt_dw_dgrad_bf16_nhwc_cpu(p, a, b, 0.0f, out);
        else dt_dw_wgrad_bf16_nhwc_cpu(p, a, b, 0.0f, (float *)out);
    } else {
        if (pass == P_FWD) dt_dw_fwd_f32_nhwc_cpu(p, a, b, bias, out);
        else if (pass == P_DGRAD) dt_dw_dgrad_f32_nhwc_cpu(p, a, b, 0.0f, out);
        else dt_dw_wgrad_f32_nhwc_cpu(p, a, b, 0.0f, (float *)out);
    }
}

static int g_failed;
/* fwd / dgrad checks a variant passed, and of them those bit for bit the twin's */
static int g_checked[N_VAR], g_bitwise[N_VAR];

/* validates every variant that takes the shape, each pass, at batch N; returns a bit mask of
 * the (variant, pass) pairs that passed: bit v * N_PASS + pass */
static unsigned validate(const dw_shape *s, int64_t N, int bf16, uint64_t seed, const int *passes) {
    dev_prob d;
    dev_make(&d, s, N, bf16, seed);
    const dt_conv_problem *p = &d.p;
    host_in h;
    h.x = host_copy(d.x, d.e * d.nx), h.w = host_copy(d.w, d.e * d.nw), h.dy = host_copy(d.dy, d.e * d.ny);
    h.bias = (float *)host_copy(d.bias, sizeof(float) * p->C);
    h.ax = host_abs(h.x, bf16, d.nx), h.aw = host_abs(h.w, bf16, d.nw), h.ady = host_abs(h.dy, bf16, d.ny);
    h.abias = (float *)host_abs(h.bias, 0, p->C);
    unsigned ok = 0;
    for (int pass = 0; pass < N_PASS; pass++) {
        if (!passes[pass]) continue;
        const int64_t n_out = pass == P_FWD ? d.ny : pass == P_DGRAD ? d.nx : d.nw;
        const size_t ob = pass == P_WGRAD ? sizeof(float) : d.e;
        void *ref = malloc(ob * (size_t)n_out), *scale = malloc(ob * (size_t)n_out), *got = malloc(ob * (size_t)n_out);
        if (!ref || !scale || !got) dt_fatal("depthwise_lab: out of host memory");
        const void *a = pass == P_DGRAD ? h.dy : h.x, *b = pass == P_WGRAD ? h.dy : h.w;
        const void *aa = pass == P_DGRAD ? h.ady : h.ax, *ab = pass == P_WGRAD ? h.ady : h.aw;
        twin(pass, p, bf16, a, b, h.bias, ref);
        twin(pass, p, bf16, aa, ab, h.abias, scale);
        void *dout = pass == P_FWD ? d.y : pass == P_DGRAD ? d.dx : (void *)d.dw;
        const int obf = pass == P_WGRAD ? 0 : bf16;
        for (int v = 0; v < N_VAR; v++) {
            if (!var_takes(v, p, pass)) continue;
            dt_memset_gpu(dout, 0xff, ob * (size_t)n_out); /* NaN: an output not written fails */
            run_var(v, pass, &d, 1);
            dt_gpu_sync();
            dt_copy_d2h(got, dout, ob * (size_t)n_out);
            int64_t bad = 0, first = -1, same = 0;
            double worst = 0.0;
            for (int64_t i = 0; i < n_out; i++) {
                same += !memcmp((const char *)got + ob * i, (const char *)ref + ob * i, ob);
                const double r = to_f(ref, obf, i), gv = to_f(got, obf, i), S = to_f(scale, obf, i);
                const double tol = pass == P_WGRAD ? 2e-4 * S + 1e-30 : (bf16 ? 0.0078125 * fabs(r) : 0.0) + 1e-5 * S + 1e-30;
                const double err = fabs(gv - r);
                if (!(err <= tol)) {
                    if (first < 0) first = i;
                    bad++;
                } else if (err / tol > worst) {
                    worst = err / tol;
                }
            }
            int det = 1;
            if (pass == P_WGRAD && bad == 0) { /* deterministic: a second run, bitwise */
                void *again = malloc(ob * (size_t)n_out);
                run_var(v, pass, &d, 1);
                dt_gpu_sync();
                dt_copy_d2h(again, dout, ob * (size_t)n_out);
                det = memcmp(again, got, ob * (size_t)n_out) == 0;
                free(again);
            }
            const int pass_ok = bad == 0 && det;
            if (pass_ok) ok |= 1u << (v * N_PASS + pass);
            else g_failed++;
            if (pass_ok && pass != P_WGRAD) g_checked[v]++, g_bitwise[v] += same == n_out;
            if (!pass_ok || getenv("DW_LAB_VERBOSE"))
                printf("%s %-22s %-4s %-5s %-4s N %lld: %lld of %lld outside the bound%s (worst in-bound err/tol %.3f)",
                       pass_ok ? "PASS" : "FAIL", s->label, bf16 ? "bf16" : "fp32", PASS_NAME[pass], VAR_NAME[v],
                       (long long)N, (long long)bad, (long long)n_out, det ? "" : ", NOT deterministic", worst);
            if (first >= 0)
                printf(" first [%lld]: got %.8g ref %.8g", (long long)first, to_f(got, obf, first), to_f(ref, obf, first));
            if (!pass_ok || getenv("DW_LAB_VERBOSE")) printf("\n");
        }
        free(ref), free(scale), free(got);
    }
    free(h.x), free(h.w), free(h.dy), free(h.bias), free(h.ax), free(h.aw), free(h.ady), free(h.abias);
    dev_free(&d);
    return ok;
}

/* ================================================================== timing */

static int cmp_f(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}
/* median ms of reps launches after warmup */
static double time_var(int v, int pass, dev_prob *d, int warmup, int reps) {
    for (int i = 0; i < warmup; i++) run_var(v, pass, d, 0);
    cudaEvent_t e0, e1;
    DT_CHECK(cudaEventCreate(&e0));
    DT_CHECK(cudaEventCreate(&e1));
    float *ms = (float *)malloc(sizeof(float) * (size_t)reps);
    for (int i = 0; i < reps; i++) {
        DT_CHECK(cudaEventRecord(e0, dt_stream()));
        run_var(v, pass, d, 0);
        DT_CHECK(cudaEventRecord(e1, dt_stream()));
        DT_CHECK(cudaEventSynchronize(e1));
        DT_CHECK(cudaEventElapsedTime(&ms[i], e0, e1));
    }
    qsort(ms, (size_t)reps, sizeof(float), cmp_f);
    const double med = reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
    free(ms);
    DT_CHECK(cudaEventDestroy(e0));
    DT_CHECK(cudaEventDestroy(e1));
    return med;
}

/* cuDNN's (fwd, f+b) ms for key ("dw1d bf16 64 512 8") in --torch's file, or -1 */
static void torch_times(const char *file, const char *key, double *f, double *fb) {
    *f = *fb = -1;
    FILE *t = file ? fopen(file, "r") : NULL;
    if (!t) return;
    char line[256];
    const size_t n = strlen(key);
    while (fgets(line, sizeof line, t))
        if (!strncmp(line, key, n) && line[n] == ' ' && sscanf(line + n, "%lf %lf", f, fb) != 2) *f = *fb = -1;
    fclose(t);
}

/* ================================================================== main */

static int has(const char *list, const char *w) {
    const size_t n = strlen(w);
    for (const char *s = list; (s = strstr(s, w)) != NULL; s += n)
        if ((s == list || s[-1] == ',') && (s[n] == 0 || s[n] == ',')) return 1;
    return 0;
}

int main(int argc, char **argv) {
    dt_set_fatal_handler(exit);
    const char *dtypes = "bf16,fp32", *pass_list = "fwd,dgrad,wgrad", *which = "1d,2d", *only = NULL, *torch = NULL;
    int reps = 20, warmup = 3, check_batch = 2, batch2d = 256, skip_time = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dtype") && i + 1 < argc) dtypes = argv[++i];
        else if (!strcmp(argv[i], "--pass") && i + 1 < argc) pass_list = argv[++i];
        else if (!strcmp(argv[i], "--shapes") && i + 1 < argc) which = argv[++i];
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--torch") && i + 1 < argc) torch = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--check-batch") && i + 1 < argc) check_batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch2d") && i + 1 < argc) batch2d = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--skip-time")) skip_time = 1;
        else {
            fprintf(stderr, "usage: depthwise_lab [--dtype bf16,fp32] [--pass fwd,dgrad,wgrad] [--shapes 1d,2d] [--only SUBSTR] "
                            "[--reps 20] [--warmup 3] [--check-batch 2] [--batch2d 256] [--torch FILE] [--skip-time]\n");
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    if (dt_gpu_count() == 0) {
        fprintf(stderr, "depthwise_lab: no CUDA GPU visible\n");
        return 1;
    }
    dt_gpu_init(0);
    int passes[N_PASS];
    for (int q = 0; q < N_PASS; q++) passes[q] = has(pass_list, PASS_NAME[q]);
    static dw_shape shapes[128];
    const int n_shapes = make_shapes(shapes, 128, which, batch2d);
    const double copy_bps = dt_bench_copy_rate(), fma_ps = (double)dt_gpu_sm_count() * 128 * CLOCK_GHZ * 1e9;
    printf("# depthwise lab: ship = ops/conv/depthwise.cu, rb = ops/conv/depthwise_rb.cuh; floor: copy %.0f GB/s, "
           "fp32 FMA %.1f T/s (%d SMs x 128 x %.2f GHz); validation at batch %d (0: the timed batch)\n",
           copy_bps / 1e9, fma_ps / 1e12, dt_gpu_sm_count(), CLOCK_GHZ, check_batch);
    uint64_t seed = 1000;
    for (int bf = 1; bf >= 0; bf--) {
        if (!has(dtypes, bf ? "bf16" : "fp32")) continue;
        const char *prec = bf ? "bf16" : "fp32";
        printf("\n## %s NHWC (%s)\n", prec, bf ? "bf16 x, w, y; fp32 accumulate; fp32 dw" : "fp32 throughout");
        printf("%-22s %-5s %9s %9s %9s %7s %7s %8s %6s %6s %6s %9s\n", "shape", "pass", "ship ms", "rb ms", "rb4 ms", "rb x s",
               "rb4 x s", "rb GB/s", "%f rb", "%f rb4", "%f shp", "floor ms");
        for (int si = 0; si < n_shapes; si++) {
            const dw_shape *s = &shapes[si];
            if (only && !strstr(s->label, only)) continue;
            seed += 17;
            const unsigned ok = validate(s, check_batch > 0 ? check_batch : s->N, bf, seed, passes);
            if (skip_time) continue;
            dev_prob d;
            dev_make(&d, s, s->N, bf, seed + 7);
            double t_sum[N_TIMED] = {0, 0, 0}, t_fwd[N_TIMED] = {-1, -1, -1};
            int all[N_TIMED] = {1, 1, 1};
            for (int pass = 0; pass < N_PASS; pass++) {
                if (!passes[pass]) continue;
                double ms[N_TIMED];
                for (int v = 0; v < N_TIMED; v++) {
                    ms[v] = ok >> (v * N_PASS + pass) & 1 ? time_var(v, pass, &d, warmup, reps) : -1.0;
                    if (ms[v] < 0) all[v] = 0;
                    else t_sum[v] += ms[v];
                    if (pass == P_FWD) t_fwd[v] = ms[v];
                }
                for (int v = V_RB; v <= V_RB4 && pass == P_WGRAD; v++) { /* deterministic at the timed batch too */
                    if (ms[v] < 0) continue;
                    float *a = (float *)malloc(sizeof(float) * d.nw), *b = (float *)malloc(sizeof(float) * d.nw);
                    run_var(v, pass, &d, 0), dt_gpu_sync(), dt_copy_d2h(a, d.dw, sizeof(float) * d.nw);
                    run_var(v, pass, &d, 0), dt_gpu_sync(), dt_copy_d2h(b, d.dw, sizeof(float) * d.nw);
                    if (memcmp(a, b, sizeof(float) * d.nw)) {
                        printf("FAIL %s %s wgrad %s: not deterministic at batch %lld\n", s->label, prec, VAR_NAME[v], (long long)s->N);
                        g_failed++;
                    }
                    free(a), free(b);
                }
                const double e = (double)d.e, nx = (double)d.nx, ny = (double)d.ny, nw = (double)d.nw;
                const double bytes = pass == P_FWD ? e * (nx + ny + nw) : pass == P_DGRAD ? e * (ny + nx + nw) : e * (nx + ny) + 4 * nw;
                const double fmas = ny * s->g.kh * s->g.kw;
                const double floor_ms = 1e3 * fmax(bytes / copy_bps, fmas / fma_ps);
                const double r8 = ms[V_RB], r4 = ms[V_RB4], sh = ms[V_SHIP];
                printf("%-22s %-5s %9.4f %9.4f %9.4f %7.2f %7.2f %8.0f %6.1f %6.1f %6.1f %9.4f\n", s->label, PASS_NAME[pass], sh,
                       r8, r4, sh > 0 && r8 > 0 ? sh / r8 : NAN, sh > 0 && r4 > 0 ? sh / r4 : NAN,
                       r8 > 0 ? bytes / (r8 * 1e-3) / 1e9 : NAN, r8 > 0 ? 100 * floor_ms / r8 : NAN,
                       r4 > 0 ? 100 * floor_ms / r4 : NAN, sh > 0 ? 100 * floor_ms / sh : NAN, floor_ms);
                fflush(stdout);
            }
            if (torch && passes[P_FWD] && passes[P_DGRAD] && passes[P_WGRAD]) {
                char key[80];
                snprintf(key, sizeof key, "dw%s %s %s", s->H == 1 ? "1d" : "2d", prec, s->key);
                double tf, tfb;
                torch_times(torch, key, &tf, &tfb);
                if (tf > 0 && all[V_RB])
                    printf("%-22s cuDNN fwd %.4f f+b %.4f | rb fwd %.4f f+d+w %.4f: x cuDNN fwd %.2f f+b %.2f | rb4 x cuDNN fwd %.2f "
                           "f+b %.2f | ship fwd %.4f f+d+w %.4f\n",
                           s->label, tf, tfb, t_fwd[V_RB], t_sum[V_RB], tf / t_fwd[V_RB], tfb / t_sum[V_RB],
                           all[V_RB4] ? tf / t_fwd[V_RB4] : NAN, all[V_RB4] ? tfb / t_sum[V_RB4] : NAN, t_fwd[V_SHIP],
                           all[V_SHIP] ? t_sum[V_SHIP] : NAN);
            }
            dev_free(&d);
            dt_gpu_empty_cache(); /* the next shape's tensors differ in size: no pile of cached blocks */
        }
    }
    printf("\n# fwd / dgrad bit for bit the CPU twin's:");
    for (int v = 0; v < N_VAR; v++) printf(" %s %d of %d;", VAR_NAME[v], g_bitwise[v], g_checked[v]);
    printf("\n");
    if (g_failed) {
        printf("\ndepthwise lab: %d validation(s) FAILED\n", g_failed);
        return 1;
    }
    printf("\ndepthwise lab: every validation passed\n");
    return 0;
}
