/* The offset conv on the Hopper engine (offset_conv_sm90.h). The engine's kernels live in
 * ops/conv/conv_sm90.cu (compiled for sm_90a); this file only packs the operands, calls its
 * passes and finishes the results, so it builds for any target. */
#include <cuda_bf16.h>

#include "core/dt_device.h"
#include "core/dt_kernel_util.cuh"
#include "ops/conv/conv_sm90.h"
#include "ops/deform/deform_chunk.h"
#include "ops/deform/offset_conv.cuh" /* k_sum_parts */
#include "ops/deform/offset_conv.h"
#include "ops/deform/offset_conv_sm90.h"
#include "ops/pointwise/layout.h"

namespace {

typedef __nv_bfloat16 bf16;

const int COLSUM_ROWS = 1024; /* positions a slab of the bias gradient's column sums */

int64_t round8(int64_t v) { return (v + 7) / 8 * 8; }
size_t align256(size_t b) { return (b + 255) / 256 * 256; }

/* The offset conv of a chunk of nb images as the engine's conv problem (cout outputs). */
dt_conv_problem problem(const dt_deform_plan *p, int64_t nb, int64_t cout) {
    dt_conv_problem cp = {nb, p->prob.C, p->prob.H, p->prob.W, cout, p->prob.Ho, p->prob.Wo, p->prob.g, 1};
    return cp;
}

/* wb [OC, K, C] bf16 = w [OC, C, K] fp32 rounded: the parameter's layout to the engine's K-major
 * B rows (taps outside, channels inside, as its im2col A) */
__global__ void k_pack_w(int64_t OC, int64_t C, int64_t K, const float *__restrict__ w, bf16 *__restrict__ wb) {
    DT_GRID_STRIDE(i, OC * K * C) {
        const int64_t c = i % C, k = i / C % K, o = i / (C * K);
        wb[i] = __float2bfloat16_rn(w[(o * C + c) * K + k]);
    }
}

/* wf [C, K, OC8] bf16 = w [OC, C, K] fp32 rounded, the taps mirrored (tap t reads w's tap K-1-t) and
 * the channel axes swapped, zero for o >= OC: the weight of dgrad as a conv of dom */
__global__ void k_pack_w_flipped(int64_t OC, int64_t C, int64_t K, int64_t OC8, const float *__restrict__ w,
                                 bf16 *__restrict__ wf) {
    DT_GRID_STRIDE(i, C * K * OC8) {
        const int64_t o = i % OC8, t = i / OC8 % K, c = i / (OC8 * K);
        wf[i] = __float2bfloat16_rn(o < OC ? w[(o * C + c) * K + (K - 1 - t)] : 0.0f);
    }
}

/* One read of dom [Q, OCS] fp32 for the whole backward: domb [Q, OC8] bf16 = dom rounded
 * (columns OC .. OC8-1 zero: the engine's operand for the weight and the input gradient), and,
 * when part is not NULL, part [blockIdx.x][OC] = the column sums of dom over the block's slab of
 * COLSUM_ROWS positions (the bias gradient's parts, in k_db_parts' order: dom_slab_sums). */
__global__ void k_dom_prep(int64_t Q, int OC, int OCS, int OC8, const float *__restrict__ dom, bf16 *__restrict__ domb,
                           float *__restrict__ part) {
    const int64_t q0 = (int64_t)blockIdx.x * COLSUM_ROWS, q1 = min(Q, q0 + COLSUM_ROWS);
    dom_slab_sums(dom, OCS, OC, OC8, q0, q1, domb, OC8, part ? part + (int64_t)blockIdx.x * OC : nullptr);
}

int g_use_engine = 1;

} // namespace

extern "C" void dt_offconv_use_engine(int on) { g_use_engine = on; }

int dt_offconv_sm90_ok(const dt_deform_plan *p, int64_t nb) {
    if (!g_use_engine || p->dtype != DT_BF16 || !dt_gpu_has_sm90a()) return 0;
    const dt_conv_problem cp = problem(p, nb, round8(p->OC));
    return dt_conv_sm90_read(&cp, DT_CONV_FPROP) == DT_SM90_IM2COL &&
           dt_conv_sm90_read(&cp, DT_CONV_WGRAD) == DT_SM90_IM2COL;
}

