/* deform_scan.h: the candidate logic of the index-free gather (dx=scan), host + device, so that
 * the CPU twin (deform_nhwc_cpu.c) runs the very code of the CUDA kernel (k_gather_scan,
 * deform_nhwc.cuh).
 *
 * The gather's row (pixel (iy, ix) of image i, offset group g) sums, for its corner t = 0..3,
 * the samples whose bilinear top-left corner is (ty, tx) = (iy - t/2, ix - t%2). The inverse
 * index lists them; the scan finds them from the offsets instead. Sample (q, k) of position
 * (oy, ox), tap (ky, kx) sits at
 *     y = (float)by + dy,  by = oy*sh - ph + ky*dh      (x likewise: bx = ox*sw - pw + kx*dw)
 * and its top-left is (ty, tx) only when floor(y) = ty and floor(x) = tx. With |dy| <= hy (the
 * chunk's bound, dt_deform_offset_bound) that needs ty - hy - e <= by < ty + 1 + hy + e, e the
 * rounding of the float sum; e <= 1/8 while every coordinate is an integer below 2^24 and a hit
 * below 2^22 (then a float's ulp there is <= 1/4), and the window uses a margin of 1/2:
 *     by in [ty - floor(hy + 1/2), ty + ceil(hy + 1/2)]
 * (bx likewise). Outside that regime, or when the bound is not a number in [0, 2^22) (inf from
 * an infinite offset, NaN from a bad caller), the window is every position: the result stays
 * exact, only slower. Each candidate in the window is then decided exactly as the index decides
 * it (dt_sample_bilin + dt_sample_key: same key, same hit), so the window is only a pruning:
 * a larger bound never changes a result. */
#ifndef DT_DEFORM_SCAN_H
#define DT_DEFORM_SCAN_H

#include <stdint.h>

#include "ops/deform/deform_chunk.h"

/* One corner's window: base coordinates by in [ylo, yhi] and bx in [xlo, xhi]; the positions with
 * some tap in it, oy in [oy0, oy1] and ox in [ox0, ox1] (empty when oy0 > oy1 or ox0 > ox1). */
typedef struct {
    int ty, tx;         /* the target top-left (in [-1, H) x [-1, W)) */
    int ylo, yhi, xlo, xhi;
    int oy0, oy1, ox0, ox1;
} dt_scan_window;

/* floor(a / b) for b > 0, any sign of a */
DT_HD int dt_scan_floor_div(int a, int b) { return a >= 0 ? a / b : -((-a - 1) / b) - 1; }

/* One dimension: t the target, h the bound, n positions of stride s, padding p, kn taps of
 * dilation d, size the input's extent. In the window's regime every term is below 2^25 (no
 * overflow in 32 bits); outside it, every position. */
DT_HD void dt_scan_dim(float h, int t, int n, int s, int p, int d, int kn, int size, int *lo, int *hi, int *o0,
                       int *o1) {
    const int64_t reach = (int64_t)(n - 1) * s + (int64_t)(kn - 1) * d; /* the largest by + p */
    if (!(size < (1 << 22) && reach < (1 << 24) && p < (1 << 24) && h >= 0.0f && h < 4194304.0f)) { /* NaN: false */
        *lo = INT32_MIN;
        *hi = INT32_MAX;
        *o0 = 0;
        *o1 = n - 1;
        return;
    }
    const float a = h + 0.5f; /* exact below 2^22 */
    const int l = t - (int)floorf(a), u = t + (int)ceilf(a);
    *lo = l;
    *hi = u;
    /* oy*s - p + ky*d in [l, u] for some ky in [0, kn): oy in [ceil((l + p - (kn-1)d) / s), floor((u + p) / s)] */
    const int a0 = -dt_scan_floor_div(-(l + p - (kn - 1) * d), s), a1 = dt_scan_floor_div(u + p, s);
    *o0 = a0 < 0 ? 0 : a0 > n ? n : a0;
    *o1 = a1 < -1 ? -1 : a1 > n - 1 ? n - 1 : a1;
}

/* The window of corner target (ty, tx) under the bound (hy, hx). */
DT_HD dt_scan_window dt_scan_window_make(const dt_deform_chunk *c, float hy, float hx, int ty, int tx) {
    dt_scan_window w;
    w.ty = ty;
    w.tx = tx;
    dt_scan_dim(hy, ty, c->Ho, c->sh, c->ph, c->dh, c->kh, c->H, &w.ylo, &w.yhi, &w.oy0, &w.oy1);
    dt_scan_dim(hx, tx, c->Wo, c->sw, c->pw, c->dw, c->kw, c->W, &w.xlo, &w.xhi, &w.ox0, &w.ox1);
    return w;
}

/* Whether sample (q, k, g) - q at (oy, ox) - has the index key `key`, decided as the index decides
 * it; then *wt = its corner t's weight times the mask (the index's wm). The window test and the
 * floor test only skip samples that cannot have the key (a hit has floor(y) = ty and floor(x) =
 * tx, y and x computed as dt_sample_bilin computes them). */
DT_HD int dt_scan_hit(const dt_deform_chunk *c, const dt_scan_window *w, const float *om, int q, int oy, int ox, int k,
                      int g, int t, uint32_t key, float *wt) {
    uint32_t kyu;
    const int kx = (int)dt_fastdiv_divmod((uint32_t)k, c->fkw, &kyu), ky = (int)kyu;
    const int by = oy * c->sh - c->ph + ky * c->dh, bx = ox * c->sw - c->pw + kx * c->dw;
    if (by < w->ylo || by > w->yhi || bx < w->xlo || bx > w->xhi) return 0;
    const float *d = om + (int64_t)q * c->OCS + 2 * (g * c->K + k);
    if (floorf((float)by + d[0]) != (float)w->ty || floorf((float)bx + d[1]) != (float)w->tx) return 0;
    int i;
    float m;
    const dt_bilin b = dt_sample_bilin(c, om, q, k, g, &i, &m);
    if (dt_sample_key(c, &b, i, g, UINT32_MAX) != key) return 0;
    *wt = b.ok[t] ? b.w[t] * m : 0.0f;
    return 1;
}

#endif
