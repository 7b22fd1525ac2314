/* The bf16 conv's plan (ops/conv/conv_engine.h): the choices docs/conv.md's plan table states for
 * every ResNet-18 / -50 conv at batch 64 (each one the conv lab's measured winner), without and
 * with the Hopper engine, the shapes the implicit GEMM and the engine cannot run, the forced
 * algorithms, and the algorithms' names. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/conv/conv_engine.h"
#include "ops/conv/conv_sm90.h"
#include "ops/conv/depthwise.h"
#include "ops/dt_layers.h"
#include "tests/dt_test.h"

typedef struct {
    const char *name;
    int c, h, w, cout, k, s, pad; /* batch 64 */
    dt_conv_engine_id fprop, dgrad, wgrad;       /* on a GPU without the Hopper engine */
    dt_conv_engine_id fprop90, dgrad90, wgrad90; /* on one with it */
} plan_row;

#define G DT_CONV_ENGINE_GEMM
#define T128 DT_CONV_ENGINE_IGEMM128
#define T64 DT_CONV_ENGINE_IGEMM64
#define S DT_CONV_ENGINE_SM90

/* a GPU without the Hopper engine, one with it, the CPU twins */
static const dt_conv_target GPU = {1, 0}, H100 = {1, 1}, CPU = {0, 0};

static int on(dt_conv_engine_id e, const dt_conv_problem *p, dt_conv_pass pass, dt_conv_target t) {
    return dt_conv_engines[e].supports(p, pass, t);
}

static const plan_row PLAN[] = {
    {"stem (C = 3, padded to 8)", 3, 224, 224, 64, 7, 2, 3, T128, G, G, S, G, S},
    {"l1", 64, 56, 56, 64, 3, 1, 1, T128, T64, T64, S, S, S},
    {"l2a", 64, 56, 56, 128, 3, 2, 1, T128, G, G, S, G, S},
    {"l2ds", 64, 56, 56, 128, 1, 2, 0, T128, T64, G, S, T64, S},
    {"l2", 128, 28, 28, 128, 3, 1, 1, T128, G, G, S, S, S},
    {"l3a", 128, 28, 28, 256, 3, 2, 1, G, G, G, S, G, S},
    {"l3ds", 128, 28, 28, 256, 1, 2, 0, T128, T128, G, S, T128, S},
    {"l3", 256, 14, 14, 256, 3, 1, 1, G, G, G, S, S, S},
    {"l4a", 256, 14, 14, 512, 3, 2, 1, G, G, G, S, G, G},
    {"l4ds", 256, 14, 14, 512, 1, 2, 0, T128, G, G, S, G, G},
    {"l4", 512, 7, 7, 512, 3, 1, 1, G, G, G, S, S, G},
    {"b1.c1 (pointwise, 0.8 G-MAC)", 64, 56, 56, 64, 1, 1, 0, G, G, G, S, S, S},
    {"b1.c3 (pointwise, 3.3 G-MAC)", 64, 56, 56, 256, 1, 1, 0, G, G, G, G, G, G},
    {"b2.c2a", 128, 56, 56, 128, 3, 2, 1, T128, G, G, S, G, S},
    {"b2.ds (wide 1x1 s2)", 256, 56, 56, 512, 1, 2, 0, G, G, G, S, G, S},
    {"b3.c2a", 256, 28, 28, 256, 3, 2, 1, G, G, G, S, G, S},
    {"b3.ds (1x1 of K = 512)", 512, 28, 28, 1024, 1, 2, 0, G, G, G, S, G, G},
    {"b4.ds", 1024, 14, 14, 2048, 1, 2, 0, G, G, G, S, G, G},
    {"b3.c1 (pointwise 512 -> 128)", 512, 28, 28, 128, 1, 1, 0, G, G, G, G, G, G},
};

static dt_conv_problem problem(int n, const plan_row *r) {
    return dt_conv_problem_of(n, r->c, r->h, r->w, r->cout, dt_geom(r->k, r->s, r->pad, 1), 1);
}

