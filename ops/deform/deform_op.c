/* The deformable convolution on the tape: the op (offsets as inputs, either mode) and the
 * deft layer's single node (offset conv inside). Both check their tensors, build a plan and
 * call the raw orchestration (deform_run.c). */
#include <stdio.h>

#include "core/dt_common.h"
#include "ops/deform/deform_run.h"
#include "ops/deform/dt_deform.h"
#include "ops/dt_layers.h"

/* ---- shape checks ---- */

static void check_common(const char *op, const dt_tensor *x, const dt_tensor *w, const dt_tensor *bias, dt_conv_geom g,
                         int G, int64_t *Ho, int64_t *Wo) {
    char a[160], b[160];
    dt_require_ndim(op, "input", x, 4);
    dt_require_ndim(op, "weight", w, 4);
    dt_require_same_device(op, x, w);
    dt_require_live(op, x);
    dt_require_live(op, w);
    if (x->dtype != w->dtype || x->layout != w->layout)
        dt_fatal("%s: input %s and weight %s must have one dtype and layout (a bf16 model passes its weights' bf16 "
                 "working copies, dt_param_work)", op, dt_tensor_desc(x, a, sizeof a), dt_tensor_desc(w, b, sizeof b));
    if (bias) dt_require_dtype(op, "bias", bias, DT_F32);
    if (w->shape[1] != x->shape[1] || w->shape[2] != g.kh || w->shape[3] != g.kw)
        dt_fatal("%s: weight %s does not fit input %s with a %dx%d kernel", op, dt_shape_str(w, a, sizeof a),
                 dt_shape_str(x, b, sizeof b), g.kh, g.kw);
    if (bias && (bias->ndim != 1 || bias->shape[0] != w->shape[0]))
        dt_fatal("%s: bias %s must be [%lld]", op, dt_shape_str(bias, a, sizeof a), (long long)w->shape[0]);
    if (G < 1 || x->shape[1] % G)
        dt_fatal("%s: %lld input channels cannot be split into %d offset groups", op, (long long)x->shape[1], G);
    dt_conv_out_hw(op, x, g, Ho, Wo);
}

static void check_offsets(const char *op, const dt_tensor *x, const dt_tensor *offset, const dt_tensor *mask,
                          dt_conv_geom g, int G, int64_t Ho, int64_t Wo) {
    char a[128];
    int64_t K = (int64_t)g.kh * g.kw;
    dt_require_same_device(op, x, offset);
    dt_require_live(op, offset);
    dt_require_dtype(op, "offset", offset, DT_F32);
    dt_require_layout(op, "offset", offset, DT_NCHW);
    if (offset->ndim != 4 || offset->shape[0] != x->shape[0] || offset->shape[1] != 2 * G * K ||
        offset->shape[2] != Ho || offset->shape[3] != Wo)
        dt_fatal("%s: offset %s must be [%lld, %lld, %lld, %lld] (N, 2*groups*kh*kw, Ho, Wo)", op,
                 dt_shape_str(offset, a, sizeof a), (long long)x->shape[0], (long long)(2 * G * K), (long long)Ho,
                 (long long)Wo);
    if (mask) {
        dt_require_same_device(op, x, mask);
        dt_require_live(op, mask);
        dt_require_dtype(op, "mask", mask, DT_F32);
        dt_require_layout(op, "mask", mask, DT_NCHW);
        if (mask->ndim != 4 || mask->shape[0] != x->shape[0] || mask->shape[1] != G * K || mask->shape[2] != Ho ||
            mask->shape[3] != Wo)
            dt_fatal("%s: mask %s must be [%lld, %lld, %lld, %lld] (N, groups*kh*kw, Ho, Wo)", op,
                     dt_shape_str(mask, a, sizeof a), (long long)x->shape[0], (long long)(G * K), (long long)Ho,
                     (long long)Wo);
    }
}

