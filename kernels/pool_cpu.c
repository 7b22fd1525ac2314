/* CPU twins of pool.h: the plain loops, in the CUDA kernels' order - the maxpool scan and the
 * backward gather visit the same elements in the same order with the same fp32 arithmetic, so
 * their results are the GPU's bit for bit; the average pool's sums (double) differ only in
 * order. */
#include <math.h>

#include "dt_dtype.h"
#include "pool.h"

/* ---- NCHW f32 ---- */

void dt_maxpool_fwd_f32_nchw_cpu(const void *xv, int64_t N, int64_t C, int64_t H, int64_t W, int k, int s, int p,
                                 int64_t Ho, int64_t Wo, void *yv, int32_t *idx) {
    const float *x = xv;
    float *y = yv;
    for (int64_t pl = 0; pl < N * C; pl++) {
        const float *xp = x + pl * H * W;
        for (int64_t oy = 0; oy < Ho; oy++)
            for (int64_t ox = 0; ox < Wo; ox++) {
                float best = -INFINITY;
                int32_t bi = -1;
                for (int ky = 0; ky < k; ky++) {
                    int64_t iy = oy * s - p + ky;
                    if (iy < 0 || iy >= H) continue;
                    for (int kx = 0; kx < k; kx++) {
                        int64_t ix = ox * s - p + kx;
                        if (ix < 0 || ix >= W) continue;
                        float v = xp[iy * W + ix];
                        if (bi < 0 || v > best || isnan(v)) {
                            best = v;
                            bi = (int32_t)(iy * W + ix);
                            if (isnan(v)) goto done;
                        }
                    }
                }
            done:
                y[(pl * Ho + oy) * Wo + ox] = best;
                idx[(pl * Ho + oy) * Wo + ox] = bi;
            }
    }
}

/* The windows [*o0, *o1] of one axis that contain input coordinate i. */
static void windows_of(int64_t i, int k, int s, int p, int64_t On, int64_t *o0, int64_t *o1) {
    *o0 = i + p - (k - 1) <= 0 ? 0 : (i + p - (k - 1) + s - 1) / s;
    *o1 = (i + p) / s < On - 1 ? (i + p) / s : On - 1;
}

void dt_maxpool_bwd_f32_nchw_cpu(const void *dyv, const int32_t *idx, int64_t N, int64_t C, int64_t H, int64_t W,
                                 int k, int s, int p, int64_t Ho, int64_t Wo, float beta, void *dxv) {
    const float *dy = dyv;
    float *dx = dxv;
    for (int64_t pl = 0; pl < N * C; pl++)
        for (int64_t iy = 0; iy < H; iy++)
            for (int64_t ix = 0; ix < W; ix++) {
                int64_t oy0, oy1, ox0, ox1;
                windows_of(iy, k, s, p, Ho, &oy0, &oy1);
                windows_of(ix, k, s, p, Wo, &ox0, &ox1);
                float acc = 0.0f;
                for (int64_t oy = oy0; oy <= oy1; oy++)
                    for (int64_t ox = ox0; ox <= ox1; ox++) {
                        int64_t o = (pl * Ho + oy) * Wo + ox;
                        if (idx[o] == iy * W + ix) acc += dy[o];
                    }
                float *d = &dx[(pl * H + iy) * W + ix];
                *d = beta == 0.0f ? acc : *d + acc;
            }
}

void dt_avgpool_fwd_f32_nchw_cpu(const void *xv, int64_t N, int64_t C, int64_t P, void *yv) {
    const float *x = xv;
    float *y = yv;
    for (int64_t pl = 0; pl < N * C; pl++) {
        double s = 0;
        for (int64_t i = 0; i < P; i++) s += x[pl * P + i];
        y[pl] = (float)(s / P);
    }
}

void dt_avgpool_bwd_f32_nchw_cpu(const void *dyv, int64_t N, int64_t C, int64_t P, float beta, void *dxv) {
    const float *dy = dyv;
    float *dx = dxv;
    for (int64_t pl = 0; pl < N * C; pl++) {
        float g = dy[pl] / (float)P;
        for (int64_t i = 0; i < P; i++) dx[pl * P + i] = beta == 0.0f ? g : dx[pl * P + i] + g;
    }
}

/* ---- NHWC f32 / bf16: x [N, H, W, C] ---- */

