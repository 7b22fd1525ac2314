#include "dt_tensor.h"

#include <stdlib.h>
#include <string.h>

#include "dt_alloc.h"
#include "dt_autograd.h"
#include "dt_common.h"

/* ---- scopes ---- */

typedef struct {
    dt_tensor **items;
    int n, cap;
} tensor_list;

#define MAX_SCOPES 32
/* Per host thread (one replica per thread). */
static __thread tensor_list g_scopes[MAX_SCOPES];
static __thread int g_depth;

void dt_scope_begin(void) {
    if (g_depth == MAX_SCOPES) dt_fatal("dt_scope_begin: more than %d nested scopes", MAX_SCOPES);
    g_scopes[g_depth++].n = 0;
}

int dt_scope_depth(void) { return g_depth; }

void dt_scope_release_thread(void) {
    if (g_depth) dt_fatal("dt_scope_release_thread: %d scopes still open", g_depth);
    for (int i = 0; i < MAX_SCOPES; i++) {
        free(g_scopes[i].items);
        g_scopes[i] = (tensor_list){0};
    }
}

static void scope_add(dt_tensor *t) {
    if (!g_depth) return;
    tensor_list *s = &g_scopes[g_depth - 1];
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 256;
        s->items = dt_xrealloc(s->items, s->cap * sizeof *s->items);
    }
    s->items[s->n++] = t;
    t->scoped = g_depth;
}

static void destroy(dt_tensor *t);

void dt_scope_end(void) {
    if (!g_depth) dt_fatal("dt_scope_end without dt_scope_begin");
    /* Nodes on the tape point at tensors of this scope: drop the tape first. */
    if (g_depth == 1) dt_tape_reset();
    tensor_list *s = &g_scopes[--g_depth];
    for (int i = s->n - 1; i >= 0; i--)
        if (s->items[i]) destroy(s->items[i]);
    s->n = 0;
}

void dt_tensor_keep(dt_tensor *t) {
    if (!t->scoped) return;
    tensor_list *s = &g_scopes[t->scoped - 1];
    for (int i = s->n - 1; i >= 0; i--)
        if (s->items[i] == t) {
            s->items[i] = NULL;
            break;
        }
    t->scoped = 0;
}

/* ---- storage ---- */

static dt_storage *storage_new(int64_t numel, dt_dev dev) {
    dt_storage *s = dt_xmalloc(sizeof *s);
    s->numel = numel;
    s->refs = 1;
    s->dev = dev;
    size_t bytes = (size_t)(numel ? numel : 1) * sizeof(float);
    s->ptr = dev == DT_GPU ? dt_gpu_malloc(bytes) : dt_host_alloc(bytes, 0);
    return s;
}

static void storage_unref(dt_storage *s) {
    if (!s || --s->refs > 0) return;
    if (s->dev == DT_GPU) dt_gpu_free(s->ptr); else dt_host_free(s->ptr, 0);
    free(s);
}

/* ---- creation ---- */

int64_t dt_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0 || __builtin_mul_overflow(n, shape[i], &n)) return -1;
    return n;
}

static dt_tensor *header(int ndim, const int64_t *shape, dt_dev dev) {
    if (ndim < 0 || ndim > DT_MAX_DIMS) dt_fatal("tensor with %d dims (at most %d)", ndim, DT_MAX_DIMS);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0) dt_fatal("tensor dimension %d is negative (%lld)", i, (long long)shape[i]);
    if (dt_numel(ndim, shape) < 0) dt_fatal("tensor shape with more than 2^63 elements");
    if (dev == DT_GPU && !dt_gpu_ready()) dt_gpu_init(0);
    dt_tensor *t = dt_xcalloc(1, sizeof *t);
    t->ndim = ndim;
    memcpy(t->shape, shape, ndim * sizeof *shape);
    t->numel = dt_numel(ndim, shape);
    t->dev = dev;
    return t;
}

dt_tensor *dt_tensor_new(int ndim, const int64_t *shape, dt_dev dev) {
    dt_tensor *t = header(ndim, shape, dev);
    t->storage = storage_new(t->numel, dev);
    t->data = t->storage->ptr;
    scope_add(t);
    return t;
}

dt_tensor *dt_tensor_new_unscoped(int ndim, const int64_t *shape, dt_dev dev) {
    dt_tensor *t = header(ndim, shape, dev);
    t->storage = storage_new(t->numel, dev);
    t->data = t->storage->ptr;
    return t;
}

