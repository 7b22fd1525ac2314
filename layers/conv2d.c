/* conv2d = im2col + GEMM, chunked over images, on the column-conv skeleton (dt_colconv.h,
 * layout DT_COLS_CN): this file supplies the columns (im2col) and their adjoint (col2im).
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
 * any batch size, and a budget near the L2 size keeps the buffer's traffic mostly on chip.
 * In the bf16 precision the columns are written and read as bf16 (dt_colconv.h). */
#include "bias.h"
#include "dt_colconv.h"
#include "dt_common.h"
#include "dt_dispatch.h"
#include "dt_layers.h"
#include "im2col.h"

static size_t g_col_budget;

void dt_conv_set_col_budget(size_t bytes) { g_col_budget = bytes; }
size_t dt_conv_col_budget(void) {
    if (!g_col_budget) g_col_budget = (size_t)dt_env_long("DT_COL_BUDGET_MB", 256) << 20;
    return g_col_budget;
}

int64_t dt_conv_chunk(int64_t N, int64_t col_floats_per_image) {
    /* the budget is in bytes: bf16 columns (the bf16 precision) fit twice the images */
    size_t elem = dt_get_precision() == DT_BF16 ? 2 : sizeof(float);
    int64_t nb = (int64_t)(dt_conv_col_budget() / elem) / (col_floats_per_image ? col_floats_per_image : 1);
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

/* The column source of a plain conv: im2col of the input, col2im of the gradient. */
typedef struct {
    dt_dev dev;
    const float *x;   /* [N, Cin, H, W] */
    float *dx;        /* [N, Cin, H, W] or NULL */
    float beta_x;
    int64_t Cin, H, W, Ho, Wo;
    dt_conv_geom g;
} conv_cols;

static void conv_fill(void *ctx, int64_t n0, int64_t nb, void *col, int bf16) {
    conv_cols *c = ctx;
    const float *x = c->x + n0 * c->Cin * c->H * c->W;
    if (bf16) DT_CALL(c->dev, dt_im2col_bf16, x, nb, c->Cin, c->H, c->W, c->g, c->Ho, c->Wo, col);
    else DT_CALL(c->dev, dt_im2col, x, nb, c->Cin, c->H, c->W, c->g, c->Ho, c->Wo, col);
}

static void conv_adjoint(void *ctx, int64_t n0, int64_t nb, void *dcol, int bf16) {
    conv_cols *c = ctx;
    float *dx = c->dx + n0 * c->Cin * c->H * c->W;
    if (bf16) DT_CALL(c->dev, dt_col2im_bf16, dcol, nb, c->Cin, c->H, c->W, c->g, c->Ho, c->Wo, c->beta_x, dx);
    else DT_CALL(c->dev, dt_col2im, dcol, nb, c->Cin, c->H, c->W, c->g, c->Ho, c->Wo, c->beta_x, dx);
}

static dt_colconv conv_skeleton(conv_cols *cols, const dt_tensor *x, const dt_tensor *w, dt_conv_geom g, int64_t Ho,
                                int64_t Wo) {
    cols->dev = x->dev;
    cols->x = x->data;
    cols->Cin = x->shape[1];
    cols->H = x->shape[2];
    cols->W = x->shape[3];
    cols->Ho = Ho;
    cols->Wo = Wo;
    cols->g = g;
    int64_t R = cols->Cin * g.kh * g.kw;
    dt_colconv cc = {.dev = x->dev, .layout = DT_COLS_CN, .N = x->shape[0], .Cout = w->shape[0], .P = Ho * Wo, .R = R,
                     .nb = dt_conv_chunk(x->shape[0], R * Ho * Wo), .ctx = cols, .fill = conv_fill,
                     .bf16_cols = 1};
    return cc;
}

static void conv_backward(dt_node *n) {
    dt_tensor *x = n->in[0], *w = n->in[1], *bias = n->in[2], *y = n->out, *dy = y->grad;
    int64_t P = y->shape[2] * y->shape[3];
    float beta_b, beta_w;
    float *db = dt_grad_dst(bias, &beta_b);
    if (db) DT_CALL(x->dev, dt_bias_nchw_bwd, x->shape[0], w->shape[0], P, dy->data, beta_b, db);
    conv_cols cols;
    dt_colconv cc = conv_skeleton(&cols, x, w, ((conv_ctx *)n->ctx)->g, y->shape[2], y->shape[3]);
    cols.dx = dt_grad_dst(x, &cols.beta_x);
    if (cols.dx) cc.adjoint = conv_adjoint;
    float *dw = dt_grad_dst(w, &beta_w); /* before beta_w is read: argument order is unspecified */
    dt_colconv_backward(&cc, w->data, dy->data, dw, beta_w);
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
    dt_tensor *y = dt_tensor_new4(x->dev, x->shape[0], w->shape[0], Ho, Wo);
    conv_cols cols;
    dt_colconv cc = conv_skeleton(&cols, x, w, g, Ho, Wo);
    dt_colconv_forward(&cc, w->data, bias ? bias->data : NULL, y->data);
    dt_tensor *in[3] = {x, w, bias};
    dt_node *n = dt_record("conv2d", conv_backward, y, 3, in, sizeof(conv_ctx));
    if (n) ((conv_ctx *)n->ctx)->g = g;
    return y;
}
