/* dt_dtype.cuh: element loads and stores by dtype for templated kernels. Every kernel computes
 * in fp32: a load widens (bf16, f16, i32, u8 -> float), a store rounds once (to nearest even). */
#ifndef DT_DTYPE_CUH
#define DT_DTYPE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <type_traits>

#include "core/dt_dtype.h"

__device__ __forceinline__ float dt_ld(const float *p) { return *p; }
__device__ __forceinline__ float dt_ld(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ float dt_ld(const __half *p) { return __half2float(*p); }
__device__ __forceinline__ float dt_ld(const int32_t *p) { return (float)*p; }
__device__ __forceinline__ float dt_ld(const uint8_t *p) { return (float)*p; }

__device__ __forceinline__ void dt_st(float *p, float v) { *p = v; }
__device__ __forceinline__ void dt_st(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void dt_st(__half *p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void dt_st(int32_t *p, float v) { *p = (int32_t)v; }
/* u8 as dt_u8_from_float: saturated, nearest even, NaN -> 0. */
__device__ __forceinline__ void dt_st(uint8_t *p, float v) {
    *p = !(v > 0.0f) ? 0 : v >= 255.0f ? 255 : (uint8_t)__float2uint_rn(v);
}

/* The backward convention: overwrite when beta == 0 (the old value may be NaN), else add in
 * fp32 and round once. */
template <typename T>
__device__ __forceinline__ void dt_st_beta(T *p, float v, float beta) {
    dt_st(p, beta == 0.0f ? v : dt_ld(p) + v);
}

/* Calls f with a null pointer of the CUDA type of dtype d (float, __nv_bfloat16, __half,
 * int32_t, uint8_t): a generic lambda recovers the type from it and instantiates its kernels. */
template <typename F>
static inline void dt_dispatch_dtype(dt_dtype d, F f) {
    switch (d) {
    case DT_F32: f((float *)0); break;
    case DT_BF16: f((__nv_bfloat16 *)0); break;
    case DT_F16: f((__half *)0); break;
    case DT_I32: f((int32_t *)0); break;
    case DT_U8: f((uint8_t *)0); break;
    }
}

#endif
