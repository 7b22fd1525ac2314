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

#include <cuda_bf16.h>
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

/* Column rows (the GEMM's operands colT / dcolT) hold float or bf16 (the bf16 precision);
 * cload/cstore move vector v of a row as fp32 values: bf16 is widened on the load and rounded
 * to nearest even on the store (a float4 is 8 bytes of bf16; rows are 8-byte aligned when VEC
 * is 4, since the group's channel offset is then a multiple of 4). */
__device__ __forceinline__ void cload(const float *row, int v, float4 &out) { out = __ldg(reinterpret_cast<const float4 *>(row) + v); }
__device__ __forceinline__ void cload(const float *row, int v, float &out) { out = __ldg(row + v); }
__device__ __forceinline__ void cload(const __nv_bfloat16 *row, int v, float4 &out) {
    uint2 u = __ldg(reinterpret_cast<const uint2 *>(row) + v);
    float2 a = __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 *>(&u.x));
    float2 b = __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 *>(&u.y));
    out = make_float4(a.x, a.y, b.x, b.y);
}
__device__ __forceinline__ void cload(const __nv_bfloat16 *row, int v, float &out) { out = __bfloat162float(row[v]); }
__device__ __forceinline__ void cstore(float *row, int v, float4 val) { reinterpret_cast<float4 *>(row)[v] = val; }
__device__ __forceinline__ void cstore(float *row, int v, float val) { row[v] = val; }
__device__ __forceinline__ void cstore(__nv_bfloat16 *row, int v, float4 val) {
    __nv_bfloat162 a = __floats2bfloat162_rn(val.x, val.y), b = __floats2bfloat162_rn(val.z, val.w);
    uint2 u;
    u.x = *reinterpret_cast<uint32_t *>(&a);
    u.y = *reinterpret_cast<uint32_t *>(&b);
    reinterpret_cast<uint2 *>(row)[v] = u;
}
__device__ __forceinline__ void cstore(__nv_bfloat16 *row, int v, float val) { row[v] = __float2bfloat16_rn(val); }

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
