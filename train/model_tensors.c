/* The tensors of a model configuration (the ResNets, ResNeXt, MobileNetV2), without building it
 * (model_tensors.h). */
#include "train/model_tensors.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const dt_resnet_cfg *mc;
    train_tensor_fn fn;
    void *ctx;
    int64_t elements;
    int pass; /* 0: the parameters, 1: the buffers */
    int rc;
} walk;

static void put(walk *w, int pass, const char *name, int ndim, const int64_t *shape) {
    if (w->rc || w->pass != pass) return;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    w->elements += n;
    if (w->fn) w->rc = w->fn(name, ndim, shape, w->ctx);
}

static void batchnorm(walk *w, const char *bn, int64_t c) {
    static const char *const params[2] = {"weight", "bias"}, *const bufs[2] = {"running_mean", "running_var"};
    char n[128];
    for (int i = 0; i < 2; i++) {
        snprintf(n, sizeof n, "%s.%s", bn, params[i]);
        put(w, 0, n, 1, &c);
    }
    for (int i = 0; i < 2; i++) {
        snprintf(n, sizeof n, "%s.%s", bn, bufs[i]);
        put(w, 1, n, 1, &c);
    }
}

/* conv_init of models/resnet.c: a plain conv's weight (in `groups` groups) or a deformable
 * layer's weight, offset weight and offset bias, then the batch norm. */
static int conv_groups(walk *w, const char *cv, const char *bn, int64_t cin, int64_t cout, int k, int deform,
                       int64_t groups, dt_err *err) {
    char n[128];
    int64_t s[4] = {cout, cin / groups, k, k};
    snprintf(n, sizeof n, "%s.weight", cv);
    put(w, 0, n, 4, s);
    if (deform) {
        int g = w->mc->offset_groups;
        if (g < 1 || cin % g)
            return dt_errf(err, "%s: %lld channels cannot be split into %d offset groups", cv, (long long)cin, g);
        int64_t oc = (int64_t)g * k * k * (w->mc->deform_version == 2 ? 3 : 2);
        int64_t so[4] = {oc, cin, k, k};
        snprintf(n, sizeof n, "%s.offset.weight", cv);
        put(w, 0, n, 4, so);
        snprintf(n, sizeof n, "%s.offset.bias", cv);
        put(w, 0, n, 1, &oc);
    }
    batchnorm(w, bn, cout);
    return 0;
}

static int conv(walk *w, const char *cv, const char *bn, int64_t cin, int64_t cout, int k, int deform, dt_err *err) {
    return conv_groups(w, cv, bn, cin, cout, k, deform, 1, err);
}

/* mobilenet_init of models/resnet.c: features.0, the inverted residuals, features.18; the last
 * channel count in *cin. */
static void mobilenet(walk *w, int64_t *cin) {
    const dt_resnet_cfg *mc = w->mc;
    int rows;
    const dt_mobilenet_row *r = dt_mobilenet_v2_setting(&rows);
    int64_t c = dt_mobilenet_divisible(32.0 * mc->width);
    conv(w, "features.0.0", "features.0.1", 3, c, 3, 0, NULL);
    int f = 1;
    char cv[48], bn[48];
    for (int i = 0; i < rows; i++) {
        int64_t out = dt_mobilenet_divisible(r[i].c * (double)mc->width);
        for (int b = 0; b < r[i].n; b++, f++) {
            int64_t hidden = c * r[i].t;
            int e = r[i].t != 1;
            if (e) {
                snprintf(cv, sizeof cv, "features.%d.conv.0.0", f);
                snprintf(bn, sizeof bn, "features.%d.conv.0.1", f);
                conv(w, cv, bn, c, hidden, 1, 0, NULL);
            }
            snprintf(cv, sizeof cv, "features.%d.conv.%d.0", f, e);
            snprintf(bn, sizeof bn, "features.%d.conv.%d.1", f, e);
            conv_groups(w, cv, bn, hidden, hidden, 3, 0, hidden, NULL);
            snprintf(cv, sizeof cv, "features.%d.conv.%d", f, e + 1);
            snprintf(bn, sizeof bn, "features.%d.conv.%d", f, e + 2);
            conv(w, cv, bn, hidden, out, 1, 0, NULL);
            c = out;
        }
    }
    int64_t last = dt_mobilenet_divisible(1280.0 * (mc->width > 1.0f ? mc->width : 1.0f));
    snprintf(cv, sizeof cv, "features.%d.0", f);
    snprintf(bn, sizeof bn, "features.%d.1", f);
    conv(w, cv, bn, c, last, 1, 0, NULL);
    *cin = last;
}

