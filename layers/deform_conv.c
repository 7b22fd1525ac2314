/* The deformable convolution op (reference on the CPU, unfused baseline on the GPU), the
 * layer module, and the offset statistics. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bias.h"
#include "deform.h"
#include "deft.h"
#include "dt_alloc.h"
#include "dt_deform.h"
#include "dt_dispatch.h"
#include "dt_init.h"
#include "dt_layers.h"
#include "elementwise.h"
#include "dt_ops.h"
#include "gemm.h"
#include "im2col.h"
#include "offset_stats.h"

const char *dt_deform_mode_name(dt_deform_mode m) { return m == DT_DEFORM_DEFT ? "deft" : "unfused"; }

int dt_deform_mode_parse(const char *s) {
    if (!strcmp(s, "unfused")) return DT_DEFORM_UNFUSED;
    if (!strcmp(s, "deft")) return DT_DEFORM_DEFT;
    return -1;
}

dt_deft_knobs dt_deft_knobs_default(void) {
    dt_deft_knobs k = {.tile_h = 0, .tile_w = 0, .halo = -1, .halo_refresh = 200, .swizzle = 1, .fuse_offset = 1,
                       .stage = 1, .deterministic = 0};
    return k;
}

int dt_deft_knobs_validate(const dt_deft_knobs *k, dt_conv_geom g, char *err, int errlen) {
    int tp = k->tile_h * k->tile_w, K = g.kh * g.kw;
    if (!(k->tile_h == 0 && k->tile_w == 0)) {
        if (k->tile_h < 1 || k->tile_w < 1 || 256 % tp)
            return snprintf(err, errlen, "tile %dx%d: tile_h*tile_w must divide 256 (e.g. 8x8, 4x8, 4x4), or 0x0 for automatic",
                            k->tile_h, k->tile_w), -1;
        if (K * tp > 1024)
            return snprintf(err, errlen, "tile %dx%d: with a %dx%d kernel a tile holds at most %d positions", k->tile_h,
                            k->tile_w, g.kh, g.kw, 1024 / K), -1;
    }
    if (k->halo < -1 || k->halo > 32) return snprintf(err, errlen, "halo %d: must be -1 (automatic) or 0..32", k->halo), -1;
    return 0;
}

/* ---- shape checks shared by the op and the fused op ---- */

static void check_common(const char *op, const dt_tensor *x, const dt_tensor *w, const dt_tensor *bias, dt_conv_geom g,
                         int G, int64_t *Ho, int64_t *Wo) {
    char a[128], b[128];
    dt_require_ndim(op, "input", x, 4);
    dt_require_ndim(op, "weight", w, 4);
    dt_require_same_device(op, x, w);
    dt_require_live(op, x);
    dt_require_live(op, w);
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
    if (offset->ndim != 4 || offset->shape[0] != x->shape[0] || offset->shape[1] != 2 * G * K ||
        offset->shape[2] != Ho || offset->shape[3] != Wo)
        dt_fatal("%s: offset %s must be [%lld, %lld, %lld, %lld] (N, 2*groups*kh*kw, Ho, Wo)", op,
                 dt_shape_str(offset, a, sizeof a), (long long)x->shape[0], (long long)(2 * G * K), (long long)Ho,
                 (long long)Wo);
    if (mask) {
        dt_require_same_device(op, x, mask);
        dt_require_live(op, mask);
        if (mask->ndim != 4 || mask->shape[0] != x->shape[0] || mask->shape[1] != G * K || mask->shape[2] != Ho ||
            mask->shape[3] != Wo)
            dt_fatal("%s: mask %s must be [%lld, %lld, %lld, %lld] (N, groups*kh*kw, Ho, Wo)", op,
                     dt_shape_str(mask, a, sizeof a), (long long)x->shape[0], (long long)(G * K), (long long)Ho,
                     (long long)Wo);
    }
}

/* ---- the op: one orchestration for the tape and the C API ---- */

