/* deform_run.h: one call of a deformable convolution in flight, and the table of
 * implementations that deform_run.c drives through the column-conv skeleton (dt_colconv.h).
 * Private to ops/deform/deform_*.c.
 *
 * An implementation supplies the skeleton's callbacks (begin a chunk, fill its columns,
 * consume their gradient) in its column layout, plus open/close for per-call state: the
 * weight in the layout its GEMMs read (gemm_w) and where the weight gradient accumulates
 * (gemm_dw with gemm_bw for the first chunk). */
#ifndef DT_DEFORM_RUN_H
#define DT_DEFORM_RUN_H

#include "ops/deform/deform_nhwc.h"
#include "ops/conv/dt_colconv.h"
#include "ops/deform/dt_deform.h"

typedef struct {
    const dt_deform_plan *p;
    dt_dev dev;
    const dt_deform_args *a;
    const dt_deform_grads *g; /* NULL in the forward */
    const void *gemm_w;       /* [Cout, R] in the columns' order, of the plan's dtype */
    float *gemm_dw;           /* [Cout, R] fp32, or NULL */
    float gemm_bw;
    /* the implementation's state (deft; chunk buffers of nb images) */
    float *wT;         /* NCHW plans: [Cout, K, C] the weight, channels last */
    float *dwT;        /* NCHW plans: [Cout, K*C] its gradient as the skeleton makes it */
    float *om;         /* [N*P, OCS] offsets and mask of the whole batch */
    int own_om;        /* om was built here from the op's offsets (freed at close) */
    const void *xT;    /* [nb, H, W, C] the chunk's input channels last, of the plan's dtype: the
                          input itself (NHWC plans) or xT_buf */
    float *xT_buf;     /* NCHW plans: the chunk's input relaid out channels last (f32) */
    int dx_direct;     /* the gather (or scatter) writes the caller's dx itself (deform_deft.c) */
    float *dxT_buf;    /* [nb, H, W, C] fp32: the sampling's input gradient when it is not dx
                          itself (NULL when dx is not wanted) */
    float *dom;        /* [nb*P, OCS] gradient w.r.t. om */
    float *D;          /* gather: [nb*P*K*G, 4] corner dot products */
    dt_deform_index idx; /* gather: the chunk's inverse index (in idx_ws) */
    void *idx_ws;      /* its workspace: written on the GPU's side stream while the GEMMs run */
    void *ws;          /* offset conv and tile workspace */
} dt_deform_run;

typedef struct {
    dt_col_layout layout;
    void (*open)(dt_deform_run *r);
    void (*begin)(void *r, int64_t n0, int64_t nb, int backward); /* may be NULL */
    void (*fill)(void *r, int64_t n0, int64_t nb, void *col);
    void (*adjoint)(void *r, int64_t n0, int64_t nb, void *dcol);
    void (*close)(dt_deform_run *r);
} dt_deform_impl;

/* The column budget (bytes) a plan is made with. */
size_t dt_deform_col_budget(void);

extern const dt_deform_impl dt_deform_unfused_impl; /* deform_unfused.c */
extern const dt_deform_impl dt_deform_deft_impl;    /* deform_deft.c */

#endif
