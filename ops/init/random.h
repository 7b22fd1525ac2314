/* random.h: filling fp32 arrays with random values for parameter initialization.
 * The GPU versions draw from the device context's cuRAND generator (Philox) - `host` is
 * unused; the CPU versions from the host stream `host`. Both sequences depend only on the seed
 * and the order of the calls. normal: N(mean, std); uniform: U(lo, hi). */
#ifndef DT_K_RANDOM_H
#define DT_K_RANDOM_H

#include <stdint.h>

#include "core/dt_rng.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DT_DECL_RANDOM(sfx)                                                                      \
    void dt_rand_normal_##sfx(dt_rng *host, int64_t n, float mean, float std, float *x);         \
    void dt_rand_uniform_##sfx(dt_rng *host, int64_t n, float lo, float hi, float *x);

DT_DECL_RANDOM(cpu)
DT_DECL_RANDOM(cuda)
/* Restarts the device generator at `seed`, offset 0 (CUDA builds with a context only). */
void dt_rand_reseed_cuda(uint64_t seed);

#ifdef __cplusplus
}
#endif
#endif
