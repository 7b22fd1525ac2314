/* The CPU twin of the double-precision deformable convolution (deform_f64.h): each output
 * element computed by one call of the header's per-element function, the elements shared out
 * over the thread pool - the same functions, over the same index spaces, as the CUDA kernels. */
#include "ops/deform/deform_f64.h"
#include "core/dt_parallel.h"

typedef struct {
    const dt_deform_f64_shape *s;
    const double *x, *offset, *mask, *w, *bias, *dy;
    double *out, *out2;
} job;

static void y_range(void *ctx, int64_t i0, int64_t i1) {
    const job *j = ctx;
    for (int64_t i = i0; i < i1; i++) j->out[i] = dt_f64_y_at(j->s, j->x, j->offset, j->mask, j->w, j->bias, i);
}

void dt_deform_f64_forward_cpu(const dt_deform_f64_shape *s, const double *x, const double *offset, const double *mask,
                               const double *w, const double *bias, double *y) {
    job j = {.s = s, .x = x, .offset = offset, .mask = mask, .w = w, .bias = bias, .out = y};
    dt_parallel_for(s->p.N * s->p.Cout * s->p.Ho * s->p.Wo, 16, y_range, &j);
}

static void dx_range(void *ctx, int64_t i0, int64_t i1) {
    const job *j = ctx;
    for (int64_t nc = i0; nc < i1; nc++) dt_f64_dx_plane(j->s, j->offset, j->mask, j->w, j->dy, nc, j->out);
}

static void doffset_range(void *ctx, int64_t i0, int64_t i1) {
    const job *j = ctx;
    for (int64_t t = i0; t < i1; t++) dt_f64_doffset_at(j->s, j->x, j->offset, j->mask, j->w, j->dy, t, j->out, j->out2);
}

static void dw_range(void *ctx, int64_t i0, int64_t i1) {
    const job *j = ctx;
    for (int64_t i = i0; i < i1; i++) j->out[i] = dt_f64_dw_at(j->s, j->x, j->offset, j->mask, j->dy, i);
}

static void db_range(void *ctx, int64_t i0, int64_t i1) {
    const job *j = ctx;
    for (int64_t o = i0; o < i1; o++) j->out[o] = dt_f64_db_at(j->s, j->dy, o);
}

void dt_deform_f64_backward_cpu(const dt_deform_f64_shape *s, const double *x, const double *offset,
                                const double *mask, const double *w, const double *dy, double *dx, double *doffset,
                                double *dmask, double *dw, double *db) {
    int64_t K = (int64_t)s->p.g.kh * s->p.g.kw, P = s->p.Ho * s->p.Wo;
    job j = {.s = s, .x = x, .offset = offset, .mask = mask, .w = w, .dy = dy};
    if (dx) {
        j.out = dx;
        dt_parallel_for(s->p.N * s->p.C, 1, dx_range, &j);
    }
    if (doffset || dmask) {
        j.out = doffset;
        j.out2 = dmask;
        dt_parallel_for(s->p.N * s->G * K * P, 16, doffset_range, &j);
    }
    if (dw) {
        j.out = dw;
        dt_parallel_for(s->p.Cout * (s->p.C / s->p.groups) * K, 1, dw_range, &j);
    }
    if (db) {
        j.out = db;
        dt_parallel_for(s->p.Cout, 1, db_range, &j);
    }
}
