/* CPU twins of pool.h: the plain loops, in the CUDA kernels' order - the maxpool scan and the
 * backward gather visit the same elements in the same order with the same fp32 arithmetic, so
 * their results are the GPU's bit for bit; the average pool's sums (double) differ only in
 * order. One loop nest serves every format: an (image, channel) plane is addressed through
 * its base and the stride between its pixels, which is all that NCHW and NHWC change. The max
 * pools are threaded over planes (each plane's arithmetic is the same on any thread): the stem's
 * pool is a few percent of a CPU training step. */
#include <math.h>

#include "core/dt_dtype.h"
#include "core/dt_parallel.h"
#include "ops/pool/pool.h"

/* Pixel q = y*W + x of plane (n, c) of a [N, C, P] (NCHW) or [N, P, C] (NHWC) tensor sits at
 * base + q * stride. */
typedef struct {
    int64_t base, stride;
} plane;

static plane plane_of(dt_layout l, int64_t n, int64_t c, int64_t C, int64_t P) {
    return l == DT_NHWC ? (plane){n * P * C + c, C} : (plane){(n * C + c) * P, 1};
}

/* One max pool call: its planes q = n * C + c are split over the threads. */
typedef struct {
    dt_dtype dt;
    dt_layout l;
    const void *x, *dy;
    const uint8_t *tap_in;
    int64_t C, H, W, Ho, Wo;
    int k, s, p;
    float beta;
    void *y, *dx;
    uint8_t *tap;
} maxpool_job;

/* planes of about 8 K window reads and up per thread */
static int64_t maxpool_grain(int64_t Ho, int64_t Wo, int k) {
    int64_t per = Ho * Wo * k * k;
    return per >= 8192 ? 1 : 8192 / (per > 0 ? per : 1);
}

static void maxpool_fwd_planes(void *ctx, int64_t q0, int64_t q1) {
    const maxpool_job *j = ctx;
    dt_dtype dt = j->dt;
    dt_layout l = j->l;
    const void *x = j->x;
    int64_t C = j->C, H = j->H, W = j->W, Ho = j->Ho, Wo = j->Wo;
    int k = j->k, s = j->s, p = j->p;
    void *y = j->y;
    uint8_t *tap = j->tap;
    for (int64_t q = q0; q < q1; q++) {
        int64_t n = q / C, c = q % C;
        plane xi = plane_of(l, n, c, C, H * W), yo = plane_of(l, n, c, C, Ho * Wo);
        for (int64_t oy = 0; oy < Ho; oy++)
            for (int64_t ox = 0; ox < Wo; ox++) {
                float best = -INFINITY;
                int bi = -1; /* the argmax's tap ky*k + kx */
                for (int ky = 0; ky < k; ky++) {
                    int64_t iy = oy * s - p + ky;
                    if (iy < 0 || iy >= H) continue;
                    for (int kx = 0; kx < k; kx++) {
                        int64_t ix = ox * s - p + kx;
                        if (ix < 0 || ix >= W) continue;
                        float v = dt_elem_ld(x, dt, xi.base + (iy * W + ix) * xi.stride);
                        /* the first maximum wins; a NaN wins and stays */
                        if (bi < 0 || v > best || (isnan(v) && !isnan(best))) {
                            best = v;
                            bi = ky * k + kx;
                        }
                    }
                }
                int64_t o = yo.base + (oy * Wo + ox) * yo.stride;
                dt_elem_st(y, dt, o, best);
                tap[o] = (uint8_t)bi;
            }
    }
}

static void maxpool_fwd(dt_dtype dt, dt_layout l, const void *x, int64_t N, int64_t C, int64_t H, int64_t W, int k,
                        int s, int p, int64_t Ho, int64_t Wo, void *y, uint8_t *tap) {
    maxpool_job j = {.dt = dt, .l = l, .x = x, .C = C, .H = H, .W = W, .Ho = Ho, .Wo = Wo, .k = k, .s = s, .p = p,
                     .y = y, .tap = tap};
    dt_parallel_for(N * C, maxpool_grain(Ho, Wo, k), maxpool_fwd_planes, &j);
}

/* The windows [*o0, *o1] of one axis that contain input coordinate i. */
static void windows_of(int64_t i, int k, int s, int p, int64_t On, int64_t *o0, int64_t *o1) {
    *o0 = i + p - (k - 1) <= 0 ? 0 : (i + p - (k - 1) + s - 1) / s;
    *o1 = (i + p) / s < On - 1 ? (i + p) / s : On - 1;
}

