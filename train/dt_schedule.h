/* dt_schedule.h: learning-rate schedules, as a pure function of the step.
 *   const:   base
 *   step:    base * gamma^floor(step / step_size)                 (step counted from 0)
 *   cosine:  min + (base - min) * (1 + cos(pi * t)) / 2,  t = (step - warmup) / (total - warmup)
 * and, for any of them, a linear warmup over the first `warmup` steps from base*warmup_start
 * up to the schedule's value at the end of the warmup. */
#ifndef DT_SCHEDULE_H
#define DT_SCHEDULE_H

#include "core/dt_api.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

typedef enum { DT_SCHED_CONST = 0, DT_SCHED_STEP, DT_SCHED_COSINE } dt_sched_kind;

typedef struct {
    dt_sched_kind kind;
    float base_lr, min_lr, gamma, warmup_start;
    int64_t total_steps, step_size, warmup_steps;
} dt_schedule;

float dt_schedule_lr(const dt_schedule *s, int64_t step);
/* "const" | "step" | "cosine" -> kind; -1 when unknown. */
int dt_schedule_kind(const char *name);

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
