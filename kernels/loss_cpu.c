#include <math.h>

#include "loss.h"

static int label_of(float l, int64_t K) {
    if (!(l >= 0.0f) || l >= (float)K || l != floorf(l)) return -1;
    return (int)l;
}

void dt_xent_fwd_cpu(int64_t N, int64_t K, const float *logits, const float *labels, float eps, float *row_loss) {
    for (int64_t i = 0; i < N; i++) {
        const float *x = logits + i * K;
        int lab = label_of(labels[i], K);
        if (lab < 0) { row_loss[i] = NAN; continue; }
        float m = x[0];
        for (int64_t j = 1; j < K; j++) m = fmaxf(m, x[j]);
        double se = 0, sx = 0;
        for (int64_t j = 0; j < K; j++) {
            se += exp((double)x[j] - m);
            sx += x[j];
        }
        double lse = m + log(se);
        row_loss[i] = (float)(lse - (1.0 - eps) * x[lab] - eps / K * sx);
    }
}

void dt_xent_bwd_cpu(int64_t N, int64_t K, const float *logits, const float *labels, float eps,
                     const float *gscale, float beta, float *dlogits) {
    float g = gscale[0] / (float)N;
    for (int64_t i = 0; i < N; i++) {
        const float *x = logits + i * K;
        float *d = dlogits + i * K;
        int lab = label_of(labels[i], K);
        float m = x[0];
        for (int64_t j = 1; j < K; j++) m = fmaxf(m, x[j]);
        double se = 0;
        for (int64_t j = 0; j < K; j++) se += exp((double)x[j] - m);
        for (int64_t j = 0; j < K; j++) {
            float p = (float)(exp((double)x[j] - m) / se);
            float t = eps / K + (j == lab ? 1.0f - eps : 0.0f);
            float v = lab < 0 ? 0.0f : g * (p - t);
            d[j] = beta == 0.0f ? v : d[j] + v;
        }
    }
}

void dt_topk_cpu(int64_t N, int64_t K, const float *logits, const float *labels, float *correct) {
    for (int64_t i = 0; i < N; i++) {
        const float *x = logits + i * K;
        int lab = label_of(labels[i], K);
        int64_t rank = 0;
        if (lab < 0) rank = K;
        else
            for (int64_t j = 0; j < K; j++) rank += x[j] > x[lab] || (x[j] == x[lab] && j < lab);
        correct[2 * i] = rank < 1;
        correct[2 * i + 1] = rank < 5;
    }
}
