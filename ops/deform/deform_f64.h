/* deform_f64.h: the deformable convolution in double precision - torchvision.ops.deform_conv2d
 * with weight groups and offset groups, forward and every gradient - for the C API's f64 calls
 * (PyTorch's float64 tensors: torch.autograd.gradcheck's finite differences need them).
 *
 * Written for being right, not fast: every output element is one sum over its inputs, computed
 * by one thread (a CUDA thread, or one iteration of the CPU twin's loop) with no atomics and no
 * shared partial sums, so the results do not depend on the thread count or the schedule, and
 * the CPU twin (deform_f64_cpu.c) and the CUDA kernels (deform_f64.cu) run the very functions
 * below. The CUDA side is a simple, slow kernel per output (docs/deform_api.md: what it costs).
 *
 * Shapes, all NCHW and dense (K = kh*kw taps, P = Ho*Wo positions, G offset groups of C/G
 * channels, WG weight groups of C/WG input and Cout/WG output channels):
 *   x       [N, C, H, W]              dx the same
 *   offset  [N, 2*G*K, Ho, Wo]        channel (g*K + k)*2 = dy, +1 = dx of tap k, group g
 *   mask    [N, G*K, Ho, Wo] or NULL  channel g*K + k (NULL: DCNv1, all ones)
 *   weight  [Cout, C/WG, kh, kw]      output channel o reads input channels of its group
 *                                     (o / (Cout/WG)) * C/WG ... + C/WG - 1
 *   bias    [Cout] or NULL
 *   y       [N, Cout, Ho, Wo]
 * y[n, o, p] = bias[o] + sum over the group's channels c and taps k of
 *              w[o, c', k] * mask[n, g(c), k, p] * bilinear(x[n, c], tap position + offset).
 * Bilinear sampling is torchvision's: 0 when y <= -1, y >= H, x <= -1 or x >= W, else the four
 * corners' weighted sum with a corner outside the plane counting 0 (ops/deform/deform_bilinear.h
 * says the same in float); a NaN coordinate gives NaN. */
#ifndef DT_K_DEFORM_F64_H
#define DT_K_DEFORM_F64_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "ops/conv/conv_geom.h"
#include "ops/deform/deform_bilinear.h" /* DT_HD: host + device inline */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    dt_conv_problem p; /* p.groups: the weight groups (C % groups == 0 and Cout % groups == 0) */
    int64_t G;         /* offset groups: C % G == 0 */
} dt_deform_f64_shape;

/* Every gradient pointer may be NULL (not wanted); the others are overwritten. */
#define DT_DECL_DEFORM_F64(sfx)                                                                                     \
    void dt_deform_f64_forward_##sfx(const dt_deform_f64_shape *s, const double *x, const double *offset,          \
                                     const double *mask, const double *w, const double *bias, double *y);          \
    void dt_deform_f64_backward_##sfx(const dt_deform_f64_shape *s, const double *x, const double *offset,         \
                                      const double *mask, const double *w, const double *dy, double *dx,           \
                                      double *doffset, double *dmask, double *dw, double *db);

DT_DECL_DEFORM_F64(cpu)
DT_DECL_DEFORM_F64(cuda)

#ifdef __cplusplus
}
#endif

/* ---- the per-element arithmetic both twins run ---- */

/* Where tap k of offset group g samples for output position p of image n: (*y, *x) in the input
 * plane, and the tap's mask (1 without one). */
DT_HD void dt_f64_tap(const dt_deform_f64_shape *s, const double *offset, const double *mask, int64_t n, int64_t g,
                      int64_t k, int64_t p, double *y, double *x, double *m) {
    int64_t K = (int64_t)s->p.g.kh * s->p.g.kw, P = s->p.Ho * s->p.Wo, tap = (n * s->G + g) * K + k;
    int64_t oy = p / s->p.Wo, ox = p % s->p.Wo, ky = k / s->p.g.kw, kx = k % s->p.g.kw;
    *m = mask ? mask[tap * P + p] : 1.0;
    *y = (double)(oy * s->p.g.sh - s->p.g.ph + ky * s->p.g.dh) + offset[tap * 2 * P + p];
    *x = (double)(ox * s->p.g.sw - s->p.g.pw + kx * s->p.g.dw) + offset[(tap * 2 + 1) * P + p];
}