static dt_deform_plan plan_for(const char *op, const dt_tensor *x, const dt_tensor *w, dt_conv_geom g, int G,
                               int has_mask, dt_deform_mode mode, const dt_deform_knobs *knobs, dt_math math) {
    dt_deform_plan p;
    const char *bad = dt_deform_plan_init(&p, x->shape[0], x->shape[1], x->shape[2], x->shape[3], w->shape[0], g, G,
                                          has_mask, mode, knobs, dt_deform_col_budget());
    if (!bad) bad = dt_deform_plan_types(&p, x->dtype, x->layout, math, dt_deform_col_budget());
    if (bad) dt_fatal("%s: %s", op, bad);
    return p;
}

/* ---- the op ---- */

typedef struct {
    dt_deform_plan plan;
} plan_ctx;

/* The columns a deft call keeps for its backward (knobs.keep_cols), or NULL: [N*P, K*C] of the
 * plan's dtype, when the backward will want the weight gradient (dt_deform_args.cols; saved on
 * the node, so they live until the backward has run). */
static dt_tensor *kept_cols(const dt_deform_plan *p, dt_tensor *w) {
    if (p->mode != DT_DEFORM_DEFT || !p->knobs.keep_cols || !dt_any_requires_grad(1, &w)) return NULL;
    const int64_t shape[2] = {p->prob.N * p->P, p->KC};
    return dt_tensor_new_as(2, shape, w->dev, p->dtype, DT_NCHW);
}

static void op_backward(dt_node *n) {
    dt_tensor *x = n->in[0], *offset = n->in[1], *mask = n->in[2], *w = n->in[3], *bias = n->in[4];
    dt_deform_grads gr = {0};
    gr.db = dt_grad_dst(bias, &gr.bb);
    gr.dw = dt_grad_dst(w, &gr.bw);
    gr.dx = dt_grad_dst(x, &gr.bx);
    gr.doff = dt_grad_dst(offset, &gr.boff);
    gr.dmask = dt_grad_dst(mask, &gr.bmask);
    dt_deform_args a = {.x = x->data, .offset = offset->data, .mask = mask ? mask->data : NULL, .w = w->data,
                        .bias = bias ? bias->data : NULL, .cols = n->n_saved && n->saved[0] ? n->saved[0]->data : NULL};
    dt_deform_backward_raw(&((plan_ctx *)n->ctx)->plan, x->dev, &a, n->out->grad->data, &gr);
}

dt_tensor *dt_deform_conv2d_mode(dt_tensor *x, dt_tensor *offset, dt_tensor *mask, dt_tensor *w, dt_tensor *bias,
                                 dt_conv_geom g, int groups, dt_deform_mode mode, const dt_deform_knobs *knobs,
                                 dt_math math) {
    const char *op = "deform_conv2d";
    int64_t Ho, Wo;
    check_common(op, x, w, bias, g, groups, &Ho, &Wo);
    check_offsets(op, x, offset, mask, g, groups, Ho, Wo);
    dt_deform_plan p = plan_for(op, x, w, g, groups, mask != NULL, mode, knobs, math);
    dt_tensor *y = dt_tensor_new4_as(x->dev, x->dtype, x->layout, x->shape[0], w->shape[0], Ho, Wo);
    dt_tensor *cols = kept_cols(&p, w);
    dt_deform_args a = {.x = x->data, .offset = offset->data, .mask = mask ? mask->data : NULL, .w = w->data,
                        .bias = bias ? bias->data : NULL, .cols = cols ? cols->data : NULL};
    dt_deform_forward_raw(&p, x->dev, &a, y->data);
    dt_tensor *in[5] = {x, offset, mask, w, bias};
    dt_node *n = dt_record(op, op_backward, y, 5, in, sizeof(plan_ctx));
    if (n) {
        ((plan_ctx *)n->ctx)->plan = p;
        if (cols) dt_node_save(n, cols);
    }
    return y;
}

