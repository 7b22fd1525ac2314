/* CUDA batch norm (+ residual add, + ReLU): batchnorm.h. Three passes, each a kernel family
 * per layout:
 *   statistics  per-split partial sums (sum x, sum x^2) in double -> the in-order sum of the
 *               splits per channel (-> sync all-reduce) -> mean, invstd, running update;
 *   apply       y = act(fma(x, scale, shift) + skip), one read of x (and skip), one write of y;
 *   backward    partial sums of g and g*xhat -> per-channel sums, dw, db (-> all-reduce) ->
 *               the pointwise dx (and dskip).
 * No atomics: every sum's order is fixed by the shape (the split boundaries, the in-block
 * trees, the in-order sum of the splits), so the bits repeat on any GPU.
 *
 * NCHW (f32, the reference; its numbers are those of the original kernels): reductions on a
 * (split, channel) grid, each block summing whole planes of one channel; pointwise kernels one
 * block per (n, c) plane, so scale and shift are uniform per block (float4 when P % 4 == 0).
 *
 * NHWC (f32, bf16): rows of C contiguous channels, 16-byte channel packs a thread, reductions
 * over fixed row splits (~4 blocks an SM of a 132-SM GPU, at least 4 rows a thread, at most
 * DT_BN_MAX_SPLITS: C = 512 at 7x7, R = 3136 at batch 64, still gets 98 x 2 blocks, and C = 64 at
 * 56x56 256). The kernels and their tuning are batchnorm_nhwc.cuh's (bench/lab/bn_lab.cu times
 * the tunings); the per-channel sums, statistics and coefficients between them are here.
 *
 * Bytes moved per element of x (E = the element size, NHWC; skip when present):
 *   forward    stats: read x (E); apply: read x (+ skip), write y -> 3E (4E with skip); the
 *              partials (S*C*16 bytes) stay in L2.
 *   backward   pass 1: read x, dy (+ skip when relu); pass 2: read x, dy (+ skip), write dx
 *              (+ dskip) -> 5E without skip. With a skip whose gradient is written fresh
 *              (beta 0, the ResNet join) pass 1 also writes g into dskip and pass 2 reads g
 *              back instead of dy and skip: 7E instead of 8E. */
#include "ops/batchnorm/batchnorm.h"
#include "core/dt_alloc.h"
#include "core/dt_dtype.cuh"
#include "core/dt_kernel_util.cuh"
#include "core/dt_pack.cuh"
#include "ops/batchnorm/batchnorm_nhwc.cuh"

#define NCHW_MAX_SPLITS 64

