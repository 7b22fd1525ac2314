/* dt_deform.h: deformable convolution (DCNv1/v2) as an op, as raw entry points and as a layer.
 *
 * The op, dt_deform_conv2d, is torchvision.ops.deform_conv2d: the offsets (and mask) are
 * inputs. x [N, C, H, W], offset [N, 2*G*kh*kw, Ho, Wo] as (dy, dx) pairs per tap per offset
 * group, mask [N, G*kh*kw, Ho, Wo] or NULL, weight [Cout, C, kh, kw], bias [Cout] or NULL.
 * Gradients flow to all of them.
 *
 * The layer, dt_deform_conv, is what a model uses: an offset conv (kh x kw, same stride /
 * padding / dilation as the main conv, with bias, 2GK channels, + GK mask channels through a
 * sigmoid for DCNv2), the bilinear sampling and the main conv.
 *
 * Modes and knobs (deform_plan.h) pick the implementation at run time; all compute the same
 * function, on the CPU (reference loops and channels-last twins) and the GPU:
 *   DT_DEFORM_UNFUSED  the three-operator NCHW baseline, as PyTorch runs it (the layer: a
 *                      conv2d node, a sigmoid node and the op's node)
 *   DT_DEFORM_DEFT     channels-last inside one node: implicit-GEMM offset conv, sampling,
 *                      cuBLAS main conv, the input gradient by gather (default) or atomics */
#ifndef DT_DEFORM_H
#define DT_DEFORM_H

#include "core/dt_api.h"

#include "ops/conv/conv_geom.h"
#include "ops/deform/deform_plan.h"
#include "ops/deform/om_pack.h"
#include "core/dt_param.h"
#include "core/dt_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

/* ---- offset statistics (DefT sizes its halo from these) ---- */
typedef struct {
    int64_t samples;                /* (dy, dx) pairs */
    double mean_abs_dy, mean_abs_dx;
    float p_dy[4], p_dx[4];         /* 50 / 90 / 99 / 99.9th percentile of |dy|, |dx| (px, to 1/64) */
    float max_abs;                  /* largest |dy| or |dx| */
    float halo;                     /* the halo the next field refers to */
    double frac_outside;            /* share of samples with |dy| > halo or |dx| > halo */
} dt_offset_stats;
/* offset [N, 2*G*K, Ho, Wo] on any device. */
void dt_offset_stats_compute(const dt_tensor *offset, float halo, dt_offset_stats *st);
/* The same from a strided view on `dev`: component c (0 dy, 1 dx) of pair j of image n at
 * position p is off[n*s_img + p*s_pos + (2j + c)*s_ch] (the deft layer's om: s_pos = OCS). */
void dt_offset_stats_compute_view(dt_dev dev, const float *off, int64_t N, int64_t GK, int64_t P, int64_t s_img,
                                  int64_t s_pos, int64_t s_ch, float halo, dt_offset_stats *st);
/* Smallest integer halo covering the q-th percentile (q in {0:50,1:90,2:99,3:99.9}) of both
 * components. */
int dt_offset_stats_halo(const dt_offset_stats *st, int q);
void dt_offset_stats_format(const dt_offset_stats *st, char *buf, int len);

/* ---- raw entry points: one orchestration for the tape op, the layer and the C API ----
 * Pointers are of the device `dev`. x, w, y and their gradients are of the plan's dtype and
 * layout (deform_plan.h: f32 NCHW, f32 NHWC or bf16 NHWC - NHWC weights stored
 * [Cout, kh, kw, C]); offsets, mask, the offset conv's parameters, the bias and every weight
 * gradient are f32 (offsets and mask NCHW). */
typedef struct {
    const void *x;              /* [N, C, H, W] */
    const void *offset, *mask;  /* the op: [N, 2GK, Ho, Wo], [N, GK, Ho, Wo] or NULL, stored as offset_fmt and
                                   mask_fmt say */
    dt_deform_field_fmt offset_fmt, mask_fmt; /* deft: f32 / bf16, NCHW / NHWC, with a pitch or dense, read as
                                                 they are (om_pack.h); unfused: dense f32 NCHW only. {0}: f32
                                                 NCHW, dense */
    const float *woff, *boff;   /* the deft layer instead: offset conv [OC, C, kh, kw], [OC] */
    const void *w;              /* [Cout, C / groups, kh, kw] (the grouped weight as stored) */
    const float *bias;          /* [Cout] or NULL */
    float *om;                  /* the deft layer: [N*P, OCS] offsets and mask (deform_plan.h), written by
                                   the forward, read by the backward */
    int64_t groups;             /* weight groups (torchvision's groups; 0 or 1: dense): the column
                                   skeleton's per-group GEMMs (dt_colconv.h), dw [Cout, C / groups, kh, kw] */
    void *cols;                 /* deft only, or NULL: [N*P, K*C] of the plan's dtype, the sampled columns
                                   written by the forward and read by the backward's weight gradient
                                   instead of sampling again (knobs.keep_cols; the same call's args) */
} dt_deform_args;
typedef struct {
    void *dx;                                   /* like x; NULL: not wanted (every one) */
    void *doff, *dmask;                         /* dense, in the dtype and layout of the args' offset_fmt and
                                                   mask_fmt (the pitch is the inputs' alone) */
    float *dw, *db, *dwoff, *dboff;
    float bx, boff, bmask, bw, bb, bwoff, bboff;         /* 0 overwrite, 1 accumulate */
} dt_deform_grads;
void dt_deform_forward_raw(const dt_deform_plan *p, dt_dev dev, const dt_deform_args *a, void *y);
void dt_deform_backward_raw(const dt_deform_plan *p, dt_dev dev, const dt_deform_args *a, const void *dy,
                            const dt_deform_grads *g);

