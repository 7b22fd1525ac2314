/* random.h on cuRAND. */
#include "core/dt_alloc.h"
#include "core/dt_kernel_util.cuh"
#include "ops/init/random.h"

namespace {
/* (0, 1] -> (lo, hi] */
__global__ void k_affine(int64_t n, float a, float b, float *x) { DT_GRID_STRIDE(i, n) x[i] = a * x[i] + b; }
}  // namespace

extern "C" {
void dt_rand_normal_cuda(dt_rng *host, int64_t n, float mean, float std, float *x) {
    (void)host;
    if (n <= 0) return;
    /* cuRAND makes normals in pairs: an odd count goes through a scratch of n+1. */
    if (n % 2 == 0) {
        DT_CURAND(curandGenerateNormal(dt_curand(), x, (size_t)n, mean, std));
        return;
    }
    float *tmp = (float *)dt_gpu_malloc((size_t)(n + 1) * sizeof(float));
    DT_CURAND(curandGenerateNormal(dt_curand(), tmp, (size_t)n + 1, mean, std));
    dt_copy_d2d(x, tmp, (size_t)n * sizeof(float));
    dt_gpu_free(tmp);
}

void dt_rand_uniform_cuda(dt_rng *host, int64_t n, float lo, float hi, float *x) {
    (void)host;
    if (n <= 0) return;
    DT_CURAND(curandGenerateUniform(dt_curand(), x, (size_t)n)); /* (0, 1] */
    k_affine<<<dt_grid_for(n, 256), 256, 0, dt_stream()>>>(n, hi - lo, lo, x);
    DT_CHECK_LAUNCH();
}

void dt_rand_reseed_cuda(uint64_t seed) {
    DT_CURAND(curandSetPseudoRandomGeneratorSeed(dt_curand(), seed));
    DT_CURAND(curandSetGeneratorOffset(dt_curand(), 0));
}
}
