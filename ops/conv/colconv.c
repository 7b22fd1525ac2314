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

/* The GEMM blocks of a conv in `groups` groups (dt_colconv.h): group j's outputs
 * [j*Og, (j+1)*Og) read, for each of nt blocks t, the kb column channels starting at K index
 * t*stride + j*kb of the columns and at t*kb of its weight rows [Og, Rg] (Rg = R / G). Dense:
 * one block, the whole K. CN (channels outermost): one block of Rg rows a group. NC grouped
 * (channels innermost): one block of C/G a tap, C = R / taps apart. */
typedef struct {
    int64_t G, Og, Rg, nt, kb, stride;
} blocks;

static blocks blocks_of(const dt_colconv *cc) {
    blocks b = {cc->groups > 1 ? cc->groups : 1, 0, 0, 1, 0, cc->R};
    b.Og = cc->Cout / b.G, b.Rg = cc->R / b.G;
    if (cc->layout == DT_COLS_NC && b.G > 1) b.nt = cc->taps, b.stride = cc->R / cc->taps;
    b.kb = b.Rg / b.nt;
    return b;
}
static int64_t col_k(const blocks *b, int64_t j, int64_t t) { return t * b->stride + j * b->kb; }
/* element e of p, elements of el bytes */
static const void *at(const void *p, int64_t e, size_t el) { return (const char *)p + (size_t)e * el; }
static void *at_w(void *p, int64_t e, size_t el) { return (char *)p + (size_t)e * el; }

/* NC columns' gradient dcol [bP, R] = beta dcol + dYT [bP, Cout] . w, a GEMM per (group, tap)
 * block: group j's dYT columns [j*Og, +Og), its weight block, its column block */
static void nc_dcols(const dt_colconv *cc, const blocks *k, int64_t bP, const void *dyc, const void *w, float beta,
                     void *dcol) {
    const size_t el = dt_colconv_elem(cc);
    for (int64_t j = 0; j < k->G; j++)
        for (int64_t tp = 0; tp < k->nt; tp++)
            gemm(cc, 0, 0, bP, k->kb, k->Og, at(dyc, j * k->Og, el), cc->Cout, at(w, j * k->Og * k->Rg + tp * k->kb, el),
                 k->Rg, beta, at_w(dcol, col_k(k, j, tp), el), cc->dtype, cc->R);
}

static void check(const dt_colconv *cc) {
    const int64_t G = cc->groups > 1 ? cc->groups : 1;
    if (G > 1 && (cc->Cout % G || cc->R % G || (cc->layout == DT_COLS_NC && (cc->taps < 1 || cc->R % cc->taps ||
                                                                          (cc->R / cc->taps) % G))))
        dt_fatal("column conv: %lld output channels and %lld column rows (%lld taps) do not split into %lld groups",
                 (long long)cc->Cout, (long long)cc->R, (long long)cc->taps, (long long)G);
    if (cc->dtype != DT_F32 && cc->dtype != DT_BF16)
        dt_fatal("column conv: no %s products (f32 or bf16)", dt_dtype_name(cc->dtype));
    if ((cc->layout == DT_COLS_CN || !cc->nhwc) && cc->dtype != DT_F32)
        dt_fatal("column conv: NCHW tensors are f32 only (the %s path is channels last)", dt_dtype_name(cc->dtype));
    if (cc->kept && (cc->layout != DT_COLS_NC || cc->cols_direct))
        dt_fatal("column conv: kept columns are channels last [N*P, R], and exclude direct columns");
}

/* The chunk's columns: the caller's memory (cols_direct), the kept batch's rows of the chunk
 * (filled now in the forward, fresh = 1; as the forward left them in the backward), or the
 * buffer filled now. */
static const void *cols_of(const dt_colconv *cc, void *buf, int64_t n0, int64_t b, int fresh) {
    if (cc->cols_direct) return cc->cols_direct(cc->ctx, n0);
    if (cc->kept) {
        void *rows = at_w(cc->kept, n0 * cc->P * cc->R, dt_colconv_elem(cc));
        if (fresh) cc->fill(cc->ctx, n0, b, rows);
        return rows;
    }
    cc->fill(cc->ctx, n0, b, buf);
    return buf;
}

