/* dt_resnet.h: torchvision's ResNets - resnet18, resnet34 (BasicBlock), resnet50, resnet101
 * (Bottleneck, v1.5: the stride on the 3x3 conv), resnext50_32x4d (the Bottleneck with its 3x3
 * conv in 32 groups of 4 x planes / 64 channels) - and mobilenet_v2 (inverted residuals:
 * expand 1x1, depthwise 3x3, linear project 1x1; ReLU6) as one description that the code iterates:
 * per model a table of four stages (block kind, block count, planes, stride), from which the
 * blocks are built (7x7/2 stem + BN + ReLU, 3x3/2 max pool, the stages, global average pool,
 * linear). Parameter and buffer names are torchvision's state_dict keys (conv1.weight,
 * layer3.5.conv3.weight, layer2.0.downsample.1.running_mean, fc.bias, ...). The 3x3 convs of
 * the chosen stages are deformable (named layerX.Y.convZ.weight, with the offset conv's
 * layerX.Y.convZ.offset.weight / .bias): both of a BasicBlock, the middle one (conv2) of a
 * Bottleneck; the stem and every 1x1 conv stay plain. resnext50_32x4d and mobilenet_v2 have no
 * deformable placement (their 3x3 convs are grouped / depthwise, and the deformable layer has no
 * groups): deform_stages must be 0 for them (dt_resnet_deform_refusal).
 *
 * mobilenet_v2 is torchvision's (names features.0.0 / features.0.1 for the stem conv and BN,
 * features.N.conv.* for the 17 inverted residuals, features.18.0 / .1 for the last 1x1 conv,
 * classifier.1 for the linear) with its classifier's Dropout(p = cfg.dropout) before the linear
 * (classifier.0, no parameters): in train mode only, eval mode is the identity; torchvision's
 * default is 0.2 (the trainer's dropout=auto), dt_resnet_cfg_default's 0 is torchvision's
 * mobilenet_v2(dropout=0.0). The ResNets have no dropout (cfg.dropout must be 0). */
#ifndef DT_RESNET_H
#define DT_RESNET_H

#include "core/dt_api.h"
#include "core/dt_common.h"

#include "ops/deform/dt_deform.h"
#include "ops/dt_layers.h"
#include "core/dt_param.h"

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

/* The models deftc builds (torchvision's definitions). */
typedef enum {
    DT_RESNET18,
    DT_RESNET34,
    DT_RESNET50,
    DT_RESNET101,
    DT_RESNEXT50_32X4D,
    DT_MOBILENET_V2,
    DT_RESNET_MODELS
} dt_resnet_model;

typedef enum {
    DT_BLOCK_BASIC,      /* 3x3 (stride) + BN + ReLU, 3x3 + BN; out = planes */
    DT_BLOCK_BOTTLENECK, /* 1x1 + BN + ReLU, 3x3 (stride, groups) + BN + ReLU, 1x1 + BN; out = 4 x planes */
    DT_BLOCK_INVERTED    /* MobileNetV2: [1x1 expand + BN + ReLU6,] depthwise 3x3 (stride) + BN + ReLU6,
                            1x1 project + BN (linear); + x when the stride is 1 and the channels stay */
} dt_block_kind;

/* One stage: `blocks` blocks of `kind`; the first has `stride` (and a downsample, a 1x1 conv
 * with the stride + BN, where the stride is not 1 or the channels change). planes at width 1. */
typedef struct {
    dt_block_kind kind;
    int blocks, planes, stride;
} dt_resnet_stage;

/* A model's description: stage s (0..3) is torchvision's layer{s+1}. */
typedef struct {
    const char *name; /* "resnet50" */
    dt_resnet_stage stages[4];
    int groups, width_per_group; /* a Bottleneck's 3x3: groups x (planes x width_per_group / 64) channels
                                    (1, 64: ResNet; 32, 4: ResNeXt-50 32x4d) */
    int inverted;                /* 1: mobilenet_v2 (stages unused: dt_mobilenet_v2_setting) */
} dt_resnet_arch;

