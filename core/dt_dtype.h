/* dt_dtype.h: what a tensor's elements are and how an image tensor is laid out in memory, and
 * the precision policy a model is built with.
 *
 * Element types (dt_dtype):
 *   DT_F32   IEEE binary32 - the reference, master weights, optimizer state, statistics, loss
 *   DT_BF16  bfloat16: the top half of a binary32 (8 exponent bits, 7 stored mantissa bits) -
 *            activations and GEMM operands of the bf16 policy; arithmetic on it is always
 *            "widen to fp32, compute in fp32, round once to nearest even"
 *   DT_F16   IEEE binary16, storage only (the C API and the PyTorch drop-in accept it as an
 *            element type; no op computes on it yet)
 *   DT_I32   32-bit signed integers: labels, indices
 *   DT_U8    8-bit unsigned integers, storage only: the loader's image batches ([N, S, S, 3]
 *            pixels), which dt_normalize_images turns into a model's input
 *
 * Layouts (dt_layout) of a 4-D tensor whose logical shape is always [N, C, H, W], as in
 * PyTorch:
 *   DT_NCHW  row-major in the logical order (PyTorch's contiguous): element (n, c, h, w) at
 *            ((n*C + c)*H + h)*W + w. Every tensor that is not 4-D is row-major and says
 *            DT_NCHW.
 *   DT_NHWC  channels last (PyTorch's channels_last): (n, c, h, w) at ((n*H + h)*W + w)*C + c.
 *            A 4-D weight [Cout, Cin, kh, kw] in DT_NHWC is stored [Cout, kh, kw, Cin]: the
 *            order an implicit-GEMM conv over channels-last input reads.
 *
 * Precision policy (dt_precision), chosen when a model is built and carried by its layers -
 * never a process-wide setting:
 *   DT_PREC_FP32  fp32 activations, NCHW by default, strict fp32 products (the reference)
 *   DT_PREC_TF32  fp32 activations, fp32 products on TF32 tensor cores (operands rounded to 10
 *            mantissa bits inside cuBLAS, fp32 sums)
 *   DT_PREC_BF16  bf16 channels-last activations, bf16 GEMM operands with fp32 accumulation; fp32
 *            master weights (each cast to a bf16 working copy once per step), optimizer state,
 *            batch-norm statistics and affine parameters, and loss
 * dt_math is the part of the policy an op with products needs when its operands are fp32:
 * bf16 operands always multiply in bf16 with fp32 sums. */
#ifndef DT_DTYPE_H
#define DT_DTYPE_H

#include "core/dt_api.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

typedef enum { DT_F32 = 0, DT_BF16 = 1, DT_F16 = 2, DT_I32 = 3, DT_U8 = 4 } dt_dtype;
#define DT_NUM_DTYPES 5

typedef enum { DT_NCHW = 0, DT_NHWC = 1 } dt_layout;
#define DT_NUM_LAYOUTS 2

typedef enum { DT_MATH_FP32 = 0, DT_MATH_TF32 = 1 } dt_math;

typedef enum { DT_PREC_FP32 = 0, DT_PREC_TF32 = 1, DT_PREC_BF16 = 2 } dt_precision;

size_t dt_dtype_size(dt_dtype t);         /* bytes per element */
const char *dt_dtype_name(dt_dtype t);    /* "f32", "bf16", "f16", "i32", "u8" */
const char *dt_layout_name(dt_layout l);  /* "nchw", "nhwc" */
int dt_dtype_is_int(dt_dtype t);          /* 1 for i32 and u8: no gradient, no arithmetic */
/* 0 and *out set when s names one, -1 otherwise. */
int dt_dtype_parse(const char *s, dt_dtype *out);
int dt_layout_parse(const char *s, dt_layout *out);

const char *dt_precision_name(dt_precision p); /* "fp32", "tf32", "bf16" */
int dt_precision_parse(const char *s, dt_precision *p);
/* What a policy means for the tensors a model makes. */
dt_dtype dt_precision_act_dtype(dt_precision p);  /* DT_BF16 for bf16, DT_F32 otherwise */
dt_math dt_precision_math(dt_precision p);        /* DT_MATH_TF32 for tf32, DT_MATH_FP32 otherwise */
dt_layout dt_precision_layout(dt_precision p);    /* the default layout: NHWC for bf16, NCHW otherwise */

