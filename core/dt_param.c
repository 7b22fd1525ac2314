#include "core/dt_param.h"

#include <stdlib.h>
#include <string.h>

#include "ops/pointwise/convert.h"
#include "ops/pointwise/dt_shared_kernels.h" /* dt_cast_chunks_k */
#include "core/dt_alloc.h"
#include "core/dt_common.h"

static dt_param *record_of(dt_tensor *t) {
    if (t->param) return t->param;
    dt_param *r = dt_xcalloc(1, sizeof *r);
    r->t = t;
    r->lr_mult = 1.0f;
    t->param = r;
    t->requires_grad = 1;
    if (!t->grad) {
        t->grad = dt_tensor_new_unscoped(t->ndim, t->shape, t->dev, t->dtype, t->layout);
        dt_tensor_fill(t->grad, 0.0f);
    }
    t->grad_valid = 0;
    return r;
}

static void list_push(dt_params *ps, dt_param *r) {
    if (ps->n == ps->cap) {
        ps->cap = ps->cap ? ps->cap * 2 : 64;
        ps->items = dt_xrealloc(ps->items, ps->cap * sizeof *ps->items);
    }
    ps->items[ps->n++] = r;
}


dt_tensor *dt_param_new(dt_params *ps, const char *name, int ndim, const int64_t *shape, dt_dev dev, dt_layout layout,
                        int decay) {
    dt_tensor *p = dt_tensor_new_unscoped(ndim, shape, dev, DT_F32, layout);
    dt_tensor_fill(p, 0.0f);
    dt_tensor_set_name(p, name);
    dt_param *r = record_of(p);
    r->no_decay = !decay;
    if (ps) list_push(ps, r);
    return p;
}

dt_param *dt_param_of(const dt_tensor *t) {
    if (!t || !t->param) dt_fatal("%s%s is not a parameter", t && t->name[0] ? "tensor " : "a tensor", t ? t->name : "");
    return t->param;
}

dt_tensor *dt_param_make_work(dt_params *ps, dt_tensor *master) {
    dt_param *r = dt_param_of(master);
    if (r->work) return r->work;
    r->work = dt_tensor_new_unscoped(master->ndim, master->shape, master->dev, DT_BF16, master->layout);
    char n[80];
    snprintf(n, sizeof n, "%s (bf16)", master->name);
    dt_tensor_set_name(r->work, n);
    r->work->param = r;
    r->work->requires_grad = 1;
    if (ps) ps->work_valid = 0;
    return r->work;
}

dt_tensor *dt_param_work(const dt_tensor *master) {
    dt_param *r = dt_param_of(master);
    if (!r->work) dt_fatal("parameter %s has no bf16 working copy (dt_param_make_work makes one)", master->name);
    return r->work;
}

/* The chunk table of every (master, copy) pair, on the parameters' device: made when a copy
 * was added, reused by every refresh after. */
static void make_work_table(dt_params *ps, dt_dev dev) {
    int64_t nchunks = 0;
    for (int i = 0; i < ps->n; i++)
        if (ps->items[i]->work) nchunks += dt_ceil_div(ps->items[i]->t->numel, DT_CAST_CHUNK);
    const size_t bytes = (size_t)(nchunks ? nchunks : 1) * sizeof(dt_cast_chunk);
    dt_cast_chunk *ch = dt_xmalloc(bytes);
    int64_t k = 0;
    for (int i = 0; i < ps->n; i++) {
        dt_param *r = ps->items[i];
        if (!r->work) continue;
        for (int64_t b = 0; b < r->t->numel; b += DT_CAST_CHUNK)
            ch[k++] = (dt_cast_chunk){(const float *)r->t->data + b, (dt_bf16 *)r->work->data + b,
                                      r->t->numel - b < DT_CAST_CHUNK ? r->t->numel - b : DT_CAST_CHUNK};
    }
    if (ps->work_table) dt_dev_free(ps->work_dev, ps->work_table);
    ps->work_dev = dev;
    if (dev == DT_CPU) {
        ps->work_table = ch; /* the CPU twin reads it where it is */
    } else {
        ps->work_table = dt_dev_alloc(dev, bytes);
        dt_copy_h2d(ps->work_table, ch, bytes);
        free(ch);
    }
    ps->work_chunks = (int)nchunks;
    ps->work_valid = 1;
}

void dt_params_refresh_work(dt_params *ps) {
    int n = 0;
    for (int i = 0; i < ps->n; i++) n += ps->items[i]->work != NULL;
    if (!n) return;
    const dt_dev dev = ps->items[0]->t->dev;
    if (!ps->work_valid) make_work_table(ps, dev);
    DT_PICK(dt_cast_chunks_k, dev, DT_F32, DT_NCHW)(ps->work_table, ps->work_chunks);
}

void dt_params_zero_grad(dt_params *ps) {
    for (int i = 0; i < ps->n; i++) ps->items[i]->t->grad_valid = 0;
}

int64_t dt_params_numel(const dt_params *ps) {
    int64_t n = 0;
    for (int i = 0; i < ps->n; i++) n += ps->items[i]->t->numel;
    return n;
}

dt_param *dt_params_find(const dt_params *ps, const char *name) {
    for (int i = 0; i < ps->n; i++)
        if (!strcmp(ps->items[i]->t->name, name)) return ps->items[i];
    return NULL;
}

void dt_params_free(dt_params *ps) {
    for (int i = 0; i < ps->n; i++) dt_tensor_free(ps->items[i]->t); /* with its record and copy */
    free(ps->items);
    if (ps->work_table) dt_dev_free(ps->work_dev, ps->work_table);
    memset(ps, 0, sizeof *ps);
}
