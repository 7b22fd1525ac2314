/* The deft implementation: channels-last inside the op (layouts in deform_plan.h), columns
 * [nb*P, K*C] (DT_COLS_NC), the main conv on cuBLAS through the skeleton.
 *
 * Per call (open): the main weight relaid out to [Cout, K, C]; om, the offsets and mask of the
 *   batch as [N*P, OCS] - the layer's (computed chunk by chunk by the forward, saved for the
 *   backward) or the op's (its NCHW offset/mask inputs relaid out).
 * Per chunk:
 *   begin    xT = the chunk's input, channels last; the layer's forward also runs the offset
 *            conv here (offset_conv.h), unless it is fused into the sampling
 *   fill     colT = sampling (deform_nhwc.h): the plain kernel, or the tiled one when a DefT
 *            knob asks for it (fuse_offset: offset conv + sampling per tile; stage: footprint
 *            + halo in shared memory)
 *   adjoint  dxT and dom from dcolT - inverse index (built in begin, on the GPU's side stream
 *            while the GEMMs run) + gather + offset gradients (dx=gather, deterministic) or
 *            float4 atomics (dx=atomic) - then the layer's offset conv
 *            backward (weight, bias, and its input gradient added into dxT), the op's dom
 *            relaid out into doffset/dmask, and dxT into dx (NCHW, with beta).
 * close: dW back from the skeleton's [K*C, Cout] to [Cout, C, kh, kw] (with beta). */
#include "deform_nhwc.h"
#include "deform_run.h"
#include "dt_alloc.h"
#include "dt_dispatch.h"
#include "elementwise.h"
#include "layout.h"
#include "offset_conv.h"

#define WS_BYTES(fn, p, nb) ((dev) == DT_GPU ? DT_CUDA_BYTES(fn##_cuda(p, nb)) : fn##_cpu(p, nb))
#ifdef DT_CUDA
#define DT_CUDA_BYTES(call) (call)
#else
#define DT_CUDA_BYTES(call) ((size_t)0)
#endif

static int is_layer(const dt_deform_run *r) { return r->a->woff != NULL; }
/* DefT's fused offset conv: the layer's forward, fuse_offset on. */
static int fused(const dt_deform_run *r, int backward) {
    return !backward && is_layer(r) && r->p->knobs.fuse_offset;
}
/* The tiled kernel: fused offset conv or staging. */
static int tiled(const dt_deform_run *r, int backward) { return r->p->knobs.stage || fused(r, backward); }