dt_tensor *dt_tensor_zeros(int ndim, const int64_t *shape, dt_dev dev) {
    dt_tensor *t = dt_tensor_new(ndim, shape, dev);
    dt_tensor_fill(t, 0.0f);
    return t;
}

dt_tensor *dt_tensor_new1(dt_dev dev, int64_t a) { return dt_tensor_new(1, &a, dev); }
dt_tensor *dt_tensor_new2(dt_dev dev, int64_t a, int64_t b) {
    int64_t s[2] = {a, b};
    return dt_tensor_new(2, s, dev);
}
dt_tensor *dt_tensor_new4(dt_dev dev, int64_t n, int64_t c, int64_t h, int64_t w) {
    int64_t s[4] = {n, c, h, w};
    return dt_tensor_new(4, s, dev);
}
dt_tensor *dt_tensor_like(const dt_tensor *t) { return dt_tensor_new(t->ndim, t->shape, t->dev); }

dt_tensor *dt_tensor_from_host(int ndim, const int64_t *shape, dt_dev dev, const float *src) {
    dt_tensor *t = dt_tensor_new(ndim, shape, dev);
    dt_tensor_upload(t, src);
    return t;
}

dt_tensor *dt_tensor_to(const dt_tensor *t, dt_dev dev) {
    dt_tensor *r = dt_tensor_new(t->ndim, t->shape, dev);
    dt_tensor_copy(r, t);
    return r;
}

dt_tensor *dt_tensor_view(dt_tensor *t, int ndim, const int64_t *shape) {
    dt_require_live("view", t);
    dt_tensor *v = header(ndim, shape, t->dev);
    if (v->numel != t->numel) {
        char a[128], b[128];
        dt_shape_str(t, a, sizeof a);
        dt_shape_str(v, b, sizeof b);
        dt_fatal("view: cannot view %s (%lld elements) as %s (%lld elements)", a,
                 (long long)t->numel, b, (long long)v->numel);
    }
    v->storage = t->storage;
    v->storage->refs++;
    v->data = t->data;
    scope_add(v);
    return v;
}

dt_tensor *dt_tensor_view_at(dt_tensor *t, int64_t offset, int ndim, const int64_t *shape) {
    dt_require_live("view_at", t);
    dt_tensor *v = header(ndim, shape, t->dev);
    if (offset < 0 || offset > t->numel || v->numel > t->numel - offset)
        dt_fatal("view_at: %lld elements from %lld do not fit in %lld", (long long)v->numel, (long long)offset,
                 (long long)t->numel);
    v->storage = t->storage;
    v->storage->refs++;
    v->data = t->data + offset;
    return v;
}

dt_tensor *dt_tensor_alias(const dt_tensor *t) {
    dt_require_live("alias", t);
    dt_tensor *v = header(t->ndim, t->shape, t->dev);
    v->storage = t->storage;
    v->storage->refs++;
    v->data = t->data;
    return v;
}

void dt_tensor_set_name(dt_tensor *t, const char *name) {
    snprintf(t->name, sizeof t->name, "%s", name);
}

/* ---- freeing ---- */

void dt_tensor_release(dt_tensor *t) {
    if (!t) return;
    storage_unref(t->storage);
    t->storage = NULL;
    t->data = NULL;
    if (t->grad && !t->is_param) {
        destroy(t->grad);
        t->grad = NULL;
    }
}

static void destroy(dt_tensor *t) {
    storage_unref(t->storage);
    if (t->grad) destroy(t->grad);
    free(t);
}

void dt_tensor_free(dt_tensor *t) {
    if (!t) return;
    if (t->scoped) dt_tensor_keep(t);
    destroy(t);
}

/* ---- data movement ---- */

void dt_tensor_copy(dt_tensor *dst, const dt_tensor *src) {
    dt_require_live("copy (source)", src);
    dt_require_live("copy (destination)", dst);
    if (dst->numel != src->numel) {
        char a[128], b[128];
        dt_fatal("copy: %s into %s: element counts differ", dt_shape_str(src, a, sizeof a),
                 dt_shape_str(dst, b, sizeof b));
    }
    size_t bytes = (size_t)src->numel * sizeof(float);
    if (dst->dev == DT_CPU && src->dev == DT_CPU) memcpy(dst->data, src->data, bytes);
    else if (dst->dev == DT_GPU && src->dev == DT_CPU) dt_copy_h2d(dst->data, src->data, bytes);
    else if (dst->dev == DT_CPU && src->dev == DT_GPU) dt_copy_d2h(dst->data, src->data, bytes);
    else dt_copy_d2d(dst->data, src->data, bytes);
}

