/* CUDA versions of im2col.h. Memory-bound, so the index arithmetic must stay cheap:
 *  - the grid is 2-D/3-D (channel, image in blockIdx.y/z) so a thread derives its position
 *    with one or two divisions instead of five;
 *  - indices are 32-bit whenever the buffers allow (64-bit division costs ~3x more);
 *  - col2im is specialized for stride 1 and 2, where "is this tap aligned with an output
 *    position" needs no division at all.
 * Consecutive threads take consecutive output columns, so stores to col (im2col) and loads
 * from col (col2im) are coalesced. The column type T is float or bf16 (the bf16 precision):
 * rounded once on the store, widened on the load, sums in fp32. */
#include <cuda_bf16.h>

#include "dt_kernel_util.cuh"
#include "im2col.h"

namespace {

__device__ __forceinline__ void put(float *p, float v) { *p = v; }
__device__ __forceinline__ void put(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ float get(const float *p) { return *p; }
__device__ __forceinline__ float get(const __nv_bfloat16 *p) { return __bfloat162float(*p); }

/* thread -> column q of channel c (blockIdx.y); writes the kh*kw taps of that column. */
template <typename I, typename T>
__global__ void k_im2col(const float *__restrict__ x, I nb, I C, I H, I W, dt_conv_geom g, I Ho, I Wo,
                         T *__restrict__ col) {
    const I P = Ho * Wo, NP = nb * P;
    const I c = blockIdx.y;
    for (I q = (I)blockIdx.x * blockDim.x + threadIdx.x; q < NP; q += (I)gridDim.x * blockDim.x) {
        I i = q / P, p = q - i * P, oy = p / Wo, ox = p - oy * Wo;
        const float *xp = x + ((int64_t)i * C + c) * H * W;
        T *out = col + (int64_t)c * g.kh * g.kw * NP + q;
        I iy0 = oy * g.sh - g.ph, ix0 = ox * g.sw - g.pw;
        for (int ky = 0; ky < g.kh; ky++) {
            I iy = iy0 + ky * g.dh;
            bool row_ok = iy >= 0 && iy < H;
            for (int kx = 0; kx < g.kw; kx++) {
                I ix = ix0 + kx * g.dw;
                put(out, (row_ok && ix >= 0 && ix < W) ? __ldg(xp + iy * W + ix) : 0.0f);
                out += NP;
            }
        }
    }
}

/* The bf16 columns two at a time (NP even): thread -> columns q, q + 1 (q even) of channel c,
 * one 4-byte store a tap - the 2-byte stores of k_im2col left the write bandwidth half used. */
template <typename I>
__global__ void k_im2col_bf16x2(const float *__restrict__ x, I nb, I C, I H, I W, dt_conv_geom g, I Ho, I Wo,
                                __nv_bfloat162 *__restrict__ col) {
    const I P = Ho * Wo, NP = nb * P, NP2 = NP / 2;
    const I c = blockIdx.y;
    for (I h = (I)blockIdx.x * blockDim.x + threadIdx.x; h < NP2; h += (I)gridDim.x * blockDim.x) {
        const float *xp[2];
        I iy0[2], ix0[2];
#pragma unroll
        for (int u = 0; u < 2; u++) {
            I q = 2 * h + u, i = q / P, p = q - i * P, oy = p / Wo, ox = p - oy * Wo;
            xp[u] = x + ((int64_t)i * C + c) * H * W;
            iy0[u] = oy * g.sh - g.ph;
            ix0[u] = ox * g.sw - g.pw;
        }
        __nv_bfloat162 *out = col + ((int64_t)c * g.kh * g.kw * NP) / 2 + h;
        for (int ky = 0; ky < g.kh; ky++)
            for (int kx = 0; kx < g.kw; kx++) {
                float v[2];
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    I iy = iy0[u] + ky * g.dh, ix = ix0[u] + kx * g.dw;
                    v[u] = iy >= 0 && iy < H && ix >= 0 && ix < W ? __ldg(xp[u] + iy * W + ix) : 0.0f;
                }
                *out = __floats2bfloat162_rn(v[0], v[1]);
                out += NP2;
            }
    }
}

/* Output index along one axis for input coordinate t = in + pad - k*dil, or -1. S is the
 * stride when known at compile time (1 or 2), 0 for a run-time stride s. */
template <int S, typename I>
__device__ __forceinline__ I out_index(I t, int s, I n_out) {
    if (t < 0) return -1;
    I o;
    if (S == 1) o = t;
    else if (S == 2) { if (t & 1) return -1; o = t >> 1; }
    else { if (t % s) return -1; o = t / s; }
    return o < n_out ? o : -1;
}

/* thread -> input element (iy, ix) of plane (i = blockIdx.z, c = blockIdx.y); gathers the
 * column entries of the taps that read it, in tap order (deterministic). */
template <int S, typename I, typename T>
__global__ void k_col2im(const T *__restrict__ col, I nb, I C, I H, I W, dt_conv_geom g, I Ho, I Wo,
                         float beta, float *__restrict__ x) {
    const I P = Ho * Wo, NP = nb * P, HW = H * W;
    const I c = blockIdx.y, i = blockIdx.z;
    const T *cp = col + (int64_t)c * g.kh * g.kw * NP + (int64_t)i * P;
    float *xp = x + ((int64_t)i * C + c) * HW;
    for (I t = (I)blockIdx.x * blockDim.x + threadIdx.x; t < HW; t += (I)gridDim.x * blockDim.x) {
        I iy = t / W, ix = t - iy * W;
        float s = 0.0f;
        for (int ky = 0; ky < g.kh; ky++) {
            I oy = out_index<S>(iy + g.ph - ky * g.dh, g.sh, Ho);
            if (oy < 0) continue;
            for (int kx = 0; kx < g.kw; kx++) {
                I ox = out_index<S>(ix + g.pw - kx * g.dw, g.sw, Wo);
                if (ox < 0) continue;
                s += get(cp + (int64_t)(ky * g.kw + kx) * NP + oy * Wo + ox);
            }
        }
        dt_store_beta(&xp[t], s, beta);
    }
}

bool fits32(int64_t v) { return v < INT32_MAX; }

template <typename I, typename T>
void launch_col2im(const T *col, int64_t nb, int64_t C, int64_t H, int64_t W, dt_conv_geom g, int64_t Ho, int64_t Wo,
                   float beta, float *x) {
    dim3 grid(dt_blocks_per_plane(H * W, C * nb), (unsigned)C, (unsigned)nb);
    bool s1 = g.sh == 1 && g.sw == 1, s2 = g.sh == 2 && g.sw == 2;
    if (s1) k_col2im<1, I, T><<<grid, 256, 0, dt_stream()>>>(col, (I)nb, (I)C, (I)H, (I)W, g, (I)Ho, (I)Wo, beta, x);
    else if (s2) k_col2im<2, I, T><<<grid, 256, 0, dt_stream()>>>(col, (I)nb, (I)C, (I)H, (I)W, g, (I)Ho, (I)Wo, beta, x);
    else k_col2im<0, I, T><<<grid, 256, 0, dt_stream()>>>(col, (I)nb, (I)C, (I)H, (I)W, g, (I)Ho, (I)Wo, beta, x);
}


template <typename T>
void im2col(const float *x, int64_t nb, int64_t C, int64_t H, int64_t W, dt_conv_geom g, int64_t Ho, int64_t Wo, T *col) {
    int64_t NP = nb * Ho * Wo;
    if (NP * C <= 0) return;
    dt_check_grid_yz("im2col", C, 1);
    if (sizeof(T) == 2 && NP % 2 == 0) { /* bf16 pairs */
        dim3 grid2(dt_blocks_per_plane(NP / 2, C), (unsigned)C);
        __nv_bfloat162 *c2 = reinterpret_cast<__nv_bfloat162 *>(col);
        if (fits32(C * g.kh * g.kw * NP) && fits32(nb * C * H * W))
            k_im2col_bf16x2<int32_t><<<grid2, 256, 0, dt_stream()>>>(x, (int32_t)nb, (int32_t)C, (int32_t)H, (int32_t)W,
                                                                     g, (int32_t)Ho, (int32_t)Wo, c2);
        else
            k_im2col_bf16x2<int64_t><<<grid2, 256, 0, dt_stream()>>>(x, nb, C, H, W, g, Ho, Wo, c2);
        DT_CHECK_LAUNCH();
        return;
    }
    dim3 grid(dt_blocks_per_plane(NP, C), (unsigned)C);
    if (fits32(C * g.kh * g.kw * NP) && fits32(nb * C * H * W))
        k_im2col<int32_t, T><<<grid, 256, 0, dt_stream()>>>(x, (int32_t)nb, (int32_t)C, (int32_t)H, (int32_t)W, g,
                                                            (int32_t)Ho, (int32_t)Wo, col);
    else
        k_im2col<int64_t, T><<<grid, 256, 0, dt_stream()>>>(x, nb, C, H, W, g, Ho, Wo, col);
    DT_CHECK_LAUNCH();
}

template <typename T>
void col2im(const T *col, int64_t nb, int64_t C, int64_t H, int64_t W, dt_conv_geom g, int64_t Ho, int64_t Wo,
            float beta, float *x) {
    if (nb * C * H * W <= 0) return;
    dt_check_grid_yz("col2im", C, nb);
    if (fits32(C * g.kh * g.kw * nb * Ho * Wo) && fits32(nb * C * H * W))
        launch_col2im<int32_t, T>(col, nb, C, H, W, g, Ho, Wo, beta, x);
    else
        launch_col2im<int64_t, T>(col, nb, C, H, W, g, Ho, Wo, beta, x);
    DT_CHECK_LAUNCH();
}

}  // namespace

extern "C" {
void dt_im2col_cuda(const float *x, int64_t nb, int64_t C, int64_t H, int64_t W, dt_conv_geom g,
                    int64_t Ho, int64_t Wo, float *col) {
    im2col(x, nb, C, H, W, g, Ho, Wo, col);
}

void dt_col2im_cuda(const float *col, int64_t nb, int64_t C, int64_t H, int64_t W, dt_conv_geom g,
                    int64_t Ho, int64_t Wo, float beta, float *x) {
    col2im(col, nb, C, H, W, g, Ho, Wo, beta, x);
}

void dt_im2col_bf16_cuda(const float *x, int64_t nb, int64_t C, int64_t H, int64_t W, dt_conv_geom g,
                         int64_t Ho, int64_t Wo, dt_bf16 *col) {
    im2col(x, nb, C, H, W, g, Ho, Wo, (__nv_bfloat16 *)col);
}

void dt_col2im_bf16_cuda(const dt_bf16 *col, int64_t nb, int64_t C, int64_t H, int64_t W, dt_conv_geom g,
                         int64_t Ho, int64_t Wo, float beta, float *x) {
    col2im((const __nv_bfloat16 *)col, nb, C, H, W, g, Ho, Wo, beta, x);
}
}
