/* The per-shape plan of a conv (conv_engine.h): which engine each pass runs on. The rules for
 * the bf16 channels-last conv are the conv lab's measurements (bench/lab/conv_lab.cu, H200,
 * batch 64, docs/conv.md "The plan"): the implicit GEMM wins where im2col's column traffic is a
 * large part of the pass - big M with K <= 1152, and the small strided 1x1s, where one launch
 * replaces a gather and a GEMM - and loses to cuBLAS's GEMM where the pass is compute-bound
 * (layer3-4's 3x3s, ResNet-50's wide 1x1s: the mma.sync mainloop reaches ~170 TFLOP/s, cuBLAS
 * ~350). A pointwise stride-1 conv is cuBLAS on the tensors themselves (no columns to save). On
 * a Hopper GPU the engine of conv_sm90.h (wgmma + TMA) takes the passes it supports, as measured
 * by its own lab (bench/lab/sm90_gemm_lab.cu, docs/conv.md "The Hopper engine"). What each
 * engine can run is the table's (conv_engine.c); this file only chooses among those. */
#include "ops/conv/conv_engine.h"
#include "ops/conv/conv_sm90.h"

#include <string.h>

static const char *const ALGO_NAMES[] = {"auto", "gemm", "igemm128", "igemm64", "sm90", "measure"};

const char *dt_conv_algo_name(dt_conv_algo a) {
    return (unsigned)a < sizeof ALGO_NAMES / sizeof *ALGO_NAMES ? ALGO_NAMES[a] : "?";
}

int dt_conv_algo_parse(const char *s) {
    for (int i = 0; i < (int)(sizeof ALGO_NAMES / sizeof *ALGO_NAMES); i++)
        if (!strcmp(s, ALGO_NAMES[i])) return i;
    return -1;
}

static int supports(dt_conv_engine_id e, const dt_conv_problem *p, dt_conv_pass pass, dt_conv_target t) {
    return dt_conv_engines[e].supports(p, pass, t);
}

/* The engine a forced algorithm names (the one of its name: gemm, igemm128, igemm64, sm90), or
 * DT_CONV_ENGINES for auto and measure, which name none. */
static dt_conv_engine_id named_engine(dt_conv_algo a) {
    for (int e = 0; e < DT_CONV_ENGINES; e++)
        if (!strcmp(dt_conv_engines[e].name, dt_conv_algo_name(a))) return (dt_conv_engine_id)e;
    return DT_CONV_ENGINES;
}

/* base with every pass engine e runs on t moved onto it */
static dt_conv_plan force(dt_conv_plan base, dt_conv_engine_id e, const dt_conv_problem *p, dt_conv_target t) {
    if (supports(e, p, DT_CONV_FPROP, t)) base.fprop = e;
    if (supports(e, p, DT_CONV_DGRAD, t)) base.dgrad = e;
    if (supports(e, p, DT_CONV_WGRAD, t)) base.wgrad = e;
    return base;
}

static const dt_conv_plan COLUMNS = {DT_CONV_ENGINE_GEMM, DT_CONV_ENGINE_GEMM, DT_CONV_ENGINE_GEMM};

/* the measured backward tile: 64x64 for 64 output columns, 128x128 above */
static dt_conv_engine_id tile_for(int64_t cols) { return cols <= 64 ? DT_CONV_ENGINE_IGEMM64 : DT_CONV_ENGINE_IGEMM128; }

/* The auto plan without the Hopper engine: the mma.sync implicit GEMM where it won (its two
 * tiles take the same problems), else cuBLAS. */
static dt_conv_plan plan_mma(const dt_conv_problem *p, dt_conv_target t) {
    dt_conv_plan plan = COLUMNS;
    if (!supports(DT_CONV_ENGINE_IGEMM128, p, DT_CONV_FPROP, t)) return plan;
    const dt_conv_geom g = p->g;
    if (dt_conv_geom_pointwise(g)) return plan;
    if (!supports(DT_CONV_ENGINE_IGEMM128, p, DT_CONV_DGRAD, t)) {
        /* a padded C (the stem's 3 -> 8): fprop only, 0.75x with the 128x128 tile (64x64: 0.85x) */
        if (p->N * p->Ho * p->Wo >= 50176 && (int64_t)g.kh * g.kw * ((p->C + 7) / 8 * 8) <= 1152)
            plan.fprop = DT_CONV_ENGINE_IGEMM128;
        return plan;
    }
    const int64_t M = p->N * p->Ho * p->Wo, Mx = p->N * p->H * p->W, K = (int64_t)g.kh * g.kw * p->C;
    const int64_t macs = M * K * p->Cout;
    const int big = M >= 50176;                                 /* >= 392 row tiles of 128: 3 waves */
    const int small_1x1s = g.kh == 1 && g.kw == 1 && macs <= ((int64_t)1 << 30); /* strided (pointwise is out) */
    /* fprop, on the 128 tile for every Cout (its BK = 64 form beats the 64x64 tile on layer1 too:
     * 0.130 against 0.175 ms): layer1-2's 3x3s (0.73-0.91x of im2col + cuBLAS), the small strided
     * 1x1s (0.84-1.0x; ResNet-50's wide ones, 16x the MACs, lose: 1.4-2.2x) */
    if ((big && K <= 1152 && g.kh * g.kw > 1) || small_1x1s) plan.fprop = DT_CONV_ENGINE_IGEMM128;
    /* dgrad (K = kh*kw*Cout): layer1's 3x3 (64x64: 0.82x) and the strided 1x1s with >= 50176 input
     * rows (0.90x); every strided 3x3 loses (the zero-filled taps: 2.3-9.8x) */
    const int stride1 = g.sh == 1 && g.sw == 1;
    if ((stride1 && p->C <= 64 && p->Cout <= 64 && big) || (small_1x1s && Mx >= 50176)) plan.dgrad = tile_for(p->C);
    /* wgrad: layer1's 3x3 (64 x 128 tiles: 0.90x); elsewhere cuBLAS's long-K GEMM is faster */
    if (p->Cout <= 64 && big && K <= 576) plan.wgrad = DT_CONV_ENGINE_IGEMM64;
    return plan;
}

