/* The ResNets, ResNeXt-50 32x4d and MobileNetV2 built from the deftc ops, from one description
 * per model (dt_resnet.h). Initialization follows torchvision: Kaiming normal (fan-out) convs, BN
 * weight 1 / bias 0, PyTorch's default Linear init (zero_init_residual off; MobileNetV2's
 * classifier N(0, 0.01), bias 0); offset convs of deformable layers zero (or N(0, offset_init_std)). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dt_common.h"
#include "ops/init/dt_init.h"
#include "ops/dt_ops.h"
#include "models/dt_resnet.h"

/* torchvision.models.resnet{18,34,50,101}: block counts [2,2,2,2], [3,4,6,3], [3,4,6,3],
 * [3,4,23,3]; planes 64, 128, 256, 512; every stage but the first halves the resolution. */
#define STAGES(kind, b1, b2, b3, b4) {{kind, b1, 64, 1}, {kind, b2, 128, 2}, {kind, b3, 256, 2}, {kind, b4, 512, 2}}
/* torchvision.models.resnext50_32x4d: resnet50's stages, groups 32, width_per_group 4 (a
 * Bottleneck's 3x3 on 2 x planes channels: 128 in layer1). mobilenet_v2: no stages. */
static const dt_resnet_arch ARCHS[DT_RESNET_MODELS] = {
    [DT_RESNET18] = {"resnet18", STAGES(DT_BLOCK_BASIC, 2, 2, 2, 2), 1, 64, 0},
    [DT_RESNET34] = {"resnet34", STAGES(DT_BLOCK_BASIC, 3, 4, 6, 3), 1, 64, 0},
    [DT_RESNET50] = {"resnet50", STAGES(DT_BLOCK_BOTTLENECK, 3, 4, 6, 3), 1, 64, 0},
    [DT_RESNET101] = {"resnet101", STAGES(DT_BLOCK_BOTTLENECK, 3, 4, 23, 3), 1, 64, 0},
    [DT_RESNEXT50_32X4D] = {"resnext50_32x4d", STAGES(DT_BLOCK_BOTTLENECK, 3, 4, 6, 3), 32, 4, 0},
    [DT_MOBILENET_V2] = {"mobilenet_v2", {{DT_BLOCK_INVERTED, 0, 0, 0}}, 1, 64, 1},
};