int dt_offconv_sm90_dx_ok(const dt_deform_plan *p, int64_t nb) {
    return p->prob.g.sh == 1 && p->prob.g.sw == 1 && dt_offconv_sm90_ok(p, nb);
}

/* fwd: wb; bwd: domb, then dwe (or wf, which replaces it after its last use) and the column sums' slabs */
size_t dt_offconv_sm90_ws_bytes(const dt_deform_plan *p, int64_t nb) {
    const int64_t Q = nb * p->P, OC8 = round8(p->OC), slabs = (Q + COLSUM_ROWS - 1) / COLSUM_ROWS;
    const size_t fwd = align256(sizeof(bf16) * (size_t)(p->OC * p->KC)), domb = align256(sizeof(bf16) * (size_t)(Q * OC8));
    const size_t bwd = domb + align256(sizeof(float) * (size_t)(OC8 * p->KC)) + align256(sizeof(float) * (size_t)(slabs * p->OC));
    return fwd > bwd ? fwd : bwd;
}

void dt_offconv_sm90_fwd(const dt_deform_plan *p, int64_t nb, const void *xT, const float *w, const float *b, float *om,
                         void *ws) {
    const int64_t nw = p->OC * p->KC;
    bf16 *wb = (bf16 *)ws; /* [OC, K, C] */
    k_pack_w<<<dt_grid_for(nw, 256), 256, 0, dt_stream()>>>(p->OC, p->prob.C, p->K, w, wb);
    DT_CHECK_LAUNCH();
    const dt_conv_problem cp = problem(p, nb, p->OC);
    dt_conv_sm90_fprop_f32(&cp, xT, wb, b, om, p->OCS, p->has_mask ? 2 * p->GK : p->OC);
}

void dt_offconv_sm90_bwd(const dt_deform_plan *p, int64_t nb, const void *xT, const float *dom, const float *w,
                         float beta_w, float *dw, float beta_b, float *db, const float *add, float beta, void *dxT,
                         void *ws) {
    const int64_t Q = nb * p->P, OC8 = round8(p->OC);
    if (Q <= 0 || (!dw && !db && !dxT)) return;
    const size_t domb_bytes = align256(sizeof(bf16) * (size_t)(Q * OC8));
    bf16 *domb = (bf16 *)ws;                                         /* [Q, OC8] */
    float *dwe = (float *)((char *)ws + domb_bytes);                 /* [OC8, K, C] */
    bf16 *wf = (bf16 *)dwe;                                          /* [C, K, OC8], after dwe's last use */
    float *part = (float *)((char *)dwe + align256(sizeof(float) * (size_t)(OC8 * p->KC))); /* [slabs][OC] */
    const int slabs = (int)((Q + COLSUM_ROWS - 1) / COLSUM_ROWS);
    k_dom_prep<<<slabs, 256, 0, dt_stream()>>>(Q, (int)p->OC, (int)p->OCS, (int)OC8, dom, domb, db ? part : NULL);
    DT_CHECK_LAUNCH();
    const dt_conv_problem cp = problem(p, nb, OC8);
    if (dw) {
        dt_conv_sm90_wgrad(&cp, xT, domb, 0.0f, dwe);
        /* rows o < OC of dwe, [OC, K, C] -> the parameter's [OC, C, K], with beta */
        dt_nhwc_to_nchw_cuda(p->OC, p->prob.C, p->K, dwe, p->prob.C, NULL, beta_w, dw);
    }
    if (db) {
        k_sum_parts<<<1, 256, 0, dt_stream()>>>(p->OC, slabs, part, beta_b, db);
        DT_CHECK_LAUNCH();
    }
    if (dxT) {
        k_pack_w_flipped<<<dt_grid_for(p->prob.C * p->K * OC8, 256), 256, 0, dt_stream()>>>(p->OC, p->prob.C, p->K, OC8, w, wf);
        DT_CHECK_LAUNCH();
        dt_conv_sm90_dgrad_narrow(&cp, domb, wf, add, beta, dxT);
    }
}