/* A forced algorithm: every pass its engine runs on it - sm90's others as auto, igemm128's and
 * igemm64's on the column path (gemm: all of them). auto on a Hopper GPU: every fprop the
 * engine supports (the lab, batch 64: 0.37-0.79x of cuDNN's fprop time on every ResNet-18 conv,
 * docs/conv.md "The Hopper engine"); stride-1 dgrad; wgrad where the reduction is long enough
 * for its split to fill the SMs: M >= 12544 rows (layer4's 3136 at batch 64 stay on cuBLAS,
 * 0.94x of the engine) and M >= 4 K (ResNet-50's 3x3s of K = 4608 over 12544 rows lose), except
 * the 1x1s of K >= 512. The pointwise stride-1 convs of >= 2^31 MACs stay on cuBLAS, every
 * pass: conv_algo=measure chose it for each of ResNet-50's at batch 256 but one fprop, and auto
 * with them ran 43.95 ms a step against measure's 38.86 (docs/logs/2026-12-03/call2_measured_plans).
 * The rest as without the engine (measure, which conv_op.c plans by timing the candidates, too). */
dt_conv_plan dt_conv_plan_bf16(const dt_conv_problem *p, dt_conv_algo algo, dt_conv_target t) {
    const dt_conv_engine_id named = named_engine(algo);
    if (named == DT_CONV_ENGINE_SM90) return force(plan_mma(p, t), named, p, t);
    if (named != DT_CONV_ENGINES) return force(COLUMNS, named, p, t);
    dt_conv_plan plan = plan_mma(p, t);
    if (algo != DT_CONV_ALGO_AUTO || !t.sm90a) return plan;
    const int64_t M = p->N * p->Ho * p->Wo, K = (int64_t)p->g.kh * p->g.kw * p->C;
    if (dt_conv_geom_pointwise(p->g) && M * K * p->Cout >= ((int64_t)1 << 31)) return plan;
    const int wgrad_long = M >= 12544 && M >= 4 * K && !(p->g.kh * p->g.kw == 1 && K >= 512);
    /* the column matrix is written and read once more than the other reads: measured for the
     * stem (C = 3), where the mma.sync path pads C to 8 and cuBLAS's wgrad materializes the
     * columns anyway; other C keep their measured paths */
    const int columns_ok = p->C % 8 != 0;
    const dt_conv_engine_id S = DT_CONV_ENGINE_SM90;
    if (supports(S, p, DT_CONV_FPROP, t) && (dt_conv_sm90_read(p, DT_CONV_FPROP) != DT_SM90_COLUMNS || columns_ok))
        plan.fprop = S;
    if (supports(S, p, DT_CONV_DGRAD, t)) plan.dgrad = S;
    if (supports(S, p, DT_CONV_WGRAD, t) && (dt_conv_sm90_read(p, DT_CONV_WGRAD) != DT_SM90_COLUMNS || columns_ok) &&
        wgrad_long)
        plan.wgrad = S;
    return plan;
}

/* Depthwise: the direct stencil moves the tensors' bytes once (docs/conv.md "Depthwise") where
 * the column path writes and reads kh*kw times the input and runs C*kh*kw GEMMs of K = 1 a
 * chunk; the GPU's times are pending (docs/conv.md), so this is the design's choice, not yet a
 * measured one. The family takes every pass of a problem or none. */
dt_conv_plan dt_conv_plan_grouped(const dt_conv_problem *p, dt_conv_algo algo, dt_conv_target t) {
    return algo == DT_CONV_ALGO_GEMM ? COLUMNS : force(COLUMNS, DT_CONV_ENGINE_DEPTHWISE, p, t);
}
