/* CUDA versions of layout.h.
 * cnhw: one plane (c, i) per (blockIdx.y, blockIdx.z), a straight copy.
 * nhwc: 32 x 32 tiles through shared memory (rows padded to 33 floats against bank
 * conflicts), so that both the read of one layout and the write of the other are coalesced;
 * images loop over blockIdx.z (grid-stride, any nb). */
#include "core/dt_kernel_util.cuh"
#include "ops/pointwise/layout.h"

namespace {

__global__ void k_nchw_to_cnhw(const float *__restrict__ x, int64_t nb, int64_t C, int64_t P, float *__restrict__ y) {
    int64_t c = blockIdx.y, i = blockIdx.z;
    const float *src = x + (i * C + c) * P;
    float *dst = y + c * nb * P + i * P;
    for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < P; p += (int64_t)gridDim.x * blockDim.x) dst[p] = src[p];
}

__global__ void k_cnhw_to_nchw(const float *__restrict__ y, int64_t nb, int64_t C, int64_t P,
                               const float *__restrict__ bias, float *__restrict__ x) {
    int64_t c = blockIdx.y, i = blockIdx.z;
    const float *src = y + c * nb * P + i * P;
    float *dst = x + (i * C + c) * P;
    float b = bias ? bias[c] : 0.0f;
    for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < P; p += (int64_t)gridDim.x * blockDim.x) dst[p] = src[p] + b;
}

const int TILE = 32, ROWS = 8; /* block = 32 x 8 threads, each moves 4 elements */

/* blockIdx.x: tile of positions, blockIdx.y: tile of channels. */
__global__ void k_nchw_to_nhwc(int64_t nb, int C, int P, const float *__restrict__ x, int64_t ldy, float *__restrict__ y) {
    __shared__ float t[TILE][TILE + 1];
    const int p0 = blockIdx.x * TILE, c0 = blockIdx.y * TILE;
    for (int64_t i = blockIdx.z; i < nb; i += gridDim.z) {
        const float *xi = x + i * C * (int64_t)P;
        for (int r = threadIdx.y; r < TILE; r += ROWS) { /* read: row = channel, lanes along p */
            int c = c0 + r, p = p0 + threadIdx.x;
            t[r][threadIdx.x] = (c < C && p < P) ? __ldg(xi + (int64_t)c * P + p) : 0.0f;
        }
        __syncthreads();
        for (int r = threadIdx.y; r < TILE; r += ROWS) { /* write: row = position, lanes along c */
            int p = p0 + r, c = c0 + threadIdx.x;
            if (p < P && c < C) y[(i * P + p) * ldy + c] = t[threadIdx.x][r];
        }
        __syncthreads();
    }
}

__global__ void k_nhwc_to_nchw(int64_t nb, int C, int P, const float *__restrict__ x, int64_t ldx,
                               const float *__restrict__ bias, float beta, float *__restrict__ y) {
    __shared__ float t[TILE][TILE + 1];
    const int p0 = blockIdx.x * TILE, c0 = blockIdx.y * TILE;
    for (int64_t i = blockIdx.z; i < nb; i += gridDim.z) {
        for (int r = threadIdx.y; r < TILE; r += ROWS) { /* read: row = position, lanes along c */
            int p = p0 + r, c = c0 + threadIdx.x;
            t[r][threadIdx.x] = (p < P && c < C) ? __ldg(x + (i * P + p) * ldx + c) : 0.0f;
        }
        __syncthreads();
        for (int r = threadIdx.y; r < TILE; r += ROWS) { /* write: row = channel, lanes along p */
            int c = c0 + r, p = p0 + threadIdx.x;
            if (c < C && p < P) {
                float v = t[threadIdx.x][r] + (bias ? __ldg(bias + c) : 0.0f);
                float *d = y + (i * C + c) * (int64_t)P + p;
                *d = beta == 0.0f ? v : beta * *d + v;
            }
        }
        __syncthreads();
    }
}

dim3 tile_grid(const char *what, int64_t nb, int64_t C, int64_t P) {
    if (C > INT32_MAX || P > INT32_MAX) dt_fatal("%s: %lld channels x %lld positions exceed 2^31", what, (long long)C, (long long)P);
    int64_t gx = (P + TILE - 1) / TILE, gy = (C + TILE - 1) / TILE;
    if (gy > 65535) dt_fatal("%s: %lld channels exceed the launch grid", what, (long long)C);
    int64_t gz = nb < 65535 ? nb : 65535;
    return dim3((unsigned)gx, (unsigned)gy, (unsigned)gz);
}

}  // namespace

extern "C" {

void dt_nchw_to_cnhw_cuda(const float *x, int64_t nb, int64_t C, int64_t P, float *y) {
    if (nb * C * P <= 0) return;
    dt_check_grid_yz("nchw_to_cnhw", C, nb);
    k_nchw_to_cnhw<<<dim3(dt_blocks_per_plane(P, C * nb), (unsigned)C, (unsigned)nb), 256, 0, dt_stream()>>>(x, nb, C, P, y);
    DT_CHECK_LAUNCH();
}

void dt_cnhw_to_nchw_cuda(const float *y, int64_t nb, int64_t C, int64_t P, const float *bias, float *x) {
    if (nb * C * P <= 0) return;
    dt_check_grid_yz("cnhw_to_nchw", C, nb);
    k_cnhw_to_nchw<<<dim3(dt_blocks_per_plane(P, C * nb), (unsigned)C, (unsigned)nb), 256, 0, dt_stream()>>>(y, nb, C, P, bias, x);
    DT_CHECK_LAUNCH();
}

void dt_nchw_to_nhwc_cuda(int64_t nb, int64_t C, int64_t P, const float *x, int64_t ldy, float *y) {
    if (nb * C * P <= 0) return;
    k_nchw_to_nhwc<<<tile_grid("nchw_to_nhwc", nb, C, P), dim3(TILE, ROWS), 0, dt_stream()>>>(nb, (int)C, (int)P, x, ldy, y);
    DT_CHECK_LAUNCH();
}

void dt_nhwc_to_nchw_cuda(int64_t nb, int64_t C, int64_t P, const float *x, int64_t ldx, const float *bias, float beta,
                          float *y) {
    if (nb * C * P <= 0) return;
    k_nhwc_to_nchw<<<tile_grid("nhwc_to_nchw", nb, C, P), dim3(TILE, ROWS), 0, dt_stream()>>>(nb, (int)C, (int)P, x, ldx,
                                                                                               bias, beta, y);
    DT_CHECK_LAUNCH();
}
}
