/* CUDA versions of im2col.h. Memory-bound, so the index arithmetic must stay cheap:
 *  - the grid is 2-D/3-D (channel, image in blockIdx.y/z) so a thread derives its position
 *    with one or two divisions instead of five;
 *  - indices are 32-bit whenever the buffers allow (64-bit division costs ~3x more);
 *  - col2im is specialized for stride 1 and 2, where "is this tap aligned with an output
 *    position" needs no division at all.
 * Consecutive threads take consecutive output columns, so stores to col (im2col) and loads
 * from col (col2im) are coalesced. */
#include "dt_kernel_util.cuh"
#include "im2col.h"

namespace {

/* thread -> column q of channel c (blockIdx.y); writes the kh*kw taps of that column. */
template <typename I>
__global__ void k_im2col(const float *__restrict__ x, I nb, I C, I H, I W, dt_conv_geom g, I Ho, I Wo,
                         float *__restrict__ col) {
    const I P = Ho * Wo, NP = nb * P;
    const I c = blockIdx.y;
    for (I q = (I)blockIdx.x * blockDim.x + threadIdx.x; q < NP; q += (I)gridDim.x * blockDim.x) {
        I i = q / P, p = q - i * P, oy = p / Wo, ox = p - oy * Wo;
        const float *xp = x + ((int64_t)i * C + c) * H * W;
        float *out = col + (int64_t)c * g.kh * g.kw * NP + q;
        I iy0 = oy * g.sh - g.ph, ix0 = ox * g.sw - g.pw;
        for (int ky = 0; ky < g.kh; ky++) {
            I iy = iy0 + ky * g.dh;
            bool row_ok = iy >= 0 && iy < H;
            for (int kx = 0; kx < g.kw; kx++) {
                I ix = ix0 + kx * g.dw;
                *out = (row_ok && ix >= 0 && ix < W) ? __ldg(xp + iy * W + ix) : 0.0f;
                out += NP;
            }
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
template <int S, typename I>
__global__ void k_col2im(const float *__restrict__ col, I nb, I C, I H, I W, dt_conv_geom g, I Ho, I Wo,
                         float beta, float *__restrict__ x) {
    const I P = Ho * Wo, NP = nb * P, HW = H * W;
    const I c = blockIdx.y, i = blockIdx.z;
    const float *cp = col + (int64_t)c * g.kh * g.kw * NP + (int64_t)i * P;
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
                s += cp[(int64_t)(ky * g.kw + kx) * NP + oy * Wo + ox];
            }
        }
        dt_store_beta(&xp[t], s, beta);
    }
}

bool fits32(int64_t v) { return v < INT32_MAX; }

template <typename I>
void launch_col2im(const float *col, int64_t nb, int64_t C, int64_t H, int64_t W, dt_conv_geom g, int64_t Ho, int64_t Wo,
                   float beta, float *x) {
    dim3 grid(dt_blocks_per_plane(H * W, C * nb), (unsigned)C, (unsigned)nb);
    bool s1 = g.sh == 1 && g.sw == 1, s2 = g.sh == 2 && g.sw == 2;
    if (s1) k_col2im<1, I><<<grid, 256, 0, dt_stream()>>>(col, (I)nb, (I)C, (I)H, (I)W, g, (I)Ho, (I)Wo, beta, x);
    else if (s2) k_col2im<2, I><<<grid, 256, 0, dt_stream()>>>(col, (I)nb, (I)C, (I)H, (I)W, g, (I)Ho, (I)Wo, beta, x);
    else k_col2im<0, I><<<grid, 256, 0, dt_stream()>>>(col, (I)nb, (I)C, (I)H, (I)W, g, (I)Ho, (I)Wo, beta, x);
}

}  // namespace

extern "C" {
void dt_im2col_cuda(const float *x, int64_t nb, int64_t C, int64_t H, int64_t W, dt_conv_geom g,
                    int64_t Ho, int64_t Wo, float *col) {
    int64_t NP = nb * Ho * Wo;
    if (NP * C <= 0) return;
    dt_check_grid_yz("im2col", C, 1);
    dim3 grid(dt_blocks_per_plane(NP, C), (unsigned)C);
    if (fits32(C * g.kh * g.kw * NP) && fits32(nb * C * H * W))
        k_im2col<int32_t><<<grid, 256, 0, dt_stream()>>>(x, (int32_t)nb, (int32_t)C, (int32_t)H, (int32_t)W, g,
                                                         (int32_t)Ho, (int32_t)Wo, col);
    else
        k_im2col<int64_t><<<grid, 256, 0, dt_stream()>>>(x, nb, C, H, W, g, Ho, Wo, col);
    DT_CHECK_LAUNCH();
}

void dt_col2im_cuda(const float *col, int64_t nb, int64_t C, int64_t H, int64_t W, dt_conv_geom g,
                    int64_t Ho, int64_t Wo, float beta, float *x) {
    if (nb * C * H * W <= 0) return;
    dt_check_grid_yz("col2im", C, nb);
    if (fits32(C * g.kh * g.kw * nb * Ho * Wo) && fits32(nb * C * H * W))
        launch_col2im<int32_t>(col, nb, C, H, W, g, Ho, Wo, beta, x);
    else
        launch_col2im<int64_t>(col, nb, C, H, W, g, Ho, Wo, beta, x);
    DT_CHECK_LAUNCH();
}

}
