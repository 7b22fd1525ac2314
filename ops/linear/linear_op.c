/* matmul and linear on the tape: forward and both gradients are GEMMs (cuBLAS on the GPU).
 * f32 operands multiply strict or on TF32 (math); bf16 operands (a bf16 model's activations and
 * its weights' working copies) in bf16 with fp32 sums, results rounded once to bf16; a weight's
 * gradient is f32 either way (dt_grad_dtype). */
#include "ops/pointwise/bias.h"
#include "core/dt_alloc.h"
#include "core/dt_common.h"
#include "ops/linear/dt_gemm_call.h"
#include "ops/pointwise/dt_shared_kernels.h"
#include "ops/dt_ops.h"


typedef struct {
    dt_math math;
} gemm_ctx;

/* C = op(A) op(B) (+ beta C): operands of `dtype`, C of c_dtype. */
static void gemm(dt_dev dev, dt_dtype dtype, dt_math math, int ta, int tb, int64_t M, int64_t N, int64_t K,
                 const void *A, int64_t lda, const void *B, int64_t ldb, float beta, void *C, dt_dtype c_dtype,
                 int64_t ldc) {
    dt_gemm_call(dev, dtype, math, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, c_dtype, ldc);
}

static void check_pair(const char *op, const dt_tensor *a, const dt_tensor *b) {
    dt_require_same_device(op, a, b);
    dt_require_live(op, a);
    dt_require_live(op, b);
    char x[160], y[160];
    if (a->dtype != b->dtype || (a->dtype != DT_F32 && a->dtype != DT_BF16))
        dt_fatal("%s: operands %s and %s must both be f32 or both bf16 (a bf16 model passes its weights' working "
                 "copies, dt_param_work)", op, dt_tensor_desc(a, x, sizeof x), dt_tensor_desc(b, y, sizeof y));
}

/* ---- matmul: y[M,N] = a[M,K] b[K,N] ---- */

static void matmul_backward(dt_node *n) {
    dt_tensor *a = n->in[0], *b = n->in[1], *dy = n->out->grad;
    dt_math math = ((gemm_ctx *)n->ctx)->math;
    int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1];
    float beta;
    void *da = dt_grad_dst(a, &beta); /* da[M,K] = dy[M,N] b^T */
    if (da) gemm(a->dev, a->dtype, math, 0, 1, M, K, N, dy->data, N, b->data, N, beta, da, dt_grad_dtype(a), K);
    void *db = dt_grad_dst(b, &beta); /* db[K,N] = a^T dy */
    if (db) gemm(a->dev, a->dtype, math, 1, 0, K, N, M, a->data, K, dy->data, N, beta, db, dt_grad_dtype(b), N);
}

dt_tensor *dt_matmul(dt_tensor *a, dt_tensor *b, dt_math math) {
    dt_require_ndim("matmul", "a", a, 2);
    dt_require_ndim("matmul", "b", b, 2);
    check_pair("matmul", a, b);
    if (a->shape[1] != b->shape[0]) {
        char x[64], y[64];
        dt_fatal("matmul: inner dimensions differ: %s x %s", dt_shape_str(a, x, sizeof x), dt_shape_str(b, y, sizeof y));
    }
    int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1], s[2] = {M, N};
    dt_tensor *y = dt_tensor_new_as(2, s, a->dev, a->dtype, DT_NCHW);
    gemm(a->dev, a->dtype, math, 0, 0, M, N, K, a->data, K, b->data, N, 0.0f, y->data, y->dtype, N);
    dt_tensor *in[2] = {a, b};
    dt_node *n = dt_record("matmul", matmul_backward, y, 2, in, sizeof(gemm_ctx));
    if (n) ((gemm_ctx *)n->ctx)->math = math;
    return y;
}

/* ---- linear: y[B,O] = x[B,I] w[O,I]^T + bias[O] ---- */

static void linear_backward(dt_node *n) {
    dt_tensor *x = n->in[0], *w = n->in[1], *bias = n->in[2], *dy = n->out->grad;
    dt_math math = ((gemm_ctx *)n->ctx)->math;
    int64_t B = x->shape[0], I = x->shape[1], O = w->shape[0];
    float beta;
    void *dx = dt_grad_dst(x, &beta); /* dx[B,I] = dy[B,O] w[O,I] */
    if (dx) gemm(x->dev, x->dtype, math, 0, 0, B, I, O, dy->data, O, w->data, I, beta, dx, dt_grad_dtype(x), I);
    void *dw = dt_grad_dst(w, &beta); /* dw[O,I] = dy^T x */
    if (dw) gemm(x->dev, x->dtype, math, 1, 0, O, I, B, dy->data, O, x->data, I, beta, dw, dt_grad_dtype(w), I);
    float *db = dt_grad_dst(bias, &beta);
    if (db) DT_PICK(dt_bias_rows_bwd_k, x->dev, dy->dtype, DT_NCHW)(B, O, dy->data, beta, db);
}

dt_tensor *dt_linear(dt_tensor *x, dt_tensor *w, dt_tensor *bias, dt_math math) {
    dt_require_ndim("linear", "x", x, 2);
    dt_require_ndim("linear", "weight", w, 2);
    check_pair("linear", x, w);
    if (x->shape[1] != w->shape[1]) {
        char a[64], b[64];
        dt_fatal("linear: input %s does not fit weight %s (in_features %lld)", dt_shape_str(x, a, sizeof a),
                 dt_shape_str(w, b, sizeof b), (long long)w->shape[1]);
    }
    if (bias && (bias->ndim != 1 || bias->shape[0] != w->shape[0])) {
        char a[64];
        dt_fatal("linear: bias %s must be [%lld]", dt_shape_str(bias, a, sizeof a), (long long)w->shape[0]);
    }
    if (bias) dt_require_dtype("linear", "bias", bias, DT_F32);
    int64_t B = x->shape[0], I = x->shape[1], O = w->shape[0], s[2] = {B, O};
    dt_tensor *y = dt_tensor_new_as(2, s, x->dev, x->dtype, DT_NCHW);
    gemm(x->dev, x->dtype, math, 0, 1, B, O, I, x->data, I, w->data, I, 0.0f, y->data, y->dtype, O);
    if (bias) DT_PICK(dt_bias_rows_fwd_k, x->dev, y->dtype, DT_NCHW)(B, O, bias->data, y->data);
    dt_tensor *in[3] = {x, w, bias};
    dt_node *n = dt_record("linear", linear_backward, y, 3, in, sizeof(gemm_ctx));
    if (n) ((gemm_ctx *)n->ctx)->math = math;
    return y;
}
