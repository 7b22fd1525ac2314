/* The per-shape plan of the bf16 channels-last conv (conv_igemm.h): which pass runs on the
 * implicit GEMM. The rules are the conv lab's measurements (bench/lab/conv_lab.cu, H200, batch
 * 64, docs/conv.md "The plan"): the implicit GEMM wins where im2col's column traffic is a large
 * part of the pass - big M with K <= 1152, and the small strided 1x1s, where one launch replaces
 * a gather and a GEMM - and loses to cuBLAS's GEMM where the pass is compute-bound (layer3-4's
 * 3x3s, ResNet-50's wide 1x1s: the mma.sync mainloop reaches ~170 TFLOP/s, cuBLAS ~350). A
 * pointwise stride-1 conv is cuBLAS on the tensors themselves (no columns to save). On a Hopper
 * GPU the engine of conv_sm90.h (wgmma + TMA) takes the passes it supports, as measured by its
 * own lab (bench/lab/sm90_gemm_lab.cu, docs/conv.md "The Hopper engine"). */
#include "ops/conv/conv_igemm.h"
#include "ops/conv/depthwise.h"

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

int dt_igemm_supported(const dt_conv_problem *p) {
    const int64_t lim = (int64_t)1 << 31, C8 = (p->C + 7) / 8 * 8;
    if (p->groups != 1 || p->Cout % 8 || p->C < 1 || p->Cout < 1 || p->N * p->Ho * p->Wo >= lim || p->N * p->H * p->W * C8 >= lim * 8 ||
        p->g.kh * p->g.kw * (C8 > p->Cout ? C8 : p->Cout) >= lim)
        return 0;
    return DT_IGEMM_FPROP | (p->C % 8 == 0 ? DT_IGEMM_BACKWARD : 0);
}

static int pointwise(const dt_conv_geom g) {
    return g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
}

/* ---- the Hopper engine's limits (conv_igemm.h: dt_conv_sm90_supports) */

/* corners of the bounding box of window origins on one axis, as TMA's im2col mode takes them:
 * from -p (the first origin, against the top-left) to (o - 1) s - p - (i - 1) (the last origin
 * against the bottom-right pixel i - 1); a 4-D im2col map holds them in 8 bits */
static int corner_ok(int64_t c) { return c >= -128 && c <= 127; }
static int64_t upper_corner(int64_t i, int64_t o, int64_t s, int64_t p) { return (o - 1) * s - p - (i - 1); }

/* x [N, H, W, C] read through the windows of g (Ho x Wo an image) by TMA's im2col mode */
static int im2col_ok(int64_t H, int64_t W, int64_t Ho, int64_t Wo, dt_conv_geom g) {
    return g.sh <= 8 && g.sw <= 8 && g.ph >= 0 && g.pw >= 0 && corner_ok(-g.ph) && corner_ok(-g.pw) &&
           corner_ok(upper_corner(H, Ho, g.sh, g.ph)) && corner_ok(upper_corner(W, Wo, g.sw, g.pw)) &&
           (int64_t)(g.kh - 1) * g.dh < 65536 && (int64_t)(g.kw - 1) * g.dw < 65536;
}

dt_sm90_read dt_conv_sm90_read(const dt_conv_problem *p, int pass) {
    const dt_conv_geom g = p->g;
    const int64_t lim = (int64_t)1 << 31, taps = (int64_t)g.kh * g.kw;
    if (p->groups != 1 || p->C < 1 || p->Cout < 1 || p->N * p->H * p->W >= lim || p->N * p->Ho * p->Wo >= lim ||
        taps * (p->C > p->Cout ? p->C : p->Cout) >= lim)
        return DT_SM90_NONE;
    const int pw = pointwise(g);
    if (pass == DT_SM90_DGRAD) {
        if (g.sh != 1 || g.sw != 1 || p->C % 8) return DT_SM90_NONE;
        if (pw) return p->Cout % 8 == 0 ? DT_SM90_DENSE : DT_SM90_NONE;
        return p->Cout % 64 == 0 && im2col_ok(p->Ho, p->Wo, p->H, p->W, dt_conv_dgrad_geom(g)) ? DT_SM90_IM2COL
                                                                                               : DT_SM90_NONE;
    }
    if (p->Cout % 8) return DT_SM90_NONE;
    if (pass == DT_SM90_FPROP && pw && p->C % 8 == 0) return DT_SM90_DENSE;
    return p->C % 64 == 0 && im2col_ok(p->H, p->W, p->Ho, p->Wo, g) ? DT_SM90_IM2COL : DT_SM90_COLUMNS;
}

