/* Data-parallel collectives: NCCL on GPUs, shared memory on the CPU (see dt_dist.h). */
#include "core/dt_dist.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/dt_alloc.h"
#ifdef DT_CUDA
#include "core/dt_cuda.h"
#endif
#ifdef DT_NCCL
#include <nccl.h>
#endif

#define HOST_MAX 64 /* dt_dist_allreduce_host's largest n */

struct dt_dist_group {
    dt_dist_opts o;
    double timeout_s; /* a wait for the peers longer than this ends the run (DT_DIST_TIMEOUT) */
    int gpus[DT_MAX_GPUS];
    /* abort: the flag is read without the lock by every wait */
    atomic_int aborted;
    pthread_mutex_t mu;
    char reason[1024];
    /* CPU collectives: each replica's buffer, an abortable barrier */
    void *bufs[DT_MAX_GPUS];
    pthread_cond_t cv;
    int arrived;
    uint64_t generation;
    double aborted_at; /* monotonic seconds */
#ifdef DT_NCCL
    ncclUniqueId id;
    /* the watchdog (GPU groups): NCCL errors, stalls, and the communicators' abort */
    pthread_t watchdog;
    int watchdog_running;
    atomic_int stop_watchdog;
    dt_dist *joined[DT_MAX_GPUS]; /* under mu */
#endif
};

struct dt_dist {
    dt_dist_group *g;
    int local, rank, world;
#ifdef DT_NCCL
    /* NCCL allows one thread at a time on a communicator: the replica's calls and the
     * watchdog's take this lock (the watchdog only tries it, so it never waits on a replica
     * stuck inside NCCL). */
    pthread_mutex_t mu;
    ncclComm_t comm;
    int comm_aborted;           /* under mu */
    _Atomic double heartbeat;   /* monotonic seconds of the last sign of progress */
    atomic_int watching;        /* 0: the replica waits for nothing now (evaluation, a checkpoint) */
    cudaStream_t comm_stream;
    cudaEvent_t ready, exchanged, host_done;
    double *host_dev, *host_pinned; /* (HOST_MAX) */
#endif
};

int dt_dist_available(dt_dev dev) {
#ifdef DT_NCCL
    (void)dev;
    return 1;
#else
    return dev == DT_CPU;
#endif
}