namespace {

/* ---- per-channel sums and statistics (both layouts) ---- */

/* The S partials of channel c, added in split order; partial (c, s) is at (c*sc + s*ss)*2. */
__device__ __forceinline__ void add_splits(const double *partial, int S, int64_t sc, int64_t ss, int64_t c, double &a,
                                           double &b) {
    a = 0.0;
    b = 0.0;
    for (int s = 0; s < S; s++) {
        const double *q = partial + (c * sc + s * ss) * 2;
        a += q[0];
        b += q[1];
    }
}

/* The same sums by one warp per channel (the NHWC reductions have up to DT_BN_MAX_SPLITS
 * splits, strided by C: a lone thread walking them serially is latency-bound - 40 us a call
 * at 256 splits): lane l adds splits l, l + 32, ... in order, then the 32 lane sums meet in a
 * fixed shuffle tree. The order depends on S alone: deterministic. Lane 0 holds the result. */
__device__ __forceinline__ void add_splits_warp(const double *partial, int S, int64_t sc, int64_t ss, int64_t c,
                                                double &a, double &b) {
    const int lane = threadIdx.x & 31;
    a = 0.0;
    b = 0.0;
    for (int s = lane; s < S; s += 32) {
        const double *q = partial + (c * sc + s * ss) * 2;
        a += q[0];
        b += q[1];
    }
    for (int o = 16; o > 0; o >>= 1) {
        a += __shfl_down_sync(0xffffffffu, a, o);
        b += __shfl_down_sync(0xffffffffu, b, o);
    }
}

/* The channel this thread sums for (WARP: a warp per channel, only lane 0 stores), or -1. */
template <bool WARP>
__device__ __forceinline__ int64_t split_channel(int64_t C, bool *store) {
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, c = WARP ? t / 32 : t;
    *store = !WARP || (threadIdx.x & 31) == 0;
    return c < C ? c : -1;
}

template <bool WARP>
__device__ __forceinline__ void sum_splits(const double *partial, int S, int64_t sc, int64_t ss, int64_t c, double &a,
                                           double &b) {
    if (WARP) add_splits_warp(partial, S, sc, ss, c, a, b);
    else add_splits(partial, S, sc, ss, c, a, b);
}

/* sums[c*2 + {0,1}]: what a synchronized batch norm all-reduces */
template <bool WARP>
__global__ void k_sum_splits(int64_t C, int S, int64_t sc, int64_t ss, const double *partial, double *sums) {
    bool store;
    int64_t c = split_channel<WARP>(C, &store);
    if (c < 0) return;
    double a, b;
    sum_splits<WARP>(partial, S, sc, ss, c, a, b);
    if (!store) return;
    sums[c * 2] = a;
    sums[c * 2 + 1] = b;
}

/* mean, invstd (and the running update) of channel c from its sums: the partials when
 * `partial` is given, else the (all-reduced) sums. */
template <bool WARP>
__global__ void k_stats_final(int64_t C, int64_t M, const double *partial, int S, int64_t sc, int64_t ss,
                              const double *sums, int training, float eps, float momentum, float *rm, float *rv,
                              float *mean, float *invstd) {
    bool store;
    int64_t c = split_channel<WARP>(C, &store);
    if (c < 0) return;
    if (!training) {
        if (!store) return;
        mean[c] = rm[c];
        invstd[c] = (float)(1.0 / sqrt((double)rv[c] + eps));
        return;
    }
    double s1, s2;
    if (partial) sum_splits<WARP>(partial, S, sc, ss, c, s1, s2);
    else s1 = sums[c * 2], s2 = sums[c * 2 + 1];
    if (store) dt_bn_nhwc::finish_stats(c, M, s1, s2, eps, momentum, rm, rv, mean, invstd);
}

/* The NHWC backward's per-channel coefficients, so that its pointwise pass reads a few floats a
 * channel and divides nothing: coef [4][C] = (scale, shift, mean_g, q) with scale = w invstd and
 * shift = b - mean scale (the forward's, for the ReLU mask) and, from the sums (sum g, sum g
 * xhat) over M values, mean_g = sum g / M and q = scale invstd sum (g xhat) / M, so that
 *   dx = scale (g - mean_g - xhat mean_gxhat) = scale (g - mean_g) - q (x - mean)
 * (training; else dx = scale g), x - mean taken first as the direct form does (no cancellation
 * of large terms when |mean| >> std); computed in double, rounded once. */
__device__ __forceinline__ void bwd_coef(int64_t C, int64_t c, double s1, double s2, int64_t M, const float *mean,
                                         const float *invstd, const float *w, const float *b, int training,
                                         float *coef) {
    const double is = invstd[c], scale = (double)w[c] * is;
    coef[c] = (float)scale;
    coef[C + c] = (float)((double)b[c] - (double)mean[c] * scale);
    coef[2 * C + c] = training ? (float)(s1 / M) : 0.0f;
    coef[3 * C + c] = training ? (float)(scale * is * (s2 / M)) : 0.0f;
}

/* The backward's per-channel sums (sum g, sum g*xhat) and from them this replica's db, dw; with
 * coef (an unsynchronized NHWC batch norm: the sums are final here) its coefficients too. */
template <bool WARP>
__global__ void k_bwd_sums(int64_t C, int S, int64_t sc, int64_t ss, const double *partial, double *sums, float *dw,
                           float beta_w, float *db, float beta_b, int64_t M, const float *mean, const float *invstd,
                           const float *w, const float *b, int training, float *coef) {
    bool store;
    int64_t c = split_channel<WARP>(C, &store);
    if (c < 0) return;
    double a, bs;
    sum_splits<WARP>(partial, S, sc, ss, c, a, bs);
    if (!store) return;
    sums[c * 2] = a;
    sums[c * 2 + 1] = bs;
    if (db) dt_store_beta(&db[c], (float)a, beta_b);
    if (dw) dt_store_beta(&dw[c], (float)bs, beta_w);
    if (coef) bwd_coef(C, c, a, bs, M, mean, invstd, w, b, training, coef);
}

/* The same coefficients from all-reduced sums (a synchronized batch norm), one thread a channel */
__global__ void k_bwd_coef(int64_t C, const double *sums, int64_t M, const float *mean, const float *invstd,
                           const float *w, const float *b, int training, float *coef) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c < C) bwd_coef(C, c, sums[c * 2], sums[c * 2 + 1], M, mean, invstd, w, b, training, coef);
}

