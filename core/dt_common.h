/* dt_common.h: error reporting, checked allocation and small helpers shared by every layer.
 *
 * Two kinds of failure, two mechanisms:
 *  - programming errors and device failures (a shape that does not fit an op, a failed CUDA
 *    call, out of memory) stop the program with dt_fatal(): one line naming file:line and the
 *    problem, exit status 1. Nothing sensible can continue after them.
 *  - errors in what a user hands us (a file, a config value, a folder) are returned as a
 *    dt_err so that the caller decides: the programs print the message and exit non-zero, the
 *    tests check the message.
 */
#ifndef DT_COMMON_H
#define DT_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/dt_api.h"

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

#if defined(__GNUC__)
#define DT_NORETURN __attribute__((noreturn))
#define DT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DT_NORETURN
#define DT_PRINTF(a, b)
#endif

/* Prints "deftc: error at FILE:LINE: message" to stderr and exits with status 1. */
DT_NORETURN void dt_fatal_at(const char *file, int line, const char *fmt, ...) DT_PRINTF(3, 4);
#define dt_fatal(...) dt_fatal_at(__FILE__, __LINE__, __VA_ARGS__)

/* A precondition of an op: when it fails the message says what was expected. */
#define DT_REQUIRE(cond, ...)          \
    do {                               \
        if (!(cond)) dt_fatal(__VA_ARGS__); \
    } while (0)

/* Warnings go to stderr, prefixed "deftc: warning: "; dt_set_quiet(1) silences them (tests). */
void dt_warn(const char *fmt, ...) DT_PRINTF(1, 2);
void dt_set_quiet(int quiet);

/* A recoverable error: the message names the thing that was wrong (file, key, value). */
typedef struct {
    char msg[1024];
} dt_err;
/* Formats into err (if not NULL) and returns -1, so callers can `return dt_errf(err, ...)`. */
int dt_errf(dt_err *err, const char *fmt, ...) DT_PRINTF(2, 3);

/* Allocation that never returns NULL: running out of host memory is fatal. */
void *dt_xmalloc(size_t bytes);
void *dt_xcalloc(size_t count, size_t size);
void *dt_xrealloc(void *p, size_t bytes);
char *dt_xstrdup(const char *s);

/* A growable scratch buffer, so hot loops (one per loader worker) do not malloc per item. */
typedef struct {
    void *p;
    size_t cap;
} dt_scratch;
void *dt_scratch_get(dt_scratch *s, size_t bytes); /* contents not preserved */
void dt_scratch_free(dt_scratch *s);

/* Environment helpers: an unset or empty variable gives the default. */
long dt_env_long(const char *name, long def);

/* Integer ceil(a / b) for positive b. */
static inline int64_t dt_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Number of online CPU cores (at least 1). */
int dt_num_cores(void);

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
