#include <stdlib.h>
#include <string.h>

#include "core/dt_alloc.h"
#include "core/dt_common.h"
#include "core/dt_kernel.h"
#include "train/dt_optim.h"
#include "ops/optim/sgd.h"

typedef void sgd_fn(const dt_sgd_tensor *ts, int count, const dt_sgd_chunk *chunks, int nchunks, const float *lr,
                    float momentum, float dampening, int nesterov);
DT_OP_TABLE(sgd_k, "sgd", sgd_fn, DT_KERNEL(sgd_k, DT_CPU, DT_F32, DT_ANY_LAYOUT, dt_sgd_step_cpu),
            DT_KERNEL_CUDA(sgd_k, DT_GPU, DT_F32, DT_ANY_LAYOUT, dt_sgd_step_cuda))

void dt_sgd_init(dt_sgd *s, dt_params *params, const dt_sgd_opts *opts) {
    memset(s, 0, sizeof *s);
    s->o = *opts;
    s->params = params;
    s->bufs = dt_xcalloc(params->n ? params->n : 1, sizeof *s->bufs);
    s->active_prev = dt_xcalloc(params->n ? params->n : 1, 1);
    int64_t one[1] = {1};
    s->lr = dt_tensor_new_unscoped(1, one, params->n ? params->items[0]->t->dev : DT_CPU, DT_F32, DT_NCHW);
    dt_tensor_fill(s->lr, 0.0f);
}

void dt_sgd_free(dt_sgd *s) {
    for (int i = 0; i < s->params->n; i++) dt_tensor_free(s->bufs[i]);
    free(s->bufs);
    free(s->active_prev);
    if (s->dev_tensors) dt_gpu_free(s->dev_tensors);
    if (s->dev_chunks) dt_gpu_free(s->dev_chunks);
    dt_tensor_free(s->lr);
    memset(s, 0, sizeof *s);
}

static float wd_of(const dt_sgd *s, const dt_param *r) {
    return (r->no_decay && !s->o.decay_all) ? 0.0f : s->o.weight_decay;
}

void dt_sgd_begin_step(dt_sgd *s, float lr) {
    dt_tensor_fill(s->lr, lr);
    s->steps++;
}

/* A step that raises is not counted: the caller may retry it. */
void dt_sgd_step(dt_sgd *s, float lr) {
    dt_sgd_begin_step(s, lr);
    dt_guard g;
    DT_GUARD(g) {
        dt_guard_unwind(&g);
        s->steps--;
        dt_rethrow();
    }
    dt_sgd_apply(s);
    dt_guard_leave(&g);
}

static void sgd_apply(dt_sgd *s, dt_sgd_tensor *tab, dt_sgd_chunk *volatile *chp);

/* The update either happens or leaves the optimizer as it was: a raise midway (a momentum buffer
 * or a table that could not be allocated, a failed upload or launch) frees the momentum buffers
 * this step made - else the retry would read them uninitialized as if a step had filled them -,
 * restores which parameters were active and has the device tables rebuilt. The parameters
 * themselves are only written by the update kernel, the step's last call. */
void dt_sgd_apply(dt_sgd *s) {
    dt_params *ps = s->params;
    int n = ps->n;
    size_t nb = (size_t)(n ? n : 1);
    /* Host memory the undo needs, taken before the guard (the guard cannot free it). */
    dt_tensor **bufs_before = dt_xmalloc(nb * sizeof *bufs_before);
    unsigned char *active_before = dt_try_malloc(nb);
    dt_sgd_tensor *tab = active_before ? dt_try_malloc(nb * sizeof *tab) : NULL;
    if (!tab) {
        free(bufs_before);
        free(active_before);
        dt_fail(DT_ERR_OOM, "sgd: out of host memory for the step's table");
    }
    memcpy(bufs_before, s->bufs, (size_t)n * sizeof *bufs_before);
    memcpy(active_before, s->active_prev, (size_t)n);
    dt_sgd_chunk *volatile ch = NULL;
    dt_guard g;
    DT_GUARD(g) {
        dt_guard_unwind(&g);
        for (int i = 0; i < n; i++)
            if (s->bufs[i] != bufs_before[i]) {
                dt_tensor_free(s->bufs[i]);
                s->bufs[i] = bufs_before[i];
            }
        memcpy(s->active_prev, active_before, (size_t)n);
        s->dev_valid = 0;
        free(ch);
        free(tab);
        free(bufs_before);
        free(active_before);
        dt_rethrow();
    }
    sgd_apply(s, tab, &ch);
    dt_guard_leave(&g);
    free(tab);
    free(bufs_before);
    free(active_before);
}