int dt_conv_sm90_supports(const dt_conv_problem *p) {
    int s = 0;
    for (int pass = DT_SM90_FPROP; pass <= DT_SM90_WGRAD; pass <<= 1)
        if (dt_conv_sm90_read(p, pass) != DT_SM90_NONE) s |= pass;
    return s;
}

/* the measured backward tile: 64x64 for 64 output columns, 128x128 above */
static int tile_for(int64_t cols) { return cols <= 64 ? DT_IGEMM_TILE_64 : DT_IGEMM_TILE_128; }

/* The plan without the Hopper engine: the mma.sync implicit GEMM where it won, else cuBLAS. */
static dt_conv_plan plan_mma(const dt_conv_problem *p, dt_conv_algo algo) {
    dt_conv_plan plan = {-1, -1, -1};
    const int sup = dt_igemm_supported(p);
    if (algo == DT_CONV_ALGO_GEMM || !sup) return plan;
    const int back = (sup & DT_IGEMM_BACKWARD) != 0;
    if (algo == DT_CONV_ALGO_IGEMM128 || algo == DT_CONV_ALGO_IGEMM64) {
        const int t = algo == DT_CONV_ALGO_IGEMM64 ? DT_IGEMM_TILE_64 : DT_IGEMM_TILE_128;
        plan.fprop = t;
        if (back) plan.dgrad = plan.wgrad = t;
        return plan;
    }
    const dt_conv_geom g = p->g;
    if (pointwise(g)) return plan;
    if (!back) { /* a padded C (the stem's 3 -> 8): fprop only, 0.75x with the 128x128 tile (64x64: 0.85x) */
        if (p->N * p->Ho * p->Wo >= 50176 && (int64_t)g.kh * g.kw * ((p->C + 7) / 8 * 8) <= 1152) plan.fprop = DT_IGEMM_TILE_128;
        return plan;
    }
    const int64_t M = p->N * p->Ho * p->Wo, Mx = p->N * p->H * p->W, K = (int64_t)g.kh * g.kw * p->C;
    const int64_t macs = M * K * p->Cout;
    const int big = M >= 50176;                                 /* >= 392 row tiles of 128: 3 waves */
    const int small_1x1s = g.kh == 1 && g.kw == 1 && macs <= ((int64_t)1 << 30); /* strided (pointwise is out) */
    /* fprop, on the 128 tile for every Cout (its BK = 64 form beats the 64x64 tile on layer1 too:
     * 0.130 against 0.175 ms): layer1-2's 3x3s (0.73-0.91x of im2col + cuBLAS), the small strided
     * 1x1s (0.84-1.0x; ResNet-50's wide ones, 16x the MACs, lose: 1.4-2.2x) */
    if ((big && K <= 1152 && g.kh * g.kw > 1) || small_1x1s) plan.fprop = DT_IGEMM_TILE_128;
    /* dgrad (K = kh*kw*Cout): layer1's 3x3 (64x64: 0.82x) and the strided 1x1s with >= 50176 input
     * rows (0.90x); every strided 3x3 loses (the zero-filled taps: 2.3-9.8x) */
    const int stride1 = g.sh == 1 && g.sw == 1;
    if ((stride1 && p->C <= 64 && p->Cout <= 64 && big) || (small_1x1s && Mx >= 50176)) plan.dgrad = tile_for(p->C);
    /* wgrad: layer1's 3x3 (64 x 128 tiles: 0.90x); elsewhere cuBLAS's long-K GEMM is faster */
    if (p->Cout <= 64 && big && K <= 576) plan.wgrad = DT_IGEMM_TILE_64;
    return plan;
}