/* torchvision's MobileNetV2 inverted residual setting: expansion t, channels c, blocks n, stride
 * s of the first block, 7 rows; the stem has 32 channels, the last conv 1280 (width multiplier
 * w: each rounded by dt_mobilenet_divisible(c * w), the last conv's by max(1, w)). */
typedef struct {
    int t, c, n, s;
} dt_mobilenet_row;
const dt_mobilenet_row *dt_mobilenet_v2_setting(int *rows);
/* torchvision's _make_divisible(v, 8): the nearest multiple of 8 (at least 8), raised by 8 when
 * that loses more than 10 %. */
int64_t dt_mobilenet_divisible(double v);
/* torchvision's default dropout of the classifier: 0.2 (mobilenet_v2), 0 (the ResNets: none) */
float dt_resnet_default_dropout(dt_resnet_model model);
/* NULL when p is a possible cfg.dropout for model, else the reason (outside [0, 1); a ResNet: no dropout) */
const char *dt_resnet_dropout_refusal(dt_resnet_model model, float p);
/* The classifier's name: "fc" (the ResNets) or "classifier.1" (mobilenet_v2): its .weight / .bias. */
const char *dt_resnet_classifier_name(dt_resnet_model model);
/* NULL when `deform_stages` (non-zero: some deformable stages) is possible for model; otherwise
 * the reason (resnext50_32x4d's 3x3 convs are grouped, mobilenet_v2's depthwise). */
const char *dt_resnet_deform_refusal(dt_resnet_model model);

const dt_resnet_arch *dt_resnet_arch_of(dt_resnet_model model);
const char *dt_resnet_model_name(dt_resnet_model model);
/* "resnet18" | "resnet34" | "resnet50" | "resnet101" | "resnext50_32x4d" | "mobilenet_v2" -> *model; -1 with err naming the models
 * otherwise. */
int dt_resnet_model_parse(const char *s, dt_resnet_model *model, dt_err *err);

typedef struct {
    dt_resnet_model model;
    int num_classes;
    float width;              /* channel-width multiplier of the stem and of every stage's planes (1 =
                                 torchvision's: 64, then 64, 128, 256, 512 planes); mobilenet_v2:
                                 torchvision's width_mult (channels rounded to multiples of 8) */
    unsigned deform_stages;   /* bit s-1 set: stage s (1..4, layer1..layer4) has deformable 3x3 convs */
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
    dt_conv_algo conv_algo;   /* the plain convs' engine in bf16 NHWC (dt_conv2d_algo; default auto) */
    float dropout;            /* mobilenet_v2: the classifier's dropout probability, [0, 1) (default 0;
                                 torchvision's 0.2); the ResNets: 0 */
    uint64_t dropout_seed;    /* the dropout masks' seed (dt_dropout; the trainer: its seed= and rank) */
} dt_resnet_cfg;

/* ResNet-18, fp32, NCHW, all-plain unless deform_stages is set. */
dt_resnet_cfg dt_resnet_cfg_default(int num_classes);

/* A conv and the batch norm after it. The conv is a plain weight, or - a 3x3 conv of a
 * deformable stage - a deformable layer. */
typedef struct {
    int deform;
    int64_t groups;      /* 1; a ResNeXt 3x3's 32; a depthwise conv's cin */
    dt_tensor *w;        /* plain: [cout, cin / groups, k, k] f32 master in the model's layout */
    dt_deform_conv dc;   /* deformable */
    dt_conv_geom g;      /* k x k, the stride, padding k / 2 */
    dt_batchnorm bn;
} dt_resnet_conv;

/* A block: relu(bn_last(conv_last(... relu(bn1(conv1(x))) ...)) + skip), skip = x or
 * down.bn(down.conv(x)). BasicBlock: convs 3x3, 3x3; Bottleneck: 1x1, 3x3, 1x1. */
