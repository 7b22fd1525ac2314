/* The CUDA deformable main GEMM (deform_igemm.h): conv_igemm.cuh's kernel with the A_DEFORM
 * loader, the tile chosen as the plain conv's plan chooses it (64x64 for 64 output channels,
 * else 128x128). */
#include "conv_igemm.cuh"
#include "deform_igemm.h"

using namespace dt_igemm;

extern "C" void dt_deform_igemm_fprop_cuda(const dt_deform_plan *p, int64_t nb, const void *xT, const float *om,
                                           const void *w, const float *bias, void *y) {
    if (nb * p->P == 0) return;
    gemm_view v = {};
    v.a = (const bf16 *)xT, v.b = (const bf16 *)w, v.y = y, v.bias = bias, v.beta = 0.0f;
    v.N = (int)nb, v.AH = (int)p->H, v.AW = (int)p->W, v.AC = (int)p->C, v.OH = (int)p->Ho, v.OW = (int)p->Wo;
    v.NO = (int)p->Cout, v.KH = p->g.kh, v.KW = p->g.kw, v.SH = p->g.sh, v.SW = p->g.sw, v.PH = p->g.ph, v.PW = p->g.pw;
    v.DH = p->g.dh, v.DW = p->g.dw, v.M = (int)(nb * p->P), v.K = (int)p->KC;
    v.d.om = om, v.d.ocs = (int)p->OCS, v.d.cg = (int)p->Cg, v.d.gk = (int)p->GK, v.d.has_mask = p->has_mask;
    if (p->Cout <= 64) launch_igemm<64, 64, 32, 32, 4, A_DEFORM>(v);
    else launch_igemm<128, 128, 64, 32, 4, A_DEFORM>(v);
}
