/* dt_deform.h: deformable convolution (DCNv1/v2) as an op and as a layer.
 *
 * The op, dt_deform_conv2d, is torchvision.ops.deform_conv2d: the offsets (and mask) are
 * inputs. x [N, C, H, W], offset [N, 2*G*kh*kw, Ho, Wo] as (dy, dx) pairs per tap per offset
 * group, mask [N, G*kh*kw, Ho, Wo] or NULL, weight [Cout, C, kh, kw], bias [Cout] or NULL.
 * Gradients flow to all of them.
 *
 * The layer, dt_deform_conv, is what a model uses: an offset conv (kh x kw, same stride /
 * padding / dilation as the main conv, with bias, 2GK channels, + GK mask channels through a
 * sigmoid for DCNv2), the bilinear sampling and the main conv. Its mode picks the
 * implementation at run time; all modes compute the same function:
 *   DT_DEFORM_UNFUSED  the three-op baseline (offset conv; deformable im2col into a column
 *                      buffer; cuBLAS GEMM), as PyTorch runs it
 *   DT_DEFORM_DEFT     the DefT-fused kernels (offset conv + sampling in one kernel, tiled by
 *                      output space with a halo sized from the offset statistics), main conv
 *                      on cuBLAS; every fusion choice is a knob (dt_deft_knobs)
 * On the CPU every mode runs the reference loops. */
#ifndef DT_DEFORM_H
#define DT_DEFORM_H

#include "conv_geom.h"
#include "dt_param.h"
#include "dt_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DT_DEFORM_UNFUSED = 0, DT_DEFORM_DEFT = 1 } dt_deform_mode;
const char *dt_deform_mode_name(dt_deform_mode m);
int dt_deform_mode_parse(const char *s); /* -1 when unknown */

/* The fusion choices of the deft mode, each switchable for ablation. */
typedef struct {
    int tile_h, tile_w; /* output positions per fused block; 0 x 0 (default): 8x8, 4x8 or 4x4,
                           the largest that still gives >= 2 blocks per SM */
    int halo;           /* input pixels staged around the tile; -1: chosen from the offset
                           statistics (the DefT idea), refreshed every halo_refresh calls */
    int halo_refresh;   /* calls between automatic halo updates (default 200) */
    int swizzle;        /* block-ID swizzle so that co-resident blocks share L2 (default 1) */
    int fuse_offset;    /* offset conv inside the sampling kernel (default 1; 0: a separate conv) */
    int stage;          /* stage the input tile in shared memory (default 1; 0: read through L2) */
    int deterministic;  /* bitwise-reproducible backward (default 0); also honoured by unfused */
} dt_deft_knobs;
dt_deft_knobs dt_deft_knobs_default(void);
/* 0, or -1 with a message naming the bad knob (checked on the CPU, e.g. for a config). */
int dt_deft_knobs_validate(const dt_deft_knobs *k, dt_conv_geom g, char *err, int errlen);

/* Offset statistics of one layer (DefT sizes its halo from these). */
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
/* Smallest integer halo covering the q-th percentile (q in {0:50,1:90,2:99,3:99.9}) of both
 * components. */
int dt_offset_stats_halo(const dt_offset_stats *st, int q);
void dt_offset_stats_format(const dt_offset_stats *st, char *buf, int len);

/* ---- the op ---- */
/* Unfused kernels (deterministic: fixed-point scatter on the GPU). */
dt_tensor *dt_deform_conv2d(dt_tensor *x, dt_tensor *offset, dt_tensor *mask, dt_tensor *w, dt_tensor *bias,
                            dt_conv_geom g, int groups, int deterministic);
/* Either implementation: DT_DEFORM_DEFT runs the tiled DefT sampling kernels on the given
 * offsets (knobs: tile, halo (-1 = 1), swizzle, stage, deterministic); fuse_offset has no
 * meaning here since the offsets are an input. */
dt_tensor *dt_deform_conv2d_mode(dt_tensor *x, dt_tensor *offset, dt_tensor *mask, dt_tensor *w, dt_tensor *bias,
                                 dt_conv_geom g, int groups, dt_deform_mode mode, const dt_deft_knobs *knobs);

/* The orchestration behind the op, on raw pointers of the plan's device (the C API uses it). */
typedef struct {
    dt_dev dev;
    int64_t N, C, H, W, Cout, Ho, Wo;
    dt_conv_geom g;
    int G, has_mask;
    int tiled;           /* DefT tiled kernels (GPU) instead of the unfused ones */
    dt_deft_knobs knobs;
    int deterministic;
} dt_deform_plan;
typedef struct {
    float *dx, *doff, *dmask, *dw, *db; /* NULL: not wanted */
    float bx, boff, bmask, bw, bb;       /* 0 overwrite, 1 accumulate */
} dt_deform_grads;
dt_deform_plan dt_deform_plan_make(dt_dev dev, const dt_tensor *x, int64_t Cout, int64_t Ho, int64_t Wo, dt_conv_geom g,
                                   int G, int has_mask, dt_deform_mode mode, const dt_deft_knobs *knobs);
void dt_deform_raw_forward(const dt_deform_plan *p, const float *x, const float *off, const float *mask, const float *w,
                           const float *bias, float *y);
void dt_deform_raw_backward(const dt_deform_plan *p, const float *x, const float *off, const float *mask, const float *w,
                            const float *dy, const dt_deform_grads *gr);

/* ---- the layer ---- */
typedef struct {
    char name[64];
    int64_t cin, cout;
    dt_conv_geom g;
    int groups, version; /* offset groups; 1 = DCNv1, 2 = DCNv2 (mask) */
    dt_deform_mode mode;
    dt_deft_knobs knobs;
    dt_tensor *weight, *bias;          /* [cout, cin, kh, kw], [cout] or NULL */
    dt_tensor *off_weight, *off_bias;  /* [(2|3)*G*kh*kw, cin, kh, kw], [(2|3)*G*kh*kw] */
    /* statistics: computed on the forward pass when collect_stats is set */
    int collect_stats;
    float stats_halo;
    dt_offset_stats stats;
    int stats_valid;
    int cur_halo;      /* halo the deft kernels use now (auto or fixed) */
    int64_t calls;
} dt_deform_conv;

/* Weight: Kaiming normal (fan-out); offset conv: N(0, offset_init_std) (0: zeros), bias 0. */
void dt_deform_conv_init(dt_deform_conv *l, dt_params *ps, const char *name, int64_t cin, int64_t cout,
                         dt_conv_geom g, int groups, int version, int with_bias, float offset_init_std, dt_dev dev);
dt_tensor *dt_deform_conv_forward(dt_deform_conv *l, dt_tensor *x);
/* Number of offset-conv output channels: 2GK (v1) or 3GK (v2). */
int64_t dt_deform_offset_channels(const dt_deform_conv *l);

/* The fused op behind DT_DEFORM_DEFT (GPU only); saved offsets/mask are written to
 * *offsets_out if not NULL (a tensor of the current scope, for statistics). */
dt_tensor *dt_deform_conv2d_deft(dt_tensor *x, dt_tensor *off_w, dt_tensor *off_b, dt_tensor *w, dt_tensor *bias,
                                 dt_conv_geom g, int groups, int version, const dt_deft_knobs *knobs, int halo,
                                 dt_tensor **offsets_out);

#ifdef __cplusplus
}
#endif
#endif
