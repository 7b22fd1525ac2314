/* The orchestration of a deformable convolution call: the plan's implementation (table in
 * deform_run.h) driven through the column-conv skeleton. */
#include "ops/pointwise/bias.h"
#include "ops/deform/deform_run.h"
#include "ops/pointwise/dt_shared_kernels.h"
#include "core/dt_kernel.h"
#include "ops/dt_layers.h"

size_t dt_deform_col_budget(void) { return dt_conv_col_budget(); }


static const dt_deform_impl *impl_of(const dt_deform_plan *p) {
    return p->mode == DT_DEFORM_DEFT ? &dt_deform_deft_impl : &dt_deform_unfused_impl;
}

static dt_colconv skeleton(const dt_deform_impl *im, dt_deform_run *r) {
    const dt_deform_plan *p = r->p;
    dt_colconv cc = {.dev = r->dev, .layout = im->layout, .dtype = p->dtype, .math = p->math,
                     .nhwc = p->layout == DT_NHWC, .N = p->prob.N, .Cout = p->prob.Cout, .P = p->P, .R = p->KC, .nb = p->nb,
                     .groups = r->a->groups, .taps = p->K, .ctx = r, .begin = im->begin, .fill = im->fill,
                     .adjoint = NULL, .kept = p->mode == DT_DEFORM_DEFT ? r->a->cols : NULL};
    return cc;
}

void dt_deform_forward_raw(const dt_deform_plan *p, dt_dev dev, const dt_deform_args *a, void *y) {
    const dt_deform_impl *im = impl_of(p);
    dt_deform_run r = {.p = p, .dev = dev, .a = a};
    im->open(&r);
    dt_colconv cc = skeleton(im, &r);
    dt_colconv_forward(&cc, r.gemm_w, a->bias, y);
    im->close(&r);
}

void dt_deform_backward_raw(const dt_deform_plan *p, dt_dev dev, const dt_deform_args *a, const void *dy,
                            const dt_deform_grads *g) {
    if (g->db && p->layout == DT_NCHW) DT_PICK(dt_bias_nchw_bwd_k, dev, DT_F32, DT_NCHW)(p->prob.N, p->prob.Cout, p->P, dy, g->bb, g->db);
    else if (g->db) DT_PICK(dt_bias_rows_bwd_k, dev, p->dtype, p->layout)(p->prob.N * p->P, p->prob.Cout, dy, g->bb, g->db);
    int inputs = g->dx || g->doff || g->dmask || g->dwoff || g->dboff;
    if (!g->dw && !inputs) return;
    const dt_deform_impl *im = impl_of(p);
    dt_deform_run r = {.p = p, .dev = dev, .a = a, .g = g};
    im->open(&r);
    dt_colconv cc = skeleton(im, &r);
    if (inputs) cc.adjoint = im->adjoint;
    dt_colconv_backward(&cc, r.gemm_w, dy, r.gemm_dw, r.gemm_bw);
    im->close(&r);
}
