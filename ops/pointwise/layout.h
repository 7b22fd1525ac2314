/* layout.h: the relayouts between deftc's NCHW tensors and the layouts its GEMMs produce or
 * its channels-last kernels read. For a chunk of nb images with C channels of P positions:
 *
 *   nchw_to_cnhw  x [nb, C, P] -> y [C, nb*P]             (the plain conv's GEMM operand)
 *   cnhw_to_nchw  y [C, nb*P] -> x [nb, C, P] (+ bias[c]) (the plain conv's GEMM result)
 *   nchw_to_nhwc  x [nb, C, P] -> y [nb*P, ldy], columns [0, C) of each row (channels last;
 *                 ldy >= C lets a caller fill a column block of a wider matrix)
 *   nhwc_to_nchw  y [nb, C, P] = beta*y + x[nb*P, ldx] (+ bias[c]); beta 0 overwrites
 *
 * The channels-last pair is also how a weight [Cout, C, kh*kw] becomes [Cout, kh*kw, C] and
 * back (nb = Cout, P = kh*kw). */
#ifndef DT_K_LAYOUT_H
#define DT_K_LAYOUT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DT_DECL_LAYOUT(sfx)                                                                                     \
    void dt_nchw_to_cnhw_##sfx(const float *x, int64_t nb, int64_t C, int64_t P, float *y);                     \
    void dt_cnhw_to_nchw_##sfx(const float *y, int64_t nb, int64_t C, int64_t P, const float *bias, float *x);   \
    void dt_nchw_to_nhwc_##sfx(int64_t nb, int64_t C, int64_t P, const float *x, int64_t ldy, float *y);        \
    void dt_nhwc_to_nchw_##sfx(int64_t nb, int64_t C, int64_t P, const float *x, int64_t ldx, const float *bias, \
                               float beta, float *y);

DT_DECL_LAYOUT(cpu)
DT_DECL_LAYOUT(cuda)

#ifdef __cplusplus
}
#endif
#endif