static void maxpool_nhwc_fwd(dt_dtype dt, const void *x, int64_t N, int64_t C, int64_t H, int64_t W, int k, int s,
                             int p, int64_t Ho, int64_t Wo, void *y, int32_t *idx) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t oy = 0; oy < Ho; oy++)
            for (int64_t ox = 0; ox < Wo; ox++)
                for (int64_t c = 0; c < C; c++) {
                    float best = -INFINITY;
                    int32_t bi = -1;
                    for (int ky = 0; ky < k; ky++) {
                        int64_t iy = oy * s - p + ky;
                        if (iy < 0 || iy >= H) continue;
                        for (int kx = 0; kx < k; kx++) {
                            int64_t ix = ox * s - p + kx;
                            if (ix < 0 || ix >= W) continue;
                            float v = dt_elem_ld(x, dt, ((n * H + iy) * W + ix) * C + c);
                            /* the first maximum wins; a NaN wins and stays */
                            if (bi < 0 || v > best || (isnan(v) && !isnan(best))) {
                                best = v;
                                bi = (int32_t)(iy * W + ix);
                            }
                        }
                    }
                    int64_t o = ((n * Ho + oy) * Wo + ox) * C + c;
                    dt_elem_st(y, dt, o, best);
                    idx[o] = bi;
                }
}

static void maxpool_nhwc_bwd(dt_dtype dt, const void *dy, const int32_t *idx, int64_t N, int64_t C, int64_t H,
                             int64_t W, int k, int s, int p, int64_t Ho, int64_t Wo, float beta, void *dx) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t iy = 0; iy < H; iy++)
            for (int64_t ix = 0; ix < W; ix++) {
                int64_t oy0, oy1, ox0, ox1;
                windows_of(iy, k, s, p, Ho, &oy0, &oy1);
                windows_of(ix, k, s, p, Wo, &ox0, &ox1);
                for (int64_t c = 0; c < C; c++) {
                    float acc = 0.0f;
                    for (int64_t oy = oy0; oy <= oy1; oy++)
                        for (int64_t ox = ox0; ox <= ox1; ox++) {
                            int64_t o = ((n * Ho + oy) * Wo + ox) * C + c;
                            if (idx[o] == iy * W + ix) acc += dt_elem_ld(dy, dt, o);
                        }
                    dt_elem_st_beta(dx, dt, ((n * H + iy) * W + ix) * C + c, acc, beta);
                }
            }
}

static void avgpool_nhwc_fwd(dt_dtype dt, const void *x, int64_t N, int64_t C, int64_t P, void *y) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++) {
            double s = 0;
            for (int64_t q = 0; q < P; q++) s += dt_elem_ld(x, dt, (n * P + q) * C + c);
            dt_elem_st(y, dt, n * C + c, (float)(s / P));
        }
}

static void avgpool_nhwc_bwd(dt_dtype dt, const void *dy, int64_t N, int64_t C, int64_t P, float beta, void *dx) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t q = 0; q < P; q++)
            for (int64_t c = 0; c < C; c++)
                dt_elem_st_beta(dx, dt, (n * P + q) * C + c, dt_elem_ld(dy, dt, n * C + c) / (float)P, beta);
}

#define DT_POOL_NHWC_TWIN(name, dtype)                                                                              \
    void dt_maxpool_fwd_##name##_nhwc_cpu(const void *x, int64_t N, int64_t C, int64_t H, int64_t W, int k, int s, \
                                          int p, int64_t Ho, int64_t Wo, void *y, int32_t *idx) {                   \
        maxpool_nhwc_fwd(dtype, x, N, C, H, W, k, s, p, Ho, Wo, y, idx);                                            \
    }                                                                                                               \
    void dt_maxpool_bwd_##name##_nhwc_cpu(const void *dy, const int32_t *idx, int64_t N, int64_t C, int64_t H,      \
                                          int64_t W, int k, int s, int p, int64_t Ho, int64_t Wo, float beta,       \
                                          void *dx) {                                                               \
        maxpool_nhwc_bwd(dtype, dy, idx, N, C, H, W, k, s, p, Ho, Wo, beta, dx);                                    \
    }                                                                                                               \
    void dt_avgpool_fwd_##name##_nhwc_cpu(const void *x, int64_t N, int64_t C, int64_t P, void *y) {               \
        avgpool_nhwc_fwd(dtype, x, N, C, P, y);                                                                     \
    }                                                                                                               \
    void dt_avgpool_bwd_##name##_nhwc_cpu(const void *dy, int64_t N, int64_t C, int64_t P, float beta, void *dx) { \
        avgpool_nhwc_bwd(dtype, dy, N, C, P, beta, dx);                                                             \
    }

DT_POOL_NHWC_TWIN(f32, DT_F32)
DT_POOL_NHWC_TWIN(bf16, DT_BF16)
