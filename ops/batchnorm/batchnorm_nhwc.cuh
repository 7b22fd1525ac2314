/* batchnorm_nhwc.cuh: the NHWC batch-norm kernels (f32, bf16) and their launch shapes, shared
 * by the library (ops/batchnorm/batchnorm.cu, which runs the measured-fastest tuning,
 * dt_bn_nhwc_tuned below) and the batch-norm lab (bench/lab/bn_lab.cu, which validates and times
 * the others). Included by .cu files only.
 *
 * x is R = N*P rows of C contiguous channels. A block is TX x TY threads (TX*TY = 256): TX lanes
 * over channel vectors of V channels (one 16-byte pack - 4 f32 or 8 bf16 - when C and the
 * pointers allow, else V = 1: any C works), TY over rows. A warp reads whole consecutive rows, so
 * every access is coalesced, and a thread keeps its channels' constants in registers for all its
 * rows.
 *
 * What a tuning fixes (the lab's axes):
 *   U      rows a thread loads before it computes on any of them: U independent 16-byte loads
 *          of each tensor in flight per thread instead of one. It changes no result: the
 *          pointwise passes compute each element alone, and the reductions still add a
 *          thread's rows in increasing order (the same bits for any U).
 *   MINB   the backward passes' __launch_bounds__ minimum of blocks per SM (0: none), a cap on
 *          their registers (what does not fit spills): the reduction's 16 double accumulators
 *          and 32 per-channel constants want ~120 registers, 2 blocks of 256 threads an SM
 *          (MINB 3 caps them at 80); dx's 40 constants want ~89 at U = 1 (MINB 3: 80).
 *   apply_blocks_per_sm, dx_blocks_per_sm  blocks a pointwise pass launches per SM, over all
 *          channel blocks (0: exactly as many as are resident, one wave of a grid-stride loop).
 *   GROUP_THREADS, GROUP_ACC  the finish of a conv epilogue's groups (k_stats_of_groups): threads
 *          a channel's block, and the accumulators a thread interleaves its groups over (GROUP_ACC
 *          independent chains of loads and adds instead of one). Both change the order of the
 *          double sums, so their rounding.
 *   splits_per_sm  the reductions' row splits target per SM of a 132-SM GPU (a constant, so the
 *          split boundaries - and the sums' bits - depend on the shape alone, on any GPU), at
 *          most DT_BN_MAX_SPLITS. Changing it changes the sums' rounding (not their accuracy).
 *
 * Reductions: block (cb, s) sums the fixed row range [s*R/S, (s+1)*R/S) of its channels; the TY
 * row-threads are combined by a fixed tree in shared memory; partials land at (s*C + c) and are
 * summed in split order by batchnorm.cu's k_bwd_sums / k_stats_final. No atomics. */
#ifndef DT_BATCHNORM_NHWC_CUH
#define DT_BATCHNORM_NHWC_CUH

#include <stdint.h>

#include <atomic>
#include <initializer_list>

#include "core/dt_cuda.h"
#include "core/dt_dtype.cuh"
#include "core/dt_kernel_util.cuh"
#include "core/dt_pack.cuh"
#include "ops/batchnorm/batchnorm.h"

#define DT_BN_THREADS 256

