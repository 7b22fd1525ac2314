/* convert.h: changing a tensor's dtype and layout (dt_dtype.h), and the once-per-step rounding
 * of fp32 master weights into their bf16 working copies.
 *
 * fp32 -> bf16 rounds to nearest even (NaN stays NaN, quiet; values within half a bf16 ulp of
 * FLT_MAX round to infinity); bf16 -> fp32 is exact; f16 the same with IEEE binary16's rules;
 * i32 <-> floats truncates toward zero / is exact below 2^24; floats -> u8 saturate to [0, 255]
 * and round to nearest even (NaN -> 0), u8 -> floats is exact.
 *
 * convert: y = beta*y + x for an image batch of N x C x (H*W) elements, x in (tx, lx) and y in
 *   (ty, ly) - any of f32 / bf16 / f16 / i32 / u8 in NCHW or NHWC (non-4-D tensors: N = 1, C = 1,
 *   P = numel, layout NCHW). beta is 0 (overwrite) or 1 (add: the sum is taken in fp32 and
 *   rounded once); i32 and u8 take beta 0 only. Between layouts the CUDA version transposes through
 *   shared-memory tiles of [32 channels x 32 positions] so both sides stay coalesced.
 * chunks: dst[k] = bf16(src[k]) over a table of (src, dst, n <= DT_CAST_CHUNK) chunks on the
 *   device the copies live on: every working copy of a model in one launch
 *   (dt_params_refresh_work, through dt_cast_chunks_k of ops/pointwise/dt_shared_kernels.h). */
#ifndef DT_K_CONVERT_H
#define DT_K_CONVERT_H

#include <stdint.h>

#include "core/dt_dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DT_CAST_CHUNK 16384
typedef struct {
    const float *src;
    dt_bf16 *dst;
    int64_t n;
} dt_cast_chunk;

#define DT_DECL_CONVERT(sfx)                                                                                 \
    void dt_convert_##sfx(int64_t N, int64_t C, int64_t P, const void *x, dt_dtype tx, dt_layout lx, float beta, \
                          void *y, dt_dtype ty, dt_layout ly);                                                   \
    void dt_f32_to_bf16_##sfx(int64_t n, const float *x, dt_bf16 *y);                                        \
    void dt_bf16_to_f32_##sfx(int64_t n, const dt_bf16 *x, float *y);

DT_DECL_CONVERT(cpu)
DT_DECL_CONVERT(cuda)
/* chunks: an array of nchunks entries on the twin's device (host memory for the CPU twin). */
void dt_f32_to_bf16_chunks_cpu(const dt_cast_chunk *chunks, int nchunks);
void dt_f32_to_bf16_chunks_cuda(const dt_cast_chunk *chunks, int nchunks);

#ifdef __cplusplus
}
#endif
#endif