/* bf16 on the host: its 16 bits. */
typedef uint16_t dt_bf16;

/* Unit roundoff of bf16: |bf16(x) - x| <= DT_BF16_EPS * |x| for normal x. */
#define DT_BF16_EPS (1.0f / 256.0f)

/* fp32 -> bf16, round to nearest even; values within half a bf16 ulp of FLT_MAX round to
 * infinity (the IEEE rule); NaN stays NaN (quiet). */
static inline dt_bf16 dt_bf16_from_float(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (dt_bf16)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (dt_bf16)(u >> 16);
}

/* bf16 -> fp32: exact. */
static inline float dt_bf16_to_float(dt_bf16 h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The value an fp32 takes after a round trip through bf16 (what the CPU twins compute with). */
static inline float dt_bf16_round(float f) { return dt_bf16_to_float(dt_bf16_from_float(f)); }

/* IEEE binary16 on the host (DT_F16 storage): its 16 bits. fp32 -> f16 rounds to nearest even,
 * overflows to infinity, keeps NaN quiet, and makes subnormals below 2^-14. */
static inline uint16_t dt_f16_from_float(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);           /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);          /* rounds past 65504: inf */
    if (a < 0x38800000u) {                                           /* subnormal or zero in f16 */
        if (a < 0x33000000u) return (uint16_t)sign;                   /* below half the least subnormal */
        /* value = m * 2^(e - 150) and the f16 subnormal unit is 2^-24: q = m >> (126 - e) */
        uint32_t m = (a & 0x7fffffu) | 0x800000u, shift = 126u - (a >> 23);
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = a - 0x38000000u;                                     /* rebias 127 -> 15 */
    r += 0xfffu + ((r >> 13) & 1u);                                   /* round to nearest even */
    return (uint16_t)(sign | (r >> 13));
}

static inline float dt_f16_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (e == 31) u = sign | 0x7f800000u | (m << 13);
    else if (e) u = sign | ((e + 112u) << 23) | (m << 13);
    else if (!m) u = sign;
    else { /* subnormal: normalize */
        e = 113;
        while (!(m & 0x400u)) { m <<= 1; e--; }
        u = sign | (e << 23) | ((m & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* fp32 -> u8: saturated to [0, 255], rounded to nearest, ties to even (rintf in the default
 * rounding mode; the CUDA store uses __float2uint_rn); NaN -> 0. */
static inline uint8_t dt_u8_from_float(float f) {
    if (!(f > 0.0f)) return 0;
    if (f >= 255.0f) return 255;
    return (uint8_t)rintf(f);
}

DT_PUBLIC_END
/* Element loads and stores by dtype on the host - what the CPU twins (and the tensor's host
 * copies) use where the CUDA kernels use dt_ld / dt_st (core/dt_dtype.cuh). A load widens to
 * fp32 (exact for f32, bf16, f16, u8; i32 exact below 2^24), a store rounds once (nearest even;
 * i32 truncates; u8 saturates to [0, 255], NaN -> 0), so a twin computing in fp32 between the
 * two gets the GPU's bits whenever the arithmetic is the same. */
static inline float dt_elem_ld(const void *p, dt_dtype t, int64_t i) {
    switch (t) {
    case DT_BF16: return dt_bf16_to_float(((const dt_bf16 *)p)[i]);
    case DT_F16: return dt_f16_to_float(((const uint16_t *)p)[i]);
    case DT_I32: return (float)((const int32_t *)p)[i];
    case DT_U8: return (float)((const uint8_t *)p)[i];
    default: return ((const float *)p)[i];
    }
}

static inline void dt_elem_st(void *p, dt_dtype t, int64_t i, float v) {
    switch (t) {
    case DT_BF16: ((dt_bf16 *)p)[i] = dt_bf16_from_float(v); break;
    case DT_F16: ((uint16_t *)p)[i] = dt_f16_from_float(v); break;
    case DT_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case DT_U8: ((uint8_t *)p)[i] = dt_u8_from_float(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

/* The backward convention: p[i] = v when beta == 0 (the old value is not read), else p[i] + v
 * in fp32, rounded once. */
static inline void dt_elem_st_beta(void *p, dt_dtype t, int64_t i, float v, float beta) {
    dt_elem_st(p, t, i, beta == 0.0f ? v : dt_elem_ld(p, t, i) + v);
}

#ifdef __cplusplus
}
#endif
#endif
