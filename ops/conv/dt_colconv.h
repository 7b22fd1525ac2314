/* dt_colconv.h: a convolution as GEMMs over a column matrix, chunk by chunk - the skeleton
 * shared by conv2d and both deformable implementations. The caller supplies the columns
 * (fill) and consumes their gradient (adjoint); the skeleton owns the chunk loop, the column
 * buffer, the three GEMMs and - for NCHW tensors - the relayouts between NCHW and the GEMM's
 * layout.
 *
 * For a chunk of nb images (P positions each, R = rows of the GEMM's inner dimension, e.g.
 * C*kh*kw), in one of two column layouts:
 *   DT_COLS_CN  col [R, nb*P]  (NCHW conv2d, unfused deform; weights [Cout, R] as stored)
 *               y = relayout(W col);   dW += dY' col^T;   dcol = W^T dY'   (dY' = [Cout, nb*P])
 *   DT_COLS_NC  col [nb*P, R]  (channels last: NHWC conv2d, deft; weights [Cout, R] in the
 *               columns' order - an NHWC weight [Cout, kh, kw, C] as stored)
 *               yT = col W^T;          dW += dYT^T col;   dcol = dYT W     (dYT = [nb*P, Cout])
 *               With NHWC tensors (nhwc = 1) yT is the output's own memory and dYT the
 *               gradient's: no relayout at all. The deft mode on NCHW tensors (nhwc = 0)
 *               relays yT into NCHW and dy into dYT.
 * Groups (groups > 1): output channels [j*Cout/G, (j+1)*Cout/G) of group j see only its C/G
 * column channels, and the weight holds only those: w [Cout, R/G] (the grouped weight as stored,
 * NCHW [Cout, C/G, kh, kw], NHWC [Cout, kh, kw, C/G]) - no block-diagonal weight. Each GEMM
 * above becomes one per group on sub-matrices addressed by leading dimensions, in place:
 *   DT_COLS_CN  the rows of group j's channels, (c, tap) with c outermost, are contiguous:
 *               col rows [j*R/G, (j+1)*R/G), one GEMM a group and pass.
 *   DT_COLS_NC  a column row is (tap, c) with c innermost (R = taps * C): group j's columns are
 *               `taps` blocks of C/G, C apart - one GEMM per (group, tap), K = C/G (so a
 *               depthwise conv's are K = 1 products: correct, not fast). The forward sums its
 *               taps in fp32 (bf16 y is rounded once, from an fp32 buffer); dW and dcol write
 *               each block once.
 * The chunk keeps the column buffer within dt_conv_col_budget(): memory is bounded for any
 * batch; nb = images per chunk (the caller's choice, usually dt_conv_chunk()).
 *
 * Types: the columns, the weight operand, y, dy and dcol are all of `dtype` - f32 (products
 * strict or on TF32 tensor cores, by `math`) or bf16 (bf16 operands, fp32 accumulation, y and
 * dcol rounded once). The weight gradient is always fp32 (a bf16 model's gradients land in its
 * fp32 masters); the bias and its gradient are fp32. */
#ifndef DT_COLCONV_H
#define DT_COLCONV_H

#include <stdint.h>

#include "core/dt_device.h"
#include "core/dt_dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DT_COLS_CN = 0, DT_COLS_NC = 1 } dt_col_layout;

typedef struct {
    dt_dev dev;
    dt_col_layout layout;
    dt_dtype dtype;        /* of columns, weight operand, y, dy, dcol: DT_F32 or DT_BF16 */
    dt_math math;          /* f32 products: strict or TF32 */
    int nhwc;              /* DT_COLS_NC only: y and dy are NHWC [N*P, Cout] */
    int64_t N, Cout, P, R; /* images, output channels, positions an image, column rows */
    int64_t nb;            /* images per chunk */
    int64_t groups;        /* weight groups (0 or 1: dense); divides Cout and the column channels */
    int64_t taps;          /* DT_COLS_NC with groups > 1: the kernel taps of a column row (R = taps * C) */
    void *ctx;             /* the caller's state, passed to the callbacks */
    /* optional: called first for each chunk (e.g. to relayout the chunk's input) */
    void (*begin)(void *ctx, int64_t n0, int64_t nb, int backward);
    /* col for images [n0, n0 + nb), of dtype */
    void (*fill)(void *ctx, int64_t n0, int64_t nb, void *col);
    /* consumes the column gradient of images [n0, n0 + nb) (backward; NULL: not wanted) */
    void (*adjoint)(void *ctx, int64_t n0, int64_t nb, void *dcol);
    /* optional, NC only: the chunk's columns are already in memory (a 1x1 stride-1 conv's
     * columns are its NHWC input): returns them instead of filling the buffer */
    const void *(*cols_direct)(void *ctx, int64_t n0);
    /* optional, NC only, instead of adjoint: the column gradient is the caller's memory too (a
     * 1x1 stride-1 conv's is dx itself, [nb*P, R]): the GEMM writes dcols_beta * it + dYT w
     * there, and no column buffer is needed */
    void *(*dcols_direct)(void *ctx, int64_t n0);
    float dcols_beta;
    /* optional, NC only: [N*P, R] of dtype, the columns of the whole batch kept from the forward
     * for the backward (the deformable layer's keep_cols: sampled once a step, not twice). The
     * forward fills chunk n0's columns at row n0*P instead of its own buffer; the backward's dW
     * reads them there instead of calling fill. NULL: every pass fills its chunk buffer. */
    void *kept;
} dt_colconv;

/* y = conv (+ bias [Cout] or NULL), [N, Cout, P] (NCHW) or [N*P, Cout] (NHWC); w [Cout, R / groups]. */
void dt_colconv_forward(const dt_colconv *cc, const void *w, const float *bias, void *y);
/* dy like y. dw (NULL: not wanted) = beta_w * dw + dW, [Cout, R / groups], fp32; the column gradient
 * goes to adjoint or dcols_direct when one is set. */
void dt_colconv_backward(const dt_colconv *cc, const void *w, const void *dy, float *dw, float beta_w);
/* Bytes of one column element. */
static inline size_t dt_colconv_elem(const dt_colconv *cc) { return dt_dtype_size(cc->dtype); }

#ifdef __cplusplus
}
#endif
#endif