unsigned channel_blocks(int64_t C) { return (unsigned)dt_ceil_div(C, 128); }
/* 128 threads, 4 channels a block, for the warp-per-channel sums */
unsigned channel_warp_blocks(int64_t C) { return (unsigned)dt_ceil_div(C, 4); }

/* ---- NCHW f32 ---- */

int nchw_splits(int64_t N, int64_t C, int64_t P) {
    int64_t per_channel = N * P;
    int64_t s = (per_channel + 16383) / 16384;   /* ~16K elements per block at least */
    int64_t want = (2 * 132 + C - 1) / C;         /* at least ~2 blocks per SM overall */
    if (s < want) s = want;
    if (s > N) s = N;
    if (s > NCHW_MAX_SPLITS) s = NCHW_MAX_SPLITS;
    return s < 1 ? 1 : (int)s;
}

__device__ void block_sum2(double &a, double &b) {
    __shared__ double sa[DT_BN_THREADS / 32], sb[DT_BN_THREADS / 32];
    for (int o = 16; o > 0; o >>= 1) {
        a += __shfl_down_sync(0xffffffffu, a, o);
        b += __shfl_down_sync(0xffffffffu, b, o);
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { sa[warp] = a; sb[warp] = b; }
    __syncthreads();
    if (warp == 0) {
        a = lane < DT_BN_THREADS / 32 ? sa[lane] : 0.0;
        b = lane < DT_BN_THREADS / 32 ? sb[lane] : 0.0;
        for (int o = 16; o > 0; o >>= 1) {
            a += __shfl_down_sync(0xffffffffu, a, o);
            b += __shfl_down_sync(0xffffffffu, b, o);
        }
    }
}

/* partial[(c*S + s)*2 + {0,1}] = sum x, sum x^2 over images [s*N/S, (s+1)*N/S) of channel c */
__global__ void k_stats_partial(int64_t N, int64_t C, int64_t P, const float *__restrict__ x, double *partial) {
    int c = blockIdx.y, s = blockIdx.x, S = gridDim.x;
    int64_t n0 = s * N / S, n1 = (s + 1) * N / S;
    double a = 0.0, b = 0.0;
    for (int64_t n = n0; n < n1; n++) {
        const float *xp = x + (n * C + c) * P;
        for (int64_t p = threadIdx.x; p < P; p += DT_BN_THREADS) {
            double v = xp[p];
            a += v;
            b += v * v;
        }
    }
    block_sum2(a, b);
    if (threadIdx.x == 0) {
        partial[(c * S + s) * 2] = a;
        partial[(c * S + s) * 2 + 1] = b;
    }
}

/* One block per (n, c) plane. skip: [N, C, P] or NULL. */
__global__ void k_apply(int64_t C, int64_t P, const float *__restrict__ x, const float *__restrict__ mean,
                        const float *__restrict__ invstd, const float *__restrict__ w, const float *__restrict__ b,
                        const float *__restrict__ skip, int relu, float *__restrict__ y) {
    int64_t plane = blockIdx.x, c = plane % C;
    float scale = invstd[c] * w[c], shift = b[c] - mean[c] * scale;
    const float *xp = x + plane * P, *sp = skip ? skip + plane * P : NULL;
    float *yp = y + plane * P;
    if ((P & 3) == 0) {
        const float4 *x4 = reinterpret_cast<const float4 *>(xp), *s4 = reinterpret_cast<const float4 *>(sp);
        float4 *y4 = reinterpret_cast<float4 *>(yp);
        for (int64_t p = threadIdx.x; p < P / 4; p += blockDim.x) {
            float4 v = x4[p];
            v.x = v.x * scale + shift; v.y = v.y * scale + shift;
            v.z = v.z * scale + shift; v.w = v.w * scale + shift;
            if (sp) {
                float4 s = s4[p];
                v.x += s.x; v.y += s.y; v.z += s.z; v.w += s.w;
            }
            if (relu) { v.x = fmaxf(v.x, 0.f); v.y = fmaxf(v.y, 0.f); v.z = fmaxf(v.z, 0.f); v.w = fmaxf(v.w, 0.f); }
            y4[p] = v;
        }
    } else {
        for (int64_t p = threadIdx.x; p < P; p += blockDim.x) {
            float v = xp[p] * scale + shift;
            if (sp) v += sp[p];
            yp[p] = relu ? fmaxf(v, 0.0f) : v;
        }
    }
}

/* partial sums of g and g*xhat per (channel, split); g = dy masked by y > 0 when relu */
__global__ void k_bwd_partial(int64_t N, int64_t C, int64_t P, const float *__restrict__ x,
                              const float *__restrict__ y, const float *__restrict__ dy,
                              const float *__restrict__ mean, const float *__restrict__ invstd, int relu,
                              double *partial) {
    int c = blockIdx.y, s = blockIdx.x, S = gridDim.x;
    int64_t n0 = s * N / S, n1 = (s + 1) * N / S;
    float mu = mean[c], is = invstd[c];
    double a = 0.0, b = 0.0;
    for (int64_t n = n0; n < n1; n++) {
        int64_t o = (n * C + c) * P;
        for (int64_t p = threadIdx.x; p < P; p += DT_BN_THREADS) {
            float g = relu && !(y[o + p] > 0.0f) ? 0.0f : dy[o + p];
            a += g;
            b += (double)g * ((x[o + p] - mu) * is);
        }
    }
    block_sum2(a, b);
    if (threadIdx.x == 0) {
        partial[(c * S + s) * 2] = a;
        partial[(c * S + s) * 2 + 1] = b;
    }
}

/* dx and dskip of one (n, c) plane per block; either may be NULL */
__global__ void k_bwd_dx(int64_t C, int64_t P, int64_t M, const float *__restrict__ x, const float *__restrict__ y,
                         const float *__restrict__ dy, const float *__restrict__ mean,
                         const float *__restrict__ invstd, const float *__restrict__ w,
                         const double *__restrict__ sums, int relu, int training, float *__restrict__ dskip,
                         float beta_s, float beta, float *__restrict__ dx) {
    int64_t plane = blockIdx.x, c = plane % C;
    float is = invstd[c], k = w[c] * is, mu = mean[c];
    float mg = training ? (float)(sums[c * 2] / M) : 0.0f, mgx = training ? (float)(sums[c * 2 + 1] / M) : 0.0f;
    int64_t o = plane * P;
    for (int64_t p = threadIdx.x; p < P; p += blockDim.x) {
        float g = relu && !(y[o + p] > 0.0f) ? 0.0f : dy[o + p];
        if (dskip) dt_store_beta(&dskip[o + p], g, beta_s);
        if (dx) {
            float v = k * (g - mg - (x[o + p] - mu) * is * mgx);
            dt_store_beta(&dx[o + p], v, beta);
        }
    }
}

int plane_threads(int64_t P) { return P >= 1024 ? 256 : P >= 256 ? 128 : 64; }

/* ---- NHWC f32 / bf16: the kernels are batchnorm_nhwc.cuh's, run at dt_bn_nhwc_tuned ---- */

using namespace dt_bn_nhwc;

template <typename T>
void nhwc_stats(int64_t N, int64_t C, int64_t P, const void *xv, int training, float eps, float momentum, float *rm,
                float *rv, float *mean, float *invstd, void *ws, const dt_bn_sync *sync) {
    if (C <= 0) return;
    const T *x = (const T *)xv;
    int64_t R = N * P, M = R;
    double *partial = (double *)ws, *sums = partial + (size_t)C * DT_BN_MAX_SPLITS * 2;
    int S = 1;
    const double *from = NULL;
    if (training) {
        launch_stats_partial<T>(R, C, x, partial, dt_bn_nhwc_tuned_shape, &S);
        from = partial;
        if (sync) {
            k_sum_splits<true><<<channel_warp_blocks(C), 128, 0, dt_stream()>>>(C, S, 1, C, partial, sums);
            DT_CHECK_LAUNCH();
            sync->allreduce(sync->ctx, sums, 2 * C);
            M *= sync->ranks;
            from = NULL;
        }
    }
    k_stats_final<true><<<channel_warp_blocks(C), 128, 0, dt_stream()>>>(C, M, from, S, 1, C, sums, training, eps,
                                                                         momentum, rm, rv, mean, invstd);
    DT_CHECK_LAUNCH();
}

template <typename T>
void nhwc_apply(int64_t N, int64_t C, int64_t P, const void *x, const float *mean, const float *invstd,
                const float *w, const float *b, const void *skip, int relu, void *y) {
    int64_t R = N * P;
    if (R * C <= 0) return;
    launch_apply<dt_bn_nhwc_tuned, T>(R, C, (const T *)x, mean, invstd, w, b, (const T *)skip, relu, (T *)y,
                                      dt_bn_nhwc_tuned_shape);
}

template <typename T>
void nhwc_backward(int64_t N, int64_t C, int64_t P, const void *xv, const void *skipv, const void *dyv,
                   const float *mean, const float *invstd, const float *w, const float *b, int relu, int training,
                   void *dxv, float beta_x, void *dskipv, float beta_s, float *dw, float beta_w, float *db,
                   float beta_b, void *ws, const dt_bn_sync *sync) {
    if (C <= 0) return;
    const T *x = (const T *)xv, *skip = (const T *)skipv, *dy = (const T *)dyv;
    T *dx = (T *)dxv, *dskip = (T *)dskipv;
    int64_t R = N * P, M = R;
    double *partial = (double *)ws, *sums = partial + (size_t)C * DT_BN_MAX_SPLITS * 2;
    /* the ResNet join: dskip is written fresh, so pass 1 stores g there for pass 2 */
    int g_ready = dskip && beta_s == 0.0f, S;
    launch_bwd_partial<dt_bn_nhwc_tuned, T>(R, C, x, skip, dy, mean, invstd, w, b, relu, g_ready ? dskip : NULL, dx,
                                            dskip, partial, dt_bn_nhwc_tuned_shape, &S);
    /* the coefficients: in the sums' kernel, or after the all-reduce when the sums are synchronized */
    float *coef = (float *)(sums + (size_t)C * 2); /* [4][C] */
    const int synced = sync && training;
    k_bwd_sums<true><<<channel_warp_blocks(C), 128, 0, dt_stream()>>>(C, S, 1, C, partial, sums, dw, beta_w, db, beta_b,
                                                                      M, mean, invstd, w, b, training,
                                                                      synced ? NULL : coef);
    DT_CHECK_LAUNCH();
    if (synced) { /* even without dx: every replica makes the same collective calls */
        sync->allreduce(sync->ctx, sums, 2 * C);
        M *= sync->ranks;
        k_bwd_coef<<<channel_blocks(C), 128, 0, dt_stream()>>>(C, sums, M, mean, invstd, w, b, training, coef);
        DT_CHECK_LAUNCH();
    }
    if (!dx && !(dskip && !g_ready)) return;
    launch_bwd_dx<dt_bn_nhwc_tuned, T>(R, C, x, skip, dy, mean, coef, relu, training, g_ready, dskip, beta_s, dx, beta_x,
                                       dt_bn_nhwc_tuned_shape);
}

}  // namespace

