/* build/model_io: one model, one batch, everything PyTorch needs to check deftc against
 * torchvision (tests/api/test_torchvision_weights.py runs it).
 *
 *   build/model_io weights=W.safetensors input=X.npy labels=Y.npy out=PREFIX [key=value ...]
 *
 * The other keys are build/train's model and device keys (model, width, deform,
 * deform_version, offset_groups, deform_mode, precision, layout, device; build/train --keys);
 * the class count is that of the weights' fc.bias (mobilenet_v2: classifier.1.bias). It builds the model, loads W (a strict load:
 * every tensor, offset convs included, train/dt_weights.h), and writes
 *   PREFIX_export.safetensors  the loaded model exported (steps 0): what load_state_dict takes
 *   PREFIX_logits.npy          eval-mode logits of X [N, classes] (running statistics)
 *   PREFIX_loss.npy            [1]: the train-mode loss of (X, Y), the mean cross-entropy
 *   PREFIX_grads.safetensors   every parameter's gradient of that loss, under its name, F32 in
 *                              logical (NCHW) order
 * X is [N, 3, S, S] float32, Y [N] float32 holding the class indices. Exit status 0, 1 on a
 * runtime failure (a file), 2 on a usage error. */
#include <stdlib.h>

#include "core/dt_common.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dt_autograd.h"
#include "train/dt_config.h"
#include "ops/dt_layers.h"
#include "core/dt_npy.h"
#include "ops/dt_ops.h"
#include "train/dt_weights.h"
#include "train/train_run.h" /* train_model_cfg */

typedef struct {
    const char *weights, *input, *labels, *out;
} io_args;

static int usage(const char *why) {
    fprintf(stderr, "model_io: %s\nusage: build/model_io weights=W.safetensors input=X.npy labels=Y.npy out=PREFIX "
            "[model=... width=... deform=... precision=... device=cpu|cuda ...]\n", why);
    return 2;
}

/* PREFIX + suffix into buf. */
static const char *out_path(const io_args *a, const char *suffix, char *buf, size_t cap) {
    snprintf(buf, cap, "%s%s", a->out, suffix);
    return buf;
}

/* The labels [N] (float32 class indices in the .npy) as the i32 tensor the loss takes. */
static dt_tensor *labels_of(const dt_tensor *y, int classes, dt_dev dev, dt_err *err) {
    float *h = dt_tensor_host_copy(y);
    int32_t *l = dt_xmalloc((size_t)(y->numel ? y->numel : 1) * sizeof *l);
    int ok = y->ndim == 1;
    for (int64_t i = 0; ok && i < y->numel; i++) {
        ok = h[i] >= 0 && h[i] < classes && h[i] == (float)(int32_t)h[i];
        l[i] = ok ? (int32_t)h[i] : 0;
    }
    dt_tensor *t = NULL;
    if (!ok) dt_errf(err, "the labels must be [N] class indices 0..%d", classes - 1);
    else t = dt_tensor_new_as(1, y->shape, dev, DT_I32, DT_NCHW), dt_tensor_upload(t, l);
    free(h);
    free(l);
    return t;
}

/* Every parameter's gradient, as PyTorch names and orders it. */
static int save_grads(const dt_params *ps, const char *path, dt_err *err) {
    dt_st_item *items = dt_xcalloc((size_t)ps->n, sizeof *items);
    float **host = dt_xcalloc((size_t)ps->n, sizeof *host);
    int rc = 0;
    for (int i = 0; i < ps->n && !rc; i++) {
        const dt_tensor *p = ps->items[i]->t;
        if (!p->grad_valid) rc = dt_errf(err, "parameter %s got no gradient", p->name);
        else host[i] = dt_tensor_host_copy(p->grad), items[i] = (dt_st_item){p->name, DT_ST_F32, p->ndim, p->shape, host[i]};
    }
    if (!rc) rc = dt_weights_save_tensors(path, items, ps->n, NULL, 0, err);
    for (int i = 0; i < ps->n; i++) free(host[i]);
    free(host);
    free(items);
    return rc;
}

