#include "ops/init/random.h"

void dt_rand_normal_cpu(dt_rng *host, int64_t n, float mean, float std, float *x) {
    dt_rng_fill_normal(host, x, n, mean, std);
}

void dt_rand_uniform_cpu(dt_rng *host, int64_t n, float lo, float hi, float *x) {
    dt_rng_fill_uniform(host, x, n, lo, hi);
}