/* ---- entry points ---- */

extern "C" void dt_bn_stats_of_sums_cuda(int64_t C, int64_t M, const double *sums, int64_t groups, float eps,
                                         float momentum, float *rm, float *rv, float *mean, float *invstd,
                                         const dt_bn_sync *sync) {
    if (C <= 0) return;
    if (!sync) {
        dt_bn_nhwc::launch_stats_of_groups<dt_bn_nhwc_tuned>(C, M, sums, groups, NULL, eps, momentum, rm, rv, mean, invstd);
        return;
    }
    double *s = (double *)dt_gpu_malloc(sizeof(double) * 2 * (size_t)C); /* [C][2] */
    dt_bn_nhwc::launch_stats_of_groups<dt_bn_nhwc_tuned>(C, M, sums, groups, s, eps, momentum, rm, rv, mean, invstd);
    sync->allreduce(sync->ctx, s, 2 * C);
    k_stats_final<false><<<channel_blocks(C), 128, 0, dt_stream()>>>(C, M * sync->ranks, NULL, 0, 1, C, s, 1, eps,
                                                                     momentum, rm, rv, mean, invstd);
    DT_CHECK_LAUNCH();
    dt_gpu_free(s);
}

extern "C" void dt_bn_stats_f32_nchw_cuda(int64_t N, int64_t C, int64_t P, const void *xv, int training, float eps,
                                          float momentum, float *running_mean, float *running_var, float *mean,
                                          float *invstd, void *ws, const dt_bn_sync *sync) {
    if (C <= 0) return;
    const float *x = (const float *)xv;
    int S = nchw_splits(N, C, P);
    double *partial = (double *)ws, *sums = partial + (size_t)C * DT_BN_MAX_SPLITS * 2;
    int64_t M = N * P;
    const double *from = NULL;
    if (training) {
        dt_check_grid_yz("batchnorm2d", C, 1);
        k_stats_partial<<<dim3(S, (unsigned)C), DT_BN_THREADS, 0, dt_stream()>>>(N, C, P, x, partial);
        DT_CHECK_LAUNCH();
        from = partial;
        if (sync) {
            k_sum_splits<false><<<channel_blocks(C), 128, 0, dt_stream()>>>(C, S, S, 1, partial, sums);
            DT_CHECK_LAUNCH();
            sync->allreduce(sync->ctx, sums, 2 * C);
            M *= sync->ranks;
            from = NULL;
        }
    }
    k_stats_final<false><<<channel_blocks(C), 128, 0, dt_stream()>>>(C, M, from, S, S, 1, sums, training, eps, momentum,
                                                             running_mean, running_var, mean, invstd);
    DT_CHECK_LAUNCH();
}

