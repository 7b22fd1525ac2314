/* maxpool2d and global average pooling on the tape, dispatched through op tables by the
 * input's (device, dtype, layout): f32 nchw, f32 nhwc, bf16 nhwc (ops/pool/pool.h). */
#include "core/dt_common.h"
#include "core/dt_kernel.h"
#include "ops/dt_layers.h"
#include "ops/pool/pool.h"

DT_OP_TABLE(maxpool_k, "maxpool2d", dt_maxpool_fwd_fn, DT_ACT_FORMATS(maxpool_k, dt_maxpool_fwd))
DT_OP_TABLE(maxpool_bwd_k, "maxpool2d (backward)", dt_maxpool_bwd_fn, DT_ACT_FORMATS(maxpool_bwd_k, dt_maxpool_bwd))
DT_OP_TABLE(avgpool_k, "global_avgpool", dt_avgpool_fwd_fn, DT_ACT_FORMATS(avgpool_k, dt_avgpool_fwd))
DT_OP_TABLE(avgpool_bwd_k, "global_avgpool (backward)", dt_avgpool_bwd_fn, DT_ACT_FORMATS(avgpool_bwd_k, dt_avgpool_bwd))

typedef struct {
    int k, s, p;
} pool_ctx;

/* saved[0]: the argmax taps, [N, C, Ho, Wo] uint8 in y's layout */
static void maxpool_backward(dt_node *n) {
    dt_tensor *x = n->in[0], *y = n->out, *tap = n->saved[0];
    const pool_ctx *c = n->ctx;
    float beta;
    void *dx = dt_grad_dst(x, &beta);
    if (!dx) return;
    DT_PICK(maxpool_bwd_k, x->dev, x->dtype, x->layout)(y->grad->data, dt_data_u8(tap), DT_N(x), DT_C(x), DT_H(x),
                                                        DT_W(x), c->k, c->s, c->p, DT_H(y), DT_W(y), beta, dx);
}

dt_tensor *dt_maxpool2d(dt_tensor *x, int k, int stride, int pad) {
    dt_require_ndim("maxpool2d", "input", x, 4);
    dt_require_live("maxpool2d", x);
    if (k < 1 || k > DT_MAXPOOL_MAX_K || stride < 1 || pad < 0 || pad > k / 2)
        dt_fatal("maxpool2d: invalid kernel %d stride %d padding %d (the kernel at most %d, padding at most half the kernel)",
                 k, stride, pad, DT_MAXPOOL_MAX_K);
    int64_t Ho = dt_conv_out_size(DT_H(x), k, stride, pad, 1), Wo = dt_conv_out_size(DT_W(x), k, stride, pad, 1);
    if (Ho < 1 || Wo < 1) {
        char s[160];
        dt_fatal("maxpool2d: input %s is too small for a %dx%d window", dt_tensor_desc(x, s, sizeof s), k, k);
    }
    dt_tensor *y = dt_tensor_new4_as(x->dev, x->dtype, x->layout, DT_N(x), DT_C(x), Ho, Wo);
    dt_tensor *tap = dt_tensor_new4_as(x->dev, DT_U8, x->layout, DT_N(x), DT_C(x), Ho, Wo);
    DT_PICK(maxpool_k, x->dev, x->dtype, x->layout)(x->data, DT_N(x), DT_C(x), DT_H(x), DT_W(x), k, stride, pad, Ho,
                                                    Wo, y->data, dt_data_u8(tap));
    dt_node *n = dt_record("maxpool2d", maxpool_backward, y, 1, &x, sizeof(pool_ctx));
    if (n) {
        *(pool_ctx *)n->ctx = (pool_ctx){k, stride, pad};
        dt_node_save(n, tap);
    }
    return y;
}

static void avgpool_backward(dt_node *n) {
    dt_tensor *x = n->in[0];
    float beta;
    void *dx = dt_grad_dst(x, &beta);
    if (dx)
        DT_PICK(avgpool_bwd_k, x->dev, x->dtype, x->layout)(n->out->grad->data, DT_N(x), DT_C(x), DT_H(x) * DT_W(x),
                                                            beta, dx);
}

dt_tensor *dt_global_avgpool(dt_tensor *x) {
    dt_require_ndim("global_avgpool", "input", x, 4);
    dt_require_live("global_avgpool", x);
    int64_t s[2] = {DT_N(x), DT_C(x)};
    dt_tensor *y = dt_tensor_new_as(2, s, x->dev, x->dtype, DT_NCHW);
    DT_PICK(avgpool_k, x->dev, x->dtype, x->layout)(x->data, DT_N(x), DT_C(x), DT_H(x) * DT_W(x), y->data);
    dt_record("global_avgpool", avgpool_backward, y, 1, &x, 0);
    return y;
}
