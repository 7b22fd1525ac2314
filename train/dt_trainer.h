/* dt_trainer.h: the training loop behind build/train, callable in-process (the tests do).
 * dt_train_run returns 0 on success, 1 on a runtime failure (data, checkpoint, divergence, a
 * replica's failure), 2 on a usage or configuration error, with err set. */
#ifndef DT_TRAINER_H
#define DT_TRAINER_H

#include "dt_api.h"

#include <stddef.h>
#include <stdint.h>

#include "dt_common.h"
#include "dt_config.h"

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

typedef struct {
    int64_t steps;            /* optimizer steps done in this run */
    int64_t global_step;      /* including resumed ones */
    double first_loss, last_loss;
    float *losses;            /* per step of this run (malloc'd) */
    double val_top1, val_top5; /* fractions; -1 when not evaluated */
    double median_step_ms, p90_step_ms, median_fwd_ms, median_bwd_ms, median_opt_ms, img_per_s, data_wait_ms;
    size_t peak_mem;          /* bytes (GPU allocator peak in use) */
} dt_train_result;

int dt_train_run(const dt_train_cfg *cfg, dt_train_result *res, dt_err *err);
void dt_train_result_free(dt_train_result *r);

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
