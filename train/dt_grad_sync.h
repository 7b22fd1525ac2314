/* dt_grad_sync.h: averaging the gradients of data-parallel replicas, in buckets started while
 * the backward is still running (as PyTorch's DDP does).
 *
 * Layout: every parameter's gradient is a view into one flat buffer per replica,
 *
 *   flat (1 + sum of numel)  = [ loss | bucket 0 | bucket 1 | ... ]
 *
 * with the parameters in backward order (the reverse of the model's list: the classifier's
 * gradient is ready first), cut into buckets of about bucket_bytes. Slot 0 carries the
 * replica's loss, so the first bucket's average is also the global loss: every replica logs
 * the same number and stops on the same NaN, at no extra collective.
 *
 * During dt_backward the autograd hook (dt_set_grad_ready_hook) reports each parameter whose
 * gradient is final; a bucket whose parameters are all in is averaged across replicas on the
 * communication stream (dt_dist_allreduce_f32_async) while the backward goes on. Buckets
 * start strictly in order, so every replica issues the same collectives in the same order.
 * dt_grad_sync_end starts whatever is left (a parameter no node reached gets a zero gradient)
 * and makes the compute stream wait for the exchange before the optimizer. */
#ifndef DT_GRAD_SYNC_H
#define DT_GRAD_SYNC_H

#include <stddef.h>
#include <stdint.h>

#include "core/dt_dist.h"
#include "core/dt_param.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The plan, a pure function (unit-tested): numel[i] of n parameters in the model's order;
 * writes offset[i] (element offset of parameter i's gradient in the flat buffer) and
 * bucket_of[i], and the buckets' [start, start + len) ranges of the flat buffer (bucket 0
 * starts at 0, the loss slot). A bucket closes once it holds at least cap_elems elements; a
 * parameter is never split. Returns the number of buckets (<= n). */
int dt_bucket_plan(const int64_t *numel, int n, int64_t cap_elems, int64_t *offset, int *bucket_of, int64_t *start,
                   int64_t *len);

typedef struct {
    const dt_tensor *p;
    int index; /* in the model's list */
} dt_grad_sync_entry;

typedef struct {
    dt_dist *dist;
    dt_params *params;
    dt_tensor *flat;      /* (1 + total) floats on the replica's device */
    int n, nb;            /* parameters, buckets */
    int64_t *offset;      /* [n] */
    int *bucket_of;       /* [n] */
    int64_t *start, *len; /* [nb] */
    int *pending;         /* [nb] parameters not yet reported this step */
    int *reported;        /* [n] */
    int next;             /* first bucket not started */
    dt_grad_sync_entry *by_ptr; /* [n] the parameters sorted by address, for the hook's lookup */
} dt_grad_sync;

/* Makes the flat buffer, points every parameter's gradient into it and installs the hook on
 * the calling thread. */
void dt_grad_sync_init(dt_grad_sync *s, dt_params *ps, dt_dist *d, size_t bucket_bytes);
void dt_grad_sync_free(dt_grad_sync *s);
/* Where the step's loss goes (device float) before the backward. */
float *dt_grad_sync_loss_slot(dt_grad_sync *s);
void dt_grad_sync_begin(dt_grad_sync *s); /* before dt_backward */
void dt_grad_sync_end(dt_grad_sync *s);   /* after it, before the optimizer */

#ifdef __cplusplus
}
#endif
#endif
