/* ResNet-18 built from the deftc ops. Initialization follows torchvision: Kaiming normal
 * (fan-out) convs, BN weight 1 / bias 0, PyTorch's default Linear init; offset convs of
 * deformable layers zero (or N(0, offset_init_std)). */
#include <stdio.h>
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

static dt_tensor *conv_weight(dt_resnet *m, const char *name, int64_t cout, int64_t cin, int k) {
    int64_t s[4] = {cout, cin, k, k};
    dt_tensor *w = dt_param_new(&m->params, name, 4, s, m->dev, 1);
    dt_init_kaiming_normal_fanout(w);
    return w;
}

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
                        m->cfg.offset_init_std, m->dev);
    c->dc.mode = m->cfg.deform_mode;
    c->dc.off_weight->lr_mult = c->dc.off_bias->lr_mult = m->cfg.offset_lr_mult;
    c->dc.knobs = m->cfg.knobs;
}

static dt_tensor *conv3_forward(dt_conv3 *c, dt_tensor *x) {
    return c->deform ? dt_deform_conv_forward(&c->dc, x) : dt_conv2d(x, c->w, NULL, c->g);
}

void dt_resnet18_init(dt_resnet *m, const dt_resnet_cfg *cfg, dt_dev dev) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->dev = dev;
    if (cfg->num_classes < 1) dt_fatal("resnet18: num_classes %d must be positive", cfg->num_classes);
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
    m->fc_w = dt_param_new(&m->params, "fc.weight", 2, sw, dev, 1);
    m->fc_b = dt_param_new(&m->params, "fc.bias", 1, sb, dev, 0);
    dt_init_linear_default(m->fc_w, m->fc_b);
}

static dt_tensor *block_forward(dt_basic_block *b, dt_tensor *x, int training) {
    dt_tensor *out = dt_batchnorm2d(conv3_forward(&b->conv1, x), &b->bn1, training, 1);
    out = dt_batchnorm2d(conv3_forward(&b->conv2, out), &b->bn2, training, 0);
    dt_tensor *id = x;
    if (b->has_down) id = dt_batchnorm2d(dt_conv2d(x, b->down_w, NULL, dt_geom(1, b->stride, 0, 1)), &b->down_bn, training, 0);
    return dt_add_relu(out, id);
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
    dt_tensor *h = dt_batchnorm2d(dt_conv2d(x, m->stem_w, NULL, dt_geom(7, 2, 3, 1)), &m->stem_bn, training, 1);
    h = dt_maxpool2d(h, 3, 2, 1);
    for (int i = 0; i < 8; i++) h = block_forward(&m->blocks[i], h, training);
    return dt_linear(dt_global_avgpool(h), m->fc_w, m->fc_b);
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

int dt_resnet_batchnorms(dt_resnet *m, dt_batchnorm **out, int max) {
    int n = 0;
#define ADD_BN(bn)                    \
    do {                              \
        if (n < max) out[n++] = &(bn); \
    } while (0)
    ADD_BN(m->stem_bn);
    for (int b = 0; b < 8; b++) {
        ADD_BN(m->blocks[b].bn1);
        ADD_BN(m->blocks[b].bn2);
        if (m->blocks[b].has_down) ADD_BN(m->blocks[b].down_bn);
    }
#undef ADD_BN
    return n;
}

int dt_resnet_buffers(dt_resnet *m, dt_tensor **out, int max) {
    dt_batchnorm *bns[32];
    int nb = dt_resnet_batchnorms(m, bns, 32), n = 0;
    for (int i = 0; i < nb && n + 2 <= max; i++) {
        out[n++] = bns[i]->running_mean;
        out[n++] = bns[i]->running_var;
    }
    return n;
}

void dt_resnet18_free(dt_resnet *m) {
    dt_batchnorm_free(&m->stem_bn);
    for (int b = 0; b < 8; b++) {
        dt_batchnorm_free(&m->blocks[b].bn1);
        dt_batchnorm_free(&m->blocks[b].bn2);
        if (m->blocks[b].has_down) dt_batchnorm_free(&m->blocks[b].down_bn);
    }
    dt_params_free(&m->params);
}
