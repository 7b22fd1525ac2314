/* The chunked column-conv skeleton (see dt_colconv.h). */
#include "dt_colconv.h"

#include "bias.h"
#include "convert.h"
#include "dt_alloc.h"
#include "dt_dispatch.h"
#include "gemm.h"
#include "layout.h"

/* A call's column and operand buffers, by precision. */
typedef struct {
    int bf;        /* the GEMMs take bf16 operands */
    int native;    /* ... and the callbacks make and read bf16 columns themselves */
    void *col;     /* the columns as the callbacks see them: [R, nb*P] or [nb*P, R]; also dcol */
    dt_bf16 *colb; /* bf but not native: the columns rounded to bf16 for the GEMMs */
    dt_bf16 *wb;   /* bf: the weight [Cout, R] in bf16 */
    dt_bf16 *dyb;  /* bf, backward: the chunk's output gradient in the GEMM's layout, bf16 */
} cols;

static cols cols_open(const dt_colconv *cc, const float *w, int backward) {
    dt_dev dev = cc->dev;
    int64_t n = cc->R * cc->nb * cc->P; /* column elements */
    cols c = {.bf = dt_get_precision() == DT_BF16};
    c.native = c.bf && cc->bf16_cols;
    /* fp32 columns, or bf16 ones: native bf16 columns also hold their bf16 gradient, while the
     * rounding fallback receives an fp32 gradient in the same buffer */
    c.col = dt_dev_alloc(dev, (size_t)n * (c.native ? sizeof(dt_bf16) : sizeof(float)));
    if (c.bf) {
        if (!c.native) c.colb = dt_dev_alloc(dev, (size_t)n * sizeof(dt_bf16));
        c.wb = dt_dev_alloc(dev, (size_t)cc->Cout * cc->R * sizeof(dt_bf16));
        DT_CALL(dev, dt_f32_to_bf16, cc->Cout * cc->R, w, c.wb);
        if (backward) c.dyb = dt_dev_alloc(dev, (size_t)cc->Cout * cc->nb * cc->P * sizeof(dt_bf16));
    }
    return c;
}

static void cols_close(const dt_colconv *cc, cols *c) {
    dt_dev_free(cc->dev, c->col);
    if (c->colb) dt_dev_free(cc->dev, c->colb);
    if (c->wb) dt_dev_free(cc->dev, c->wb);
    if (c->dyb) dt_dev_free(cc->dev, c->dyb);
}

/* Fills images [n0, n0 + b) and returns the columns in the GEMMs' type. */
static const void *cols_fill(const dt_colconv *cc, const cols *c, int64_t n0, int64_t b) {
    cc->fill(cc->ctx, n0, b, c->col, c->native);
    if (!c->bf || c->native) return c->col;
    DT_CALL(cc->dev, dt_f32_to_bf16, cc->R * b * cc->P, c->col, c->colb);
    return c->colb;
}

