/* CUDA pooling (pool.h).
 *
 * NCHW f32 (the reference): maxpool one thread per output, its backward one thread per input
 * element; global average pool one warp per plane.
 * NHWC f32 / bf16: the same with one thread per V channels of a position - V a 16-byte pack
 * (4 f32, 8 bf16) when C and the pointers allow, else 1 - so neighbouring threads read
 * neighbouring packs of a row (coalesced) and one window scan serves V channels. The global
 * average pool runs a (channel vectors x rows) block per image, the rows combined by a fixed
 * tree: deterministic.
 *
 * Bytes (E = element size): maxpool forward reads x once from DRAM (a 3x3/s2 window overlaps
 * its neighbours: the re-reads hit L1/L2) and writes y and the argmax taps, (E + 1) per output;
 * the backward reads dy and the taps once (re-reads cached: an input of a 3x3/s2 window lies in
 * 2.25 windows on average, so (E + 1) bytes 2.25 times an input through L2) and writes dx once.
 * avgpool reads x once and writes N*C; its backward reads N*C and writes dx once. */
#include "core/dt_dtype.cuh"
#include "core/dt_kernel_util.cuh"
#include "core/dt_pack.cuh"
#include "ops/pool/pool.h"

namespace {

/* ---- NCHW f32 ---- */

__global__ void k_maxpool_fwd(const float *__restrict__ x, int64_t NC, int H, int W, int k, int s, int p, int Ho,
                              int Wo, float *__restrict__ y, uint8_t *__restrict__ tap) {
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
                    bi = ky * k + kx;
                    if (isnan(v)) { ky = k; break; }
                }
            }
        }
        y[t] = best;
        tap[t] = (uint8_t)bi;
    }
}

/* The windows [o0, o1] of one axis that contain input coordinate i. */
__device__ __forceinline__ void windows_of(int i, int k, int s, int p, int On, int &o0, int &o1) {
    o0 = i + p - (k - 1) <= 0 ? 0 : (i + p - (k - 1) + s - 1) / s;
    o1 = min((i + p) / s, On - 1);
}

