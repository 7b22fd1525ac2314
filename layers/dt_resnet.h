/* dt_resnet.h: torchvision-equivalent ResNet-18 (7x7/2 stem + BN + ReLU, 3x3/2 max pool,
 * four stages of two BasicBlocks, 1x1 downsample + BN, global average pool, linear), with
 * deformable 3x3 convs in the chosen stages ("all-deformable" = every 3x3 conv inside the
 * blocks, as in the project's anchors; the stem and the 1x1 downsamples stay plain). */
#ifndef DT_RESNET_H
#define DT_RESNET_H

#include "dt_api.h"

#include "dt_deform.h"
#include "dt_layers.h"
#include "dt_param.h"

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

typedef struct {
    int num_classes;
    float width;              /* channel-width multiplier (1 = ResNet-18: 64, 128, 256, 512) */
    unsigned deform_stages;   /* bit s-1 set: stage s (1..4) uses deformable 3x3 convs */
    int deform_version;       /* 1 or 2 (mask) */
    int offset_groups;
    float offset_init_std;    /* 0: zero-initialized offset convs (default) */
    float offset_lr_mult;     /* learning-rate multiplier of the offset convs (default 0.1) */
    dt_deform_mode deform_mode;
    dt_deform_knobs knobs;
    /* the precision policy (dt_dtype.h): fp32 / tf32 activations f32, bf16 ones bf16 with f32
     * masters and bf16 working copies of the conv and linear weights */
    dt_precision precision;
    dt_layout layout;         /* the activations' (and conv weights') layout */
} dt_resnet_cfg;

/* fp32, NCHW, all-plain unless deform_stages is set. */
dt_resnet_cfg dt_resnet_cfg_default(int num_classes);

/* A 3x3 conv slot: plain weight or a deformable layer. */
typedef struct {
    int deform;
    dt_tensor *w;        /* plain: [cout, cin, 3, 3] f32 master in the model's layout */
    dt_deform_conv dc;   /* deformable */
    dt_conv_geom g;
} dt_conv3;

typedef struct {
    dt_conv3 conv1, conv2;
    dt_batchnorm bn1, bn2;
    int has_down;
    dt_tensor *down_w; /* [cout, cin, 1, 1] */
    dt_batchnorm down_bn;
    int stride;
} dt_basic_block;

typedef struct {
    dt_resnet_cfg cfg;
    dt_params params;
    dt_tensor *stem_w; /* [64, 3, 7, 7] */
    dt_batchnorm stem_bn;
    dt_basic_block blocks[8];
    dt_tensor *fc_w, *fc_b; /* [classes, 512], [classes] */
    dt_dev dev;
    dt_dtype act;           /* the activations' dtype (from cfg.precision) */
    dt_math math;           /* f32 products: strict or TF32 */
    /* lists sized by the model: every batch norm in order, and the state that is not a
     * parameter (each batch norm's running mean and variance, in that order) */
    dt_batchnorm **bns;
    int n_bns;
    dt_tensor **buffers;
    int n_buffers;
} dt_resnet;

void dt_resnet18_init(dt_resnet *m, const dt_resnet_cfg *cfg, dt_dev dev);
/* x [N, 3, S, S] f32 NCHW (the loader's batch) -> logits [N, classes] in the model's activation
 * dtype. The input goes to the model's dtype and layout in one kernel; a bf16 model first
 * refreshes its weights' working copies (one launch). training: BN batch statistics + running
 * update. */
dt_tensor *dt_resnet18_forward(dt_resnet *m, dt_tensor *x, int training);
void dt_resnet18_free(dt_resnet *m);

/* The deformable layers, in order (NULL past the end). */
dt_deform_conv *dt_resnet_deform_layer(dt_resnet *m, int i);

/* "none" | "all" | a list of stages like "3,4" -> bit mask; -1 when malformed. */
int dt_resnet_parse_stages(const char *s);

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
