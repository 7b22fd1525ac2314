/* CUDA versions of im2col.h. Memory-bound: consecutive threads take consecutive output
 * columns (ox fastest), so every store to col is coalesced and loads of x are near-coalesced
 * (stride sw). All indices are 64-bit. */
#include "dt_kernel_util.cuh"
#include "im2col.h"

namespace {

/* One thread per (c, i, oy, ox); it writes that column entry for all kh*kw taps.
 * I is int32_t when every index fits (the common case: 64-bit division costs ~10x more), else
 * int64_t. */
template <typename I>
__global__ void k_im2col(const float *__restrict__ x, I nb, I C, I H, I W, dt_conv_geom g, I Ho, I Wo,
                         float *__restrict__ col) {
    const I P = Ho * Wo, NP = nb * P, total = C * NP;
    for (I t = (I)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (I)gridDim.x * blockDim.x) {
        I q = t % NP, c = t / NP;
        I i = q / P, p = q % P, oy = p / Wo, ox = p % Wo;
        const float *xp = x + ((int64_t)i * C + c) * H * W;
        float *out = col + (int64_t)c * g.kh * g.kw * NP + q;
        I iy0 = oy * g.sh - g.ph, ix0 = ox * g.sw - g.pw;
        for (int ky = 0; ky < g.kh; ky++) {
            I iy = iy0 + ky * g.dh;
            bool row_ok = iy >= 0 && iy < H;
            for (int kx = 0; kx < g.kw; kx++) {
                I ix = ix0 + kx * g.dw;
                *out = (row_ok && ix >= 0 && ix < W) ? __ldg(xp + (int64_t)iy * W + ix) : 0.0f;
                out += NP;
            }
        }
    }
}

/* One thread per input element (i, c, iy, ix): gathers its taps (deterministic). */
template <typename I>
__global__ void k_col2im(const float *__restrict__ col, I nb, I C, I H, I W, dt_conv_geom g, I Ho, I Wo,
                         float beta, float *__restrict__ x) {
    const I P = Ho * Wo, NP = nb * P, total = nb * C * H * W;
    for (I t = (I)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (I)gridDim.x * blockDim.x) {
        I ix = t % W, iy = (t / W) % H, c = (t / (H * W)) % C, i = t / (C * H * W);
        float s = 0.0f;
        const float *cp = col + (int64_t)c * g.kh * g.kw * NP + (int64_t)i * P;
        for (int ky = 0; ky < g.kh; ky++) {
            I ty = iy + g.ph - ky * g.dh;
            if (ty < 0 || ty % g.sh) continue;
            I oy = ty / g.sh;
            if (oy >= Ho) continue;
            for (int kx = 0; kx < g.kw; kx++) {
                I tx = ix + g.pw - kx * g.dw;
                if (tx < 0 || tx % g.sw) continue;
                I ox = tx / g.sw;
                if (ox >= Wo) continue;
                s += cp[(int64_t)(ky * g.kw + kx) * NP + oy * Wo + ox];
            }
        }
        dt_store_beta(&x[t], s, beta);
    }
}

/* Both kernels need C*kh*kw*nb*P (the column buffer) to fit the index type too. */
static bool fits32(int64_t a, int64_t b) { return a < INT32_MAX && b < INT32_MAX; }

/* [nb, C, P] <-> [C, nb*P]: both sides walk p fastest, so both are coalesced. */
__global__ void k_nchw_to_cnhw(const float *__restrict__ x, int64_t nb, int64_t C, int64_t P, float *__restrict__ y) {
    DT_GRID_STRIDE(t, nb * C * P) {
        int64_t p = t % P, c = (t / P) % C, i = t / (C * P);
        y[c * nb * P + i * P + p] = x[t];
    }
}

__global__ void k_cnhw_to_nchw(const float *__restrict__ y, int64_t nb, int64_t C, int64_t P,
                               const float *__restrict__ bias, float *__restrict__ x) {
    DT_GRID_STRIDE(t, nb * C * P) {
        int64_t p = t % P, c = (t / P) % C, i = t / (C * P);
        x[t] = y[c * nb * P + i * P + p] + (bias ? bias[c] : 0.0f);
    }
}

}  // namespace

extern "C" {
void dt_im2col_cuda(const float *x, int64_t nb, int64_t C, int64_t H, int64_t W, dt_conv_geom g,
                    int64_t Ho, int64_t Wo, float *col) {
    int64_t total = C * nb * Ho * Wo;
    if (total <= 0) return;
    if (fits32(total * g.kh * g.kw, nb * C * H * W))
        k_im2col<int32_t><<<dt_grid_for(total, 256), 256, 0, dt_stream()>>>(x, (int32_t)nb, (int32_t)C, (int32_t)H,
                                                                           (int32_t)W, g, (int32_t)Ho, (int32_t)Wo, col);
    else
        k_im2col<int64_t><<<dt_grid_for(total, 256), 256, 0, dt_stream()>>>(x, nb, C, H, W, g, Ho, Wo, col);
    DT_CHECK_LAUNCH();
}
void dt_col2im_cuda(const float *col, int64_t nb, int64_t C, int64_t H, int64_t W, dt_conv_geom g,
                    int64_t Ho, int64_t Wo, float beta, float *x) {
    int64_t total = nb * C * H * W;
    if (total <= 0) return;
    if (fits32(total, C * g.kh * g.kw * nb * Ho * Wo))
        k_col2im<int32_t><<<dt_grid_for(total, 256), 256, 0, dt_stream()>>>(col, (int32_t)nb, (int32_t)C, (int32_t)H,
                                                                           (int32_t)W, g, (int32_t)Ho, (int32_t)Wo, beta, x);
    else
        k_col2im<int64_t><<<dt_grid_for(total, 256), 256, 0, dt_stream()>>>(col, nb, C, H, W, g, Ho, Wo, beta, x);
    DT_CHECK_LAUNCH();
}
void dt_nchw_to_cnhw_cuda(const float *x, int64_t nb, int64_t C, int64_t P, float *y) {
    if (nb * C * P <= 0) return;
    k_nchw_to_cnhw<<<dt_grid_for(nb * C * P, 256), 256, 0, dt_stream()>>>(x, nb, C, P, y);
    DT_CHECK_LAUNCH();
}
void dt_cnhw_to_nchw_cuda(const float *y, int64_t nb, int64_t C, int64_t P, const float *bias, float *x) {
    if (nb * C * P <= 0) return;
    k_cnhw_to_nchw<<<dt_grid_for(nb * C * P, 256), 256, 0, dt_stream()>>>(y, nb, C, P, bias, x);
    DT_CHECK_LAUNCH();
}
}
