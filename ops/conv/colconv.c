/* The chunked column-conv skeleton (see dt_colconv.h). */
#include "ops/conv/dt_colconv.h"

#include "ops/pointwise/bias.h"
#include "core/dt_alloc.h"
#include "core/dt_common.h"
#include "ops/pointwise/dt_shared_kernels.h"
#include "ops/linear/dt_gemm_call.h"
#include "core/dt_kernel.h"
#include "ops/pointwise/layout.h"
#include "ops/dt_layers.h" /* the column budget (declared with the ops) */

/* The column budget every column conv (and the Hopper engine's columns path) chunks under. */
static size_t g_col_budget;

void dt_conv_set_col_budget(size_t bytes) { g_col_budget = bytes; }
size_t dt_conv_col_budget(void) {
    if (!g_col_budget) g_col_budget = (size_t)dt_env_long("DT_COL_BUDGET_MB", 256) << 20;
    return g_col_budget;
}

int64_t dt_conv_chunk(int64_t N, int64_t col_elems_per_image, size_t elem_bytes) {
    int64_t nb = (int64_t)(dt_conv_col_budget() / elem_bytes) / (col_elems_per_image ? col_elems_per_image : 1);
    if (nb < 1) nb = 1;
    return nb < N ? nb : N;
}


/* The f32 NCHW relayouts around the GEMMs of NCHW tensors (layout.h). */
DT_OP_TABLE(cnhw_to_nchw_k, "relayout cnhw -> nchw", __typeof__(dt_cnhw_to_nchw_cpu),
            DT_TWINS(cnhw_to_nchw_k, dt_cnhw_to_nchw, DT_F32, DT_NCHW))
DT_OP_TABLE(nchw_to_cnhw_k, "relayout nchw -> cnhw", __typeof__(dt_nchw_to_cnhw_cpu),
            DT_TWINS(nchw_to_cnhw_k, dt_nchw_to_cnhw, DT_F32, DT_NCHW))
DT_OP_TABLE(bias_nchw_k, "bias (nchw)", __typeof__(dt_bias_nchw_fwd_cpu), DT_TWINS(bias_nchw_k, dt_bias_nchw_fwd, DT_F32, DT_NCHW))

/* C = op(A) op(B) (+ beta C) with the call's operand dtype; C of c_dtype. */
static void gemm(const dt_colconv *cc, int ta, int tb, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                 const void *B, int64_t ldb, float beta, void *C, dt_dtype c_dtype, int64_t ldc) {
    dt_gemm_call(cc->dev, cc->dtype, cc->math, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, c_dtype, ldc);
}

static void check(const dt_colconv *cc) {
    if (cc->dtype != DT_F32 && cc->dtype != DT_BF16)
        dt_fatal("column conv: no %s products (f32 or bf16)", dt_dtype_name(cc->dtype));
    if ((cc->layout == DT_COLS_CN || !cc->nhwc) && cc->dtype != DT_F32)
        dt_fatal("column conv: NCHW tensors are f32 only (the %s path is channels last)", dt_dtype_name(cc->dtype));
}

/* The chunk's columns: the caller's memory (cols_direct), or the buffer filled now. */
static const void *cols_of(const dt_colconv *cc, void *buf, int64_t n0, int64_t b) {
    if (cc->cols_direct) return cc->cols_direct(cc->ctx, n0);
    cc->fill(cc->ctx, n0, b, buf);
    return buf;
}

