/* ResNet-18 built from the deftc ops. Initialization follows torchvision: Kaiming normal
 * (fan-out) convs, BN weight 1 / bias 0, PyTorch's default Linear init; offset convs of
 * deformable layers zero (or N(0, offset_init_std)). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_common.h"
#include "dt_init.h"
#include "dt_ops.h"
#include "dt_resnet.h"

dt_resnet_cfg dt_resnet_cfg_default(int num_classes) {
    dt_resnet_cfg c;
    memset(&c, 0, sizeof c);
    c.num_classes = num_classes;
    c.width = 1.0f;
    c.deform_version = 1;
    c.offset_groups = 1;
    c.deform_mode = DT_DEFORM_DEFT;
    c.offset_lr_mult = 0.1f;
    c.knobs = dt_deform_knobs_default();
    c.precision = DT_PREC_FP32;
    c.layout = DT_NCHW;
    return c;
}

int dt_resnet_parse_stages(const char *s) {
    if (!strcmp(s, "none")) return 0;
    if (!strcmp(s, "all")) return 15;
    int mask = 0;
    for (const char *p = s; *p; p++) {
        if (*p >= '1' && *p <= '4') mask |= 1 << (*p - '1');
        else if (*p != ',' && *p != ' ') return -1;
    }
    return mask ? mask : -1;
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

static void conv3_init(dt_resnet *m, dt_conv3 *c, const char *name, int64_t cin, int64_t cout, int stride, int deform) {
    memset(c, 0, sizeof *c);
    c->g = dt_geom(3, stride, 1, 1);
    c->deform = deform;
    if (!deform) {
        char n[96];
        snprintf(n, sizeof n, "%s.weight", name);
        c->w = conv_weight(m, n, cout, cin, 3);
        return;
    }
    dt_deform_conv_init(&c->dc, &m->params, name, cin, cout, c->g, m->cfg.offset_groups, m->cfg.deform_version, 0,
                        m->cfg.offset_init_std, m->dev, m->cfg.layout);
    if (m->act == DT_BF16) dt_param_make_work(&m->params, c->dc.weight);
    c->dc.mode = m->cfg.deform_mode;
    c->dc.math = m->math;
    dt_param_of(c->dc.off_weight)->lr_mult = dt_param_of(c->dc.off_bias)->lr_mult = m->cfg.offset_lr_mult;
    c->dc.knobs = m->cfg.knobs;
}

static dt_tensor *conv3_forward(const dt_resnet *m, dt_conv3 *c, dt_tensor *x) {
    return c->deform ? dt_deform_conv_forward(&c->dc, x) : dt_conv2d(x, operand(m, c->w), NULL, c->g, m->math);
}

void dt_resnet18_init(dt_resnet *m, const dt_resnet_cfg *cfg, dt_dev dev) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->dev = dev;
    m->act = dt_precision_act_dtype(cfg->precision);
    m->math = dt_precision_math(cfg->precision);
    if (cfg->num_classes < 1) dt_fatal("resnet18: num_classes %d must be positive", cfg->num_classes);
    if (m->act == DT_BF16 && cfg->layout != DT_NHWC)
        dt_fatal("resnet18: the bf16 precision runs channels last (layout nhwc), not %s", dt_layout_name(cfg->layout));
    if (cfg->deform_stages && cfg->deform_mode == DT_DEFORM_UNFUSED && (m->act != DT_F32 || cfg->layout != DT_NCHW))
        dt_fatal("resnet18: the unfused deformable baseline is f32 NCHW (precision fp32 or tf32, layout nchw)");
    int widths[4];
    for (int s = 0; s < 4; s++) {
        widths[s] = (int)(64 * (1 << s) * cfg->width + 0.5f);
        if (widths[s] < 1) dt_fatal("resnet18: width %g leaves stage %d without channels", cfg->width, s + 1);
    }
    m->stem_w = conv_weight(m, "conv1.weight", widths[0], 3, 7);
    dt_batchnorm_init(&m->stem_bn, &m->params, "bn1", widths[0], dev);
    int64_t cin = widths[0];
    for (int s = 0; s < 4; s++)
        for (int b = 0; b < 2; b++) {
            dt_basic_block *bl = &m->blocks[s * 2 + b];
            int64_t cout = widths[s];
            int stride = (s > 0 && b == 0) ? 2 : 1;
            int deform = (cfg->deform_stages >> s) & 1;
            char n[64];
            bl->stride = stride;
            snprintf(n, sizeof n, "layer%d.%d.conv1", s + 1, b);
            conv3_init(m, &bl->conv1, n, cin, cout, stride, deform);
            snprintf(n, sizeof n, "layer%d.%d.bn1", s + 1, b);
            dt_batchnorm_init(&bl->bn1, &m->params, n, cout, dev);
            snprintf(n, sizeof n, "layer%d.%d.conv2", s + 1, b);
            conv3_init(m, &bl->conv2, n, cout, cout, 1, deform);
            snprintf(n, sizeof n, "layer%d.%d.bn2", s + 1, b);
            dt_batchnorm_init(&bl->bn2, &m->params, n, cout, dev);
            if (stride != 1 || cin != cout) {
                bl->has_down = 1;
                snprintf(n, sizeof n, "layer%d.%d.downsample.0.weight", s + 1, b);
                bl->down_w = conv_weight(m, n, cout, cin, 1);
                snprintf(n, sizeof n, "layer%d.%d.downsample.1", s + 1, b);
                dt_batchnorm_init(&bl->down_bn, &m->params, n, cout, dev);
            }
            cin = cout;
        }
    int64_t sw[2] = {cfg->num_classes, widths[3]}, sb[1] = {cfg->num_classes};
    m->fc_w = dt_param_new(&m->params, "fc.weight", 2, sw, dev, DT_NCHW, 1);
    m->fc_b = dt_param_new(&m->params, "fc.bias", 1, sb, dev, DT_NCHW, 0);
    dt_init_linear_default(m->fc_w, m->fc_b);
    if (m->act == DT_BF16) dt_param_make_work(&m->params, m->fc_w);
    /* the lists of batch norms and buffers */
    m->bns = dt_xmalloc(3 * 9 * sizeof *m->bns);
    m->bns[m->n_bns++] = &m->stem_bn;
    for (int b = 0; b < 8; b++) {
        m->bns[m->n_bns++] = &m->blocks[b].bn1;
        m->bns[m->n_bns++] = &m->blocks[b].bn2;
        if (m->blocks[b].has_down) m->bns[m->n_bns++] = &m->blocks[b].down_bn;
    }
    m->buffers = dt_xmalloc((size_t)(2 * m->n_bns) * sizeof *m->buffers);
    for (int i = 0; i < m->n_bns; i++) {
        m->buffers[m->n_buffers++] = m->bns[i]->running_mean;
        m->buffers[m->n_buffers++] = m->bns[i]->running_var;
    }
}

