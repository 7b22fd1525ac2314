/* The unfused implementation: the three-operator NCHW baseline, as PyTorch runs it (the
 * offset conv is a separate conv2d node in the layer). Columns [C*K, nb*P] (DT_COLS_CN):
 *   fill     deformable im2col from the offsets and mask
 *   adjoint  col2im_coord -> offset and mask gradients (a gather over the group's channels),
 *            col2im -> dx (float atomics, or the fixed-point scatter when deterministic) */
#include "deform.h"
#include "deform_run.h"
#include "dt_alloc.h"
#include "dt_dispatch.h"
#include "elementwise.h"

static void unfused_open(dt_deform_run *r) {
    if (r->a->woff || !r->a->offset)
        dt_fatal("deform_conv2d (unfused): the offsets are an input (the unfused layer runs its offset conv as a node)");
    r->gemm_w = r->a->w;
    if (r->g) {
        r->gemm_dw = r->g->dw;
        r->gemm_bw = r->g->bw;
    }
}

static void unfused_fill(void *rv, int64_t n0, int64_t nb, void *col, int bf16) {
    (void)bf16; /* fp32 columns only: the skeleton rounds them in the bf16 precision */
    dt_deform_run *r = rv;
    const dt_deform_plan *p = r->p;
    const dt_deform_args *a = r->a;
    DT_CALL(r->dev, dt_deform_im2col, p, nb, a->x + n0 * p->C * p->H * p->W, a->offset + n0 * 2 * p->GK * p->P,
            a->mask ? a->mask + n0 * p->GK * p->P : NULL, col);
}

static void unfused_adjoint(void *rv, int64_t n0, int64_t nb, void *dcol, int bf16) {
    (void)bf16;
    dt_deform_run *r = rv;
    const dt_deform_plan *p = r->p;
    const dt_deform_args *a = r->a;
    const dt_deform_grads *g = r->g;
    dt_dev dev = r->dev;
    const float *off = a->offset + n0 * 2 * p->GK * p->P, *mask = a->mask ? a->mask + n0 * p->GK * p->P : NULL;
    if (g->doff || g->dmask) { /* the coord kernel writes both; a missing one goes to scratch */
        float *o = g->doff ? g->doff + n0 * 2 * p->GK * p->P : dt_dev_alloc(dev, (size_t)nb * 2 * p->GK * p->P * sizeof(float));
        DT_CALL(dev, dt_deform_col2im_coord, p, nb, dcol, a->x + n0 * p->C * p->H * p->W, off, mask, o,
                g->doff ? g->boff : 0.0f, g->dmask ? g->dmask + n0 * p->GK * p->P : NULL, g->bmask);
        if (!g->doff) dt_dev_free(dev, o);
    }
    if (!g->dx) return;
    float *dx = g->dx + n0 * p->C * p->H * p->W;
    if (dev == DT_GPU && p->knobs.deterministic) {
#ifdef DT_CUDA
        void *ws = dt_gpu_malloc(dt_deform_det_ws_bytes(p, nb));
        dt_deform_col2im_det_cuda(p, nb, dcol, off, mask, g->bx, dx, ws);
        dt_gpu_free(ws);
#endif
    } else {
        if (g->bx == 0.0f) DT_CALL(dev, dt_fill, nb * p->C * p->H * p->W, 0.0f, dx);
        DT_CALL(dev, dt_deform_col2im, p, nb, dcol, off, mask, dx);
    }
}

static void unfused_close(dt_deform_run *r) { (void)r; }

const dt_deform_impl dt_deform_unfused_impl = {DT_COLS_CN, unfused_open, NULL, unfused_fill, unfused_adjoint,
                                                   NULL, unfused_close};