DT_TEST(conv_plan_follows_the_measured_table) {
    for (size_t i = 0; i < sizeof PLAN / sizeof *PLAN; i++) {
        const plan_row *r = &PLAN[i];
        const dt_conv_problem p = problem(64, r);
        const dt_conv_plan a = dt_conv_plan_bf16(&p, DT_CONV_ALGO_AUTO, GPU);
        EXPECT_MSG(a.fprop == r->fprop && a.dgrad == r->dgrad && a.wgrad == r->wgrad,
                   "%s: plan fprop %d dgrad %d wgrad %d, the table says %d %d %d", r->name, a.fprop, a.dgrad, a.wgrad,
                   r->fprop, r->dgrad, r->wgrad);
        const dt_conv_plan h = dt_conv_plan_bf16(&p, DT_CONV_ALGO_AUTO, H100);
        EXPECT_MSG(h.fprop == r->fprop90 && h.dgrad == r->dgrad90 && h.wgrad == r->wgrad90,
                   "%s on the Hopper engine: plan fprop %d dgrad %d wgrad %d, the table says %d %d %d", r->name, h.fprop,
                   h.dgrad, h.wgrad, r->fprop90, r->dgrad90, r->wgrad90);
        for (int sm90 = 0; sm90 < 2; sm90++) {
            const dt_conv_plan g = dt_conv_plan_bf16(&p, DT_CONV_ALGO_GEMM, sm90 ? H100 : GPU);
            EXPECT_MSG(g.fprop == G && g.dgrad == G && g.wgrad == G, "%s: gemm put a pass on the implicit GEMM", r->name);
        }
        /* sm90 forced (on the CPU twins): the engine wherever it runs the pass (wgrad too where
         * auto keeps cuBLAS), the rest as auto */
        const dt_conv_plan f90 = dt_conv_plan_bf16(&p, DT_CONV_ALGO_SM90, CPU);
        EXPECT_MSG(f90.fprop == (on(S, &p, DT_CONV_FPROP, CPU) ? S : r->fprop) &&
                       f90.dgrad == (on(S, &p, DT_CONV_DGRAD, CPU) ? S : r->dgrad) &&
                       f90.wgrad == (on(S, &p, DT_CONV_WGRAD, CPU) ? S : r->wgrad),
                   "%s: sm90 gave %d %d %d", r->name, f90.fprop, f90.dgrad, f90.wgrad);
        /* forced: every pass on the tile where the kernels run it (fprop: any C, padded; the
         * backward passes: C a multiple of 8) */
        const dt_conv_plan f = dt_conv_plan_bf16(&p, DT_CONV_ALGO_IGEMM64, H100);
        const dt_conv_engine_id back = r->c % 8 == 0 ? T64 : G;
        EXPECT_MSG(f.fprop == T64 && f.dgrad == back && f.wgrad == back, "%s: igemm64 gave %d %d %d", r->name, f.fprop,
                   f.dgrad, f.wgrad);
    }
    /* batch 256, the engine's wgrad over 12544 rows: ResNet-18's l4a (K = 2304 <= M / 4) keeps
     * it, ResNet-50's layer4 3x3 (K = 4608) is cuBLAS's, as conv_algo=measure chose */
    const dt_conv_problem r18 = dt_conv_problem_of(256, 256, 14, 14, 512, dt_geom(3, 2, 1, 1), 1);
    const dt_conv_problem r50 = dt_conv_problem_of(256, 512, 7, 7, 512, dt_geom(3, 1, 1, 1), 1);
    EXPECT_EQ_INT(dt_conv_plan_bf16(&r18, DT_CONV_ALGO_AUTO, H100).wgrad, S);
    EXPECT_EQ_INT(dt_conv_plan_bf16(&r50, DT_CONV_ALGO_AUTO, H100).wgrad, G);
}

