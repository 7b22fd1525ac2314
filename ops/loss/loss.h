/* loss.h: softmax cross-entropy over integer labels, and top-k correctness.
 * logits [N, K] row-major, f32 or bf16 (the entry's dtype; widened exactly, all math in fp32
 * and double); labels [N] int32 class indices.
 * fwd:  row_loss[i] (fp32) = logsumexp(x_i) - (1-eps)*x_i[label] - (eps/K) * sum_j x_ij
 *       (the cross-entropy against (1-eps)*onehot + eps/K, computed stably from the max);
 *       a label outside [0, K) gives NaN for its row (loud, never silent).
 * bwd:  dx_ij (beta) (g/N) * (softmax_ij - target_ij) in the logits' dtype (one rounding),
 *       g = *gscale (one fp32 on the kernel's device: the upstream gradient of the mean loss);
 *       0 for a row with an invalid label.
 * topk: correct[2*i] = 1 if label in top-1, correct[2*i+1] = 1 if in top-5 (rank counted with
 *       ties broken by the lower index); fp32 flags. */
#ifndef DT_K_LOSS_H
#define DT_K_LOSS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void dt_xent_fwd_fn(int64_t N, int64_t K, const void *logits, const int32_t *labels, float eps,
                            float *row_loss);
typedef void dt_xent_bwd_fn(int64_t N, int64_t K, const void *logits, const int32_t *labels, float eps,
                            const float *gscale, float beta, void *dlogits);
typedef void dt_topk_fn(int64_t N, int64_t K, const void *logits, const int32_t *labels, float *correct);

#define DT_DECL_LOSS(sfx)              \
    dt_xent_fwd_fn dt_xent_fwd_##sfx;  \
    dt_xent_bwd_fn dt_xent_bwd_##sfx;  \
    dt_topk_fn dt_topk_##sfx;

DT_DECL_LOSS(f32_cpu)
DT_DECL_LOSS(bf16_cpu)
DT_DECL_LOSS(f32_cuda)
DT_DECL_LOSS(bf16_cuda)

#ifdef __cplusplus
}
#endif
#endif
