/* dt_common.h: error reporting, checked allocation and small helpers shared by every layer.
 *
 * Two kinds of failure, two mechanisms - and the library never ends the process (issue 36):
 *  - failures deep inside an op (a shape that does not fit, a failed CUDA call, out of
 *    memory) raise with dt_fatal() / dt_fail(): they cannot be returned through every kernel
 *    and helper, so they unwind to the nearest guard (dt_guard, below) of the calling thread.
 *    Every library entry a foreign caller reaches (the deformable C API, dt_call) opens one: the
 *    raise releases what the call took since the guard (its scratch memory, the tensor scopes
 *    and tape nodes it opened - each through a participant that registered at load time, since
 *    those layers sit above this one), sets the thread-local status and message, and the entry
 *    returns the status. The library is then usable for the next call.
 *    Outside any guard (a program calling layers directly) the raise prints "deftc: <message>"
 *    and calls the handler the program's main() installed (dt_set_fatal_handler(exit)): ending
 *    the process is the program's policy, not the library's. With no handler either it traps
 *    (a bug: an unguarded entry).
 *  - errors in what a user hands us (a file, a config value, a folder) are returned as a
 *    dt_err so that the caller decides: the programs print the message and exit non-zero, the
 *    tests check the message.
 * Statuses are negative so that -1 keeps meaning "bad argument" for callers of the C API before
 * statuses existed; out of memory is its own status, so callers can retry smaller.
 */
#ifndef DT_COMMON_H
#define DT_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
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

/* What a failed call returns (0: success). */
typedef enum {
    DT_OK = 0,
    DT_ERR_ARG = -1,    /* refused: arguments, shapes, state (the message says what was expected) */
    DT_ERR_OOM = -2,    /* out of host or device memory: a smaller call may succeed */
    DT_ERR_DEVICE = -3, /* a CUDA / cuBLAS / cuRAND / NCCL call failed (a capture violation too) */
} dt_status;
const char *dt_status_name(int status);

/* The calling thread's last failure: its status and "what at FILE:LINE: message" (or the C
 * API's argument message). Kept until the next failure. */
int dt_last_status(void);
const char *dt_last_error(void);
/* Records a failure without raising (the C API's argument checks); returns status. */
int dt_set_error(int status, const char *fmt, ...) DT_PRINTF(2, 3);

/* Raises status with "what at FILE:LINE: message": unwinds to the innermost guard of the
 * thread, or, outside any guard, prints and calls the program's fatal handler. */
DT_NORETURN void dt_fail_at(int status, const char *what, const char *file, int line, const char *fmt, ...)
    DT_PRINTF(5, 6);
#define dt_fatal(...) dt_fail_at(DT_ERR_ARG, "error", __FILE__, __LINE__, __VA_ARGS__)
#define dt_fail(status, ...) dt_fail_at((status), "error", __FILE__, __LINE__, __VA_ARGS__)
/* Raises the thread's last failure again (after a guard's own undo, into the outer guard). */
DT_NORETURN void dt_rethrow(void);
/* The program's policy for a failure outside any guard, called after the message is printed
 * with exit code 1; main()s install exit (dt_set_fatal_handler(exit)). */
typedef void (*dt_fatal_handler)(int code);
void dt_set_fatal_handler(dt_fatal_handler h);

/* A recovery point (sigsetjmp; no signal mask is saved: no system call per entry):
 *     dt_guard g;
 *     DT_GUARD(g) return dt_guard_unwind(&g);   // taken when the call below raised
 *     ... work that may raise ...
 *     return dt_guard_leave(&g);                 // 0
 * dt_guard_unwind releases what was taken since DT_GUARD (the participants, newest layer
 * first), pops the guard and returns the status. Locals changed after DT_GUARD and read in the
 * unwind branch must be volatile (setjmp's rule). Guards nest; each thread has its own. */
#define DT_GUARD_PARTICIPANTS 4
typedef struct dt_guard {
    sigjmp_buf jb;
    struct dt_guard *prev;
    size_t marks[DT_GUARD_PARTICIPANTS];
} dt_guard;
void dt_guard_enter(dt_guard *g);
int dt_guard_leave(dt_guard *g);
int dt_guard_unwind(dt_guard *g);
int dt_guard_active(void); /* 1 inside a guard of this thread */
#define DT_GUARD(g) dt_guard_enter(&(g)); if (sigsetjmp((g).jb, 0))
/* A layer above core that holds per-thread state a raise must undo registers at load time:
 * mark() at each guard's entry, release(mark) when a raise unwinds to it, leave(outermost)
 * when a guard is left normally. order: released in ascending order (0 first). */
typedef struct {
    int order;
    size_t (*mark)(void);
    void (*release)(size_t mark);
    void (*leave)(int outermost);
} dt_guard_participant;
void dt_guard_register(dt_guard_participant p);

/* Runs fn(arg) under a guard: 0, or the status with dt_last_error() set. The way for a program
 * or a foreign caller to call any layer or tensor function and get a status back. */
int dt_call(void (*fn)(void *), void *arg);

/* Failure injection (tests): the nth event of a kind from now fails - a host allocation (out of
 * memory), a device allocation (GPU out of memory), a device call (a kernel dispatched through
 * an op table on either device, every CUDA / cuBLAS / cuRAND check on the GPU). n = 0 disarms.
 * dt_inject_hit counts an event and says whether it is the one to fail. Per thread. */
typedef enum { DT_INJECT_HOST_ALLOC, DT_INJECT_DEVICE_ALLOC, DT_INJECT_DEVICE_CALL, DT_INJECT_KINDS } dt_inject_kind;
void dt_inject_arm(dt_inject_kind kind, long n);
int dt_inject_hit(dt_inject_kind kind);
long dt_inject_count(dt_inject_kind kind); /* events seen since the last arm */

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

/* Allocation that never returns NULL: running out of host memory raises DT_ERR_OOM. */
void *dt_xmalloc(size_t bytes);
void *dt_xcalloc(size_t count, size_t size);
void *dt_xrealloc(void *p, size_t bytes);
char *dt_xstrdup(const char *s);

/* Allocation that may fail: NULL when out of memory (and under injection). */
void *dt_try_malloc(size_t bytes);

/* A growable scratch buffer, so hot loops (one per loader worker) do not malloc per item. */
typedef struct {
    void *p;
    size_t cap;
} dt_scratch;
void *dt_scratch_get(dt_scratch *s, size_t bytes); /* contents not preserved */
void *dt_scratch_try(dt_scratch *s, size_t bytes); /* NULL (and s empty) when out of memory */
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
