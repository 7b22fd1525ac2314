/* CPU twins of dropout.h: the CUDA kernels' hash and expressions, one element at a time. */
#include "core/dt_dtype.h"
#include "ops/pointwise/dropout.h"

static void fwd(dt_dtype t, int64_t n, float p, uint64_t seed, const int64_t *snap, const void *x, void *y) {
    uint64_t key = dt_dropout_key(seed, snap[0]);
    uint32_t thr = dt_dropout_threshold(p);
    float scale = dt_dropout_scale(p);
    for (int64_t i = 0; i < n; i++) dt_elem_st(y, t, i, dt_dropout_keep(key, i, thr) ? dt_elem_ld(x, t, i) * scale : 0.0f);
}

static void bwd(dt_dtype t, int64_t n, float p, uint64_t seed, const int64_t *snap, const void *dy, float beta, void *dx) {
    uint64_t key = dt_dropout_key(seed, snap[0]);
    uint32_t thr = dt_dropout_threshold(p);
    float scale = dt_dropout_scale(p);
    for (int64_t i = 0; i < n; i++)
        dt_elem_st_beta(dx, t, i, dt_dropout_keep(key, i, thr) ? dt_elem_ld(dy, t, i) * scale : 0.0f, beta);
}

void dt_dropout_fwd_f32_cpu(int64_t n, float p, uint64_t seed, const int64_t *snap, const void *x, void *y) {
    fwd(DT_F32, n, p, seed, snap, x, y);
}
void dt_dropout_fwd_bf16_cpu(int64_t n, float p, uint64_t seed, const int64_t *snap, const void *x, void *y) {
    fwd(DT_BF16, n, p, seed, snap, x, y);
}
void dt_dropout_bwd_f32_cpu(int64_t n, float p, uint64_t seed, const int64_t *snap, const void *dy, float beta, void *dx) {
    bwd(DT_F32, n, p, seed, snap, dy, beta, dx);
}
void dt_dropout_bwd_bf16_cpu(int64_t n, float p, uint64_t seed, const int64_t *snap, const void *dy, float beta,
                             void *dx) {
    bwd(DT_BF16, n, p, seed, snap, dy, beta, dx);
}
void dt_dropout_tick_cpu(int64_t *counter, int64_t *snap) { snap[0] = ++counter[0]; }
