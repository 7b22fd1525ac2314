/* Softmax cross-entropy (mean over the batch) and top-k accuracy, logits f32 or bf16, through op
 * tables (ops/loss/loss.h). */
#include <stdlib.h>

#include "core/dt_alloc.h"
#include "core/dt_common.h"
#include "core/dt_kernel.h"
#include "ops/dt_layers.h"
#include "ops/dt_ops.h"
#include "ops/loss/loss.h"

#define LOSS_ENTRIES(t, fn)                                          \
    DT_KERNEL(t, DT_CPU, DT_F32, DT_NCHW, fn##_f32_cpu),             \
    DT_KERNEL_CUDA(t, DT_GPU, DT_F32, DT_NCHW, fn##_f32_cuda),       \
    DT_KERNEL(t, DT_CPU, DT_BF16, DT_NCHW, fn##_bf16_cpu),           \
    DT_KERNEL_CUDA(t, DT_GPU, DT_BF16, DT_NCHW, fn##_bf16_cuda)
DT_OP_TABLE(xent_k, "softmax_cross_entropy", dt_xent_fwd_fn, LOSS_ENTRIES(xent_k, dt_xent_fwd))
DT_OP_TABLE(xent_bwd_k, "softmax_cross_entropy (backward)", dt_xent_bwd_fn, LOSS_ENTRIES(xent_bwd_k, dt_xent_bwd))
DT_OP_TABLE(topk_k, "topk_correct", dt_topk_fn, LOSS_ENTRIES(topk_k, dt_topk))

typedef struct {
    float eps;
} xent_ctx;

static void xent_backward(dt_node *n) {
    dt_tensor *logits = n->in[0], *labels = n->in[1];
    float beta;
    void *d = dt_grad_dst(logits, &beta);
    if (d && dt_grad_dtype(logits) != logits->dtype) {
        char b[160];
        dt_fatal("softmax_cross_entropy: the gradient of logits %s would be %s", dt_tensor_desc(logits, b, sizeof b),
                 dt_dtype_name(dt_grad_dtype(logits)));
    }
    if (d)
        DT_PICK(xent_bwd_k, logits->dev, logits->dtype, DT_NCHW)(DT_N(logits), DT_C(logits), logits->data,
                                                                  dt_data_i32(labels), ((xent_ctx *)n->ctx)->eps,
                                                                  dt_data_f32(n->out->grad), beta, d);
}

static void check_labels(const char *op, const dt_tensor *logits, const dt_tensor *labels) {
    dt_require_ndim(op, "logits", logits, 2);
    dt_require_live(op, logits);
    dt_require_same_device(op, logits, labels);
    dt_require_dtype(op, "labels", labels, DT_I32);
    if (labels->numel != logits->shape[0]) {
        char a[160], b[160];
        dt_fatal("%s: labels %s do not match logits %s (one label per row)", op, dt_tensor_desc(labels, a, sizeof a),
                 dt_tensor_desc(logits, b, sizeof b));
    }
}

dt_tensor *dt_softmax_cross_entropy(dt_tensor *logits, dt_tensor *labels, float smoothing) {
    check_labels("softmax_cross_entropy", logits, labels);
    if (!(smoothing >= 0.0f && smoothing < 1.0f)) dt_fatal("softmax_cross_entropy: label smoothing %g is not in [0, 1)", smoothing);
    int64_t N = DT_N(logits), K = DT_C(logits);
    dt_tensor *rows = dt_tensor_new1(logits->dev, N);
    DT_PICK(xent_k, logits->dev, logits->dtype, DT_NCHW)(N, K, logits->data, dt_data_i32(labels), smoothing,
                                                         dt_data_f32(rows));
    dt_tensor *loss = dt_tensor_new1(logits->dev, 1);
    dt_sum_raw(logits->dev, DT_F32, N, rows->data, 1.0f / (float)N, dt_data_f32(loss)); /* the mean over rows */
    dt_tensor_release(rows);
    dt_tensor *in[2] = {logits, labels};
    dt_node *n = dt_record("softmax_cross_entropy", xent_backward, loss, 2, in, sizeof(xent_ctx));
    if (n) ((xent_ctx *)n->ctx)->eps = smoothing;
    return loss;
}

void dt_topk_correct(const dt_tensor *logits, const dt_tensor *labels, float out[2]) {
    check_labels("topk_correct", logits, labels);
    int64_t N = DT_N(logits), K = DT_C(logits);
    float *dev = dt_dev_alloc(logits->dev, (size_t)N * 2 * sizeof(float));
    DT_PICK(topk_k, logits->dev, logits->dtype, DT_NCHW)(N, K, logits->data, dt_data_i32(labels), dev);
    float *h = dt_xmalloc((size_t)N * 2 * sizeof(float));
    if (logits->dev == DT_GPU) dt_copy_d2h(h, dev, (size_t)N * 2 * sizeof(float));
    else for (int64_t i = 0; i < 2 * N; i++) h[i] = dev[i];
    out[0] = out[1] = 0;
    for (int64_t i = 0; i < N; i++) {
        out[0] += h[2 * i];
        out[1] += h[2 * i + 1];
    }
    free(h);
    dt_dev_free(logits->dev, dev);
}
