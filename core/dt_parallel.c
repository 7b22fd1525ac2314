#include "core/dt_parallel.h"

#include <pthread.h>

#include "core/dt_common.h"

#define MAX_THREADS 256

static struct {
    int started, nthreads;
    pthread_t th[MAX_THREADS];
    pthread_mutex_t mu;
    pthread_mutex_t submit; /* one caller at a time (data-parallel replicas share the pool) */
    pthread_cond_t go, done;
    uint64_t generation;
    int pending;
    dt_range_fn fn;
    void *ctx;
    int64_t n, chunk;
} P = {.mu = PTHREAD_MUTEX_INITIALIZER, .submit = PTHREAD_MUTEX_INITIALIZER, .go = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

static __thread int t_in_worker;

static void run_part(int part) {
    int64_t b = part * P.chunk, e = b + P.chunk;
    if (e > P.n) e = P.n;
    if (b < e) P.fn(P.ctx, b, e);
}

static void *worker(void *arg) {
    int part = (int)(intptr_t)arg;
    uint64_t seen = 0;
    t_in_worker = 1;
    for (;;) {
        pthread_mutex_lock(&P.mu);
        while (P.generation == seen) pthread_cond_wait(&P.go, &P.mu);
        seen = P.generation;
        pthread_mutex_unlock(&P.mu);
        run_part(part);
        pthread_mutex_lock(&P.mu);
        if (--P.pending == 0) pthread_cond_signal(&P.done);
        pthread_mutex_unlock(&P.mu);
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
    P.generation = 0;
    P.pending = 0;
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
    for (int i = 1; i < n; i++)
        if (pthread_create(&P.th[i], NULL, worker, (void *)(intptr_t)i) != 0)
            dt_fatal("pthread_create failed for CPU worker %d", i);
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
    if (!P.started) start_pool();
    int64_t parts = dt_ceil_div(n, grain);
    if (parts > nt) parts = nt;
    pthread_mutex_lock(&P.mu);
    P.fn = fn;
    P.ctx = ctx;
    P.n = n;
    P.chunk = dt_ceil_div(n, parts);
    P.pending = nt - 1;
    P.generation++;
    pthread_cond_broadcast(&P.go);
    pthread_mutex_unlock(&P.mu);
    t_in_worker = 1;
    run_part(0);
    t_in_worker = 0;
    pthread_mutex_lock(&P.mu);
    while (P.pending > 0) pthread_cond_wait(&P.done, &P.mu);
    pthread_mutex_unlock(&P.mu);
    pthread_mutex_unlock(&P.submit);
}
