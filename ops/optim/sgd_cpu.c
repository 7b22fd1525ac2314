#include "ops/optim/sgd.h"

#include <stdlib.h>

#include "core/dt_alloc.h"
#include "core/dt_common.h"
#include "core/dt_parallel.h"

/* Threaded over the parameters laid end to end (tensor t's elements at offset[t]...): every
 * element is updated on its own, so the result does not depend on the split. */
typedef struct {
    const dt_sgd_tensor *ts;
    const int64_t *offset; /* count + 1 */
    int count;
    float rate, momentum, dampening;
    int nesterov;
} sgd_job;

static void sgd_range(void *ctx, int64_t b, int64_t e) {
    const sgd_job *j = ctx;
    int t = 0;
    while (j->offset[t + 1] <= b) t++;
    for (; t < j->count && j->offset[t] < e; t++) {
        const dt_sgd_tensor *s = &j->ts[t];
        int64_t i0 = b > j->offset[t] ? b - j->offset[t] : 0, i1 = e < j->offset[t + 1] ? e - j->offset[t] : s->n;
        for (int64_t i = i0; i < i1; i++) {
            float g = s->g[i] + s->wd * s->p[i], d = g;
            if (j->momentum != 0.0f) {
                float m = s->first ? g : j->momentum * s->m[i] + (1.0f - j->dampening) * g;
                s->m[i] = m;
                d = j->nesterov ? g + j->momentum * m : m;
            }
            s->p[i] -= j->rate * s->lr_mult * d;
        }
    }
}

void dt_sgd_step_cpu(const dt_sgd_tensor *ts, int count, const dt_sgd_chunk *chunks, int nchunks, const float *lr,
                     float momentum, float dampening, int nesterov) {
    (void)chunks;
    (void)nchunks;
    if (count <= 0) return;
    int64_t *offset = dt_dev_alloc(DT_CPU, sizeof(int64_t) * (size_t)(count + 1)); /* scratch: a raise frees it */
    offset[0] = 0;
    for (int t = 0; t < count; t++) offset[t + 1] = offset[t] + ts[t].n;
    sgd_job j = {.ts = ts, .offset = offset, .count = count, .rate = *lr, .momentum = momentum,
                 .dampening = dampening, .nesterov = nesterov};
    dt_parallel_for(offset[count], DT_SGD_CHUNK, sgd_range, &j);
    dt_dev_free(DT_CPU, offset);
}