/* The bilinear sample of an H x W plane at (y, x); with dvy / dvx not NULL also its derivatives
 * along y and x. Corner q (0..3) is (floor(y) + q/2, floor(x) + q%2) with weight
 * wy(q) * wx(q), wy = 1 - ly or ly, wx = 1 - lx or lx (l the fractional parts). */
DT_HD double dt_f64_sample(const double *plane, int64_t H, int64_t W, double y, double x, double *dvy, double *dvx) {
    double v = 0.0, gy = 0.0, gx = 0.0;
    if (y != y || x != x) { /* NaN: loud, not the zero region */
        v = gy = gx = y + x;
    } else if (y > -1.0 && y < (double)H && x > -1.0 && x < (double)W) {
        double fy = floor(y), fx = floor(x), ly = y - fy, lx = x - fx;
        for (int q = 0; q < 4; q++) {
            int64_t yy = (int64_t)fy + (q >> 1), xx = (int64_t)fx + (q & 1);
            if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
            double c = plane[yy * W + xx], wy = (q >> 1) ? ly : 1.0 - ly, wx = (q & 1) ? lx : 1.0 - lx;
            v += wy * wx * c;
            gy += ((q >> 1) ? wx : -wx) * c;
            gx += ((q & 1) ? wy : -wy) * c;
        }
    }
    if (dvy) *dvy = gy;
    if (dvx) *dvx = gx;
    return v;
}

/* The adjoint of dt_f64_sample's value: adds g * (corner weight) to each corner inside the
 * plane (nothing for a sample in the zero region or at a NaN coordinate). */
DT_HD void dt_f64_spread(double *plane, int64_t H, int64_t W, double y, double x, double g) {
    if (!(y > -1.0 && y < (double)H && x > -1.0 && x < (double)W)) return;
    double fy = floor(y), fx = floor(x), ly = y - fy, lx = x - fx;
    for (int q = 0; q < 4; q++) {
        int64_t yy = (int64_t)fy + (q >> 1), xx = (int64_t)fx + (q & 1);
        if (yy >= 0 && yy < H && xx >= 0 && xx < W)
            plane[yy * W + xx] += ((q >> 1) ? ly : 1.0 - ly) * ((q & 1) ? lx : 1.0 - lx) * g;
    }
}

/* d loss / d (the sample of input channel c at tap k, position p of image n) before the mask:
 * the sum over the output channels of c's weight group of w[o, c', k] * dy[n, o, p]. */
DT_HD double dt_f64_sample_grad(const dt_deform_f64_shape *s, const double *w, const double *dy, int64_t n, int64_t c,
                                int64_t k, int64_t p) {
    int64_t K = (int64_t)s->p.g.kh * s->p.g.kw, P = s->p.Ho * s->p.Wo, Cw = s->p.C / s->p.groups, Ow = s->p.Cout / s->p.groups;
    int64_t o0 = c / Cw * Ow, cw = c % Cw;
    double acc = 0.0;
    for (int64_t o = o0; o < o0 + Ow; o++) acc += w[(o * Cw + cw) * K + k] * dy[(n * s->p.Cout + o) * P + p];
    return acc;
}

/* y[i], i = (n*Cout + o)*P + p. */
DT_HD double dt_f64_y_at(const dt_deform_f64_shape *s, const double *x, const double *offset, const double *mask,
                         const double *w, const double *bias, int64_t i) {
    int64_t K = (int64_t)s->p.g.kh * s->p.g.kw, P = s->p.Ho * s->p.Wo, Cw = s->p.C / s->p.groups, Ow = s->p.Cout / s->p.groups;
    int64_t p = i % P, o = (i / P) % s->p.Cout, n = i / (P * s->p.Cout), c0 = o / Ow * Cw;
    double acc = bias ? bias[o] : 0.0;
    for (int64_t cw = 0; cw < Cw; cw++) {
        int64_t c = c0 + cw;
        const double *plane = x + (n * s->p.C + c) * s->p.H * s->p.W;
        for (int64_t k = 0; k < K; k++) {
            double yy, xx, m;
            dt_f64_tap(s, offset, mask, n, c / (s->p.C / s->G), k, p, &yy, &xx, &m);
            acc += w[(o * Cw + cw) * K + k] * m * dt_f64_sample(plane, s->p.H, s->p.W, yy, xx, NULL, NULL);
        }
    }
    return acc;
}