static void maxpool_bwd_planes(void *ctx, int64_t q0, int64_t q1) {
    const maxpool_job *j = ctx;
    dt_dtype dt = j->dt;
    dt_layout l = j->l;
    const void *dy = j->dy;
    const uint8_t *tap = j->tap_in;
    int64_t C = j->C, H = j->H, W = j->W, Ho = j->Ho, Wo = j->Wo;
    int k = j->k, s = j->s, p = j->p;
    float beta = j->beta;
    void *dx = j->dx;
    for (int64_t q = q0; q < q1; q++) {
        int64_t n = q / C, c = q % C;
        plane xi = plane_of(l, n, c, C, H * W), yo = plane_of(l, n, c, C, Ho * Wo);
        for (int64_t iy = 0; iy < H; iy++)
            for (int64_t ix = 0; ix < W; ix++) {
                int64_t oy0, oy1, ox0, ox1;
                windows_of(iy, k, s, p, Ho, &oy0, &oy1);
                windows_of(ix, k, s, p, Wo, &ox0, &ox1);
                float acc = 0.0f;
                for (int64_t oy = oy0; oy <= oy1; oy++)
                    for (int64_t ox = ox0; ox <= ox1; ox++) {
                        int64_t o = yo.base + (oy * Wo + ox) * yo.stride;
                        /* the input is tap (iy - oy*s + p)*k + (ix - ox*s + p) of window (oy, ox) */
                        if (tap[o] == (iy - oy * s + p) * k + (ix - ox * s + p)) acc += dt_elem_ld(dy, dt, o);
                    }
                dt_elem_st_beta(dx, dt, xi.base + (iy * W + ix) * xi.stride, acc, beta);
            }
    }
}

static void maxpool_bwd(dt_dtype dt, dt_layout l, const void *dy, const uint8_t *tap, int64_t N, int64_t C,
                        int64_t H, int64_t W, int k, int s, int p, int64_t Ho, int64_t Wo, float beta, void *dx) {
    maxpool_job j = {.dt = dt, .l = l, .dy = dy, .tap_in = tap, .C = C, .H = H, .W = W, .Ho = Ho, .Wo = Wo, .k = k,
                     .s = s, .p = p, .beta = beta, .dx = dx};
    dt_parallel_for(N * C, maxpool_grain(H, W, k), maxpool_bwd_planes, &j);
}

/* y [N, C] row-major whatever x's layout */
static void avgpool_fwd(dt_dtype dt, dt_layout l, const void *x, int64_t N, int64_t C, int64_t P, void *y) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++) {
            plane xi = plane_of(l, n, c, C, P);
            double s = 0;
            for (int64_t q = 0; q < P; q++) s += dt_elem_ld(x, dt, xi.base + q * xi.stride);
            dt_elem_st(y, dt, n * C + c, (float)(s / P));
        }
}

static void avgpool_bwd(dt_dtype dt, dt_layout l, const void *dy, int64_t N, int64_t C, int64_t P, float beta,
                        void *dx) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++) {
            plane xi = plane_of(l, n, c, C, P);
            float g = dt_elem_ld(dy, dt, n * C + c) / (float)P;
            for (int64_t q = 0; q < P; q++) dt_elem_st_beta(dx, dt, xi.base + q * xi.stride, g, beta);
        }
}

/* The public twins of one format (name: f32_nchw, f32_nhwc, bf16_nhwc). */
#define DT_POOL_TWIN(name, dtype, layout)                                                                     \
    void dt_maxpool_fwd_##name##_cpu(const void *x, int64_t N, int64_t C, int64_t H, int64_t W, int k, int s, \
                                     int p, int64_t Ho, int64_t Wo, void *y, uint8_t *tap) {                   \
        maxpool_fwd(dtype, layout, x, N, C, H, W, k, s, p, Ho, Wo, y, tap);                                   \
    }                                                                                                         \
    void dt_maxpool_bwd_##name##_cpu(const void *dy, const uint8_t *tap, int64_t N, int64_t C, int64_t H,      \
                                     int64_t W, int k, int s, int p, int64_t Ho, int64_t Wo, float beta,       \
                                     void *dx) {                                                               \
        maxpool_bwd(dtype, layout, dy, tap, N, C, H, W, k, s, p, Ho, Wo, beta, dx);                           \
    }                                                                                                         \
    void dt_avgpool_fwd_##name##_cpu(const void *x, int64_t N, int64_t C, int64_t P, void *y) {               \
        avgpool_fwd(dtype, layout, x, N, C, P, y);                                                            \
    }                                                                                                         \
    void dt_avgpool_bwd_##name##_cpu(const void *dy, int64_t N, int64_t C, int64_t P, float beta, void *dx) { \
        avgpool_bwd(dtype, layout, dy, N, C, P, beta, dx);                                                    \
    }

DT_POOL_TWIN(f32_nchw, DT_F32, DT_NCHW)
DT_POOL_TWIN(f32_nhwc, DT_F32, DT_NHWC)
DT_POOL_TWIN(bf16_nhwc, DT_BF16, DT_NHWC)