namespace dt_bn_nhwc {

/* The compile-time half of a tuning (see the header comment); the runtime half is
 * dt_bn_nhwc_shape. */
template <int U_APPLY, int U_PARTIAL, int MINB_PARTIAL, int U_DX, int MINB_DX, int GROUP_THREADS, int GROUP_ACC>
struct tuning {
    static constexpr int u_apply = U_APPLY, u_partial = U_PARTIAL, minb_partial = MINB_PARTIAL, u_dx = U_DX,
                         minb_dx = MINB_DX, group_threads = GROUP_THREADS, group_acc = GROUP_ACC;
};

struct shape {
    int apply_blocks_per_sm, dx_blocks_per_sm; /* 0: the resident count */
    int splits_per_sm;
};

/* bn(x) = fma(x, scale, shift): the one definition the forward and the backward's ReLU mask
 * share, so the mask is recomputed bit for bit (the CPU twins use fmaf the same way). */
__device__ __forceinline__ void bn_coef(const float *mean, const float *invstd, const float *w, const float *b,
                                        int64_t c, float &scale, float &shift) {
    scale = invstd[c] * w[c];
    shift = fmaf(-mean[c], scale, b[c]);
}

struct grid {
    int V, TX, TY;
    int64_t CB; /* blocks over channels */
};

template <typename T>
static inline grid tiling(int64_t C, std::initializer_list<const void *> ptrs) {
    grid g;
    g.V = dt_pack_ok<T>(C, ptrs) ? dt_pack_len<T>() : 1;
    int64_t CV = C / g.V;
    g.TX = 1;
    while (g.TX < 32 && g.TX < CV) g.TX *= 2;
    g.TY = DT_BN_THREADS / g.TX;
    g.CB = dt_ceil_div(CV, g.TX);
    return g;
}

/* Row splits of a reduction: a function of the shape (and the tuning's constant) only, at least 4
 * rows a thread. */
static inline int splits(int64_t R, const grid &g, int splits_per_sm) {
    int64_t s = dt_ceil_div((int64_t)splits_per_sm * 132, g.CB), most = R / (4 * g.TY);
    if (s > most) s = most;
    if (s > DT_BN_MAX_SPLITS) s = DT_BN_MAX_SPLITS;
    return s < 1 ? 1 : (int)s;
}

/* Blocks `kernel` keeps resident on an SM at DT_BN_THREADS threads: the occupancy calculator, a
 * function of the kernel's registers and shared memory, asked once per kernel (*cache, 0 until
 * then; threads racing here store the same value). It fails only where the context is already
 * broken, which the launch after it reports; 1 a block an SM then. */
static inline int resident_blocks(const void *kernel, std::atomic<int> *cache) {
    int n = cache->load(std::memory_order_relaxed);
    if (n > 0) return n;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, DT_BN_THREADS, 0) != cudaSuccess || n < 1) {
        (void)cudaGetLastError();
        return 1;
    }
    cache->store(n, std::memory_order_relaxed);
    return n;
}

/* Blocks over rows of a pointwise pass (any count gives the same bits): per_sm per SM over all
 * channel blocks, never more than the rows need. */
static inline unsigned row_blocks(int64_t R, const grid &g, int per_sm) {
    int64_t need = dt_ceil_div(R, g.TY), want = dt_ceil_div((int64_t)dt_gpu_sm_count() * per_sm, g.CB);
    int64_t n = need < want ? need : want;
    return (unsigned)(n < 1 ? 1 : n);
}

/* Adds each thread's 2V sums over the block's TY rows of threads by a fixed tree, and row 0
 * writes its channels' results: out[2k + {0,1}] for channel c0 + k. */
template <int V>
__device__ __forceinline__ void rows_reduce_store(const double *a, const double *b, double *out, bool active) {
    __shared__ double sh[2 * V][DT_BN_THREADS];
    const int TX = blockDim.x, tid = threadIdx.y * TX + threadIdx.x;
#pragma unroll
    for (int k = 0; k < V; k++) {
        sh[2 * k][tid] = a[k];
        sh[2 * k + 1][tid] = b[k];
    }
    __syncthreads();
    for (int o = blockDim.y / 2; o > 0; o >>= 1) {
        if ((int)threadIdx.y < o)
#pragma unroll
            for (int j = 0; j < 2 * V; j++) sh[j][tid] += sh[j][tid + o * TX];
        __syncthreads();
    }
    if (threadIdx.y == 0 && active)
#pragma unroll
        for (int j = 0; j < 2 * V; j++) out[j] = sh[j][tid];
}

/* partial[(s*C + c)*2 + {0,1}] = sum x, sum x^2 of channel c over rows [s*R/S, (s+1)*R/S) */
template <typename T, int V>
__global__ void __launch_bounds__(DT_BN_THREADS)
    k_nhwc_stats_partial(int64_t R, int64_t C, const T *__restrict__ x, double *__restrict__ partial) {
    const int64_t c0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    const int64_t r0 = (int64_t)blockIdx.y * R / gridDim.y, r1 = ((int64_t)blockIdx.y + 1) * R / gridDim.y;
    double a[V], b[V];
#pragma unroll
    for (int k = 0; k < V; k++) a[k] = b[k] = 0.0;
    if (c0 < C) {
#pragma unroll 4
        for (int64_t r = r0 + threadIdx.y; r < r1; r += blockDim.y) {
            float v[V];
            dt_ldv<V>(x + r * C + c0, v);
#pragma unroll
            for (int k = 0; k < V; k++) {
                a[k] += v[k];
                b[k] += (double)v[k] * v[k];
            }
        }
    }
    rows_reduce_store<V>(a, b, partial + ((int64_t)blockIdx.y * C + c0) * 2, c0 < C);
}

