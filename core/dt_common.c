#include "core/dt_common.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int g_quiet = 0;

/* ---- status, message, guards ---- */

static __thread int t_status;
static __thread char t_msg[1024];
static __thread dt_guard *t_guard; /* the innermost guard of this thread */
static dt_fatal_handler g_handler; /* the program's policy outside guards (main installs it) */
static dt_guard_participant g_parts[DT_GUARD_PARTICIPANTS];
static int g_nparts; /* registered at load time (constructors: one thread) */

const char *dt_status_name(int status) {
    switch (status) {
    case DT_OK: return "ok";
    case DT_ERR_ARG: return "invalid argument";
    case DT_ERR_OOM: return "out of memory";
    case DT_ERR_DEVICE: return "device error";
    default: return "unknown status";
    }
}

int dt_last_status(void) { return t_status; }
const char *dt_last_error(void) { return t_msg; }

int dt_set_error(int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t_msg, sizeof t_msg, fmt, ap);
    va_end(ap);
    t_status = status;
    return status;
}

void dt_set_fatal_handler(dt_fatal_handler h) { g_handler = h; }

static DT_NORETURN void raise_status(void) {
    if (t_guard) siglongjmp(t_guard->jb, 1);
    fflush(stdout);
    fprintf(stderr, "deftc: %s\n", t_msg);
    fflush(stderr);
    if (g_handler) g_handler(1);
    /* No guard and no handler: a library entry that should have opened a guard did not. The
     * library has no caller to return to and does not end processes on its own terms. */
    fputs("deftc: internal error: a failure outside any guarded call, and no fatal handler installed\n", stderr);
    __builtin_trap();
}

void dt_fail_at(int status, const char *what, const char *file, int line, const char *fmt, ...) {
    va_list ap;
    int n = snprintf(t_msg, sizeof t_msg, "%s at %s:%d: ", what, file, line);
    if (n < 0 || n >= (int)sizeof t_msg) n = 0;
    va_start(ap, fmt);
    vsnprintf(t_msg + n, sizeof t_msg - (size_t)n, fmt, ap);
    va_end(ap);
    t_status = status ? status : DT_ERR_ARG;
    raise_status();
}

void dt_rethrow(void) {
    if (!t_status) t_status = DT_ERR_ARG;
    raise_status();
}

void dt_guard_register(dt_guard_participant p) {
    if (g_nparts == DT_GUARD_PARTICIPANTS) __builtin_trap(); /* a build-time mistake: raise the constant */
    int i = g_nparts++;
    while (i > 0 && g_parts[i - 1].order > p.order) {
        g_parts[i] = g_parts[i - 1];
        i--;
    }
    g_parts[i] = p;
}

void dt_guard_enter(dt_guard *g) {
    for (int i = 0; i < g_nparts; i++) g->marks[i] = g_parts[i].mark();
    g->prev = t_guard;
    t_guard = g;
}

int dt_guard_leave(dt_guard *g) {
    t_guard = g->prev;
    for (int i = 0; i < g_nparts; i++)
        if (g_parts[i].leave) g_parts[i].leave(t_guard == NULL);
    return DT_OK;
}

int dt_guard_unwind(dt_guard *g) {
    /* Popped first: a failure while releasing goes to the outer guard, not back here. */
    t_guard = g->prev;
    int status = t_status ? t_status : DT_ERR_ARG;
    for (int i = 0; i < g_nparts; i++) g_parts[i].release(g->marks[i]);
    if (!t_guard)
        for (int i = 0; i < g_nparts; i++)
            if (g_parts[i].leave) g_parts[i].leave(1);
    t_status = status;
    return status;
}

int dt_guard_active(void) { return t_guard != NULL; }

int dt_call(void (*fn)(void *), void *arg) {
    dt_guard g;
    DT_GUARD(g) return dt_guard_unwind(&g);
    fn(arg);
    return dt_guard_leave(&g);
}

/* ---- failure injection ---- */

static __thread long t_inject_at[DT_INJECT_KINDS], t_inject_seen[DT_INJECT_KINDS];

void dt_inject_arm(dt_inject_kind kind, long n) {
    t_inject_at[kind] = n;
    t_inject_seen[kind] = 0;
}

int dt_inject_hit(dt_inject_kind kind) {
    if (!t_inject_at[kind]) return 0;
    if (++t_inject_seen[kind] != t_inject_at[kind]) return 0;
    t_inject_at[kind] = 0; /* one failure per arming: the retry must succeed */
    return 1;
}

long dt_inject_count(dt_inject_kind kind) { return t_inject_seen[kind]; }

void dt_set_quiet(int quiet) { g_quiet = quiet; }

void dt_warn(const char *fmt, ...) {
    va_list ap;
    if (g_quiet) return;
    fflush(stdout);
    fputs("deftc: warning: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int dt_errf(dt_err *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void *dt_try_malloc(size_t bytes) {
    if (dt_inject_hit(DT_INJECT_HOST_ALLOC)) return NULL;
    return malloc(bytes ? bytes : 1);
}

void *dt_xmalloc(size_t bytes) {
    void *p = dt_try_malloc(bytes);
    if (!p) dt_fail(DT_ERR_OOM, "out of host memory allocating %zu bytes", bytes);
    return p;
}

void *dt_xcalloc(size_t count, size_t size) {
    void *p = dt_inject_hit(DT_INJECT_HOST_ALLOC) ? NULL : calloc(count ? count : 1, size ? size : 1);
    if (!p) dt_fail(DT_ERR_OOM, "out of host memory allocating %zu x %zu bytes", count, size);
    return p;
}

/* On failure p is untouched (realloc's rule): its owner still holds and frees it. */
void *dt_xrealloc(void *p, size_t bytes) {
    void *q = dt_inject_hit(DT_INJECT_HOST_ALLOC) ? NULL : realloc(p, bytes ? bytes : 1);
    if (!q) dt_fail(DT_ERR_OOM, "out of host memory reallocating to %zu bytes", bytes);
    return q;
}

char *dt_xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = dt_xmalloc(n);
    memcpy(p, s, n);
    return p;
}

void *dt_scratch_get(dt_scratch *s, size_t bytes) {
    if (bytes > s->cap) {
        /* Emptied before the allocation: if it raises, the owner's dt_scratch_free must not free
         * the old block a second time (dt_file_read's error path did). */
        free(s->p);
        s->p = NULL;
        s->cap = 0;
        size_t cap = bytes + bytes / 4 + 64;
        s->p = dt_xmalloc(cap);
        s->cap = cap;
    }
    return s->p;
}

void *dt_scratch_try(dt_scratch *s, size_t bytes) {
    if (bytes > s->cap) {
        free(s->p);
        s->cap = 0;
        size_t cap = bytes + bytes / 4 + 64;
        if (!(s->p = dt_try_malloc(cap))) return NULL;
        s->cap = cap;
    }
    return s->p;
}

void dt_scratch_free(dt_scratch *s) {
    free(s->p);
    s->p = NULL;
    s->cap = 0;
}

long dt_env_long(const char *name, long def) {
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end) dt_fatal("environment variable %s=%s is not an integer", name, v);
    return x;
}

int dt_num_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
