/* dt_loader_internal.h: the loader's state and its parts, private to data/dt_loader*.c:
 *   dt_loader.c          options, construction, the ring API (dt_loader.h)
 *   dt_loader_index.c    the images an epoch draws from, the classes' probe, bad files
 *   dt_loader_workers.c  the CPU workers: read, decode, augment into a batch slot
 *   dt_loader_cache.c    the decoded-image cache
 *   dt_loader_gpu.c      the GPU decode thread */
#ifndef DT_LOADER_INTERNAL_H
#define DT_LOADER_INTERNAL_H

#include "data/dt_loader.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "core/dt_alloc.h"
#include "core/dt_device.h"
#include "core/dt_file.h"
#include "data/dt_gpu_decode.h"
#include "data/dt_image.h"
#include "data/dt_image_header.h"
#include "core/dt_rng.h"
#include "core/dt_timer.h"
#include "data/dt_transform.h"

/* Slot life cycle: FREE -> FILLING (a worker claimed its first sample) -> READY (all samples
 * written) -> HELD (handed to the training loop) -> FREE (released). With GPU decode, READY ->
 * DECODING (a decode thread claimed it) -> DECODED -> HELD, or DECODING -> FAILED (the thread's
 * error in the slot's `why`, returned by dt_loader_next when it reaches that batch). Batch b
 * lives in slot b % K. All state changes happen under the loader mutex; the pixel writes of a
 * sample happen outside it, and the mutex hand-over (done++ under the lock, READY seen under
 * the lock) orders them before the consumer's (or the decode thread's) reads. */
enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_DECODING, SLOT_DECODED, SLOT_FAILED, SLOT_HELD };

/* GPU decode: where a row's pixels come from (the epoch's counts in dt_loader_stats). */
enum { ROUTE_GPU, ROUTE_NOT_JPEG, ROUTE_JPEG_LAYOUT, ROUTE_REFUSED };

typedef struct {
    uint8_t *images; /* [B, S, S, 3] u8 HWC */
    int32_t *labels; /* [B] i32 */
    int state;
    int64_t batch;
    int n, done;
    /* GPU decode only, [B] each: the row's file (kept encoded for nvJPEG), its job, route,
     * dataset index and epoch position (for a replacement found by the decode thread) */
    dt_scratch *files;
    dt_gpu_decode_job *jobs;
    int *route;
    int64_t *idx, *pos;
    char why[1024]; /* SLOT_FAILED: "GPU decode thread i of N: <message>" */
} slot;

/* The GPU decoder's calls that the loader makes, as dt_gpu_decode.h has them (loader_nvjpeg);
 * a test puts an emulator in their place (loader_new_with) to run the decode threads' claiming,
 * in-order delivery, errors and shutdown without a GPU. decode takes the batch's index in the
 * epoch besides (an emulator's failure injection; nvJPEG's does not need it). */
typedef struct {
    dt_gpu_decoder *(*make)(int device, int B, int S, int K, const dt_gpu_decoder *first, dt_err *err);
    const char *(*describe)(const dt_gpu_decoder *d);
    int (*hardware)(const dt_gpu_decoder *d);
    int (*supported)(const dt_gpu_decoder *d, const uint8_t *jpeg, size_t bytes, dt_gpu_parse **parse);
    void (*parse_free)(const dt_gpu_decoder *d, dt_gpu_parse *parse);
    void (*bind_thread)(const dt_gpu_decoder *d);
    int (*decode)(dt_gpu_decoder *d, int64_t batch, int k, const dt_gpu_decode_job *jobs, const int *rows, int n,
                  int *refused, dt_gpu_decode_times *times, dt_err *err);
    int (*finish)(dt_gpu_decoder *d, int k, const uint8_t *host_images, const int *rows, int n, dt_err *err);
    void (*acquire)(const dt_gpu_decoder *d, int k);
    const uint8_t *(*images)(const dt_gpu_decoder *d, int k);
    void (*released)(dt_gpu_decoder *d, int k);
    void (*free)(dt_gpu_decoder *d);
} loader_gpu_api;

extern const loader_gpu_api loader_nvjpeg;

/* One GPU decode thread (of gpu_decoders): its decoder (i > 0: sharing decs[0]'s buffers) and its
 * arrays [B] (the chosen jobs, their rows, why nvJPEG refused one, the rows copied up from the
 * host). */
typedef struct {
    struct dt_loader *l;
    int i; /* 0 .. ndec - 1 */
    dt_gpu_decoder *gpu;
    pthread_t thread;
    int started;
    dt_gpu_decode_job *jobs;
    int *rows, *refused, *host;
} loader_decoder;

/* A cached image: immutable once published (release store), read by any worker. */
typedef struct {
    dt_image img;
} cached;