/* y = act(fma(x, scale, shift) + skip); a thread's rows r, r + step, ... taken U at a time */
template <typename T, int V, int U>
__global__ void __launch_bounds__(DT_BN_THREADS)
    k_nhwc_apply(int64_t R, int64_t C, const T *__restrict__ x, const float *__restrict__ mean,
                 const float *__restrict__ invstd, const float *__restrict__ w, const float *__restrict__ b,
                 const T *__restrict__ skip, int relu, T *__restrict__ y) {
    const int64_t c0 = ((int64_t)blockIdx.y * blockDim.x + threadIdx.x) * V;
    if (c0 >= C) return;
    float sc[V], sh[V];
#pragma unroll
    for (int k = 0; k < V; k++) bn_coef(mean, invstd, w, b, c0 + k, sc[k], sh[k]);
    const int64_t step = (int64_t)gridDim.x * blockDim.y;
    for (int64_t r = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; r < R; r += U * step) {
        dt_raw<T, V> xr[U], sr[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (r + u * step >= R) break;
            const int64_t o = (r + u * step) * C + c0;
            xr[u] = dt_ldp<V>(x + o);
            if (skip) sr[u] = dt_ldp<V>(skip + o);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (r + u * step >= R) break;
            float v[V], s[V];
            dt_unpack<V>(xr[u], v);
            if (skip) dt_unpack<V>(sr[u], s);
#pragma unroll
            for (int k = 0; k < V; k++) {
                float t = fmaf(v[k], sc[k], sh[k]);
                if (skip) t += s[k];
                v[k] = relu ? fmaxf(t, 0.0f) : t;
            }
            dt_stv<V>(y + (r + u * step) * C + c0, v);
        }
    }
}

/* g = dy, zeroed where the pre-activation fma(x, scale, shift) (+ s, the skip's values when
 * has_skip) is not > 0 (the ReLU's mask) */
template <int V>
__device__ __forceinline__ void relu_mask(float *g, const float *xv, bool has_skip, const float *s, const float *sc,
                                          const float *sh) {
#pragma unroll
    for (int k = 0; k < V; k++) {
        float pre = fmaf(xv[k], sc[k], sh[k]);
        if (has_skip) pre += s[k];
        if (!(pre > 0.0f)) g[k] = 0.0f;
    }
}

/* Pass 1: partial sums of g and g*xhat per (split, channel) as k_nhwc_stats_partial; g_out
 * (or NULL) receives g itself. A thread's rows r0 + ty, r0 + ty + TY, ... are loaded U at a
 * time and added in increasing order. */
template <typename T, int V, int U, int MINB>
__global__ void __launch_bounds__(DT_BN_THREADS, MINB)
    k_nhwc_bwd_partial(int64_t R, int64_t C, const T *__restrict__ x, const T *__restrict__ skip,
                       const T *__restrict__ dy, const float *__restrict__ mean, const float *__restrict__ invstd,
                       const float *__restrict__ w, const float *__restrict__ b, int relu, T *__restrict__ g_out,
                       double *__restrict__ partial) {
    const int64_t c0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    const int64_t r0 = (int64_t)blockIdx.y * R / gridDim.y, r1 = ((int64_t)blockIdx.y + 1) * R / gridDim.y;
    double a[V], ax[V];
#pragma unroll
    for (int k = 0; k < V; k++) a[k] = ax[k] = 0.0;
    if (c0 < C) {
        float mu[V], is[V], sc[V], sh[V];
#pragma unroll
        for (int k = 0; k < V; k++) {
            mu[k] = mean[c0 + k];
            is[k] = invstd[c0 + k];
            bn_coef(mean, invstd, w, b, c0 + k, sc[k], sh[k]);
        }
        const bool has_skip = relu && skip;
        const int64_t step = blockDim.y;
#pragma unroll(U == 1 ? 2 : 1)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += U * step) {
            dt_raw<T, V> xr[U], gr[U], sr[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                if (r + u * step >= r1) break;
                const int64_t o = (r + u * step) * C + c0;
                xr[u] = dt_ldp<V>(x + o);
                gr[u] = dt_ldp<V>(dy + o);
                if (has_skip) sr[u] = dt_ldp<V>(skip + o);
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                if (r + u * step >= r1) break;
                float xv[V], g[V], s[V];
                dt_unpack<V>(xr[u], xv);
                dt_unpack<V>(gr[u], g);
                if (has_skip) dt_unpack<V>(sr[u], s);
                if (relu) relu_mask<V>(g, xv, has_skip, s, sc, sh);
#pragma unroll
                for (int k = 0; k < V; k++) {
                    a[k] += g[k];
                    ax[k] += (double)g[k] * ((xv[k] - mu[k]) * is[k]);
                }
                if (g_out) dt_stv<V>(g_out + (r + u * step) * C + c0, g);
            }
        }
    }
    rows_reduce_store<V>(a, ax, partial + ((int64_t)blockIdx.y * C + c0) * 2, c0 < C);
}