/* torchvision.models.mobilenetv2's inverted_residual_setting */
static const dt_mobilenet_row MOBILENET_V2[7] = {{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2},
                                                 {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};

const dt_mobilenet_row *dt_mobilenet_v2_setting(int *rows) {
    *rows = 7;
    return MOBILENET_V2;
}

int64_t dt_mobilenet_divisible(double v) {
    int64_t n = (int64_t)(v + 4) / 8 * 8;
    if (n < 8) n = 8;
    if ((double)n < 0.9 * v) n += 8;
    return n;
}

const char *dt_resnet_classifier_name(dt_resnet_model model) {
    return dt_resnet_arch_of(model)->inverted ? "classifier.1" : "fc";
}

const char *dt_resnet_deform_refusal(dt_resnet_model model) {
    if (model == DT_RESNEXT50_32X4D)
        return "resnext50_32x4d has no deformable placement: its 3x3 convs are grouped (32 groups) and deftc's "
               "deformable layer has no groups; use deform=none";
    if (model == DT_MOBILENET_V2)
        return "mobilenet_v2 has no deformable placement: its 3x3 convs are depthwise and deftc's deformable layer "
               "has no groups; use deform=none";
    return NULL;
}

const dt_resnet_arch *dt_resnet_arch_of(dt_resnet_model model) {
    if ((unsigned)model >= DT_RESNET_MODELS) dt_fatal("resnet: no model %d", (int)model);
    return &ARCHS[model];
}

const char *dt_resnet_model_name(dt_resnet_model model) { return dt_resnet_arch_of(model)->name; }

int dt_resnet_model_parse(const char *s, dt_resnet_model *model, dt_err *err) {
    char names[160] = "";
    for (int i = 0, o = 0; i < DT_RESNET_MODELS; i++) {
        if (!strcmp(s, ARCHS[i].name)) {
            *model = (dt_resnet_model)i;
            return 0;
        }
        o += snprintf(names + o, sizeof names - (size_t)o, "%s%s", i ? ", " : "", ARCHS[i].name);
    }
    return dt_errf(err, "unknown model '%s': deftc builds %s", s, names);
}

float dt_resnet_default_dropout(dt_resnet_model model) { return model == DT_MOBILENET_V2 ? 0.2f : 0.0f; }

const char *dt_resnet_dropout_refusal(dt_resnet_model model, float p) {
    static __thread char why[160];
    if (!(p >= 0.0f && p < 1.0f)) {
        snprintf(why, sizeof why, "dropout %g must be a probability in [0, 1)", p);
        return why;
    }
    if (p > 0.0f && model != DT_MOBILENET_V2) {
        snprintf(why, sizeof why, "dropout %g: %s has no dropout layer (only mobilenet_v2's classifier has one)", p,
                 dt_resnet_model_name(model));
        return why;
    }
    return NULL;
}

dt_resnet_cfg dt_resnet_cfg_default(int num_classes) {
    dt_resnet_cfg c;
    memset(&c, 0, sizeof c);
    c.model = DT_RESNET18;
    c.num_classes = num_classes;
    c.width = 1.0f;
    c.deform_version = 1;
    c.offset_groups = 1;
    c.deform_mode = DT_DEFORM_DEFT;
    c.offset_lr_mult = 0.1f;
    c.knobs = dt_deform_knobs_default();
    c.precision = DT_PREC_FP32;
    c.layout = DT_NCHW;
    c.conv_algo = DT_CONV_ALGO_DEFAULT;
    return c;
}

/* One item of a deform= list: a stage 1..4, "cN" or "cA-cB" (conv{N}_x = stage N-1, N = 2..5)
 * -> its bits; 0 when malformed. */
static unsigned stage_item(const char *s, size_t n) {
    if (n == 1 && s[0] >= '1' && s[0] <= '4') return 1u << (s[0] - '1');
    int a, b;
    if (n == 2 && s[0] == 'c') a = b = s[1] - '0';
    else if (n == 5 && s[0] == 'c' && s[2] == '-' && s[3] == 'c') a = s[1] - '0', b = s[4] - '0';
    else return 0;
    if (a < 2 || b > 5 || a > b) return 0;
    unsigned mask = 0;
    for (int c = a; c <= b; c++) mask |= 1u << (c - 2);
    return mask;
}

int dt_resnet_parse_stages(const char *s) {
    if (!strcmp(s, "none")) return 0;
    if (!strcmp(s, "all")) return 15;
    unsigned mask = 0;
    for (const char *p = s;;) {
        size_t n = strcspn(p, ",");
        unsigned bits = stage_item(p, n);
        if (!bits) return -1;
        mask |= bits;
        if (!p[n]) break;
        p += n + 1;
    }
    return (int)mask;
}

/* A conv weight in the model's layout, with a bf16 working copy in a bf16 model. */
static dt_tensor *conv_weight(dt_resnet *m, const char *name, int64_t cout, int64_t cin, int k) {
    int64_t s[4] = {cout, cin, k, k};
    dt_tensor *w = dt_param_new(&m->params, name, 4, s, m->dev, m->cfg.layout, 1);
    dt_init_kaiming_normal_fanout(w);
    if (m->act == DT_BF16) dt_param_make_work(&m->params, w);
    return w;
}

/* The operand a product of the model takes for weight w: its working copy in a bf16 model. */
static dt_tensor *operand(const dt_resnet *m, dt_tensor *w) { return m->act == DT_BF16 ? dt_param_work(w) : w; }

/* A k x k conv named `conv` (its parameter conv.weight, or a deformable layer of that name) in
 * `groups` groups and its batch norm named `bn`. */
static void conv_init(dt_resnet *m, dt_resnet_conv *c, const char *conv, const char *bn, int64_t cin, int64_t cout,
                      int k, int stride, int deform, int64_t groups) {
    memset(c, 0, sizeof *c);
    c->g = dt_geom(k, stride, k / 2, 1);
    c->deform = deform;
    c->groups = groups;
    char n[96];
    if (deform && groups != 1) dt_fatal("%s: a deformable conv has no groups (%lld)", conv, (long long)groups);
    if (!c->deform) {
        snprintf(n, sizeof n, "%s.weight", conv);
        c->w = conv_weight(m, n, cout, cin / groups, k);
    } else {
        dt_deform_conv_init(&c->dc, &m->params, conv, cin, cout, c->g, m->cfg.offset_groups, m->cfg.deform_version, 0,
                            m->cfg.offset_init_std, m->dev, m->cfg.layout);
        if (m->act == DT_BF16) dt_param_make_work(&m->params, c->dc.weight);
        c->dc.mode = m->cfg.deform_mode;
        c->dc.math = m->math;
        dt_param_of(c->dc.off_weight)->lr_mult = dt_param_of(c->dc.off_bias)->lr_mult = m->cfg.offset_lr_mult;
        c->dc.knobs = m->cfg.knobs;
    }
    dt_batchnorm_init(&c->bn, &m->params, bn, cout, m->dev);
}

/* act(bn(conv(x)) + skip) of conv c and its batch norm (skip NULL, or the block's join with
 * relu 1): a plain conv with its batch norm's statistics in its epilogue where it can
 * (dt_conv_bn), a deformable one followed by its batch norm */
static dt_tensor *conv_bn_forward(const dt_resnet *m, dt_resnet_conv *c, dt_tensor *x, dt_tensor *skip, int training,
                                  int relu) {
    if (!c->deform && c->groups == 1)
        return dt_conv_bn(x, operand(m, c->w), c->g, m->math, m->conv_algo, &c->bn, skip, training, relu);
    dt_tensor *h = c->deform ? dt_deform_conv_forward(&c->dc, x)
                             : dt_conv2d_grouped_algo(x, operand(m, c->w), NULL, c->g, c->groups, m->math, m->conv_algo);
    return skip ? dt_batchnorm2d_add_relu(h, skip, &c->bn, training) : dt_batchnorm2d(h, &c->bn, training, relu);
}

/* Conv i (1-based) of block b of stage s (0-based), layer{s+1}.{b}.conv{i} with bn{i}; a 3x3
 * conv of a deformable stage is deformable, a 1x1 never. */
static void block_conv(dt_resnet *m, dt_resnet_block *bl, int s, int b, int i, int64_t cin, int64_t cout, int k,
                       int stride, int64_t groups) {
    char conv[48], bn[48];
    snprintf(conv, sizeof conv, "layer%d.%d.conv%d", s + 1, b, i);
    snprintf(bn, sizeof bn, "layer%d.%d.bn%d", s + 1, b, i);
    conv_init(m, &bl->convs[i - 1], conv, bn, cin, cout, k, stride, k == 3 && ((m->cfg.deform_stages >> s) & 1), groups);
}

/* Block b of stage s (0-based) on cin input channels; returns its output channels. */
static int64_t block_init(dt_resnet *m, dt_resnet_block *bl, int s, int b, int64_t cin) {
    const char *name = dt_resnet_model_name(m->cfg.model);
    const dt_resnet_arch *a = dt_resnet_arch_of(m->cfg.model);
    const dt_resnet_stage *st = &a->stages[s];
    int64_t planes = (int64_t)(st->planes * m->cfg.width + 0.5f);
    if (planes < 1) dt_fatal("%s: width %g leaves stage %d without channels", name, m->cfg.width, s + 1);
    /* torchvision's Bottleneck: width = int(planes * (base_width / 64)) * groups */
    int64_t mid = planes * a->width_per_group / 64 * a->groups;
    if (mid < 1) dt_fatal("%s: width %g leaves stage %d's grouped convs without channels", name, m->cfg.width, s + 1);
    int stride = b == 0 ? st->stride : 1;
    int64_t out = st->kind == DT_BLOCK_BOTTLENECK ? 4 * planes : planes;
    bl->kind = st->kind;
    bl->stride = stride;
    if (st->kind == DT_BLOCK_BOTTLENECK) { /* v1.5: the stride on the 3x3 conv */
        bl->n_convs = 3;
        block_conv(m, bl, s, b, 1, cin, mid, 1, 1, 1);
        block_conv(m, bl, s, b, 2, mid, mid, 3, stride, a->groups);
        block_conv(m, bl, s, b, 3, mid, out, 1, 1, 1);
    } else {
        bl->n_convs = 2;
        block_conv(m, bl, s, b, 1, cin, planes, 3, stride, 1);
        block_conv(m, bl, s, b, 2, planes, planes, 3, 1, 1);
    }
    if (stride != 1 || cin != out) {
        char conv[48], bn[48];
        bl->has_down = 1;
        snprintf(conv, sizeof conv, "layer%d.%d.downsample.0", s + 1, b);
        snprintf(bn, sizeof bn, "layer%d.%d.downsample.1", s + 1, b);
        conv_init(m, &bl->down, conv, bn, cin, out, 1, stride, 0, 1);
    }
    return out;
}

/* MobileNetV2's inverted residual features.{f} on cin channels to cout (torchvision's
 * InvertedResidual): hidden = cin x t; with t != 1 conv.0 = expand 1x1 (conv.0.0 / conv.0.1),
 * then the depthwise 3x3 (conv.{e}.0 / conv.{e}.1), the project 1x1 conv.{e+1} and its BN
 * conv.{e+2}, e = 0 or 1. */
static void inverted_init(dt_resnet *m, dt_resnet_block *bl, int f, int64_t cin, int64_t cout, int stride, int t) {
    char conv[48], bn[48];
    int64_t hidden = cin * t;
    int e = 0;
    bl->kind = DT_BLOCK_INVERTED;
    bl->stride = stride;
    bl->residual = stride == 1 && cin == cout;
    if (t != 1) {
        snprintf(conv, sizeof conv, "features.%d.conv.0.0", f);
        snprintf(bn, sizeof bn, "features.%d.conv.0.1", f);
        conv_init(m, &bl->convs[bl->n_convs++], conv, bn, cin, hidden, 1, 1, 0, 1);
        e = 1;
    }
    snprintf(conv, sizeof conv, "features.%d.conv.%d.0", f, e);
    snprintf(bn, sizeof bn, "features.%d.conv.%d.1", f, e);
    conv_init(m, &bl->convs[bl->n_convs++], conv, bn, hidden, hidden, 3, stride, 0, hidden);
    snprintf(conv, sizeof conv, "features.%d.conv.%d", f, e + 1);
    snprintf(bn, sizeof bn, "features.%d.conv.%d", f, e + 2);
    conv_init(m, &bl->convs[bl->n_convs++], conv, bn, hidden, cout, 1, 1, 0, 1);
}

/* torchvision.models.mobilenet_v2(width_mult = cfg.width): features.0 (3x3/2 conv + BN + ReLU6),
 * the 17 inverted residuals features.1..17, features.18 (1x1 to the last channel + BN + ReLU6);
 * returns the last channel count. */
static int64_t mobilenet_init(dt_resnet *m) {
    int rows;
    const dt_mobilenet_row *r = dt_mobilenet_v2_setting(&rows);
    int64_t cin = dt_mobilenet_divisible(32.0 * m->cfg.width);
    int64_t last = dt_mobilenet_divisible(1280.0 * (m->cfg.width > 1.0f ? m->cfg.width : 1.0f));
    conv_init(m, &m->stem, "features.0.0", "features.0.1", 3, cin, 3, 2, 0, 1);
    for (int i = 0; i < rows; i++) m->n_blocks += r[i].n;
    m->blocks = dt_xcalloc((size_t)m->n_blocks, sizeof *m->blocks);
    for (int i = 0, k = 0; i < rows; i++) {
        int64_t cout = dt_mobilenet_divisible(r[i].c * (double)m->cfg.width);
        for (int b = 0; b < r[i].n; b++, k++) {
            inverted_init(m, &m->blocks[k], k + 1, cin, cout, b == 0 ? r[i].s : 1, r[i].t);
            cin = cout;
        }
    }
    char conv[32], bn[32];
    snprintf(conv, sizeof conv, "features.%d.0", m->n_blocks + 1);
    snprintf(bn, sizeof bn, "features.%d.1", m->n_blocks + 1);
    m->has_head = 1;
    conv_init(m, &m->head, conv, bn, cin, last, 1, 1, 0, 1);
    return last;
}

/* The model's lists: batch norms, their buffers, deformable layers, in forward order. */
static void make_lists(dt_resnet *m) {
    int max = 2 + 4 * m->n_blocks; /* the stem's, at most 3 convs + a downsample a block, the head's */
    m->bns = dt_xmalloc((size_t)max * sizeof *m->bns);
    m->deform = dt_xmalloc((size_t)max * sizeof *m->deform);
    m->bns[m->n_bns++] = &m->stem.bn;
    for (int b = 0; b < m->n_blocks; b++) {
        dt_resnet_block *bl = &m->blocks[b];
        for (int i = 0; i < bl->n_convs; i++) {
            m->bns[m->n_bns++] = &bl->convs[i].bn;
            if (bl->convs[i].deform) m->deform[m->n_deform++] = &bl->convs[i].dc;
        }
        if (bl->has_down) m->bns[m->n_bns++] = &bl->down.bn;
    }
    if (m->has_head) m->bns[m->n_bns++] = &m->head.bn;
    m->buffers = dt_xmalloc((size_t)(2 * m->n_bns) * sizeof *m->buffers);
    for (int i = 0; i < m->n_bns; i++) {
        m->buffers[m->n_buffers++] = m->bns[i]->running_mean;
        m->buffers[m->n_buffers++] = m->bns[i]->running_var;
    }
}

void dt_resnet_init(dt_resnet *m, const dt_resnet_cfg *cfg, dt_dev dev) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->dev = dev;
    m->act = dt_precision_act_dtype(cfg->precision);
    m->math = dt_precision_math(cfg->precision);
    m->conv_algo = cfg->conv_algo;
    const dt_resnet_arch *a = dt_resnet_arch_of(cfg->model);
    if (cfg->num_classes < 1) dt_fatal("%s: num_classes %d must be positive", a->name, cfg->num_classes);
    if (m->act == DT_BF16 && cfg->layout != DT_NHWC)
        dt_fatal("%s: the bf16 precision runs channels last (layout nhwc), not %s", a->name, dt_layout_name(cfg->layout));
    if (cfg->deform_stages && cfg->deform_mode == DT_DEFORM_UNFUSED && (m->act != DT_F32 || cfg->layout != DT_NCHW))
        dt_fatal("%s: the unfused deformable baseline is f32 NCHW (precision fp32 or tf32, layout nchw)", a->name);
    if (cfg->deform_stages && dt_resnet_deform_refusal(cfg->model)) dt_fatal("%s", dt_resnet_deform_refusal(cfg->model));
    if (!(cfg->width > 0)) dt_fatal("%s: width %g must be positive", a->name, cfg->width);
    if (dt_resnet_dropout_refusal(cfg->model, cfg->dropout)) dt_fatal("%s", dt_resnet_dropout_refusal(cfg->model, cfg->dropout));
    if (cfg->dropout > 0.0f) m->drop_counter = dt_dropout_counter_new(dev);
    int64_t cin;
    if (a->inverted) {
        cin = mobilenet_init(m);
    } else {
        int64_t stem = (int64_t)(64 * cfg->width + 0.5f);
        if (stem < 1) dt_fatal("%s: width %g leaves the stem without channels", a->name, cfg->width);
        conv_init(m, &m->stem, "conv1", "bn1", 3, stem, 7, 2, 0, 1);
        for (int s = 0; s < 4; s++) m->n_blocks += a->stages[s].blocks;
        m->blocks = dt_xcalloc((size_t)m->n_blocks, sizeof *m->blocks);
        cin = stem;
        for (int s = 0, k = 0; s < 4; s++)
            for (int b = 0; b < a->stages[s].blocks; b++) cin = block_init(m, &m->blocks[k++], s, b, cin);
    }
    int64_t sw[2] = {cfg->num_classes, cin}, sb[1] = {cfg->num_classes};
    char fw[32], fb[32];
    snprintf(fw, sizeof fw, "%s.weight", dt_resnet_classifier_name(cfg->model));
    snprintf(fb, sizeof fb, "%s.bias", dt_resnet_classifier_name(cfg->model));
    m->fc_w = dt_param_new(&m->params, fw, 2, sw, dev, DT_NCHW, 1);
    m->fc_b = dt_param_new(&m->params, fb, 1, sb, dev, DT_NCHW, 0);
    if (a->inverted) { /* torchvision's MobileNetV2: N(0, 0.01), bias 0 */
        dt_init_normal(m->fc_w, 0.0f, 0.01f);
        dt_tensor_fill(m->fc_b, 0.0f);
    } else {
        dt_init_linear_default(m->fc_w, m->fc_b);
    }
    if (m->act == DT_BF16) dt_param_make_work(&m->params, m->fc_w);
    make_lists(m);
}

