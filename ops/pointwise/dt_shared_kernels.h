/* dt_shared_kernels.h: the op tables of helper kernels that several ops launch (dt_kernel.h):
 * dtype / layout conversion, the f32 relayouts between NCHW and the channels-last GEMM layouts,
 * the NCHW bias gradient, the f32 fill and the working copies' cast. Each is defined once, in
 * shared_kernels.c. */
#ifndef DT_SHARED_KERNELS_H
#define DT_SHARED_KERNELS_H

#include "ops/pointwise/bias.h"
#include "ops/pointwise/convert.h"
#include "core/dt_kernel.h"
#include "ops/pointwise/elementwise.h"
#include "ops/pointwise/layout.h"

/* every dtype pair (the kernel reads both dtypes from its arguments): pick with x's dtype */
DT_OP_TABLE_DECL(dt_convert_k, __typeof__(dt_convert_cpu))
DT_OP_TABLE_DECL(dt_nchw_to_nhwc_k, __typeof__(dt_nchw_to_nhwc_cpu))
DT_OP_TABLE_DECL(dt_nhwc_to_nchw_k, __typeof__(dt_nhwc_to_nchw_cpu))
DT_OP_TABLE_DECL(dt_bias_nchw_bwd_k, __typeof__(dt_bias_nchw_bwd_cpu))
DT_OP_TABLE_DECL(dt_fill_k, __typeof__(dt_fill_cpu))
/* the parameters' bf16 working copies from their f32 masters, all in one call (core/dt_param.c) */
DT_OP_TABLE_DECL(dt_cast_chunks_k, __typeof__(dt_f32_to_bf16_chunks_cpu))
/* a bias over rows (linear layers, NHWC tensors) and its gradient: f32 and bf16 rows */
DT_OP_TABLE_DECL(dt_bias_rows_fwd_k, __typeof__(dt_bias_rows_fwd_f32_cpu))
DT_OP_TABLE_DECL(dt_bias_rows_bwd_k, __typeof__(dt_bias_rows_bwd_f32_cpu))

#endif
