/* pool.h: max pooling and global average pooling of x: [N, C, H, W], per (dtype, layout):
 *   f32 nchw (the reference), f32 nhwc and bf16 nhwc (x, y, dy, dx in that dtype and layout).
 *
 * maxpool: y[n,c,oy,ox] = max of x over the k x k window at (oy*s - p, ox*s - p); padding
 *   counts as -inf (p <= k/2, so a window always holds an element); the first maximum in
 *   window order (row-major) wins, and so does the first NaN. tap [N, C, Ho, Wo] uint8, in y's
 *   layout, holds the argmax as its tap in the window, ky*k + kx (k <= 16: DT_MAXPOOL_MAX_K) -
 *   a quarter of the bytes of PyTorch's flat int32 index iy*W + ix, which the backward reads
 *   once for each window an input lies in.
 * maxpool backward, a gather: each input element sums dy of the windows whose argmax it is
 *   (<= ceil(k/s)^2 of them, visited in (oy, ox) order: deterministic, no atomics), fp32 sum,
 *   one rounding; dx written (beta 0) or added (beta 1).
 * avgpool: y [N, C] row-major in x's dtype = the mean over the H*W plane, summed in fp32
 *   (nchw) or double (nhwc) and rounded once; backward dx[n,c,p] = dy[n,c] / (H*W) (beta). */
#ifndef DT_K_POOL_H
#define DT_K_POOL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DT_MAXPOOL_MAX_K 16 /* the largest window whose taps fit a byte */

typedef void dt_maxpool_fwd_fn(const void *x, int64_t N, int64_t C, int64_t H, int64_t W, int k, int s, int p,
                               int64_t Ho, int64_t Wo, void *y, uint8_t *tap);
typedef void dt_maxpool_bwd_fn(const void *dy, const uint8_t *tap, int64_t N, int64_t C, int64_t H, int64_t W, int k,
                               int s, int p, int64_t Ho, int64_t Wo, float beta, void *dx);
/* P = H*W */
typedef void dt_avgpool_fwd_fn(const void *x, int64_t N, int64_t C, int64_t P, void *y);
typedef void dt_avgpool_bwd_fn(const void *dy, int64_t N, int64_t C, int64_t P, float beta, void *dx);

#define DT_DECL_POOL(sfx)                      \
    dt_maxpool_fwd_fn dt_maxpool_fwd_##sfx;    \
    dt_maxpool_bwd_fn dt_maxpool_bwd_##sfx;    \
    dt_avgpool_fwd_fn dt_avgpool_fwd_##sfx;    \
    dt_avgpool_bwd_fn dt_avgpool_bwd_##sfx;

DT_DECL_POOL(f32_nchw_cpu)
DT_DECL_POOL(f32_nhwc_cpu)
DT_DECL_POOL(bf16_nhwc_cpu)
DT_DECL_POOL(f32_nchw_cuda)
DT_DECL_POOL(f32_nhwc_cuda)
DT_DECL_POOL(bf16_nhwc_cuda)

#ifdef __cplusplus
}
#endif
#endif
