/* The tensors of a ResNet configuration, without building it (model_tensors.h). */
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

/* conv_init of layers/resnet.c: a plain conv's weight or a deformable layer's weight, offset
 * weight and offset bias, then the batch norm. */
static int conv(walk *w, const char *cv, const char *bn, int64_t cin, int64_t cout, int k, int deform, dt_err *err) {
    char n[128];
    int64_t s[4] = {cout, cin, k, k};
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

static int one_pass(walk *w, dt_err *err) {
    const dt_resnet_cfg *mc = w->mc;
    const dt_resnet_arch *a = dt_resnet_arch_of(mc->model);
    const char *name = dt_resnet_model_name(mc->model);
    int64_t stem = (int64_t)(64 * mc->width + 0.5f);
    if (stem < 1) return dt_errf(err, "%s: width %g leaves the stem without channels", name, mc->width);
    if (conv(w, "conv1", "bn1", 3, stem, 7, 0, err)) return -1;
    int64_t cin = stem;
    for (int s = 0; s < 4; s++) {
        const dt_resnet_stage *st = &a->stages[s];
        int64_t planes = (int64_t)(st->planes * mc->width + 0.5f);
        if (planes < 1) return dt_errf(err, "%s: width %g leaves stage %d without channels", name, mc->width, s + 1);
        int64_t out = st->kind == DT_BLOCK_BOTTLENECK ? 4 * planes : planes;
        int def = (mc->deform_stages >> s) & 1;
        for (int b = 0; b < st->blocks; b++) {
            int stride = b == 0 ? st->stride : 1;
            char cv[48], bn[48];
            int64_t io[3][2];
            int ks[3], nc;
            if (st->kind == DT_BLOCK_BOTTLENECK) {
                nc = 3;
                int64_t t[3][2] = {{cin, planes}, {planes, planes}, {planes, out}};
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
                if (conv(w, cv, bn, io[i][0], io[i][1], ks[i], ks[i] == 3 && def, err)) return -1;
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
    put(w, 0, "fc.weight", 2, sw);
    put(w, 0, "fc.bias", 1, sb);
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
