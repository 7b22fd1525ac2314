#include "dt_param.h"

#include <stdlib.h>
#include <string.h>

#include "dt_common.h"

void dt_params_add(dt_params *ps, dt_tensor *p) {
    if (ps->n == ps->cap) {
        ps->cap = ps->cap ? ps->cap * 2 : 64;
        ps->items = dt_xrealloc(ps->items, ps->cap * sizeof *ps->items);
    }
    ps->items[ps->n++] = p;
}

dt_tensor *dt_param_new(dt_params *ps, const char *name, int ndim, const int64_t *shape,
                        dt_dev dev, int decay) {
    dt_tensor *p = dt_tensor_new_unscoped(ndim, shape, dev);
    dt_tensor_fill(p, 0.0f);
    dt_tensor_set_name(p, name);
    p->requires_grad = 1;
    p->is_param = 1;
    p->no_decay = !decay;
    p->lr_mult = 1.0f;
    p->grad = dt_tensor_new_unscoped(ndim, shape, dev);
    dt_tensor_fill(p->grad, 0.0f);
    p->grad_valid = 0;
    if (ps) dt_params_add(ps, p);
    return p;
}

void dt_params_zero_grad(dt_params *ps) {
    for (int i = 0; i < ps->n; i++) ps->items[i]->grad_valid = 0;
}

int64_t dt_params_numel(const dt_params *ps) {
    int64_t n = 0;
    for (int i = 0; i < ps->n; i++) n += ps->items[i]->numel;
    return n;
}

dt_tensor *dt_params_find(const dt_params *ps, const char *name) {
    for (int i = 0; i < ps->n; i++)
        if (!strcmp(ps->items[i]->name, name)) return ps->items[i];
    return NULL;
}

void dt_params_free(dt_params *ps) {
    for (int i = 0; i < ps->n; i++) dt_tensor_free(ps->items[i]);
    free(ps->items);
    ps->items = NULL;
    ps->n = ps->cap = 0;
}
