#include <math.h>

#include "pool.h"

void dt_maxpool_fwd_cpu(const float *x, int64_t NC, int64_t H, int64_t W, int k, int s, int p,
                        int64_t Ho, int64_t Wo, float *y, int32_t *idx) {
    for (int64_t pl = 0; pl < NC; pl++) {
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

void dt_maxpool_bwd_cpu(const float *dy, const int32_t *idx, int64_t NC, int64_t H, int64_t W,
                        int k, int s, int p, int64_t Ho, int64_t Wo, float beta, float *dx) {
    for (int64_t pl = 0; pl < NC; pl++)
        for (int64_t iy = 0; iy < H; iy++)
            for (int64_t ix = 0; ix < W; ix++) {
                float acc = 0.0f;
                /* windows oy with oy*s - p <= iy <= oy*s - p + k - 1 */
                int64_t oy0 = iy + p - (k - 1) <= 0 ? 0 : (iy + p - (k - 1) + s - 1) / s, oy1 = (iy + p) / s;
                int64_t ox0 = ix + p - (k - 1) <= 0 ? 0 : (ix + p - (k - 1) + s - 1) / s, ox1 = (ix + p) / s;
                for (int64_t oy = oy0; oy <= oy1 && oy < Ho; oy++)
                    for (int64_t ox = ox0; ox <= ox1 && ox < Wo; ox++) {
                        int64_t o = (pl * Ho + oy) * Wo + ox;
                        if (idx[o] == iy * W + ix) acc += dy[o];
                    }
                float *d = &dx[(pl * H + iy) * W + ix];
                *d = beta == 0.0f ? acc : *d + acc;
            }
}

void dt_avgpool_fwd_cpu(const float *x, int64_t NC, int64_t P, float *y) {
    for (int64_t pl = 0; pl < NC; pl++) {
        double s = 0;
        for (int64_t i = 0; i < P; i++) s += x[pl * P + i];
        y[pl] = (float)(s / P);
    }
}

void dt_avgpool_bwd_cpu(const float *dy, int64_t NC, int64_t P, float beta, float *dx) {
    for (int64_t pl = 0; pl < NC; pl++) {
        float g = dy[pl] / (float)P;
        for (int64_t i = 0; i < P; i++) dx[pl * P + i] = beta == 0.0f ? g : dx[pl * P + i] + g;
    }
}
