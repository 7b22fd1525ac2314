#include "core/dt_rng.h"

#include <math.h>

uint64_t dt_hash64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

void dt_rng_seed(dt_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) {
        x = dt_hash64(x);
        r->s[i] = x;
    }
    if (!(r->s[0] | r->s[1] | r->s[2] | r->s[3])) r->s[0] = 1;
}

void dt_rng_derive(dt_rng *r, uint64_t seed, uint64_t a, uint64_t b) {
    dt_rng_seed(r, dt_hash64(dt_hash64(seed) ^ dt_hash64(a + 0x632be59bd9b4e019ULL)) ^
                       dt_hash64(b + 0x8cb92ba72f3d8dd7ULL));
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t dt_rng_u64(dt_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float dt_rng_uniform(dt_rng *r) { return (float)(dt_rng_u64(r) >> 40) * (1.0f / 16777216.0f); }
double dt_rng_uniform_f64(dt_rng *r) { return (double)(dt_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0); }

float dt_rng_normal(dt_rng *r) {
    double u1 = dt_rng_uniform_f64(r), u2 = dt_rng_uniform_f64(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

uint32_t dt_rng_below(dt_rng *r, uint32_t n) {
    /* Lemire's multiply-shift with rejection: exact uniformity. */
    uint64_t m = (uint64_t)(uint32_t)dt_rng_u64(r) * n;
    uint32_t l = (uint32_t)m;
    if (l < n) {
        uint32_t t = (uint32_t)(-n) % n;
        while (l < t) {
            m = (uint64_t)(uint32_t)dt_rng_u64(r) * n;
            l = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

void dt_rng_fill_normal(dt_rng *r, float *x, int64_t n, float mean, float std) {
    for (int64_t i = 0; i < n; i++) x[i] = mean + std * dt_rng_normal(r);
}

void dt_rng_fill_uniform(dt_rng *r, float *x, int64_t n, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * dt_rng_uniform(r);
}
