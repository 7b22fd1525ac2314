/* The Hopper engine's side that every build has (conv_sm90.h): its limits - how it reads each
 * pass's operand, asked by the plan, the engine table and the kernels (conv_sm90.cu) alike -
 * and its CPU twins, the implicit GEMM's, whose function it computes. */
#include "ops/conv/conv_igemm.h"
#include "ops/conv/conv_sm90.h"

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

dt_sm90_read dt_conv_sm90_read(const dt_conv_problem *p, dt_conv_pass pass) {
    const dt_conv_geom g = p->g;
    const int64_t lim = (int64_t)1 << 31, taps = (int64_t)g.kh * g.kw;
    if (p->groups != 1 || p->C < 1 || p->Cout < 1 || p->N * p->H * p->W >= lim || p->N * p->Ho * p->Wo >= lim ||
        taps * (p->C > p->Cout ? p->C : p->Cout) >= lim)
        return DT_SM90_NONE;
    const int pw = dt_conv_geom_pointwise(g);
    if (pass == DT_CONV_DGRAD) {
        if (g.sh != 1 || g.sw != 1 || p->C % 8) return DT_SM90_NONE;
        if (pw) return p->Cout % 8 == 0 ? DT_SM90_DENSE : DT_SM90_NONE;
        return p->Cout % 64 == 0 && im2col_ok(p->Ho, p->Wo, p->H, p->W, dt_conv_dgrad_geom(g)) ? DT_SM90_IM2COL
                                                                                               : DT_SM90_NONE;
    }
    if (p->Cout % 8) return DT_SM90_NONE;
    if (pass == DT_CONV_FPROP && pw && p->C % 8 == 0) return DT_SM90_DENSE;
    return p->C % 64 == 0 && im2col_ok(p->H, p->W, p->Ho, p->Wo, g) ? DT_SM90_IM2COL : DT_SM90_COLUMNS;
}

/* The twins: the implicit GEMM's on any tile (the tile does not change their function). */
void dt_conv_sm90_fprop_cpu(const dt_conv_problem *p, const void *x, const void *w, const float *bias, void *y,
                            dt_conv_stats *stats) {
    dt_conv_igemm_fprop_bf16_cpu(p, DT_IGEMM_TILE_128, x, w, bias, y, stats);
}
void dt_conv_sm90_dgrad_cpu(const dt_conv_problem *p, const void *dy, const void *w, float beta, void *dx) {
    dt_conv_igemm_dgrad_bf16_cpu(p, DT_IGEMM_TILE_128, dy, w, beta, dx);
}
void dt_conv_sm90_wgrad_cpu(const dt_conv_problem *p, const void *x, const void *dy, float beta, float *dw) {
    dt_conv_igemm_wgrad_bf16_cpu(p, DT_IGEMM_TILE_128, x, dy, beta, dw);
}
