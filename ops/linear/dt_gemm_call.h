/* dt_gemm_call.h: the products of the ops (conv, linear, deformable), dispatched by device and
 * operand dtype through one op table (gemm.h has the kernels' conventions):
 *   C = alpha op(A) op(B) + beta C, A and B of `dtype` (f32: strict or TF32 by math; bf16: fp32
 *   sums), C of c_dtype (f32, or bf16 for bf16 operands). */
#ifndef DT_GEMM_CALL_H
#define DT_GEMM_CALL_H

#include <stdint.h>

#include "core/dt_device.h"
#include "core/dt_dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

void dt_gemm_call(dt_dev dev, dt_dtype dtype, dt_math math, int ta, int tb, int64_t M, int64_t N, int64_t K,
                  float alpha, const void *A, int64_t lda, const void *B, int64_t ldb, float beta, void *C,
                  dt_dtype c_dtype, int64_t ldc);

#ifdef __cplusplus
}
#endif
#endif