/* V consecutive per-channel floats (V = 1, 4 or 8; p aligned to V floats, 16 bytes at most) */
template <int V>
__device__ __forceinline__ void ld_channels(const float *p, float *v) {
    if (V == 1) v[0] = p[0];
    else
#pragma unroll
        for (int j = 0; j < V; j += 4) dt_ldv<4>(p + j, v + j);
}

/* Pass 2: dskip (unless pass 1 wrote g there: g_ready) and dx, from the mean and the per-channel
 * coefficients coef [4][C] = (scale, shift, mean_g, q) of batchnorm.cu's bwd_coef; rows as
 * k_nhwc_apply's, U at a time. */
template <typename T, int V, int U, int MINB>
__global__ void __launch_bounds__(DT_BN_THREADS, MINB)
    k_nhwc_bwd_dx(int64_t R, int64_t C, const T *__restrict__ x, const T *__restrict__ skip,
                  const T *__restrict__ dy, const float *__restrict__ mean, const float *__restrict__ coef, int relu,
                  int training, int g_ready, T *__restrict__ dskip, float beta_s, T *__restrict__ dx, float beta_x) {
    const int64_t c0 = ((int64_t)blockIdx.y * blockDim.x + threadIdx.x) * V;
    if (c0 >= C) return;
    float sc[V], sh[V], mg[V], q[V], mu[V];
    ld_channels<V>(coef + c0, sc);
    ld_channels<V>(coef + C + c0, sh);
    ld_channels<V>(coef + 2 * C + c0, mg);
    ld_channels<V>(coef + 3 * C + c0, q);
    ld_channels<V>(mean + c0, mu);
    const bool need_x = (dx && training) || (relu && !g_ready);
    const bool has_skip = relu && !g_ready && skip;
    const int64_t step = (int64_t)gridDim.x * blockDim.y;
    for (int64_t r = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; r < R; r += U * step) {
        dt_raw<T, V> xr[U], gr[U], sr[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (r + u * step >= R) break;
            const int64_t o = (r + u * step) * C + c0;
            if (need_x) xr[u] = dt_ldp<V>(x + o);
            gr[u] = dt_ldp<V>(g_ready ? dskip + o : dy + o);
            if (has_skip) sr[u] = dt_ldp<V>(skip + o);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (r + u * step >= R) break;
            const int64_t o = (r + u * step) * C + c0;
            float g[V], xv[V], s[V];
            if (need_x) dt_unpack<V>(xr[u], xv);
            else
#pragma unroll
                for (int j = 0; j < V; j++) xv[j] = 0.0f;
            dt_unpack<V>(gr[u], g);
            if (!g_ready) {
                if (has_skip) dt_unpack<V>(sr[u], s);
                if (relu) relu_mask<V>(g, xv, has_skip, s, sc, sh);
                if (dskip) {
                    float t[V];
#pragma unroll
                    for (int j = 0; j < V; j++) t[j] = g[j];
                    dt_stv_beta<V>(dskip + o, t, beta_s);
                }
            }
            if (dx) {
                float v[V];
#pragma unroll
                for (int j = 0; j < V; j++) v[j] = training ? fmaf(-q[j], xv[j] - mu[j], sc[j] * (g[j] - mg[j])) : sc[j] * g[j];
                dt_stv_beta<V>(dx + o, v, beta_x);
            }
        }
    }
}

