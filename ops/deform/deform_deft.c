/* The deft implementation: channels-last inside the op (layouts in deform_plan.h), columns
 * [nb*P, K*C] (DT_COLS_NC), the main conv on cuBLAS through the skeleton.
 *
 * Tensors f32 NCHW (relaid out channels last here), f32 NHWC or bf16 NHWC - the NHWC ones used
 * as they are: every kernel reads and writes the plan's dtype, with no relayout and no
 * conversion pass (fp32 sums inside, a bf16 result rounded once).
 * Per call (open): the main weight relaid out to [Cout, K, C] (NCHW plans: an NHWC weight
 *   already is); om, the offsets and mask of the batch as [N*P, OCS] - the layer's (computed
 *   chunk by chunk by the forward, saved for the backward) or the op's (its offset and mask
 *   inputs packed in one pass from their own dtype and layout, om_pack.h).
 * Per chunk:
 *   begin    xT = the chunk's input, channels last (NCHW: relaid out into a buffer; NHWC: the
 *            input itself); the layer's forward also runs the offset conv here
 *            (offset_conv.h), unless it is fused into the sampling
 *   fill     colT = sampling (deform_nhwc.h): the plain kernel, or the tiled one when a DefT
 *            knob asks for it (fuse_offset: offset conv + sampling per tile; stage: footprint
 *            + halo in shared memory)
 *   adjoint  dom and the input gradient from dcolT - inverse index (built in begin, on the
 *            GPU's side stream while the GEMMs run) + gather + offset gradients (dx=gather,
 *            deterministic) or float4 atomics (dx=atomic) - then the layer's offset conv
 *            backward (weight, bias, and its input gradient), or the op's dom unpacked into
 *            doffset/dmask in their formats (one pass, om_pack.h).
 * close: NCHW plans: dW back from the skeleton's [Cout, K*C] to [Cout, C, kh, kw] (with beta).
 * Weight groups (args.groups = WG): the same with C/WG for C in the weight's shapes.
 *
 * The input gradient is summed in fp32 and written into dx once, with the caller's beta,
 * rounded once (docs/deft.md, "The bf16 path"):
 *   the op, NHWC      the gather writes dx itself (dx_direct);
 *   the layer, NHWC   the gather's fp32 sum goes to dxT_buf and the offset conv's input-gradient
 *                     kernel adds it to its own sum in its epilogue, which writes dx - except
 *                     for an f32 dx being overwritten, which the gather writes and the offset
 *                     conv adds into in place (fp32 all along: nothing to round);
 *   NCHW              fp32 dxT_buf (+ the offset conv in place), relaid out into dx;
 *   dx=atomic         the atomics sum in fp32: dxT_buf (or an f32 dx being overwritten),
 *                     finished by the offset conv (layer) or by one conversion pass into dx
 *                     (the op on bf16 or accumulated f32 NHWC tensors: the knob's extra pass). */
#include "ops/deform/deform_nhwc.h"
#include "ops/deform/deform_run.h"
#include "core/dt_alloc.h"
#include "core/dt_common.h"
#include "ops/pointwise/dt_shared_kernels.h"
#include "ops/pointwise/convert.h"
#include "ops/pointwise/elementwise.h"
#include "ops/pointwise/layout.h"
#include "ops/deform/offset_conv.h"
#include "ops/deform/om_pack.h"

/* The deft kernels (deform_nhwc.h, offset_conv.h): one CPU twin and one CUDA kernel each,
 * for f32 and bf16 plans (the plan carries the dtype to the kernel; the kernels work channels
 * last whatever the tensors' layout). */
