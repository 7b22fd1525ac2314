/* The chunked column-conv skeleton (see dt_colconv.h). */
#include "dt_colconv.h"

#include "bias.h"
#include "dt_alloc.h"
#include "dt_dispatch.h"
#include "gemm.h"
#include "layout.h"

void dt_colconv_forward(const dt_colconv *cc, const float *w, const float *bias, float *y) {
    dt_dev dev = cc->dev;
    int64_t P = cc->P, R = cc->R, Cout = cc->Cout;
    float *col = dt_dev_alloc(dev, (size_t)R * cc->nb * P * sizeof(float));        /* [R, nb*P] or [nb*P, R] */
    int direct = cc->layout == DT_COLS_CN && cc->nb == 1; /* one image: the GEMM writes y itself */
    float *t = direct ? NULL : dt_dev_alloc(dev, (size_t)Cout * cc->nb * P * sizeof(float)); /* GEMM result */
    for (int64_t n0 = 0; n0 < cc->N; n0 += cc->nb) {
        int64_t b = cc->N - n0 < cc->nb ? cc->N - n0 : cc->nb, bP = b * P;
        float *yc = y + n0 * Cout * P;
        if (cc->begin) cc->begin(cc->ctx, n0, b, 0);
        cc->fill(cc->ctx, n0, b, col);
        if (cc->layout == DT_COLS_NC) { /* yT [bP, Cout] = col [bP, R] . w^T */
            DT_CALL(dev, dt_gemm, 0, 1, bP, Cout, R, 1.0f, col, R, w, R, 0.0f, t, Cout);
            DT_CALL(dev, dt_nhwc_to_nchw, b, Cout, P, t, Cout, bias, 0.0f, yc);
        } else if (direct) {
            DT_CALL(dev, dt_gemm, 0, 0, Cout, P, R, 1.0f, w, R, col, P, 0.0f, yc, P);
            if (bias) DT_CALL(dev, dt_bias_nchw_fwd, 1, Cout, P, bias, yc);
        } else { /* t [Cout, bP] = w . col */
            DT_CALL(dev, dt_gemm, 0, 0, Cout, bP, R, 1.0f, w, R, col, bP, 0.0f, t, bP);
            DT_CALL(dev, dt_cnhw_to_nchw, t, b, Cout, P, bias, yc);
        }
    }
    dt_dev_free(dev, col);
    if (t) dt_dev_free(dev, t);
}

void dt_colconv_backward(const dt_colconv *cc, const float *w, const float *dy, float *dw, float beta_w) {
    if (!dw && !cc->adjoint) return;
    dt_dev dev = cc->dev;
    int64_t P = cc->P, R = cc->R, Cout = cc->Cout;
    float *col = dt_dev_alloc(dev, (size_t)R * cc->nb * P * sizeof(float));
    int direct = cc->layout == DT_COLS_CN && cc->nb == 1; /* one image: dy is already [Cout, P] */
    float *dyt = direct ? NULL : dt_dev_alloc(dev, (size_t)Cout * cc->nb * P * sizeof(float));
    for (int64_t n0 = 0; n0 < cc->N; n0 += cc->nb) {
        int64_t b = cc->N - n0 < cc->nb ? cc->N - n0 : cc->nb, bP = b * P;
        const float *dyc = dy + n0 * Cout * P;
        float bw = n0 == 0 ? beta_w : 1.0f;
        if (cc->begin) cc->begin(cc->ctx, n0, b, 1);
        if (cc->layout == DT_COLS_NC) {
            DT_CALL(dev, dt_nchw_to_nhwc, b, Cout, P, dyc, Cout, dyt); /* [bP, Cout] */
            if (dw) {
                cc->fill(cc->ctx, n0, b, col);
                DT_CALL(dev, dt_gemm, 1, 0, R, Cout, bP, 1.0f, col, R, dyt, Cout, bw, dw, Cout);
            }
            if (cc->adjoint) {
                DT_CALL(dev, dt_gemm, 0, 0, bP, R, Cout, 1.0f, dyt, Cout, w, R, 0.0f, col, R);
                cc->adjoint(cc->ctx, n0, b, col);
            }
        } else {
            if (!direct) {
                DT_CALL(dev, dt_nchw_to_cnhw, dyc, b, Cout, P, dyt); /* [Cout, bP] */
                dyc = dyt;
            }
            if (dw) {
                cc->fill(cc->ctx, n0, b, col);
                DT_CALL(dev, dt_gemm, 0, 1, Cout, R, bP, 1.0f, dyc, bP, col, bP, bw, dw, R);
            }
            if (cc->adjoint) {
                DT_CALL(dev, dt_gemm, 1, 0, R, bP, Cout, 1.0f, w, R, dyc, bP, 0.0f, col, bP);
                cc->adjoint(cc->ctx, n0, b, col);
            }
        }
    }
    dt_dev_free(dev, col);
    if (dyt) dt_dev_free(dev, dyt);
}
