/* dt_optim.h: the SGD optimizer over a parameter list (momentum, Nesterov, weight decay with
 * an option to exempt batch-norm and bias parameters), applied by one kernel launch per step
 * on the GPU. Parameters whose gradient was not produced this step (grad_valid == 0) are
 * skipped, as PyTorch skips parameters whose .grad is None. */
#ifndef DT_OPTIM_H
#define DT_OPTIM_H

#include "dt_api.h"

#include <stdint.h>

#include "dt_param.h"

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
    int64_t steps;      /* optimizer steps taken */
    /* device tables (GPU), rebuilt when the set of active parameters changes */
    void *dev_tensors, *dev_chunks;
    int nchunks, table_cap_t, table_cap_c;
    unsigned char *active_prev;
    int dev_valid;
} dt_sgd;

void dt_sgd_init(dt_sgd *s, dt_params *params, const dt_sgd_opts *opts);
void dt_sgd_step(dt_sgd *s, float lr);
void dt_sgd_free(dt_sgd *s);

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
