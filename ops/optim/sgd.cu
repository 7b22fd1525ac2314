#include "core/dt_kernel_util.cuh"
#include "ops/optim/sgd.h"

namespace {

__global__ void k_sgd(const dt_sgd_tensor *__restrict__ ts, const dt_sgd_chunk *__restrict__ chunks,
                      const float *__restrict__ lr_ptr, float momentum, float dampening, int nesterov) {
    const float lr = *lr_ptr;
    dt_sgd_chunk c = chunks[blockIdx.x];
    dt_sgd_tensor s = ts[c.tensor];
    for (int64_t i = c.begin + threadIdx.x; i < c.end; i += blockDim.x) {
        float p = s.p[i], g = s.g[i] + s.wd * p, d = g;
        if (momentum != 0.0f) {
            float m = s.first ? g : momentum * s.m[i] + (1.0f - dampening) * g;
            s.m[i] = m;
            d = nesterov ? g + momentum * m : m;
        }
        s.p[i] = p - lr * s.lr_mult * d;
    }
}

}  // namespace

extern "C" void dt_sgd_step_cuda(const dt_sgd_tensor *ts, int count, const dt_sgd_chunk *chunks, int nchunks, const float *lr,
                                 float momentum, float dampening, int nesterov) {
    (void)count; /* the chunks name their tensors */
    if (nchunks <= 0) return;
    k_sgd<<<nchunks, 256, 0, dt_stream()>>>(ts, chunks, lr, momentum, dampening, nesterov);
    DT_CHECK_LAUNCH();
}