/* The block's convs, each with its batch norm and ReLU; the last batch norm, the residual add
 * and the ReLU are one op (one pass forward, one backward). */
static dt_tensor *block_forward(const dt_resnet *m, dt_resnet_block *b, dt_tensor *x, int training) {
    dt_tensor *h = x;
    int last = b->n_convs - 1;
    for (int i = 0; i < last; i++) h = conv_bn_forward(m, &b->convs[i], h, NULL, training, 1);
    dt_tensor *id = b->has_down ? conv_bn_forward(m, &b->down, x, NULL, training, 0) : x;
    return conv_bn_forward(m, &b->convs[last], h, id, training, 1);
}

/* conv + BN + ReLU6 (torchvision's Conv2dNormActivation of MobileNetV2) */
static dt_tensor *conv_bn_relu6(const dt_resnet *m, dt_resnet_conv *c, dt_tensor *x, int training) {
    return dt_relu6(conv_bn_forward(m, c, x, NULL, training, 0));
}

/* An inverted residual: its convs with BN + ReLU6 but the last (BN alone: linear), + x. */
static dt_tensor *inverted_forward(const dt_resnet *m, dt_resnet_block *b, dt_tensor *x, int training) {
    dt_tensor *h = x;
    for (int i = 0; i < b->n_convs - 1; i++) h = conv_bn_relu6(m, &b->convs[i], h, training);
    h = conv_bn_forward(m, &b->convs[b->n_convs - 1], h, NULL, training, 0);
    return b->residual ? dt_add(x, h) : h;
}

