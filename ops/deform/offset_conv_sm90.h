/* offset_conv_sm90.h: the offset conv's forward and weight gradient on the Hopper engine
 * (ops/conv/conv_sm90.h: wgmma + TMA), and at stride 1 its input gradient, behind the _cuda entry
 * points of offset_conv.h for the bf16 plans the engine reads (dt_offconv_sm90_ok). CUDA only
 * (C++ linkage, as offset_conv_tc.h).
 *
 * The function is the tensor-core kernels' (offset_conv_tc.h), so the CPU twins need nothing new:
 * x bf16 as stored, w and dom rounded to bf16, products summed in fp32, om, dw and db fp32. Only
 * the order of the fp32 sums differs.
 *   fwd          om [Q, OCS] fp32 = the engine's implicit GEMM over TMA im2col tiles of xT with the
 *                weight repacked to wb [OC, kh, kw, C] bf16, the bias, the mask's sigmoid and the
 *                zero padding columns in its fp32 epilogue (dt_conv_sm90_fprop_f32)
 *   bwd          dom read once: rounded to domb [Q, OC8] bf16 (OC8 = OC rounded up to 8: TMA's 16-byte
 *                rows, zero columns past OC) in the pass that sums its columns over slabs of 1024
 *                positions for db (added in slab order: deterministic); then
 *                the weight gradient: the engine's wgrad into dwe [OC8, kh, kw, C] fp32, relaid
 *                out into the parameter's [OC, C, kh, kw] with beta;
 *                the input gradient (stride 1): dxT [nb, H, W, C] bf16 = round(beta dxT + add + conv^T(domb, w)): the engine's
 *                dgrad as a conv of domb with the weight mirrored and transposed to wf [C, kh, kw, OC8]
 *                bf16, domb's OC8 channels gathered by cp.async (TMA's im2col boxes are 64 channels),
 *                add (the sampling's fp32 part of the input gradient) summed in its epilogue before the
 *                one rounding - the function of the tensor-core kernel's. */
#ifndef DT_K_OFFSET_CONV_SM90_H
#define DT_K_OFFSET_CONV_SM90_H

#include <stddef.h>
#include <stdint.h>

#include "ops/deform/deform_plan.h"

/* Whether a chunk of nb images of plan p runs on the engine: a bf16 plan, a GPU and build with
 * the engine (dt_gpu_has_sm90a), dt_offconv_use_engine on, and x that TMA's im2col mode reads
 * (C % 64 == 0, the window's corners within its limits: dt_conv_sm90_read). */
int dt_offconv_sm90_ok(const dt_deform_plan *p, int64_t nb);
size_t dt_offconv_sm90_ws_bytes(const dt_deform_plan *p, int64_t nb);
void dt_offconv_sm90_fwd(const dt_deform_plan *p, int64_t nb, const void *xT, const float *w, const float *b, float *om,
                         void *ws);
/* The input gradient on the engine too: stride 1 (dgrad as a conv of dom; strided plans keep
 * the tensor-core kernel) */
int dt_offconv_sm90_dx_ok(const dt_deform_plan *p, int64_t nb);
/* offset_conv.h's bwd for a chunk that dt_offconv_sm90_ok takes: dom read once into domb and
 * the bias gradient's slab sums (k_dom_prep), then the wgrad, the sums, and - dxT not NULL,
 * which needs dt_offconv_sm90_dx_ok - the dgrad. */
void dt_offconv_sm90_bwd(const dt_deform_plan *p, int64_t nb, const void *xT, const float *dom, const float *w,
                         float beta_w, float *dw, float beta_b, float *db, const float *add, float beta, void *dxT,
                         void *ws);

#endif