/* relu(bn2(conv2(relu(bn1(conv1(x))))) + skip): the second batch norm, the residual add and the
 * ReLU are one op (one pass forward, one backward). */
static dt_tensor *block_forward(const dt_resnet *m, dt_basic_block *b, dt_tensor *x, int training) {
    dt_tensor *out = dt_batchnorm2d(conv3_forward(m, &b->conv1, x), &b->bn1, training, 1);
    dt_tensor *id = x;
    if (b->has_down)
        id = dt_batchnorm2d(dt_conv2d(x, operand(m, b->down_w), NULL, dt_geom(1, b->stride, 0, 1), m->math), &b->down_bn,
                            training, 0);
    return dt_batchnorm2d_add_relu(conv3_forward(m, &b->conv2, out), id, &b->bn2, training);
}

dt_tensor *dt_resnet18_forward(dt_resnet *m, dt_tensor *x, int training) {
    dt_require_ndim("resnet18", "input", x, 4);
    if (x->shape[1] != 3) {
        char s[96];
        dt_fatal("resnet18: input %s must have 3 channels (RGB)", dt_shape_str(x, s, sizeof s));
    }
    if (x->shape[2] < 32 || x->shape[3] < 32) {
        char s[96];
        dt_fatal("resnet18: input %s is too small (at least 32x32: the network downsamples 32x)", dt_shape_str(x, s, sizeof s));
    }
    if (m->act == DT_BF16) dt_params_refresh_work(&m->params);
    dt_tensor *h = dt_convert(x, m->act, m->cfg.layout);
    h = dt_batchnorm2d(dt_conv2d(h, operand(m, m->stem_w), NULL, dt_geom(7, 2, 3, 1), m->math), &m->stem_bn, training, 1);
    h = dt_maxpool2d(h, 3, 2, 1);
    for (int i = 0; i < 8; i++) h = block_forward(m, &m->blocks[i], h, training);
    return dt_linear(dt_global_avgpool(h), operand(m, m->fc_w), m->fc_b, m->math);
}

dt_deform_conv *dt_resnet_deform_layer(dt_resnet *m, int i) {
    int k = 0;
    for (int b = 0; b < 8; b++) {
        dt_conv3 *c[2] = {&m->blocks[b].conv1, &m->blocks[b].conv2};
        for (int j = 0; j < 2; j++)
            if (c[j]->deform && k++ == i) return &c[j]->dc;
    }
    return NULL;
}

void dt_resnet18_free(dt_resnet *m) {
    for (int i = 0; i < m->n_bns; i++) dt_batchnorm_free(m->bns[i]);
    free(m->bns);
    free(m->buffers);
    dt_params_free(&m->params);
}
