/* One warp per row: rows are short (classes), and warp shuffles do the reductions. The logits
 * are read three times per row (max, sums, gradient) - from L1/L2 after the first; each row's
 * gradient is written once. */
#include "core/dt_dtype.cuh"
#include "core/dt_kernel_util.cuh"
#include "ops/loss/loss.h"

namespace {

__device__ int label_of(int32_t l, int64_t K) { return l >= 0 && l < K ? (int)l : -1; }

__device__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <typename T>
__global__ void k_xent_fwd(int64_t N, int64_t K, const T *__restrict__ logits, const int32_t *__restrict__ labels,
                           float eps, float *__restrict__ row_loss) {
    int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (i >= N) return;
    const T *x = logits + i * K;
    float m = -INFINITY;
    for (int64_t j = lane; j < K; j += 32) m = fmaxf(m, dt_ld(x + j));
    m = warp_max(m);
    double se = 0, sx = 0;
    for (int64_t j = lane; j < K; j += 32) {
        float v = dt_ld(x + j);
        se += exp((double)v - m);
        sx += v;
    }
    se = warp_sum(se);
    sx = warp_sum(sx);
    if (lane == 0) {
        int lab = label_of(labels[i], K);
        row_loss[i] = lab < 0 ? NAN : (float)(m + log(se) - (1.0 - eps) * dt_ld(x + lab) - eps / K * sx);
    }
}

template <typename T>
__global__ void k_xent_bwd(int64_t N, int64_t K, const T *__restrict__ logits, const int32_t *__restrict__ labels,
                           float eps, const float *__restrict__ gscale, float beta, T *__restrict__ d) {
    int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (i >= N) return;
    const T *x = logits + i * K;
    float m = -INFINITY;
    for (int64_t j = lane; j < K; j += 32) m = fmaxf(m, dt_ld(x + j));
    m = warp_max(m);
    double se = 0;
    for (int64_t j = lane; j < K; j += 32) se += exp((double)dt_ld(x + j) - m);
    se = warp_sum(se);
    int lab = label_of(labels[i], K);
    float g = gscale[0] / (float)N;
    for (int64_t j = lane; j < K; j += 32) {
        float p = (float)(exp((double)dt_ld(x + j) - m) / se);
        float t = eps / K + (j == lab ? 1.0f - eps : 0.0f);
        dt_st_beta(&d[i * K + j], lab < 0 ? 0.0f : g * (p - t), beta);
    }
}

template <typename T>
__global__ void k_topk(int64_t N, int64_t K, const T *__restrict__ logits, const int32_t *__restrict__ labels,
                       float *__restrict__ correct) {
    int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (i >= N) return;
    const T *x = logits + i * K;
    int lab = label_of(labels[i], K);
    double rank = 0;
    if (lab >= 0) {
        float xl = dt_ld(x + lab);
        for (int64_t j = lane; j < K; j += 32) {
            float v = dt_ld(x + j);
            rank += v > xl || (v == xl && j < lab);
        }
        rank = warp_sum(rank);
    } else {
        rank = (double)K;
    }
    if (lane == 0) {
        correct[2 * i] = rank < 1;
        correct[2 * i + 1] = rank < 5;
    }
}

unsigned rows_grid(int64_t N) { return (unsigned)((N * 32 + 255) / 256); }

template <typename T>
void xent_fwd(int64_t N, int64_t K, const void *logits, const int32_t *labels, float eps, float *row_loss) {
    if (N <= 0) return;
    k_xent_fwd<T><<<rows_grid(N), 256, 0, dt_stream()>>>(N, K, (const T *)logits, labels, eps, row_loss);
    DT_CHECK_LAUNCH();
}
template <typename T>
void xent_bwd(int64_t N, int64_t K, const void *logits, const int32_t *labels, float eps, const float *gscale,
              float beta, void *dlogits) {
    if (N <= 0) return;
    k_xent_bwd<T><<<rows_grid(N), 256, 0, dt_stream()>>>(N, K, (const T *)logits, labels, eps, gscale, beta,
                                                         (T *)dlogits);
    DT_CHECK_LAUNCH();
}
template <typename T>
void topk(int64_t N, int64_t K, const void *logits, const int32_t *labels, float *correct) {
    if (N <= 0) return;
    k_topk<T><<<rows_grid(N), 256, 0, dt_stream()>>>(N, K, (const T *)logits, labels, correct);
    DT_CHECK_LAUNCH();
}

}  // namespace

#define DT_LOSS_ENTRIES(name, T)                                                                                     \
    extern "C" void dt_xent_fwd_##name##_cuda(int64_t N, int64_t K, const void *logits, const int32_t *labels,       \
                                              float eps, float *row_loss) {                                          \
        xent_fwd<T>(N, K, logits, labels, eps, row_loss);                                                            \
    }                                                                                                                \
    extern "C" void dt_xent_bwd_##name##_cuda(int64_t N, int64_t K, const void *logits, const int32_t *labels,       \
                                              float eps, const float *gscale, float beta, void *dlogits) {           \
        xent_bwd<T>(N, K, logits, labels, eps, gscale, beta, dlogits);                                               \
    }                                                                                                                \
    extern "C" void dt_topk_##name##_cuda(int64_t N, int64_t K, const void *logits, const int32_t *labels,           \
                                          float *correct) {                                                          \
        topk<T>(N, K, logits, labels, correct);                                                                      \
    }

DT_LOSS_ENTRIES(f32, float)
DT_LOSS_ENTRIES(bf16, __nv_bfloat16)