/* mean, invstd and the running update of channel c from its sums over M values */
__device__ __forceinline__ void finish_stats(int64_t c, int64_t M, double s1, double s2, float eps, float momentum,
                                             float *rm, float *rv, float *mean, float *invstd) {
    double mu = s1 / M, var = s2 / M - mu * mu;
    if (var < 0) var = 0;
    mean[c] = (float)mu;
    invstd[c] = (float)(1.0 / sqrt(var + eps));
    if (rm) {
        double unbiased = M > 1 ? var * M / (M - 1) : var;
        rm[c] = (float)((1.0 - momentum) * rm[c] + momentum * mu);
        rv[c] = (float)((1.0 - momentum) * rv[c] + momentum * unbiased);
    }
}

/* The statistics from the groups [G][C][2] (sum x, sum x^2) a conv's epilogue made
 * (dt_bn_stats_of_sums): block c, thread t takes groups t, t + T, t + 2T, ... into accumulator
 * (i mod A) for its i-th group, adds its A accumulators in order, then a fixed tree over the T
 * threads (deterministic: the order depends on G, T and A alone); the channel's sums go to `sums`
 * (a synchronized batch norm all-reduces them next) or straight to its statistics. */
template <int T, int A>
__global__ void __launch_bounds__(T)
    k_stats_of_groups(int64_t C, int64_t M, const double *__restrict__ groups, int64_t G, double *sums, float eps,
                      float momentum, float *rm, float *rv, float *mean, float *invstd) {
    __shared__ double sa[T], sb[T];
    const int64_t c = blockIdx.x;
    double a[A], b[A];
#pragma unroll
    for (int k = 0; k < A; k++) a[k] = b[k] = 0.0;
    int64_t g = threadIdx.x;
    for (; g + (A - 1) * T < G; g += A * T)
#pragma unroll
        for (int k = 0; k < A; k++) {
            const double2 v = *reinterpret_cast<const double2 *>(groups + ((g + k * T) * C + c) * 2);
            a[k] += v.x, b[k] += v.y;
        }
#pragma unroll
    for (int k = 0; k < A - 1; k++) /* the last < A groups of this thread */
        if (g + k * T < G) {
            const double2 v = *reinterpret_cast<const double2 *>(groups + ((g + k * T) * C + c) * 2);
            a[k] += v.x, b[k] += v.y;
        }
#pragma unroll
    for (int k = 1; k < A; k++) a[0] += a[k], b[0] += b[k];
    sa[threadIdx.x] = a[0], sb[threadIdx.x] = b[0];
    __syncthreads();
#pragma unroll
    for (int o = T / 2; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) sa[threadIdx.x] += sa[threadIdx.x + o], sb[threadIdx.x] += sb[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x) return;
    if (sums) sums[c * 2] = sa[0], sums[c * 2 + 1] = sb[0];
    else finish_stats(c, M, sa[0], sb[0], eps, momentum, rm, rv, mean, invstd);
}

/* ---- launches (stream dt_stream()); `TU` a tuning<>, `sh` its shape ---- */

template <typename TU>
static inline void launch_stats_of_groups(int64_t C, int64_t M, const double *groups, int64_t G, double *sums,
                                          float eps, float momentum, float *rm, float *rv, float *mean,
                                          float *invstd) {
    k_stats_of_groups<TU::group_threads, TU::group_acc><<<(unsigned)C, TU::group_threads, 0, dt_stream()>>>(
        C, M, groups, G, sums, eps, momentum, rm, rv, mean, invstd);
    DT_CHECK_LAUNCH();
}

template <typename T>
static inline void launch_stats_partial(int64_t R, int64_t C, const T *x, double *partial, const shape &sh, int *S) {
    const grid g = tiling<T>(C, {x});
    *S = splits(R, g, sh.splits_per_sm);
    dt_with_pack<T>(g.V != 1, [&](auto v) {
        k_nhwc_stats_partial<T, decltype(v)::value>
            <<<dim3((unsigned)g.CB, (unsigned)*S), dim3(g.TX, g.TY), 0, dt_stream()>>>(R, C, x, partial);
    });
    DT_CHECK_LAUNCH();
}

