/* The per-shape plan of the bf16 channels-last conv (conv_igemm.h): which pass runs on the
 * implicit GEMM. The rules are the conv lab's measurements (bench/lab/conv_lab.cu, H200, batch
 * 64, docs/conv.md "The plan"): the implicit GEMM wins where im2col's column traffic is a large
 * part of the pass - big M with K <= 1152, and the small strided 1x1s, where one launch replaces
 * a gather and a GEMM - and loses to cuBLAS's GEMM where the pass is compute-bound (layer3-4's
 * 3x3s, ResNet-50's wide 1x1s: the mma.sync mainloop reaches ~170 TFLOP/s, cuBLAS ~350). A
 * pointwise stride-1 conv is cuBLAS on the tensors themselves (no columns to save). */
#include "ops/conv/conv_igemm.h"

#include <string.h>

static const char *const ALGO_NAMES[] = {"auto", "gemm", "igemm128", "igemm64"};

const char *dt_conv_algo_name(dt_conv_algo a) {
    return (unsigned)a < sizeof ALGO_NAMES / sizeof *ALGO_NAMES ? ALGO_NAMES[a] : "?";
}

int dt_conv_algo_parse(const char *s) {
    for (int i = 0; i < (int)(sizeof ALGO_NAMES / sizeof *ALGO_NAMES); i++)
        if (!strcmp(s, ALGO_NAMES[i])) return i;
    return -1;
}

int dt_igemm_supported(const dt_igemm_conv *p) {
    const int64_t lim = (int64_t)1 << 31, C8 = (p->C + 7) / 8 * 8;
    if (p->Cout % 8 || p->C < 1 || p->Cout < 1 || p->N * p->Ho * p->Wo >= lim || p->N * p->H * p->W * C8 >= lim * 8 ||
        p->g.kh * p->g.kw * (C8 > p->Cout ? C8 : p->Cout) >= lim)
        return 0;
    return DT_IGEMM_FPROP | (p->C % 8 == 0 ? DT_IGEMM_BACKWARD : 0);
}

static int pointwise(const dt_conv_geom g) {
    return g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
}

/* the measured backward tile: 64x64 for 64 output columns, 128x128 above */
static int tile_for(int64_t cols) { return cols <= 64 ? DT_IGEMM_TILE_64 : DT_IGEMM_TILE_128; }

dt_conv_plan dt_conv_plan_bf16(const dt_igemm_conv *p, dt_conv_algo algo) {
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