DT_TEST(conv_plan_keeps_unsupported_shapes_on_gemm) {
    /* C = 13: fprop runs padded to 16, the backward passes cannot; Cout = 12: nothing runs (the
     * rows' pass fields: the forced igemm128 plan) */
    const plan_row odd[] = {{"C = 13", 13, 9, 9, 16, 3, 1, 1, T128, G, G, G, G, G},
                            {"Cout = 12", 16, 9, 9, 12, 3, 1, 1, G, G, G, G, G, G}};
    const int sup[] = {1, 0}; /* fprop: C = 13 padded */
    for (int i = 0; i < 2; i++) {
        const dt_conv_problem p = problem(64, &odd[i]);
        for (int e = T128; e <= T64; e++)
            EXPECT_MSG(on(e, &p, DT_CONV_FPROP, GPU) == sup[i] && !on(e, &p, DT_CONV_DGRAD, GPU) && !on(e, &p, DT_CONV_WGRAD, GPU),
                       "%s: %s takes fprop %d dgrad %d wgrad %d", odd[i].name, dt_conv_engines[e].name,
                       on(e, &p, DT_CONV_FPROP, GPU), on(e, &p, DT_CONV_DGRAD, GPU), on(e, &p, DT_CONV_WGRAD, GPU));
        for (int a = DT_CONV_ALGO_AUTO; a <= DT_CONV_ALGO_IGEMM64; a++) {
            const dt_conv_plan pl = dt_conv_plan_bf16(&p, (dt_conv_algo)a, GPU);
            const int forced = a == DT_CONV_ALGO_IGEMM128 || a == DT_CONV_ALGO_IGEMM64;
            const dt_conv_engine_id fprop = forced ? (a == DT_CONV_ALGO_IGEMM64 ? T64 : T128) : G; /* auto: 9x9 is too small */
            EXPECT_MSG(pl.fprop == (sup[i] ? fprop : G) && pl.dgrad == G && pl.wgrad == G, "%s under %s: %d %d %d",
                       odd[i].name, dt_conv_algo_name((dt_conv_algo)a), pl.fprop, pl.dgrad, pl.wgrad);
        }
    }
    /* 32-bit row indices: an input of 2^31 positions or more stays on gemm */
    const dt_conv_problem big = dt_conv_problem_of(1 << 16, 64, 200, 200, 64, dt_geom(3, 1, 1, 1), 1);
    EXPECT_MSG(!on(T128, &big, DT_CONV_FPROP, GPU), "a %lld-row problem reported supported", (long long)(big.N * big.H * big.W));
    /* a grouped problem is not the implicit GEMM's nor the engine's (yet): the column path */
    const dt_conv_problem grouped = dt_conv_problem_of(8, 64, 14, 14, 64, dt_geom(3, 1, 1, 1), 2);
    for (int pass = DT_CONV_FPROP; pass < DT_CONV_PASSES; pass++)
        EXPECT_MSG(!on(T128, &grouped, pass, H100) && !on(S, &grouped, pass, H100),
                   "a grouped problem reported supported (pass %d)", pass);
    /* ... under every algorithm, with or without the engine: dt_conv2d_grouped's passes all run there */
    for (int a = DT_CONV_ALGO_AUTO; a <= DT_CONV_ALGO_SM90; a++)
        for (int sm90 = 0; sm90 < 2; sm90++) {
            const dt_conv_plan pl = dt_conv_plan_bf16(&grouped, (dt_conv_algo)a, sm90 ? H100 : GPU);
            EXPECT_MSG(pl.fprop == G && pl.dgrad == G && pl.wgrad == G, "grouped under %s (engine %d): %d %d %d",
                       dt_conv_algo_name((dt_conv_algo)a), sm90, pl.fprop, pl.dgrad, pl.wgrad);
        }
}

DT_TEST(conv_algo_names_round_trip) {
    for (int a = DT_CONV_ALGO_AUTO; a <= DT_CONV_ALGO_MEASURE; a++)
        EXPECT_EQ_INT(dt_conv_algo_parse(dt_conv_algo_name((dt_conv_algo)a)), a);
    EXPECT_EQ_INT(dt_conv_algo_parse("cudnn"), -1);
    EXPECT_EQ_INT(dt_conv_algo_parse(""), -1);
}