void dt_tensor_upload(dt_tensor *t, const float *host) {
    dt_require_live("upload", t);
    size_t bytes = (size_t)t->numel * sizeof(float);
    if (t->dev == DT_CPU) memcpy(t->data, host, bytes); else dt_copy_h2d(t->data, host, bytes);
}

void dt_tensor_download(const dt_tensor *t, float *host) {
    dt_require_live("download", t);
    size_t bytes = (size_t)t->numel * sizeof(float);
    if (t->dev == DT_CPU) memcpy(host, t->data, bytes); else dt_copy_d2h(host, t->data, bytes);
}

float *dt_tensor_host_copy(const dt_tensor *t) {
    float *h = dt_xmalloc((size_t)(t->numel ? t->numel : 1) * sizeof(float));
    dt_tensor_download(t, h);
    return h;
}

void dt_tensor_fill(dt_tensor *t, float v) {
    dt_require_live("fill", t);
    if (t->dev == DT_GPU) {
        if (v == 0.0f) {
            dt_memset_gpu(t->data, 0, (size_t)t->numel * sizeof(float));
            return;
        }
        float *h = dt_xmalloc((size_t)t->numel * sizeof(float));
        for (int64_t i = 0; i < t->numel; i++) h[i] = v;
        dt_tensor_upload(t, h);
        free(h);
        return;
    }
    for (int64_t i = 0; i < t->numel; i++) t->data[i] = v;
}

static void fill_random(dt_tensor *t, dt_rng *rng, float a, float b, int normal) {
    dt_require_live("fill_random", t);
    float *h = t->dev == DT_CPU ? t->data : dt_xmalloc((size_t)(t->numel ? t->numel : 1) * sizeof(float));
    if (normal) dt_rng_fill_normal(rng, h, t->numel, a, b);
    else dt_rng_fill_uniform(rng, h, t->numel, a, b);
    if (t->dev == DT_GPU) {
        dt_tensor_upload(t, h);
        free(h);
    }
}
void dt_tensor_fill_normal(dt_tensor *t, dt_rng *rng, float mean, float std) { fill_random(t, rng, mean, std, 1); }
void dt_tensor_fill_uniform(dt_tensor *t, dt_rng *rng, float lo, float hi) { fill_random(t, rng, lo, hi, 0); }

/* ---- shape checks ---- */

char *dt_shape_str(const dt_tensor *t, char *buf, int len) {
    int o = snprintf(buf, len, "[");
    for (int i = 0; i < t->ndim && o < len; i++)
        o += snprintf(buf + o, len - o, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    if (o < len) snprintf(buf + o, len - o, "]");
    return buf;
}

int dt_same_shape(const dt_tensor *a, const dt_tensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

void dt_require_same_shape(const char *op, const dt_tensor *a, const dt_tensor *b) {
    if (dt_same_shape(a, b)) return;
    char x[128], y[128];
    dt_fatal("%s: shape mismatch: %s vs %s", op, dt_shape_str(a, x, sizeof x), dt_shape_str(b, y, sizeof y));
}

void dt_require_same_device(const char *op, const dt_tensor *a, const dt_tensor *b) {
    if (a->dev != b->dev)
        dt_fatal("%s: tensors on different devices (%s and %s)", op, dt_dev_name(a->dev), dt_dev_name(b->dev));
}

void dt_require_ndim(const char *op, const char *arg, const dt_tensor *t, int ndim) {
    if (t->ndim == ndim) return;
    char x[128];
    dt_fatal("%s: %s must have %d dims, got %s", op, arg, ndim, dt_shape_str(t, x, sizeof x));
}

void dt_require_live(const char *op, const dt_tensor *t) {
    if (!t) dt_fatal("%s: tensor is NULL", op);
    if (!t->data && t->numel)
        dt_fatal("%s: tensor%s%s was already released (its data was freed after backward; "
                 "set t->retain = 1 to keep it)", op, t->name[0] ? " " : "", t->name);
}