extern "C" void dt_bn_apply_f32_nchw_cuda(int64_t N, int64_t C, int64_t P, const void *x, const float *mean,
                                          const float *invstd, const float *w, const float *b, const void *skip,
                                          int relu, void *y) {
    if (N * C == 0) return;
    k_apply<<<(unsigned)(N * C), plane_threads(P), 0, dt_stream()>>>(C, P, (const float *)x, mean, invstd, w, b,
                                                                     (const float *)skip, relu, (float *)y);
    DT_CHECK_LAUNCH();
}

extern "C" void dt_bn_backward_f32_nchw_cuda(int64_t N, int64_t C, int64_t P, const void *x, const void *y,
                                             const void *skip, const void *dy, const float *mean, const float *invstd,
                                             const float *w, const float *b, int relu, int training, void *dx,
                                             float beta_x, void *dskip, float beta_s, float *dw, float beta_w,
                                             float *db, float beta_b, void *ws, const dt_bn_sync *sync) {
    (void)skip; /* the mask is y's */
    (void)b;
    if (C <= 0) return;
    int S = nchw_splits(N, C, P);
    double *partial = (double *)ws, *sums = partial + (size_t)C * DT_BN_MAX_SPLITS * 2;
    int64_t M = N * P;
    dt_check_grid_yz("batchnorm2d", C, 1);
    k_bwd_partial<<<dim3(S, (unsigned)C), DT_BN_THREADS, 0, dt_stream()>>>(N, C, P, (const float *)x, (const float *)y,
                                                                        (const float *)dy, mean, invstd, relu, partial);
    DT_CHECK_LAUNCH();
    k_bwd_sums<false><<<channel_blocks(C), 128, 0, dt_stream()>>>(C, S, S, 1, partial, sums, dw, beta_w, db, beta_b,
                                                                   0, NULL, NULL, NULL, NULL, 0, NULL);
    DT_CHECK_LAUNCH();
    if (sync && training) { /* even without dx: every replica makes the same collective calls */
        sync->allreduce(sync->ctx, sums, 2 * C);
        M *= sync->ranks;
    }
    if (dx || dskip) {
        k_bwd_dx<<<(unsigned)(N * C), plane_threads(P), 0, dt_stream()>>>(
            C, P, M, (const float *)x, (const float *)y, (const float *)dy, mean, invstd, w, sums, relu, training,
            (float *)dskip, beta_s, beta_x, (float *)dx);
        DT_CHECK_LAUNCH();
    }
}

