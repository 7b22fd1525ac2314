/* Softmax cross-entropy (mean over the batch) and top-k accuracy. */
#include <stdlib.h>

#include "dt_alloc.h"
#include "dt_dispatch.h"
#include "dt_layers.h"
#include "dt_ops.h"
#include "loss.h"

typedef struct {
    float eps;
} xent_ctx;

static void xent_backward(dt_node *n) {
    dt_tensor *logits = n->in[0], *labels = n->in[1];
    float beta;
    float *d = dt_grad_dst(logits, &beta);
    if (d) DT_CALL(logits->dev, dt_xent_bwd, logits->shape[0], logits->shape[1], logits->data, labels->data,
                   ((xent_ctx *)n->ctx)->eps, n->out->grad->data, beta, d);
}

static void check_labels(const char *op, const dt_tensor *logits, const dt_tensor *labels) {
    dt_require_ndim(op, "logits", logits, 2);
    dt_require_same_device(op, logits, labels);
    if (labels->numel != logits->shape[0]) {
        char a[64], b[64];
        dt_fatal("%s: labels %s do not match logits %s (one label per row)", op, dt_shape_str(labels, a, sizeof a),
                 dt_shape_str(logits, b, sizeof b));
    }
}

dt_tensor *dt_softmax_cross_entropy(dt_tensor *logits, dt_tensor *labels, float smoothing) {
    check_labels("softmax_cross_entropy", logits, labels);
    dt_require_live("softmax_cross_entropy", logits);
    if (!(smoothing >= 0.0f && smoothing < 1.0f)) dt_fatal("softmax_cross_entropy: label smoothing %g is not in [0, 1)", smoothing);
    int64_t N = logits->shape[0], K = logits->shape[1];
    dt_tensor *rows = dt_tensor_new1(logits->dev, N);
    DT_CALL(logits->dev, dt_xent_fwd, N, K, logits->data, labels->data, smoothing, rows->data);
    dt_tensor *loss = dt_tensor_new1(logits->dev, 1);
    dt_sum_raw(logits->dev, N, rows->data, 1.0f / (float)N, loss->data); /* the mean over rows */
    dt_tensor_release(rows);
    dt_tensor *in[2] = {logits, labels};
    dt_node *n = dt_record("softmax_cross_entropy", xent_backward, loss, 2, in, sizeof(xent_ctx));
    if (n) ((xent_ctx *)n->ctx)->eps = smoothing;
    return loss;
}

void dt_topk_correct(const dt_tensor *logits, const dt_tensor *labels, float out[2]) {
    check_labels("topk_correct", logits, labels);
    int64_t N = logits->shape[0], K = logits->shape[1];
    float *dev = dt_dev_alloc(logits->dev, (size_t)N * 2 * sizeof(float));
    DT_CALL(logits->dev, dt_topk, N, K, logits->data, labels->data, dev);
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