void dt_colconv_forward(const dt_colconv *cc, const void *w, const float *bias, void *y) {
    check(cc);
    dt_dev dev = cc->dev;
    int64_t P = cc->P, R = cc->R, Cout = cc->Cout;
    size_t el = dt_colconv_elem(cc);
    void *col = NULL; /* the column buffer, at the first chunk that fills it */
    int direct = cc->layout == DT_COLS_NC ? cc->nhwc : cc->nb == 1; /* the GEMM writes y itself */
    if (cc->forward_direct && !(cc->layout == DT_COLS_NC && direct))
        dt_fatal("column conv: a direct forward writes channels-last y");
    float *t = direct ? NULL : dt_dev_alloc(dev, (size_t)Cout * cc->nb * P * sizeof(float)); /* GEMM result */
    for (int64_t n0 = 0; n0 < cc->N; n0 += cc->nb) {
        int64_t b = cc->N - n0 < cc->nb ? cc->N - n0 : cc->nb, bP = b * P;
        if (cc->begin) cc->begin(cc->ctx, n0, b, 0);
        if (cc->forward_direct && cc->forward_direct(cc->ctx, n0, b, w, bias, (char *)y + (size_t)(n0 * Cout * P) * el))
            continue;
        if (!col && !cc->cols_direct) col = dt_dev_alloc(dev, (size_t)R * cc->nb * P * el);
        const void *cols = cols_of(cc, col, n0, b);
        if (cc->layout == DT_COLS_NC) { /* yT [bP, Cout] = col [bP, R] . w^T */
            void *yc = (char *)y + (size_t)(n0 * Cout * P) * el;
            gemm(cc, 0, 1, bP, Cout, R, cols, R, w, R, 0.0f, direct ? yc : t, cc->dtype, Cout);
            if (direct && bias) DT_PICK(dt_bias_rows_fwd_k, dev, cc->dtype, DT_NCHW)(bP, Cout, bias, yc);
            if (!direct) DT_PICK(dt_nhwc_to_nchw_k, dev, DT_F32, DT_NCHW)(b, Cout, P, t, Cout, bias, 0.0f, yc);
        } else if (direct) {
            float *yc = (float *)y + n0 * Cout * P;
            gemm(cc, 0, 0, Cout, P, R, w, R, cols, P, 0.0f, yc, DT_F32, P);
            if (bias) DT_PICK(bias_nchw_k, dev, DT_F32, DT_NCHW)(1, Cout, P, bias, yc);
        } else { /* t [Cout, bP] = w . col */
            gemm(cc, 0, 0, Cout, bP, R, w, R, cols, bP, 0.0f, t, DT_F32, bP);
            DT_PICK(cnhw_to_nchw_k, dev, DT_F32, DT_NCHW)(t, b, Cout, P, bias, (float *)y + n0 * Cout * P);
        }
    }
    if (col) dt_dev_free(dev, col);
    if (t) dt_dev_free(dev, t);
}

void dt_colconv_backward(const dt_colconv *cc, const void *w, const void *dy, float *dw, float beta_w) {
    if (!dw && !cc->adjoint && !cc->dcols_direct) return;
    check(cc);
    if (cc->dcols_direct && (cc->layout != DT_COLS_NC || cc->adjoint))
        dt_fatal("column conv: a direct column gradient is channels last, and replaces the adjoint");
    dt_dev dev = cc->dev;
    int64_t P = cc->P, R = cc->R, Cout = cc->Cout;
    size_t el = dt_colconv_elem(cc);
    /* the column buffer also holds the column gradient */
    void *col = cc->cols_direct && !cc->adjoint ? NULL : dt_dev_alloc(dev, (size_t)R * cc->nb * P * el);
    int direct = cc->layout == DT_COLS_NC ? cc->nhwc : cc->nb == 1; /* dy is already the GEMM's operand */
    float *dyt = direct ? NULL : dt_dev_alloc(dev, (size_t)Cout * cc->nb * P * sizeof(float));
    for (int64_t n0 = 0; n0 < cc->N; n0 += cc->nb) {
        int64_t b = cc->N - n0 < cc->nb ? cc->N - n0 : cc->nb, bP = b * P;
        const void *dyc = (const char *)dy + (size_t)(n0 * Cout * P) * el;
        float bw = n0 == 0 ? beta_w : 1.0f;
        if (cc->begin) cc->begin(cc->ctx, n0, b, 1);
        if (cc->layout == DT_COLS_NC) {
            if (!direct) {
                DT_PICK(dt_nchw_to_nhwc_k, dev, DT_F32, DT_NCHW)(b, Cout, P, dyc, Cout, dyt); /* [bP, Cout] */
                dyc = dyt;
            }
            /* dW [Cout, R] += dYT^T col;  dcol [bP, R] = dYT w */
            if (dw) gemm(cc, 1, 0, Cout, R, bP, dyc, Cout, cols_of(cc, col, n0, b), R, bw, dw, DT_F32, R);
            if (cc->dcols_direct)
                gemm(cc, 0, 0, bP, R, Cout, dyc, Cout, w, R, cc->dcols_beta, cc->dcols_direct(cc->ctx, n0), cc->dtype, R);
            if (cc->adjoint) {
                gemm(cc, 0, 0, bP, R, Cout, dyc, Cout, w, R, 0.0f, col, cc->dtype, R);
                cc->adjoint(cc->ctx, n0, b, col);
            }
        } else {
            if (!direct) {
                DT_PICK(nchw_to_cnhw_k, dev, DT_F32, DT_NCHW)(dyc, b, Cout, P, dyt); /* [Cout, bP] */
                dyc = dyt;
            }
            if (dw) gemm(cc, 0, 1, Cout, R, bP, dyc, bP, cols_of(cc, col, n0, b), bP, bw, dw, DT_F32, R);
            if (cc->adjoint) {
                gemm(cc, 1, 0, R, bP, Cout, w, R, dyc, bP, 0.0f, col, DT_F32, bP);
                cc->adjoint(cc->ctx, n0, b, col);
            }
        }
    }
    if (col) dt_dev_free(dev, col);
    if (dyt) dt_dev_free(dev, dyt);
}
