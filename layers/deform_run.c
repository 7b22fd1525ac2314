/* The orchestration of a deformable convolution call: the plan's implementation (table in
 * deform_run.h) driven through the column-conv skeleton. */
#include "bias.h"
#include "deform_run.h"
#include "dt_dispatch.h"
#include "dt_layers.h"

size_t dt_deform_col_budget(dt_deform_mode mode, const dt_deform_knobs *k, dt_precision prec) {
    /* both directions, and as a layer: the budget holds for the whole call */
    int bf16_cols = prec == DT_BF16 && mode == DT_DEFORM_DEFT && dt_deft_bf16_cols(k, 1, 1, 1);
    return dt_conv_col_budget() * (bf16_cols ? 2 : 1);
}

static const dt_deform_impl *impl_of(const dt_deform_plan *p) {
    return p->mode == DT_DEFORM_DEFT ? &dt_deform_deft_impl : &dt_deform_unfused_impl;
}

static dt_colconv skeleton(const dt_deform_impl *im, dt_deform_run *r) {
    const dt_deform_plan *p = r->p;
    dt_colconv cc = {.dev = r->dev, .layout = im->layout, .N = p->N, .Cout = p->Cout, .P = p->P, .R = p->KC,
                     .nb = p->nb, .ctx = r, .begin = im->begin, .fill = im->fill, .adjoint = NULL,
                     .bf16_cols = im->bf16_cols ? im->bf16_cols(r) : 0};
    return cc;
}

void dt_deform_forward_raw(const dt_deform_plan *p, dt_dev dev, const dt_deform_args *a, float *y) {
    const dt_deform_impl *im = impl_of(p);
    dt_deform_run r = {.p = p, .dev = dev, .a = a};
    im->open(&r);
    dt_colconv cc = skeleton(im, &r);
    dt_colconv_forward(&cc, r.gemm_w, a->bias, y);
    im->close(&r);
}

void dt_deform_backward_raw(const dt_deform_plan *p, dt_dev dev, const dt_deform_args *a, const float *dy,
                            const dt_deform_grads *g) {
    if (g->db) DT_CALL(dev, dt_bias_nchw_bwd, p->N, p->Cout, p->P, dy, g->bb, g->db);
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
