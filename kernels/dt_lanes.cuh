/* dt_lanes.cuh: the two device idioms of the channels-last kernels.
 *
 * Vectors: a "vector" is VEC consecutive channels, VEC = 4 (float4: one 16-byte load per
 * lane) when the group's channel count allows, else 1. vload/vstore/vfma/vdot work on both.
 *
 * Lane groups: L consecutive lanes of a warp (L a power of two, 1..32) share one row (a sample,
 * a pixel, a position) and split its channel vectors; group_sum<L> adds a value over the
 * group with a fixed butterfly (same order every run: deterministic). Groups of one warp may
 * diverge (their rows have different lengths), so every shuffle names only its own group's
 * lanes. Included by .cu files only. */
#ifndef DT_LANES_CUH
#define DT_LANES_CUH

#include <stdint.h>

template <int VEC>
struct dt_vec;
template <>
struct dt_vec<4> {
    typedef float4 T;
};
template <>
struct dt_vec<1> {
    typedef float T;
};

__device__ __forceinline__ float4 vload(const float4 *p) { return __ldg(p); }
__device__ __forceinline__ float vload(const float *p) { return __ldg(p); }
__device__ __forceinline__ void vzero(float4 &v) { v = make_float4(0.f, 0.f, 0.f, 0.f); }
__device__ __forceinline__ void vzero(float &v) { v = 0.f; }
/* a += w * b */
__device__ __forceinline__ void vfma(float4 &a, float w, float4 b) {
    a.x = fmaf(w, b.x, a.x);
    a.y = fmaf(w, b.y, a.y);
    a.z = fmaf(w, b.z, a.z);
    a.w = fmaf(w, b.w, a.w);
}
__device__ __forceinline__ void vfma(float &a, float w, float b) { a = fmaf(w, b, a); }
__device__ __forceinline__ float vdot(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }
__device__ __forceinline__ float vdot(float a, float b) { return a * b; }
__device__ __forceinline__ float4 vscale(float s, float4 v) { return make_float4(s * v.x, s * v.y, s * v.z, s * v.w); }
__device__ __forceinline__ float vscale(float s, float v) { return s * v; }
__device__ __forceinline__ float vget(float4 v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }
__device__ __forceinline__ float vget(float v, int) { return v; }
__device__ __forceinline__ void vatomic_add(float4 *p, float4 v) {
#if __CUDA_ARCH__ >= 900
    atomicAdd(p, v); /* one 16-byte atomic (sm_90) */
#else
    atomicAdd(&p->x, v.x);
    atomicAdd(&p->y, v.y);
    atomicAdd(&p->z, v.z);
    atomicAdd(&p->w, v.w);
#endif
}
__device__ __forceinline__ void vatomic_add(float *p, float v) { atomicAdd(p, v); }

/* The lanes of this thread's group of L lanes, as a shuffle mask. */
template <int L>
__device__ __forceinline__ unsigned group_mask() {
    if (L == 32) return 0xffffffffu;
    unsigned lane = threadIdx.x & 31u;
    return ((1u << (L & 31)) - 1u) << (lane & ~(unsigned)(L - 1));
}

template <int L>
__device__ __forceinline__ float group_sum(float v, unsigned mask) {
#pragma unroll
    for (int o = L / 2; o > 0; o >>= 1) v += __shfl_xor_sync(mask, v, o, L);
    return v;
}

/* Smallest power of two >= n, within [lo, 32]. */
static inline int dt_lanes_for(int64_t n, int lo) {
    int l = lo;
    while (l < 32 && l < n) l *= 2;
    return l;
}

#endif
