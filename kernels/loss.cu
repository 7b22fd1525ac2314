/* One warp per row: rows are short (classes), and warp shuffles do the reductions. */
#include "dt_kernel_util.cuh"
#include "loss.h"

namespace {

__device__ int label_of(float l, int64_t K) {
    if (!(l >= 0.0f) || l >= (float)K || l != floorf(l)) return -1;
    return (int)l;
}

__device__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__global__ void k_xent_fwd(int64_t N, int64_t K, const float *__restrict__ logits, const float *__restrict__ labels,
                           float eps, float *__restrict__ row_loss) {
    int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (i >= N) return;
    const float *x = logits + i * K;
    float m = -INFINITY;
    for (int64_t j = lane; j < K; j += 32) m = fmaxf(m, x[j]);
    m = warp_max(m);
    double se = 0, sx = 0;
    for (int64_t j = lane; j < K; j += 32) {
        se += exp((double)x[j] - m);
        sx += x[j];
    }
    se = warp_sum(se);
    sx = warp_sum(sx);
    if (lane == 0) {
        int lab = label_of(labels[i], K);
        row_loss[i] = lab < 0 ? NAN : (float)(m + log(se) - (1.0 - eps) * x[lab] - eps / K * sx);
    }
}

__global__ void k_xent_bwd(int64_t N, int64_t K, const float *__restrict__ logits, const float *__restrict__ labels,
                           float eps, const float *__restrict__ gscale, float beta, float *__restrict__ d) {
    int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (i >= N) return;
    const float *x = logits + i * K;
    float m = -INFINITY;
    for (int64_t j = lane; j < K; j += 32) m = fmaxf(m, x[j]);
    m = warp_max(m);
    double se = 0;
    for (int64_t j = lane; j < K; j += 32) se += exp((double)x[j] - m);
    se = warp_sum(se);
    int lab = label_of(labels[i], K);
    float g = gscale[0] / (float)N;
    for (int64_t j = lane; j < K; j += 32) {
        float p = (float)(exp((double)x[j] - m) / se);
        float t = eps / K + (j == lab ? 1.0f - eps : 0.0f);
        dt_store_beta(&d[i * K + j], lab < 0 ? 0.0f : g * (p - t), beta);
    }
}

__global__ void k_topk(int64_t N, int64_t K, const float *__restrict__ logits, const float *__restrict__ labels,
                       float *__restrict__ correct) {
    int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (i >= N) return;
    const float *x = logits + i * K;
    int lab = label_of(labels[i], K);
    double rank = 0;
    if (lab >= 0) {
        float xl = x[lab];
        for (int64_t j = lane; j < K; j += 32) rank += x[j] > xl || (x[j] == xl && j < lab);
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

}  // namespace

extern "C" {
void dt_xent_fwd_cuda(int64_t N, int64_t K, const float *logits, const float *labels, float eps, float *row_loss) {
    if (N <= 0) return;
    k_xent_fwd<<<rows_grid(N), 256, 0, dt_stream()>>>(N, K, logits, labels, eps, row_loss);
    DT_CHECK_LAUNCH();
}
void dt_xent_bwd_cuda(int64_t N, int64_t K, const float *logits, const float *labels, float eps, const float *gscale,
                      float beta, float *dlogits) {
    if (N <= 0) return;
    k_xent_bwd<<<rows_grid(N), 256, 0, dt_stream()>>>(N, K, logits, labels, eps, gscale, beta, dlogits);
    DT_CHECK_LAUNCH();
}
void dt_topk_cuda(int64_t N, int64_t K, const float *logits, const float *labels, float *correct) {
    if (N <= 0) return;
    k_topk<<<rows_grid(N), 256, 0, dt_stream()>>>(N, K, logits, labels, correct);
    DT_CHECK_LAUNCH();
}
}
