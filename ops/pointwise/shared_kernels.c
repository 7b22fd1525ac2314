/* The shared op tables (dt_shared_kernels.h). */
#include "ops/pointwise/dt_shared_kernels.h"

#define EVERY_DTYPE(t, fn)                                                                                   \
    DT_TWINS(t, fn, DT_F32, DT_ANY_LAYOUT), DT_TWINS(t, fn, DT_BF16, DT_ANY_LAYOUT), DT_TWINS(t, fn, DT_F16, DT_ANY_LAYOUT), \
        DT_TWINS(t, fn, DT_I32, DT_ANY_LAYOUT), DT_TWINS(t, fn, DT_U8, DT_ANY_LAYOUT)
#define F32_ONLY(t, fn, layout) DT_TWINS(t, fn, DT_F32, layout)

DT_OP_TABLE_SHARED(dt_convert_k, "convert", EVERY_DTYPE(dt_convert_k, dt_convert))
DT_OP_TABLE_SHARED(dt_nchw_to_nhwc_k, "relayout nchw -> nhwc", F32_ONLY(dt_nchw_to_nhwc_k, dt_nchw_to_nhwc, DT_ANY_LAYOUT))
DT_OP_TABLE_SHARED(dt_nhwc_to_nchw_k, "relayout nhwc -> nchw", F32_ONLY(dt_nhwc_to_nchw_k, dt_nhwc_to_nchw, DT_ANY_LAYOUT))
DT_OP_TABLE_SHARED(dt_bias_nchw_bwd_k, "bias gradient (nchw)", F32_ONLY(dt_bias_nchw_bwd_k, dt_bias_nchw_bwd, DT_NCHW))
DT_OP_TABLE_SHARED(dt_fill_k, "fill", F32_ONLY(dt_fill_k, dt_fill, DT_ANY_LAYOUT))
DT_OP_TABLE_SHARED(dt_cast_chunks_k, "cast to bf16 working copies",
                   F32_ONLY(dt_cast_chunks_k, dt_f32_to_bf16_chunks, DT_ANY_LAYOUT))
DT_OP_TABLE_SHARED(dt_bias_rows_fwd_k, "bias (rows)", DT_TWINS(dt_bias_rows_fwd_k, dt_bias_rows_fwd_f32, DT_F32, DT_ANY_LAYOUT),
                   DT_TWINS(dt_bias_rows_fwd_k, dt_bias_rows_fwd_bf16, DT_BF16, DT_ANY_LAYOUT))
DT_OP_TABLE_SHARED(dt_bias_rows_bwd_k, "bias gradient (rows)", DT_TWINS(dt_bias_rows_bwd_k, dt_bias_rows_bwd_f32, DT_F32, DT_ANY_LAYOUT),
                   DT_TWINS(dt_bias_rows_bwd_k, dt_bias_rows_bwd_bf16, DT_BF16, DT_ANY_LAYOUT))