#define DT_BN_NHWC_ENTRIES(name, T)                                                                                   \
    extern "C" void dt_bn_stats_##name##_nhwc_cuda(int64_t N, int64_t C, int64_t P, const void *x, int training,     \
                                                   float eps, float momentum, float *rm, float *rv, float *mean,     \
                                                   float *invstd, void *ws, const dt_bn_sync *sync) {                \
        nhwc_stats<T>(N, C, P, x, training, eps, momentum, rm, rv, mean, invstd, ws, sync);                          \
    }                                                                                                                 \
    extern "C" void dt_bn_apply_##name##_nhwc_cuda(int64_t N, int64_t C, int64_t P, const void *x, const float *mean, \
                                                   const float *invstd, const float *w, const float *b,             \
                                                   const void *skip, int relu, void *y) {                            \
        nhwc_apply<T>(N, C, P, x, mean, invstd, w, b, skip, relu, y);                                                \
    }                                                                                                                 \
    extern "C" void dt_bn_backward_##name##_nhwc_cuda(                                                                \
        int64_t N, int64_t C, int64_t P, const void *x, const void *y, const void *skip, const void *dy,              \
        const float *mean, const float *invstd, const float *w, const float *b, int relu, int training, void *dx,     \
        float beta_x, void *dskip, float beta_s, float *dw, float beta_w, float *db, float beta_b, void *ws,          \
        const dt_bn_sync *sync) {                                                                                     \
        (void)y; /* the mask is recomputed from x (and skip) */                                                       \
        nhwc_backward<T>(N, C, P, x, skip, dy, mean, invstd, w, b, relu, training, dx, beta_x, dskip, beta_s, dw,    \
                         beta_w, db, beta_b, ws, sync);                                                              \
    }

DT_BN_NHWC_ENTRIES(f32, float)
DT_BN_NHWC_ENTRIES(bf16, __nv_bfloat16)
