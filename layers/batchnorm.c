/* batchnorm2d (+ fused ReLU) on the tape. Saves the batch mean and 1/std for the backward;
 * the ReLU mask comes from the op's own output. */
#include <string.h>

#include "batchnorm.h"
#include "dt_alloc.h"
#include "dt_dispatch.h"
#include "dt_layers.h"
#include "dt_param.h"

void dt_batchnorm_init(dt_batchnorm *bn, void *params, const char *name, int64_t C, dt_dev dev) {
    memset(bn, 0, sizeof *bn);
    bn->C = C;
    bn->eps = 1e-5f;
    bn->momentum = 0.1f;
    char n[96];
    int64_t s[1] = {C};
    snprintf(n, sizeof n, "%s.weight", name);
    bn->weight = dt_param_new(params, n, 1, s, dev, 0);
    snprintf(n, sizeof n, "%s.bias", name);
    bn->bias = dt_param_new(params, n, 1, s, dev, 0);
    dt_tensor_fill(bn->weight, 1.0f);
    bn->running_mean = dt_tensor_new_unscoped(1, s, dev);
    bn->running_var = dt_tensor_new_unscoped(1, s, dev);
    snprintf(n, sizeof n, "%s.running_mean", name);
    dt_tensor_set_name(bn->running_mean, n);
    snprintf(n, sizeof n, "%s.running_var", name);
    dt_tensor_set_name(bn->running_var, n);
    dt_tensor_fill(bn->running_mean, 0.0f);
    dt_tensor_fill(bn->running_var, 1.0f);
}

void dt_batchnorm_free(dt_batchnorm *bn) {
    dt_tensor_free(bn->running_mean);
    dt_tensor_free(bn->running_var);
    bn->running_mean = bn->running_var = NULL;
}

typedef struct {
    int training, relu;
    const dt_bn_sync *sync;
} bn_ctx;

static void bn_backward(dt_node *n) {
    dt_tensor *x = n->in[0], *w = n->in[1], *b = n->in[2], *y = n->out;
    dt_tensor *mean = n->saved[0], *invstd = n->saved[1];
    bn_ctx *c = n->ctx;
    int64_t N = x->shape[0], C = x->shape[1], P = x->shape[2] * x->shape[3];
    float bx = 0, bw = 0, bb = 0;
    float *dx = dt_grad_dst(x, &bx), *dw = dt_grad_dst(w, &bw), *db = dt_grad_dst(b, &bb);
    void *ws = x->dev == DT_GPU ? dt_gpu_malloc(dt_bn_cuda_ws_bytes_any(N, C)) : NULL;
    DT_CALL(x->dev, dt_bn_backward, N, C, P, x->data, y->data, y->grad->data, mean->data, invstd->data, w->data,
            c->relu, c->training, dx, bx, dw, bw, db, bb, ws, c->sync);
    if (ws) dt_gpu_free(ws);
}

dt_tensor *dt_batchnorm2d(dt_tensor *x, dt_batchnorm *bn, int training, int fuse_relu) {
    dt_require_ndim("batchnorm2d", "input", x, 4);
    dt_require_live("batchnorm2d", x);
    dt_require_same_device("batchnorm2d", x, bn->weight);
    if (x->shape[1] != bn->C) {
        char s[128];
        dt_fatal("batchnorm2d: input %s has %lld channels, the layer %s has %lld", dt_shape_str(x, s, sizeof s),
                 (long long)x->shape[1], bn->weight->name, (long long)bn->C);
    }
    int64_t N = x->shape[0], C = x->shape[1], P = x->shape[2] * x->shape[3];
    if (training && N * P < 2)
        dt_fatal("batchnorm2d: training needs more than one value per channel (input has N*H*W = %lld)", (long long)(N * P));
    dt_tensor *y = dt_tensor_like(x);
    dt_tensor *mean = dt_tensor_new1(x->dev, C), *invstd = dt_tensor_new1(x->dev, C);
    const dt_bn_sync *sync = training ? bn->sync : NULL;
    void *ws = x->dev == DT_GPU ? dt_gpu_malloc(dt_bn_cuda_ws_bytes_any(N, C)) : NULL;
    DT_CALL(x->dev, dt_bn_stats, N, C, P, x->data, training, bn->eps, bn->momentum, bn->running_mean->data,
            bn->running_var->data, mean->data, invstd->data, ws, sync);
    if (ws) dt_gpu_free(ws);
    DT_CALL(x->dev, dt_bn_apply, N, C, P, x->data, mean->data, invstd->data, bn->weight->data, bn->bias->data,
            fuse_relu, y->data);
    dt_tensor *in[3] = {x, bn->weight, bn->bias};
    dt_node *n = dt_record(fuse_relu ? "batchnorm2d+relu" : "batchnorm2d", bn_backward, y, 3, in, sizeof(bn_ctx));
    if (n) {
        ((bn_ctx *)n->ctx)->training = training;
        ((bn_ctx *)n->ctx)->relu = fuse_relu;
        ((bn_ctx *)n->ctx)->sync = sync;
        dt_node_save(n, mean);
        dt_node_save(n, invstd);
    }
    return y;
}
