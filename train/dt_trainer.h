/* dt_trainer.h: the training loop behind build/train, callable in-process (the tests do).
 * dt_train_run returns 0 on success (also for a resumed run that has nothing left to do: it
 * says so), 1 on a runtime failure (data, checkpoint, divergence, a replica's failure, outputs
 * locked by another run), 2 on a usage or configuration error, with err set; and 128 + the
 * signal number (130 for SIGINT, 143 for SIGTERM) when dt_train_interrupt stopped it and its
 * checkpoint was written (res->checkpoint, res->global_step say where and when). */
#ifndef DT_TRAINER_H
#define DT_TRAINER_H

#include "core/dt_api.h"

#include <stddef.h>
#include <stdint.h>

#include "core/dt_common.h"
#include "train/dt_config.h"

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
    int interrupted;          /* the signal that stopped the run, 0 when none */
    char checkpoint[1024];    /* the last checkpoint written, "" when none */
    int64_t graph_steps;      /* steps run as a replay of the captured CUDA graph (graphs=1) */
    int64_t graph_captures;   /* captures of the step that succeeded */
} dt_train_result;

int dt_train_run(const dt_train_cfg *cfg, dt_train_result *res, dt_err *err);

/* Asks the run in progress to stop: every replica finishes the step in flight (all after the
 * same step, in every process of the run), the checkpoint is written - to checkpoint=, or
 * PREFIX.ckpt of log=PREFIX, or train-PID.ckpt in the working folder - and dt_train_run
 * returns 128 + signo. An evaluation under way ends first; a request during the run's last
 * step lets it finish. Async-signal-safe: meant for a SIGINT / SIGTERM handler (build/train
 * installs one). The request ends with the run it stopped. */
void dt_train_interrupt(int signo);
void dt_train_result_free(dt_train_result *r);

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
