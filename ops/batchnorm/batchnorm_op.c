/* batchnorm2d (+ residual add, + ReLU) on the tape: one op for y = act(bn(x) + skip), forward
 * and backward each one set of fused kernels (ops/batchnorm/batchnorm.h) picked from op tables by the
 * input's (device, dtype, layout). The node saves the batch mean and 1/std ([C] fp32) and
 * nothing else: the ReLU mask comes from the op's own output (nchw) or is recomputed from x
 * and skip (nhwc). */
#include <string.h>

#include "ops/batchnorm/batchnorm.h"
#include "core/dt_alloc.h"
#include "core/dt_common.h"
#include "core/dt_kernel.h"
#include "ops/dt_layers.h"
#include "core/dt_param.h"

DT_OP_TABLE(bn_stats_k, "batchnorm2d", dt_bn_stats_fn, DT_ACT_FORMATS(bn_stats_k, dt_bn_stats))
DT_OP_TABLE(bn_apply_k, "batchnorm2d (apply)", dt_bn_apply_fn, DT_ACT_FORMATS(bn_apply_k, dt_bn_apply))
DT_OP_TABLE(bn_sums_k, "batchnorm2d (statistics from sums)", dt_bn_stats_of_sums_fn,
            DT_TWINS(bn_sums_k, dt_bn_stats_of_sums, DT_BF16, DT_NHWC))
DT_OP_TABLE(bn_backward_k, "batchnorm2d (backward)", dt_bn_backward_fn, DT_ACT_FORMATS(bn_backward_k, dt_bn_backward))

