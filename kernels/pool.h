/* pool.h: max pooling and global average pooling on x: [N, C, H, W].
 * maxpool: y[n,c,oy,ox] = max over the k x k window (padding counts as -inf); idx holds the
 *   argmax as the flat index iy*W + ix within the plane (int32), the first maximum in window
 *   order winning (PyTorch's choice). The backward is a gather: each input element sums dy
 *   of the windows whose argmax it is (<= ceil(k/s)^2 of them) - deterministic, no atomics.
 * avgpool: y[n,c] = mean over the plane; dx[n,c,p] = dy[n,c] / (H*W). */
#ifndef DT_K_POOL_H
#define DT_K_POOL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DT_DECL_POOL(sfx)                                                                          \
    void dt_maxpool_fwd_##sfx(const float *x, int64_t NC, int64_t H, int64_t W, int k, int s, int p, \
                              int64_t Ho, int64_t Wo, float *y, int32_t *idx);                     \
    void dt_maxpool_bwd_##sfx(const float *dy, const int32_t *idx, int64_t NC, int64_t H, int64_t W, \
                              int k, int s, int p, int64_t Ho, int64_t Wo, float beta, float *dx); \
    void dt_avgpool_fwd_##sfx(const float *x, int64_t NC, int64_t P, float *y);                    \
    void dt_avgpool_bwd_##sfx(const float *dy, int64_t NC, int64_t P, float beta, float *dx);

DT_DECL_POOL(cpu)
DT_DECL_POOL(cuda)

#ifdef __cplusplus
}
#endif
#endif
