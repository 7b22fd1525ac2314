#include <math.h>
#include <string.h>

#include "train/dt_schedule.h"

static float after_warmup(const dt_schedule *s, int64_t step) {
    switch (s->kind) {
    case DT_SCHED_STEP: {
        int64_t k = s->step_size > 0 ? step / s->step_size : 0;
        return s->base_lr * powf(s->gamma, (float)k);
    }
    case DT_SCHED_COSINE: {
        int64_t span = s->total_steps - s->warmup_steps;
        if (span <= 0) return s->base_lr; /* all warmup: nothing left to anneal */
        double t = (double)(step - s->warmup_steps) / span;
        if (t < 0) t = 0;
        if (t > 1) t = 1;
        return (float)(s->min_lr + (s->base_lr - s->min_lr) * 0.5 * (1.0 + cos(M_PI * t)));
    }
    default: return s->base_lr;
    }
}

float dt_schedule_lr(const dt_schedule *s, int64_t step) {
    if (step < s->warmup_steps) {
        float end = after_warmup(s, s->warmup_steps);
        float f = (float)step / (float)s->warmup_steps;
        return end * (s->warmup_start + (1.0f - s->warmup_start) * f);
    }
    return after_warmup(s, step);
}

int dt_schedule_kind(const char *name) {
    if (!strcmp(name, "const")) return DT_SCHED_CONST;
    if (!strcmp(name, "step")) return DT_SCHED_STEP;
    if (!strcmp(name, "cosine")) return DT_SCHED_COSINE;
    return -1;
}