void dt_batchnorm_init(dt_batchnorm *bn, void *params, const char *name, int64_t C, dt_dev dev) {
    memset(bn, 0, sizeof *bn);
    bn->C = C;
    bn->eps = 1e-5f;
    bn->momentum = 0.1f;
    char n[96];
    int64_t s[1] = {C};
    snprintf(n, sizeof n, "%s.weight", name);
    bn->weight = dt_param_new(params, n, 1, s, dev, DT_NCHW, 0);
    snprintf(n, sizeof n, "%s.bias", name);
    bn->bias = dt_param_new(params, n, 1, s, dev, DT_NCHW, 0);
    dt_tensor_fill(bn->weight, 1.0f);
    bn->running_mean = dt_tensor_new_unscoped(1, s, dev, DT_F32, DT_NCHW);
    bn->running_var = dt_tensor_new_unscoped(1, s, dev, DT_F32, DT_NCHW);
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

/* in: x, weight, bias (, skip); saved: mean, invstd */
static void bn_backward(dt_node *n) {
    dt_tensor *x = n->in[0], *w = n->in[1], *b = n->in[2], *skip = n->n_in > 3 ? n->in[3] : NULL, *y = n->out;
    dt_tensor *mean = n->saved[0], *invstd = n->saved[1];
    const bn_ctx *c = n->ctx;
    int64_t N = DT_N(x), C = DT_C(x), P = DT_H(x) * DT_W(x);
    float bx = 0, bs = 0, bw = 0, bb = 0;
    void *dx = dt_grad_dst(x, &bx), *ds = dt_grad_dst(skip, &bs);
    float *dw = dt_grad_dst(w, &bw), *db = dt_grad_dst(b, &bb);
    void *ws = dt_dev_alloc(x->dev, dt_bn_ws_bytes(C));
    DT_PICK(bn_backward_k, x->dev, x->dtype, x->layout)(
        N, C, P, x->data, y->data, skip ? skip->data : NULL, y->grad->data, dt_data_f32(mean), dt_data_f32(invstd),
        dt_data_f32(w), dt_data_f32(b), c->relu, c->training, dx, bx, ds, bs, dw, bw, db, bb, ws, c->sync);
    dt_dev_free(x->dev, ws);
}

static void check_input(const char *op, const dt_tensor *x, const dt_tensor *skip, const dt_batchnorm *bn,
                        int training) {
    dt_require_ndim(op, "input", x, 4);
    dt_require_live(op, x);
    dt_require_same_device(op, x, bn->weight);
    if (x->shape[1] != bn->C) {
        char s[160];
        dt_fatal("%s: input %s has %lld channels, the layer %s has %lld", op, dt_tensor_desc(x, s, sizeof s),
                 (long long)x->shape[1], bn->weight->name, (long long)bn->C);
    }
    /* the statistics are over every replica's batch when they are synchronized (as PyTorch's
     * SyncBatchNorm: one value a replica is enough with two replicas or more) */
    const int64_t ranks = bn->sync ? bn->sync->ranks : 1, values = x->shape[0] * x->shape[2] * x->shape[3];
    if (training && values * ranks < 2)
        dt_fatal("%s: training needs more than one value per channel (input has N*H*W = %lld%s)", op, (long long)values,
                 ranks > 1 ? ", over the replicas too" : "");
    if (!skip) return;
    dt_require_live(op, skip);
    dt_require_same_shape(op, x, skip);
    dt_require_same_type(op, x, skip);
    dt_require_same_device(op, x, skip);
    /* one kernel writes dx and dskip: they must be two buffers */
    if (skip == x) dt_fatal("%s: the skip is the batch norm's own input; pass a copy", op);
}

/* y = act(bn(x) + skip), recorded with its backward; stats (training, or NULL): x's sums made
 * by its producer (dt_conv_bn), so that the statistics do not read x. */
static dt_tensor *bn_op(const char *op, dt_tensor *x, dt_tensor *skip, dt_batchnorm *bn, int training, int relu,
                        const dt_conv_stats *stats) {
    check_input(op, x, skip, bn, training);
    int64_t N = DT_N(x), C = DT_C(x), P = DT_H(x) * DT_W(x);
    dt_tensor *y = dt_tensor_like(x);
    dt_tensor *mean = dt_tensor_new1(x->dev, C), *invstd = dt_tensor_new1(x->dev, C);
    const dt_bn_sync *sync = training ? bn->sync : NULL;
    if (stats) {
        DT_PICK(bn_sums_k, x->dev, x->dtype, x->layout)(C, N * P, stats->sums, stats->groups, bn->eps, bn->momentum,
                                                        dt_data_f32(bn->running_mean), dt_data_f32(bn->running_var),
                                                        dt_data_f32(mean), dt_data_f32(invstd), sync);
    } else {
        void *ws = dt_dev_alloc(x->dev, dt_bn_ws_bytes(C));
        DT_PICK(bn_stats_k, x->dev, x->dtype, x->layout)(N, C, P, x->data, training, bn->eps, bn->momentum,
                                                         dt_data_f32(bn->running_mean), dt_data_f32(bn->running_var),
                                                         dt_data_f32(mean), dt_data_f32(invstd), ws, sync);
        dt_dev_free(x->dev, ws);
    }
    DT_PICK(bn_apply_k, x->dev, x->dtype, x->layout)(N, C, P, x->data, dt_data_f32(mean), dt_data_f32(invstd),
                                                     dt_data_f32(bn->weight), dt_data_f32(bn->bias),
                                                     skip ? skip->data : NULL, relu, y->data);
    dt_tensor *in[4] = {x, bn->weight, bn->bias, skip};
    dt_node *n = dt_record(op, bn_backward, y, skip ? 4 : 3, in, sizeof(bn_ctx));
    if (n) {
        *(bn_ctx *)n->ctx = (bn_ctx){training, relu, sync};
        dt_node_save(n, mean);
        dt_node_save(n, invstd);
    }
    return y;
}

static const char *bn_op_name(const dt_tensor *skip, int relu) {
    return skip ? "batchnorm2d+add+relu" : relu ? "batchnorm2d+relu" : "batchnorm2d";
}

dt_tensor *dt_batchnorm2d(dt_tensor *x, dt_batchnorm *bn, int training, int fuse_relu) {
    return bn_op(bn_op_name(NULL, fuse_relu), x, NULL, bn, training, fuse_relu, NULL);
}

dt_tensor *dt_batchnorm2d_add_relu(dt_tensor *x, dt_tensor *skip, dt_batchnorm *bn, int training) {
    return bn_op(bn_op_name(skip, 1), x, skip, bn, training, 1, NULL);
}

/* The conv's statistics reach the batch norm only where both run what the fusion needs: a bf16
 * NHWC conv whose fprop writes them (dt_conv2d_stats), in training; elsewhere the batch norm
 * computes them itself - the same function either way. */
dt_tensor *dt_conv_bn(dt_tensor *x, dt_tensor *w, dt_conv_geom g, dt_math math, dt_conv_algo algo, dt_batchnorm *bn,
                      dt_tensor *skip, int training, int relu) {
    if (skip && !relu) dt_fatal("conv+batchnorm2d: a residual skip is joined before the ReLU (relu must be 1)");
    const int fusable = training && x->dtype == DT_BF16 && x->layout == DT_NHWC && w->shape[0] == bn->C;
    dt_conv_stats st = {NULL, 0};
    dt_tensor *h = dt_conv2d_stats(x, w, NULL, g, math, algo, fusable ? &st : NULL);
    dt_tensor *y = bn_op(bn_op_name(skip, relu), h, skip, bn, training, relu, st.sums ? &st : NULL);
    if (st.sums) dt_dev_free(x->dev, st.sums); /* stream-ordered on the GPU, as every scratch block */
    return y;
}