void dt_colconv_forward(const dt_colconv *cc, const void *w, const float *bias, void *y) {
    check(cc);
    dt_dev dev = cc->dev;
    int64_t P = cc->P, R = cc->R, Cout = cc->Cout;
    size_t el = dt_colconv_elem(cc);
    const blocks k = blocks_of(cc);
    void *col = cc->cols_direct || cc->kept ? NULL : dt_dev_alloc(dev, (size_t)R * cc->nb * P * el);
    int direct = cc->layout == DT_COLS_NC ? cc->nhwc : cc->nb == 1; /* the GEMM writes y itself */
    /* NC grouped bf16 sums its taps in the fp32 buffer, then rounds y once */
    const int acc32 = cc->layout == DT_COLS_NC && k.nt > 1 && cc->dtype != DT_F32;
    float *t = direct && !acc32 ? NULL : dt_dev_alloc(dev, (size_t)Cout * cc->nb * P * sizeof(float)); /* GEMM result */
    for (int64_t n0 = 0; n0 < cc->N; n0 += cc->nb) {
        int64_t b = cc->N - n0 < cc->nb ? cc->N - n0 : cc->nb, bP = b * P;
        if (cc->begin) cc->begin(cc->ctx, n0, b, 0);
        const void *cols = cols_of(cc, col, n0, b, 1);
        if (cc->layout == DT_COLS_NC) { /* yT [bP, Cout] = col [bP, R] . w^T, group j's [bP, Og] block per tap */
            void *yc = (char *)y + (size_t)(n0 * Cout * P) * el;
            void *out = direct && !acc32 ? yc : t;
            dt_dtype out_dtype = out == yc ? cc->dtype : DT_F32;
            for (int64_t j = 0; j < k.G; j++)
                for (int64_t tp = 0; tp < k.nt; tp++)
                    gemm(cc, 0, 1, bP, k.Og, k.kb, at(cols, col_k(&k, j, tp), el), R, at(w, j * k.Og * k.Rg + tp * k.kb, el),
                         k.Rg, tp ? 1.0f : 0.0f, at_w(out, j * k.Og, dt_dtype_size(out_dtype)), out_dtype, Cout);
            if (direct && acc32) DT_PICK(dt_convert_k, dev, DT_F32, DT_NCHW)(1, Cout, bP, t, DT_F32, DT_NHWC, 0.0f, yc, cc->dtype, DT_NHWC);
            if (direct && bias) DT_PICK(dt_bias_rows_fwd_k, dev, cc->dtype, DT_NCHW)(bP, Cout, bias, yc);
            if (!direct) DT_PICK(dt_nhwc_to_nchw_k, dev, DT_F32, DT_NCHW)(b, Cout, P, t, Cout, bias, 0.0f, yc);
        } else { /* [Cout, bP] = w . col (direct: y itself, b = 1), group j's rows from its rows of col */
            float *out = direct ? (float *)y + n0 * Cout * P : t;
            for (int64_t j = 0; j < k.G; j++)
                gemm(cc, 0, 0, k.Og, bP, k.kb, at(w, j * k.Og * k.Rg, el), k.Rg, at(cols, col_k(&k, j, 0) * bP, el), bP,
                     0.0f, out + j * k.Og * bP, DT_F32, bP);
            if (direct && bias) DT_PICK(bias_nchw_k, dev, DT_F32, DT_NCHW)(1, Cout, P, bias, out);
            if (!direct) DT_PICK(cnhw_to_nchw_k, dev, DT_F32, DT_NCHW)(t, b, Cout, P, bias, (float *)y + n0 * Cout * P);
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
    const blocks k = blocks_of(cc);
    /* the column buffer also holds the column gradient (the only thing it holds with kept columns) */
    void *col = (cc->cols_direct || cc->kept) && !cc->adjoint ? NULL : dt_dev_alloc(dev, (size_t)R * cc->nb * P * el);
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
            /* dW [Cout, Rg] += dYT^T col;  dcol [bP, R] = dYT w - per (group, tap) block, each
             * written once: group j's dYT columns [j*Og, +Og), its column block, its weight block */
            if (dw) {
                const void *cols = cols_of(cc, col, n0, b, 0);
                for (int64_t j = 0; j < k.G; j++)
                    for (int64_t tp = 0; tp < k.nt; tp++)
                        gemm(cc, 1, 0, k.Og, k.kb, bP, at(dyc, j * k.Og, el), Cout, at(cols, col_k(&k, j, tp), el), R, bw,
                             dw + j * k.Og * k.Rg + tp * k.kb, DT_F32, k.Rg);
            }
            if (cc->dcols_direct) nc_dcols(cc, &k, bP, dyc, w, cc->dcols_beta, cc->dcols_direct(cc->ctx, n0));
            if (cc->adjoint) { /* into the buffer that held the columns: after every dW block read them */
                nc_dcols(cc, &k, bP, dyc, w, 0.0f, col);
                cc->adjoint(cc->ctx, n0, b, col);
            }
        } else {
            if (!direct) {
                DT_PICK(nchw_to_cnhw_k, dev, DT_F32, DT_NCHW)(dyc, b, Cout, P, dyt); /* [Cout, bP] */
                dyc = dyt;
            }
            /* dW [Cout, Rg] += dY' col^T;  dcol [R, bP] = w^T dY' - group j's rows of each */
            const float *dyf = dyc;
            if (dw) {
                const float *cols = cols_of(cc, col, n0, b, 0);
                for (int64_t j = 0; j < k.G; j++)
                    gemm(cc, 0, 1, k.Og, k.kb, bP, dyf + j * k.Og * bP, bP, cols + col_k(&k, j, 0) * bP, bP, bw,
                         dw + j * k.Og * k.Rg, DT_F32, k.Rg);
            }
            if (cc->adjoint) {
                for (int64_t j = 0; j < k.G; j++)
                    gemm(cc, 1, 0, k.kb, bP, k.Og, at(w, j * k.Og * k.Rg, el), k.Rg, dyf + j * k.Og * bP, bP, 0.0f,
                         (float *)col + col_k(&k, j, 0) * bP, DT_F32, bP);
                cc->adjoint(cc->ctx, n0, b, col);
            }
        }
    }
    if (col) dt_dev_free(dev, col);
    if (dyt) dt_dev_free(dev, dyt);
}
