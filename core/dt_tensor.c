#include "core/dt_tensor.h"

#include <stdlib.h>
#include <string.h>

#include "core/dt_alloc.h"
#include "core/dt_common.h"
#include "core/dt_param.h"
#include "core/dt_kernel.h"
#include "ops/pointwise/dt_shared_kernels.h" /* dt_fill_k */

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


void dt_scope_release_thread(void) {
    if (g_depth) dt_fatal("dt_scope_release_thread: %d scopes still open", g_depth);
    for (int i = 0; i < MAX_SCOPES; i++) {
        free(g_scopes[i].items);
        g_scopes[i] = (tensor_list){0};
    }
}

/* Room for one more tensor in the current scope, made before the tensor is: a raise then
 * leaves nothing unowned. */
static void scope_reserve(void) {
    if (!g_depth) return;
    tensor_list *s = &g_scopes[g_depth - 1];
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 256;
        s->items = dt_xrealloc(s->items, cap * sizeof *s->items);
        s->cap = cap;
    }
}

static void scope_add(dt_tensor *t) {
    if (!g_depth) return;
    tensor_list *s = &g_scopes[g_depth - 1];
    if (s->n == s->cap) scope_reserve(); /* callers reserve first; this is the fallback */
    s->items[s->n++] = t;
    t->scoped = g_depth;
}

/* A guard's unwind ends the scopes the failed call opened (their tensors are freed, the tape
 * dropped with the outermost), as the call's own dt_scope_end would have. */
static size_t scope_mark(void) { return (size_t)g_depth; }
static void scope_release(size_t mark) {
    while ((size_t)g_depth > mark) dt_scope_end();
}
__attribute__((constructor)) static void register_scopes(void) {
    dt_guard_register((dt_guard_participant){1, scope_mark, scope_release, NULL});
}

static void destroy(dt_tensor *t);

static dt_tensor_tape_hooks g_tape_hooks; /* set once at load time (core/dt_autograd.c) */
void dt_tensor_set_tape_hooks(dt_tensor_tape_hooks hooks) { g_tape_hooks = hooks; }

