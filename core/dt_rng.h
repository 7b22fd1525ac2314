/* dt_rng.h: host random numbers. xoshiro256** seeded through splitmix64; streams are derived
 * from (seed, a, b) by hashing, so a sample's augmentation can depend on (seed, epoch, index)
 * alone and never on which thread drew it or in which order. */
#ifndef DT_RNG_H
#define DT_RNG_H

#include "core/dt_api.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

typedef struct {
    uint64_t s[4];
} dt_rng;

uint64_t dt_hash64(uint64_t x);                    /* splitmix64 finalizer */
void dt_rng_seed(dt_rng *r, uint64_t seed);
void dt_rng_derive(dt_rng *r, uint64_t seed, uint64_t a, uint64_t b); /* stream (seed, a, b) */
uint64_t dt_rng_u64(dt_rng *r);
float dt_rng_uniform(dt_rng *r);                   /* [0, 1) with 24 random bits */
double dt_rng_uniform_f64(dt_rng *r);              /* [0, 1) with 53 random bits */
float dt_rng_normal(dt_rng *r);                    /* N(0, 1), Box-Muller */
uint32_t dt_rng_below(dt_rng *r, uint32_t n);      /* uniform integer in [0, n) */
void dt_rng_fill_normal(dt_rng *r, float *x, int64_t n, float mean, float std);
void dt_rng_fill_uniform(dt_rng *r, float *x, int64_t n, float lo, float hi);

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
