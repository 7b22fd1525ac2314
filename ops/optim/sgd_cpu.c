#include "ops/optim/sgd.h"

void dt_sgd_step_cpu(const dt_sgd_tensor *ts, int count, const dt_sgd_chunk *chunks, int nchunks, const float *lr,
                     float momentum, float dampening, int nesterov) {
    (void)chunks;
    (void)nchunks;
    const float rate = *lr;
    for (int t = 0; t < count; t++) {
        const dt_sgd_tensor *s = &ts[t];
        for (int64_t i = 0; i < s->n; i++) {
            float g = s->g[i] + s->wd * s->p[i], d = g;
            if (momentum != 0.0f) {
                float m = s->first ? g : momentum * s->m[i] + (1.0f - dampening) * g;
                s->m[i] = m;
                d = nesterov ? g + momentum * m : m;
            }
            s->p[i] -= rate * s->lr_mult * d;
        }
    }
}
