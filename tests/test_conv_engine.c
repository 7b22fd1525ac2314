/* The conv engine table (ops/conv/conv_engine.h): each engine's supports() on representative
 * problems against its documented limits (docs/conv.md "The engines"), the names (unique, and
 * the algorithm of the same name where there is one), and every entry's launches run on the
 * CPU twins: each pass an engine takes gives the column path's bits on a problem whose sums
 * are exact (small integers), so that a launch wired to the wrong pass or kernel shows. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/dt_dtype.h"
#include "ops/conv/conv_engine.h"
#include "tests/dt_test.h"

#define GEMM DT_CONV_ENGINE_GEMM
#define I128 DT_CONV_ENGINE_IGEMM128
#define I64 DT_CONV_ENGINE_IGEMM64
#define SM90 DT_CONV_ENGINE_SM90
#define DW DT_CONV_ENGINE_DEPTHWISE

static const dt_conv_target CPU = {0, 0}, GPU = {1, 0}, H100 = {1, 1};

/* fprop, dgrad, wgrad as three bits (1, 2, 4) */
static int passes(dt_conv_engine_id e, const dt_conv_problem *p, dt_conv_target t) {
    int s = 0;
    for (int pass = 0; pass < DT_CONV_PASSES; pass++)
        if (dt_conv_engines[e].supports(p, (dt_conv_pass)pass, t)) s |= 1 << pass;
    return s;
}