dt_deform_plan dt_deform_plan_make(dt_dev dev, const dt_tensor *x, int64_t Cout, int64_t Ho, int64_t Wo, dt_conv_geom g,
                                   int G, int has_mask, dt_deform_mode mode, const dt_deft_knobs *knobs) {
    dt_deform_plan p;
    memset(&p, 0, sizeof p);
    p.dev = dev;
    p.N = x->shape[0];
    p.C = x->shape[1];
    p.H = x->shape[2];
    p.W = x->shape[3];
    p.Cout = Cout;
    p.Ho = Ho;
    p.Wo = Wo;
    p.g = g;
    p.G = G;
    p.has_mask = has_mask;
    p.tiled = mode == DT_DEFORM_DEFT && dev == DT_GPU;
    p.knobs = knobs ? *knobs : dt_deft_knobs_default();
    if (p.knobs.halo < 0) p.knobs.halo = 1;
    return p;
}

static dt_deform_shape plan_shape(const dt_deform_plan *p, int64_t nb) {
    dt_deform_shape s = {nb, p->C, p->H, p->W, p->Ho, p->Wo, p->G, p->g};
    return s;
}

#ifdef DT_CUDA
static dt_deft_cfg plan_cfg(const dt_deform_plan *p, int64_t nb) {
    dt_deft_cfg c = {(int)nb, (int)p->C, (int)p->H, (int)p->W, (int)p->Ho, (int)p->Wo, p->G, p->has_mask, p->g,
                     p->knobs.tile_h, p->knobs.tile_w, p->knobs.halo, p->knobs.swizzle, p->knobs.stage, p->knobs.deterministic};
    return c;
}
#endif

/* The sampling step (im2col) of a chunk, by the plan's kernels. */
static void sample_chunk(const dt_deform_plan *p, int64_t nb, const float *x, const float *off, const float *mask, float *col) {
    dt_deform_shape s = plan_shape(p, nb);
    if (p->tiled) {
#ifdef DT_CUDA
        dt_deft_cfg c = plan_cfg(p, nb);
        dt_deft_fwd_cuda(&c, x, NULL, NULL, (float *)off, (float *)mask, col);
#endif
    } else {
        DT_CALL(p->dev, dt_deform_im2col, &s, x, off, mask, col);
    }
}

void dt_deform_raw_forward(const dt_deform_plan *p, const float *x, const float *off, const float *mask, const float *w,
                           const float *bias, float *y) {
    dt_dev dev = p->dev;
    int64_t N = p->N, C = p->C, HW = p->H * p->W, Cout = p->Cout, P = p->Ho * p->Wo;
    int64_t K = (int64_t)p->g.kh * p->g.kw, CK = C * K, GK = p->G * K;
    int64_t nb = dt_conv_chunk(N, CK * P);
    float *col = dt_dev_alloc(dev, (size_t)CK * nb * P * sizeof(float));
    float *t = nb > 1 ? dt_dev_alloc(dev, (size_t)Cout * nb * P * sizeof(float)) : NULL;
    for (int64_t n0 = 0; n0 < N; n0 += nb) {
        int64_t b = N - n0 < nb ? N - n0 : nb;
        sample_chunk(p, b, x + n0 * C * HW, off + n0 * 2 * GK * P, mask ? mask + n0 * GK * P : NULL, col);
        float *yc = y + n0 * Cout * P;
        if (b == 1) {
            DT_CALL(dev, dt_gemm, 0, 0, Cout, P, CK, 1.0f, w, CK, col, P, 0.0f, yc, P);
            if (bias) DT_CALL(dev, dt_bias_nchw_fwd, 1, Cout, P, bias, yc);
        } else {
            DT_CALL(dev, dt_gemm, 0, 0, Cout, b * P, CK, 1.0f, w, CK, col, b * P, 0.0f, t, b * P);
            DT_CALL(dev, dt_cnhw_to_nchw, t, b, Cout, P, bias, yc);
        }
    }
    dt_dev_free(dev, col);
    if (t) dt_dev_free(dev, t);
}

/* dx, doffset, dmask of a chunk from dcol: the unfused kernels or the tiled DefT pass. */
/* Scratch that grows to the largest chunk's need (a smaller last chunk may need more). */
typedef struct {
    void *p;
    size_t bytes;
} scratch;