/* C = op(A) op(B) (+ beta C): fp32 operands, or bf16 ones when c->bf (C bf16 when c_bf16). */
static void gemm(const dt_colconv *cc, const cols *c, int ta, int tb, int64_t M, int64_t N, int64_t K, const void *A,
                 int64_t lda, const void *B, int64_t ldb, float beta, void *C, int c_bf16, int64_t ldc) {
    if (c->bf)
        DT_CALL(cc->dev, dt_gemm_bf16, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, c_bf16, ldc);
    else
        DT_CALL(cc->dev, dt_gemm, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

void dt_colconv_forward(const dt_colconv *cc, const float *w, const float *bias, float *y) {
    dt_dev dev = cc->dev;
    int64_t P = cc->P, R = cc->R, Cout = cc->Cout;
    cols c = cols_open(cc, w, 0);
    const void *wg = c.bf ? (const void *)c.wb : w;
    int direct = cc->layout == DT_COLS_CN && cc->nb == 1; /* one image: the GEMM writes y itself */
    float *t = direct ? NULL : dt_dev_alloc(dev, (size_t)Cout * cc->nb * P * sizeof(float)); /* GEMM result */
    for (int64_t n0 = 0; n0 < cc->N; n0 += cc->nb) {
        int64_t b = cc->N - n0 < cc->nb ? cc->N - n0 : cc->nb, bP = b * P;
        float *yc = y + n0 * Cout * P;
        if (cc->begin) cc->begin(cc->ctx, n0, b, 0);
        const void *col = cols_fill(cc, &c, n0, b);
        if (cc->layout == DT_COLS_NC) { /* yT [bP, Cout] = col [bP, R] . w^T */
            gemm(cc, &c, 0, 1, bP, Cout, R, col, R, wg, R, 0.0f, t, 0, Cout);
            DT_CALL(dev, dt_nhwc_to_nchw, b, Cout, P, t, Cout, bias, 0.0f, yc);
        } else if (direct) {
            gemm(cc, &c, 0, 0, Cout, P, R, wg, R, col, P, 0.0f, yc, 0, P);
            if (bias) DT_CALL(dev, dt_bias_nchw_fwd, 1, Cout, P, bias, yc);
        } else { /* t [Cout, bP] = w . col */
            gemm(cc, &c, 0, 0, Cout, bP, R, wg, R, col, bP, 0.0f, t, 0, bP);
            DT_CALL(dev, dt_cnhw_to_nchw, t, b, Cout, P, bias, yc);
        }
    }
    cols_close(cc, &c);
    if (t) dt_dev_free(dev, t);
}

void dt_colconv_backward(const dt_colconv *cc, const float *w, const float *dy, float *dw, float beta_w) {
    if (!dw && !cc->adjoint) return;
    dt_dev dev = cc->dev;
    int64_t P = cc->P, R = cc->R, Cout = cc->Cout;
    cols c = cols_open(cc, w, 1);
    const void *wg = c.bf ? (const void *)c.wb : w;
    int direct = cc->layout == DT_COLS_CN && cc->nb == 1; /* one image: dy is already [Cout, P] */
    float *dyt = direct ? NULL : dt_dev_alloc(dev, (size_t)Cout * cc->nb * P * sizeof(float));
    for (int64_t n0 = 0; n0 < cc->N; n0 += cc->nb) {
        int64_t b = cc->N - n0 < cc->nb ? cc->N - n0 : cc->nb, bP = b * P;
        const float *dyc = dy + n0 * Cout * P;
        float bw = n0 == 0 ? beta_w : 1.0f;
        if (cc->begin) cc->begin(cc->ctx, n0, b, 1);
        if (cc->layout == DT_COLS_NC) {
            DT_CALL(dev, dt_nchw_to_nhwc, b, Cout, P, dyc, Cout, dyt); /* [bP, Cout] */
            dyc = dyt;
        } else if (!direct) {
            DT_CALL(dev, dt_nchw_to_cnhw, dyc, b, Cout, P, dyt); /* [Cout, bP] */
            dyc = dyt;
        }
        const void *dyg = dyc;
        if (c.bf) {
            DT_CALL(dev, dt_f32_to_bf16, Cout * bP, dyc, c.dyb);
            dyg = c.dyb;
        }
        if (cc->layout == DT_COLS_NC) {
            if (dw) gemm(cc, &c, 1, 0, R, Cout, bP, cols_fill(cc, &c, n0, b), R, dyg, Cout, bw, dw, 0, Cout);
            if (cc->adjoint) {
                gemm(cc, &c, 0, 0, bP, R, Cout, dyg, Cout, wg, R, 0.0f, c.col, c.native, R);
                cc->adjoint(cc->ctx, n0, b, c.col, c.native);
            }
        } else {
            if (dw) gemm(cc, &c, 0, 1, Cout, R, bP, dyg, bP, cols_fill(cc, &c, n0, b), bP, bw, dw, 0, R);
            if (cc->adjoint) {
                gemm(cc, &c, 1, 0, R, bP, Cout, wg, R, dyg, bP, 0.0f, c.col, c.native, bP);
                cc->adjoint(cc->ctx, n0, b, c.col, c.native);
            }
        }
    }
    cols_close(cc, &c);
    if (dyt) dt_dev_free(dev, dyt);
}