static int run(const io_args *a, const dt_train_cfg *c, dt_err *err) {
    dt_safetensors st;
    if (dt_safetensors_read(a->weights, &st, err)) return 1;
    const dt_st_tensor *fc = dt_safetensors_find(&st, "fc.bias");
    if (!fc) fc = dt_safetensors_find(&st, "classifier.1.bias");
    if (!fc || fc->ndim != 1 || fc->shape[0] < 1 || fc->shape[0] > 100000) {
        dt_safetensors_free(&st);
        return dt_errf(err, "%s has no fc.bias (classifier.1.bias) [classes]", a->weights), 1;
    }
    dt_dev dev = strcmp(c->device, "cuda") ? DT_CPU : DT_GPU;
    dt_resnet_cfg mc;
    train_model_cfg(c, (int)fc->shape[0], &mc);
    dt_resnet m;
    dt_resnet_init(&m, &mc, dev);
    dt_weights_report rep;
    char p[1100];
    int rc = dt_weights_load_state(&st, &m.params, m.buffers, m.n_buffers, 0, a->weights, &rep, err) ||
             dt_weights_export(&m, 0, out_path(a, "_export.safetensors", p, sizeof p), err);
    dt_safetensors_free(&st);
    dt_tensor *x = NULL, *y = NULL;
    if (!rc) rc = !(x = dt_npy_load(a->input, dev, err));
    if (!rc) {
        dt_tensor *yf = dt_npy_load(a->labels, DT_CPU, err);
        rc = !yf || !(y = labels_of(yf, mc.num_classes, dev, err));
        dt_tensor_free(yf);
    }
    if (!rc && (x->ndim != 4 || x->shape[1] != 3 || x->shape[0] != y->numel))
        rc = dt_errf(err, "the input must be [N, 3, S, S] with N = %lld labels", (long long)y->numel) != 0;
    if (!rc) { /* eval: the running statistics */
        dt_set_grad_enabled(0);
        dt_scope_begin();
        rc = dt_npy_save(out_path(a, "_logits.npy", p, sizeof p), dt_resnet_forward(&m, x, 0), err) != 0;
        dt_scope_end();
        dt_set_grad_enabled(1);
    }
    if (!rc) { /* one train-mode forward and backward: batch statistics */
        dt_scope_begin();
        dt_params_zero_grad(&m.params);
        dt_tensor *loss = dt_softmax_cross_entropy(dt_resnet_forward(&m, x, 1), y, 0.0f);
        loss->retain = 1;
        dt_backward(loss);
        rc = dt_npy_save(out_path(a, "_loss.npy", p, sizeof p), loss, err) ||
             save_grads(&m.params, out_path(a, "_grads.safetensors", p, sizeof p), err);
        dt_scope_end();
    }
    dt_tensor_free(x);
    dt_tensor_free(y);
    dt_resnet_free(&m);
    return rc ? 1 : 0;
}

int main(int argc, char **argv) {
    dt_set_fatal_handler(exit); /* a failure outside a guarded call ends this program (dt_common.h) */
    io_args a = {0};
    dt_train_cfg c;
    dt_config_defaults(&c);
    strcpy(c.device, "cpu");
    c.synthetic = 1; /* no dataset: dt_config_check looks at the model's keys */
    dt_err err;
    for (int i = 1; i < argc; i++) {
        const char **own[] = {&a.weights, &a.input, &a.labels, &a.out};
        static const char *const KEYS[] = {"weights=", "input=", "labels=", "out="};
        int k = 0;
        while (k < 4 && strncmp(argv[i], KEYS[k], strlen(KEYS[k]))) k++;
        if (k < 4) *own[k] = argv[i] + strlen(KEYS[k]);
        else if (dt_config_set(&c, argv[i], &err)) return usage(err.msg);
    }
    if (!a.weights || !a.input || !a.labels || !a.out) return usage("weights=, input=, labels= and out= are needed");
    if (dt_config_check(&c, &err)) return usage(err.msg);
    int rc = run(&a, &c, &err);
    if (rc) fprintf(stderr, "model_io: error: %s\n", err.msg);
    return rc;
}