/* ---- the op ---- */
/* Unfused kernels (deterministic: fixed-point scatter on the GPU). */
dt_tensor *dt_deform_conv2d(dt_tensor *x, dt_tensor *offset, dt_tensor *mask, dt_tensor *w, dt_tensor *bias,
                            dt_conv_geom g, int groups, int deterministic);
/* Either implementation, with its knobs (NULL: defaults). x and w: f32 NCHW (either mode), or
 * f32 / bf16 NHWC (deft); offset and mask f32 NCHW; math: f32 products strict or TF32. */
dt_tensor *dt_deform_conv2d_mode(dt_tensor *x, dt_tensor *offset, dt_tensor *mask, dt_tensor *w, dt_tensor *bias,
                                 dt_conv_geom g, int groups, dt_deform_mode mode, const dt_deform_knobs *knobs,
                                 dt_math math);
/* The deft layer's node: offset conv + sampling + main conv; the offsets and mask it made are
 * returned in *om_out ([N*P, OCS], a tensor of the current scope) when not NULL. */
dt_tensor *dt_deform_conv2d_deft(dt_tensor *x, dt_tensor *off_w, dt_tensor *off_b, dt_tensor *w, dt_tensor *bias,
                                 dt_conv_geom g, int groups, int version, const dt_deform_knobs *knobs, int halo,
                                 dt_math math, dt_tensor **om_out);

/* ---- the layer ---- */
typedef struct {
    char name[64];
    int64_t cin, cout;
    dt_conv_geom g;
    int groups, version; /* offset groups; 1 = DCNv1, 2 = DCNv2 (mask) */
    dt_deform_mode mode;
    dt_deform_knobs knobs;
    dt_math math;                      /* f32 inputs: products strict or TF32 */
    dt_tensor *weight, *bias;          /* [cout, cin, kh, kw] f32 master (its layout the model's; a
                                          bf16 model gives it a working copy), [cout] or NULL */
    dt_tensor *off_weight, *off_bias;  /* [(2|3)*G*kh*kw, cin, kh, kw], [(2|3)*G*kh*kw] */
    /* statistics: computed on the forward pass when collect_stats is set */
    int collect_stats;
    float stats_halo;
    dt_offset_stats stats;
    int stats_valid;
    int cur_halo;      /* halo the deft staging uses now (auto or fixed) */
    int64_t calls;     /* forwards so far (a replayed graph's count too: dt_resnet_replayed) */
} dt_deform_conv;

/* Weight: Kaiming normal (fan-out), stored in `layout` (the layout of the tensors the layer will
 * see); offset conv (f32 NCHW): N(0, offset_init_std) (0: zeros), bias 0. */
void dt_deform_conv_init(dt_deform_conv *l, dt_params *ps, const char *name, int64_t cin, int64_t cout,
                         dt_conv_geom g, int groups, int version, int with_bias, float offset_init_std, dt_dev dev,
                         dt_layout layout);
/* x [N, cin, H, W]: f32 NCHW (either mode), f32 or bf16 NHWC (deft) in the weight's layout. */
dt_tensor *dt_deform_conv_forward(dt_deform_conv *l, dt_tensor *x);
/* Number of offset-conv output channels: 2GK (v1) or 3GK (v2). */
int64_t dt_deform_offset_channels(const dt_deform_conv *l);
/* 1 when the layer's next forward reads device values on the host: it refreshes the deft
 * halo from the offset statistics (stage = 1, halo = -1: the first call, then every
 * halo_refresh calls) or collects statistics. Such a forward cannot be captured in a CUDA
 * graph; the trainer runs that step eagerly. */
int dt_deform_conv_reads_back(const dt_deform_conv *l);

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