static void sgd_apply(dt_sgd *s, dt_sgd_tensor *tab, dt_sgd_chunk *volatile *chp) {
    dt_params *ps = s->params;
    const float *lr = dt_data_f32(s->lr);
    int n = ps->n, changed = !s->dev_valid;
    int count = 0;
    int64_t nchunks = 0;
    for (int i = 0; i < n; i++) {
        dt_param *r = ps->items[i];
        dt_tensor *p = r->t;
        int active = p->grad_valid && p->grad;
        int first = 0;
        if (active && s->o.momentum != 0.0f && !s->bufs[i]) {
            s->bufs[i] = dt_tensor_new_unscoped(p->ndim, p->shape, p->dev, DT_F32, p->layout);
            first = 1;
        }
        /* A first step changes the table (first flag now, not next time). */
        if (active != s->active_prev[i] || first) changed = 1;
        s->active_prev[i] = (unsigned char)active;
        if (!active) continue;
        tab[count++] = (dt_sgd_tensor){p->data, p->grad->data, s->bufs[i] ? s->bufs[i]->data : NULL, p->numel,
                                       wd_of(s, r), r->lr_mult, first};
        nchunks += dt_ceil_div(p->numel, DT_SGD_CHUNK);
    }
    if (count && ps->items[0]->t->dev == DT_GPU) {
        if (changed) {
            dt_sgd_chunk *ch = *chp = dt_xmalloc(nchunks * sizeof *ch);
            int64_t k = 0;
            for (int t = 0; t < count; t++)
                for (int64_t b = 0; b < tab[t].n; b += DT_SGD_CHUNK)
                    ch[k++] = (dt_sgd_chunk){t, 0, b, b + DT_SGD_CHUNK < tab[t].n ? b + DT_SGD_CHUNK : tab[t].n};
            if (count > s->table_cap_t) {
                if (s->dev_tensors) dt_gpu_free(s->dev_tensors);
                s->dev_tensors = NULL; /* a raise in the malloc must not leave it to be freed twice */
                s->table_cap_t = 0;
                s->dev_tensors = dt_gpu_malloc(n * sizeof *tab);
                s->table_cap_t = n;
            }
            if (nchunks > s->table_cap_c) {
                if (s->dev_chunks) dt_gpu_free(s->dev_chunks);
                s->dev_chunks = NULL;
                s->table_cap_c = 0;
                s->dev_chunks = dt_gpu_malloc(nchunks * sizeof *ch);
                s->table_cap_c = (int)nchunks;
            }
            dt_copy_h2d(s->dev_tensors, tab, count * sizeof *tab);
            dt_copy_h2d(s->dev_chunks, ch, nchunks * sizeof *ch);
            s->nchunks = (int)nchunks;
            s->dev_valid = 1;
            free(ch);
            *chp = NULL;
            /* The 'first' flags were just uploaded; the next step must upload cleared ones. */
            for (int t = 0; t < count; t++)
                if (tab[t].first) s->dev_valid = 0;
        }
        DT_PICK(sgd_k, DT_GPU, DT_F32, DT_NCHW)(s->dev_tensors, count, s->dev_chunks, s->nchunks, lr, s->o.momentum,
                                                s->o.dampening, s->o.nesterov);
    } else if (count) {
        DT_PICK(sgd_k, DT_CPU, DT_F32, DT_NCHW)(tab, count, NULL, 0, lr, s->o.momentum, s->o.dampening, s->o.nesterov);
    }
}
