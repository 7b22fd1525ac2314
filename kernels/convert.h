/* convert.h: fp32 <-> bf16, the storage format of the bf16 precision's GEMM operands
 * (dt_device.h, DT_BF16).
 *
 * bf16 is the top half of an fp32: 1 sign, 8 exponent (fp32's range: no overflow when
 * converting any finite fp32 that rounds below 2^128), 7 stored mantissa bits - a relative
 * rounding error of at most 2^-8 (8 significant bits, round to nearest even). fp32 -> bf16 rounds to nearest even;
 * values within half a bf16 ulp of FLT_MAX round to infinity, as the IEEE rule says; NaN stays
 * NaN (quiet). bf16 -> fp32 is exact. Host code sees a bf16 as its 16 bits (dt_bf16). */
#ifndef DT_K_CONVERT_H
#define DT_K_CONVERT_H

#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t dt_bf16;

/* Unit roundoff of bf16: |bf16(x) - x| <= DT_BF16_EPS * |x| for normal x. */
#define DT_BF16_EPS (1.0f / 256.0f)

static inline dt_bf16 dt_bf16_from_float(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (dt_bf16)((u >> 16) | 0x40u); /* NaN: keep it quiet */
    u += 0x7fffu + ((u >> 16) & 1u);                                          /* round to nearest even */
    return (dt_bf16)(u >> 16);
}

static inline float dt_bf16_to_float(dt_bf16 h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#define DT_DECL_CONVERT(sfx)                                                        \
    void dt_f32_to_bf16_##sfx(int64_t n, const float *x, dt_bf16 *y);               \
    void dt_bf16_to_f32_##sfx(int64_t n, const dt_bf16 *x, float *y);

DT_DECL_CONVERT(cpu)
DT_DECL_CONVERT(cuda)

#ifdef __cplusplus
}
#endif
#endif