/* The plan on a Hopper GPU: every fprop the engine supports (the lab, batch 64: 0.37-0.79x of
 * cuDNN's fprop time on every ResNet-18 conv, docs/conv.md "The Hopper engine"); stride-1
 * dgrad; wgrad where the reduction is long enough for its split to fill the SMs: M >= 12544
 * rows (layer4's 3136 at batch 64 stay on cuBLAS, 0.94x of the engine) and M >= 4 K (ResNet-50's
 * 3x3s of K = 4608 over 12544 rows lose), except the 1x1s of K >= 512. The pointwise stride-1
 * convs of >= 2^31 MACs stay on cuBLAS, every pass: conv_algo=measure chose it for each of
 * ResNet-50's at batch 256 but one fprop, and auto with them ran 43.95 ms a step against
 * measure's 38.86 (docs/logs/2026-12-03/call2_measured_plans). sm90 forced: every pass it
 * supports. The rest as without it. */
dt_conv_plan dt_conv_plan_bf16(const dt_conv_problem *p, dt_conv_algo algo, int sm90) {
    const int forced = algo == DT_CONV_ALGO_SM90;
    dt_conv_plan plan = plan_mma(p, forced ? DT_CONV_ALGO_AUTO : algo);
    if (!forced && !(sm90 && algo == DT_CONV_ALGO_AUTO)) return plan;
    const int64_t M = p->N * p->Ho * p->Wo, K = (int64_t)p->g.kh * p->g.kw * p->C;
    if (!forced && pointwise(p->g) && M * K * p->Cout >= ((int64_t)1 << 31)) return plan;
    const int wgrad_long = M >= 12544 && M >= 4 * K && !(p->g.kh * p->g.kw == 1 && K >= 512);
    /* the column matrix is written and read once more than the other reads: measured for the
     * stem (C = 3), where the mma.sync path pads C to 8 and cuBLAS's wgrad materializes the
     * columns anyway; other C keep their measured paths unless forced */
    const dt_sm90_read rf = dt_conv_sm90_read(p, DT_SM90_FPROP), rw = dt_conv_sm90_read(p, DT_SM90_WGRAD);
    const int columns_ok = forced || p->C % 8 != 0;
    if (rf != DT_SM90_NONE && (rf != DT_SM90_COLUMNS || columns_ok)) plan.fprop = DT_IGEMM_TILE_SM90;
    if (dt_conv_sm90_read(p, DT_SM90_DGRAD) != DT_SM90_NONE) plan.dgrad = DT_IGEMM_TILE_SM90;
    if (rw != DT_SM90_NONE && (rw != DT_SM90_COLUMNS || columns_ok) && (forced || wgrad_long))
        plan.wgrad = DT_IGEMM_TILE_SM90;
    return plan;
}

/* Depthwise: the direct stencil moves the tensors' bytes once (docs/conv.md "Depthwise") where
 * the column path writes and reads kh*kw times the input and runs C*kh*kw GEMMs of K = 1 a
 * chunk; the GPU's times are pending (docs/conv.md), so this is the design's choice, not yet a
 * measured one. */
dt_conv_plan dt_conv_plan_grouped(const dt_conv_problem *p, dt_conv_algo algo, int gpu) {
    const dt_conv_plan columns = {DT_CONV_PASS_GEMM, DT_CONV_PASS_GEMM, DT_CONV_PASS_GEMM};
    const dt_conv_plan dw = {DT_CONV_PASS_DEPTHWISE, DT_CONV_PASS_DEPTHWISE, DT_CONV_PASS_DEPTHWISE};
    if (!dt_dw_problem(p) || algo == DT_CONV_ALGO_GEMM || (gpu && !dt_dw_gpu_supported(p))) return columns;
    return dw;
}
