/* model_tensors.h: the tensors a ResNet configuration makes - names and shapes - without
 * building it (the trainer's internal header). build/train --export checks a checkpoint's
 * tensor table against them, and the model's size against a budget, before it allocates the
 * model the checkpoint's stored config names. It walks the same stage table as
 * dt_resnet_init (layers/resnet.c); tests/test_weights.c checks that both agree, tensor for
 * tensor, on every model and deform setting. */
#ifndef DT_MODEL_TENSORS_H
#define DT_MODEL_TENSORS_H

#include <stdint.h>

#include "core/dt_common.h"
#include "models/dt_resnet.h"

/* Called for each parameter and buffer (batch norms' running_mean / running_var). */
typedef int (*train_tensor_fn)(const char *name, int ndim, const int64_t *shape, void *ctx);

/* Walks mc's tensors in dt_resnet_init's order, the parameters first, then the buffers;
 * stops at the first fn that returns non-zero (and returns that). *elements (may be NULL)
 * gets the sum of their element counts. -1 with err set when the width leaves a stage without
 * channels or the channels do not split into offset_groups (what dt_resnet_init dies of). */
int train_model_tensors(const dt_resnet_cfg *mc, train_tensor_fn fn, void *ctx, int64_t *elements, dt_err *err);

#endif
