/* Bucketed, overlapped gradient averaging across data-parallel replicas (dt_grad_sync.h). */
#include "train/dt_grad_sync.h"

#include <stdlib.h>
#include <string.h>

#include "core/dt_autograd.h"
#include "core/dt_common.h"

int dt_bucket_plan(const int64_t *numel, int n, int64_t cap_elems, int64_t *offset, int *bucket_of, int64_t *start,
                   int64_t *len) {
    int nb = 0;
    int64_t at = 1; /* slot 0: the loss */
    int64_t filled = 0;
    for (int k = 0; k < n; k++) {
        int i = n - 1 - k; /* backward order */
        if (k == 0 || filled >= cap_elems) {
            start[nb] = nb == 0 ? 0 : at;
            len[nb] = 0;
            nb++;
            filled = 0;
        }
        offset[i] = at;
        bucket_of[i] = nb - 1;
        at += numel[i];
        filled += numel[i];
        len[nb - 1] = at - start[nb - 1];
    }
    if (n == 0) { /* the loss alone */
        start[0] = 0;
        len[0] = 1;
        return 1;
    }
    return nb;
}

static int cmp_param(const void *a, const void *b) {
    const dt_tensor *x = ((const dt_grad_sync_entry *)a)->p, *y = ((const dt_grad_sync_entry *)b)->p;
    return x < y ? -1 : x > y;
}

static int param_index(dt_grad_sync *s, const dt_tensor *p) {
    dt_grad_sync_entry key = {p, 0};
    const dt_grad_sync_entry *e = bsearch(&key, s->by_ptr, s->n, sizeof key, cmp_param);
    return e ? e->index : -1;
}

/* Starts every complete bucket from the next one on, in order. */
static void launch_ready(dt_grad_sync *s) {
    while (s->next < s->nb && s->pending[s->next] == 0) {
        dt_dist_allreduce_f32_async(s->dist, dt_data_f32(s->flat) + s->start[s->next], s->len[s->next], 1);
        s->next++;
    }
}

static void on_ready(void *ctx, dt_tensor *p) {
    dt_grad_sync *s = ctx;
    int i = param_index(s, p);
    if (i < 0 || s->reported[i]) return; /* not one of the model's (or reported already) */
    s->reported[i] = 1;
    s->pending[s->bucket_of[i]]--;
    launch_ready(s);
}

void dt_grad_sync_init(dt_grad_sync *s, dt_params *ps, dt_dist *d, size_t bucket_bytes) {
    memset(s, 0, sizeof *s);
    s->dist = d;
    s->params = ps;
    s->n = ps->n;
    int n = s->n, cap = n > 0 ? n : 1;
    int64_t *numel = dt_xcalloc(cap, sizeof *numel);
    s->offset = dt_xcalloc(cap, sizeof *s->offset);
    s->bucket_of = dt_xcalloc(cap, sizeof *s->bucket_of);
    s->start = dt_xcalloc(cap, sizeof *s->start);
    s->len = dt_xcalloc(cap, sizeof *s->len);
    s->pending = dt_xcalloc(cap, sizeof *s->pending);
    s->reported = dt_xcalloc(cap, sizeof *s->reported);
    int64_t total = 1;
    for (int i = 0; i < n; i++) total += numel[i] = ps->items[i]->t->numel;
    int64_t cap_elems = (int64_t)(bucket_bytes / sizeof(float));
    s->nb = dt_bucket_plan(numel, n, cap_elems > 0 ? cap_elems : 1, s->offset, s->bucket_of, s->start, s->len);
    free(numel);
    dt_dev dev = n ? ps->items[0]->t->dev : DT_CPU;
    int64_t shape[1] = {total};
    s->flat = dt_tensor_zeros(1, shape, dev);
    dt_tensor_keep(s->flat);
    for (int i = 0; i < n; i++) {
        dt_tensor *p = ps->items[i]->t;
        if (p->grad) dt_tensor_free(p->grad);
        p->grad = dt_tensor_view_at(s->flat, s->offset[i], p->ndim, p->shape, p->layout);
        p->grad_valid = 0;
    }
    s->by_ptr = dt_xcalloc(cap, sizeof *s->by_ptr);
    for (int i = 0; i < n; i++) s->by_ptr[i] = (dt_grad_sync_entry){ps->items[i]->t, i};
    qsort(s->by_ptr, n, sizeof *s->by_ptr, cmp_param);
    dt_set_grad_ready_hook(on_ready, s);
}

void dt_grad_sync_free(dt_grad_sync *s) {
    if (!s->flat) return;
    dt_set_grad_ready_hook(NULL, NULL);
    /* The parameters keep their gradient views (they share the flat storage, freed with the
     * last of them). */
    dt_tensor_free(s->flat);
    free(s->offset);
    free(s->bucket_of);
    free(s->start);
    free(s->len);
    free(s->pending);
    free(s->reported);
    free(s->by_ptr);
    memset(s, 0, sizeof *s);
}

float *dt_grad_sync_loss_slot(dt_grad_sync *s) { return dt_data_f32(s->flat); }

void dt_grad_sync_begin(dt_grad_sync *s) {
    memset(s->pending, 0, s->nb * sizeof *s->pending);
    for (int i = 0; i < s->n; i++) {
        s->reported[i] = 0;
        s->pending[s->bucket_of[i]]++;
    }
    s->next = 0;
}

void dt_grad_sync_end(dt_grad_sync *s) {
    for (int i = 0; i < s->n; i++) {
        if (s->reported[i]) continue;
        dt_tensor *p = s->params->items[i]->t;
        if (!p->grad_valid) dt_tensor_fill(p->grad, 0.0f); /* no gradient this step: contributes 0 */
        p->grad_valid = 1;
        s->reported[i] = 1;
        s->pending[s->bucket_of[i]]--;
    }
    launch_ready(s);
    dt_dist_wait_async(s->dist);
}
