/* deform_sampler_sm90.h: the deformable forward's sampling as the Hopper engine's A producer, a
 * variant that lost to k_sample + the GEMM on every ResNet-18 shape (docs/deft.md, "The sampling
 * inside the Hopper engine: a lab record") and lives in the deformable lab: built for sm_90a
 * (deform_sampler_sm90.cu) into build/deform_lab only, run by its `--what sampler` group
 * (bench/lab/deform_lab.cu). Both entries need dt_gpu_has_sm90a(). */
#ifndef DT_LAB_DEFORM_SAMPLER_SM90_H
#define DT_LAB_DEFORM_SAMPLER_SM90_H

#include <stdint.h>

#include "ops/deform/deform_chunk.h"

/* The deformable layer's forward for a chunk c of a bf16 plan (ops/deform/deform_chunk.h, layouts
 * in ops/deform/deform_plan.h) in one launch: y [Q, Cout] bf16 = colT . w^T + bias, rounded once,
 * the columns colT [Q, K*C] (the bilinear samples of x [nb, H, W, C] bf16 at the offsets and mask
 * of om [Q, OCS] fp32) made by the engine's producer warpgroup in shared memory with k_sample's
 * arithmetic, never written to memory. w [Cout, kh, kw, C] bf16, bias [Cout] fp32 or NULL. Fatal
 * unless C and the offset group's Cg are multiples of 64 (a k-slice is 64 channels of one tap and
 * one group), Cout % 8 == 0 (TMA's 16-byte rows of w and y), K*C and Cout below 2^31, and x, w
 * and y 16-byte aligned. */
void dt_conv_sm90_fprop_deform(const dt_deform_chunk *c, int64_t Cout, const void *x, const float *om, const void *w,
                               const float *bias, void *y);
/* The same GEMM over materialized columns colT [Q, K*C] bf16 (k_sample's), by TMA, on the tile
 * dt_conv_sm90_fprop_deform runs: the same bits when colT is k_sample's (its reference). */
void dt_conv_sm90_fprop_deform_cols(const dt_deform_chunk *c, int64_t Cout, const void *colT, const void *w,
                                    const float *bias, void *y);

#endif
