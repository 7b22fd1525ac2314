/* CPU twin of normalize_images.h: element by element in the output's logical order. */
#include "ops/pointwise/normalize_images.h"

void dt_normalize_images_cpu(int64_t N, int64_t P, const uint8_t *x, const float mean[3], const float std[3], void *y,
                             dt_dtype ty, dt_layout ly) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < 3; c++)
            for (int64_t p = 0; p < P; p++) {
                float v = ((float)x[(n * P + p) * 3 + c] / 255.0f - mean[c]) / std[c];
                dt_elem_st(y, ty, ly == DT_NHWC ? (n * P + p) * 3 + c : (n * 3 + c) * P + p, v);
            }
}
