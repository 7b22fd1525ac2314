/* CPU twins of layout.h: plain loops. */
#include <string.h>

#include "ops/pointwise/layout.h"

void dt_nchw_to_cnhw_cpu(const float *x, int64_t nb, int64_t C, int64_t P, float *y) {
    for (int64_t i = 0; i < nb; i++)
        for (int64_t c = 0; c < C; c++) memcpy(y + c * nb * P + i * P, x + (i * C + c) * P, P * sizeof(float));
}

void dt_cnhw_to_nchw_cpu(const float *y, int64_t nb, int64_t C, int64_t P, const float *bias, float *x) {
    for (int64_t i = 0; i < nb; i++)
        for (int64_t c = 0; c < C; c++) {
            const float *src = y + c * nb * P + i * P;
            float *dst = x + (i * C + c) * P;
            float b = bias ? bias[c] : 0.0f;
            for (int64_t p = 0; p < P; p++) dst[p] = src[p] + b;
        }
}

void dt_nchw_to_nhwc_cpu(int64_t nb, int64_t C, int64_t P, const float *x, int64_t ldy, float *y) {
    for (int64_t i = 0; i < nb; i++)
        for (int64_t p = 0; p < P; p++)
            for (int64_t c = 0; c < C; c++) y[(i * P + p) * ldy + c] = x[(i * C + c) * P + p];
}

void dt_nhwc_to_nchw_cpu(int64_t nb, int64_t C, int64_t P, const float *x, int64_t ldx, const float *bias, float beta,
                         float *y) {
    for (int64_t i = 0; i < nb; i++)
        for (int64_t c = 0; c < C; c++) {
            float b = bias ? bias[c] : 0.0f;
            float *dst = y + (i * C + c) * P;
            for (int64_t p = 0; p < P; p++) {
                float v = x[(i * P + p) * ldx + c] + b;
                dst[p] = beta == 0.0f ? v : beta * dst[p] + v;
            }
        }
}