/* How the engine reads each pass's operand (conv_sm90.h, dt_conv_sm90_read) on its edges */
DT_TEST(conv_sm90_reads_its_operands) {
    enum { NO = DT_SM90_NONE, DE = DT_SM90_DENSE, IM = DT_SM90_IM2COL, CO = DT_SM90_COLUMNS };
    const struct {
        const char *name;
        plan_row r;
        int n, fprop, dgrad, wgrad;
    } rows[] = {
        {"3x3 C 64 -> 64", {"", 64, 9, 9, 64, 3, 1, 1, G, G, G, G, G, G}, 2, IM, IM, IM},
        {"3x3 C 32: im2col needs 64-channel blocks", {"", 32, 9, 9, 64, 3, 1, 1, G, G, G, G, G, G}, 2, CO, IM, CO},
        {"3x3 Cout 72: dgrad's im2col of dy too", {"", 64, 9, 9, 72, 3, 1, 1, G, G, G, G, G, G}, 2, IM, NO, IM},
        {"3x3 Cout 12: Cout % 8", {"", 64, 9, 9, 12, 3, 1, 1, G, G, G, G, G, G}, 2, NO, NO, NO},
        {"3x3 s2: no dgrad", {"", 64, 17, 15, 128, 3, 2, 1, G, G, G, G, G, G}, 2, IM, NO, IM},
        {"pointwise 24 -> 40", {"", 24, 9, 7, 40, 1, 1, 0, G, G, G, G, G, G}, 3, DE, DE, CO},
        {"pointwise 20 -> 40: C % 8", {"", 20, 9, 7, 40, 1, 1, 0, G, G, G, G, G, G}, 3, CO, NO, CO},
        {"stem C = 3", {"", 3, 224, 224, 64, 7, 2, 3, G, G, G, G, G, G}, 64, CO, NO, CO},
        {"pad 200: corners past TMA's 8 bits", {"", 64, 9, 9, 64, 3, 1, 200, G, G, G, G, G, G}, 1, CO, NO, CO},
        {"stride 9: past TMA's traversal stride", {"", 64, 40, 40, 64, 3, 9, 1, G, G, G, G, G, G}, 1, CO, NO, CO},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        const dt_conv_problem p = problem(rows[i].n, &rows[i].r);
        const int got[3] = {dt_conv_sm90_read(&p, DT_CONV_FPROP), dt_conv_sm90_read(&p, DT_CONV_DGRAD),
                            dt_conv_sm90_read(&p, DT_CONV_WGRAD)};
        EXPECT_MSG(got[0] == rows[i].fprop && got[1] == rows[i].dgrad && got[2] == rows[i].wgrad,
                   "%s: reads %d %d %d, expected %d %d %d", rows[i].name, got[0], got[1], got[2], rows[i].fprop,
                   rows[i].dgrad, rows[i].wgrad);
        for (int pass = DT_CONV_FPROP; pass < DT_CONV_PASSES; pass++) /* the engine runs what it reads */
            EXPECT_EQ_INT(on(S, &p, pass, H100), got[pass] != NO);
    }
}

/* A grouped problem's plan (dt_conv_plan_grouped): depthwise (groups = C, Cout a multiple) on
 * the depthwise family every pass, on the CPU and - where its tiles fit - the GPU; under
 * conv_algo=gemm, for other group counts and for a kernel too large for the GPU's tiles, the
 * column path. The run log's plan line says `depthwise`. */
