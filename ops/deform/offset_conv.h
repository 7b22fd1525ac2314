/* offset_conv.h: the offset convolution of the deft mode on channels-last input, as implicit
 * GEMMs - no im2col buffer. For a chunk (layouts in deform_plan.h; K = kh*kw taps, the plan's
 * stride/padding/dilation; OC = 2GK (+GK mask) outputs):
 *
 *   fwd          om [Q, OCS] = conv(xT, w) + b, the mask columns through the sigmoid, the
 *                padding columns 0:  a GEMM of Q positions x OC outputs over K*C
 *   bwd          the three gradients from one dom (one op, so that a kernel reading dom once
 *                can serve all three; each output may be NULL: not wanted):
 *                dw [OC, C, kh, kw] = beta_w*dw + sum_q dom[q] x patch(q)^T,
 *                db [OC] = beta_b*db + sum_q dom[q]:  OC x K*C over Q (split over Q, then a
 *                reduction of the parts in a fixed order: deterministic);
 *                dxT [nb, H, W, C] = beta*dxT + (add + the transposed conv of dom):  pixels x C
 *                over K*OC (each pixel gathers the taps that read it: no atomics). add [nb, H, W, C]
 *                fp32 (or NULL) is the rest of the input gradient, summed in fp32 before the
 *                one rounding into dxT: the deft layer's sampling gradient lands in the same
 *                final write (docs/deft.md, "The bf16 path").
 *
 * Types: xT and dxT are of the plan's dtype (f32, or bf16 - read as stored, widened to fp32);
 * w [OC, C, kh, kw], b [OC], om, dom, dw, db and add are fp32 in every plan. w and b stay in
 * their parameter layout; the CUDA versions repack w into the workspace (dt_offconv_ws_bytes)
 * for their loads. The thin output (18 or 27 columns) is why these are not cuBLAS calls: an
 * 18-row GEMM runs at ~14 of cuBLAS' 51 TFLOP/s and needs the im2col buffer (docs/deft.md). */
#ifndef DT_K_OFFSET_CONV_H
#define DT_K_OFFSET_CONV_H

#include <stddef.h>
#include <stdint.h>

#include "ops/deform/deform_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DT_DECL_OFFCONV(sfx)                                                                                       \
    size_t dt_offconv_ws_bytes_##sfx(const dt_deform_plan *p, int64_t nb);                                         \
    void dt_offconv_fwd_##sfx(const dt_deform_plan *p, int64_t nb, const void *xT, const float *w, const float *b,  \
                              float *om, void *ws);                                                                \
    void dt_offconv_bwd_##sfx(const dt_deform_plan *p, int64_t nb, const void *xT, const float *dom, const float *w, \
                              float beta_w, float *dw, float beta_b, float *db, const float *add, float beta,      \
                              void *dxT, void *ws);

DT_DECL_OFFCONV(cpu)
DT_DECL_OFFCONV(cuda)

/* Precision (the plan's dtype and math): bf16 plans and f32 plans with TF32 products run
 * tensor-core kernels on the GPU (offset_conv_tc.h, or for the forward and weight gradient of bf16
 * plans with C % 64 == 0 the Hopper engine, offset_conv_sm90.h: the same function) when C % 32 == 0: bf16 x as stored, the
 * fp32 operands (w, dom) rounded to bf16 - or, for TF32, every operand rounded to TF32 - sums
 * fp32. Other channel counts run the FFMA kernels: bf16 x widened, w and dom fp32, fp32 math.
 * The CPU twins round w and dom to bf16 under the same rule (tf32 is computed in fp32 on the
 * CPU). */
static inline int dt_offconv_rounds(const dt_deform_plan *p) { return p->prob.C % 32 == 0; }

/* The CUDA versions' FFMA kernels are shared-memory tiled GEMMs when C % 4 == 0 and lane-group
 * kernels otherwise; 0 forces the lane kernels wherever FFMA runs (the tests and the kernel lab
 * compare both). The tensor-core kernels are chosen by the plan alone, so that the CPU twin
 * knows which operands were rounded. */
void dt_offconv_use_tiles(int on);
/* The tensor-core kernels' forward and weight gradient by halo-staged output tiles (1, the
 * default) or by the flat list of positions (0: their fallback for K > 16 or footprints that
 * do not fit shared memory); the tests run both. CUDA builds only. */
void dt_offconv_use_halo(int on);
/* The forward and weight gradient of bf16 plans on the Hopper engine where it reads x (1, the
 * default; offset_conv_sm90.h) or on the tensor-core kernels (0); the tests and the benchmarks
 * run both. CUDA builds only. */
void dt_offconv_use_engine(int on);

#ifdef __cplusplus
}
#endif
#endif