#ifdef DT_CUDA
static void *scratch_get(scratch *s, size_t need) {
    if (need > s->bytes) {
        dt_gpu_free(s->p);
        s->p = dt_gpu_malloc(need);
        s->bytes = need;
    }
    return s->p;
}
#endif

static void scatter_chunk(const dt_deform_plan *p, int64_t nb, const float *dcol, const float *x, const float *off,
                          const float *mask, float *dx, float bx, float *doff, float bo, float *dmask, float bm, scratch *ws) {
    dt_dev dev = p->dev;
    dt_deform_shape s = plan_shape(p, nb);
    int64_t K = (int64_t)p->g.kh * p->g.kw, GK = p->G * K, P = p->Ho * p->Wo, nx = nb * p->C * p->H * p->W;
    (void)ws;
    if (p->tiled) {
#ifdef DT_CUDA
        dt_deft_cfg c = plan_cfg(p, nb);
        void *w = scratch_get(ws, dt_deft_bwd_ws_bytes(&c));
        dt_deft_grad_out go = {doff, dmask, 2 * GK * P, GK * P, bo, bm, 0};
        dt_deft_bwd_cuda(&c, dcol, x, off, mask, dx, bx, &go, w);
#endif
        return;
    }
    if (doff || dmask) {
        /* the coord kernel writes both; a missing one goes to scratch */
        float *o = doff ? doff : dt_dev_alloc(dev, (size_t)nb * 2 * GK * P * sizeof(float));
        DT_CALL(dev, dt_deform_col2im_coord, &s, dcol, x, off, mask, o, doff ? bo : 0.0f, dmask, bm);
        if (!doff) dt_dev_free(dev, o);
    }
    if (!dx) return;
    if (dev == DT_GPU && p->deterministic) {
#ifdef DT_CUDA
        dt_deform_col2im_det_cuda(&s, dcol, off, mask, bx, dx, scratch_get(ws, dt_deform_det_ws_bytes(&s)));
#endif
    } else {
        if (bx == 0.0f) DT_CALL(dev, dt_fill, nx, 0.0f, dx);
        DT_CALL(dev, dt_deform_col2im, &s, dcol, off, mask, dx);
    }
}

void dt_deform_raw_backward(const dt_deform_plan *p, const float *x, const float *off, const float *mask, const float *w,
                            const float *dy, const dt_deform_grads *gr) {
    dt_dev dev = p->dev;
    int64_t N = p->N, C = p->C, HW = p->H * p->W, Cout = p->Cout, P = p->Ho * p->Wo;
    int64_t K = (int64_t)p->g.kh * p->g.kw, CK = C * K, GK = p->G * K;
    if (gr->db) DT_CALL(dev, dt_bias_nchw_bwd, N, Cout, P, dy, gr->bb, gr->db);
    if (!gr->dw && !gr->dx && !gr->doff && !gr->dmask) return;
    int64_t nb = dt_conv_chunk(N, CK * P);
    float *col = dt_dev_alloc(dev, (size_t)CK * nb * P * sizeof(float));
    float *dyt = nb > 1 ? dt_dev_alloc(dev, (size_t)Cout * nb * P * sizeof(float)) : NULL;
    scratch ws = {NULL, 0};
    for (int64_t n0 = 0; n0 < N; n0 += nb) {
        int64_t b = N - n0 < nb ? N - n0 : nb, bP = b * P;
        const float *xc = x + n0 * C * HW, *oc = off + n0 * 2 * GK * P, *mc = mask ? mask + n0 * GK * P : NULL;
        const float *dyc = dy + n0 * Cout * P;
        if (b > 1) {
            DT_CALL(dev, dt_nchw_to_cnhw, dyc, b, Cout, P, dyt);
            dyc = dyt;
        }
        if (gr->dw) {
            sample_chunk(p, b, xc, oc, mc, col);
            DT_CALL(dev, dt_gemm, 0, 1, Cout, CK, bP, 1.0f, dyc, bP, col, bP, n0 == 0 ? gr->bw : 1.0f, gr->dw, CK);
        }
        if (!gr->dx && !gr->doff && !gr->dmask) continue;
        DT_CALL(dev, dt_gemm, 1, 0, CK, bP, Cout, 1.0f, w, CK, dyc, bP, 0.0f, col, bP);
        scatter_chunk(p, b, col, xc, oc, mc, gr->dx ? gr->dx + n0 * C * HW : NULL, gr->bx,
                      gr->doff ? gr->doff + n0 * 2 * GK * P : NULL, gr->boff, gr->dmask ? gr->dmask + n0 * GK * P : NULL,
                      gr->bmask, &ws);
    }
    if (ws.p) dt_dev_free(dev, ws.p);
    dt_dev_free(dev, col);
    if (dyt) dt_dev_free(dev, dyt);
}

