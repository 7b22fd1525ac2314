/* loss.h: softmax cross-entropy over integer labels, and top-k correctness.
 * logits [N, K]; labels [N] as floats holding class indices.
 * fwd:  row_loss[i] = logsumexp(x_i) - (1-eps)*x_i[label] - (eps/K) * sum_j x_ij
 *       (the cross-entropy against (1-eps)*onehot + eps/K, computed stably from the max);
 *       a label that is not an integer in [0, K) gives NaN for its row (loud, never silent).
 * bwd:  dx_ij = beta*dx + (g/N) * (softmax_ij - target_ij), g = *gscale (a device/host scalar,
 *       the upstream gradient of the mean loss).
 * topk: correct[2*i] = 1 if label in top-1, correct[2*i+1] = 1 if in top-5 (rank counted with
 *       ties broken by the lower index). */
#ifndef DT_K_LOSS_H
#define DT_K_LOSS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DT_DECL_LOSS(sfx)                                                                          \
    void dt_xent_fwd_##sfx(int64_t N, int64_t K, const float *logits, const float *labels, float eps, \
                           float *row_loss);                                                       \
    void dt_xent_bwd_##sfx(int64_t N, int64_t K, const float *logits, const float *labels, float eps, \
                           const float *gscale, float beta, float *dlogits);                       \
    void dt_topk_##sfx(int64_t N, int64_t K, const float *logits, const float *labels, float *correct);

DT_DECL_LOSS(cpu)
DT_DECL_LOSS(cuda)

#ifdef __cplusplus
}
#endif
#endif
