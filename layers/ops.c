/* Pointwise ops, reductions and reshapes on the tape. */
#include <string.h>

#include "bias.h"
#include "dt_alloc.h"
#include "dt_dispatch.h"
#include "dt_ops.h"
#include "elementwise.h"
#include "gemm.h"
#include "reduce.h"

/* ---- add ---- */

static void add_backward(dt_node *n) {
    dt_tensor *dy = n->out->grad;
    for (int i = 0; i < 2; i++) {
        float beta;
        float *dx = dt_grad_dst(n->in[i], &beta);
        if (dx) DT_CALL(dy->dev, dt_axpby, dy->numel, 1.0f, dy->data, beta, dx);
    }
}

dt_tensor *dt_add(dt_tensor *a, dt_tensor *b) {
    dt_require_same_shape("add", a, b);
    dt_require_same_device("add", a, b);
    dt_require_live("add", a);
    dt_require_live("add", b);
    dt_tensor *y = dt_tensor_like(a);
    DT_CALL(a->dev, dt_add, a->numel, a->data, b->data, y->data);
    dt_tensor *in[2] = {a, b};
    dt_record("add", add_backward, y, 2, in, 0);
    return y;
}

/* ---- mul ---- */

static void mul_backward(dt_node *n) {
    dt_tensor *dy = n->out->grad, *a = n->in[0], *b = n->in[1];
    float beta;
    float *da = dt_grad_dst(a, &beta);
    if (da) DT_CALL(dy->dev, dt_mul_bwd, dy->numel, dy->data, b->data, beta, da);
    float *db = dt_grad_dst(b, &beta);
    if (db) DT_CALL(dy->dev, dt_mul_bwd, dy->numel, dy->data, a->data, beta, db);
}

dt_tensor *dt_mul(dt_tensor *a, dt_tensor *b) {
    dt_require_same_shape("mul", a, b);
    dt_require_same_device("mul", a, b);
    dt_require_live("mul", a);
    dt_require_live("mul", b);
    dt_tensor *y = dt_tensor_like(a);
    DT_CALL(a->dev, dt_mul, a->numel, a->data, b->data, y->data);
    dt_tensor *in[2] = {a, b};
    dt_record("mul", mul_backward, y, 2, in, 0);
    return y;
}

/* ---- relu, sigmoid, add_relu: the backward reads the output, not the input ---- */

static void relu_backward(dt_node *n) {
    dt_tensor *y = n->out;
    float beta;
    float *dx = dt_grad_dst(n->in[0], &beta);
    if (dx) DT_CALL(y->dev, dt_relu_bwd, y->numel, y->data, y->grad->data, beta, dx);
}

dt_tensor *dt_relu(dt_tensor *x) {
    dt_require_live("relu", x);
    dt_tensor *y = dt_tensor_like(x);
    DT_CALL(x->dev, dt_relu_fwd, x->numel, x->data, y->data);
    dt_record("relu", relu_backward, y, 1, &x, 0);
    return y;
}

static void sigmoid_backward(dt_node *n) {
    dt_tensor *y = n->out;
    float beta;
    float *dx = dt_grad_dst(n->in[0], &beta);
    if (dx) DT_CALL(y->dev, dt_sigmoid_bwd, y->numel, y->data, y->grad->data, beta, dx);
}

dt_tensor *dt_sigmoid(dt_tensor *x) {
    dt_require_live("sigmoid", x);
    dt_tensor *y = dt_tensor_like(x);
    DT_CALL(x->dev, dt_sigmoid_fwd, x->numel, x->data, y->data);
    dt_record("sigmoid", sigmoid_backward, y, 1, &x, 0);
    return y;
}

static void add_relu_backward(dt_node *n) {
    dt_tensor *y = n->out;
    for (int i = 0; i < 2; i++) {
        float beta;
        float *dx = dt_grad_dst(n->in[i], &beta);
        if (dx) DT_CALL(y->dev, dt_relu_bwd, y->numel, y->data, y->grad->data, beta, dx);
    }
}

dt_tensor *dt_add_relu(dt_tensor *a, dt_tensor *b) {
    dt_require_same_shape("add_relu", a, b);
    dt_require_same_device("add_relu", a, b);
    dt_require_live("add_relu", a);
    dt_require_live("add_relu", b);
    dt_tensor *y = dt_tensor_like(a);
    DT_CALL(a->dev, dt_add_relu_fwd, a->numel, a->data, b->data, y->data);
    dt_tensor *in[2] = {a, b};
    dt_record("add_relu", add_relu_backward, y, 2, in, 0);
    return y;
}

/* ---- sum / mean ---- */

typedef struct {
    float scale;
} sum_ctx;

static void sum_backward(dt_node *n) {
    dt_tensor *x = n->in[0];
    sum_ctx *c = n->ctx;
    float beta;
    float *dx = dt_grad_dst(x, &beta);
    if (dx) DT_CALL(x->dev, dt_broadcast_scalar, x->numel, n->out->grad->data, c->scale, beta, dx);
}

