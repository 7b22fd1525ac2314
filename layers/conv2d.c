/* conv2d = im2col + GEMM, chunked over images.
 *
 * Forward, per chunk of nb images (P = Ho*Wo, K = Cin*kh*kw):
 *   col[K, nb*P]   = im2col(x chunk)
 *   t[Cout, nb*P]  = W[Cout, K] . col                 (one GEMM for the chunk)
 *   y chunk        = t re-laid out to [nb, Cout, P] (+ bias)   (nb == 1: the GEMM writes y)
 * Backward, per chunk:
 *   dyt[Cout, nb*P] = dy chunk in [Cout, nb*P] layout        (nb == 1: dy itself)
 *   dW  += dyt . im2col(x chunk)^T                          (K-dimension nb*P: efficient)
 *   dx   = col2im(W^T . dyt)                                (gather, deterministic)
 *   db   = sum of dy over (N, P)
 * The chunk is sized so that the column buffer stays within a budget: memory is bounded for
 * any batch size, and a budget near the L2 size keeps the buffer's traffic mostly on chip. */
#include "bias.h"
#include "dt_alloc.h"
#include "dt_common.h"
#include "dt_dispatch.h"
#include "dt_layers.h"
#include "gemm.h"
#include "im2col.h"

static size_t g_col_budget;

void dt_conv_set_col_budget(size_t bytes) { g_col_budget = bytes; }
size_t dt_conv_col_budget(void) {
    if (!g_col_budget) g_col_budget = (size_t)dt_env_long("DT_COL_BUDGET_MB", 256) << 20;
    return g_col_budget;
}

int64_t dt_conv_chunk(int64_t N, int64_t col_floats_per_image) {
    int64_t nb = (int64_t)(dt_conv_col_budget() / sizeof(float)) / (col_floats_per_image ? col_floats_per_image : 1);
    if (nb < 1) nb = 1;
    return nb < N ? nb : N;
}

void dt_conv_out_hw(const char *op, const dt_tensor *x, dt_conv_geom g, int64_t *Ho, int64_t *Wo) {
    if (g.kh < 1 || g.kw < 1 || g.sh < 1 || g.sw < 1 || g.dh < 1 || g.dw < 1 || g.ph < 0 || g.pw < 0)
        dt_fatal("%s: invalid geometry kernel %dx%d stride %dx%d pad %dx%d dilation %dx%d", op, g.kh, g.kw,
                 g.sh, g.sw, g.ph, g.pw, g.dh, g.dw);
    *Ho = dt_conv_out_size(x->shape[2], g.kh, g.sh, g.ph, g.dh);
    *Wo = dt_conv_out_size(x->shape[3], g.kw, g.sw, g.pw, g.dw);
    if (*Ho < 1 || *Wo < 1) {
        char b[128];
        dt_fatal("%s: input %s is too small for kernel %dx%d (dilation %d, padding %d): output would be %lldx%lld",
                 op, dt_shape_str(x, b, sizeof b), g.kh, g.kw, g.dh, g.ph, (long long)*Ho, (long long)*Wo);
    }
}

typedef struct {
    dt_conv_geom g;
} conv_ctx;

static void conv_backward(dt_node *n) {
    dt_tensor *x = n->in[0], *w = n->in[1], *bias = n->in[2], *y = n->out, *dy = y->grad;
    dt_conv_geom g = ((conv_ctx *)n->ctx)->g;
    dt_dev dev = x->dev;
    int64_t N = x->shape[0], Cin = x->shape[1], H = x->shape[2], W = x->shape[3];
    int64_t Cout = w->shape[0], Ho = y->shape[2], Wo = y->shape[3], P = Ho * Wo, K = Cin * g.kh * g.kw;
    float beta_b, beta_w, beta_x;
    float *db = dt_grad_dst(bias, &beta_b);
    if (db) DT_CALL(dev, dt_bias_nchw_bwd, N, Cout, P, dy->data, beta_b, db);
    float *dw = dt_grad_dst(w, &beta_w);
    float *dx = dt_grad_dst(x, &beta_x);
    if (!dw && !dx) return;
    int64_t nb = dt_conv_chunk(N, K * P);
    float *col = dt_dev_alloc(dev, (size_t)K * nb * P * sizeof(float));
    float *dyt = nb > 1 ? dt_dev_alloc(dev, (size_t)Cout * nb * P * sizeof(float)) : NULL;
    for (int64_t n0 = 0; n0 < N; n0 += nb) {
        int64_t b = N - n0 < nb ? N - n0 : nb, bP = b * P;
        const float *dyc = dy->data + n0 * Cout * P;
        if (b > 1) {
            DT_CALL(dev, dt_nchw_to_cnhw, dyc, b, Cout, P, dyt);
            dyc = dyt;
        }
        if (dw) {
            DT_CALL(dev, dt_im2col, x->data + n0 * Cin * H * W, b, Cin, H, W, g, Ho, Wo, col);
            DT_CALL(dev, dt_gemm, 0, 1, Cout, K, bP, 1.0f, dyc, bP, col, bP, n0 == 0 ? beta_w : 1.0f, dw, K);
        }
        if (dx) {
            DT_CALL(dev, dt_gemm, 1, 0, K, bP, Cout, 1.0f, w->data, K, dyc, bP, 0.0f, col, bP);
            DT_CALL(dev, dt_col2im, col, b, Cin, H, W, g, Ho, Wo, beta_x, dx + n0 * Cin * H * W);
        }
    }
    dt_dev_free(dev, col);
    if (dyt) dt_dev_free(dev, dyt);
}

