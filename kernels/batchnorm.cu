/* CUDA batch norm. Reductions run on a (channel, split) grid: a channel's N images are cut
 * into S contiguous groups (S fixed by the shape), each block sums its group in double, and
 * a kernel adds the S partials of each channel in order into the channel's sums (which a
 * synchronized batch norm all-reduces across replicas before they are used): deterministic,
 * no atomics, and enough blocks to fill the GPU even when C is small. The pointwise kernels take one
 * block per (n, c) plane, so the channel's scale and shift are uniform in the block and no
 * per-element division is needed; planes whose size is a multiple of 4 use float4. */
#include "batchnorm.h"
#include "dt_kernel_util.cuh"

#define BN_THREADS 256
#define BN_MAX_SPLITS 64

namespace {

int bn_splits(int64_t N, int64_t C, int64_t P) {
    int64_t per_channel = N * P;
    int64_t s = (per_channel + 16383) / 16384;   /* ~16K elements per block at least */
    int64_t want = (2 * 132 + C - 1) / C;         /* at least ~2 blocks per SM overall */
    if (s < want) s = want;
    if (s > N) s = N;
    if (s > BN_MAX_SPLITS) s = BN_MAX_SPLITS;
    return s < 1 ? 1 : (int)s;
}

__device__ void block_sum2(double &a, double &b) {
    __shared__ double sa[BN_THREADS / 32], sb[BN_THREADS / 32];
    for (int o = 16; o > 0; o >>= 1) {
        a += __shfl_down_sync(0xffffffffu, a, o);
        b += __shfl_down_sync(0xffffffffu, b, o);
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { sa[warp] = a; sb[warp] = b; }
    __syncthreads();
    if (warp == 0) {
        a = lane < BN_THREADS / 32 ? sa[lane] : 0.0;
        b = lane < BN_THREADS / 32 ? sb[lane] : 0.0;
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
        for (int64_t p = threadIdx.x; p < P; p += BN_THREADS) {
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

/* sums[c*2 + {0,1}] = the S partials of channel c, added in order */
__global__ void k_sum_splits(int64_t C, int S, const double *partial, double *sums) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double a = 0.0, b = 0.0;
    for (int s = 0; s < S; s++) {
        a += partial[(c * S + s) * 2];
        b += partial[(c * S + s) * 2 + 1];
    }
    sums[c * 2] = a;
    sums[c * 2 + 1] = b;
}

__global__ void k_stats_final(int64_t C, int64_t M, const double *sums, int training, float eps,
                              float momentum, float *rm, float *rv, float *mean, float *invstd) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    if (!training) {
        mean[c] = rm[c];
        invstd[c] = (float)(1.0 / sqrt((double)rv[c] + eps));
        return;
    }
    double mu = sums[c * 2] / M, var = sums[c * 2 + 1] / M - mu * mu;
    if (var < 0) var = 0;
    mean[c] = (float)mu;
    invstd[c] = (float)(1.0 / sqrt(var + eps));
    if (rm) {
        double unbiased = M > 1 ? var * M / (M - 1) : var;
        rm[c] = (float)((1.0 - momentum) * rm[c] + momentum * mu);
        rv[c] = (float)((1.0 - momentum) * rv[c] + momentum * unbiased);
    }
}

__global__ void k_apply(int64_t C, int64_t P, const float *__restrict__ x, const float *__restrict__ mean,
                        const float *__restrict__ invstd, const float *__restrict__ w,
                        const float *__restrict__ b, int relu, float *__restrict__ y) {
    int64_t plane = blockIdx.x, c = plane % C;
    float scale = invstd[c] * w[c], shift = b[c] - mean[c] * scale;
    const float *xp = x + plane * P;
    float *yp = y + plane * P;
    if ((P & 3) == 0) {
        const float4 *x4 = reinterpret_cast<const float4 *>(xp);
        float4 *y4 = reinterpret_cast<float4 *>(yp);
        for (int64_t p = threadIdx.x; p < P / 4; p += blockDim.x) {
            float4 v = x4[p];
            v.x = v.x * scale + shift; v.y = v.y * scale + shift;
            v.z = v.z * scale + shift; v.w = v.w * scale + shift;
            if (relu) { v.x = fmaxf(v.x, 0.f); v.y = fmaxf(v.y, 0.f); v.z = fmaxf(v.z, 0.f); v.w = fmaxf(v.w, 0.f); }
            y4[p] = v;
        }
    } else {
        for (int64_t p = threadIdx.x; p < P; p += blockDim.x) {
            float v = xp[p] * scale + shift;
            yp[p] = relu ? fmaxf(v, 0.0f) : v;
        }
    }
}

/* partial sums of g and g*xhat per (channel, split) */
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
        for (int64_t p = threadIdx.x; p < P; p += BN_THREADS) {
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

/* dw, db from this replica's sums (sum g, sum g*xhat) */
__global__ void k_bwd_params(int64_t C, const double *sums, float *dw, float beta_w, float *db, float beta_b) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    if (db) dt_store_beta(&db[c], (float)sums[c * 2], beta_b);
    if (dw) dt_store_beta(&dw[c], (float)sums[c * 2 + 1], beta_w);
}

__global__ void k_bwd_dx(int64_t C, int64_t P, int64_t M, const float *__restrict__ x, const float *__restrict__ y,
                         const float *__restrict__ dy, const float *__restrict__ mean,
                         const float *__restrict__ invstd, const float *__restrict__ w,
                         const double *__restrict__ sums, int relu, int training, float beta,
                         float *__restrict__ dx) {
    int64_t plane = blockIdx.x, c = plane % C;
    float is = invstd[c], k = w[c] * is, mu = mean[c];
    float mg = training ? (float)(sums[c * 2] / M) : 0.0f, mgx = training ? (float)(sums[c * 2 + 1] / M) : 0.0f;
    int64_t o = plane * P;
    for (int64_t p = threadIdx.x; p < P; p += blockDim.x) {
        float g = relu && !(y[o + p] > 0.0f) ? 0.0f : dy[o + p];
        float v = k * (g - mg - (x[o + p] - mu) * is * mgx);
        dt_store_beta(&dx[o + p], v, beta);
    }
}

int plane_threads(int64_t P) { return P >= 1024 ? 256 : P >= 256 ? 128 : 64; }

}  // namespace

/* Workspace: the partials (C, BN_MAX_SPLITS, 2) then the sums (C, 2), doubles. */
extern "C" size_t dt_bn_cuda_ws_bytes(int64_t N, int64_t C) {
    (void)N;
    return (size_t)C * (BN_MAX_SPLITS + 1) * 2 * sizeof(double);
}

extern "C" void dt_bn_stats_cuda(int64_t N, int64_t C, int64_t P, const float *x, int training, float eps,
                                 float momentum, float *running_mean, float *running_var, float *mean,
                                 float *invstd, void *ws, const dt_bn_sync *sync) {
    int S = bn_splits(N, C, P);
    double *partial = (double *)ws, *sums = partial + (size_t)C * BN_MAX_SPLITS * 2;
    int64_t M = N * P;
    if (training) {
        k_stats_partial<<<dim3(S, (unsigned)C), BN_THREADS, 0, dt_stream()>>>(N, C, P, x, partial);
        DT_CHECK_LAUNCH();
        k_sum_splits<<<(unsigned)dt_ceil_div(C, 128), 128, 0, dt_stream()>>>(C, S, partial, sums);
        DT_CHECK_LAUNCH();
        if (sync) {
            sync->allreduce(sync->ctx, sums, 2 * C);
            M *= sync->ranks;
        }
    }
    k_stats_final<<<(unsigned)dt_ceil_div(C, 128), 128, 0, dt_stream()>>>(C, M, sums, training, eps, momentum,
                                                                          running_mean, running_var, mean, invstd);
    DT_CHECK_LAUNCH();
}

extern "C" void dt_bn_apply_cuda(int64_t N, int64_t C, int64_t P, const float *x, const float *mean,
                                 const float *invstd, const float *w, const float *b, int relu, float *y) {
    if (N * C == 0) return;
    k_apply<<<(unsigned)(N * C), plane_threads(P), 0, dt_stream()>>>(C, P, x, mean, invstd, w, b, relu, y);
    DT_CHECK_LAUNCH();
}

extern "C" void dt_bn_backward_cuda(int64_t N, int64_t C, int64_t P, const float *x, const float *y,
                                    const float *dy, const float *mean, const float *invstd, const float *w,
                                    int relu, int training, float *dx, float beta_x, float *dw, float beta_w,
                                    float *db, float beta_b, void *ws, const dt_bn_sync *sync) {
    int S = bn_splits(N, C, P);
    double *partial = (double *)ws, *sums = partial + (size_t)C * BN_MAX_SPLITS * 2;
    int64_t M = N * P;
    k_bwd_partial<<<dim3(S, (unsigned)C), BN_THREADS, 0, dt_stream()>>>(N, C, P, x, y, dy, mean, invstd, relu, partial);
    DT_CHECK_LAUNCH();
    k_sum_splits<<<(unsigned)dt_ceil_div(C, 128), 128, 0, dt_stream()>>>(C, S, partial, sums);
    DT_CHECK_LAUNCH();
    k_bwd_params<<<(unsigned)dt_ceil_div(C, 128), 128, 0, dt_stream()>>>(C, sums, dw, beta_w, db, beta_b);
    DT_CHECK_LAUNCH();
    if (sync && training) { /* even without dx: every replica makes the same collective calls */
        sync->allreduce(sync->ctx, sums, 2 * C);
        M *= sync->ranks;
    }
    if (dx) {
        k_bwd_dx<<<(unsigned)(N * C), plane_threads(P), 0, dt_stream()>>>(C, P, M, x, y, dy, mean, invstd, w, sums,
                                                                          relu, training, beta_x, dx);
        DT_CHECK_LAUNCH();
    }
}
