/* Pointwise ops, reductions and reshapes on the tape. The pointwise ops are layout-agnostic
 * (element i of the output comes from element i of the inputs, in whatever layout they share):
 * their tables have one entry per (device, dtype) for any layout, f32 and bf16 (fp32 math,
 * one rounding per store: ops/pointwise/elementwise.h). Inputs must share dtype and layout; the
 * output inherits them. */
#include <stdlib.h>
#include <string.h>

#include "ops/pointwise/convert.h"
#include "core/dt_alloc.h"
#include "core/dt_common.h"
#include "ops/pointwise/dt_shared_kernels.h"
#include "core/dt_kernel.h"
#include "ops/dt_ops.h"
#include "ops/pointwise/dropout.h"
#include "ops/pointwise/elementwise.h"
#include "ops/pointwise/normalize_images.h"
#include "ops/pointwise/reduce.h"

#define EW_ENTRIES(t, fn)                                                  \
    DT_KERNEL(t, DT_CPU, DT_F32, DT_ANY_LAYOUT, fn##_f32_cpu),             \
    DT_KERNEL_CUDA(t, DT_GPU, DT_F32, DT_ANY_LAYOUT, fn##_f32_cuda),       \
    DT_KERNEL(t, DT_CPU, DT_BF16, DT_ANY_LAYOUT, fn##_bf16_cpu),           \
    DT_KERNEL_CUDA(t, DT_GPU, DT_BF16, DT_ANY_LAYOUT, fn##_bf16_cuda)
DT_OP_TABLE(add_k, "add", dt_ew_binary_fn, EW_ENTRIES(add_k, dt_add))
DT_OP_TABLE(mul_k, "mul", dt_ew_binary_fn, EW_ENTRIES(mul_k, dt_mul))
DT_OP_TABLE(add_relu_k, "add_relu", dt_ew_binary_fn, EW_ENTRIES(add_relu_k, dt_add_relu_fwd))
DT_OP_TABLE(relu_k, "relu", dt_ew_unary_fn, EW_ENTRIES(relu_k, dt_relu_fwd))
DT_OP_TABLE(relu6_k, "relu6", dt_ew_unary_fn, EW_ENTRIES(relu6_k, dt_relu6_fwd))
DT_OP_TABLE(sigmoid_k, "sigmoid", dt_ew_unary_fn, EW_ENTRIES(sigmoid_k, dt_sigmoid_fwd))
DT_OP_TABLE(mul_bwd_k, "mul (backward)", dt_ew_grad_fn, EW_ENTRIES(mul_bwd_k, dt_mul_bwd))
DT_OP_TABLE(relu_bwd_k, "relu (backward)", dt_ew_grad_fn, EW_ENTRIES(relu_bwd_k, dt_relu_bwd))
DT_OP_TABLE(relu6_bwd_k, "relu6 (backward)", dt_ew_grad_fn, EW_ENTRIES(relu6_bwd_k, dt_relu6_bwd))
DT_OP_TABLE(sigmoid_bwd_k, "sigmoid (backward)", dt_ew_grad_fn, EW_ENTRIES(sigmoid_bwd_k, dt_sigmoid_bwd))
/* dropout: the elementwise formats; the counter's tick has one entry per device (the counter:
 * 8 bytes of an f32 [2]) */
DT_OP_TABLE(dropout_k, "dropout", dt_dropout_fwd_fn, EW_ENTRIES(dropout_k, dt_dropout_fwd))
DT_OP_TABLE(dropout_bwd_k, "dropout (backward)", dt_dropout_bwd_fn, EW_ENTRIES(dropout_bwd_k, dt_dropout_bwd))
DT_OP_TABLE(dropout_tick_k, "dropout (counter)", dt_dropout_tick_fn,
            DT_TWINS(dropout_tick_k, dt_dropout_tick, DT_F32, DT_ANY_LAYOUT))
DT_OP_TABLE(accumulate_k, "gradient accumulation", dt_ew_accumulate_fn, EW_ENTRIES(accumulate_k, dt_accumulate))
DT_OP_TABLE(broadcast_k, "sum (backward)", dt_ew_broadcast_fn, EW_ENTRIES(broadcast_k, dt_broadcast_scalar))
DT_OP_TABLE(sum_k, "sum", dt_sum_fn, EW_ENTRIES(sum_k, dt_sum))
typedef void fill_fn(int64_t n, float v, float *x);
DT_OP_TABLE(fill_k, "slice_channels (zero fill)", fill_fn, DT_KERNEL(fill_k, DT_CPU, DT_F32, DT_NCHW, dt_fill_cpu),
            DT_KERNEL_CUDA(fill_k, DT_GPU, DT_F32, DT_NCHW, dt_fill_cuda))

/* Where to write t's gradient (dt_grad_dst); the pointwise backward kernels write it in t's own
 * dtype, so a gradient kept in another dtype (a bf16 working copy's f32 master) is refused. */
static void *grad_dst(const char *op, dt_tensor *t, float *beta) {
    void *d = dt_grad_dst(t, beta);
    if (d && dt_grad_dtype(t) != t->dtype) {
        char b[160];
        dt_fatal("%s: the gradient of %s would be %s; pointwise ops write gradients in their inputs' dtype", op,
                 dt_tensor_desc(t, b, sizeof b), dt_dtype_name(dt_grad_dtype(t)));
    }
    return d;
}

/* Two operands of a pointwise op: same shape, device, dtype and layout, both live. */
static void check_pair(const char *op, const dt_tensor *a, const dt_tensor *b) {
    dt_require_live(op, a);
    dt_require_live(op, b);
    dt_require_same_shape(op, a, b);
    dt_require_same_device(op, a, b);
    dt_require_same_type(op, a, b);
}

/* ---- add ---- */

static void add_backward(dt_node *n) {
    dt_tensor *dy = n->out->grad;
    for (int i = 0; i < 2; i++) {
        float beta;
        void *dx = grad_dst("add", n->in[i], &beta);
        if (dx) DT_PICK(accumulate_k, dy->dev, dy->dtype, dy->layout)(dy->numel, dy->data, beta, dx);
    }
}

dt_tensor *dt_add(dt_tensor *a, dt_tensor *b) {
    check_pair("add", a, b);
    dt_tensor *y = dt_tensor_like(a);
    DT_PICK(add_k, a->dev, a->dtype, a->layout)(a->numel, a->data, b->data, y->data);
    dt_tensor *in[2] = {a, b};
    dt_record("add", add_backward, y, 2, in, 0);
    return y;
}

/* ---- mul ---- */

static void mul_backward(dt_node *n) {
    dt_tensor *dy = n->out->grad, *a = n->in[0], *b = n->in[1];
    float beta;
    void *da = grad_dst("mul", a, &beta);
    if (da) DT_PICK(mul_bwd_k, dy->dev, dy->dtype, dy->layout)(dy->numel, b->data, dy->data, beta, da);
    void *db = grad_dst("mul", b, &beta);
    if (db) DT_PICK(mul_bwd_k, dy->dev, dy->dtype, dy->layout)(dy->numel, a->data, dy->data, beta, db);
}

dt_tensor *dt_mul(dt_tensor *a, dt_tensor *b) {
    check_pair("mul", a, b);
    dt_tensor *y = dt_tensor_like(a);
    DT_PICK(mul_k, a->dev, a->dtype, a->layout)(a->numel, a->data, b->data, y->data);
    dt_tensor *in[2] = {a, b};
    dt_record("mul", mul_backward, y, 2, in, 0);
    return y;
}

/* ---- relu, relu6, sigmoid, add_relu: the backward reads the output, not the input ---- */

static void relu_backward(dt_node *n) {
    dt_tensor *y = n->out;
    float beta;
    void *dx = grad_dst("relu", n->in[0], &beta);
    if (dx) DT_PICK(relu_bwd_k, y->dev, y->dtype, y->layout)(y->numel, y->data, y->grad->data, beta, dx);
}

dt_tensor *dt_relu(dt_tensor *x) {
    dt_require_live("relu", x);
    dt_tensor *y = dt_tensor_like(x);
    DT_PICK(relu_k, x->dev, x->dtype, x->layout)(x->numel, x->data, y->data);
    dt_record("relu", relu_backward, y, 1, &x, 0);
    return y;
}

static void relu6_backward(dt_node *n) {
    dt_tensor *y = n->out;
    float beta;
    void *dx = grad_dst("relu6", n->in[0], &beta);
    if (dx) DT_PICK(relu6_bwd_k, y->dev, y->dtype, y->layout)(y->numel, y->data, y->grad->data, beta, dx);
}

dt_tensor *dt_relu6(dt_tensor *x) {
    dt_require_live("relu6", x);
    dt_tensor *y = dt_tensor_like(x);
    DT_PICK(relu6_k, x->dev, x->dtype, x->layout)(x->numel, x->data, y->data);
    dt_record("relu6", relu6_backward, y, 1, &x, 0);
    return y;
}

/* ---- dropout: the mask recomputed from (seed, the call's counter snapshot) in the backward ---- */

typedef struct {
    float p;
    uint64_t seed;
} dropout_ctx;

static void dropout_backward(dt_node *n) {
    const dropout_ctx *c = n->ctx;
    dt_tensor *dy = n->out->grad;
    float beta;
    void *dx = grad_dst("dropout", n->in[0], &beta);
    if (dx)
        DT_PICK(dropout_bwd_k, dy->dev, dy->dtype, dy->layout)(dy->numel, c->p, c->seed, (const int64_t *)n->saved[0]->data,
                                                               dy->data, beta, dx);
}

dt_tensor *dt_dropout_counter_new(dt_dev dev) {
    int64_t two = 2;
    dt_tensor *t = dt_tensor_new_unscoped(1, &two, dev, DT_F32, DT_NCHW);
    dt_tensor_fill(t, 0.0f); /* all bits 0: the int64 0 */
    return t;
}

int64_t dt_dropout_counter_value(const dt_tensor *counter) {
    int64_t v;
    dt_tensor_download(counter, &v); /* 8 bytes */
    return v;
}

static void check_counter(const dt_tensor *x, const dt_tensor *counter) {
    if (!counter || counter->dtype != DT_F32 || counter->numel != 2 || counter->dev != x->dev)
        dt_fatal("dropout: the counter must be dt_dropout_counter_new's 8 bytes on the input's device");
}

dt_tensor *dt_dropout(dt_tensor *x, float p, uint64_t seed, dt_tensor *counter, int training) {
    dt_require_live("dropout", x);
    if (!(p >= 0.0f && p < 1.0f)) dt_fatal("dropout: p = %g must be in [0, 1)", p);
    if (!training || p == 0.0f) return x; /* the identity, as nn.Dropout in eval mode or at p = 0 */
    check_counter(x, counter);
    int64_t two = 2;
    dt_tensor *snap = dt_tensor_new_as(1, &two, x->dev, DT_F32, DT_NCHW);
    DT_PICK(dropout_tick_k, x->dev, DT_F32, DT_NCHW)((int64_t *)counter->data, (int64_t *)snap->data);
    dt_tensor *y = dt_tensor_like(x);
    DT_PICK(dropout_k, x->dev, x->dtype, x->layout)(x->numel, p, seed, (const int64_t *)snap->data, x->data, y->data);
    dt_node *n = dt_record("dropout", dropout_backward, y, 1, &x, sizeof(dropout_ctx));
    if (n) {
        *(dropout_ctx *)n->ctx = (dropout_ctx){p, seed};
        dt_node_save(n, snap);
    }
    return y;
}

static void sigmoid_backward(dt_node *n) {
    dt_tensor *y = n->out;
    float beta;
    void *dx = grad_dst("sigmoid", n->in[0], &beta);
    if (dx) DT_PICK(sigmoid_bwd_k, y->dev, y->dtype, y->layout)(y->numel, y->data, y->grad->data, beta, dx);
}

dt_tensor *dt_sigmoid(dt_tensor *x) {
    dt_require_live("sigmoid", x);
    dt_tensor *y = dt_tensor_like(x);
    DT_PICK(sigmoid_k, x->dev, x->dtype, x->layout)(x->numel, x->data, y->data);
    dt_record("sigmoid", sigmoid_backward, y, 1, &x, 0);
    return y;
}

static void add_relu_backward(dt_node *n) {
    dt_tensor *y = n->out;
    for (int i = 0; i < 2; i++) {
        float beta;
        void *dx = grad_dst("add_relu", n->in[i], &beta);
        if (dx) DT_PICK(relu_bwd_k, y->dev, y->dtype, y->layout)(y->numel, y->data, y->grad->data, beta, dx);
    }
}

dt_tensor *dt_add_relu(dt_tensor *a, dt_tensor *b) {
    check_pair("add_relu", a, b);
    dt_tensor *y = dt_tensor_like(a);
    DT_PICK(add_relu_k, a->dev, a->dtype, a->layout)(a->numel, a->data, b->data, y->data);
    dt_tensor *in[2] = {a, b};
    dt_record("add_relu", add_relu_backward, y, 2, in, 0);
    return y;
}

/* ---- sum / mean: f32 or bf16 in, an f32 [1] out ---- */

typedef struct {
    float scale;
} sum_ctx;

static void sum_backward(dt_node *n) {
    dt_tensor *x = n->in[0];
    const sum_ctx *c = n->ctx;
    float beta;
    void *dx = grad_dst(n->op, x, &beta);
    if (dx)
        DT_PICK(broadcast_k, x->dev, x->dtype, x->layout)(x->numel, dt_data_f32(n->out->grad), c->scale, beta, dx);
}

void dt_sum_raw(dt_dev dev, dt_dtype dtype, int64_t n, const void *x, float alpha, float *out) {
    void *ws = dt_dev_alloc(dev, DT_SUM_WS_BYTES);
    DT_PICK(sum_k, dev, dtype, DT_NCHW)(n, x, alpha, out, ws);
    dt_dev_free(dev, ws);
}

static dt_tensor *sum_scaled(dt_tensor *x, float scale, const char *name) {
    dt_require_live(name, x);
    dt_tensor *y = dt_tensor_new1(x->dev, 1);
    dt_sum_raw(x->dev, x->dtype, x->numel, x->data, scale, dt_data_f32(y));
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
        char b[160];
        dt_fatal("item: tensor %s has %lld elements, expected 1", dt_tensor_desc(t, b, sizeof b), (long long)t->numel);
    }
    float *h = dt_tensor_host_copy(t), v = h[0];
    free(h);
    return v;
}

/* ---- reshape ---- */

static void reshape_backward(dt_node *n) {
    dt_tensor *dy = n->out->grad;
    float beta;
    void *dx = grad_dst("reshape", n->in[0], &beta);
    if (dx) DT_PICK(accumulate_k, dy->dev, dy->dtype, dy->layout)(dy->numel, dy->data, beta, dx);
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

/* ---- channel slice (f32 NCHW) ---- */

typedef struct {
    int64_t c0;
} slice_ctx;

/* Writes (beta 0) or adds (beta 1) channel block [src_c0, src_c0 + cs) of src [N, src_c, P] into
 * block [dst_c0, dst_c0 + cs) of dst [N, dst_c, P]: N copies of cs*P contiguous elements. */
static void copy_channels(dt_dev dev, float *dst, int64_t dst_c, int64_t dst_c0, const float *src, int64_t src_c,
                          int64_t src_c0, int64_t N, int64_t cs, int64_t P, float beta) {
    for (int64_t n = 0; n < N; n++) {
        float *d = dst + (n * dst_c + dst_c0) * P;
        const float *s = src + (n * src_c + src_c0) * P;
        DT_PICK(accumulate_k, dev, DT_F32, DT_NCHW)(cs * P, s, beta, d);
    }
}

static void slice_backward(dt_node *n) {
    dt_tensor *x = n->in[0], *dy = n->out->grad;
    const slice_ctx *c = n->ctx;
    float beta;
    float *dx = grad_dst("slice_channels", x, &beta);
    if (!dx) return;
    int64_t N = x->shape[0], C = x->shape[1], P = x->numel / (N * C), cs = dy->shape[1];
    if (beta == 0.0f) DT_PICK(fill_k, x->dev, DT_F32, DT_NCHW)(x->numel, 0.0f, dx); /* channels outside the slice */
    copy_channels(x->dev, dx, C, c->c0, dt_data_f32(dy), cs, 0, N, cs, P, 1.0f);
}

dt_tensor *dt_slice_channels(dt_tensor *x, int64_t c0, int64_t c1) {
    dt_require_live("slice_channels", x);
    dt_require_dtype("slice_channels", "input", x, DT_F32);
    dt_require_layout("slice_channels", "input", x, DT_NCHW);
    if (x->ndim < 2) dt_fatal("slice_channels: need at least [N, C], got %d dims", x->ndim);
    if (c0 < 0 || c1 > x->shape[1] || c0 >= c1)
        dt_fatal("slice_channels: [%lld, %lld) is not a channel range of a tensor with %lld channels",
                 (long long)c0, (long long)c1, (long long)x->shape[1]);
    int64_t shape[DT_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[1] = c1 - c0;
    dt_tensor *y = dt_tensor_new(x->ndim, shape, x->dev);
    int64_t N = x->shape[0], C = x->shape[1], P = (N * C) != 0 ? x->numel / (N * C) : 0;
    copy_channels(x->dev, dt_data_f32(y), c1 - c0, 0, dt_data_f32(x), C, c0, N, c1 - c0, P, 0.0f);
    dt_node *n = dt_record("slice_channels", slice_backward, y, 1, &x, sizeof(slice_ctx));
    if (n) ((slice_ctx *)n->ctx)->c0 = c0;
    return y;
}

/* ---- convert: dtype and layout ---- */

typedef struct {
    dt_dtype dtype;
    dt_layout layout;
} convert_ctx;

/* N, C, P of a tensor for the convert kernels (non-image tensors: one row of numel). */
static void image_dims(const dt_tensor *t, int64_t *N, int64_t *C, int64_t *P) {
    if (t->ndim == 4) {
        *N = t->shape[0];
        *C = t->shape[1];
        *P = t->shape[2] * t->shape[3];
    } else {
        *N = 1;
        *C = 1;
        *P = t->numel;
    }
}

static void convert_backward(dt_node *n) {
    dt_tensor *x = n->in[0], *dy = n->out->grad;
    float beta;
    void *dx = dt_grad_dst(x, &beta);
    if (!dx) return;
    int64_t N, C, P;
    image_dims(x, &N, &C, &P);
    DT_PICK(dt_convert_k, x->dev, dy->dtype, DT_NCHW)(N, C, P, dy->data, dy->dtype, dy->layout, beta, dx, dt_grad_dtype(x), x->layout);
}

dt_tensor *dt_convert(dt_tensor *x, dt_dtype dtype, dt_layout layout) {
    dt_require_live("convert", x);
    if (layout == DT_NHWC && x->ndim != 4) {
        char d[160];
        dt_fatal("convert: %s cannot be channels last (4 dims needed)", dt_tensor_desc(x, d, sizeof d));
    }
    if (x->dtype == dtype && x->layout == layout) return x;
    if (x->requires_grad && (dt_dtype_is_int(dtype) || dt_dtype_is_int(x->dtype)))
        dt_fatal("convert: integer tensors carry no gradient (%s -> %s)", dt_dtype_name(x->dtype), dt_dtype_name(dtype));
    dt_tensor *y = dt_tensor_new_as(x->ndim, x->shape, x->dev, dtype, layout);
    int64_t N, C, P;
    image_dims(x, &N, &C, &P);
    DT_PICK(dt_convert_k, x->dev, x->dtype, DT_NCHW)(N, C, P, x->data, x->dtype, x->layout, 0.0f, y->data, dtype, layout);
    dt_node *n = dt_record("convert", convert_backward, y, 1, &x, sizeof(convert_ctx));
    if (n) *(convert_ctx *)n->ctx = (convert_ctx){dtype, layout};
    return y;
}

/* ---- normalize_images: u8 [N, H, W, 3] -> a model's input ---- */

typedef __typeof__(dt_normalize_images_cpu) normalize_images_fn;
/* keyed by the output's (dtype, layout): the three a model's input can have */
DT_OP_TABLE(normalize_images_k, "normalize_images", normalize_images_fn,
            DT_TWINS(normalize_images_k, dt_normalize_images, DT_F32, DT_NCHW),
            DT_TWINS(normalize_images_k, dt_normalize_images, DT_F32, DT_NHWC),
            DT_TWINS(normalize_images_k, dt_normalize_images, DT_BF16, DT_NHWC))

dt_tensor *dt_normalize_images(const dt_tensor *x, const float mean[3], const float std[3], dt_dtype dtype,
                               dt_layout layout) {
    dt_require_live("normalize_images", x);
    dt_require_ndim("normalize_images", "images", x, 4);
    dt_require_dtype("normalize_images", "images", x, DT_U8);
    dt_require_layout("normalize_images", "images", x, DT_NCHW); /* row-major [N, H, W, 3] */
    if (x->shape[3] != 3) {
        char s[96];
        dt_fatal("normalize_images: images %s must be [N, H, W, 3] (RGB last)", dt_shape_str(x, s, sizeof s));
    }
    dt_tensor *y = dt_tensor_new4_as(x->dev, dtype, layout, x->shape[0], 3, x->shape[1], x->shape[2]);
    DT_PICK(normalize_images_k, x->dev, dtype, layout)(x->shape[0], x->shape[1] * x->shape[2], x->data, mean, std,
                                                       y->data, dtype, layout);
    return y;
}