/* The input gradient of one plane, nc = n*C + c: dx[nc] = every sample of channel c of image n
 * spread back with its mask, in position and tap order. Writes the whole plane. */
DT_HD void dt_f64_dx_plane(const dt_deform_f64_shape *s, const double *offset, const double *mask, const double *w,
                           const double *dy, int64_t nc, double *dx) {
    int64_t K = (int64_t)s->p.g.kh * s->p.g.kw, P = s->p.Ho * s->p.Wo, n = nc / s->p.C, c = nc % s->p.C;
    double *plane = dx + nc * s->p.H * s->p.W;
    for (int64_t i = 0; i < s->p.H * s->p.W; i++) plane[i] = 0.0;
    for (int64_t p = 0; p < P; p++)
        for (int64_t k = 0; k < K; k++) {
            double yy, xx, m;
            dt_f64_tap(s, offset, mask, n, c / (s->p.C / s->G), k, p, &yy, &xx, &m);
            dt_f64_spread(plane, s->p.H, s->p.W, yy, xx, m * dt_f64_sample_grad(s, w, dy, n, c, k, p));
        }
}

/* The offset and mask gradients of one tap, t = ((n*G + g)*K + k)*P + p (the mask's own
 * index): sums over the offset group's channels. doffset or dmask may be NULL. */
DT_HD void dt_f64_doffset_at(const dt_deform_f64_shape *s, const double *x, const double *offset, const double *mask,
                             const double *w, const double *dy, int64_t t, double *doffset, double *dmask) {
    int64_t K = (int64_t)s->p.g.kh * s->p.g.kw, P = s->p.Ho * s->p.Wo, Cg = s->p.C / s->G;
    int64_t p = t % P, k = (t / P) % K, g = (t / (P * K)) % s->G, n = t / (P * K * s->G);
    double yy, xx, m, sy = 0.0, sx = 0.0, sm = 0.0;
    dt_f64_tap(s, offset, mask, n, g, k, p, &yy, &xx, &m);
    for (int64_t c = g * Cg; c < (g + 1) * Cg; c++) {
        double vy, vx, gs = dt_f64_sample_grad(s, w, dy, n, c, k, p);
        double v = dt_f64_sample(x + (n * s->p.C + c) * s->p.H * s->p.W, s->p.H, s->p.W, yy, xx, &vy, &vx);
        sy += gs * m * vy;
        sx += gs * m * vx;
        sm += gs * v;
    }
    int64_t tap = t / P; /* (n*G + g)*K + k */
    if (doffset) {
        doffset[tap * 2 * P + p] = sy;
        doffset[(tap * 2 + 1) * P + p] = sx;
    }
    if (dmask) dmask[t] = sm;
}

/* dw[i], i = (o*(C/WG) + c')*K + k: the sum over images and positions. */
DT_HD double dt_f64_dw_at(const dt_deform_f64_shape *s, const double *x, const double *offset, const double *mask,
                          const double *dy, int64_t i) {
    int64_t K = (int64_t)s->p.g.kh * s->p.g.kw, P = s->p.Ho * s->p.Wo, Cw = s->p.C / s->p.groups, Ow = s->p.Cout / s->p.groups;
    int64_t k = i % K, cw = (i / K) % Cw, o = i / (K * Cw), c = o / Ow * Cw + cw;
    double acc = 0.0;
    for (int64_t n = 0; n < s->p.N; n++) {
        const double *plane = x + (n * s->p.C + c) * s->p.H * s->p.W;
        for (int64_t p = 0; p < P; p++) {
            double yy, xx, m;
            dt_f64_tap(s, offset, mask, n, c / (s->p.C / s->G), k, p, &yy, &xx, &m);
            acc += dy[(n * s->p.Cout + o) * P + p] * m * dt_f64_sample(plane, s->p.H, s->p.W, yy, xx, NULL, NULL);
        }
    }
    return acc;
}

/* db[o]: the sum of dy over images and positions. */
DT_HD double dt_f64_db_at(const dt_deform_f64_shape *s, const double *dy, int64_t o) {
    int64_t P = s->p.Ho * s->p.Wo;
    double acc = 0.0;
    for (int64_t n = 0; n < s->p.N; n++)
        for (int64_t p = 0; p < P; p++) acc += dy[(n * s->p.Cout + o) * P + p];
    return acc;
}

#endif
