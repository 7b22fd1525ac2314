/* CPU twins of convert.h. */
#include "convert.h"

void dt_f32_to_bf16_cpu(int64_t n, const float *x, dt_bf16 *y) {
    for (int64_t i = 0; i < n; i++) y[i] = dt_bf16_from_float(x[i]);
}

void dt_bf16_to_f32_cpu(int64_t n, const dt_bf16 *x, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = dt_bf16_to_float(x[i]);
}
