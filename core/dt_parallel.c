#include "core/dt_parallel.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/dt_common.h"

#define MAX_THREADS 256
/* How long a worker waiting for the next call, and the caller waiting for the workers, spin
 * before they sleep on the condition variable. A CPU training step makes ~500 calls a few
 * microseconds apart; waking a sleeping thread costs a futex call on each side and, on a
 * virtual machine whose idle core halts, tens of microseconds before it runs - 10-20 % of a
 * step of configs/sample_cpu.cfg. Spinning a little longer than those gaps keeps the workers
 * awake through a step; between steps and when the program is done with the pool they sleep,
 * so a waiting pool costs nothing. After the first SPIN_PAUSE_NS the spin yields the core
 * between looks: on a machine with more runnable threads than cores (other programs, or
 * replicas) the thread being waited for may need this very core. */
#define SPIN_NS 50000
#define SPIN_PAUSE_NS 5000

static struct {
    int started, nthreads;
    pthread_t th[MAX_THREADS];
    pthread_mutex_t mu;
    pthread_mutex_t submit; /* one caller at a time (data-parallel replicas share the pool) */
    pthread_cond_t go, done;
    _Atomic uint64_t generation; /* bumped once per call: the workers' signal to start */
    _Atomic int pending;         /* workers still running the current call */
    int sleepers;                /* workers asleep on go (under mu) */
    int caller_asleep;           /* the caller is asleep on done (under mu) */
    dt_range_fn fn;
    void *ctx;
    int64_t n, chunk;
    _Atomic int failed;          /* a part of the current call raised: the first one's status */
    char err[1024];              /* and message (written by the part that set failed) */
} P = {.mu = PTHREAD_MUTEX_INITIALIZER, .submit = PTHREAD_MUTEX_INITIALIZER, .go = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

static __thread int t_in_worker;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Spins until the generation moves on from `seen` (gen given) or the count reaches 0, for at
 * most SPIN_NS; returns whether it did. */
static int spin_for(_Atomic uint64_t *gen, uint64_t seen, _Atomic int *count) {
    uint64_t t0 = 0, t = 0;
    for (unsigned i = 0;; i++) {
        if (gen ? atomic_load_explicit(gen, memory_order_acquire) != seen
                : atomic_load_explicit(count, memory_order_acquire) == 0)
            return 1;
        if (t - t0 > SPIN_PAUSE_NS && t0) {
            sched_yield();
        } else {
            cpu_relax();
            if ((i & 63) != 63) continue;
        }
        t = now_ns();
        if (!t0) t0 = t;
        else if (t - t0 > SPIN_NS) return 0;
    }
}

/* Each part runs under its own guard: a raise must not unwind a worker's stack (nothing to
 * return to) nor the caller's past the pool's locks. The first failure is kept and raised again
 * on the calling thread once every part is done (dt_parallel_for). */
static void run_part(int part) {
    int64_t b = part * P.chunk, e = b + P.chunk;
    if (e > P.n) e = P.n;
    if (b >= e) return;
    dt_guard g;
    DT_GUARD(g) {
        int st = dt_guard_unwind(&g), none = 0;
        if (atomic_compare_exchange_strong(&P.failed, &none, st))
            snprintf(P.err, sizeof P.err, "%s", dt_last_error());
        return;
    }
    P.fn(P.ctx, b, e);
    dt_guard_leave(&g);
}

static void *worker(void *arg) {
    int part = (int)(intptr_t)arg;
    uint64_t seen = 0;
    t_in_worker = 1;
    for (;;) {
        if (!spin_for(&P.generation, seen, NULL)) {
            pthread_mutex_lock(&P.mu);
            P.sleepers++;
            while (atomic_load(&P.generation) == seen) pthread_cond_wait(&P.go, &P.mu);
            P.sleepers--;
            pthread_mutex_unlock(&P.mu);
        }
        seen = atomic_load(&P.generation);
        run_part(part);
        if (atomic_fetch_sub_explicit(&P.pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&P.mu);
            if (P.caller_asleep) pthread_cond_signal(&P.done);
            pthread_mutex_unlock(&P.mu);
        }
    }
    return NULL;
}

void dt_parallel_set_threads(int n) {
    if (P.started) return;
    P.nthreads = n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : n;
}

int dt_parallel_threads(void) {
    if (!P.nthreads) {
        long n = dt_env_long("DT_THREADS", 0);
        dt_parallel_set_threads(n > 0 ? (int)n : dt_num_cores());
    }
    return P.nthreads;
}

/* A forked child has none of the workers: it starts its own pool on its first call instead of
 * waiting forever for the parent's (the tests run whole trainings in forked children). */
static void forget_pool_after_fork(void) {
    P.started = 0;
    atomic_store(&P.generation, 0);
    atomic_store(&P.pending, 0);
    P.sleepers = 0;
    P.caller_asleep = 0;
    P.mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    P.submit = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    P.go = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
    P.done = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
}

static void register_fork_handler(void) { pthread_atfork(NULL, NULL, forget_pool_after_fork); }

static void start_pool(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, register_fork_handler);
    int n = dt_parallel_threads();
    /* Part 0 runs on the calling thread; workers take parts 1..n-1. */
    /* A worker that cannot start shrinks the pool (raising here would hold the submit lock). */
    for (int i = 1; i < n; i++)
        if (pthread_create(&P.th[i], NULL, worker, (void *)(intptr_t)i) != 0) {
            dt_warn("pthread_create failed for CPU worker %d: %d threads", i, i);
            P.nthreads = i;
            break;
        }
    P.started = 1;
}