const char *dt_dist_backend(dt_dev dev) {
    if (dev == DT_CPU) return "shared memory";
#ifdef DT_NCCL
    static char v[32];
    snprintf(v, sizeof v, "NCCL %d.%d.%d", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
    return v;
#else
    return "none (deftc was built without NCCL)";
#endif
}

/* ---- abort ---- */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void (*g_stuck_handler)(int code);
void dt_dist_set_stuck_handler(void (*handler)(int code)) { g_stuck_handler = handler; }

void dt_dist_abort(dt_dist_group *g, const char *fmt, ...) {
    pthread_mutex_lock(&g->mu);
    if (!atomic_load(&g->aborted)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(g->reason, sizeof g->reason, fmt, ap);
        va_end(ap);
        g->aborted_at = now_s();
        atomic_store(&g->aborted, 1);
    }
    pthread_cond_broadcast(&g->cv); /* wakes the barrier */
    pthread_mutex_unlock(&g->mu);
}

int dt_dist_aborted(dt_dist_group *g) { return atomic_load(&g->aborted); }

const char *dt_dist_abort_reason(dt_dist_group *g) { return atomic_load(&g->aborted) ? g->reason : ""; }

/* ---- the group ---- */

#ifdef DT_NCCL
#define NCCL_TRY(call, err, what)                                                                     \
    do {                                                                                              \
        ncclResult_t r_ = (call);                                                                     \
        if (r_ != ncclSuccess && r_ != ncclInProgress)                                                \
            return dt_errf(err, "%s: %s failed: %s", what, #call, ncclGetErrorString(r_));            \
    } while (0)
#define NCCL_CHECK(call)                                                                              \
    do {                                                                                              \
        ncclResult_t r_ = (call);                                                                     \
        if (r_ != ncclSuccess) dt_fatal("NCCL error: %s failed: %s", #call, ncclGetErrorString(r_)); \
    } while (0)

/* Several processes: the NCCL id through a file every process sees. Rank 0's process writes
 * it whole (temporary file + rename); the others wait for it (up to 10 minutes). */
static int rendezvous_file(dt_dist_group *g, dt_err *err) {
    const char *path = g->o.rendezvous;
    if (g->o.first_rank == 0) {
        NCCL_TRY(ncclGetUniqueId(&g->id), err, "rendezvous");
        char tmp[1100];
        snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
        FILE *f = fopen(tmp, "wb");
        if (!f) return dt_errf(err, "rendezvous: cannot write %s: %s", tmp, strerror(errno));
        int ok = fwrite(&g->id, sizeof g->id, 1, f) == 1;
        ok = fclose(f) == 0 && ok;
        if (!ok || rename(tmp, path) != 0) {
            unlink(tmp);
            return dt_errf(err, "rendezvous: cannot write %s: %s", path, strerror(errno));
        }
        return 0;
    }
    for (int waited_ms = 0; waited_ms < 600000; waited_ms += 100) {
        FILE *f = fopen(path, "rb");
        if (f) {
            int ok = fread(&g->id, sizeof g->id, 1, f) == 1;
            fclose(f);
            if (ok) return 0;
        }
        usleep(100000);
    }
    return dt_errf(err, "rendezvous: %s did not appear within 10 minutes (is the process of rank 0 running, and is "
                   "the file on a filesystem both see?)", path);
}
#endif

#ifdef DT_NCCL
/* Aborts d's communicator unless already done; 0 when d's replica is inside an NCCL call now
 * (the lock is taken only if free: the watchdog must not wait on a stuck replica). */
static int abort_comm(dt_dist *d, int wait) {
    if (wait) pthread_mutex_lock(&d->mu);
    else if (pthread_mutex_trylock(&d->mu) != 0) return 0;
    if (!d->comm_aborted) ncclCommAbort(d->comm); /* ends its collectives, also those waiting for peers */
    d->comm_aborted = 1;
    pthread_mutex_unlock(&d->mu);
    return 1;
}

#define GRACE_S 15.0 /* after an abort, how long the replicas get to stop before the process exits */

/* Every 50 ms: a replica whose NCCL reports an error (a peer process died, a link broke) or
 * that has shown no progress for timeout_s ends the run; once it is ended, every local
 * communicator is aborted, which releases a replica blocked anywhere behind a collective (in
 * a wait, or in a copy from the device that queues after it). A replica stuck inside NCCL
 * itself cannot be released safely: then, after GRACE_S, the process exits with the reason
 * (checkpoints are written by rename, so nothing is left half-written). */
static void *watchdog_main(void *arg) {
    dt_dist_group *g = arg;
    while (!atomic_load(&g->stop_watchdog)) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        double t = now_s();
        int stuck = 0;
        char why[400] = "";
        pthread_mutex_lock(&g->mu);
        for (int i = 0; i < g->o.local; i++) {
            dt_dist *d = g->joined[i];
            if (!d) continue;
            if (!atomic_load(&g->aborted) && !why[0]) {
                ncclResult_t ae = ncclSuccess;
                if (pthread_mutex_trylock(&d->mu) == 0) {
                    if (!d->comm_aborted) ncclCommGetAsyncError(d->comm, &ae);
                    pthread_mutex_unlock(&d->mu);
                }
                double idle = t - atomic_load(&d->heartbeat);
                if (ae != ncclSuccess && ae != ncclInProgress)
                    snprintf(why, sizeof why, "replica %d: NCCL reports %s (a peer process died or a link broke)", d->rank,
                             ncclGetErrorString(ae));
                else if (atomic_load(&d->watching) && idle > g->timeout_s)
                    snprintf(why, sizeof why, "replica %d has waited %.0f s for the other replicas (DT_DIST_TIMEOUT=%.0f): "
                             "one of them died or hangs", d->rank, idle, g->timeout_s);
            }
            if (atomic_load(&g->aborted) && !abort_comm(d, 0)) stuck = 1;
        }
        int aborted = atomic_load(&g->aborted);
        double since = t - g->aborted_at;
        pthread_mutex_unlock(&g->mu);
        if (why[0]) dt_dist_abort(g, "%s", why); /* the communicators are aborted on the next round */
        if (aborted && stuck && since > GRACE_S) {
            fflush(NULL);
            fprintf(stderr, "train: error: %s (a replica is stuck inside NCCL %.0f s after the run ended%s)\n",
                    g->reason, since, g_stuck_handler ? ": exiting" : "");
            fflush(stderr);
            /* Ending the process is the program's decision (build/train installs _exit); a
             * library user keeps its process, and the watchdog stops watching. */
            if (g_stuck_handler) g_stuck_handler(1);
            return NULL;
        }
    }
    return NULL;
}
#endif

dt_dist_group *dt_dist_group_new(const dt_dist_opts *o, dt_err *err) {
    if (o->local < 1 || o->local > DT_MAX_GPUS) {
        dt_errf(err, "data parallel: %d replicas in one process (1 to %d)", o->local, DT_MAX_GPUS);
        return NULL;
    }
    if (!dt_dist_available(o->dev)) {
        dt_errf(err, "%d GPUs asked for, but deftc was built without NCCL: install NCCL (or point NCCL_HOME at it) "
                "and rebuild, or train on one GPU (gpus=1)", o->local);
        return NULL;
    }
    dt_dist_group *g = dt_xcalloc(1, sizeof *g);
    g->o = *o;
    if (!g->o.world) g->o.world = o->local;
    if (g->o.first_rank < 0 || g->o.first_rank + o->local > g->o.world) {
        dt_errf(err, "data parallel: ranks %d..%d of a world of %d", g->o.first_rank, g->o.first_rank + o->local - 1,
                g->o.world);
        free(g);
        return NULL;
    }
    if (o->dev == DT_CPU && g->o.world != o->local) {
        dt_errf(err, "data parallel on the CPU runs in one process (world %d, local %d)", g->o.world, o->local);
        free(g);
        return NULL;
    }
    if (o->gpus)
        for (int i = 0; i < o->local; i++) g->gpus[i] = o->gpus[i];
    g->o.gpus = g->gpus;
    g->timeout_s = (double)dt_env_long("DT_DIST_TIMEOUT", 600);
    if (g->timeout_s <= 0) g->timeout_s = 600;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
#ifdef DT_NCCL
    if (o->dev == DT_GPU) {
        int r = 0;
        const char *comm_id = getenv("NCCL_COMM_ID");
        if (g->o.world > o->local && o->rendezvous && o->rendezvous[0]) {
            r = rendezvous_file(g, err);
        } else if (g->o.world > o->local && comm_id && comm_id[0]) {
            /* NCCL's own rendezvous: with NCCL_COMM_ID=host:port every process derives the same
             * id from the address, and rank 0 serves it from ncclCommInitRank */
            ncclResult_t nr = ncclGetUniqueId(&g->id);
            if (nr != ncclSuccess) r = dt_errf(err, "ncclGetUniqueId (NCCL_COMM_ID=%s) failed: %s", comm_id, ncclGetErrorString(nr));
        } else if (g->o.world > o->local) {
            r = dt_errf(err, "data parallel over several processes needs a rendezvous: DT_DIST_FILE (a file every process "
                        "sees) or NCCL_COMM_ID (host:port of rank 0's host)");
        } else {
            ncclResult_t nr = ncclGetUniqueId(&g->id);
            if (nr != ncclSuccess) r = dt_errf(err, "ncclGetUniqueId failed: %s", ncclGetErrorString(nr));
        }
        if (!r) {
            int e = pthread_create(&g->watchdog, NULL, watchdog_main, g);
            if (e) r = dt_errf(err, "data parallel: cannot start the watchdog thread: %s", strerror(e));
            g->watchdog_running = !e;
        }
        if (r) {
            dt_dist_group_free(g);
            return NULL;
        }
    }
#endif
    return g;
}

void dt_dist_group_free(dt_dist_group *g) {
    if (!g) return;
#ifdef DT_NCCL
    if (g->watchdog_running) {
        atomic_store(&g->stop_watchdog, 1);
        pthread_join(g->watchdog, NULL);
    }
#endif
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
}

int dt_dist_rank(const dt_dist *d) { return d->rank; }
dt_dist_group *dt_dist_group_of(dt_dist *d) { return d->g; }

int dt_dist_join(dt_dist_group *g, int local_index, dt_dist **out, dt_err *err) {
    *out = NULL;
    if (dt_dist_aborted(g)) return dt_errf(err, "%s", g->reason);
    dt_dist *d = dt_xcalloc(1, sizeof *d);
    d->g = g;
    d->local = local_index;
    d->rank = g->o.first_rank + local_index;
    d->world = g->o.world;
#ifdef DT_NCCL
    if (g->o.dev == DT_GPU) {
        pthread_mutex_init(&d->mu, NULL);
        atomic_store(&d->heartbeat, now_s());
        atomic_store(&d->watching, 1);
        /* the init is collective: a peer that never comes is caught by the watchdog's timeout,
         * after which the process exits (this call cannot be interrupted) */
        pthread_mutex_lock(&g->mu);
        g->joined[local_index] = d;
        pthread_mutex_unlock(&g->mu);
        pthread_mutex_lock(&d->mu);
        ncclResult_t r = ncclCommInitRank(&d->comm, d->world, g->id, d->rank);
        if (r != ncclSuccess) d->comm_aborted = 1; /* nothing to abort or destroy */
        pthread_mutex_unlock(&d->mu);
        if (r != ncclSuccess) {
            pthread_mutex_lock(&g->mu);
            g->joined[local_index] = NULL;
            pthread_mutex_unlock(&g->mu);
            pthread_mutex_destroy(&d->mu);
            free(d);
            return dt_errf(err, "replica %d (GPU %d): ncclCommInitRank failed: %s", local_index, g->gpus[local_index],
                           ncclGetErrorString(r));
        }
        atomic_store(&d->heartbeat, now_s());
        DT_CHECK(cudaStreamCreateWithFlags(&d->comm_stream, cudaStreamNonBlocking));
        DT_CHECK(cudaEventCreateWithFlags(&d->ready, cudaEventDisableTiming));
        DT_CHECK(cudaEventCreateWithFlags(&d->exchanged, cudaEventDisableTiming));
        DT_CHECK(cudaEventCreateWithFlags(&d->host_done, cudaEventDisableTiming));
        d->host_dev = dt_gpu_malloc(HOST_MAX * sizeof(double));
        d->host_pinned = dt_host_alloc(HOST_MAX * sizeof(double), 1);
    }
#endif
    *out = d;
    return 0;
}

void dt_dist_leave(dt_dist *d) {
    if (!d) return;
#ifdef DT_NCCL
    if (d->g->o.dev == DT_GPU) {
        dt_dist_group *g = d->g;
        pthread_mutex_lock(&g->mu);
        g->joined[d->local] = NULL; /* out of the watchdog's sight */
        pthread_mutex_unlock(&g->mu);
        if (!d->comm_aborted) {
            /* A replica leaving normally has no collective pending (its last wait saw to that). */
            DT_CHECK(cudaStreamSynchronize(d->comm_stream));
            ncclCommDestroy(d->comm);
        }
        pthread_mutex_destroy(&d->mu);
        cudaStreamDestroy(d->comm_stream);
        cudaEventDestroy(d->ready);
        cudaEventDestroy(d->exchanged);
        cudaEventDestroy(d->host_done);
        dt_gpu_free(d->host_dev);
        dt_host_free(d->host_pinned, 1);
    }
#endif
    free(d);
}

/* ---- CPU collectives ---- */

/* All local replicas arrive; -1 when the run is aborted (now or while waiting). */
static int barrier(dt_dist_group *g) {
    pthread_mutex_lock(&g->mu);
    if (atomic_load(&g->aborted)) {
        pthread_mutex_unlock(&g->mu);
        return -1;
    }
    uint64_t gen = g->generation;
    if (++g->arrived == g->o.local) {
        g->arrived = 0;
        g->generation++;
        pthread_cond_broadcast(&g->cv);
    } else {
        while (g->generation == gen && !atomic_load(&g->aborted)) pthread_cond_wait(&g->cv, &g->mu);
    }
    int r = g->generation == gen ? -1 : 0;
    pthread_mutex_unlock(&g->mu);
    return r;
}

/* Replica `rank` sums elements [lo, hi) over the replicas, in rank order, and writes the
 * result (or the mean) into every replica's buffer. */
#define CPU_ALLREDUCE(T, d, buf, n, average)                                             \
    do {                                                                                 \
        dt_dist_group *g_ = (d)->g;                                                      \
        int W_ = g_->o.local;                                                            \
        g_->bufs[(d)->local] = (buf);                                                    \
        if (barrier(g_)) break;                                                          \
        int64_t lo_ = (n) * (d)->local / W_, hi_ = (n) * ((d)->local + 1) / W_;          \
        for (int64_t i_ = lo_; i_ < hi_; i_++) {                                         \
            T s_ = ((T *)g_->bufs[0])[i_];                                               \
            for (int k_ = 1; k_ < W_; k_++) s_ += ((T *)g_->bufs[k_])[i_];               \
            if (average) s_ /= (T)W_;                                                    \
            for (int k_ = 0; k_ < W_; k_++) ((T *)g_->bufs[k_])[i_] = s_;                \
        }                                                                                \
        barrier(g_);                                                                     \
    } while (0)

/* ---- collectives ---- */

#ifdef DT_NCCL
#define IS_NCCL(d) ((d)->g->o.dev == DT_GPU)
/* One NCCL call on d's communicator, under its lock; nothing once the communicator is aborted
 * (the run is ending: the replica stops at its next wait). */
#define NCCL_CALL(d, call)                                \
    do {                                                  \
        pthread_mutex_lock(&(d)->mu);                     \
        if (!(d)->comm_aborted) NCCL_CHECK(call);         \
        pthread_mutex_unlock(&(d)->mu);                   \
    } while (0)
#endif

void dt_dist_allreduce_f32(dt_dist *d, float *buf, int64_t n, int average) {
#ifdef DT_NCCL
    if (IS_NCCL(d)) {
        NCCL_CALL(d, ncclAllReduce(buf, buf, (size_t)n, ncclFloat32, average ? ncclAvg : ncclSum, d->comm, dt_stream()));
        return;
    }
#endif
    CPU_ALLREDUCE(float, d, buf, n, average);
}

void dt_dist_allreduce_f64(dt_dist *d, double *buf, int64_t n) {
#ifdef DT_NCCL
    if (IS_NCCL(d)) {
        NCCL_CALL(d, ncclAllReduce(buf, buf, (size_t)n, ncclFloat64, ncclSum, d->comm, dt_stream()));
        return;
    }
#endif
    CPU_ALLREDUCE(double, d, buf, n, 0);
}

void dt_dist_broadcast_f32(dt_dist *d, float *buf, int64_t n, int root) {
#ifdef DT_NCCL
    if (IS_NCCL(d)) {
        NCCL_CALL(d, ncclBroadcast(buf, buf, (size_t)n, ncclFloat32, root, d->comm, dt_stream()));
        return;
    }
#endif
    dt_dist_group *g = d->g;
    g->bufs[d->local] = buf;
    if (barrier(g)) return;
    if (d->rank != root) memcpy(buf, g->bufs[root], (size_t)n * sizeof(float));
    barrier(g); /* root's buffer is not touched before everyone copied it */
}

void dt_dist_allreduce_f32_async(dt_dist *d, float *buf, int64_t n, int average) {
#ifdef DT_NCCL
    if (IS_NCCL(d)) {
        DT_CHECK(cudaEventRecord(d->ready, dt_stream()));
        DT_CHECK(cudaStreamWaitEvent(d->comm_stream, d->ready, 0));
        NCCL_CALL(d, ncclAllReduce(buf, buf, (size_t)n, ncclFloat32, average ? ncclAvg : ncclSum, d->comm, d->comm_stream));
        return;
    }
#endif
    dt_dist_allreduce_f32(d, buf, n, average);
}

void dt_dist_wait_async(dt_dist *d) {
#ifdef DT_NCCL
    if (IS_NCCL(d)) {
        DT_CHECK(cudaEventRecord(d->exchanged, d->comm_stream));
        DT_CHECK(cudaStreamWaitEvent(dt_stream(), d->exchanged, 0));
        return;
    }
#endif
    (void)d;
}

int dt_dist_wait_event(dt_dist *d, void *event) {
#ifdef DT_NCCL
    if (IS_NCCL(d)) {
        cudaEvent_t ev = (cudaEvent_t)event;
        for (;;) {
            cudaError_t e = cudaEventQuery(ev);
            if (e == cudaSuccess) {
                atomic_store(&d->heartbeat, now_s());
                return 0;
            }
            if (e != cudaErrorNotReady) DT_CHECK(e);
            if (dt_dist_aborted(d->g)) { /* NCCL errors and stalls are the watchdog's to notice */
                abort_comm(d, 1);
                return -1;
            }
            struct timespec ts = {0, 20000}; /* 20 us: a step is milliseconds */
            nanosleep(&ts, NULL);
        }
    }
#endif
    (void)event;
    return dt_dist_aborted(d->g) ? -1 : 0;
}

void dt_dist_watch(dt_dist *d, int on) {
#ifdef DT_NCCL
    if (IS_NCCL(d)) {
        atomic_store(&d->heartbeat, now_s());
        atomic_store(&d->watching, on);
    }
#endif
    (void)d;
    (void)on;
}

int dt_dist_allreduce_host(dt_dist *d, double *v, int n) {
    if (n > HOST_MAX) dt_fatal("dt_dist_allreduce_host: %d values (at most %d)", n, HOST_MAX);
#ifdef DT_NCCL
    if (IS_NCCL(d)) {
        if (dt_dist_aborted(d->g)) return abort_comm(d, 1), -1;
        memcpy(d->host_pinned, v, (size_t)n * sizeof(double));
        DT_CHECK(cudaMemcpyAsync(d->host_dev, d->host_pinned, (size_t)n * sizeof(double), cudaMemcpyHostToDevice,
                                 dt_stream()));
        NCCL_CALL(d, ncclAllReduce(d->host_dev, d->host_dev, (size_t)n, ncclFloat64, ncclSum, d->comm, dt_stream()));
        DT_CHECK(cudaMemcpyAsync(d->host_pinned, d->host_dev, (size_t)n * sizeof(double), cudaMemcpyDeviceToHost,
                                 dt_stream()));
        DT_CHECK(cudaEventRecord(d->host_done, dt_stream()));
        if (dt_dist_wait_event(d, d->host_done)) return -1;
        memcpy(v, d->host_pinned, (size_t)n * sizeof(double));
        return 0;
    }
#endif
    double tmp[HOST_MAX];
    memcpy(tmp, v, (size_t)n * sizeof(double));
    dt_dist_group *g = d->g;
    g->bufs[d->local] = tmp;
    if (barrier(g)) return -1;
    /* every replica sums all buffers itself, in rank order: nobody writes a shared buffer */
    double s[HOST_MAX];
    for (int i = 0; i < n; i++) {
        s[i] = ((double *)g->bufs[0])[i];
        for (int k = 1; k < g->o.local; k++) s[i] += ((double *)g->bufs[k])[i];
    }
    if (barrier(g)) return -1; /* tmp stays alive until everyone read it */
    memcpy(v, s, (size_t)n * sizeof(double));
    return 0;
}
