/* CUDA versions of convert.h. */
#include "ops/pointwise/convert.h"
#include "core/dt_dtype.cuh"
#include "core/dt_kernel_util.cuh"

namespace {

template <typename Tx, typename Ty>
__global__ void k_convert_same(int64_t n, const Tx *__restrict__ x, float beta, Ty *__restrict__ y) {
    DT_GRID_STRIDE(i, n) dt_st_beta(&y[i], dt_ld(&x[i]), beta);
}

/* One image's [R, S] matrix x to y = x^T [S, R] (NCHW -> NHWC: R = C, S = P; back: R = P,
 * S = C), through a 32 x 33 tile (the padding column keeps the transposed reads free of bank
 * conflicts). Grid: (ceil(S/32), ceil(R/32), N); block 32 x 8. */
template <typename Tx, typename Ty>
__global__ void k_convert_transpose(int64_t R, int64_t S, const Tx *__restrict__ x, float beta, Ty *__restrict__ y) {
    __shared__ float tile[32][33];
    const int64_t img = (int64_t)blockIdx.z * R * S;
    const int64_t s0 = (int64_t)blockIdx.x * 32, r0 = (int64_t)blockIdx.y * 32;
    for (int k = threadIdx.y; k < 32; k += 8) {
        int64_t r = r0 + k, s = s0 + threadIdx.x;
        if (r < R && s < S) tile[k][threadIdx.x] = dt_ld(&x[img + r * S + s]);
    }
    __syncthreads();
    for (int k = threadIdx.y; k < 32; k += 8) {
        int64_t s = s0 + k, r = r0 + threadIdx.x;
        if (r < R && s < S) dt_st_beta(&y[img + s * R + r], tile[threadIdx.x][k], beta);
    }
}

/* Between layouts when one side is thin (an image's 3 channels): a thread per output element
 * of [N, S, R] = x [N, R, S] transposed, consecutive threads writing consecutive elements and
 * reading R interleaved rows (a 32 x 32 tile would leave most of its rows idle). 32-bit
 * indices: the caller checks N*R*S fits. */
template <typename Tx, typename Ty>
__global__ void k_convert_thin(int R, int S, int n, const Tx *__restrict__ x, float beta, Ty *__restrict__ y) {
    for (int o = blockIdx.x * blockDim.x + threadIdx.x; o < n; o += gridDim.x * blockDim.x) {
        int r = o % R, t = o / R, s = t % S, img = t / S;
        dt_st_beta(&y[o], dt_ld(&x[((int64_t)img * R + r) * S + s]), beta);
    }
}

__global__ void k_cast_chunks(const dt_cast_chunk *__restrict__ chunks) {
    dt_cast_chunk c = chunks[blockIdx.x];
    __nv_bfloat16 *dst = (__nv_bfloat16 *)c.dst;
    for (int64_t i = threadIdx.x; i < c.n; i += blockDim.x) dst[i] = __float2bfloat16_rn(c.src[i]);
}

}  // namespace

extern "C" {
void dt_convert_cuda(int64_t N, int64_t C, int64_t P, const void *x, dt_dtype tx, dt_layout lx, float beta, void *y,
                     dt_dtype ty, dt_layout ly) {
    int64_t n = N * C * P;
    if (n <= 0) return;
    int transpose = lx != ly && C > 1 && P > 1;
    if (transpose) dt_check_grid_yz("convert", dt_ceil_div(lx == DT_NCHW ? C : P, 32), N);
    dt_dispatch_dtype(tx, [&](auto *xt) {
        using Tx = typename std::remove_pointer<decltype(xt)>::type;
        dt_dispatch_dtype(ty, [&](auto *yt) {
            using Ty = typename std::remove_pointer<decltype(yt)>::type;
            if (!transpose) {
                k_convert_same<Tx, Ty><<<dt_grid_for(n, 256), 256, 0, dt_stream()>>>(n, (const Tx *)x, beta, (Ty *)y);
            } else if ((lx == DT_NCHW ? C : P) < 8 && n < INT32_MAX) { /* a thin source: [N, R, S] -> [N, S, R] */
                int64_t R = lx == DT_NCHW ? C : P, S = lx == DT_NCHW ? P : C;
                k_convert_thin<Tx, Ty><<<dt_grid_for(n, 256), 256, 0, dt_stream()>>>((int)R, (int)S, (int)n, (const Tx *)x,
                                                                                     beta, (Ty *)y);
            } else {
                int64_t R = lx == DT_NCHW ? C : P, S = lx == DT_NCHW ? P : C;
                dim3 grid((unsigned)dt_ceil_div(S, 32), (unsigned)dt_ceil_div(R, 32), (unsigned)N);
                k_convert_transpose<Tx, Ty><<<grid, dim3(32, 8), 0, dt_stream()>>>(R, S, (const Tx *)x, beta, (Ty *)y);
            }
            DT_CHECK_LAUNCH();
        });
    });
}

void dt_f32_to_bf16_cuda(int64_t n, const float *x, dt_bf16 *y) {
    dt_convert_cuda(1, 1, n, x, DT_F32, DT_NCHW, 0.0f, y, DT_BF16, DT_NCHW);
}

void dt_bf16_to_f32_cuda(int64_t n, const dt_bf16 *x, float *y) {
    dt_convert_cuda(1, 1, n, x, DT_BF16, DT_NCHW, 0.0f, y, DT_F32, DT_NCHW);
}

void dt_f32_to_bf16_chunks_cuda(const dt_cast_chunk *chunks, int nchunks) {
    if (nchunks <= 0) return;
    k_cast_chunks<<<nchunks, 256, 0, dt_stream()>>>(chunks);
    DT_CHECK_LAUNCH();
}
}
