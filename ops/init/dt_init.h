/* dt_init.h: parameter initialization, reproducible from the global seed (dt_set_seed).
 * On the GPU the values come from the context's cuRAND generator (Philox), on the CPU from a
 * host stream derived from the same seed; the sequence depends only on the seed and on the
 * order in which parameters are initialized. */
#ifndef DT_INIT_H
#define DT_INIT_H

#include "core/dt_api.h"

#include "core/dt_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

void dt_init_reseed(void);  /* restart both generators from dt_seed() */
void dt_init_normal(dt_tensor *t, float mean, float std);
void dt_init_uniform(dt_tensor *t, float lo, float hi);
/* torchvision ResNet: kaiming_normal_(mode='fan_out', nonlinearity='relu'):
 * std = sqrt(2 / (Cout * kh * kw)) for w [Cout, Cin, kh, kw]. */
void dt_init_kaiming_normal_fanout(dt_tensor *w);
/* PyTorch nn.Linear defaults: w and b ~ U(-1/sqrt(in), 1/sqrt(in)) for w [out, in]. */
void dt_init_linear_default(dt_tensor *w, dt_tensor *b);

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
