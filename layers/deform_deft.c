/* The DefT-fused deformable op on the tape (GPU only; on the CPU the layer runs the
 * reference). Per chunk of images whose column buffer fits the budget:
 *
 * forward   deft_fwd: offset conv + sigmoid + bilinear sampling in one kernel -> col, and the
 *           offsets/mask saved for the backward; cuBLAS: y = W col.
 *           (fuse_offset = 0: the offset conv runs first as im2col + GEMM, then the kernel
 *           only samples.)
 * backward  dW += dY col^T   (col re-sampled from the saved offsets by the same kernel)
 *           dcol = W^T dY    (cuBLAS)
 *           deft_bwd: one pass -> dx (sampling part), d(offsets), d(mask logits)
 *           offset conv: dWoff += dom col_x^T, dboff += sum dom, dx += col2im(Woff^T dom)
 */
#include <string.h>

#include "bias.h"
#include "deft.h"
#include "dt_alloc.h"
#include "dt_deform.h"
#include "dt_dispatch.h"
#include "dt_layers.h"
#include "gemm.h"
#include "im2col.h"

#ifdef DT_CUDA

typedef struct {
    dt_conv_geom g;
    int G, version, halo;
    dt_deft_knobs knobs;
} deft_ctx;

static dt_deft_cfg make_cfg(const dt_tensor *x, int64_t nb, int64_t Ho, int64_t Wo, dt_conv_geom g, int G, int version,
                            const dt_deft_knobs *k, int halo) {
    dt_deft_cfg c = {(int)nb, (int)x->shape[1], (int)x->shape[2], (int)x->shape[3], (int)Ho, (int)Wo, G, version == 2,
                     g, k->tile_h, k->tile_w, halo, k->swizzle, k->stage, k->deterministic};
    return c;
}

/* Offset conv as a plain conv for a chunk: om [nb, OC, P] = Woff col_x + b (fuse_offset = 0). */
static void offset_conv_chunk(const dt_deft_cfg *c, const float *xc, const dt_tensor *woff, const dt_tensor *boff,
                              float *col, float *tmp, float *om) {
    int64_t P = (int64_t)c->Ho * c->Wo, CK = (int64_t)c->C * c->g.kh * c->g.kw, OC = woff->shape[0];
    dt_im2col_cuda(xc, c->nb, c->C, c->H, c->W, c->g, c->Ho, c->Wo, col);
    dt_gemm_cuda(0, 0, OC, c->nb * P, CK, 1.0f, woff->data, CK, col, c->nb * P, 0.0f, tmp, c->nb * P);
    dt_cnhw_to_nchw_cuda(tmp, c->nb, OC, P, boff->data, om);
}

