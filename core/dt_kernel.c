#include "core/dt_kernel.h"

#include <stdlib.h>
#include <string.h>

#include "core/dt_common.h"

static dt_op_table *g_tables; /* every table, linked at load time (constructors: one thread) */

void dt_op_table_register(dt_op_table *t) {
    t->next = g_tables;
    g_tables = t;
}

static int matches(const dt_kernel_entry *e, dt_dev dev, dt_dtype dtype, dt_layout layout) {
    return e->dev == dev && (e->dtype == DT_ANY_DTYPE || e->dtype == (int)dtype) &&
           (e->layout == DT_ANY_LAYOUT || e->layout == (int)layout);
}

static const char *dtype_str(int dtype) { return dtype == DT_ANY_DTYPE ? "any" : dt_dtype_name(dtype); }
static const char *layout_str(int layout) { return layout == DT_ANY_LAYOUT ? "any" : dt_layout_name(layout); }

/* "f32 nchw cpu, f32 nchw cuda, ..." */
static void list_entries(const dt_op_table *t, char *buf, size_t len) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < t->n && o < len; i++) {
        const dt_kernel_entry *e = &t->entries[i];
        o += (size_t)snprintf(buf + o, len - o, "%s%s %s %s%s", i ? ", " : "", dtype_str(e->dtype),
                              layout_str(e->layout), dt_dev_name(e->dev), e->fn ? "" : " (not built: CUDA=0)");
    }
}

int dt_kernel_has(const dt_op_table *t, dt_dev dev, dt_dtype dtype, dt_layout layout) {
    for (int i = 0; i < t->n; i++)
        if (matches(&t->entries[i], dev, dtype, layout) && t->entries[i].fn) return 1;
    return 0;
}

dt_kernel_fn dt_kernel_lookup(const dt_op_table *t, dt_dev dev, dt_dtype dtype, dt_layout layout) {
    /* every dispatch is a device call the failure-injection tests can fail, on either device */
    if (dt_inject_hit(DT_INJECT_DEVICE_CALL))
        dt_fail(DT_ERR_DEVICE, "%s: the %s kernel failed (injected device failure)", t->op, dt_dev_name(dev));
    for (int i = 0; i < t->n; i++) {
        const dt_kernel_entry *e = &t->entries[i];
        if (!matches(e, dev, dtype, layout)) continue;
        if (!e->fn) dt_fatal("%s: the %s kernel for %s %s is not built (deftc was built with CUDA=0)", t->op,
                             dt_dev_name(dev), dtype_str((int)dtype), layout_str((int)layout));
        return e->fn;
    }
    char has[1024];
    list_entries(t, has, sizeof has);
    dt_fatal("%s: no kernel for %s %s on the %s (has: %s)", t->op, dtype_str((int)dtype), layout_str((int)layout),
             dt_dev_name(dev), has);
}

const dt_op_table *dt_op_table_find(const char *op) {
    for (const dt_op_table *t = g_tables; t; t = t->next)
        if (!strcmp(t->op, op)) return t;
    return NULL;
}

static int by_name(const void *a, const void *b) {
    return strcmp((*(dt_op_table *const *)a)->op, (*(dt_op_table *const *)b)->op);
}

void dt_op_tables_print(FILE *f) {
    int n = 0;
    for (dt_op_table *t = g_tables; t; t = t->next) n++;
    dt_op_table **v = dt_xmalloc((size_t)(n ? n : 1) * sizeof *v);
    n = 0;
    for (dt_op_table *t = g_tables; t; t = t->next) v[n++] = t;
    qsort(v, (size_t)n, sizeof *v, by_name);
    for (int i = 0; i < n; i++) {
        char has[1024];
        list_entries(v[i], has, sizeof has);
        fprintf(f, "%-40s %s\n", v[i]->op, has);
    }
    free(v);
}
