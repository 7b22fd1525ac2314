/* matmul and linear on the tape: forward and both gradients are GEMMs (cuBLAS on the GPU), in
 * the process's precision (dt_device.h). */
#include "bias.h"
#include "convert.h"
#include "dt_alloc.h"
#include "dt_dispatch.h"
#include "dt_ops.h"
#include "gemm.h"

/* Elements a row-major operand spans: rows of ld, the last one cols long. */
static int64_t extent(int64_t rows, int64_t cols, int64_t ld) { return rows > 0 ? (rows - 1) * ld + cols : 0; }

/* dt_gemm in the process's precision. bf16: both operands rounded to bf16 (copies: these
 * layers' operands are small - ResNet's classifier is 512 x 1000), fp32 accumulation and C;
 * fp32 and tf32: dt_gemm (cuBLAS applies TF32 by its math mode). */
static void gemm_prec(dt_dev dev, int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                      const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    if (dt_get_precision() != DT_BF16) {
        DT_CALL(dev, dt_gemm, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    int64_t na = ta ? extent(K, M, lda) : extent(M, K, lda), nb = tb ? extent(N, K, ldb) : extent(K, N, ldb);
    dt_bf16 *a = dt_dev_alloc(dev, (size_t)(na > 0 ? na : 1) * sizeof(dt_bf16));
    dt_bf16 *b = dt_dev_alloc(dev, (size_t)(nb > 0 ? nb : 1) * sizeof(dt_bf16));
    DT_CALL(dev, dt_f32_to_bf16, na, A, a);
    DT_CALL(dev, dt_f32_to_bf16, nb, B, b);
    DT_CALL(dev, dt_gemm_bf16, ta, tb, M, N, K, 1.0f, a, lda, b, ldb, beta, C, 0, ldc);
    dt_dev_free(dev, a);
    dt_dev_free(dev, b);
}

/* ---- matmul: y[M,N] = a[M,K] b[K,N] ---- */

static void matmul_backward(dt_node *n) {
    dt_tensor *a = n->in[0], *b = n->in[1], *dy = n->out->grad;
    int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1];
    float beta;
    float *da = dt_grad_dst(a, &beta); /* da[M,K] = dy[M,N] b^T */
    if (da) gemm_prec(a->dev, 0, 1, M, K, N, dy->data, N, b->data, N, beta, da, K);
    float *db = dt_grad_dst(b, &beta); /* db[K,N] = a^T dy */
    if (db) gemm_prec(a->dev, 1, 0, K, N, M, a->data, K, dy->data, N, beta, db, N);
}

dt_tensor *dt_matmul(dt_tensor *a, dt_tensor *b) {
    dt_require_ndim("matmul", "a", a, 2);
    dt_require_ndim("matmul", "b", b, 2);
    dt_require_same_device("matmul", a, b);
    dt_require_live("matmul", a);
    dt_require_live("matmul", b);
    if (a->shape[1] != b->shape[0]) {
        char x[64], y[64];
        dt_fatal("matmul: inner dimensions differ: %s x %s", dt_shape_str(a, x, sizeof x), dt_shape_str(b, y, sizeof y));
    }
    int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1];
    dt_tensor *y = dt_tensor_new2(a->dev, M, N);
    gemm_prec(a->dev, 0, 0, M, N, K, a->data, K, b->data, N, 0.0f, y->data, N);
    dt_tensor *in[2] = {a, b};
    dt_record("matmul", matmul_backward, y, 2, in, 0);
    return y;
}

/* ---- linear: y[B,O] = x[B,I] w[O,I]^T + bias[O] ---- */

static void linear_backward(dt_node *n) {
    dt_tensor *x = n->in[0], *w = n->in[1], *bias = n->in[2], *dy = n->out->grad;
    int64_t B = x->shape[0], I = x->shape[1], O = w->shape[0];
    float beta;
    float *dx = dt_grad_dst(x, &beta); /* dx[B,I] = dy[B,O] w[O,I] */
    if (dx) gemm_prec(x->dev, 0, 0, B, I, O, dy->data, O, w->data, I, beta, dx, I);
    float *dw = dt_grad_dst(w, &beta); /* dw[O,I] = dy^T x */
    if (dw) gemm_prec(x->dev, 1, 0, O, I, B, dy->data, O, x->data, I, beta, dw, I);
    float *db = dt_grad_dst(bias, &beta);
    if (db) DT_CALL(x->dev, dt_bias_rows_bwd, B, O, dy->data, beta, db);
}

dt_tensor *dt_linear(dt_tensor *x, dt_tensor *w, dt_tensor *bias) {
    dt_require_ndim("linear", "x", x, 2);
    dt_require_ndim("linear", "weight", w, 2);
    dt_require_same_device("linear", x, w);
    dt_require_live("linear", x);
    if (x->shape[1] != w->shape[1]) {
        char a[64], b[64];
        dt_fatal("linear: input %s does not fit weight %s (in_features %lld)", dt_shape_str(x, a, sizeof a),
                 dt_shape_str(w, b, sizeof b), (long long)w->shape[1]);
    }
    if (bias && (bias->ndim != 1 || bias->shape[0] != w->shape[0])) {
        char a[64];
        dt_fatal("linear: bias %s must be [%lld]", dt_shape_str(bias, a, sizeof a), (long long)w->shape[0]);
    }
    int64_t B = x->shape[0], I = x->shape[1], O = w->shape[0];
    dt_tensor *y = dt_tensor_new2(x->dev, B, O);
    gemm_prec(x->dev, 0, 1, B, O, I, x->data, I, w->data, I, 0.0f, y->data, O);
    if (bias) DT_CALL(x->dev, dt_bias_rows_fwd, B, O, bias->data, y->data);
    dt_tensor *in[3] = {x, w, bias};
    dt_record("linear", linear_backward, y, 3, in, 0);
    return y;
}