struct dt_loader {
    const dt_dataset *ds;
    dt_loader_opts o;
    int S, B, K, nthreads, pinned;
    int64_t n, nb, n_used; /* images of the dataset, batches per epoch, samples used per epoch */
    int64_t m;             /* images an epoch draws from: all n, or the stratified sample */
    int64_t *base;         /* [m] their dataset indices, in dataset order */
    int64_t *class_n;      /* [classes] how many of them each class has */
    int classes_used;      /* classes with at least one */
    pthread_t *threads;
    int nstarted;

    pthread_mutex_t mu;
    pthread_cond_t work_cv;  /* workers: an item may be claimable (slot freed, epoch, stop) */
    pthread_cond_t ready_cv; /* consumer: a batch became ready */
    pthread_cond_t idle_cv;  /* start_epoch: the last in-flight sample finished */
    slot *slots;

    /* Epoch state, under mu. */
    int started, active, stop, epoch;
    int64_t gen;        /* incremented by every start_epoch: stale batches are recognized */
    int64_t *perm;      /* [m] epoch order; rewritten only while no sample is in flight */
    int64_t next_item;  /* next epoch position a worker claims */
    int64_t next_batch; /* next batch the consumer gets */
    int inflight;

    /* Statistics, under mu. */
    int64_t skipped, images_out;
    double decode_ms, wait_ms, total_wait_ms, t_start, t_end;
    int failed;
    char errmsg[1024];

    /* Files known not to decode: one bit per dataset index, set with atomic OR; per class, how
     * many; the first class all of whose files (in base) are bad (label + 1; 0 = none). */
    _Atomic uint64_t *bad;
    _Atomic int64_t bad_count;
    _Atomic int64_t *class_bad;
    atomic_int dead_class;
    int64_t max_pixels; /* images with more pixels are skipped before decoding */

    /* GPU decode: the decoders' calls (nvJPEG's or a test's emulator), the gpu_decoders threads
     * (decs[0].gpu is `gpu`, whose buffers the others share: the workers' header checks and the
     * consumer's calls go to it), the next batch a decode thread claims, whether one failed this
     * epoch (no more claims: the batches before the failed one are still delivered) */
    const loader_gpu_api *api;
    dt_gpu_decoder *gpu;
    loader_decoder *decs;
    int ndec;
    int64_t dec_next;
    int dec_failed;
    int64_t n_gpu, n_not_jpeg, n_layout, n_refused; /* this epoch, under mu */
    double gpu_ms;
    dt_gpu_decode_times gpu_times; /* this epoch, under mu */
    char decoder[1024]; /* dt_loader_decoder */

    /* Cache: one pointer per dataset index, published with compare-and-swap. */
    _Atomic(cached *) *cache;
    int cache_size;
    size_t cache_max;
    _Atomic size_t cache_bytes;
    _Atomic int64_t cache_images;
    atomic_int cache_full_warned;
};

/* Per-worker buffers, reused for every sample. */
typedef struct {
    dt_loader *l;
    dt_scratch file, resample;
    dt_gpu_parse *parse; /* GPU decode: this worker's nvJPEG header parser */
} worker_ctx;

/* A GPU-decode batch row a worker fills (NULL: decode on the CPU). */
typedef struct {
    slot *s;
    int j;
} gpu_row;

/* dt_loader_index.c */
int loader_is_bad(dt_loader *l, int64_t i);
void loader_mark_bad(dt_loader *l, int64_t i, const char *why);
void loader_no_image_decodes(const dt_loader *l, char *buf, size_t cap);
void loader_dead_class_error(const dt_loader *l, int c, char *buf, size_t cap);
int loader_read_and_probe(dt_loader *l, dt_scratch *file, int64_t idx, size_t *n, int *iw, int *ih, dt_err *err);
void loader_choose_images(dt_loader *l, int64_t n);
int loader_probe_classes(dt_loader *l, dt_err *err);

/* dt_loader_cache.c */
const dt_image *loader_cached_image(worker_ctx *w, int64_t idx, dt_image *tmp, int *owned, dt_err *err);

/* dt_loader_workers.c */
int loader_fill_sample(worker_ctx *w, const int64_t *perm, int epoch, int64_t p, uint8_t *out, int32_t *label,
                       const gpu_row *g);
void loader_fail_locked(dt_loader *l, const char *why);
void *loader_worker_main(void *arg);

/* dt_loader_gpu.c */
void *loader_decode_main(void *arg);

/* dt_loader.c: dt_loader_new with the GPU decoder's calls `api` (dt_loader_new: loader_nvjpeg;
 * tests: an emulator, which skips the CUDA build and GPU context checks). */
dt_loader *loader_new_with(const dt_dataset *ds, const dt_loader_opts *opts, const loader_gpu_api *api, dt_err *err);

#endif