static void deft_backward(dt_node *n) {
    dt_tensor *x = n->in[0], *woff = n->in[1], *boff = n->in[2], *w = n->in[3], *bias = n->in[4];
    dt_tensor *offsets = n->saved[0], *mask = n->saved[1], *y = n->out, *dy = y->grad;
    deft_ctx *ctx = n->ctx;
    int64_t N = x->shape[0], C = x->shape[1], HW = x->shape[2] * x->shape[3], Cout = w->shape[0];
    int64_t Ho = y->shape[2], Wo = y->shape[3], P = Ho * Wo, K = (int64_t)ctx->g.kh * ctx->g.kw, CK = C * K;
    int64_t GK = ctx->G * K, OC = woff->shape[0];
    float bb, bw, bx, bwo, bbo;
    float *db = dt_grad_dst(bias, &bb);
    if (db) dt_bias_nchw_bwd_cuda(N, Cout, P, dy->data, bb, db);
    float *dw = dt_grad_dst(w, &bw), *dx = dt_grad_dst(x, &bx);
    float *dwoff = dt_grad_dst(woff, &bwo), *dboff = dt_grad_dst(boff, &bbo);
    int need_dom = dx || dwoff || dboff;
    if (!dw && !need_dom) return;
    int64_t nb = dt_conv_chunk(N, CK * P);
    float *col = dt_gpu_malloc((size_t)CK * nb * P * sizeof(float));
    int64_t tmp_rows = Cout > OC ? Cout : OC;
    float *tmp = dt_gpu_malloc((size_t)tmp_rows * nb * P * sizeof(float)); /* dY or dom in [rows, nb*P] */
    float *dom = need_dom ? dt_gpu_malloc((size_t)nb * OC * P * sizeof(float)) : NULL;
    void *ws = NULL;
    size_t ws_bytes = 0;
    for (int64_t n0 = 0; n0 < N; n0 += nb) {
        int64_t b = N - n0 < nb ? N - n0 : nb, bP = b * P;
        dt_deft_cfg c = make_cfg(x, b, Ho, Wo, ctx->g, ctx->G, ctx->version, &ctx->knobs, ctx->halo);
        const float *xc = x->data + n0 * C * HW, *oc = offsets->data + n0 * 2 * GK * P;
        const float *mc = mask ? mask->data + n0 * GK * P : NULL;
        const float *dyc = dy->data + n0 * Cout * P;
        if (b > 1) {
            dt_nchw_to_cnhw_cuda(dyc, b, Cout, P, tmp);
            dyc = tmp;
        }
        if (dw) {
            dt_deft_fwd_cuda(&c, xc, NULL, NULL, (float *)oc, (float *)mc, col);
            dt_gemm_cuda(0, 1, Cout, CK, bP, 1.0f, dyc, bP, col, bP, n0 == 0 ? bw : 1.0f, dw, CK);
        }
        if (!need_dom) continue;
        dt_gemm_cuda(1, 0, CK, bP, Cout, 1.0f, w->data, CK, dyc, bP, 0.0f, col, bP);
        /* A smaller last chunk can split channels more finely and need more scratch. */
        size_t need = dt_deft_bwd_ws_bytes(&c);
        if (need > ws_bytes) {
            dt_gpu_free(ws);
            ws = dt_gpu_malloc(need);
            ws_bytes = need;
        }
        float *dxc = dx ? dx + n0 * C * HW : NULL;
        dt_deft_grad_out go = {dom, dom + 2 * GK * P, OC * P, OC * P, 0.0f, 0.0f, 1};
        dt_deft_bwd_cuda(&c, col, xc, oc, mc, dxc, bx, &go, ws);
        /* offset conv backward for the chunk */
        if (dboff) dt_bias_nchw_bwd_cuda(b, OC, P, dom, n0 == 0 ? bbo : 1.0f, dboff);
        const float *domt = dom;
        if (b > 1) {
            dt_nchw_to_cnhw_cuda(dom, b, OC, P, tmp);
            domt = tmp;
        }
        if (dwoff) {
            dt_im2col_cuda(xc, b, C, x->shape[2], x->shape[3], ctx->g, Ho, Wo, col);
            dt_gemm_cuda(0, 1, OC, CK, bP, 1.0f, domt, bP, col, bP, n0 == 0 ? bwo : 1.0f, dwoff, CK);
        }
        if (dx) {
            dt_gemm_cuda(1, 0, CK, bP, OC, 1.0f, woff->data, CK, domt, bP, 0.0f, col, bP);
            dt_col2im_cuda(col, b, C, x->shape[2], x->shape[3], ctx->g, Ho, Wo, 1.0f, dxc);
        }
    }
    if (ws) dt_gpu_free(ws);
    if (dom) dt_gpu_free(dom);
    dt_gpu_free(tmp);
    dt_gpu_free(col);
}