typedef struct {
    dt_deform_plan plan;
} deform_ctx;

static void deform_backward(dt_node *n) {
    dt_tensor *x = n->in[0], *offset = n->in[1], *mask = n->in[2], *w = n->in[3], *bias = n->in[4];
    dt_deform_grads gr;
    memset(&gr, 0, sizeof gr);
    gr.db = dt_grad_dst(bias, &gr.bb);
    gr.dw = dt_grad_dst(w, &gr.bw);
    gr.dx = dt_grad_dst(x, &gr.bx);
    gr.doff = dt_grad_dst(offset, &gr.boff);
    gr.dmask = dt_grad_dst(mask, &gr.bmask);
    dt_deform_raw_backward(&((deform_ctx *)n->ctx)->plan, x->data, offset->data, mask ? mask->data : NULL, w->data,
                           n->out->grad->data, &gr);
}

dt_tensor *dt_deform_conv2d_mode(dt_tensor *x, dt_tensor *offset, dt_tensor *mask, dt_tensor *w, dt_tensor *bias,
                                 dt_conv_geom g, int groups, dt_deform_mode mode, const dt_deft_knobs *knobs) {
    int64_t Ho, Wo;
    check_common("deform_conv2d", x, w, bias, g, groups, &Ho, &Wo);
    check_offsets("deform_conv2d", x, offset, mask, g, groups, Ho, Wo);
    dt_deform_plan p = dt_deform_plan_make(x->dev, x, w->shape[0], Ho, Wo, g, groups, mask != NULL, mode, knobs);
    p.deterministic = knobs ? knobs->deterministic : 0;
#ifdef DT_CUDA
    if (p.tiled) {
        dt_deft_cfg c = plan_cfg(&p, dt_conv_chunk(p.N, p.C * g.kh * g.kw * Ho * Wo));
        const char *bad = dt_deft_check(&c);
        if (bad) dt_fatal("deform_conv2d: %s", bad);
    }
#endif
    dt_tensor *y = dt_tensor_new4(x->dev, x->shape[0], w->shape[0], Ho, Wo);
    dt_deform_raw_forward(&p, x->data, offset->data, mask ? mask->data : NULL, w->data, bias ? bias->data : NULL, y->data);
    dt_tensor *in[5] = {x, offset, mask, w, bias};
    dt_node *n = dt_record("deform_conv2d", deform_backward, y, 5, in, sizeof(deform_ctx));
    if (n) ((deform_ctx *)n->ctx)->plan = p;
    return y;
}

dt_tensor *dt_deform_conv2d(dt_tensor *x, dt_tensor *offset, dt_tensor *mask, dt_tensor *w, dt_tensor *bias,
                            dt_conv_geom g, int groups, int deterministic) {
    dt_deft_knobs k = dt_deft_knobs_default();
    k.deterministic = deterministic;
    return dt_deform_conv2d_mode(x, offset, mask, w, bias, g, groups, DT_DEFORM_UNFUSED, &k);
}

/* ---- statistics ---- */

static float percentile(const uint64_t *hist, uint64_t total, double q, float maxv) {
    if (!total) return 0.0f;
    double target = q * (double)total, cum = 0;
    for (int b = 0; b < DT_OFFHIST_BINS; b++) {
        if (cum + hist[b] >= target && hist[b]) {
            if (b == DT_OFFHIST_BINS - 1) return maxv; /* beyond the histogram: the maximum */
            double frac = (target - cum) / hist[b];
            return (float)((b + frac) / DT_OFFHIST_PER_PX);
        }
        cum += hist[b];
    }
    return maxv;
}