void dt_scope_end(void) {
    if (!g_depth) dt_fatal("dt_scope_end without dt_scope_begin");
    /* Nodes on the tape point at tensors of this scope: drop the tape first. */
    if (g_depth == 1 && g_tape_hooks.scope_root_end) g_tape_hooks.scope_root_end();
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

/* The memory first, then the record, so that a raise in either leaves nothing behind. */
static dt_storage *storage_new(size_t bytes, dt_dev dev) {
    void *ptr = dev == DT_GPU ? dt_gpu_malloc(bytes ? bytes : 4) : dt_host_alloc(bytes ? bytes : 4, 0);
    dt_storage *s = dt_try_malloc(sizeof *s);
    if (!s) {
        if (dev == DT_GPU) dt_gpu_free(ptr); else dt_host_free(ptr, 0);
        dt_fail(DT_ERR_OOM, "out of host memory allocating a tensor's storage record");
    }
    s->bytes = bytes;
    s->refs = 1;
    s->dev = dev;
    s->ptr = ptr;
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

static dt_tensor *header(int ndim, const int64_t *shape, dt_dev dev, dt_dtype dtype, dt_layout layout) {
    if (ndim < 0 || ndim > DT_MAX_DIMS) dt_fatal("tensor with %d dims (at most %d)", ndim, DT_MAX_DIMS);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0) dt_fatal("tensor dimension %d is negative (%lld)", i, (long long)shape[i]);
    if (dt_numel(ndim, shape) < 0) dt_fatal("tensor shape with more than 2^63 elements");
    if ((unsigned)dtype >= DT_NUM_DTYPES) dt_fatal("tensor of unknown dtype %d", (int)dtype);
    if ((unsigned)layout >= DT_NUM_LAYOUTS) dt_fatal("tensor of unknown layout %d", (int)layout);
    if (layout == DT_NHWC && ndim != 4) dt_fatal("tensor layout nhwc needs 4 dims [N, C, H, W], got %d", ndim);
    if (dev == DT_GPU && !dt_gpu_ready()) dt_gpu_init(0);
    dt_tensor *t = dt_xcalloc(1, sizeof *t);
    t->ndim = ndim;
    memcpy(t->shape, shape, ndim * sizeof *shape);
    t->numel = dt_numel(ndim, shape);
    t->dev = dev;
    t->dtype = dtype;
    t->layout = layout;
    return t;
}

/* A raise in storage_new (out of memory: the common failure of a training step) must not leak
 * the header made first: a guard frees it and raises again. */
dt_tensor *dt_tensor_new_unscoped(int ndim, const int64_t *shape, dt_dev dev, dt_dtype dtype, dt_layout layout) {
    dt_tensor *volatile t = header(ndim, shape, dev, dtype, layout);
    dt_guard g;
    DT_GUARD(g) {
        dt_guard_unwind(&g);
        free(t);
        dt_rethrow();
    }
    t->storage = storage_new(dt_tensor_bytes(t), dev);
    dt_guard_leave(&g);
    t->data = t->storage->ptr;
    return t;
}

dt_tensor *dt_tensor_new_as(int ndim, const int64_t *shape, dt_dev dev, dt_dtype dtype, dt_layout layout) {
    scope_reserve();
    dt_tensor *t = dt_tensor_new_unscoped(ndim, shape, dev, dtype, layout);
    scope_add(t);
    return t;
}

dt_tensor *dt_tensor_new(int ndim, const int64_t *shape, dt_dev dev) {
    return dt_tensor_new_as(ndim, shape, dev, DT_F32, DT_NCHW);
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
dt_tensor *dt_tensor_new4_as(dt_dev dev, dt_dtype dtype, dt_layout layout, int64_t n, int64_t c, int64_t h, int64_t w) {
    int64_t s[4] = {n, c, h, w};
    return dt_tensor_new_as(4, s, dev, dtype, layout);
}
dt_tensor *dt_tensor_like(const dt_tensor *t) { return dt_tensor_new_as(t->ndim, t->shape, t->dev, t->dtype, t->layout); }

dt_tensor *dt_tensor_from_host(int ndim, const int64_t *shape, dt_dev dev, const float *src) {
    dt_tensor *t = dt_tensor_new(ndim, shape, dev);
    dt_tensor_upload(t, src);
    return t;
}

/* Between logical (row-major [N, C, H, W]) fp32 values and the stored elements, in storage
 * order with the logical index stepped along (no division per element: a bf16 channels-last
 * ResNet-18's parameters and momentum, 23 M elements, are copied for every checkpoint). */
static void stored_from_logical(const dt_tensor *t, const float *v, void *h) {
    if (t->layout == DT_NCHW) {
        for (int64_t i = 0; i < t->numel; i++) dt_elem_st(h, t->dtype, i, v[i]);
        return;
    }
    const int64_t C = t->shape[1], HW = t->shape[2] * t->shape[3];
    int64_t s = 0;
    for (int64_t n = 0; n < t->shape[0]; n++)
        for (int64_t p = 0; p < HW; p++)
            for (int64_t c = 0; c < C; c++) dt_elem_st(h, t->dtype, s++, v[(n * C + c) * HW + p]);
}
static void logical_from_stored(const dt_tensor *t, const void *h, float *v) {
    if (t->layout == DT_NCHW) {
        for (int64_t i = 0; i < t->numel; i++) v[i] = dt_elem_ld(h, t->dtype, i);
        return;
    }
    const int64_t C = t->shape[1], HW = t->shape[2] * t->shape[3];
    int64_t s = 0;
    for (int64_t n = 0; n < t->shape[0]; n++)
        for (int64_t p = 0; p < HW; p++)
            for (int64_t c = 0; c < C; c++) v[(n * C + c) * HW + p] = dt_elem_ld(h, t->dtype, s++);
}

void dt_tensor_set_values(dt_tensor *t, const float *values) {
    dt_require_live("set_values", t);
    if (t->dtype == DT_F32 && t->layout == DT_NCHW) {
        dt_tensor_upload(t, values);
        return;
    }
    void *h = dt_xmalloc(dt_tensor_bytes(t) ? dt_tensor_bytes(t) : 4);
    stored_from_logical(t, values, h);
    dt_tensor_upload(t, h);
    free(h);
}

dt_tensor *dt_tensor_from_values(int ndim, const int64_t *shape, dt_dev dev, dt_dtype dtype, dt_layout layout,
                                 const float *values) {
    dt_tensor *t = dt_tensor_new_as(ndim, shape, dev, dtype, layout);
    dt_tensor_set_values(t, values);
    return t;
}

dt_tensor *dt_tensor_to(const dt_tensor *t, dt_dev dev) {
    dt_tensor *r = dt_tensor_new_as(t->ndim, t->shape, dev, t->dtype, t->layout);
    dt_tensor_copy(r, t);
    return r;
}

static dt_tensor *share(const dt_tensor *t, dt_tensor *v, int64_t offset) {
    v->storage = t->storage;
    v->storage->refs++;
    v->data = (char *)t->data + offset * (int64_t)dt_dtype_size(t->dtype);
    return v;
}

dt_tensor *dt_tensor_view(dt_tensor *t, int ndim, const int64_t *shape) {
    dt_require_live("view", t);
    char a[160], b[128];
    int rowmajor = t->layout == DT_NCHW || t->shape[2] * t->shape[3] == 1;
    if (!rowmajor) dt_fatal("view: %s is channels last: its memory is not the row-major order a view reinterprets",
                            dt_tensor_desc(t, a, sizeof a));
    dt_tensor *v = header(ndim, shape, t->dev, t->dtype, DT_NCHW);
    if (v->numel != t->numel)
        dt_fatal("view: cannot view %s (%lld elements) as %s (%lld elements)", dt_shape_str(t, a, sizeof a),
                 (long long)t->numel, dt_shape_str(v, b, sizeof b), (long long)v->numel);
    share(t, v, 0);
    scope_add(v);
    return v;
}

dt_tensor *dt_tensor_view_at(dt_tensor *t, int64_t offset, int ndim, const int64_t *shape, dt_layout layout) {
    dt_require_live("view_at", t);
    dt_tensor *v = header(ndim, shape, t->dev, t->dtype, layout);
    if (offset < 0 || offset > t->numel || v->numel > t->numel - offset)
        dt_fatal("view_at: %lld elements from %lld do not fit in %lld", (long long)v->numel, (long long)offset,
                 (long long)t->numel);
    return share(t, v, offset);
}

dt_tensor *dt_tensor_alias(const dt_tensor *t) {
    dt_require_live("alias", t);
    return share(t, header(t->ndim, t->shape, t->dev, t->dtype, t->layout), 0);
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
    if (t->grad && !t->param) {
        destroy(t->grad);
        t->grad = NULL;
    }
}

static void destroy(dt_tensor *t) {
    if ((t->node || t->tape_uses || t->tape_saved) && g_tape_hooks.forget) g_tape_hooks.forget(t);
    storage_unref(t->storage);
    if (t->param && t->param->t == t) { /* a parameter's master owns its record and working copy */
        if (t->param->work) destroy(t->param->work);
        free(t->param);
    }
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
    char a[160], b[160];
    if (dst->numel != src->numel || dst->dtype != src->dtype || dst->layout != src->layout)
        dt_fatal("copy: %s into %s: the element counts, dtypes and layouts must agree (dt_convert changes dtype "
                 "or layout)", dt_tensor_desc(src, a, sizeof a), dt_tensor_desc(dst, b, sizeof b));
    size_t bytes = dt_tensor_bytes(src);
    if (dst->dev == DT_CPU && src->dev == DT_CPU) memcpy(dst->data, src->data, bytes);
    else if (dst->dev == DT_GPU && src->dev == DT_CPU) dt_copy_h2d(dst->data, src->data, bytes);
    else if (dst->dev == DT_CPU && src->dev == DT_GPU) dt_copy_d2h(dst->data, src->data, bytes);
    else dt_copy_d2d(dst->data, src->data, bytes);
}

void dt_tensor_upload(dt_tensor *t, const void *host) {
    dt_require_live("upload", t);
    size_t bytes = dt_tensor_bytes(t);
    if (t->dev == DT_CPU) memcpy(t->data, host, bytes); else dt_copy_h2d(t->data, host, bytes);
}

void dt_tensor_download(const dt_tensor *t, void *host) {
    dt_require_live("download", t);
    size_t bytes = dt_tensor_bytes(t);
    if (t->dev == DT_CPU) memcpy(host, t->data, bytes); else dt_copy_d2h(host, t->data, bytes);
}

float *dt_tensor_host_copy(const dt_tensor *t) {
    dt_require_live("host_copy", t);
    float *h = dt_xmalloc((size_t)(t->numel ? t->numel : 1) * sizeof(float));
    if (t->dtype == DT_F32 && t->layout == DT_NCHW) {
        dt_tensor_download(t, h);
        return h;
    }
    void *raw = dt_xmalloc(dt_tensor_bytes(t) ? dt_tensor_bytes(t) : 4);
    dt_tensor_download(t, raw);
    logical_from_stored(t, raw, h);
    free(raw);
    return h;
}

void dt_tensor_fill(dt_tensor *t, float v) {
    dt_require_live("fill", t);
    size_t bytes = dt_tensor_bytes(t);
    if (t->dev == DT_GPU && v == 0.0f) { /* zero is all-zero bits in every dtype */
        dt_memset_gpu(t->data, 0, bytes);
        return;
    }
    if (t->dev == DT_GPU && t->dtype == DT_F32) { /* a kernel, queued: no wait, and a CUDA graph can hold it */
        DT_PICK(dt_fill_k, t->dev, t->dtype, t->layout)(t->numel, v, t->data);
        return;
    }
    void *h = t->dev == DT_CPU ? t->data : dt_xmalloc(bytes ? bytes : 4);
    for (int64_t i = 0; i < t->numel; i++) dt_elem_st(h, t->dtype, i, v);
    if (t->dev == DT_GPU) {
        dt_tensor_upload(t, h);
        free(h);
    }
}

static void fill_random(dt_tensor *t, dt_rng *rng, float a, float b, int normal) {
    dt_require_live("fill_random", t);
    if (t->dtype != DT_F32 && t->dtype != DT_BF16) {
        char d[160];
        dt_fatal("fill_random: %s: only f32 and bf16 tensors take random values", dt_tensor_desc(t, d, sizeof d));
    }
    float *v = dt_xmalloc((size_t)(t->numel ? t->numel : 1) * sizeof(float));
    if (normal) dt_rng_fill_normal(rng, v, t->numel, a, b);
    else dt_rng_fill_uniform(rng, v, t->numel, a, b);
    if (t->dtype == DT_F32) {
        dt_tensor_upload(t, v);
    } else {
        dt_bf16 *h = dt_xmalloc((size_t)(t->numel ? t->numel : 1) * sizeof(dt_bf16));
        for (int64_t i = 0; i < t->numel; i++) h[i] = dt_bf16_from_float(v[i]);
        dt_tensor_upload(t, h);
        free(h);
    }
    free(v);
}
void dt_tensor_fill_normal(dt_tensor *t, dt_rng *rng, float mean, float std) { fill_random(t, rng, mean, std, 1); }
void dt_tensor_fill_uniform(dt_tensor *t, dt_rng *rng, float lo, float hi) { fill_random(t, rng, lo, hi, 0); }

/* ---- typed access ---- */

static void *typed(const dt_tensor *t, dt_dtype want, const char *fn) {
    dt_require_live(fn, t);
    if (t->dtype != want) {
        char d[160];
        dt_fatal("%s: %s%s%s holds %s, not %s", fn, dt_tensor_desc(t, d, sizeof d), t->name[0] ? " " : "", t->name,
                 dt_dtype_name(t->dtype), dt_dtype_name(want));
    }
    return t->data;
}
float *dt_data_f32(const dt_tensor *t) { return typed(t, DT_F32, "dt_data_f32"); }
int32_t *dt_data_i32(const dt_tensor *t) { return typed(t, DT_I32, "dt_data_i32"); }
uint8_t *dt_data_u8(const dt_tensor *t) { return typed(t, DT_U8, "dt_data_u8"); }

/* ---- shape checks ---- */

char *dt_shape_str(const dt_tensor *t, char *buf, int len) {
    int o = snprintf(buf, len, "[");
    for (int i = 0; i < t->ndim && o < len; i++)
        o += snprintf(buf + o, len - o, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    if (o < len) snprintf(buf + o, len - o, "]");
    return buf;
}

char *dt_tensor_desc(const dt_tensor *t, char *buf, int len) {
    dt_shape_str(t, buf, len);
    int o = (int)strlen(buf);
    if (o < len)
        snprintf(buf + o, len - o, " %s%s%s %s", dt_dtype_name(t->dtype), t->ndim == 4 ? " " : "",
                 t->ndim == 4 ? dt_layout_name(t->layout) : "", dt_dev_name(t->dev));
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

void dt_require_dtype(const char *op, const char *arg, const dt_tensor *t, dt_dtype dtype) {
    if (t->dtype == dtype) return;
    char d[160];
    dt_fatal("%s: %s %s must be %s", op, arg, dt_tensor_desc(t, d, sizeof d), dt_dtype_name(dtype));
}

void dt_require_layout(const char *op, const char *arg, const dt_tensor *t, dt_layout layout) {
    if (t->layout == layout) return;
    char d[160];
    dt_fatal("%s: %s %s must be %s", op, arg, dt_tensor_desc(t, d, sizeof d), dt_layout_name(layout));
}

void dt_require_same_type(const char *op, const dt_tensor *a, const dt_tensor *b) {
    if (a->dtype == b->dtype && a->layout == b->layout) return;
    char x[160], y[160];
    dt_fatal("%s: operands of different dtype or layout: %s and %s", op, dt_tensor_desc(a, x, sizeof x),
             dt_tensor_desc(b, y, sizeof y));
}
