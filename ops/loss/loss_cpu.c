/* CPU twins of loss.h: the same formulas row by row, the sums in double in index order. */
#include <math.h>

#include "core/dt_dtype.h"
#include "ops/loss/loss.h"

static int label_of(int32_t l, int64_t K) { return l >= 0 && l < K ? (int)l : -1; }

static float row_max(dt_dtype t, const void *x, int64_t o, int64_t K) {
    float m = dt_elem_ld(x, t, o);
    for (int64_t j = 1; j < K; j++) m = fmaxf(m, dt_elem_ld(x, t, o + j));
    return m;
}

static void xent_fwd(dt_dtype t, int64_t N, int64_t K, const void *x, const int32_t *labels, float eps,
                     float *row_loss) {
    for (int64_t i = 0; i < N; i++) {
        int lab = label_of(labels[i], K);
        if (lab < 0) { row_loss[i] = NAN; continue; }
        float m = row_max(t, x, i * K, K);
        double se = 0, sx = 0;
        for (int64_t j = 0; j < K; j++) {
            float v = dt_elem_ld(x, t, i * K + j);
            se += exp((double)v - m);
            sx += v;
        }
        double lse = m + log(se);
        row_loss[i] = (float)(lse - (1.0 - eps) * dt_elem_ld(x, t, i * K + lab) - eps / K * sx);
    }
}

static void xent_bwd(dt_dtype t, int64_t N, int64_t K, const void *x, const int32_t *labels, float eps,
                     const float *gscale, float beta, void *d) {
    float g = gscale[0] / (float)N;
    for (int64_t i = 0; i < N; i++) {
        int lab = label_of(labels[i], K);
        float m = row_max(t, x, i * K, K);
        double se = 0;
        for (int64_t j = 0; j < K; j++) se += exp((double)dt_elem_ld(x, t, i * K + j) - m);
        for (int64_t j = 0; j < K; j++) {
            float p = (float)(exp((double)dt_elem_ld(x, t, i * K + j) - m) / se);
            float tg = eps / K + (j == lab ? 1.0f - eps : 0.0f);
            dt_elem_st_beta(d, t, i * K + j, lab < 0 ? 0.0f : g * (p - tg), beta);
        }
    }
}

static void topk(dt_dtype t, int64_t N, int64_t K, const void *x, const int32_t *labels, float *correct) {
    for (int64_t i = 0; i < N; i++) {
        int lab = label_of(labels[i], K);
        int64_t rank = 0;
        if (lab < 0) {
            rank = K;
        } else {
            float xl = dt_elem_ld(x, t, i * K + lab);
            for (int64_t j = 0; j < K; j++) {
                float v = dt_elem_ld(x, t, i * K + j);
                rank += v > xl || (v == xl && j < lab);
            }
        }
        correct[2 * i] = rank < 1;
        correct[2 * i + 1] = rank < 5;
    }
}

#define DT_LOSS_TWINS(name, dtype)                                                                                 \
    void dt_xent_fwd_##name##_cpu(int64_t N, int64_t K, const void *logits, const int32_t *labels, float eps,      \
                                  float *row_loss) {                                                               \
        xent_fwd(dtype, N, K, logits, labels, eps, row_loss);                                                      \
    }                                                                                                              \
    void dt_xent_bwd_##name##_cpu(int64_t N, int64_t K, const void *logits, const int32_t *labels, float eps,      \
                                  const float *gscale, float beta, void *dlogits) {                                \
        xent_bwd(dtype, N, K, logits, labels, eps, gscale, beta, dlogits);                                         \
    }                                                                                                              \
    void dt_topk_##name##_cpu(int64_t N, int64_t K, const void *logits, const int32_t *labels, float *correct) {   \
        topk(dtype, N, K, logits, labels, correct);                                                                \
    }

DT_LOSS_TWINS(f32, DT_F32)
DT_LOSS_TWINS(bf16, DT_BF16)
