#include "bias.h"
#include "dt_kernel_util.cuh"

namespace {

__global__ void k_rows_fwd(int64_t R, int64_t C, const float *__restrict__ b, float *__restrict__ y) {
    DT_GRID_STRIDE(i, R * C) y[i] += b[i % C];
}

/* One thread per column; consecutive threads read consecutive addresses of each row. */
__global__ void k_rows_bwd(int64_t R, int64_t C, const float *__restrict__ dy, float beta, float *__restrict__ db) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double s = 0.0;
    for (int64_t r = 0; r < R; r++) s += dy[r * C + c];
    dt_store_beta(&db[c], (float)s, beta);
}

__global__ void k_nchw_fwd(int64_t N, int64_t C, int64_t P, const float *__restrict__ b, float *__restrict__ y) {
    DT_GRID_STRIDE(i, N * C * P) y[i] += b[(i / P) % C];
}

/* One block per channel, a fixed-order tree reduction in double. */
__global__ void k_nchw_bwd(int64_t N, int64_t C, int64_t P, const float *__restrict__ dy, float beta, float *__restrict__ db) {
    __shared__ double s[256];
    int64_t c = blockIdx.x;
    double acc = 0.0;
    for (int64_t n = 0; n < N; n++) {
        const float *row = dy + (n * C + c) * P;
        for (int64_t p = threadIdx.x; p < P; p += blockDim.x) acc += row[p];
    }
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int o = blockDim.x / 2; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) s[threadIdx.x] += s[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) dt_store_beta(&db[c], (float)s[0], beta);
}

}  // namespace

extern "C" {
void dt_bias_rows_fwd_cuda(int64_t R, int64_t C, const float *b, float *y) {
    if (R * C <= 0) return;
    k_rows_fwd<<<dt_grid_for(R * C, 256), 256, 0, dt_stream()>>>(R, C, b, y);
    DT_CHECK_LAUNCH();
}
void dt_bias_rows_bwd_cuda(int64_t R, int64_t C, const float *dy, float beta, float *db) {
    if (C <= 0) return;
    k_rows_bwd<<<(unsigned)dt_ceil_div(C, 128), 128, 0, dt_stream()>>>(R, C, dy, beta, db);
    DT_CHECK_LAUNCH();
}
void dt_bias_nchw_fwd_cuda(int64_t N, int64_t C, int64_t P, const float *b, float *y) {
    if (N * C * P <= 0) return;
    k_nchw_fwd<<<dt_grid_for(N * C * P, 256), 256, 0, dt_stream()>>>(N, C, P, b, y);
    DT_CHECK_LAUNCH();
}
void dt_bias_nchw_bwd_cuda(int64_t N, int64_t C, int64_t P, const float *dy, float beta, float *db) {
    if (C <= 0) return;
    k_nchw_bwd<<<(unsigned)C, 256, 0, dt_stream()>>>(N, C, P, dy, beta, db);
    DT_CHECK_LAUNCH();
}
}