dt_tensor *dt_conv2d(dt_tensor *x, dt_tensor *w, dt_tensor *bias, dt_conv_geom g) {
    dt_require_ndim("conv2d", "input", x, 4);
    dt_require_ndim("conv2d", "weight", w, 4);
    dt_require_same_device("conv2d", x, w);
    dt_require_live("conv2d", x);
    dt_require_live("conv2d", w);
    char a[128], b[128];
    if (w->shape[1] != x->shape[1] || w->shape[2] != g.kh || w->shape[3] != g.kw)
        dt_fatal("conv2d: weight %s does not fit input %s with a %dx%d kernel (expected [Cout, %lld, %d, %d])",
                 dt_shape_str(w, a, sizeof a), dt_shape_str(x, b, sizeof b), g.kh, g.kw, (long long)x->shape[1], g.kh, g.kw);
    if (bias && (bias->ndim != 1 || bias->shape[0] != w->shape[0]))
        dt_fatal("conv2d: bias %s must be [%lld]", dt_shape_str(bias, a, sizeof a), (long long)w->shape[0]);
    int64_t Ho, Wo;
    dt_conv_out_hw("conv2d", x, g, &Ho, &Wo);
    int64_t N = x->shape[0], Cin = x->shape[1], H = x->shape[2], W = x->shape[3], Cout = w->shape[0];
    int64_t P = Ho * Wo, K = Cin * g.kh * g.kw;
    dt_dev dev = x->dev;
    dt_tensor *y = dt_tensor_new4(dev, N, Cout, Ho, Wo);
    int64_t nb = dt_conv_chunk(N, K * P);
    float *col = dt_dev_alloc(dev, (size_t)K * nb * P * sizeof(float));
    float *t = nb > 1 ? dt_dev_alloc(dev, (size_t)Cout * nb * P * sizeof(float)) : NULL;
    for (int64_t n0 = 0; n0 < N; n0 += nb) {
        int64_t bn = N - n0 < nb ? N - n0 : nb;
        float *yc = y->data + n0 * Cout * P;
        DT_CALL(dev, dt_im2col, x->data + n0 * Cin * H * W, bn, Cin, H, W, g, Ho, Wo, col);
        if (bn == 1) {
            DT_CALL(dev, dt_gemm, 0, 0, Cout, P, K, 1.0f, w->data, K, col, P, 0.0f, yc, P);
            if (bias) DT_CALL(dev, dt_bias_nchw_fwd, 1, Cout, P, bias->data, yc);
        } else {
            DT_CALL(dev, dt_gemm, 0, 0, Cout, bn * P, K, 1.0f, w->data, K, col, bn * P, 0.0f, t, bn * P);
            DT_CALL(dev, dt_cnhw_to_nchw, t, bn, Cout, P, bias ? bias->data : NULL, yc);
        }
    }
    dt_dev_free(dev, col);
    if (t) dt_dev_free(dev, t);
    dt_tensor *in[3] = {x, w, bias};
    dt_node *n = dt_record("conv2d", conv_backward, y, 3, in, sizeof(conv_ctx));
    if (n) ((conv_ctx *)n->ctx)->g = g;
    return y;
}