typedef struct {
    dt_block_kind kind;
    int n_convs;              /* 2 (BasicBlock) or 3 (Bottleneck) */
    dt_resnet_conv convs[3];  /* convZ / bnZ, Z = 1..n_convs (inverted: conv.*, see dt_resnet.h's top) */
    int residual;             /* inverted: out = x + project(...) */
    int has_down;
    dt_resnet_conv down;      /* downsample.0 (1x1, the stride) and downsample.1 (its BN) */
    int stride;
} dt_resnet_block;

typedef struct {
    dt_resnet_cfg cfg;
    dt_params params;
    dt_resnet_conv stem;     /* conv1 [64w, 3, 7, 7] / bn1; mobilenet_v2: features.0.0 [32w, 3, 3, 3] / features.0.1 */
    int has_head;
    dt_resnet_conv head;     /* mobilenet_v2: features.18.0 (1x1 to 1280) / features.18.1 */
    dt_resnet_block *blocks; /* [n_blocks]: layer1.0, layer1.1, ..., layer4.(last) */
    int n_blocks;
    dt_tensor *fc_w, *fc_b;  /* [classes, features], [classes]; features = the last stage's output channels
                                (fc.*; mobilenet_v2: classifier.1.*) */
    dt_dev dev;
    dt_dtype act;           /* the activations' dtype (from cfg.precision) */
    dt_math math;           /* f32 products: strict or TF32 */
    dt_conv_algo conv_algo; /* from cfg.conv_algo */
    dt_tensor *drop_counter; /* cfg.dropout > 0: the dropout's device-side step counter (dt_dropout) */
    /* lists sized by the model: every batch norm in order, the state that is not a parameter
     * (each batch norm's running mean and variance, in that order) and the deformable layers */
    dt_batchnorm **bns;
    int n_bns;
    dt_tensor **buffers;
    int n_buffers;
    dt_deform_conv **deform;
    int n_deform;
} dt_resnet;

/* Builds cfg->model on dev (torchvision's initialization: Kaiming normal fan-out convs, BN 1 / 0,
 * PyTorch's default Linear; offset convs zero or N(0, offset_init_std)). */
void dt_resnet_init(dt_resnet *m, const dt_resnet_cfg *cfg, dt_dev dev);
/* x [N, 3, S, S], normalized, in any dtype and layout -> logits [N, classes] in the model's
 * activation dtype. Input already in the model's dtype (m->act) and layout (m->cfg.layout) - what
 * the trainer makes of the loader's batch with dt_normalize_images - is used as it is; any other
 * (f32 NCHW from tests and the C API) goes to them in one kernel (dt_convert). A bf16 model first
 * refreshes its weights' working copies (one launch). training: BN batch statistics + running
 * update. */
dt_tensor *dt_resnet_forward(dt_resnet *m, dt_tensor *x, int training);
void dt_resnet_free(dt_resnet *m);

/* The deformable layers, in order (NULL past the end; m->n_deform of them). */
dt_deform_conv *dt_resnet_deform_layer(dt_resnet *m, int i);

/* For a training step captured in a CUDA graph (train/replica.c): 1 when the next forward reads
 * device values on the host (a deformable layer's halo refresh or statistics), so that step must
 * run eagerly; a key of the host-side values the forward's launches depend on besides the
 * shapes (the deformable layers' current halos), which a graph captured under another key does
 * not match; and the host-side bookkeeping of a forward that a graph replay did on the device
 * (the deformable layers' call counts, which schedule their halo refreshes). */
int dt_resnet_forward_reads_back(const dt_resnet *m);
uint64_t dt_resnet_launch_key(const dt_resnet *m);
void dt_resnet_replayed(dt_resnet *m);

/* The stages with deformable 3x3 convs -> bit mask (bit s-1: stage s, layer s); -1 when
 * malformed. "none" | "all" | a list of stages 1..4 like "2,3,4" | the DCNv2 paper's names of
 * the stages, conv2_x..conv5_x = layer1..layer4: "c3-c5" (its setting: layer2..layer4), "c5",
 * "c4-c5", "c2-c5". */
int dt_resnet_parse_stages(const char *s);

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