DT_TEST(conv_plan_sends_depthwise_to_its_family) {
    const dt_conv_problem dw = dt_conv_problem_of(8, 32, 28, 28, 64, dt_geom(3, 1, 1, 1), 32);
    const dt_conv_problem dw1d = dt_conv_problem_of(32, 512, 1, 1024 + 63 * 128, 512, (dt_conv_geom){1, 64, 1, 1, 0, 0, 1, 128}, 512);
    const dt_conv_problem g2 = dt_conv_problem_of(8, 32, 28, 28, 64, dt_geom(3, 1, 1, 1), 2);
    const dt_conv_problem huge = dt_conv_problem_of(1, 8, 80, 80, 64, dt_geom(63, 1, 31, 1), 8); /* 63x63 taps x 8 outputs */
    for (int gpu = 0; gpu < 2; gpu++)
        for (int a = DT_CONV_ALGO_AUTO; a <= DT_CONV_ALGO_MEASURE; a++) {
            const dt_conv_target t = {gpu, 0};
            const dt_conv_engine_id want = a == DT_CONV_ALGO_GEMM ? DT_CONV_ENGINE_GEMM : DT_CONV_ENGINE_DEPTHWISE;
            const dt_conv_plan p = dt_conv_plan_grouped(&dw, (dt_conv_algo)a, t), q = dt_conv_plan_grouped(&dw1d, (dt_conv_algo)a, t);
            EXPECT_MSG(p.fprop == want && p.dgrad == want && p.wgrad == want && q.fprop == want && q.dgrad == want &&
                           q.wgrad == want, "depthwise under %s (gpu %d): %d %d %d / %d %d %d",
                       dt_conv_algo_name((dt_conv_algo)a), gpu, p.fprop, p.dgrad, p.wgrad, q.fprop, q.dgrad, q.wgrad);
            const dt_conv_plan r = dt_conv_plan_grouped(&g2, (dt_conv_algo)a, t);
            EXPECT_MSG(r.fprop == DT_CONV_ENGINE_GEMM && r.dgrad == DT_CONV_ENGINE_GEMM && r.wgrad == DT_CONV_ENGINE_GEMM,
                       "groups 2 under %s: %d %d %d", dt_conv_algo_name((dt_conv_algo)a), r.fprop, r.dgrad, r.wgrad);
        }
    EXPECT(dt_dw_gpu_supported(&dw) && dt_dw_gpu_supported(&dw1d) && !dt_dw_gpu_supported(&huge));
    EXPECT_EQ_INT(dt_conv_plan_grouped(&huge, DT_CONV_ALGO_AUTO, GPU).fprop, DT_CONV_ENGINE_GEMM);
    EXPECT_EQ_INT(dt_conv_plan_grouped(&huge, DT_CONV_ALGO_AUTO, CPU).fprop, DT_CONV_ENGINE_DEPTHWISE);
    /* the tiles: the 1024 outputs in 128 classes of 8 (ox mod 128), a tile 4 classes of 8,
     * each class's inputs staged 128 apart - 8 + 63 of them, each input element staged once (a
     * contiguous tile of 32 outputs would stage 31 + 63*128 + 1) - within 48 KiB */
    dt_dw_tile t;
    EXPECT(dt_dw_tile_of(&dw1d, DT_CONV_FPROP, DT_DW_SMEM_LIMIT, &t));
    EXPECT_MSG(t.TH == 1 && t.TW == 8 && t.RW == 4 && t.qw == 128 && t.mw == 1 && t.IW == 8 + 63 && t.CB == 32 &&
                   t.ntw == 1 && t.ngw == 32,
               "1-D tile %dx%d of %d classes step %d staged %d CB %d tiles %lld groups %lld", t.TH, t.TW, t.RW, t.qw,
               t.IW, t.CB, (long long)t.ntw, (long long)t.ngw);
    EXPECT(t.smem <= DT_DW_SMEM_LIMIT);

    /* the log's line */
    dt_tensor *x = dt_tensor_new4(DT_CPU, 1, 4, 6, 6), *w = dt_tensor_new4(DT_CPU, 8, 1, 3, 3);
    dt_tensor_fill(x, 0.5f), dt_tensor_fill(w, 0.25f);
    dt_conv2d_grouped(x, w, NULL, dt_geom(3, 1, 1, 1), 4, DT_MATH_FP32);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    dt_conv_plan_print(f);
    fclose(f);
    EXPECT_MSG(strstr(buf, "conv plan: [1, 4, 6, 6] -> 8, 3x3/1 pad 1 grouped (auto): fprop depthwise, dgrad depthwise, wgrad depthwise"),
               "the plan's lines:\n%s", buf);
    free(buf);
}
