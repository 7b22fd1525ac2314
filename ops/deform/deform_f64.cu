/* The double-precision deformable convolution on the GPU (deform_f64.h): one thread per output
 * element, each running the header's per-element function - the CPU twin's very arithmetic,
 * with no atomics (so the results are reproducible bit for bit). Simple and slow: a thread of
 * the input gradient walks a whole plane's samples, and the weight gradient's threads each sum
 * over the whole batch; it exists for gradient checks in float64, not for training. */
#include "ops/deform/deform_f64.h"
#include "core/dt_kernel_util.cuh"

namespace {

constexpr int BLOCK = 128;

__global__ void k_forward(dt_deform_f64_shape s, const double *x, const double *offset, const double *mask,
                          const double *w, const double *bias, double *y) {
    DT_GRID_STRIDE(i, s.p.N * s.p.Cout * s.p.Ho * s.p.Wo) y[i] = dt_f64_y_at(&s, x, offset, mask, w, bias, i);
}

__global__ void k_dx(dt_deform_f64_shape s, const double *offset, const double *mask, const double *w,
                     const double *dy, double *dx) {
    DT_GRID_STRIDE(nc, s.p.N * s.p.C) dt_f64_dx_plane(&s, offset, mask, w, dy, nc, dx);
}

__global__ void k_doffset(dt_deform_f64_shape s, const double *x, const double *offset, const double *mask,
                          const double *w, const double *dy, double *doffset, double *dmask) {
    DT_GRID_STRIDE(t, s.p.N * s.G * s.p.g.kh * s.p.g.kw * s.p.Ho * s.p.Wo)
    dt_f64_doffset_at(&s, x, offset, mask, w, dy, t, doffset, dmask);
}

__global__ void k_dw(dt_deform_f64_shape s, const double *x, const double *offset, const double *mask,
                     const double *dy, double *dw) {
    DT_GRID_STRIDE(i, s.p.Cout * (s.p.C / s.p.groups) * s.p.g.kh * s.p.g.kw) dw[i] = dt_f64_dw_at(&s, x, offset, mask, dy, i);
}

__global__ void k_db(dt_deform_f64_shape s, const double *dy, double *db) {
    DT_GRID_STRIDE(o, s.p.Cout) db[o] = dt_f64_db_at(&s, dy, o);
}

}  // namespace

#define LAUNCH(kernel, n, ...)                                                          \
    do {                                                                                \
        if ((n) > 0) {                                                                  \
            kernel<<<dt_grid_for((n), BLOCK), BLOCK, 0, dt_stream()>>>(__VA_ARGS__);    \
            DT_CHECK_LAUNCH();                                                          \
        }                                                                               \
    } while (0)

extern "C" {
void dt_deform_f64_forward_cuda(const dt_deform_f64_shape *s, const double *x, const double *offset,
                                const double *mask, const double *w, const double *bias, double *y) {
    LAUNCH(k_forward, s->p.N * s->p.Cout * s->p.Ho * s->p.Wo, *s, x, offset, mask, w, bias, y);
}

void dt_deform_f64_backward_cuda(const dt_deform_f64_shape *s, const double *x, const double *offset,
                                 const double *mask, const double *w, const double *dy, double *dx, double *doffset,
                                 double *dmask, double *dw, double *db) {
    int64_t K = (int64_t)s->p.g.kh * s->p.g.kw, P = s->p.Ho * s->p.Wo;
    if (dx) LAUNCH(k_dx, s->p.N * s->p.C, *s, offset, mask, w, dy, dx);
    if (doffset || dmask) LAUNCH(k_doffset, s->p.N * s->G * K * P, *s, x, offset, mask, w, dy, doffset, dmask);
    if (dw) LAUNCH(k_dw, s->p.Cout * (s->p.C / s->p.groups) * K, *s, x, offset, mask, dy, dw);
    if (db) LAUNCH(k_db, s->p.Cout, *s, dy, db);
}
}
