/* dt_optim.h: the SGD optimizer over a parameter list (momentum, Nesterov, weight decay with
 * an option to exempt batch-norm and bias parameters), applied by one kernel launch per step
 * on the GPU. Parameters whose gradient was not produced this step (grad_valid == 0) are
 * skipped, as PyTorch skips parameters whose .grad is None. */
#ifndef DT_OPTIM_H
#define DT_OPTIM_H

#include "core/dt_api.h"

#include <stdint.h>

#include "core/dt_param.h"

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

typedef struct {
    float momentum, dampening, weight_decay;
    int nesterov;
    int decay_all; /* 0: parameters marked no_decay (BN, biases) get no weight decay */
} dt_sgd_opts;

typedef struct {
    dt_sgd_opts o;
    dt_params *params;
    dt_tensor **bufs;   /* momentum buffer per parameter (NULL until its first step) */
    int64_t steps;      /* optimizer steps begun (dt_sgd_begin_step) */
    dt_tensor *lr;      /* [1] f32 on the parameters' device: the learning rate the update reads */
    /* device tables (GPU), rebuilt when the set of active parameters changes */
    void *dev_tensors, *dev_chunks;
    int nchunks, table_cap_t, table_cap_c;
    unsigned char *active_prev;
    int dev_valid;
} dt_sgd;

void dt_sgd_init(dt_sgd *s, dt_params *params, const dt_sgd_opts *opts);
/* A step in two halves, so that the device half can be captured in a CUDA graph and replayed:
 * dt_sgd_begin_step writes lr into s->lr (a one-float fill, queued in stream order) and counts
 * the step; dt_sgd_apply queues the update, which reads the rate from s->lr. dt_sgd_step does
 * both. */
void dt_sgd_begin_step(dt_sgd *s, float lr);
void dt_sgd_apply(dt_sgd *s);
void dt_sgd_step(dt_sgd *s, float lr);
void dt_sgd_free(dt_sgd *s);

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