#define DEFT_TABLE(t, name, fn) \
    DT_OP_TABLE(t, name, __typeof__(fn##_cpu), DT_TWINS(t, fn, DT_F32, DT_ANY_LAYOUT), DT_TWINS(t, fn, DT_BF16, DT_ANY_LAYOUT))
DEFT_TABLE(sample_k, "deft (sampling)", dt_deform_sample_nhwc)
DEFT_TABLE(tile_forward_k, "deft (tiled sampling, DefT)", dt_deform_tile_forward)
DEFT_TABLE(index_build_k, "deft (inverse index)", dt_deform_index_build)
DEFT_TABLE(gather_k, "deft (input-gradient gather)", dt_deform_gather_dx)
DEFT_TABLE(offset_grads_k, "deft (offset gradients)", dt_deform_offset_grads)
DEFT_TABLE(scatter_k, "deft (atomic input gradient)", dt_deform_scatter_dx)
DEFT_TABLE(offconv_fwd_k, "deft (offset conv)", dt_offconv_fwd)
DEFT_TABLE(offconv_bwd_k, "deft (offset conv gradients)", dt_offconv_bwd)
DEFT_TABLE(tile_ws_k, "deft (tile workspace)", dt_deform_tile_ws_bytes)
/* the op's offsets and mask in and their gradients out (om_pack.h): any field format, picked
 * by device alone */
DT_OP_TABLE(om_pack_k, "deft (offsets and mask into om)", __typeof__(dt_deform_om_pack_cpu),
            DT_TWINS(om_pack_k, dt_deform_om_pack, DT_ANY_DTYPE, DT_ANY_LAYOUT))
DT_OP_TABLE(om_unpack_k, "deft (dom into the offsets' and mask's gradients)", __typeof__(dt_deform_om_unpack_cpu),
            DT_TWINS(om_unpack_k, dt_deform_om_unpack, DT_ANY_DTYPE, DT_ANY_LAYOUT))
DEFT_TABLE(index_ws_k, "deft (index workspace)", dt_deform_index_ws_bytes)
DEFT_TABLE(offconv_ws_k, "deft (offset conv workspace)", dt_offconv_ws_bytes)
#define WS_BYTES(t, p, nb) DT_PICK(t, dev, (p)->dtype, DT_NHWC)(p, nb)

static int is_layer(const dt_deform_run *r) { return r->a->woff != NULL; }
/* DefT's fused offset conv: the layer's forward, fuse_offset on. */
static int fused(const dt_deform_run *r, int backward) {
    return !backward && is_layer(r) && r->p->knobs.fuse_offset;
}
/* The tiled kernel: fused offset conv or staging. */
static int tiled(const dt_deform_run *r, int backward) { return r->p->knobs.stage || fused(r, backward); }

static size_t max3(size_t a, size_t b, size_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

static size_t elem(const dt_deform_plan *p) { return dt_dtype_size(p->dtype); }

/* Whether the sampling's adjoint writes the caller's dx itself (see the header comment): an f32
 * NHWC dx being overwritten always (fp32 sums land in it; the layer's offset conv adds in
 * place), and the op's gather on any NHWC dx (beta and the one rounding in its store). */
static int dx_direct(const dt_deform_run *r) {
    const dt_deform_plan *p = r->p;
    if (!r->g->dx || p->layout != DT_NHWC) return 0;
    if (p->dtype == DT_F32 && r->g->bx == 0.0f) return 1;
    return !is_layer(r) && p->dx == DT_DX_GATHER;
}

/* The input channels of the weight: C / WG (C without weight groups). */
static int64_t weight_channels(const dt_deform_run *r) { return r->p->prob.C / (r->a->groups > 1 ? r->a->groups : 1); }

static void deft_open(dt_deform_run *r) {
    const dt_deform_plan *p = r->p;
    const dt_deform_args *a = r->a;
    dt_dev dev = r->dev;
    int64_t nb = p->nb;
    int backward = r->g != NULL;
    if (!a->woff && !a->offset) dt_fatal("deform_conv2d (deft): neither offsets nor an offset conv were given");
    if (p->layout == DT_NCHW) { /* the weight channels last for the GEMMs, and its gradient back */
        const int64_t cw = weight_channels(r), KCw = p->K * cw;
        r->wT = dt_dev_alloc(dev, (size_t)p->prob.Cout * KCw * sizeof(float));
        DT_PICK(dt_nchw_to_nhwc_k, dev, DT_F32, DT_NCHW)(p->prob.Cout, cw, p->K, a->w, cw, r->wT);
        r->gemm_w = r->wT;
        if (backward && r->g->dw) {
            r->dwT = dt_dev_alloc(dev, (size_t)p->prob.Cout * KCw * sizeof(float));
            r->gemm_dw = r->dwT;
            r->gemm_bw = 0.0f;
        }
    } else { /* an NHWC weight [Cout, kh, kw, C] is the GEMMs' operand as stored */
        r->gemm_w = a->w;
        if (backward) {
            r->gemm_dw = r->g->dw;
            r->gemm_bw = r->g->bw;
        }
    }
    if (is_layer(r)) {
        if (!a->om) dt_fatal("deform_conv2d (deft): the layer needs an om buffer for its offsets");
        r->om = a->om;
    } else {
        const char *bad = dt_deform_field_fmt_refusal(a->offset_fmt, 2 * p->GK, p->P);
        if (!bad && a->mask) bad = dt_deform_field_fmt_refusal(a->mask_fmt, p->GK, p->P);
        if (bad) dt_fatal("deform_conv2d (deft): %s", bad);
        r->own_om = 1;
        r->om = dt_dev_alloc(dev, (size_t)p->prob.N * p->P * p->OCS * sizeof(float));
        DT_PICK(om_pack_k, dev, DT_ANY_DTYPE, DT_ANY_LAYOUT)(p->prob.N, p->P, p->GK, p->OCS, a->offset, a->offset_fmt,
                                                             a->mask, a->mask_fmt, r->om);
    }
    size_t img = (size_t)nb * p->prob.H * p->prob.W * p->prob.C * sizeof(float); /* an fp32 chunk of x */
    if (p->layout == DT_NCHW) r->xT_buf = dt_dev_alloc(dev, img);
    size_t ws = 0;
    if (!backward) {
        ws = max3(tiled(r, 0) ? WS_BYTES(tile_ws_k, p, nb) : 0,
                  is_layer(r) ? WS_BYTES(offconv_ws_k, p, nb) : 0, 0);
    } else {
        r->dx_direct = dx_direct(r);
        if (r->g->dx && !r->dx_direct) r->dxT_buf = dt_dev_alloc(dev, img);
        r->dom = dt_dev_alloc(dev, (size_t)nb * p->P * p->OCS * sizeof(float));
        if (p->dx == DT_DX_GATHER) {
            r->D = dt_dev_alloc(dev, (size_t)nb * p->P * p->K * p->G * 4 * sizeof(float));
            r->idx_ws = dt_dev_alloc(dev, WS_BYTES(index_ws_k, p, nb));
        }
        ws = max3(is_layer(r) ? WS_BYTES(offconv_ws_k, p, nb) : 0, tiled(r, 1) ? WS_BYTES(tile_ws_k, p, nb) : 0,
                  0);
    }
    r->ws = ws ? dt_dev_alloc(dev, ws) : NULL;
}

static void deft_begin(void *rv, int64_t n0, int64_t nb, int backward) {
    dt_deform_run *r = rv;
    const dt_deform_plan *p = r->p;
    dt_dev dev = r->dev;
    int64_t HWC = p->prob.H * p->prob.W * p->prob.C;
    if (backward && p->dx == DT_DX_GATHER && r->g->dx) {
        /* The index depends on the offsets alone: on the GPU it is built on the side stream while
         * the main stream re-samples the columns and runs the dW and dcol GEMMs (joined in
         * deft_adjoint); the previous chunk's gather, which read idx_ws, is queued before. */
        if (dev == DT_GPU) dt_side_begin();
        DT_PICK(index_build_k, dev, p->dtype, DT_NHWC)(p, nb, r->om + n0 * p->P * p->OCS, r->idx_ws, &r->idx);
        if (dev == DT_GPU) dt_side_end();
    }
    const void *x = (const char *)r->a->x + (size_t)(n0 * HWC) * elem(p);
    if (p->layout == DT_NCHW) {
        DT_PICK(dt_nchw_to_nhwc_k, dev, DT_F32, DT_NCHW)(nb, p->prob.C, p->prob.H * p->prob.W, x, p->prob.C, r->xT_buf);
        r->xT = r->xT_buf;
    } else {
        r->xT = x;
    }
    if (!backward && is_layer(r) && !fused(r, 0))
        DT_PICK(offconv_fwd_k, dev, p->dtype, DT_NHWC)(p, nb, r->xT, r->a->woff, r->a->boff, r->om + n0 * p->P * p->OCS, r->ws);
}

static void deft_fill(void *rv, int64_t n0, int64_t nb, void *col) {
    dt_deform_run *r = rv;
    const dt_deform_plan *p = r->p;
    int backward = r->g != NULL;
    float *om = r->om + n0 * p->P * p->OCS;
    if (tiled(r, backward)) {
        const float *woff = fused(r, backward) ? r->a->woff : NULL;
        DT_PICK(tile_forward_k, r->dev, p->dtype, DT_NHWC)(p, nb, r->xT, woff, r->a->boff, om, col, r->ws);
    } else {
        DT_PICK(sample_k, r->dev, p->dtype, DT_NHWC)(p, nb, r->xT, om, col);
    }
}

static void deft_adjoint(void *rv, int64_t n0, int64_t nb, void *dcol) {
    dt_deform_run *r = rv;
    const dt_deform_plan *p = r->p;
    const dt_deform_grads *g = r->g;
    dt_dev dev = r->dev;
    const int layer = is_layer(r);
    const float *om = r->om + n0 * p->P * p->OCS;
    const int64_t HW = p->prob.H * p->prob.W, npix = nb * HW;
    void *dx = g->dx ? (char *)g->dx + (size_t)(n0 * HW * p->prob.C) * elem(p) : NULL;
    float *acc = r->dxT_buf; /* the sampling's fp32 sum when it is not dx itself (NULL: dx not wanted) */
    if (p->dx == DT_DX_GATHER) {
        if (!g->dx) DT_PICK(index_build_k, dev, p->dtype, DT_NHWC)(p, nb, om, r->idx_ws, &r->idx); /* not built ahead */
        if (dev == DT_GPU) dt_side_join();
        if (r->dx_direct) DT_PICK(gather_k, dev, p->dtype, DT_NHWC)(p, nb, &r->idx, r->xT, dcol, g->bx, dx, p->dtype, r->D);
        else DT_PICK(gather_k, dev, p->dtype, DT_NHWC)(p, nb, &r->idx, r->xT, dcol, 0.0f, acc, DT_F32, r->D);
        DT_PICK(offset_grads_k, dev, p->dtype, DT_NHWC)(p, nb, om, r->D, layer, r->dom);
    } else { /* the atomic knob: fp32 sums (dx_direct: an f32 dx) */
        float *sum = r->dx_direct ? (float *)dx : acc;
        if (sum) DT_PICK(dt_fill_k, dev, DT_F32, DT_NCHW)(npix * p->prob.C, 0.0f, sum);
        DT_PICK(scatter_k, dev, p->dtype, DT_NHWC)(p, nb, r->xT, om, dcol, layer, sum, r->dom);
    }
    if (layer) {
        /* the input gradient's destination: NCHW - into the fp32 sum, relaid out below; an f32
         * dx holding the sampling's part - added in place; else the sampling's fp32 sum + the
         * offset conv's, written into dx once */
        const float *add = NULL;
        float beta = 1.0f;
        void *dst = NULL;
        if (g->dx && p->layout == DT_NCHW) dst = acc;
        else if (g->dx && r->dx_direct) dst = dx;
        else if (g->dx) dst = dx, add = acc, beta = g->bx;
        const float bw = n0 == 0 ? g->bwoff : 1.0f, bb = n0 == 0 ? g->bboff : 1.0f;
        if (g->dwoff || g->dboff || dst)
            DT_PICK(offconv_bwd_k, dev, p->dtype, DT_NHWC)(p, nb, r->xT, r->dom, r->a->woff, bw, g->dwoff, bb, g->dboff, add, beta, dst, r->ws);
    } else {
        /* the gradients are dense in their fields' dtype and layout: the chunk's images start
         * n0 * (channels x P) elements in, in either layout */
        const dt_deform_field_fmt of = {r->a->offset_fmt.dtype, r->a->offset_fmt.layout, 0};
        const dt_deform_field_fmt mf = {r->a->mask_fmt.dtype, r->a->mask_fmt.layout, 0};
        void *doff = g->doff ? (char *)g->doff + (size_t)(n0 * 2 * p->GK * p->P) * dt_dtype_size(of.dtype) : NULL;
        void *dmask = g->dmask ? (char *)g->dmask + (size_t)(n0 * p->GK * p->P) * dt_dtype_size(mf.dtype) : NULL;
        DT_PICK(om_unpack_k, dev, DT_ANY_DTYPE, DT_ANY_LAYOUT)(nb, p->P, p->GK, p->OCS, r->dom, doff, of, g->boff, dmask,
                                                               mf, g->bmask);
    }
    if (!g->dx) return;
    if (p->layout == DT_NCHW) DT_PICK(dt_nhwc_to_nchw_k, dev, DT_F32, DT_NCHW)(nb, p->prob.C, HW, acc, p->prob.C, NULL, g->bx, dx);
    else if (!layer && !r->dx_direct) /* the op's atomics: their fp32 sum into dx */
        DT_PICK(dt_convert_k, dev, DT_F32, DT_NCHW)(1, 1, npix * p->prob.C, acc, DT_F32, DT_NCHW, g->bx, dx, p->dtype, DT_NCHW);
}

static void deft_close(dt_deform_run *r) {
    const dt_deform_plan *p = r->p;
    dt_dev dev = r->dev;
    const int64_t cw = weight_channels(r);
    if (r->dwT) /* [Cout, K, C/WG] -> [Cout, C/WG, K], with beta */
        DT_PICK(dt_nhwc_to_nchw_k, dev, DT_F32, DT_NCHW)(p->prob.Cout, cw, p->K, r->dwT, cw, NULL, r->g->bw, r->g->dw);
    void *bufs[] = {r->wT, r->dwT, r->own_om ? r->om : NULL, r->xT_buf, r->dxT_buf, r->dom, r->D, r->ws, r->idx_ws};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i]) dt_dev_free(dev, bufs[i]);
}

const dt_deform_impl dt_deform_deft_impl = {DT_COLS_NC, deft_open, deft_begin, deft_fill, deft_adjoint, deft_close};