DT_TEST(conv_engines_support_their_documented_shapes) {
    enum { F = 1, D = 2, W = 4, ALL = 7 };
    const struct {
        const char *name;
        dt_conv_problem p;
        int on[DT_CONV_ENGINES]; /* on a GPU with the Hopper engine */
    } rows[] = {
        /* C % 8: the implicit GEMM pads fprop's C only; the engine reads the columns, no strided dgrad */
        {"stem C = 3, 7x7/2", dt_conv_problem_of(2, 3, 224, 224, 64, dt_geom(7, 2, 3, 1), 1), {ALL, F, F, F | W, 0}},
        /* pointwise: the engine's dense reads (dgrad too) */
        {"1x1/1 64 -> 256", dt_conv_problem_of(2, 64, 56, 56, 256, dt_geom(1, 1, 0, 1), 1), {ALL, ALL, ALL, ALL, 0}},
        {"3x3/2 64 -> 128", dt_conv_problem_of(2, 64, 56, 56, 128, dt_geom(3, 2, 1, 1), 1), {ALL, ALL, ALL, F | W, 0}},
        /* Cout % 8: only the column path */
        {"3x3/1 64 -> 12", dt_conv_problem_of(2, 64, 9, 9, 12, dt_geom(3, 1, 1, 1), 1), {ALL, 0, 0, 0, 0}},
        /* groups == C: the depthwise family's alone among the fast engines, multiplier 1 and 2 */
        {"depthwise 3x3 C 32", dt_conv_problem_of(2, 32, 28, 28, 32, dt_geom(3, 1, 1, 1), 32), {ALL, 0, 0, 0, ALL}},
        {"depthwise 5x5/2 C 16 x 2", dt_conv_problem_of(2, 16, 28, 28, 32, dt_geom(5, 2, 2, 1), 16), {ALL, 0, 0, 0, ALL}},
        /* other groups: the column path */
        {"grouped 3x3 64 in 2 groups", dt_conv_problem_of(2, 64, 14, 14, 64, dt_geom(3, 1, 1, 1), 2), {ALL, 0, 0, 0, 0}},
        /* C = 1, groups 1: a dense conv (the depthwise family takes grouped problems) */
        {"dense C = 1", dt_conv_problem_of(2, 1, 9, 9, 8, dt_geom(3, 1, 1, 1), 1), {ALL, F, F, F | W, 0}},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
        for (int e = 0; e < DT_CONV_ENGINES; e++) {
            const dt_conv_problem *p = &rows[i].p;
            const int want = rows[i].on[e];
            /* the CPU twins take what the engines' limits allow; a GPU without the Hopper
             * engine does not run it */
            const int want_gpu = e == SM90 ? 0 : want;
            EXPECT_MSG(passes(e, p, H100) == want && passes(e, p, CPU) == want && passes(e, p, GPU) == want_gpu,
                       "%s on %s: passes %d (cpu %d, gpu without sm90a %d), expected %d", rows[i].name,
                       dt_conv_engines[e].name, passes(e, p, H100), passes(e, p, CPU), passes(e, p, GPU), want);
        }
    /* a depthwise kernel too large for the GPU's tiles (63x63 taps x 8 outputs a channel): the CPU
     * twins only */
    const dt_conv_problem huge = dt_conv_problem_of(1, 8, 80, 80, 64, dt_geom(63, 1, 31, 1), 8);
    EXPECT_EQ_INT(passes(DW, &huge, CPU), 7);
    EXPECT_EQ_INT(passes(DW, &huge, H100), 0);
    /* 32-bit row indices: an input of 2^31 positions or more is the column path's */
    const dt_conv_problem big = dt_conv_problem_of(1 << 16, 64, 200, 200, 64, dt_geom(3, 1, 1, 1), 1);
    EXPECT_MSG(passes(I128, &big, H100) == 0 && passes(I64, &big, H100) == 0 && passes(SM90, &big, H100) == 0 &&
                   passes(GEMM, &big, H100) == 7,
               "a %lld-row problem: %d %d %d %d", (long long)(big.N * big.H * big.W), passes(GEMM, &big, H100),
               passes(I128, &big, H100), passes(I64, &big, H100), passes(SM90, &big, H100));
}

DT_TEST(conv_engine_names_are_unique_and_name_their_algorithms) {
    const char *const want[DT_CONV_ENGINES] = {"gemm", "igemm128", "igemm64", "sm90", "depthwise"};
    for (int e = 0; e < DT_CONV_ENGINES; e++) {
        const dt_conv_engine *g = &dt_conv_engines[e];
        EXPECT_MSG(g->name && !strcmp(g->name, want[e]), "engine %d is \"%s\", the log prints \"%s\"", e,
                   g->name ? g->name : "(null)", want[e]);
        if (!g->name) continue;
        for (int o = 0; o < e; o++) EXPECT_MSG(strcmp(g->name, dt_conv_engines[o].name), "two engines \"%s\"", g->name);
        /* every engine but depthwise (planned for grouped convs, never forced) is an algorithm */
        const int a = dt_conv_algo_parse(g->name);
        EXPECT_MSG(e == DW ? a == -1 : a >= 0 && !strcmp(dt_conv_algo_name((dt_conv_algo)a), g->name),
                   "engine \"%s\" parses as algorithm %d", g->name, a);
        EXPECT_MSG(g->supports && g->fprop && g->backward, "engine \"%s\" lacks a function", g->name);
    }
}

/* ---- the launches, on the CPU twins */

/* -1, 0 or 1, hashed from (i, salt): every sum the engines make of these problems is a small
 * integer (a random walk: |s| well under 256), exact in fp32 and in bf16 - also the column
 * path's column gradient, which it rounds to bf16 before col2im sums the taps */
static float val(int64_t i, int salt) {
    uint64_t h = (uint64_t)i * 0x9E3779B97F4A7C15ull + (uint64_t)salt * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31, h *= 0x94D049BB133111EBull, h ^= h >> 29;
    return (float)(int)(h % 3) - 1.0f;
}

static dt_bf16 *bf16_values(int64_t n, int salt) {
    dt_bf16 *v = malloc(sizeof(dt_bf16) * (size_t)n);
    for (int64_t i = 0; i < n; i++) v[i] = dt_bf16_from_float(val(i, salt));
    return v;
}

typedef struct {
    dt_bf16 *y, *dx;
    float *dw;
} pass_out;

/* every pass engine e takes of p (bf16 NHWC on the CPU) into out's buffers, from x, w, dy */
static void run(dt_conv_engine_id e, const dt_conv_problem *p, const dt_bf16 *x, const dt_bf16 *w, const dt_bf16 *dy,
                int sup, pass_out *out) {
    dt_conv_call c = {.p = p, .dev = DT_CPU, .dtype = DT_BF16, .layout = DT_NHWC, .math = DT_MATH_FP32, .x = x, .w = w};
    if (sup & 1) {
        c.y = out->y;
        dt_conv_engines[e].fprop(&c);
        c.y = NULL;
    }
    c.dy = dy;
    c.dx = sup & 2 ? out->dx : NULL;
    c.dw = sup & 4 ? out->dw : NULL;
    if (c.dx || c.dw) dt_conv_engines[e].backward(&c);
}

/* engine e against the column path on p, pass by pass; returns the passes it ran */
static int same_as_columns(dt_conv_engine_id e, const dt_conv_problem *p) {
    const int64_t ny = p->N * p->Ho * p->Wo * p->Cout, nx = p->N * p->H * p->W * p->C;
    const int64_t nw = p->Cout * p->g.kh * p->g.kw * (p->C / p->groups);
    dt_bf16 *x = bf16_values(nx, 1), *w = bf16_values(nw, 2), *dy = bf16_values(ny, 3);
    pass_out ref = {malloc(2 * (size_t)ny), malloc(2 * (size_t)nx), malloc(4 * (size_t)nw)};
    pass_out got = {calloc((size_t)ny, 2), calloc((size_t)nx, 2), calloc((size_t)nw, 4)};
    const int sup = passes(e, p, CPU);
    run(GEMM, p, x, w, dy, 7, &ref);
    run(e, p, x, w, dy, sup, &got);
    if (sup & 1) EXPECT_MSG(!memcmp(ref.y, got.y, 2 * (size_t)ny), "%s fprop differs from gemm's", dt_conv_engines[e].name);
    if (sup & 2) EXPECT_MSG(!memcmp(ref.dx, got.dx, 2 * (size_t)nx), "%s dgrad differs from gemm's", dt_conv_engines[e].name);
    if (sup & 4) EXPECT_MSG(!memcmp(ref.dw, got.dw, 4 * (size_t)nw), "%s wgrad differs from gemm's", dt_conv_engines[e].name);
    free(x), free(w), free(dy);
    free(ref.y), free(ref.dx), free(ref.dw), free(got.y), free(got.dx), free(got.dw);
    return sup;
}

DT_TEST(conv_engine_launches_compute_their_passes) {
    /* 3x3/1 C 64 -> 64: every pass of every dense engine (the Hopper engine's im2col reads) */
    const dt_conv_problem dense = dt_conv_problem_of(2, 64, 5, 6, 64, dt_geom(3, 1, 1, 1), 1);
    /* the stem's C = 3, 3x3/2: fprop padded on the implicit GEMM, the engine's columns */
    const dt_conv_problem stem = dt_conv_problem_of(2, 3, 7, 7, 8, dt_geom(3, 2, 1, 1), 1);
    const dt_conv_problem dw = dt_conv_problem_of(2, 8, 6, 5, 16, dt_geom(3, 1, 1, 1), 8);
    for (int e = I128; e <= SM90; e++) {
        EXPECT_EQ_INT(same_as_columns((dt_conv_engine_id)e, &dense), 7);
        EXPECT_EQ_INT(same_as_columns((dt_conv_engine_id)e, &stem), e == SM90 ? 5 : 1);
    }
    EXPECT_EQ_INT(same_as_columns(DW, &dw), 7);
}