static size_t max3(size_t a, size_t b, size_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

static void deft_open(dt_deform_run *r) {
    const dt_deform_plan *p = r->p;
    const dt_deform_args *a = r->a;
    dt_dev dev = r->dev;
    int64_t nb = p->nb;
    if (!a->woff && !a->offset) dt_fatal("deform_conv2d (deft): neither offsets nor an offset conv were given");
    r->wT = dt_dev_alloc(dev, (size_t)p->Cout * p->KC * sizeof(float));
    DT_CALL(dev, dt_nchw_to_nhwc, p->Cout, p->C, p->K, a->w, p->C, r->wT);
    r->gemm_w = r->wT;
    if (r->g && r->g->dw) {
        r->dwT = dt_dev_alloc(dev, (size_t)p->Cout * p->KC * sizeof(float));
        r->gemm_dw = r->dwT;
        r->gemm_bw = 0.0f;
    }
    if (is_layer(r)) {
        if (!a->om) dt_fatal("deform_conv2d (deft): the layer needs an om buffer for its offsets");
        r->om = a->om;
    } else {
        r->own_om = 1;
        r->om = dt_dev_alloc(dev, (size_t)p->N * p->P * p->OCS * sizeof(float));
        if (p->OCS > p->OC) DT_CALL(dev, dt_fill, p->N * p->P * p->OCS, 0.0f, r->om);
        DT_CALL(dev, dt_nchw_to_nhwc, p->N, 2 * p->GK, p->P, a->offset, p->OCS, r->om);
        if (a->mask) DT_CALL(dev, dt_nchw_to_nhwc, p->N, p->GK, p->P, a->mask, p->OCS, r->om + 2 * p->GK);
    }
    size_t img = (size_t)nb * p->H * p->W * p->C * sizeof(float);
    r->xT = dt_dev_alloc(dev, img);
    size_t ws = 0;
    if (!r->g) {
        ws = max3(tiled(r, 0) ? WS_BYTES(dt_deform_tile_ws_bytes, p, nb) : 0,
                  is_layer(r) ? WS_BYTES(dt_offconv_ws_bytes, p, nb) : 0, 0);
    } else {
        r->dxT = dt_dev_alloc(dev, img);
        r->dom = dt_dev_alloc(dev, (size_t)nb * p->P * p->OCS * sizeof(float));
        if (p->dx == DT_DX_GATHER) {
            r->D = dt_dev_alloc(dev, (size_t)nb * p->P * p->K * p->G * 4 * sizeof(float));
            r->idx_ws = dt_dev_alloc(dev, WS_BYTES(dt_deform_index_ws_bytes, p, nb));
        }
        ws = max3(is_layer(r) ? WS_BYTES(dt_offconv_ws_bytes, p, nb) : 0, tiled(r, 1) ? WS_BYTES(dt_deform_tile_ws_bytes, p, nb) : 0,
                  0);
    }
    r->ws = ws ? dt_dev_alloc(dev, ws) : NULL;
}

static void deft_begin(void *rv, int64_t n0, int64_t nb, int backward) {
    dt_deform_run *r = rv;
    const dt_deform_plan *p = r->p;
    if (backward && p->dx == DT_DX_GATHER && r->g->dx) {
        /* The index depends on the offsets alone: on the GPU it is built on the side stream while
         * the main stream re-samples the columns and runs the dW and dcol GEMMs (joined in
         * deft_adjoint); the previous chunk's gather, which read idx_ws, is queued before. */
        if (r->dev == DT_GPU) dt_side_begin();
        DT_CALL(r->dev, dt_deform_index_build, p, nb, r->om + n0 * p->P * p->OCS, r->idx_ws, &r->idx);
        if (r->dev == DT_GPU) dt_side_end();
    }
    DT_CALL(r->dev, dt_nchw_to_nhwc, nb, p->C, p->H * p->W, r->a->x + n0 * p->C * p->H * p->W, p->C, r->xT);
    if (!backward && is_layer(r) && !fused(r, 0))
        DT_CALL(r->dev, dt_offconv_fwd, p, nb, r->xT, r->a->woff, r->a->boff, r->om + n0 * p->P * p->OCS, r->ws);
}

/* bf16 columns come from the row sampling and go to the gather; the tiled kernels (DefT's
 * knobs: stage, or fuse_offset in a layer's forward) write fp32 columns and the atomic scatter
 * reads fp32 ones: the skeleton then rounds the columns itself and hands back an fp32
 * gradient. */
int dt_deft_bf16_cols(const dt_deform_knobs *k, int layer, int forward, int backward) {
    int dx = k->deterministic ? DT_DX_GATHER : k->dx; /* as the plan resolves it */
    if (k->stage || (forward && layer && k->fuse_offset)) return 0;
    return !backward || dx == DT_DX_GATHER;
}

static int deft_bf16_cols(const dt_deform_run *r) {
    int backward = r->g != NULL;
    return dt_deft_bf16_cols(&r->p->knobs, is_layer(r), !backward, backward);
}

static void deft_fill(void *rv, int64_t n0, int64_t nb, void *col, int bf16) {
    dt_deform_run *r = rv;
    const dt_deform_plan *p = r->p;
    int backward = r->g != NULL;
    float *om = r->om + n0 * p->P * p->OCS;
    if (bf16) {
        DT_CALL(r->dev, dt_deform_sample_nhwc_bf16, p, nb, r->xT, om, col);
    } else if (tiled(r, backward)) {
        const float *woff = fused(r, backward) ? r->a->woff : NULL;
        DT_CALL(r->dev, dt_deform_tile_forward, p, nb, r->xT, woff, r->a->boff, om, col, r->ws);
    } else {
        DT_CALL(r->dev, dt_deform_sample_nhwc, p, nb, r->xT, om, col);
    }
}

static void deft_adjoint(void *rv, int64_t n0, int64_t nb, void *dcol, int bf16) {
    dt_deform_run *r = rv;
    const dt_deform_plan *p = r->p;
    const dt_deform_grads *g = r->g;
    dt_dev dev = r->dev;
    const int layer = is_layer(r);
    const float *om = r->om + n0 * p->P * p->OCS;
    const int64_t HW = p->H * p->W, npix = nb * HW;
    if (p->dx == DT_DX_GATHER) {
        if (!g->dx) DT_CALL(dev, dt_deform_index_build, p, nb, om, r->idx_ws, &r->idx); /* not built ahead */
        if (dev == DT_GPU) dt_side_join();
        if (bf16) DT_CALL(dev, dt_deform_gather_dx_bf16, p, nb, &r->idx, r->xT, dcol, r->dxT, r->D);
        else DT_CALL(dev, dt_deform_gather_dx, p, nb, &r->idx, r->xT, dcol, r->dxT, r->D);
        DT_CALL(dev, dt_deform_offset_grads, p, nb, om, r->D, layer, r->dom);
    } else { /* the atomic knob: fp32 columns only (bf16_cols is then 0) */
        DT_CALL(dev, dt_fill, npix * p->C, 0.0f, r->dxT);
        DT_CALL(dev, dt_deform_scatter_dx, p, nb, r->xT, om, dcol, layer, r->dxT, r->dom);
    }
    if (layer) {
        if (g->dwoff || g->dboff)
            DT_CALL(dev, dt_offconv_bwd_weight, p, nb, r->xT, r->dom, n0 == 0 ? g->bwoff : 1.0f, g->dwoff,
                    n0 == 0 ? g->bboff : 1.0f, g->dboff, r->ws);
        if (g->dx) DT_CALL(dev, dt_offconv_bwd_input, p, nb, r->dom, r->a->woff, 1.0f, r->dxT, r->ws);
    } else {
        if (g->doff)
            DT_CALL(dev, dt_nhwc_to_nchw, nb, 2 * p->GK, p->P, r->dom, p->OCS, NULL, g->boff, g->doff + n0 * 2 * p->GK * p->P);
        if (g->dmask)
            DT_CALL(dev, dt_nhwc_to_nchw, nb, p->GK, p->P, r->dom + 2 * p->GK, p->OCS, NULL, g->bmask,
                    g->dmask + n0 * p->GK * p->P);
    }
    if (g->dx) DT_CALL(dev, dt_nhwc_to_nchw, nb, p->C, HW, r->dxT, p->C, NULL, g->bx, g->dx + n0 * p->C * HW);
}

static void deft_close(dt_deform_run *r) {
    const dt_deform_plan *p = r->p;
    dt_dev dev = r->dev;
    if (r->dwT) { /* [K*C, Cout] -> [Cout, K, C] (into wT, done with) -> [Cout, C, K] with beta */
        DT_CALL(dev, dt_nhwc_to_nchw, 1, p->Cout, p->KC, r->dwT, p->Cout, NULL, 0.0f, r->wT);
        DT_CALL(dev, dt_nhwc_to_nchw, p->Cout, p->C, p->K, r->wT, p->C, NULL, r->g->bw, r->g->dw);
    }
    dt_dev_free(dev, r->wT);
    if (r->dwT) dt_dev_free(dev, r->dwT);
    if (r->own_om) dt_dev_free(dev, r->om);
    dt_dev_free(dev, r->xT);
    if (r->dxT) dt_dev_free(dev, r->dxT);
    if (r->dom) dt_dev_free(dev, r->dom);
    if (r->D) dt_dev_free(dev, r->D);
    if (r->ws) dt_dev_free(dev, r->ws);
    if (r->idx_ws) dt_dev_free(dev, r->idx_ws);
}

const dt_deform_impl dt_deform_deft_impl = {DT_COLS_NC,  deft_open,      deft_begin, deft_fill,
                                            deft_adjoint, deft_bf16_cols, deft_close};
