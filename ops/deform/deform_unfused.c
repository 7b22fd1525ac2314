/* The unfused implementation: the three-operator NCHW baseline, as PyTorch runs it (the
 * offset conv is a separate conv2d node in the layer). Columns [C*K, nb*P] (DT_COLS_CN):
 *   fill     deformable im2col from the offsets and mask
 *   adjoint  col2im_coord -> offset and mask gradients (a gather over the group's channels),
 *            col2im -> dx (float atomics, or the fixed-point scatter when deterministic) */
#include "ops/deform/deform_nchw.h"
#include "ops/deform/deform_run.h"
#include "core/dt_alloc.h"
#include "core/dt_common.h"
#include "ops/pointwise/dt_shared_kernels.h"
#include "core/dt_kernel.h"
#include "ops/pointwise/elementwise.h"

/* The unfused kernels (deform_nchw.h): f32 NCHW, as PyTorch runs them. */
DT_OP_TABLE(unfused_im2col_k, "deform_conv2d unfused (im2col)", __typeof__(dt_deform_im2col_cpu),
            DT_TWINS(unfused_im2col_k, dt_deform_im2col, DT_F32, DT_NCHW))
DT_OP_TABLE(unfused_col2im_k, "deform_conv2d unfused (col2im)", __typeof__(dt_deform_col2im_cpu),
            DT_TWINS(unfused_col2im_k, dt_deform_col2im, DT_F32, DT_NCHW))
DT_OP_TABLE(unfused_coord_k, "deform_conv2d unfused (offset gradients)", __typeof__(dt_deform_col2im_coord_cpu),
            DT_TWINS(unfused_coord_k, dt_deform_col2im_coord, DT_F32, DT_NCHW))
typedef void col2im_det_fn(const dt_deform_plan *p, int64_t nb, const float *dcol, const float *offset,
                           const float *mask, float beta, float *dx);
DT_OP_TABLE(col2im_det_k, "deform_conv2d unfused (deterministic scatter)", col2im_det_fn,
            DT_KERNEL(col2im_det_k, DT_CPU, DT_F32, DT_NCHW, dt_deform_col2im_det_cpu),
            DT_KERNEL_CUDA(col2im_det_k, DT_GPU, DT_F32, DT_NCHW, dt_deform_col2im_det_cuda))

static void unfused_open(dt_deform_run *r) {
    if (r->a->woff || !r->a->offset)
        dt_fatal("deform_conv2d (unfused): the offsets are an input (the unfused layer runs its offset conv as a node)");
    const dt_deform_field_fmt of = r->a->offset_fmt, mf = r->a->mask_fmt;
    if (of.dtype != DT_F32 || of.layout != DT_NCHW || of.pitch ||
        (r->a->mask && (mf.dtype != DT_F32 || mf.layout != DT_NCHW || mf.pitch)))
        dt_fatal("deform_conv2d (unfused): offsets and mask are dense f32 NCHW (the baseline's kernels read nothing else)");
    r->gemm_w = r->a->w; /* f32 NCHW (dt_deform_plan_types) */
    if (r->g) {
        r->gemm_dw = r->g->dw;
        r->gemm_bw = r->g->bw;
    }
}

static void unfused_fill(void *rv, int64_t n0, int64_t nb, void *col) {
    dt_deform_run *r = rv;
    const dt_deform_plan *p = r->p;
    const dt_deform_args *a = r->a;
    DT_PICK(unfused_im2col_k, r->dev, DT_F32, DT_NCHW)(p, nb, (const float *)a->x + n0 * p->prob.C * p->prob.H * p->prob.W, (const float *)a->offset + n0 * 2 * p->GK * p->P, a->mask ? (const float *)a->mask + n0 * p->GK * p->P : NULL, col);
}

static void unfused_adjoint(void *rv, int64_t n0, int64_t nb, void *dcol) {
    dt_deform_run *r = rv;
    const dt_deform_plan *p = r->p;
    const dt_deform_args *a = r->a;
    const dt_deform_grads *g = r->g;
    dt_dev dev = r->dev;
    const float *off = (const float *)a->offset + n0 * 2 * p->GK * p->P;
    const float *mask = a->mask ? (const float *)a->mask + n0 * p->GK * p->P : NULL;
    if (g->doff || g->dmask) { /* the coord kernel writes both; a missing one goes to scratch */
        float *o = g->doff ? (float *)g->doff + n0 * 2 * p->GK * p->P : dt_dev_alloc(dev, (size_t)nb * 2 * p->GK * p->P * sizeof(float));
        DT_PICK(unfused_coord_k, dev, DT_F32, DT_NCHW)(p, nb, dcol, (const float *)a->x + n0 * p->prob.C * p->prob.H * p->prob.W, off, mask, o, g->doff ? g->boff : 0.0f, g->dmask ? (float *)g->dmask + n0 * p->GK * p->P : NULL, g->bmask);
        if (!g->doff) dt_dev_free(dev, o);
    }
    if (!g->dx) return;
    float *dx = (float *)g->dx + n0 * p->prob.C * p->prob.H * p->prob.W;
    if (p->knobs.deterministic) {
        DT_PICK(col2im_det_k, dev, DT_F32, DT_NCHW)(p, nb, dcol, off, mask, g->bx, dx);
    } else {
        if (g->bx == 0.0f) DT_PICK(dt_fill_k, dev, DT_F32, DT_NCHW)(nb * p->prob.C * p->prob.H * p->prob.W, 0.0f, dx);
        DT_PICK(unfused_col2im_k, dev, DT_F32, DT_NCHW)(p, nb, dcol, off, mask, dx);
    }
}

static void unfused_close(dt_deform_run *r) { (void)r; }

const dt_deform_impl dt_deform_unfused_impl = {DT_COLS_CN, unfused_open, NULL, unfused_fill, unfused_adjoint,
                                                unfused_close};