void dt_offset_stats_compute(const dt_tensor *offset, float halo, dt_offset_stats *st) {
    dt_require_live("offset_stats", offset);
    if (offset->ndim != 4 || offset->shape[1] % 2) {
        char a[128];
        dt_fatal("offset_stats: offsets %s must be [N, 2*G*K, Ho, Wo]", dt_shape_str(offset, a, sizeof a));
    }
    int64_t N = offset->shape[0], GK = offset->shape[1] / 2, P = offset->shape[2] * offset->shape[3];
    uint64_t h[DT_OFFHIST_LEN];
    if (offset->dev == DT_GPU) {
#ifdef DT_CUDA
        uint64_t *d = dt_gpu_malloc(sizeof h);
        dt_offset_hist_cuda(N, GK, P, offset->data, halo, d);
        dt_copy_d2h(h, d, sizeof h);
        dt_gpu_free(d);
#endif
    } else {
        dt_offset_hist_cpu(N, GK, P, offset->data, halo, h);
    }
    memset(st, 0, sizeof *st);
    st->samples = N * GK * P;
    uint32_t mb = (uint32_t)h[DT_OFFHIST_MAX];
    memcpy(&st->max_abs, &mb, 4);
    uint64_t valid = 0;
    for (int b = 0; b < DT_OFFHIST_BINS; b++) valid += h[DT_OFFHIST_DY + b];
    if (valid) {
        st->mean_abs_dy = h[DT_OFFHIST_SUM] / 65536.0 / valid;
        st->mean_abs_dx = h[DT_OFFHIST_SUM + 1] / 65536.0 / valid;
    }
    static const double qs[4] = {0.5, 0.9, 0.99, 0.999};
    for (int i = 0; i < 4; i++) { /* interpolated within a bin, never past the largest value */
        st->p_dy[i] = fminf(percentile(h + DT_OFFHIST_DY, valid, qs[i], st->max_abs), st->max_abs);
        st->p_dx[i] = fminf(percentile(h + DT_OFFHIST_DX, valid, qs[i], st->max_abs), st->max_abs);
    }
    st->halo = halo;
    st->frac_outside = st->samples ? (double)h[DT_OFFHIST_OUT] / st->samples : 0.0;
}

int dt_offset_stats_halo(const dt_offset_stats *st, int q) {
    float v = fmaxf(st->p_dy[q], st->p_dx[q]);
    if (!(v >= 0)) return 0;
    if (v > 64) v = 64;
    return (int)ceilf(v);
}

void dt_offset_stats_format(const dt_offset_stats *st, char *buf, int len) {
    snprintf(buf, len,
             "mean|dy| %.3f mean|dx| %.3f  |dy| p50/90/99/99.9 %.2f/%.2f/%.2f/%.2f  |dx| %.2f/%.2f/%.2f/%.2f  "
             "max %.2f  outside halo %.0f: %.4f%%",
             st->mean_abs_dy, st->mean_abs_dx, st->p_dy[0], st->p_dy[1], st->p_dy[2], st->p_dy[3], st->p_dx[0],
             st->p_dx[1], st->p_dx[2], st->p_dx[3], st->max_abs, st->halo, 100.0 * st->frac_outside);
}

/* ---- the layer ---- */

int64_t dt_deform_offset_channels(const dt_deform_conv *l) {
    return (l->version == 2 ? 3 : 2) * (int64_t)l->groups * l->g.kh * l->g.kw;
}

