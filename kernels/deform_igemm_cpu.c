/* The CPU twin of the deformable main GEMM (deform_igemm.h): what the fused kernel computes is
 * deft's sampling followed by its GEMM, so on the CPU it is those two - colT [Q, K*C] by the
 * sampling twin (each sample rounded to bf16 once), then y = colT . w^T in fp32 with the bias
 * added before the one rounding. */
#include "deform_igemm.h"

#include <stdlib.h>

#include "convert.h"
#include "deform_nhwc.h"
#include "dt_common.h"
#include "gemm.h"

int dt_deform_igemm_supported(const dt_deform_plan *p) {
    const int64_t lim = (int64_t)1 << 31;
    return p->mode == DT_DEFORM_DEFT && p->dtype == DT_BF16 && p->layout == DT_NHWC && p->C % 8 == 0 &&
           p->Cg % 8 == 0 && p->Cout % 8 == 0 && p->N * p->P < lim && p->N * p->H * p->W < lim && p->KC < lim;
}

void dt_deform_igemm_fprop_cpu(const dt_deform_plan *p, int64_t nb, const void *xT, const float *om, const void *w,
                               const float *bias, void *y) {
    const int64_t Q = nb * p->P, n = Q * p->Cout;
    void *colT = dt_xmalloc((size_t)(Q * p->KC > 0 ? Q * p->KC : 1) * sizeof(dt_bf16)); /* [Q, K*C] bf16 */
    float *acc = dt_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(float));                  /* [Q, Cout] */
    dt_deform_sample_nhwc_cpu(p, nb, xT, om, colT);
    dt_gemm_bf16_cpu(DT_MATH_FP32, 0, 1, Q, p->Cout, p->KC, 1.0f, colT, p->KC, w, p->KC, 0.0f, acc, DT_F32, p->Cout);
    if (bias)
        for (int64_t i = 0; i < n; i++) acc[i] += bias[i % p->Cout];
    dt_f32_to_bf16_cpu(n, acc, (dt_bf16 *)y);
    free(colT);
    free(acc);
}
