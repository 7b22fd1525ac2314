/* deform_bilinear.h: bilinear sampling with zero padding, exactly as
 * torchvision.ops.deform_conv2d defines it, shared by the CPU reference and every CUDA
 * kernel (host + device inline functions), so all implementations compute one function.
 *
 * A sample at (y, x) of an H x W plane:
 *  - is 0 when y <= -1, y >= H, x <= -1 or x >= W;
 *  - else mixes the 4 corners (yl, xl), (yl, xl+1), (yl+1, xl), (yl+1, xl+1), yl = floor(y),
 *    with weights (1-ly)(1-lx), (1-ly)lx, ly(1-lx), ly lx (ly = y - yl, lx = x - xl), where a
 *    corner outside the plane contributes 0 on its own.
 * Its derivative along y is (1-lx)(v3 - v1) + lx(v4 - v2), along x (1-ly)(v2 - v1) + ly(v4 - v3)
 * (v1..v4 the corner values, 0 outside), and the adjoint spreads a gradient g to the valid
 * corners with the same weights. Kinks sit at integer coordinates; gradient checks keep
 * samples away from them. */
#ifndef DT_DEFORM_BILINEAR_H
#define DT_DEFORM_BILINEAR_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define DT_HD __host__ __device__ __forceinline__
#else
#define DT_HD static inline
#endif

typedef struct {
    int yl, xl;     /* top-left corner */
    float ly, lx;   /* fractional parts */
    float w[4];     /* corner weights: (yl,xl) (yl,xl+1) (yl+1,xl) (yl+1,xl+1) */
    int ok[4];      /* corner inside the plane */
    int inside;     /* 0: the sample is in the zero region, everything is 0 */
} dt_bilin;

/* A NaN coordinate counts as inside with NaN weights, so NaN offsets give NaN samples
 * (loud) instead of silent zeros; the corner indices are then never used. */
DT_HD dt_bilin dt_bilin_make(float y, float x, int H, int W) {
    dt_bilin b;
    b.inside = !(y <= -1.0f || y >= (float)H || x <= -1.0f || x >= (float)W);
    if (!b.inside) { /* also keeps huge coordinates away from the float->int conversion */
        b.yl = b.xl = 0;
        b.ly = b.lx = 0.0f;
        for (int k = 0; k < 4; k++) { b.w[k] = 0.0f; b.ok[k] = 0; }
        return b;
    }
    float fy = floorf(y), fx = floorf(x);
    int finite = fy == fy && fx == fx;
    b.yl = finite ? (int)fy : 0;
    b.xl = finite ? (int)fx : 0;
    b.ly = y - fy;
    b.lx = x - fx;
    float hy = 1.0f - b.ly, hx = 1.0f - b.lx;
    b.w[0] = hy * hx;
    b.w[1] = hy * b.lx;
    b.w[2] = b.ly * hx;
    b.w[3] = b.ly * b.lx;
    int y0 = b.yl >= 0, y1 = b.yl + 1 <= H - 1, x0 = b.xl >= 0, x1 = b.xl + 1 <= W - 1;
    b.ok[0] = finite && y0 && x0;
    b.ok[1] = finite && y0 && x1;
    b.ok[2] = finite && y1 && x0;
    b.ok[3] = finite && y1 && x1;
    return b;
}

/* Flat offset of corner k in the plane (only meaningful when b.ok[k]). */
DT_HD int64_t dt_bilin_index(const dt_bilin *b, int k, int W) {
    return (int64_t)(b->yl + (k >> 1)) * W + (b->xl + (k & 1));
}

/* Corner values v[0..3] from a plane (0 for corners outside). */
DT_HD void dt_bilin_fetch(const dt_bilin *b, const float *plane, int W, float v[4]) {
    for (int k = 0; k < 4; k++) v[k] = b->ok[k] ? plane[dt_bilin_index(b, k, W)] : 0.0f;
}

DT_HD float dt_bilin_value(const dt_bilin *b, const float v[4]) {
    if (!b->inside) return 0.0f;
    return b->w[0] * v[0] + b->w[1] * v[1] + b->w[2] * v[2] + b->w[3] * v[3];
}

/* d(value)/dy and d(value)/dx; 0 in the zero region (torchvision's coordinate weights). */
DT_HD float dt_bilin_dy(const dt_bilin *b, const float v[4]) {
    return b->inside ? (1.0f - b->lx) * (v[2] - v[0]) + b->lx * (v[3] - v[1]) : 0.0f;
}
DT_HD float dt_bilin_dx(const dt_bilin *b, const float v[4]) {
    return b->inside ? (1.0f - b->ly) * (v[1] - v[0]) + b->ly * (v[3] - v[2]) : 0.0f;
}

#endif
