/* The ResNets built from the deftc ops, from one description per model (dt_resnet.h).
 * Initialization follows torchvision: Kaiming normal (fan-out) convs, BN weight 1 / bias 0,
 * PyTorch's default Linear init (zero_init_residual off); offset convs of deformable layers
 * zero (or N(0, offset_init_std)). */
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
static const dt_resnet_arch ARCHS[DT_RESNET_MODELS] = {
    [DT_RESNET18] = {"resnet18", STAGES(DT_BLOCK_BASIC, 2, 2, 2, 2)},
    [DT_RESNET34] = {"resnet34", STAGES(DT_BLOCK_BASIC, 3, 4, 6, 3)},
    [DT_RESNET50] = {"resnet50", STAGES(DT_BLOCK_BOTTLENECK, 3, 4, 6, 3)},
    [DT_RESNET101] = {"resnet101", STAGES(DT_BLOCK_BOTTLENECK, 3, 4, 23, 3)},
};

const dt_resnet_arch *dt_resnet_arch_of(dt_resnet_model model) {
    if ((unsigned)model >= DT_RESNET_MODELS) dt_fatal("resnet: no model %d", (int)model);
    return &ARCHS[model];
}

const char *dt_resnet_model_name(dt_resnet_model model) { return dt_resnet_arch_of(model)->name; }

int dt_resnet_model_parse(const char *s, dt_resnet_model *model, dt_err *err) {
    char names[96] = "";
    for (int i = 0, o = 0; i < DT_RESNET_MODELS; i++) {
        if (!strcmp(s, ARCHS[i].name)) {
            *model = (dt_resnet_model)i;
            return 0;
        }
        o += snprintf(names + o, sizeof names - (size_t)o, "%s%s", i ? ", " : "", ARCHS[i].name);
    }
    return dt_errf(err, "unknown model '%s': deftc builds %s", s, names);
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

/* A k x k conv named `conv` (its parameter conv.weight, or a deformable layer of that name)
 * and its batch norm named `bn`. */
static void conv_init(dt_resnet *m, dt_resnet_conv *c, const char *conv, const char *bn, int64_t cin, int64_t cout,
                      int k, int stride, int deform) {
    memset(c, 0, sizeof *c);
    c->g = dt_geom(k, stride, k / 2, 1);
    c->deform = deform;
    char n[96];
    if (!c->deform) {
        snprintf(n, sizeof n, "%s.weight", conv);
        c->w = conv_weight(m, n, cout, cin, k);
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
    if (!c->deform) return dt_conv_bn(x, operand(m, c->w), c->g, m->math, m->conv_algo, &c->bn, skip, training, relu);
    dt_tensor *h = dt_deform_conv_forward(&c->dc, x);
    return skip ? dt_batchnorm2d_add_relu(h, skip, &c->bn, training) : dt_batchnorm2d(h, &c->bn, training, relu);
}

/* Conv i (1-based) of block b of stage s (0-based), layer{s+1}.{b}.conv{i} with bn{i}; a 3x3
 * conv of a deformable stage is deformable, a 1x1 never. */
static void block_conv(dt_resnet *m, dt_resnet_block *bl, int s, int b, int i, int64_t cin, int64_t cout, int k,
                       int stride) {
    char conv[48], bn[48];
    snprintf(conv, sizeof conv, "layer%d.%d.conv%d", s + 1, b, i);
    snprintf(bn, sizeof bn, "layer%d.%d.bn%d", s + 1, b, i);
    conv_init(m, &bl->convs[i - 1], conv, bn, cin, cout, k, stride, k == 3 && ((m->cfg.deform_stages >> s) & 1));
}

/* Block b of stage s (0-based) on cin input channels; returns its output channels. */
static int64_t block_init(dt_resnet *m, dt_resnet_block *bl, int s, int b, int64_t cin) {
    const char *name = dt_resnet_model_name(m->cfg.model);
    const dt_resnet_stage *st = &dt_resnet_arch_of(m->cfg.model)->stages[s];
    int64_t planes = (int64_t)(st->planes * m->cfg.width + 0.5f);
    if (planes < 1) dt_fatal("%s: width %g leaves stage %d without channels", name, m->cfg.width, s + 1);
    int stride = b == 0 ? st->stride : 1;
    int64_t out = st->kind == DT_BLOCK_BOTTLENECK ? 4 * planes : planes;
    bl->kind = st->kind;
    bl->stride = stride;
    if (st->kind == DT_BLOCK_BOTTLENECK) { /* v1.5: the stride on the 3x3 conv */
        bl->n_convs = 3;
        block_conv(m, bl, s, b, 1, cin, planes, 1, 1);
        block_conv(m, bl, s, b, 2, planes, planes, 3, stride);
        block_conv(m, bl, s, b, 3, planes, out, 1, 1);
    } else {
        bl->n_convs = 2;
        block_conv(m, bl, s, b, 1, cin, planes, 3, stride);
        block_conv(m, bl, s, b, 2, planes, planes, 3, 1);
    }
    if (stride != 1 || cin != out) {
        char conv[48], bn[48];
        bl->has_down = 1;
        snprintf(conv, sizeof conv, "layer%d.%d.downsample.0", s + 1, b);
        snprintf(bn, sizeof bn, "layer%d.%d.downsample.1", s + 1, b);
        conv_init(m, &bl->down, conv, bn, cin, out, 1, stride, 0);
    }
    return out;
}

/* The model's lists: batch norms, their buffers, deformable layers, in forward order. */
static void make_lists(dt_resnet *m) {
    int max = 1 + 4 * m->n_blocks; /* the stem's, and at most 3 convs + a downsample a block */
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
    int64_t stem = (int64_t)(64 * cfg->width + 0.5f);
    if (stem < 1) dt_fatal("%s: width %g leaves the stem without channels", a->name, cfg->width);
    conv_init(m, &m->stem, "conv1", "bn1", 3, stem, 7, 2, 0);
    for (int s = 0; s < 4; s++) m->n_blocks += a->stages[s].blocks;
    m->blocks = dt_xcalloc((size_t)m->n_blocks, sizeof *m->blocks);
    int64_t cin = stem;
    for (int s = 0, k = 0; s < 4; s++)
        for (int b = 0; b < a->stages[s].blocks; b++) cin = block_init(m, &m->blocks[k++], s, b, cin);
    int64_t sw[2] = {cfg->num_classes, cin}, sb[1] = {cfg->num_classes};
    m->fc_w = dt_param_new(&m->params, "fc.weight", 2, sw, dev, DT_NCHW, 1);
    m->fc_b = dt_param_new(&m->params, "fc.bias", 1, sb, dev, DT_NCHW, 0);
    dt_init_linear_default(m->fc_w, m->fc_b);
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
    for (int i = 0; i < m->n_bns; i++) dt_batchnorm_free(m->bns[i]);
    free(m->bns);
    free(m->buffers);
    free(m->deform);
    free(m->blocks);
    dt_params_free(&m->params);
}