dt_tensor *dt_deform_conv2d_deft(dt_tensor *x, dt_tensor *off_w, dt_tensor *off_b, dt_tensor *w, dt_tensor *bias,
                                 dt_conv_geom g, int groups, int version, const dt_deft_knobs *knobs, int halo,
                                 dt_tensor **offsets_out) {
    const char *op = "deform_conv2d (deft)";
    char a[128], b2[128];
    dt_require_ndim(op, "input", x, 4);
    dt_require_ndim(op, "weight", w, 4);
    dt_require_live(op, x);
    if (x->dev != DT_GPU) dt_fatal("%s: the fused kernels run on the GPU; on the CPU use the reference (mode unfused)", op);
    dt_require_same_device(op, x, w);
    dt_require_same_device(op, x, off_w);
    if (w->shape[1] != x->shape[1] || w->shape[2] != g.kh || w->shape[3] != g.kw)
        dt_fatal("%s: weight %s does not fit input %s with a %dx%d kernel", op, dt_shape_str(w, a, sizeof a),
                 dt_shape_str(x, b2, sizeof b2), g.kh, g.kw);
    if (groups < 1 || x->shape[1] % groups)
        dt_fatal("%s: %lld channels cannot be split into %d offset groups", op, (long long)x->shape[1], groups);
    int64_t Ho, Wo;
    dt_conv_out_hw(op, x, g, &Ho, &Wo);
    int64_t N = x->shape[0], C = x->shape[1], HW = x->shape[2] * x->shape[3], Cout = w->shape[0];
    int64_t P = Ho * Wo, K = (int64_t)g.kh * g.kw, CK = C * K, GK = groups * K, OC = (version == 2 ? 3 : 2) * GK;
    if (off_w->ndim != 4 || off_w->shape[0] != OC || off_w->shape[1] != C || off_w->shape[2] != g.kh || off_w->shape[3] != g.kw)
        dt_fatal("%s: offset weight %s must be [%lld, %lld, %d, %d]", op, dt_shape_str(off_w, a, sizeof a), (long long)OC,
                 (long long)C, g.kh, g.kw);
    if (!off_b || off_b->numel != OC) dt_fatal("%s: offset bias must have %lld elements", op, (long long)OC);
    dt_tensor *y = dt_tensor_new4(DT_GPU, N, Cout, Ho, Wo);
    dt_tensor *offsets = dt_tensor_new4(DT_GPU, N, 2 * GK, Ho, Wo);
    dt_tensor *mask = version == 2 ? dt_tensor_new4(DT_GPU, N, GK, Ho, Wo) : NULL;
    int64_t nb = dt_conv_chunk(N, CK * P);
    dt_deft_cfg c0 = make_cfg(x, nb, Ho, Wo, g, groups, version, knobs, halo);
    const char *bad = dt_deft_check(&c0);
    if (bad) dt_fatal("%s", bad);
    float *col = dt_gpu_malloc((size_t)CK * nb * P * sizeof(float));
    int64_t rows = Cout > OC ? Cout : OC;
    float *t = dt_gpu_malloc((size_t)rows * nb * P * sizeof(float));
    float *om = knobs->fuse_offset ? NULL : dt_gpu_malloc((size_t)nb * OC * P * sizeof(float));
    for (int64_t n0 = 0; n0 < N; n0 += nb) {
        int64_t b = N - n0 < nb ? N - n0 : nb;
        dt_deft_cfg c = make_cfg(x, b, Ho, Wo, g, groups, version, knobs, halo);
        const float *xc = x->data + n0 * C * HW;
        float *oc = offsets->data + n0 * 2 * GK * P, *mc = mask ? mask->data + n0 * GK * P : NULL;
        if (knobs->fuse_offset) {
            dt_deft_fwd_cuda(&c, xc, off_w->data, off_b->data, oc, mc, col);
        } else {
            offset_conv_chunk(&c, xc, off_w, off_b, col, t, om);
            dt_deft_split_om_cuda(&c, om, oc, mc);
            dt_deft_fwd_cuda(&c, xc, NULL, NULL, oc, mc, col);
        }
        float *yc = y->data + n0 * Cout * P;
        if (b == 1) {
            dt_gemm_cuda(0, 0, Cout, P, CK, 1.0f, w->data, CK, col, P, 0.0f, yc, P);
            if (bias) dt_bias_nchw_fwd_cuda(1, Cout, P, bias->data, yc);
        } else {
            dt_gemm_cuda(0, 0, Cout, b * P, CK, 1.0f, w->data, CK, col, b * P, 0.0f, t, b * P);
            dt_cnhw_to_nchw_cuda(t, b, Cout, P, bias ? bias->data : NULL, yc);
        }
    }
    if (om) dt_gpu_free(om);
    dt_gpu_free(t);
    dt_gpu_free(col);
    if (offsets_out) *offsets_out = offsets;
    dt_tensor *in[5] = {x, off_w, off_b, w, bias};
    dt_node *n = dt_record("deform_conv2d_deft", deft_backward, y, 5, in, sizeof(deft_ctx));
    if (n) {
        deft_ctx *ctx = n->ctx;
        ctx->g = g;
        ctx->G = groups;
        ctx->version = version;
        ctx->halo = halo;
        ctx->knobs = *knobs;
        dt_node_save(n, offsets);
        dt_node_save(n, mask);
    }
    return y;
}

#else /* CPU-only build */

dt_tensor *dt_deform_conv2d_deft(dt_tensor *x, dt_tensor *off_w, dt_tensor *off_b, dt_tensor *w, dt_tensor *bias,
                                 dt_conv_geom g, int groups, int version, const dt_deft_knobs *knobs, int halo,
                                 dt_tensor **offsets_out) {
    (void)x; (void)off_w; (void)off_b; (void)w; (void)bias; (void)g; (void)groups; (void)version; (void)knobs;
    (void)halo; (void)offsets_out;
    dt_fatal("deform_conv2d (deft): the fused kernels need CUDA; this build has CUDA=0 (use mode unfused)");
}

#endif
