/* dt_colconv.h: a convolution as GEMMs over a column matrix, chunk by chunk - the skeleton
 * shared by conv2d and both deformable implementations. The caller supplies the columns
 * (fill) and consumes their gradient (adjoint); the skeleton owns the chunk loop, the column
 * buffer, the three GEMMs and the relayouts between NCHW and the GEMM's layout.
 *
 * For a chunk of nb images (P positions each, R = rows of the GEMM's inner dimension, e.g.
 * C*kh*kw), in one of two column layouts:
 *   DT_COLS_CN  col [R, nb*P]  (conv2d, unfused deform; weights [Cout, R] as stored)
 *               y = relayout(W col);   dW += dY' col^T;   dcol = W^T dY'   (dY' = [Cout, nb*P])
 *   DT_COLS_NC  col [nb*P, R]  (channels last: deft; weights [Cout, R] in the columns' order)
 *               yT = col W^T -> y;     dW^T += col^T dYT; dcol = dYT W     (dYT = [nb*P, Cout])
 *               (the weight gradient comes out transposed, [R, Cout]: cuBLAS runs that product
 *               1.8x faster than dYT^T col on ResNet's first stage, and equally on the others)
 * The chunk keeps the column buffer within dt_conv_col_budget(): memory is bounded for any
 * batch; nb = images per chunk (the caller's choice, usually dt_conv_chunk()).
 *
 * Precision (dt_get_precision()): fp32 and tf32 run the three GEMMs on fp32 operands (tf32:
 * cuBLAS rounds them to TF32 inside). bf16 runs them on bf16 operands with fp32 accumulation
 * (dt_gemm_bf16): the weight and the output gradient are rounded to bf16 per chunk, and the
 * columns are produced in bf16 by the callbacks when the caller sets bf16_cols (half the
 * column traffic, half the buffer); otherwise the skeleton fills fp32 columns and rounds them.
 * The column gradient is bf16 for a bf16_cols caller (the adjoint reads bf16, sums in fp32),
 * else fp32. y and dW are fp32 in every precision. */
#ifndef DT_COLCONV_H
#define DT_COLCONV_H

#include <stdint.h>

#include "dt_device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DT_COLS_CN = 0, DT_COLS_NC = 1 } dt_col_layout;

typedef struct {
    dt_dev dev;
    dt_col_layout layout;
    int64_t N, Cout, P, R; /* images, output channels, positions an image, column rows */
    int64_t nb;            /* images per chunk */
    void *ctx;             /* the caller's state, passed to the callbacks */
    /* optional: called first for each chunk (e.g. to relayout the chunk's input) */
    void (*begin)(void *ctx, int64_t n0, int64_t nb, int backward);
    /* col for images [n0, n0 + nb): float, or dt_bf16 when bf16 is 1 (only if bf16_cols) */
    void (*fill)(void *ctx, int64_t n0, int64_t nb, void *col, int bf16);
    /* consumes the column gradient of images [n0, n0 + nb) (backward; NULL: not wanted);
     * float, or dt_bf16 when bf16 is 1 (only if bf16_cols) */
    void (*adjoint)(void *ctx, int64_t n0, int64_t nb, void *dcol, int bf16);
    int bf16_cols;         /* fill and adjoint handle bf16 columns (the bf16 precision) */
} dt_colconv;

/* y [N, Cout, P] = conv (+ bias [Cout] or NULL); w [Cout, R]. */
void dt_colconv_forward(const dt_colconv *cc, const float *w, const float *bias, float *y);
/* dy [N, Cout, P]. dw (NULL: not wanted) = beta_w * dw + dW, [Cout, R] (DT_COLS_CN) or
 * [R, Cout] (DT_COLS_NC); the adjoint runs when set. */
void dt_colconv_backward(const dt_colconv *cc, const float *w, const float *dy, float *dw, float beta_w);

#ifdef __cplusplus
}
#endif
#endif
