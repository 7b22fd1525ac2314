/* dt_pack.cuh: vector loads and stores of the memory-bound kernels (elementwise ops, batch
 * norm, pooling).
 *
 * A kernel templated on V moves V consecutive elements at a time as fp32 values: V == 1 is one
 * element (any address), V == dt_pack_len<T>() is one 16-byte pack - 4 float or 8 bf16 - moved
 * with a single 128-bit load or store, which needs a 16-byte aligned address. Loads widen to
 * fp32 (exact); stores round once to nearest even (dt_dtype.cuh). The host picks V per launch:
 * the pack when the row length and every pointer allow it (dt_pack_ok), else 1.
 * Included by .cu files only. */
#ifndef DT_PACK_CUH
#define DT_PACK_CUH

#include <cuda_bf16.h>
#include <stdint.h>

#include <initializer_list>
#include <type_traits>
#include <utility>

#include "core/dt_dtype.cuh"

/* Elements of T in a 16-byte pack. */
template <typename T>
constexpr int dt_pack_len() {
    return 16 / (int)sizeof(T);
}

/* 1 when every non-NULL pointer is 16-byte aligned and rows of `row` elements of T keep them
 * so (row a multiple of the pack). */
template <typename T>
static inline int dt_pack_ok(int64_t row, std::initializer_list<const void *> ptrs) {
    if (row % dt_pack_len<T>() != 0) return 0;
    for (const void *p : ptrs)
        if ((uintptr_t)p & 15u) return 0;
    return 1;
}

/* Calls f(std::integral_constant<int, V>()) with V the pack length when `packed`, else 1: the
 * launcher's one switch between the two instantiations of a kernel. */
template <typename T, typename F>
static inline void dt_with_pack(int packed, F f) {
    if (packed) f(std::integral_constant<int, dt_pack_len<T>()>());
    else f(std::integral_constant<int, 1>());
}

/* v[0 .. V) = p[0 .. V) */
template <int V>
__device__ __forceinline__ void dt_ldv(const float *p, float *v) {
    if constexpr (V == 1) {
        v[0] = *p;
    } else {
        static_assert(V == 4, "a float pack is 4 elements");
        float4 a = *reinterpret_cast<const float4 *>(p);
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    }
}
template <int V>
__device__ __forceinline__ void dt_ldv(const __nv_bfloat16 *p, float *v) {
    if constexpr (V == 1) {
        v[0] = __bfloat162float(*p);
    } else {
        static_assert(V == 8, "a bf16 pack is 8 elements");
        uint4 u = *reinterpret_cast<const uint4 *>(p);
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            __nv_bfloat162 h = *reinterpret_cast<const __nv_bfloat162 *>(&w[i]);
            float2 f = __bfloat1622float2(h);
            v[2 * i] = f.x, v[2 * i + 1] = f.y;
        }
    }
}

/* The raw bits of V elements of T (one 16-byte pack, or one element): what a kernel that issues
 * several loads before it computes keeps in flight - 4 registers a bf16 pack where its fp32
 * values take 8. dt_ldp loads, dt_unpack widens (exactly as dt_ldv). */
template <typename T, int V>
struct dt_raw {
    typename std::conditional<V == 1, T, uint4>::type bits;
};
template <int V, typename T>
__device__ __forceinline__ dt_raw<T, V> dt_ldp(const T *p) {
    dt_raw<T, V> r;
    if constexpr (V == 1) r.bits = *p;
    else {
        static_assert(V * sizeof(T) == 16, "a raw pack is one 16-byte pack");
        r.bits = *reinterpret_cast<const uint4 *>(p);
    }
    return r;
}
template <int V, typename T>
__device__ __forceinline__ void dt_unpack(const dt_raw<T, V> &r, float *v) {
    if constexpr (V == 1) dt_ldv<1>(&r.bits, v);
    else dt_ldv<V>(reinterpret_cast<const T *>(&r.bits), v);
}

/* p[0 .. V) = v[0 .. V), rounded to T */
template <int V>
__device__ __forceinline__ void dt_stv(float *p, const float *v) {
    if constexpr (V == 1) {
        *p = v[0];
    } else {
        static_assert(V == 4, "a float pack is 4 elements");
        *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
    }
}
template <int V>
__device__ __forceinline__ void dt_stv(__nv_bfloat16 *p, const float *v) {
    if constexpr (V == 1) {
        *p = __float2bfloat16_rn(v[0]);
    } else {
        static_assert(V == 8, "a bf16 pack is 8 elements");
        uint32_t w[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
            w[i] = *reinterpret_cast<uint32_t *>(&h);
        }
        *reinterpret_cast<uint4 *>(p) = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

/* The backward convention (dt_st_beta) on V elements: p = v when beta == 0 (the old values may
 * be NaN and are not read), else p + v in fp32, rounded once. */
template <int V, typename T>
__device__ __forceinline__ void dt_stv_beta(T *p, float *v, float beta) {
    if (beta != 0.0f) {
        float old[V];
        dt_ldv<V>(p, old);
#pragma unroll
        for (int i = 0; i < V; i++) v[i] = old[i] + v[i];
    }
    dt_stv<V>(p, v);
}

/* V bytes (the max pool's argmax taps next to V elements of a pack): V == 1, or 4 or 8 from an
 * address aligned to V - one 32- or 64-bit access (the element pack's offset / E, so aligned
 * whenever the pack is). */
template <int V>
__device__ __forceinline__ void dt_ldv_u8(const uint8_t *p, int *v) {
    static_assert(V == 1 || V == 4 || V == 8, "byte packs are 1, 4 or 8 bytes");
    if constexpr (V == 1) {
        v[0] = *p;
    } else {
        uint32_t w[V / 4];
        if constexpr (V == 4) w[0] = *reinterpret_cast<const uint32_t *>(p);
        else {
            const uint2 a = *reinterpret_cast<const uint2 *>(p);
            w[0] = a.x, w[1] = a.y;
        }
#pragma unroll
        for (int i = 0; i < V; i++) v[i] = (int)((w[i / 4] >> (8 * (i % 4))) & 0xFFu);
    }
}
template <int V>
__device__ __forceinline__ void dt_stv_u8(uint8_t *p, const int *v) {
    static_assert(V == 1 || V == 4 || V == 8, "byte packs are 1, 4 or 8 bytes");
    if constexpr (V == 1) {
        *p = (uint8_t)v[0];
    } else {
        uint32_t w[V / 4] = {};
#pragma unroll
        for (int i = 0; i < V; i++) w[i / 4] |= ((uint32_t)v[i] & 0xFFu) << (8 * (i % 4));
        if constexpr (V == 4) *reinterpret_cast<uint32_t *>(p) = w[0];
        else *reinterpret_cast<uint2 *>(p) = make_uint2(w[0], w[1]);
    }
}

#endif