dt_tensor *dt_resnet_forward(dt_resnet *m, dt_tensor *x, int training) {
    const char *name = dt_resnet_model_name(m->cfg.model);
    dt_require_ndim(name, "input", x, 4);
    if (x->shape[1] != 3) {
        char s[96];
        dt_fatal("%s: input %s must have 3 channels (RGB)", name, dt_shape_str(x, s, sizeof s));
    }
    if (x->shape[2] < 32 || x->shape[3] < 32) {
        char s[96];
        dt_fatal("%s: input %s is too small (at least 32x32: the network downsamples 32x)", name, dt_shape_str(x, s, sizeof s));
    }
    if (m->act == DT_BF16) dt_params_refresh_work(&m->params);
    dt_tensor *h = dt_convert(x, m->act, m->cfg.layout); /* x itself when it already is */
    if (dt_resnet_arch_of(m->cfg.model)->inverted) {
        h = conv_bn_relu6(m, &m->stem, h, training);
        for (int i = 0; i < m->n_blocks; i++) h = inverted_forward(m, &m->blocks[i], h, training);
        h = conv_bn_relu6(m, &m->head, h, training);
        /* classifier.0: Dropout(p), the identity in eval mode and at p = 0 */
        h = dt_dropout(dt_global_avgpool(h), m->cfg.dropout, m->cfg.dropout_seed, m->drop_counter, training);
        return dt_linear(h, operand(m, m->fc_w), m->fc_b, m->math);
    }
    h = conv_bn_forward(m, &m->stem, h, NULL, training, 1);
    h = dt_maxpool2d(h, 3, 2, 1);
    for (int i = 0; i < m->n_blocks; i++) h = block_forward(m, &m->blocks[i], h, training);
    return dt_linear(dt_global_avgpool(h), operand(m, m->fc_w), m->fc_b, m->math);
}

dt_deform_conv *dt_resnet_deform_layer(dt_resnet *m, int i) { return i >= 0 && i < m->n_deform ? m->deform[i] : NULL; }

int dt_resnet_forward_reads_back(const dt_resnet *m) {
    for (int i = 0; i < m->n_deform; i++)
        if (dt_deform_conv_reads_back(m->deform[i])) return 1;
    return 0;
}

uint64_t dt_resnet_launch_key(const dt_resnet *m) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a over the halos, in layer order */
    for (int i = 0; i < m->n_deform; i++) h = (h ^ (uint64_t)(uint32_t)m->deform[i]->cur_halo) * 1099511628211ULL;
    return h;
}

void dt_resnet_replayed(dt_resnet *m) {
    for (int i = 0; i < m->n_deform; i++) m->deform[i]->calls++;
}

void dt_resnet_free(dt_resnet *m) {
    dt_tensor_free(m->drop_counter);
    m->drop_counter = NULL;
    for (int i = 0; i < m->n_bns; i++) dt_batchnorm_free(m->bns[i]);
    free(m->bns);
    free(m->buffers);
    free(m->deform);
    free(m->blocks);
    dt_params_free(&m->params);
}
