/* dt_dist.h: the replicas of a data-parallel run and their collectives (all-reduce,
 * broadcast), on NCCL for GPUs and on shared memory for the CPU (its twin, which the tests run).
 *
 * A run has `world` replicas, each one host thread driving one device. The replicas of one
 * process share a dt_dist_group; each replica's thread joins it and gets its dt_dist handle.
 * Every replica calls the collectives in the same order with the same sizes (NCCL's rule; the
 * trainer's program order guarantees it).
 *
 * GPU (built with NCCL, DT_NCCL): one NCCL communicator per replica. Collectives run in
 * stream order on dt_stream(), except the _async all-reduce, which runs on the replica's own
 * communication stream once the work queued so far on dt_stream() is done, so that gradient
 * buckets are exchanged while the backward goes on; dt_dist_wait_async makes dt_stream() wait
 * for it. Results are identical on every replica (NCCL's ring all-reduce hands every rank the
 * same bytes) and the same from run to run for the same world size.
 *
 * CPU: the replicas are threads of one process; a collective is a barrier, each replica sums
 * its slice of the elements over the replicas in rank order and writes it to everyone, a
 * barrier. Deterministic, identical on every replica.
 *
 * Rendezvous (how the communicators find each other): rank 0 makes the NCCL unique id. In one
 * process it is handed over in memory. Across processes (several hosts), either set
 * `rendezvous` to a file on a filesystem every process sees: the process holding rank 0 writes
 * the id there (atomically, by rename) and the others poll for it; or leave it empty and set
 * NCCL_COMM_ID=host:port (rank 0's host) in every process: each derives the same id from the
 * address and rank 0 serves it over TCP (docs/training.md, "Several GPUs").
 *
 * Failure: a replica that fails calls dt_dist_abort with the reason. Every wait of the others
 * (dt_dist_wait_event, the barriers, dt_dist_allreduce_host) notices it and returns -1; the
 * trainer then stops that replica. The first reason is kept for the error message. A CUDA
 * error ends the whole process (DT_CHECK). On GPUs a watchdog thread per process also ends the
 * run when NCCL reports an error (ncclCommGetAsyncError: a peer process died) or a replica
 * has waited longer than DT_DIST_TIMEOUT seconds (default 600) for its peers, and then aborts
 * every local communicator (ncclCommAbort), which releases a replica blocked behind a
 * collective wherever it waits; one stuck inside an NCCL call cannot be released, and the
 * process exits with the reason 15 s later. */
#ifndef DT_DIST_H
#define DT_DIST_H

#include <stdint.h>

#include "core/dt_common.h"
#include "core/dt_device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_dist_group dt_dist_group;
typedef struct dt_dist dt_dist;

typedef struct {
    dt_dev dev;
    int local;              /* replicas (threads) in this process */
    const int *gpus;        /* [local] the GPU of each local replica (dev == DT_GPU) */
    int world;              /* replicas in the run: `local` on one host (0 means `local`) */
    int first_rank;         /* global rank of this process's first replica (0 on one host) */
    const char *rendezvous; /* several processes: the file the NCCL id is passed through */
} dt_dist_opts;

/* 1 when this build can run `dev` replicas in parallel: the CPU always; GPUs with NCCL. */
int dt_dist_available(dt_dev dev);
/* "NCCL 2.28.3", "shared memory" or "none (built without NCCL)". */
const char *dt_dist_backend(dt_dev dev);

dt_dist_group *dt_dist_group_new(const dt_dist_opts *o, dt_err *err);
void dt_dist_group_free(dt_dist_group *g); /* after every replica left */

/* Called by each replica's thread, for GPUs after dt_gpu_use(its device). Blocks until all
 * replicas joined (NCCL's init is collective); -1 with err set when that fails or the run was
 * aborted meanwhile. */
int dt_dist_join(dt_dist_group *g, int local_index, dt_dist **d, dt_err *err);
void dt_dist_leave(dt_dist *d);
int dt_dist_rank(const dt_dist *d);
dt_dist_group *dt_dist_group_of(dt_dist *d);

/* In-place all-reduce of n values on the replica's device, in stream order. average: the
 * mean over replicas instead of the sum. */
void dt_dist_allreduce_f32(dt_dist *d, float *buf, int64_t n, int average);
void dt_dist_allreduce_f64(dt_dist *d, double *buf, int64_t n); /* sum */
/* Every replica's buf becomes root's. */
void dt_dist_broadcast_f32(dt_dist *d, float *buf, int64_t n, int root);
/* The overlapped all-reduce (see above); the CPU runs it at once. */
void dt_dist_allreduce_f32_async(dt_dist *d, float *buf, int64_t n, int average);
void dt_dist_wait_async(dt_dist *d);

/* Sums n <= 64 host doubles over the replicas (metrics); blocks. 0, or -1 when aborted. */
int dt_dist_allreduce_host(dt_dist *d, double *v, int n);
/* Waits for a cudaEvent_t (passed as void *) recorded on the replica's device, watching for an
 * abort meanwhile (then -1). The CPU has no events: returns 0 at once unless aborted. */
int dt_dist_wait_event(dt_dist *d, void *event);

/* on = 0: this replica expects no collective for a while (evaluation, writing a checkpoint),
 * so the watchdog's timeout does not apply to it; on = 1 (the default) restores it. */
void dt_dist_watch(dt_dist *d, int on);

/* Ends the run on every replica; the first reason (printf-style) is kept. */
/* What the watchdog calls (with 1) when a replica is still stuck inside NCCL after an abort:
 * the program's policy (build/train: _exit, since the stuck threads cannot be joined); without
 * one the watchdog reports it and stops. */
void dt_dist_set_stuck_handler(void (*handler)(int code));
void dt_dist_abort(dt_dist_group *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int dt_dist_aborted(dt_dist_group *g);
const char *dt_dist_abort_reason(dt_dist_group *g); /* "" while not aborted */

#ifdef __cplusplus
}
#endif
#endif
