#include "dt_kernel_util.cuh"
#include "pool.h"

namespace {

__global__ void k_maxpool_fwd(const float *__restrict__ x, int64_t NC, int H, int W, int k, int s, int p, int Ho,
                              int Wo, float *__restrict__ y, int32_t *__restrict__ idx) {
    DT_GRID_STRIDE(t, NC * Ho * Wo) {
        int ox = (int)(t % Wo), oy = (int)((t / Wo) % Ho);
        int64_t pl = t / ((int64_t)Ho * Wo);
        const float *xp = x + pl * H * W;
        float best = -INFINITY;
        int bi = -1;
        for (int ky = 0; ky < k; ky++) {
            int iy = oy * s - p + ky;
            if (iy < 0 || iy >= H) continue;
            for (int kx = 0; kx < k; kx++) {
                int ix = ox * s - p + kx;
                if (ix < 0 || ix >= W) continue;
                float v = __ldg(xp + iy * W + ix);
                if (bi < 0 || v > best || isnan(v)) {
                    best = v;
                    bi = iy * W + ix;
                    if (isnan(v)) { ky = k; break; }
                }
            }
        }
        y[t] = best;
        idx[t] = bi;
    }
}

__global__ void k_maxpool_bwd(const float *__restrict__ dy, const int32_t *__restrict__ idx, int64_t NC, int H, int W,
                              int k, int s, int p, int Ho, int Wo, float beta, float *__restrict__ dx) {
    DT_GRID_STRIDE(t, NC * H * W) {
        int ix = (int)(t % W), iy = (int)((t / W) % H);
        int64_t pl = t / ((int64_t)H * W);
        int oy0 = iy + p - (k - 1) <= 0 ? 0 : (iy + p - (k - 1) + s - 1) / s, oy1 = min((iy + p) / s, Ho - 1);
        int ox0 = ix + p - (k - 1) <= 0 ? 0 : (ix + p - (k - 1) + s - 1) / s, ox1 = min((ix + p) / s, Wo - 1);
        float acc = 0.0f;
        int me = iy * W + ix;
        for (int oy = oy0; oy <= oy1; oy++)
            for (int ox = ox0; ox <= ox1; ox++) {
                int64_t o = (pl * Ho + oy) * Wo + ox;
                if (idx[o] == me) acc += dy[o];
            }
        dt_store_beta(&dx[t], acc, beta);
    }
}

/* One warp per plane. */
__global__ void k_avgpool_fwd(const float *__restrict__ x, int64_t NC, int64_t P, float *__restrict__ y) {
    int64_t pl = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (pl >= NC) return;
    float s = 0.0f;
    for (int64_t i = lane; i < P; i += 32) s += x[pl * P + i];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    if (lane == 0) y[pl] = s / (float)P;
}

__global__ void k_avgpool_bwd(const float *__restrict__ dy, int64_t NC, int64_t P, float beta, float *__restrict__ dx) {
    DT_GRID_STRIDE(t, NC * P) dt_store_beta(&dx[t], dy[t / P] / (float)P, beta);
}

}  // namespace

extern "C" {
void dt_maxpool_fwd_cuda(const float *x, int64_t NC, int64_t H, int64_t W, int k, int s, int p, int64_t Ho,
                         int64_t Wo, float *y, int32_t *idx) {
    if (NC * Ho * Wo <= 0) return;
    k_maxpool_fwd<<<dt_grid_for(NC * Ho * Wo, 256), 256, 0, dt_stream()>>>(x, NC, (int)H, (int)W, k, s, p, (int)Ho,
                                                                           (int)Wo, y, idx);
    DT_CHECK_LAUNCH();
}
void dt_maxpool_bwd_cuda(const float *dy, const int32_t *idx, int64_t NC, int64_t H, int64_t W, int k, int s, int p,
                         int64_t Ho, int64_t Wo, float beta, float *dx) {
    if (NC * H * W <= 0) return;
    k_maxpool_bwd<<<dt_grid_for(NC * H * W, 256), 256, 0, dt_stream()>>>(dy, idx, NC, (int)H, (int)W, k, s, p,
                                                                         (int)Ho, (int)Wo, beta, dx);
    DT_CHECK_LAUNCH();
}
void dt_avgpool_fwd_cuda(const float *x, int64_t NC, int64_t P, float *y) {
    if (NC <= 0) return;
    k_avgpool_fwd<<<(unsigned)dt_ceil_div(NC * 32, 256), 256, 0, dt_stream()>>>(x, NC, P, y);
    DT_CHECK_LAUNCH();
}
void dt_avgpool_bwd_cuda(const float *dy, int64_t NC, int64_t P, float beta, float *dx) {
    if (NC * P <= 0) return;
    k_avgpool_bwd<<<dt_grid_for(NC * P, 256), 256, 0, dt_stream()>>>(dy, NC, P, beta, dx);
    DT_CHECK_LAUNCH();
}
}
