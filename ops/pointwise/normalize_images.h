/* normalize_images.h: a batch of uint8 images into a model's input - torchvision's ToTensor +
 * Normalize in one pass, on the device that trains.
 *
 *   x [N, P, 3] u8 (P = H*W pixels, RGB interleaved: the loader's [N, S, S, 3] batch)
 *   y [N, 3, H, W] logical, in (ty, ly): f32 NCHW, f32 NHWC or bf16 NHWC
 *   y(n, c, p) = (x(n, p, c) / 255 - mean[c]) / std[c]
 *
 * computed in fp32 in that order (a division, a subtraction, a division: nothing a compiler can
 * contract into an fma), so the CUDA kernel and the CPU twin agree bit for bit, and both with the
 * loader's former CPU normalization; bf16 is rounded once from that fp32 value. */
#ifndef DT_K_NORMALIZE_IMAGES_H
#define DT_K_NORMALIZE_IMAGES_H

#include <stdint.h>

#include "core/dt_dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DT_DECL_NORMALIZE_IMAGES(sfx)                                                                        \
    void dt_normalize_images_##sfx(int64_t N, int64_t P, const uint8_t *x, const float mean[3], const float std[3], \
                                   void *y, dt_dtype ty, dt_layout ly);

DT_DECL_NORMALIZE_IMAGES(cpu)
DT_DECL_NORMALIZE_IMAGES(cuda)

#ifdef __cplusplus
}
#endif
#endif