void dt_sum_raw(dt_dev dev, int64_t n, const float *x, float alpha, float *out) {
    if (dev == DT_GPU) {
#ifdef DT_CUDA
        void *ws = dt_gpu_malloc(dt_sum_cuda_ws_bytes());
        dt_sum_cuda(n, x, alpha, out, ws);
        dt_gpu_free(ws);
#else
        dt_fatal("sum: deftc was built with CUDA=0");
#endif
    } else {
        dt_sum_cpu(n, x, alpha, out);
    }
}

static dt_tensor *sum_scaled(dt_tensor *x, float scale, const char *name) {
    dt_require_live(name, x);
    dt_tensor *y = dt_tensor_new1(x->dev, 1);
    dt_sum_raw(x->dev, x->numel, x->data, scale, y->data);
    dt_node *n = dt_record(name, sum_backward, y, 1, &x, sizeof(sum_ctx));
    if (n) ((sum_ctx *)n->ctx)->scale = scale;
    return y;
}

dt_tensor *dt_sum(dt_tensor *x) { return sum_scaled(x, 1.0f, "sum"); }
dt_tensor *dt_mean(dt_tensor *x) {
    if (x->numel == 0) dt_fatal("mean of an empty tensor");
    return sum_scaled(x, 1.0f / (float)x->numel, "mean");
}

float dt_item(const dt_tensor *t) {
    if (t->numel != 1) {
        char b[128];
        dt_fatal("item: tensor %s has %lld elements, expected 1", dt_shape_str(t, b, sizeof b), (long long)t->numel);
    }
    float v;
    dt_tensor_download(t, &v);
    return v;
}

/* ---- reshape ---- */

static void reshape_backward(dt_node *n) {
    dt_tensor *dy = n->out->grad;
    float beta;
    float *dx = dt_grad_dst(n->in[0], &beta);
    if (dx) DT_CALL(dy->dev, dt_axpby, dy->numel, 1.0f, dy->data, beta, dx);
}

dt_tensor *dt_reshape(dt_tensor *x, int ndim, const int64_t *shape) {
    dt_tensor *y = dt_tensor_view(x, ndim, shape);
    dt_record("reshape", reshape_backward, y, 1, &x, 0);
    return y;
}

dt_tensor *dt_flatten2(dt_tensor *x) {
    if (x->ndim < 1) dt_fatal("flatten: a scalar has no batch dimension");
    int64_t s[2] = {x->shape[0], x->shape[0] ? x->numel / x->shape[0] : 0};
    return dt_reshape(x, 2, s);
}

/* ---- channel slice ---- */

typedef struct {
    int64_t c0;
} slice_ctx;

/* Copies channel block [c0, c0+cs) between [N, C, P] and [N, cs, P] as N*cs row copies. */
static void copy_channels(dt_dev dev, float *dst, int64_t dst_c, int64_t dst_c0, const float *src,
                          int64_t src_c, int64_t src_c0, int64_t N, int64_t cs, int64_t P,
                          float beta) {
    for (int64_t n = 0; n < N; n++) {
        float *d = dst + (n * dst_c + dst_c0) * P;
        const float *s = src + (n * src_c + src_c0) * P;
        DT_CALL(dev, dt_axpby, cs * P, 1.0f, s, beta, d);
    }
}

static void slice_backward(dt_node *n) {
    dt_tensor *x = n->in[0], *dy = n->out->grad;
    slice_ctx *c = n->ctx;
    float beta;
    float *dx = dt_grad_dst(x, &beta);
    if (!dx) return;
    int64_t N = x->shape[0], C = x->shape[1], P = x->numel / (N * C), cs = dy->shape[1];
    if (beta == 0.0f) DT_CALL(x->dev, dt_fill, x->numel, 0.0f, dx); /* channels outside the slice */
    copy_channels(x->dev, dx, C, c->c0, dy->data, cs, 0, N, cs, P, 1.0f);
}

dt_tensor *dt_slice_channels(dt_tensor *x, int64_t c0, int64_t c1) {
    dt_require_live("slice_channels", x);
    if (x->ndim < 2) dt_fatal("slice_channels: need at least [N, C], got %d dims", x->ndim);
    if (c0 < 0 || c1 > x->shape[1] || c0 >= c1)
        dt_fatal("slice_channels: [%lld, %lld) is not a channel range of a tensor with %lld channels",
                 (long long)c0, (long long)c1, (long long)x->shape[1]);
    int64_t shape[DT_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[1] = c1 - c0;
    dt_tensor *y = dt_tensor_new(x->ndim, shape, x->dev);
    int64_t N = x->shape[0], C = x->shape[1], P = (N * C) != 0 ? x->numel / (N * C) : 0;
    copy_channels(x->dev, y->data, c1 - c0, 0, x->data, C, c0, N, c1 - c0, P, 0.0f);
    dt_node *n = dt_record("slice_channels", slice_backward, y, 1, &x, sizeof(slice_ctx));
    if (n) ((slice_ctx *)n->ctx)->c0 = c0;
    return y;
}
