/* dt_param.h: parameters and the list a model keeps of them.
 * A parameter is a caller-owned tensor with requires_grad = 1 and a gradient buffer that
 * lives as long as it does; zero_grad only marks the gradients stale (the next backward
 * overwrites instead of adding), it never touches memory. */
#ifndef DT_PARAM_H
#define DT_PARAM_H

#include "dt_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    dt_tensor **items;
    int n, cap;
} dt_params;

/* Makes a parameter (zero-filled), appends it to `ps` (if not NULL) and returns it.
 * decay = 0 exempts it from weight decay when the optimizer is asked to. */
dt_tensor *dt_param_new(dt_params *ps, const char *name, int ndim, const int64_t *shape,
                        dt_dev dev, int decay);
void dt_params_add(dt_params *ps, dt_tensor *p);
void dt_params_zero_grad(dt_params *ps);
int64_t dt_params_numel(const dt_params *ps);
dt_tensor *dt_params_find(const dt_params *ps, const char *name);
void dt_params_free(dt_params *ps); /* frees the parameters too */

#ifdef __cplusplus
}
#endif
#endif
