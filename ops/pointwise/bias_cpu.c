#include "ops/pointwise/bias.h"

#include "core/dt_dtype.h"

void dt_bias_rows_fwd_f32_cpu(int64_t R, int64_t C, const float *b, void *yv) {
    float *y = yv;
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) y[r * C + c] += b[c];
}

void dt_bias_rows_fwd_bf16_cpu(int64_t R, int64_t C, const float *b, void *yv) {
    dt_bf16 *y = yv;
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) y[r * C + c] = dt_bf16_from_float(dt_bf16_to_float(y[r * C + c]) + b[c]);
}

static void rows_bwd(int64_t R, int64_t C, const void *dy, dt_dtype t, float beta, float *db) {
    for (int64_t c = 0; c < C; c++) {
        double s = 0.0;
        for (int64_t r = 0; r < R; r++) s += dt_elem_ld(dy, t, r * C + c);
        db[c] = beta == 0.0f ? (float)s : db[c] + (float)s;
    }
}
void dt_bias_rows_bwd_f32_cpu(int64_t R, int64_t C, const void *dy, float beta, float *db) { rows_bwd(R, C, dy, DT_F32, beta, db); }
void dt_bias_rows_bwd_bf16_cpu(int64_t R, int64_t C, const void *dy, float beta, float *db) { rows_bwd(R, C, dy, DT_BF16, beta, db); }

void dt_bias_nchw_fwd_cpu(int64_t N, int64_t C, int64_t P, const float *b, float *y) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++) {
            float *row = y + (n * C + c) * P;
            for (int64_t p = 0; p < P; p++) row[p] += b[c];
        }
}

void dt_bias_nchw_bwd_cpu(int64_t N, int64_t C, int64_t P, const float *dy, float beta, float *db) {
    for (int64_t c = 0; c < C; c++) {
        double s = 0.0;
        for (int64_t n = 0; n < N; n++) {
            const float *row = dy + (n * C + c) * P;
            for (int64_t p = 0; p < P; p++) s += row[p];
        }
        db[c] = beta == 0.0f ? (float)s : db[c] + (float)s;
    }
}
