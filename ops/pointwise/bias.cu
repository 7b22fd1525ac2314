#include "ops/pointwise/bias.h"
#include "core/dt_alloc.h"
#include "core/dt_dtype.cuh"
#include "core/dt_kernel_util.cuh"

namespace {

template <typename T>
__global__ void k_rows_fwd(int64_t R, int64_t C, const float *__restrict__ b, T *__restrict__ y) {
    DT_GRID_STRIDE(i, R * C) dt_st(&y[i], dt_ld(&y[i]) + b[i % C]);
}

/* Stage 1: block (bx, by) sums rows [by*ROWS, (by+1)*ROWS) of columns [bx*32, bx*32 + 32) in
 * double: 32 lanes over columns (coalesced), 8 warps over rows, the warps' sums combined in
 * warp order - part[by][c]. Stage 2 sums the parts of each column in block order. */
constexpr int ROWS = 1024;
template <typename T>
__global__ void k_rows_bwd_part(int64_t R, int64_t C, const T *__restrict__ dy, double *__restrict__ part) {
    __shared__ double s[8][32];
    int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x, r0 = (int64_t)blockIdx.y * ROWS;
    int64_t r1 = r0 + ROWS < R ? r0 + ROWS : R;
    double acc = 0.0;
    if (c < C)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) acc += dt_ld(&dy[r * C + c]);
    s[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        double t = 0.0;
        for (int k = 0; k < 8; k++) t += s[k][threadIdx.x];
        part[(int64_t)blockIdx.y * C + c] = t;
    }
}

__global__ void k_rows_bwd_sum(int64_t C, int64_t nparts, const double *__restrict__ part, float beta,
                               float *__restrict__ db) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double s = 0.0;
    for (int64_t k = 0; k < nparts; k++) s += part[k * C + c];
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

template <typename T>
void rows_fwd(int64_t R, int64_t C, const float *b, void *y) {
    if (R * C <= 0) return;
    k_rows_fwd<T><<<dt_grid_for(R * C, 256), 256, 0, dt_stream()>>>(R, C, b, (T *)y);
    DT_CHECK_LAUNCH();
}

template <typename T>
void rows_bwd(int64_t R, int64_t C, const void *dy, float beta, float *db) {
    if (C <= 0) return;
    int64_t nparts = dt_ceil_div(R > 0 ? R : 1, ROWS);
    dt_check_grid_yz("bias gradient", nparts, 1);
    double *part = (double *)dt_gpu_malloc((size_t)(nparts * C) * sizeof(double));
    if (R > 0) {
        k_rows_bwd_part<T><<<dim3((unsigned)dt_ceil_div(C, 32), (unsigned)nparts), dim3(32, 8), 0, dt_stream()>>>(
            R, C, (const T *)dy, part);
        DT_CHECK_LAUNCH();
    } else {
        DT_CHECK(cudaMemsetAsync(part, 0, (size_t)C * sizeof(double), dt_stream()));
    }
    k_rows_bwd_sum<<<(unsigned)dt_ceil_div(C, 128), 128, 0, dt_stream()>>>(C, nparts, part, beta, db);
    DT_CHECK_LAUNCH();
    dt_gpu_free(part);
}

}  // namespace

extern "C" {
void dt_bias_rows_fwd_f32_cuda(int64_t R, int64_t C, const float *b, void *y) { rows_fwd<float>(R, C, b, y); }
void dt_bias_rows_fwd_bf16_cuda(int64_t R, int64_t C, const float *b, void *y) { rows_fwd<__nv_bfloat16>(R, C, b, y); }
void dt_bias_rows_bwd_f32_cuda(int64_t R, int64_t C, const void *dy, float beta, float *db) {
    rows_bwd<float>(R, C, dy, beta, db);
}
void dt_bias_rows_bwd_bf16_cuda(int64_t R, int64_t C, const void *dy, float beta, float *db) {
    rows_bwd<__nv_bfloat16>(R, C, dy, beta, db);
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
