/* dt_lanes.cuh: the two device idioms of the channels-last kernels.
 *
 * Vectors: a "vector" is VEC consecutive channels, VEC = 4 (float4: one 16-byte load per
 * lane) when the group's channel count allows, else 1. vload/vstore/vfma/vdot work on both.
 * The gather of bf16 rows also takes VEC = 8 (dt_f8: 8 bf16 channels, one 16-byte load, held as
 * two float4): its zero, fma, dot and row moves only.
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

#include <type_traits>

#include "core/dt_dtype.h"

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
/* 8 channels in fp32: channels 0-3 in lo, 4-7 in hi */
struct dt_f8 {
    float4 lo, hi;
};
template <>
struct dt_vec<8> {
    typedef dt_f8 T;
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
__device__ __forceinline__ void vzero(dt_f8 &v) { vzero(v.lo), vzero(v.hi); }
__device__ __forceinline__ void vfma(dt_f8 &a, float w, const dt_f8 &b) { vfma(a.lo, w, b.lo), vfma(a.hi, w, b.hi); }
/* a += b */
__device__ __forceinline__ void vadd(float4 &a, float4 b) {
    a.x += b.x;
    a.y += b.y;
    a.z += b.z;
    a.w += b.w;
}
__device__ __forceinline__ void vadd(float &a, float b) { a += b; }
__device__ __forceinline__ float vdot(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }
__device__ __forceinline__ float vdot(float a, float b) { return a * b; }
__device__ __forceinline__ float vdot(const dt_f8 &a, const dt_f8 &b) { return vdot(a.lo, b.lo) + vdot(a.hi, b.hi); }
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

/* Rows of channels-last data - the input xT, the columns colT / dcolT, the input gradient -
 * hold float (the f32 plans) or bf16 (the bf16 plans); cload/cstore move vector v of a row as
 * fp32 values: bf16 is widened on the load and rounded to nearest even on the store (a float4
 * is 8 bytes of bf16; rows are 8-byte aligned when VEC is 4, since the group's channel offset
 * is then a multiple of 4). cload goes through the read-only cache: only for data the kernel
 * does not write; cload_rw is the plain load of an element the kernel is about to overwrite. */
__device__ __forceinline__ void cload(const float *row, int v, float4 &out) { out = __ldg(reinterpret_cast<const float4 *>(row) + v); }
__device__ __forceinline__ void cload(const float *row, int v, float &out) { out = __ldg(row + v); }
__device__ __forceinline__ float4 bf16x4_to_float4(uint2 u) {
    float2 a = __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 *>(&u.x));
    float2 b = __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 *>(&u.y));
    return make_float4(a.x, a.y, b.x, b.y);
}
__device__ __forceinline__ void cload(const __nv_bfloat16 *row, int v, float4 &out) {
    out = bf16x4_to_float4(__ldg(reinterpret_cast<const uint2 *>(row) + v));
}
__device__ __forceinline__ void cload(const __nv_bfloat16 *row, int v, float &out) { out = __bfloat162float(row[v]); }
/* vector v of 8 bf16: one 16-byte load */
__device__ __forceinline__ void cload(const __nv_bfloat16 *row, int v, dt_f8 &out) {
    const uint4 u = __ldg(reinterpret_cast<const uint4 *>(row) + v);
    out.lo = bf16x4_to_float4(make_uint2(u.x, u.y)), out.hi = bf16x4_to_float4(make_uint2(u.z, u.w));
}
__device__ __forceinline__ void cload_rw(const float *row, int v, float4 &out) { out = reinterpret_cast<const float4 *>(row)[v]; }
__device__ __forceinline__ void cload_rw(const float *row, int v, float &out) { out = row[v]; }
__device__ __forceinline__ void cload_rw(const __nv_bfloat16 *row, int v, float4 &out) {
    out = bf16x4_to_float4(reinterpret_cast<const uint2 *>(row)[v]);
}
__device__ __forceinline__ void cload_rw(const __nv_bfloat16 *row, int v, float &out) { out = __bfloat162float(row[v]); }
__device__ __forceinline__ void cload_rw(const float *row, int v, dt_f8 &out) {
    cload_rw(row, 2 * v, out.lo), cload_rw(row, 2 * v + 1, out.hi);
}
__device__ __forceinline__ void cload_rw(const __nv_bfloat16 *row, int v, dt_f8 &out) {
    const uint4 u = reinterpret_cast<const uint4 *>(row)[v];
    out.lo = bf16x4_to_float4(make_uint2(u.x, u.y)), out.hi = bf16x4_to_float4(make_uint2(u.z, u.w));
}
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
__device__ __forceinline__ void cstore(float *row, int v, const dt_f8 &val) { cstore(row, 2 * v, val.lo), cstore(row, 2 * v + 1, val.hi); }
__device__ __forceinline__ void cstore(__nv_bfloat16 *row, int v, const dt_f8 &val) {
    cstore(row, 2 * v, val.lo), cstore(row, 2 * v + 1, val.hi); /* two 8-byte stores: once a pixel */
}
/* The backward convention on a vector: row[v] = val (beta 0: the old value may be NaN) or
 * beta*row[v] + val, summed in fp32 and rounded once to the row's type. */
template <typename T, typename V>
__device__ __forceinline__ void cstore_beta(T *row, int v, V val, float beta) {
    if (beta != 0.0f) {
        V old;
        cload_rw(row, v, old);
        vfma(val, beta, old);
    }
    cstore(row, v, val);
}

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

/* Calls f with a null pointer of the element type of a deft plan's tensors - float for f32
 * plans, __nv_bfloat16 for bf16 ones (deform_plan.h: no other dtype gets a plan) - so that a
 * generic lambda recovers the type and instantiates its kernels for it:
 *   dt_dispatch_plan_dtype(p->dtype, [&](auto *tag) { typedef DT_TAG_TYPE(tag) T; k<T><<<...>>>(...); }); */
template <typename F>
static inline void dt_dispatch_plan_dtype(dt_dtype d, F f) {
    if (d == DT_BF16) f((__nv_bfloat16 *)0);
    else f((float *)0);
}
#define DT_TAG_TYPE(tag) typename std::remove_pointer<decltype(tag)>::type

/* Smallest power of two >= n, within [lo, 32]. */
static inline int dt_lanes_for(int64_t n, int lo) {
    int l = lo;
    while (l < 32 && l < n) l *= 2;
    return l;
}

#endif
