/* CPU twins of convert.h: element by element in the logical order. */
#include "ops/pointwise/convert.h"

/* Offset of (n, c, p) in a layout. */
static int64_t at(dt_layout l, int64_t C, int64_t P, int64_t n, int64_t c, int64_t p) {
    return l == DT_NHWC ? (n * P + p) * C + c : (n * C + c) * P + p;
}

void dt_convert_cpu(int64_t N, int64_t C, int64_t P, const void *x, dt_dtype tx, dt_layout lx, float beta, void *y,
                    dt_dtype ty, dt_layout ly) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t p = 0; p < P; p++)
                dt_elem_st_beta(y, ty, at(ly, C, P, n, c, p), dt_elem_ld(x, tx, at(lx, C, P, n, c, p)), beta);
}

void dt_f32_to_bf16_cpu(int64_t n, const float *x, dt_bf16 *y) {
    for (int64_t i = 0; i < n; i++) y[i] = dt_bf16_from_float(x[i]);
}

void dt_bf16_to_f32_cpu(int64_t n, const dt_bf16 *x, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = dt_bf16_to_float(x[i]);
}

void dt_f32_to_bf16_chunks_cpu(const dt_cast_chunk *chunks, int nchunks) {
    for (int i = 0; i < nchunks; i++) dt_f32_to_bf16_cpu(chunks[i].n, chunks[i].src, chunks[i].dst);
}