static int one_pass(walk *w, dt_err *err) {
    const dt_resnet_cfg *mc = w->mc;
    const dt_resnet_arch *a = dt_resnet_arch_of(mc->model);
    const char *name = dt_resnet_model_name(mc->model);
    if (mc->deform_stages && dt_resnet_deform_refusal(mc->model))
        return dt_errf(err, "%s", dt_resnet_deform_refusal(mc->model));
    if (!(mc->width > 0)) return dt_errf(err, "%s: width %g must be positive", name, mc->width);
    int64_t stem = (int64_t)(64 * mc->width + 0.5f), cin = stem;
    if (a->inverted) mobilenet(w, &cin);
    else if (stem < 1) return dt_errf(err, "%s: width %g leaves the stem without channels", name, mc->width);
    else if (conv(w, "conv1", "bn1", 3, stem, 7, 0, err)) return -1;
    for (int s = 0; s < 4 && !a->inverted; s++) {
        const dt_resnet_stage *st = &a->stages[s];
        int64_t planes = (int64_t)(st->planes * mc->width + 0.5f);
        if (planes < 1) return dt_errf(err, "%s: width %g leaves stage %d without channels", name, mc->width, s + 1);
        int64_t out = st->kind == DT_BLOCK_BOTTLENECK ? 4 * planes : planes;
        int64_t mid = planes * a->width_per_group / 64 * a->groups; /* torchvision's Bottleneck width */
        if (mid < 1) return dt_errf(err, "%s: width %g leaves stage %d's grouped convs without channels", name, mc->width, s + 1);
        int def = (mc->deform_stages >> s) & 1;
        for (int b = 0; b < st->blocks; b++) {
            int stride = b == 0 ? st->stride : 1;
            char cv[48], bn[48];
            int64_t io[3][2];
            int ks[3], nc;
            if (st->kind == DT_BLOCK_BOTTLENECK) {
                nc = 3;
                int64_t t[3][2] = {{cin, mid}, {mid, mid}, {mid, out}};
                memcpy(io, t, sizeof t);
                ks[0] = 1, ks[1] = 3, ks[2] = 1;
            } else {
                nc = 2;
                int64_t t[2][2] = {{cin, planes}, {planes, planes}};
                memcpy(io, t, sizeof t);
                ks[0] = ks[1] = 3;
            }
            for (int i = 0; i < nc; i++) {
                snprintf(cv, sizeof cv, "layer%d.%d.conv%d", s + 1, b, i + 1);
                snprintf(bn, sizeof bn, "layer%d.%d.bn%d", s + 1, b, i + 1);
                int64_t groups = nc == 3 && i == 1 ? a->groups : 1;
                if (conv_groups(w, cv, bn, io[i][0], io[i][1], ks[i], ks[i] == 3 && def, groups, err)) return -1;
            }
            if (stride != 1 || cin != out) {
                snprintf(cv, sizeof cv, "layer%d.%d.downsample.0", s + 1, b);
                snprintf(bn, sizeof bn, "layer%d.%d.downsample.1", s + 1, b);
                if (conv(w, cv, bn, cin, out, 1, 0, err)) return -1;
            }
            cin = out;
        }
    }
    int64_t sw[2] = {mc->num_classes, cin}, sb[1] = {mc->num_classes};
    char fw[32], fb[32];
    snprintf(fw, sizeof fw, "%s.weight", dt_resnet_classifier_name(mc->model));
    snprintf(fb, sizeof fb, "%s.bias", dt_resnet_classifier_name(mc->model));
    put(w, 0, fw, 2, sw);
    put(w, 0, fb, 1, sb);
    return 0;
}

int train_model_tensors(const dt_resnet_cfg *mc, train_tensor_fn fn, void *ctx, int64_t *elements, dt_err *err) {
    if (mc->num_classes < 1) return dt_errf(err, "num_classes %d must be positive", mc->num_classes);
    walk w = {mc, fn, ctx, 0, 0, 0};
    for (w.pass = 0; w.pass < 2; w.pass++) {
        if (one_pass(&w, err)) return -1;
        if (w.rc) return w.rc;
    }
    if (elements) *elements = w.elements;
    return 0;
}
