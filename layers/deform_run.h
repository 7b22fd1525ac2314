/* deform_run.h: one call of a deformable convolution in flight, and the table of
 * implementations that deform_run.c drives through the column-conv skeleton (dt_colconv.h).
 * Private to layers/deform_*.c.
 *
 * An implementation supplies the skeleton's callbacks (begin a chunk, fill its columns,
 * consume their gradient) in its column layout, plus open/close for per-call state: the
 * weight in the layout its GEMMs read (gemm_w) and where the weight gradient accumulates
 * (gemm_dw with gemm_bw for the first chunk). */
#ifndef DT_DEFORM_RUN_H
#define DT_DEFORM_RUN_H

#include "deform_nhwc.h"
#include "dt_colconv.h"
#include "dt_deform.h"

typedef struct {
    const dt_deform_plan *p;
    dt_dev dev;
    const dt_deform_args *a;
    const dt_deform_grads *g; /* NULL in the forward */
    const float *gemm_w;      /* [Cout, R] in the columns' order */
    float *gemm_dw;           /* [Cout, R] (CN) or [R, Cout] (NC), or NULL */
    float gemm_bw;
    /* the implementation's state */
    float *wT;         /* deft: [Cout, K, C] the weight, channels last */
    float *dwT;        /* deft: [K*C, Cout] its gradient as the skeleton makes it */
    float *om;         /* deft: [N*P, OCS] offsets and mask of the whole batch */
    int own_om;        /* om was built here from the op's offsets (freed at close) */
    float *xT, *dxT;   /* deft: [nb, H, W, C] the chunk's input and its gradient */
    float *dom;        /* deft: [nb*P, OCS] gradient w.r.t. om */
    float *D;          /* deft gather: [nb*P*K*G, 4] corner dot products */
    dt_deform_index idx; /* deft gather: the chunk's inverse index (in idx_ws) */
    void *idx_ws;      /* its workspace: written on the GPU's side stream while the GEMMs run */
    void *ws;          /* offset conv and tile workspace */
} dt_deform_run;

typedef struct {
    dt_col_layout layout;
    void (*open)(dt_deform_run *r);
    void (*begin)(void *r, int64_t n0, int64_t nb, int backward); /* may be NULL */
    void (*fill)(void *r, int64_t n0, int64_t nb, void *col, int bf16);
    void (*adjoint)(void *r, int64_t n0, int64_t nb, void *dcol, int bf16);
    /* whether fill and adjoint take bf16 columns for this call (NULL: never) */
    int (*bf16_cols)(const dt_deform_run *r);
    void (*close)(dt_deform_run *r);
} dt_deform_impl;

/* The column budget (bytes of fp32 columns) a plan is made with: in the bf16 precision the deft
 * mode's row sampling and gather keep bf16 columns, half the bytes, so the same memory holds
 * twice the images. */
size_t dt_deform_col_budget(dt_deform_mode mode, const dt_deform_knobs *k, dt_precision prec);
/* Whether the deft kernels under these knobs make (forward) and read (backward) bf16 columns
 * (deform_deft.c); layer: with an offset conv. */
int dt_deft_bf16_cols(const dt_deform_knobs *k, int layer, int forward, int backward);

extern const dt_deform_impl dt_deform_unfused_impl; /* deform_unfused.c */
extern const dt_deform_impl dt_deform_deft_impl;    /* deform_deft.c */

#endif
