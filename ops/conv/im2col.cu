/* CUDA versions of im2col.h. Memory-bound, so the index arithmetic must stay cheap:
 *  - the grid is 2-D/3-D (channel, image in blockIdx.y/z) so a thread derives its position
 *    with one or two divisions instead of five;
 *  - indices are 32-bit whenever the buffers allow (64-bit division costs ~3x more);
 *  - col2im is specialized for stride 1 and 2, where "is this tap aligned with an output
 *    position" needs no division at all.
 * Consecutive threads take consecutive output columns, so stores to col (im2col) and loads
 * from col (col2im) are coalesced. The NCHW transforms are fp32; the channels-last ones below
 * take f32 or bf16 (rounded once on the store, widened on the load, sums in fp32). */
#include <cuda_bf16.h>

#include "core/dt_dtype.cuh"
#include "core/dt_kernel_util.cuh"
#include "ops/conv/im2col.h"

namespace {


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
                dt_st(out, (row_ok && ix >= 0 && ix < W) ? __ldg(xp + iy * W + ix) : 0.0f);
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
                s += dt_ld(cp + (int64_t)(ky * g.kw + kx) * NP + oy * Wo + ox);
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


void im2col(const float *x, int64_t nb, int64_t C, int64_t H, int64_t W, dt_conv_geom g, int64_t Ho, int64_t Wo,
            float *col) {
    int64_t NP = nb * Ho * Wo;
    if (NP * C <= 0) return;
    dt_check_grid_yz("im2col", C, 1);
    dim3 grid(dt_blocks_per_plane(NP, C), (unsigned)C);
    if (fits32(C * g.kh * g.kw * NP) && fits32(nb * C * H * W))
        k_im2col<int32_t, float><<<grid, 256, 0, dt_stream()>>>(x, (int32_t)nb, (int32_t)C, (int32_t)H, (int32_t)W, g,
                                                                (int32_t)Ho, (int32_t)Wo, col);
    else
        k_im2col<int64_t, float><<<grid, 256, 0, dt_stream()>>>(x, nb, C, H, W, g, Ho, Wo, col);
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

/* ---- channels last ----
 * V channels a thread (16-byte vectors when C allows: 4 f32 or 8 bf16, else 1): thread ->
 * (row q, tap, vector) in that order, so consecutive threads write consecutive column bytes and
 * read contiguous channels of one input pixel. */
template <typename T, int V>
struct alignas(sizeof(T) * V) vec {
    T v[V];
};

template <typename T, int V>
__global__ void k_im2col_nhwc(const T *__restrict__ x, int64_t total, int C, int H, int W, dt_conv_geom g, int Ho,
                              int Wo, T *__restrict__ col) {
    const int CV = C / V, K = g.kh * g.kw, P = Ho * Wo;
    DT_GRID_STRIDE(idx, total) {
        int cv = (int)(idx % CV);
        int64_t t = idx / CV;
        int tap = (int)(t % K);
        int64_t q = t / K;
        int64_t i = q / P;
        int p = (int)(q - i * P), oy = p / Wo, ox = p - oy * Wo, ky = tap / g.kw, kx = tap - ky * g.kw;
        int iy = oy * g.sh - g.ph + ky * g.dh, ix = ox * g.sw - g.pw + kx * g.dw;
        vec<T, V> v;
        if (iy >= 0 && iy < H && ix >= 0 && ix < W)
            v = *reinterpret_cast<const vec<T, V> *>(x + ((i * H + iy) * W + ix) * C + cv * V);
        else
            for (int u = 0; u < V; u++) dt_st(&v.v[u], 0.0f);
        *reinterpret_cast<vec<T, V> *>(col + idx * V) = v;
    }
}

/* Channel counts no vector divides (the stem's C = 3): a thread per (row q, tap) copies the
 * tap's C contiguous channels, with 32-bit index arithmetic (the caller checks the sizes) - a
 * thread per element spent its time in 64-bit divisions. */
template <typename T>
__global__ void k_im2col_nhwc_taps(const T *__restrict__ x, int total, int C, int H, int W, dt_conv_geom g, int Ho,
                                   int Wo, T *__restrict__ col) {
    const int K = g.kh * g.kw, P = Ho * Wo;
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < total; t += gridDim.x * blockDim.x) {
        int tap = t % K, q = t / K, i = q / P, p = q - i * P, oy = p / Wo, ox = p - oy * Wo;
        int ky = tap / g.kw, kx = tap - ky * g.kw;
        int iy = oy * g.sh - g.ph + ky * g.dh, ix = ox * g.sw - g.pw + kx * g.dw;
        T *out = col + (int64_t)t * C;
        if (iy >= 0 && iy < H && ix >= 0 && ix < W) {
            const T *in = x + (((int64_t)i * H + iy) * W + ix) * C;
            for (int c = 0; c < C; c++) out[c] = in[c];
        } else {
            for (int c = 0; c < C; c++) dt_st(&out[c], 0.0f);
        }
    }
}

/* thread -> (input pixel, vector): sums the taps that read it in tap order (fp32), writes once. */
template <int S, typename T, int V>
__global__ void k_col2im_nhwc(const T *__restrict__ col, int64_t total, int C, int H, int W, dt_conv_geom g, int Ho,
                              int Wo, float beta, T *__restrict__ x) {
    const int CV = C / V, K = g.kh * g.kw;
    const int64_t KC = (int64_t)K * C, P = (int64_t)Ho * Wo;
    DT_GRID_STRIDE(idx, total) {
        int cv = (int)(idx % CV);
        int64_t pix = idx / CV, i = pix / ((int64_t)H * W);
        int hw = (int)(pix - i * H * W), iy = hw / W, ix = hw - iy * W;
        float s[V];
        for (int u = 0; u < V; u++) s[u] = 0.0f;
        for (int ky = 0; ky < g.kh; ky++) {
            int oy = out_index<S>(iy + g.ph - ky * g.dh, g.sh, Ho);
            if (oy < 0) continue;
            for (int kx = 0; kx < g.kw; kx++) {
                int ox = out_index<S>(ix + g.pw - kx * g.dw, g.sw, Wo);
                if (ox < 0) continue;
                int64_t q = i * P + (int64_t)oy * Wo + ox;
                vec<T, V> v = *reinterpret_cast<const vec<T, V> *>(col + q * KC + (int64_t)(ky * g.kw + kx) * C + cv * V);
                for (int u = 0; u < V; u++) s[u] += dt_ld(&v.v[u]);
            }
        }
        T *xp = x + pix * C + cv * V;
        for (int u = 0; u < V; u++) dt_st_beta(&xp[u], s[u], beta);
    }
}

static void check_nhwc(const char *what, int64_t C, int64_t H, int64_t W, int64_t Ho, int64_t Wo) {
    if (C > INT32_MAX || H * W > INT32_MAX || Ho * Wo > INT32_MAX)
        dt_fatal("%s: an image of %lld x %lld x %lld exceeds 2^31 elements a plane", what, (long long)H, (long long)W,
                 (long long)C);
}

template <typename T>
void im2col_nhwc(const void *x, int64_t nb, int64_t C, int64_t H, int64_t W, dt_conv_geom g, int64_t Ho, int64_t Wo,
                 void *col) {
    check_nhwc("im2col (nhwc)", C, H, W, Ho, Wo);
    constexpr int V = 16 / sizeof(T);
    int64_t rows = nb * Ho * Wo * g.kh * g.kw;
    if (rows * C <= 0) return;
    if (C % V == 0)
        k_im2col_nhwc<T, V><<<dt_grid_for(rows * (C / V), 256), 256, 0, dt_stream()>>>(
            (const T *)x, rows * (C / V), (int)C, (int)H, (int)W, g, (int)Ho, (int)Wo, (T *)col);
    else if (rows < INT32_MAX && nb * H * W * C < INT32_MAX)
        k_im2col_nhwc_taps<T><<<dt_grid_for(rows, 256), 256, 0, dt_stream()>>>((const T *)x, (int)rows, (int)C, (int)H,
                                                                               (int)W, g, (int)Ho, (int)Wo, (T *)col);
    else
        k_im2col_nhwc<T, 1><<<dt_grid_for(rows * C, 256), 256, 0, dt_stream()>>>(
            (const T *)x, rows * C, (int)C, (int)H, (int)W, g, (int)Ho, (int)Wo, (T *)col);
    DT_CHECK_LAUNCH();
}

template <int S, typename T, int V>
void col2im_nhwc_v(const void *col, int64_t nb, int64_t C, int64_t H, int64_t W, dt_conv_geom g, int64_t Ho,
                   int64_t Wo, float beta, void *x) {
    int64_t total = nb * H * W * (C / V);
    k_col2im_nhwc<S, T, V><<<dt_grid_for(total, 256), 256, 0, dt_stream()>>>(
        (const T *)col, total, (int)C, (int)H, (int)W, g, (int)Ho, (int)Wo, beta, (T *)x);
}

template <typename T>
void col2im_nhwc(const void *col, int64_t nb, int64_t C, int64_t H, int64_t W, dt_conv_geom g, int64_t Ho, int64_t Wo,
                 float beta, void *x) {
    check_nhwc("col2im (nhwc)", C, H, W, Ho, Wo);
    if (nb * H * W * C <= 0) return;
    constexpr int V = 16 / sizeof(T);
    bool vec_ok = C % V == 0, s1 = g.sh == 1 && g.sw == 1, s2 = g.sh == 2 && g.sw == 2;
    if (vec_ok && s1) col2im_nhwc_v<1, T, V>(col, nb, C, H, W, g, Ho, Wo, beta, x);
    else if (vec_ok && s2) col2im_nhwc_v<2, T, V>(col, nb, C, H, W, g, Ho, Wo, beta, x);
    else if (vec_ok) col2im_nhwc_v<0, T, V>(col, nb, C, H, W, g, Ho, Wo, beta, x);
    else col2im_nhwc_v<0, T, 1>(col, nb, C, H, W, g, Ho, Wo, beta, x);
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

void dt_im2col_nhwc_f32_cuda(const void *x, int64_t nb, int64_t C, int64_t H, int64_t W, dt_conv_geom g, int64_t Ho,
                             int64_t Wo, void *col) {
    im2col_nhwc<float>(x, nb, C, H, W, g, Ho, Wo, col);
}
void dt_im2col_nhwc_bf16_cuda(const void *x, int64_t nb, int64_t C, int64_t H, int64_t W, dt_conv_geom g, int64_t Ho,
                              int64_t Wo, void *col) {
    im2col_nhwc<__nv_bfloat16>(x, nb, C, H, W, g, Ho, Wo, col);
}
void dt_col2im_nhwc_f32_cuda(const void *col, int64_t nb, int64_t C, int64_t H, int64_t W, dt_conv_geom g, int64_t Ho,
                             int64_t Wo, float beta, void *x) {
    col2im_nhwc<float>(col, nb, C, H, W, g, Ho, Wo, beta, x);
}
void dt_col2im_nhwc_bf16_cuda(const void *col, int64_t nb, int64_t C, int64_t H, int64_t W, dt_conv_geom g, int64_t Ho,
                              int64_t Wo, float beta, void *x) {
    col2im_nhwc<__nv_bfloat16>(col, nb, C, H, W, g, Ho, Wo, beta, x);
}
}
