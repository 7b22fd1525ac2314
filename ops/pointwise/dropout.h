/* dropout.h: inverted dropout (PyTorch's nn.Dropout in train mode) on n contiguous elements,
 * layout-agnostic like the other pointwise ops (elementwise.h), f32 and bf16.
 *
 * The mask is a pure function of (seed, counter, element index): a counter-based hash
 * (splitmix64 of the seed, the step counter and the index; dt_dropout_keep), so the CPU twin and
 * the CUDA kernel draw the same mask bit for bit and the backward recomputes it instead of
 * saving it. Element i is dropped when the hash's top 24 bits fall below p * 2^24 (a rate of p
 * within 2^-24), kept ones are scaled by 1 / (1 - p) as PyTorch does: y = keep ? x * scale : 0,
 * fp32 math, one rounding on the store.
 *
 * The counter lives on the device (CUDA-graph safety: a graph replay must draw a fresh mask, so
 * the counter may not be a host value baked into the launch): 8 bytes of device memory holding
 * one int64. dt_dropout_tick adds 1 to it and copies the new value to a per-call snapshot, which
 * the forward and its backward then read, so both use the same value even when other forwards
 * tick the counter in between. All three take identical arguments on the CPU and on the GPU. */
#ifndef DT_K_DROPOUT_H
#define DT_K_DROPOUT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __CUDACC__
#define DT_DROPOUT_HD __host__ __device__ __forceinline__
#else
#define DT_DROPOUT_HD static inline
#endif

/* splitmix64's finalizer (Steele, Lea, Flood 2014) */
DT_DROPOUT_HD uint64_t dt_dropout_mix(uint64_t z) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
/* The key of one (seed, counter): the stream the element indices are hashed in. */
DT_DROPOUT_HD uint64_t dt_dropout_key(uint64_t seed, int64_t counter) {
    return dt_dropout_mix(seed ^ dt_dropout_mix((uint64_t)counter));
}
/* 1 when element i is kept; thr = dt_dropout_threshold(p) */
DT_DROPOUT_HD int dt_dropout_keep(uint64_t key, int64_t i, uint32_t thr) {
    return (uint32_t)(dt_dropout_mix(key + (uint64_t)i) >> 40) >= thr;
}
/* p * 2^24 (exact in fp32: p < 1 and the factor a power of two), truncated */
DT_DROPOUT_HD uint32_t dt_dropout_threshold(float p) { return (uint32_t)(p * 16777216.0f); }
/* 1 / (1 - p), computed on the host by both the twin and the CUDA wrapper */
DT_DROPOUT_HD float dt_dropout_scale(float p) { return 1.0f / (1.0f - p); }

/* counter[0] += 1; snap[0] = counter[0] (one thread on the GPU) */
typedef void dt_dropout_tick_fn(int64_t *counter, int64_t *snap);
/* y = dropout(x): the mask of (seed, snap[0]); 0 <= p < 1 */
typedef void dt_dropout_fwd_fn(int64_t n, float p, uint64_t seed, const int64_t *snap, const void *x, void *y);
/* dx (beta) keep ? dy * scale : 0, the forward's mask (same p, seed, snap) */
typedef void dt_dropout_bwd_fn(int64_t n, float p, uint64_t seed, const int64_t *snap, const void *dy, float beta,
                               void *dx);

#define DT_DECL_DROPOUT(sfx)                 \
    dt_dropout_fwd_fn dt_dropout_fwd_f32_##sfx;  \
    dt_dropout_fwd_fn dt_dropout_fwd_bf16_##sfx; \
    dt_dropout_bwd_fn dt_dropout_bwd_f32_##sfx;  \
    dt_dropout_bwd_fn dt_dropout_bwd_bf16_##sfx; \
    dt_dropout_tick_fn dt_dropout_tick_##sfx;

DT_DECL_DROPOUT(cpu)
DT_DECL_DROPOUT(cuda)

#ifdef __cplusplus
}
#endif
#endif