void dt_deform_conv_init(dt_deform_conv *l, dt_params *ps, const char *name, int64_t cin, int64_t cout,
                         dt_conv_geom g, int groups, int version, int with_bias, float offset_init_std, dt_dev dev) {
    memset(l, 0, sizeof *l);
    snprintf(l->name, sizeof l->name, "%s", name);
    if (version != 1 && version != 2) dt_fatal("deform_conv %s: version %d (must be 1 or 2)", name, version);
    if (groups < 1 || cin % groups) dt_fatal("deform_conv %s: %lld channels cannot be split into %d offset groups", name, (long long)cin, groups);
    l->cin = cin;
    l->cout = cout;
    l->g = g;
    l->groups = groups;
    l->version = version;
    l->mode = DT_DEFORM_UNFUSED;
    l->knobs = dt_deft_knobs_default();
    l->stats_halo = 1.0f;
    l->cur_halo = 1;
    char n[96];
    int64_t sw[4] = {cout, cin, g.kh, g.kw}, sb[1] = {cout};
    snprintf(n, sizeof n, "%s.weight", name);
    l->weight = dt_param_new(ps, n, 4, sw, dev, 1);
    dt_init_kaiming_normal_fanout(l->weight);
    if (with_bias) {
        snprintf(n, sizeof n, "%s.bias", name);
        l->bias = dt_param_new(ps, n, 1, sb, dev, 0);
    }
    int64_t oc = dt_deform_offset_channels(l);
    int64_t so[4] = {oc, cin, g.kh, g.kw}, sob[1] = {oc};
    snprintf(n, sizeof n, "%s.offset.weight", name);
    l->off_weight = dt_param_new(ps, n, 4, so, dev, 1);
    if (offset_init_std > 0) dt_init_normal(l->off_weight, 0.0f, offset_init_std);
    snprintf(n, sizeof n, "%s.offset.bias", name);
    l->off_bias = dt_param_new(ps, n, 1, sob, dev, 0);
}

static dt_tensor *forward_unfused(dt_deform_conv *l, dt_tensor *x) {
    int64_t GK = (int64_t)l->groups * l->g.kh * l->g.kw;
    dt_tensor *om = dt_conv2d(x, l->off_weight, l->off_bias, l->g);
    dt_tensor *offset = om, *mask = NULL;
    if (l->version == 2) {
        offset = dt_slice_channels(om, 0, 2 * GK);
        mask = dt_sigmoid(dt_slice_channels(om, 2 * GK, 3 * GK));
    }
    if (l->collect_stats) {
        dt_offset_stats_compute(offset, l->stats_halo, &l->stats);
        l->stats_valid = 1;
    }
    return dt_deform_conv2d(x, offset, mask, l->weight, l->bias, l->g, l->groups, l->knobs.deterministic);
}

dt_tensor *dt_deform_conv_forward(dt_deform_conv *l, dt_tensor *x) {
    dt_require_ndim(l->name, "input", x, 4);
    if (x->shape[1] != l->cin) {
        char a[128];
        dt_fatal("deform_conv %s: input %s has %lld channels, the layer expects %lld", l->name,
                 dt_shape_str(x, a, sizeof a), (long long)x->shape[1], (long long)l->cin);
    }
    l->calls++;
    if (l->mode == DT_DEFORM_UNFUSED || x->dev == DT_CPU) return forward_unfused(l, x);
    /* deft: the halo comes from the knob, or from the offset statistics (refreshed now and then) */
    int refresh = l->knobs.halo < 0 && (l->calls == 1 || (l->knobs.halo_refresh > 0 && l->calls % l->knobs.halo_refresh == 0));
    dt_tensor *offsets = NULL;
    dt_tensor *y = dt_deform_conv2d_deft(x, l->off_weight, l->off_bias, l->weight, l->bias, l->g, l->groups,
                                         l->version, &l->knobs, l->knobs.halo >= 0 ? l->knobs.halo : l->cur_halo,
                                         (refresh || l->collect_stats) ? &offsets : NULL);
    if (l->knobs.halo >= 0) l->cur_halo = l->knobs.halo;
    if (offsets && l->collect_stats) {
        dt_offset_stats_compute(offsets, l->stats_halo, &l->stats);
        l->stats_valid = 1;
    }
    if (offsets && refresh) {
        dt_offset_stats st;
        dt_offset_stats_compute(offsets, (float)l->cur_halo, &st);
        int h = dt_offset_stats_halo(&st, 2); /* cover the 99th percentile */
        l->cur_halo = h < 1 ? 1 : h > 8 ? 8 : h;
    }
    return y;
}