void dt_parallel_for(int64_t n, int64_t grain, dt_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int nt = dt_parallel_threads();
    if (t_in_worker || nt == 1 || n <= grain) {
        fn(ctx, 0, n);
        return;
    }
    /* Several host threads (replicas) may call at once: they take turns, each with the whole
     * pool and the same partition as alone, so results do not depend on the other caller. */
    pthread_mutex_lock(&P.submit);
    if (!P.started) {
        start_pool();
        nt = P.nthreads;
        if (nt == 1) {
            pthread_mutex_unlock(&P.submit);
            fn(ctx, 0, n);
            return;
        }
    }
    int64_t parts = dt_ceil_div(n, grain);
    if (parts > nt) parts = nt;
    /* The call's fields are published by the generation's release store: a worker reads them
     * after it saw the new generation (acquire), spinning or woken. */
    P.fn = fn;
    P.ctx = ctx;
    P.n = n;
    P.chunk = dt_ceil_div(n, parts);
    atomic_store_explicit(&P.pending, nt - 1, memory_order_relaxed);
    atomic_store_explicit(&P.failed, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&P.generation, 1, memory_order_release);
    /* A worker that went to sleep checked the generation under mu first: it either saw the new
     * one or is on go by the time this lock is ours. */
    pthread_mutex_lock(&P.mu);
    if (P.sleepers) pthread_cond_broadcast(&P.go);
    pthread_mutex_unlock(&P.mu);
    t_in_worker = 1;
    run_part(0);
    t_in_worker = 0;
    if (!spin_for(NULL, 0, &P.pending)) {
        pthread_mutex_lock(&P.mu);
        P.caller_asleep = 1;
        while (atomic_load(&P.pending) > 0) pthread_cond_wait(&P.done, &P.mu);
        P.caller_asleep = 0;
        pthread_mutex_unlock(&P.mu);
    }
    int failed = atomic_load(&P.failed);
    char err[sizeof P.err];
    if (failed) memcpy(err, P.err, sizeof err);
    pthread_mutex_unlock(&P.submit);
    if (failed) {
        dt_set_error(failed, "%s", err);
        dt_rethrow();
    }
}