__global__ void k_maxpool_bwd(const float *__restrict__ dy, const uint8_t *__restrict__ tap, int64_t NC, int H, int W,
                              int k, int s, int p, int Ho, int Wo, float beta, float *__restrict__ dx) {
    DT_GRID_STRIDE(t, NC * H * W) {
        int ix = (int)(t % W), iy = (int)((t / W) % H);
        int64_t pl = t / ((int64_t)H * W);
        int oy0, oy1, ox0, ox1;
        windows_of(iy, k, s, p, Ho, oy0, oy1);
        windows_of(ix, k, s, p, Wo, ox0, ox1);
        float acc = 0.0f;
        for (int oy = oy0; oy <= oy1; oy++)
            for (int ox = ox0; ox <= ox1; ox++) {
                int64_t o = (pl * Ho + oy) * Wo + ox;
                if (tap[o] == (iy - oy * s + p) * k + (ix - ox * s + p)) acc += dy[o]; /* this input's tap */
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

/* ---- NHWC f32 / bf16: x [N, H, W, C], one thread per V channels of a position ---- */

template <typename T, int V>
__global__ void k_maxpool_nhwc_fwd(const T *__restrict__ x, int64_t N, int C, int H, int W, int k, int s, int p,
                                   int Ho, int Wo, T *__restrict__ y, uint8_t *__restrict__ tap) {
    const int CV = C / V;
    DT_GRID_STRIDE(t, N * Ho * Wo * CV) {
        const int c0 = (int)(t % CV) * V;
        const int64_t q = t / CV; /* the output position (n, oy, ox) */
        const int ox = (int)(q % Wo), oy = (int)((q / Wo) % Ho);
        const int64_t n = q / ((int64_t)Ho * Wo);
        float best[V];
        int bi[V]; /* the argmax's tap ky*k + kx */
#pragma unroll
        for (int j = 0; j < V; j++) best[j] = -INFINITY, bi[j] = -1;
        for (int ky = 0; ky < k; ky++) {
            int iy = oy * s - p + ky;
            if (iy < 0 || iy >= H) continue;
            for (int kx = 0; kx < k; kx++) {
                int ix = ox * s - p + kx;
                if (ix < 0 || ix >= W) continue;
                float v[V];
                dt_ldv<V>(x + ((n * H + iy) * W + ix) * C + c0, v);
#pragma unroll
                for (int j = 0; j < V; j++) /* the first maximum wins; a NaN wins and stays */
                    if (bi[j] < 0 || v[j] > best[j] || (isnan(v[j]) && !isnan(best[j]))) {
                        best[j] = v[j];
                        bi[j] = ky * k + kx;
                    }
            }
        }
        dt_stv<V>(y + q * C + c0, best);
        dt_stv_u8<V>(tap + q * C + c0, bi);
    }
}

template <typename T, int V>
__global__ void k_maxpool_nhwc_bwd(const T *__restrict__ dy, const uint8_t *__restrict__ tap, int64_t N, int C, int H,
                                   int W, int k, int s, int p, int Ho, int Wo, float beta, T *__restrict__ dx) {
    const int CV = C / V;
    DT_GRID_STRIDE(t, N * H * W * CV) {
        const int c0 = (int)(t % CV) * V;
        const int64_t q = t / CV; /* the input position (n, iy, ix) */
        const int ix = (int)(q % W), iy = (int)((q / W) % H);
        const int64_t n = q / ((int64_t)H * W);
        int oy0, oy1, ox0, ox1;
        windows_of(iy, k, s, p, Ho, oy0, oy1);
        windows_of(ix, k, s, p, Wo, ox0, ox1);
        float acc[V];
#pragma unroll
        for (int j = 0; j < V; j++) acc[j] = 0.0f;
        for (int oy = oy0; oy <= oy1; oy++)
            for (int ox = ox0; ox <= ox1; ox++) {
                const int64_t o = ((n * Ho + oy) * Wo + ox) * C + c0;
                const int me = (iy - oy * s + p) * k + (ix - ox * s + p); /* this input's tap in the window */
                int w[V];
                dt_ldv_u8<V>(tap + o, w);
                float g[V];
                dt_ldv<V>(dy + o, g);
#pragma unroll
                for (int j = 0; j < V; j++)
                    if (w[j] == me) acc[j] += g[j];
            }
        dt_stv_beta<V>(dx + q * C + c0, acc, beta);
    }
}

#define AVG_THREADS 256

/* Block (cb, n): channel vectors over threadIdx.x, positions over threadIdx.y, summed in double
 * and combined over the rows of threads by a fixed tree. */
template <typename T, int V>
__global__ void __launch_bounds__(AVG_THREADS)
    k_avgpool_nhwc_fwd(int64_t C, int64_t P, const T *__restrict__ x, T *__restrict__ y) {
    __shared__ double sh[V][AVG_THREADS];
    const int64_t c0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * V, n = blockIdx.y;
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    double acc[V];
#pragma unroll
    for (int j = 0; j < V; j++) acc[j] = 0.0;
    if (c0 < C)
        for (int64_t q = threadIdx.y; q < P; q += blockDim.y) {
            float v[V];
            dt_ldv<V>(x + (n * P + q) * C + c0, v);
#pragma unroll
            for (int j = 0; j < V; j++) acc[j] += v[j];
        }
#pragma unroll
    for (int j = 0; j < V; j++) sh[j][tid] = acc[j];
    __syncthreads();
    for (int o = blockDim.y / 2; o > 0; o >>= 1) {
        if ((int)threadIdx.y < o)
#pragma unroll
            for (int j = 0; j < V; j++) sh[j][tid] += sh[j][tid + o * blockDim.x];
        __syncthreads();
    }
    if (threadIdx.y == 0 && c0 < C) {
        float m[V];
#pragma unroll
        for (int j = 0; j < V; j++) m[j] = (float)(sh[j][tid] / P);
        dt_stv<V>(y + n * C + c0, m);
    }
}

template <typename T, int V>
__global__ void k_avgpool_nhwc_bwd(const T *__restrict__ dy, int64_t N, int64_t C, int64_t P, float beta,
                                   T *__restrict__ dx) {
    const int64_t CV = C / V;
    DT_GRID_STRIDE(t, N * P * CV) {
        const int64_t c0 = (t % CV) * V, q = t / CV, n = q / P;
        float g[V];
        dt_ldv<V>(dy + n * C + c0, g);
#pragma unroll
        for (int j = 0; j < V; j++) g[j] = g[j] / (float)P;
        dt_stv_beta<V>(dx + q * C + c0, g, beta);
    }
}

template <typename T>
void maxpool_nhwc_fwd(const void *x, int64_t N, int64_t C, int64_t H, int64_t W, int k, int s, int p, int64_t Ho,
                      int64_t Wo, void *y, uint8_t *tap) {
    if (N * C * Ho * Wo <= 0) return;
    dt_with_pack<T>(dt_pack_ok<T>(C, {x, y, tap}), [&](auto v) {
        constexpr int V = decltype(v)::value;
        int64_t n = N * Ho * Wo * (C / V);
        k_maxpool_nhwc_fwd<T, V><<<dt_grid_for(n, 256), 256, 0, dt_stream()>>>(
            (const T *)x, N, (int)C, (int)H, (int)W, k, s, p, (int)Ho, (int)Wo, (T *)y, tap);
    });
    DT_CHECK_LAUNCH();
}

template <typename T>
void maxpool_nhwc_bwd(const void *dy, const uint8_t *tap, int64_t N, int64_t C, int64_t H, int64_t W, int k, int s,
                      int p, int64_t Ho, int64_t Wo, float beta, void *dx) {
    if (N * C * H * W <= 0) return;
    dt_with_pack<T>(dt_pack_ok<T>(C, {dy, tap, dx}), [&](auto v) {
        constexpr int V = decltype(v)::value;
        int64_t n = N * H * W * (C / V);
        k_maxpool_nhwc_bwd<T, V><<<dt_grid_for(n, 256), 256, 0, dt_stream()>>>(
            (const T *)dy, tap, N, (int)C, (int)H, (int)W, k, s, p, (int)Ho, (int)Wo, beta, (T *)dx);
    });
    DT_CHECK_LAUNCH();
}

template <typename T>
void avgpool_nhwc_fwd(const void *x, int64_t N, int64_t C, int64_t P, void *y) {
    if (N * C <= 0) return;
    dt_check_grid_yz("global_avgpool", N, 1);
    dt_with_pack<T>(dt_pack_ok<T>(C, {x, y}), [&](auto v) {
        constexpr int V = decltype(v)::value;
        int64_t CV = C / V;
        int TX = 1;
        while (TX < 32 && TX < CV) TX *= 2;
        k_avgpool_nhwc_fwd<T, V><<<dim3((unsigned)dt_ceil_div(CV, TX), (unsigned)N), dim3(TX, AVG_THREADS / TX), 0,
                                   dt_stream()>>>(C, P, (const T *)x, (T *)y);
    });
    DT_CHECK_LAUNCH();
}

template <typename T>
void avgpool_nhwc_bwd(const void *dy, int64_t N, int64_t C, int64_t P, float beta, void *dx) {
    if (N * C * P <= 0) return;
    dt_with_pack<T>(dt_pack_ok<T>(C, {dy, dx}), [&](auto v) {
        constexpr int V = decltype(v)::value;
        int64_t n = N * P * (C / V);
        k_avgpool_nhwc_bwd<T, V><<<dt_grid_for(n, 256), 256, 0, dt_stream()>>>((const T *)dy, N, C, P, beta, (T *)dx);
    });
    DT_CHECK_LAUNCH();
}

}  // namespace

extern "C" {
void dt_maxpool_fwd_f32_nchw_cuda(const void *x, int64_t N, int64_t C, int64_t H, int64_t W, int k, int s, int p,
                                  int64_t Ho, int64_t Wo, void *y, uint8_t *tap) {
    int64_t NC = N * C;
    if (NC * Ho * Wo <= 0) return;
    k_maxpool_fwd<<<dt_grid_for(NC * Ho * Wo, 256), 256, 0, dt_stream()>>>((const float *)x, NC, (int)H, (int)W, k, s,
                                                                           p, (int)Ho, (int)Wo, (float *)y, tap);
    DT_CHECK_LAUNCH();
}
void dt_maxpool_bwd_f32_nchw_cuda(const void *dy, const uint8_t *tap, int64_t N, int64_t C, int64_t H, int64_t W,
                                  int k, int s, int p, int64_t Ho, int64_t Wo, float beta, void *dx) {
    int64_t NC = N * C;
    if (NC * H * W <= 0) return;
    k_maxpool_bwd<<<dt_grid_for(NC * H * W, 256), 256, 0, dt_stream()>>>((const float *)dy, tap, NC, (int)H, (int)W,
                                                                         k, s, p, (int)Ho, (int)Wo, beta, (float *)dx);
    DT_CHECK_LAUNCH();
}
void dt_avgpool_fwd_f32_nchw_cuda(const void *x, int64_t N, int64_t C, int64_t P, void *y) {
    int64_t NC = N * C;
    if (NC <= 0) return;
    k_avgpool_fwd<<<(unsigned)dt_ceil_div(NC * 32, 256), 256, 0, dt_stream()>>>((const float *)x, NC, P, (float *)y);
    DT_CHECK_LAUNCH();
}
void dt_avgpool_bwd_f32_nchw_cuda(const void *dy, int64_t N, int64_t C, int64_t P, float beta, void *dx) {
    int64_t NC = N * C;
    if (NC * P <= 0) return;
    k_avgpool_bwd<<<dt_grid_for(NC * P, 256), 256, 0, dt_stream()>>>((const float *)dy, NC, P, beta, (float *)dx);
    DT_CHECK_LAUNCH();
}
}

#define DT_POOL_NHWC_ENTRIES(name, T)                                                                                \
    extern "C" void dt_maxpool_fwd_##name##_nhwc_cuda(const void *x, int64_t N, int64_t C, int64_t H, int64_t W,     \
                                                      int k, int s, int p, int64_t Ho, int64_t Wo, void *y,          \
                                                      uint8_t *tap) {                                                \
        maxpool_nhwc_fwd<T>(x, N, C, H, W, k, s, p, Ho, Wo, y, tap);                                                 \
    }                                                                                                                \
    extern "C" void dt_maxpool_bwd_##name##_nhwc_cuda(const void *dy, const uint8_t *tap, int64_t N, int64_t C,      \
                                                      int64_t H, int64_t W, int k, int s, int p, int64_t Ho,         \
                                                      int64_t Wo, float beta, void *dx) {                            \
        maxpool_nhwc_bwd<T>(dy, tap, N, C, H, W, k, s, p, Ho, Wo, beta, dx);                                         \
    }                                                                                                                \
    extern "C" void dt_avgpool_fwd_##name##_nhwc_cuda(const void *x, int64_t N, int64_t C, int64_t P, void *y) {     \
        avgpool_nhwc_fwd<T>(x, N, C, P, y);                                                                          \
    }                                                                                                                \
    extern "C" void dt_avgpool_bwd_##name##_nhwc_cuda(const void *dy, int64_t N, int64_t C, int64_t P, float beta,   \
                                                      void *dx) {                                                    \
        avgpool_nhwc_bwd<T>(dy, N, C, P, beta, dx);                                                                  \
    }

DT_POOL_NHWC_ENTRIES(f32, float)
DT_POOL_NHWC_ENTRIES(bf16, __nv_bfloat16)