template <typename TU, typename T>
static inline void launch_apply(int64_t R, int64_t C, const T *x, const float *mean, const float *invstd,
                                const float *w, const float *b, const T *skip, int relu, T *y, const shape &sh) {
    const grid g = tiling<T>(C, {x, skip, y});
    dt_with_pack<T>(g.V != 1, [&](auto v) {
        auto k = k_nhwc_apply<T, decltype(v)::value, TU::u_apply>;
        static std::atomic<int> resident;
        const int per_sm =
            sh.apply_blocks_per_sm > 0 ? sh.apply_blocks_per_sm : resident_blocks((const void *)k, &resident);
        k<<<dim3(row_blocks(R, g, per_sm), (unsigned)g.CB), dim3(g.TX, g.TY), 0, dt_stream()>>>(R, C, x, mean, invstd, w, b, skip, relu, y);
    });
    DT_CHECK_LAUNCH();
}

/* The backward's pass 1 into partial [S][C][2]; *S its splits. The grid's channel tiling is that
 * of every tensor the backward touches, so that both passes use the same V. */
template <typename TU, typename T>
static inline void launch_bwd_partial(int64_t R, int64_t C, const T *x, const T *skip, const T *dy, const float *mean,
                                      const float *invstd, const float *w, const float *b, int relu, T *g_out,
                                      const T *dx, const T *dskip, double *partial, const shape &sh, int *S) {
    const grid g = tiling<T>(C, {x, skip, dy, dx, dskip});
    *S = splits(R, g, sh.splits_per_sm);
    dt_with_pack<T>(g.V != 1, [&](auto v) {
        k_nhwc_bwd_partial<T, decltype(v)::value, TU::u_partial, TU::minb_partial>
            <<<dim3((unsigned)g.CB, (unsigned)*S), dim3(g.TX, g.TY), 0, dt_stream()>>>(R, C, x, skip, dy, mean, invstd,
                                                                                      w, b, relu, g_out, partial);
    });
    DT_CHECK_LAUNCH();
}

template <typename TU, typename T>
static inline void launch_bwd_dx(int64_t R, int64_t C, const T *x, const T *skip, const T *dy, const float *mean,
                                 const float *coef, int relu, int training, int g_ready, T *dskip, float beta_s, T *dx,
                                 float beta_x, const shape &sh) {
    const grid g = tiling<T>(C, {x, skip, dy, dx, dskip});
    dt_with_pack<T>(g.V != 1, [&](auto v) {
        auto k = k_nhwc_bwd_dx<T, decltype(v)::value, TU::u_dx, TU::minb_dx>;
        static std::atomic<int> resident;
        const int per_sm = sh.dx_blocks_per_sm > 0 ? sh.dx_blocks_per_sm : resident_blocks((const void *)k, &resident);
        k<<<dim3(row_blocks(R, g, per_sm), (unsigned)g.CB), dim3(g.TX, g.TY), 0, dt_stream()>>>(
            R, C, x, skip, dy, mean, coef, relu, training, g_ready, dskip, beta_s, dx, beta_x);
    });
    DT_CHECK_LAUNCH();
}

}  // namespace dt_bn_nhwc

/* The library's tuning, bench/lab/bn_lab.cu's fastest valid variants (H100, 2026-12-07, ResNet-18's
 * batch norms at batch 64, count-weighted us of a step; docs/PERF.md section 27): apply 4 rows
 * a thread in flight, exactly the resident grid (350 against 423 for 1 row, 8 blocks an SM); dx
 * 2 rows, no register cap, the resident grid (399 against 457 for 1 row capped at 3 blocks an
 * SM); the partial pass 1 row, no cap, 4 splits an SM (475 us; every other variant 488-1143) and
 * the groups' finish 256 threads, one accumulator (161 us; the others 160-202: noise or slower),
 * both from the lab's second run (section 28).
 * Pointwise outputs are the same bits under every tuning. */
typedef dt_bn_nhwc::tuning<4, 1, 0, 2, 0, 256, 1> dt_bn_nhwc_tuned;
static const dt_bn_nhwc::shape dt_bn_nhwc_tuned_shape = {0, 0, 4};

#endif
