/* maxpool2d and global average pooling on the tape. */
#include "dt_alloc.h"
#include "dt_dispatch.h"
#include "dt_layers.h"
#include "pool.h"

typedef struct {
    int k, s, p;
} pool_ctx;

/* The argmax indices are int32 values kept in a tensor of the same size as the output
 * (float32 storage is 4 bytes per element too); only the pool kernels read them. */
static void maxpool_backward(dt_node *n) {
    dt_tensor *x = n->in[0], *y = n->out, *idx = n->saved[0];
    pool_ctx *c = n->ctx;
    float beta;
    float *dx = dt_grad_dst(x, &beta);
    if (!dx) return;
    DT_CALL(x->dev, dt_maxpool_bwd, y->grad->data, (const int32_t *)idx->data, x->shape[0] * x->shape[1], x->shape[2],
            x->shape[3], c->k, c->s, c->p, y->shape[2], y->shape[3], beta, dx);
}

dt_tensor *dt_maxpool2d(dt_tensor *x, int k, int stride, int pad) {
    dt_require_ndim("maxpool2d", "input", x, 4);
    dt_require_live("maxpool2d", x);
    if (k < 1 || stride < 1 || pad < 0 || pad > k / 2)
        dt_fatal("maxpool2d: invalid kernel %d stride %d padding %d (padding must be at most half the kernel)", k, stride, pad);
    int64_t Ho = dt_conv_out_size(x->shape[2], k, stride, pad, 1), Wo = dt_conv_out_size(x->shape[3], k, stride, pad, 1);
    if (Ho < 1 || Wo < 1) {
        char s[128];
        dt_fatal("maxpool2d: input %s is too small for a %dx%d window", dt_shape_str(x, s, sizeof s), k, k);
    }
    dt_tensor *y = dt_tensor_new4(x->dev, x->shape[0], x->shape[1], Ho, Wo);
    dt_tensor *idx = dt_tensor_like(y);
    DT_CALL(x->dev, dt_maxpool_fwd, x->data, x->shape[0] * x->shape[1], x->shape[2], x->shape[3], k, stride, pad, Ho, Wo,
            y->data, (int32_t *)idx->data);
    dt_node *n = dt_record("maxpool2d", maxpool_backward, y, 1, &x, sizeof(pool_ctx));
    if (n) {
        *(pool_ctx *)n->ctx = (pool_ctx){k, stride, pad};
        dt_node_save(n, idx);
    }
    return y;
}

static void avgpool_backward(dt_node *n) {
    dt_tensor *x = n->in[0];
    float beta;
    float *dx = dt_grad_dst(x, &beta);
    if (dx) DT_CALL(x->dev, dt_avgpool_bwd, n->out->grad->data, x->shape[0] * x->shape[1], x->shape[2] * x->shape[3], beta, dx);
}

dt_tensor *dt_global_avgpool(dt_tensor *x) {
    dt_require_ndim("global_avgpool", "input", x, 4);
    dt_require_live("global_avgpool", x);
    dt_tensor *y = dt_tensor_new2(x->dev, x->shape[0], x->shape[1]);
    DT_CALL(x->dev, dt_avgpool_fwd, x->data, x->shape[0] * x->shape[1], x->shape[2] * x->shape[3], y->data);
    dt_record("global_avgpool", avgpool_backward, y, 1, &x, 0);
    return y;
}
