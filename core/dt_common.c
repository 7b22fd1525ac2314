#include "core/dt_common.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int g_quiet = 0;

void dt_fatal_at(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "deftc: error at %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    exit(1);
}

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

void *dt_xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) dt_fatal("out of host memory allocating %zu bytes", bytes);
    return p;
}

void *dt_xcalloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) dt_fatal("out of host memory allocating %zu x %zu bytes", count, size);
    return p;
}

void *dt_xrealloc(void *p, size_t bytes) {
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) dt_fatal("out of host memory reallocating to %zu bytes", bytes);
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
        free(s->p);
        size_t cap = bytes + bytes / 4 + 64;
        s->p = dt_xmalloc(cap);
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