dt_tensor *dt_deform_conv2d(dt_tensor *x, dt_tensor *offset, dt_tensor *mask, dt_tensor *w, dt_tensor *bias,
                            dt_conv_geom g, int groups, int deterministic) {
    dt_deform_knobs k = dt_deform_knobs_default();
    k.deterministic = deterministic;
    return dt_deform_conv2d_mode(x, offset, mask, w, bias, g, groups, DT_DEFORM_UNFUSED, &k, DT_MATH_FP32);
}

/* ---- the deft layer's node ---- */

static void deft_backward(dt_node *n) {
    dt_tensor *x = n->in[0], *woff = n->in[1], *boff = n->in[2], *w = n->in[3], *bias = n->in[4], *om = n->saved[0];
    dt_tensor *cols = n->n_saved > 1 ? n->saved[1] : NULL; /* NULL also when freed first: sampled again */
    dt_deform_grads gr = {0};
    gr.db = dt_grad_dst(bias, &gr.bb);
    gr.dw = dt_grad_dst(w, &gr.bw);
    gr.dx = dt_grad_dst(x, &gr.bx);
    gr.dwoff = dt_grad_dst(woff, &gr.bwoff);
    gr.dboff = dt_grad_dst(boff, &gr.bboff);
    dt_deform_args a = {.x = x->data, .woff = woff->data, .boff = boff->data, .w = w->data,
                        .bias = bias ? bias->data : NULL, .om = om->data, .cols = cols ? cols->data : NULL};
    dt_deform_backward_raw(&((plan_ctx *)n->ctx)->plan, x->dev, &a, n->out->grad->data, &gr);
}

dt_tensor *dt_deform_conv2d_deft(dt_tensor *x, dt_tensor *off_w, dt_tensor *off_b, dt_tensor *w, dt_tensor *bias,
                                 dt_conv_geom g, int groups, int version, const dt_deform_knobs *knobs, int halo,
                                 dt_math math, dt_tensor **om_out) {
    const char *op = "deform_conv2d (deft)";
    char a[128];
    int64_t Ho, Wo;
    check_common(op, x, w, bias, g, groups, &Ho, &Wo);
    dt_require_same_device(op, x, off_w);
    dt_require_live(op, off_w);
    dt_require_dtype(op, "offset weight", off_w, DT_F32);
    dt_require_layout(op, "offset weight", off_w, DT_NCHW);
    dt_deform_plan p = plan_for(op, x, w, g, groups, version == 2, DT_DEFORM_DEFT, knobs, math);
    p.halo = halo;
    if (off_w->ndim != 4 || off_w->shape[0] != p.OC || off_w->shape[1] != p.prob.C || off_w->shape[2] != g.kh ||
        off_w->shape[3] != g.kw)
        dt_fatal("%s: offset weight %s must be [%lld, %lld, %d, %d]", op, dt_shape_str(off_w, a, sizeof a),
                 (long long)p.OC, (long long)p.prob.C, g.kh, g.kw);
    if (!off_b || off_b->numel != p.OC) dt_fatal("%s: offset bias must have %lld elements", op, (long long)p.OC);
    dt_require_dtype(op, "offset bias", off_b, DT_F32);
    dt_require_same_device(op, x, off_b);
    dt_tensor *y = dt_tensor_new4_as(x->dev, x->dtype, x->layout, p.prob.N, p.prob.Cout, Ho, Wo);
    dt_tensor *om = dt_tensor_new2(x->dev, p.prob.N * p.P, p.OCS);
    dt_tensor *cols = kept_cols(&p, w);
    dt_deform_args args = {.x = x->data, .woff = off_w->data, .boff = off_b->data, .w = w->data,
                           .bias = bias ? bias->data : NULL, .om = om->data, .cols = cols ? cols->data : NULL};
    dt_deform_forward_raw(&p, x->dev, &args, y->data);
    if (om_out) *om_out = om;
    dt_tensor *in[5] = {x, off_w, off_b, w, bias};
    dt_node *n = dt_record(op, deft_backward, y, 5, in, sizeof(plan_ctx));
    if (n) {
        ((plan_ctx *)n->ctx)->plan = p;
        dt_node_save(n, om);
        if (cols) dt_node_save(n, cols);
    }
    return y;
}
