/* The loader's options, its construction (checks, epoch sizes, decoder, ring, threads) and the
 * ring API the training loop calls: start an epoch, take the next batch, release it, statistics
 * (dt_loader.h; the parts: dt_loader_internal.h). */
#include "data/dt_loader_internal.h"

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

dt_loader_opts dt_loader_default_opts(int train) {
    dt_loader_opts o;
    memset(&o, 0, sizeof o);
    o.batch = 64;
    o.image_size = 224;
    o.train = train;
    o.workers = 0;
    o.seed = 0;
    o.cache = 0;
    o.cache_size = 0;
    o.cache_max_mb = 0;
    o.drop_last = -1;
    o.prefetch = 4;
    o.gpu_decoders = 0; /* the default: DT_LOADER_GPU_DECODERS, at most prefetch - 1 */
    o.crop_scale_min = 0.08;
    o.max_pixels = DT_IMAGE_MAX_PIXELS;
    return o;
}

/* Checks the options against the dataset and fills in their defaults (*cache_size: the
 * cached images' size). 0, or -1 with err set. */
static int check_opts(const dt_dataset *ds, dt_loader_opts *o, int *cache_size, dt_err *err) {
    if (!ds || ds->count <= 0) {
        dt_errf(err, "loader: the dataset is empty");
        return -1;
    }
    if (o->batch < 1 || o->batch > 1 << 20) {
        dt_errf(err, "loader: batch size %d is out of range (1 .. 1048576)", o->batch);
        return -1;
    }
    if (o->image_size < 8 || o->image_size > 8192) {
        dt_errf(err, "loader: image size %d is out of range (8 .. 8192)", o->image_size);
        return -1;
    }
    if (o->workers < 0 || o->workers > 1024) {
        dt_errf(err, "loader: %d workers is out of range (0 = one per core, at most 1024)", o->workers);
        return -1;
    }
    if (o->prefetch == 0) o->prefetch = 4;
    if (o->prefetch < 2 || o->prefetch > 64) {
        dt_errf(err, "loader: prefetch %d is out of range (2 .. 64 batches)", o->prefetch);
        return -1;
    }
    if (o->gpu_decoders == 0) o->gpu_decoders = DT_LOADER_GPU_DECODERS < o->prefetch - 1 ? DT_LOADER_GPU_DECODERS
                                                                                          : o->prefetch - 1;
    if (o->gpu_decoders < 1 || o->gpu_decoders > DT_LOADER_MAX_GPU_DECODERS) {
        dt_errf(err, "loader: gpu_decoders %d is out of range (1 .. %d)", o->gpu_decoders, DT_LOADER_MAX_GPU_DECODERS);
        return -1;
    }
    /* N decode threads on N consecutive batches while the consumer holds one: N + 1 slots */
    if (o->gpu_decoders > o->prefetch - 1) {
        dt_errf(err, "loader: gpu_decoders %d needs prefetch %d or more (prefetch %d lets at most prefetch - 1 = %d "
                "batches decode while the consumer holds one)", o->gpu_decoders, o->gpu_decoders + 1, o->prefetch,
                o->prefetch - 1);
        return -1;
    }
    if (o->crop_scale_min == 0) o->crop_scale_min = 0.08;
    if (!(o->crop_scale_min > 0 && o->crop_scale_min <= 1)) {
        dt_errf(err, "loader: crop_scale_min %g is out of range (0, 1]", o->crop_scale_min);
        return -1;
    }
    if (o->drop_last < 0) o->drop_last = o->train ? 1 : 0;
    *cache_size = o->cache_size ? o->cache_size : dt_val_resize_size(o->image_size);
    if (o->cache && *cache_size < o->image_size) {
        dt_errf(err, "loader: cache_size %d is smaller than the image size %d", *cache_size, o->image_size);
        return -1;
    }
    if (o->cache_max_mb < 0) {
        dt_errf(err, "loader: cache_max_mb %d is negative", o->cache_max_mb);
        return -1;
    }
    if (o->max_pixels == 0) o->max_pixels = DT_IMAGE_MAX_PIXELS;
    if (o->max_pixels < 0) {
        dt_errf(err, "loader: max_pixels %lld is negative", (long long)o->max_pixels);
        return -1;
    }
    if (ds->count > INT32_MAX) {
        dt_errf(err, "loader: %lld images is more than the loader supports (2^31 - 1)", (long long)ds->count);
        return -1;
    }
    if (o->subset < 0) {
        dt_errf(err, "loader: subset %lld is negative", (long long)o->subset);
        return -1;
    }
    if (o->decode < DT_DECODE_CPU || o->decode > DT_DECODE_AUTO) {
        dt_errf(err, "loader: decode %d is not one of cpu, gpu, auto", o->decode);
        return -1;
    }
    if (o->decode == DT_DECODE_GPU && o->cache) {
        dt_errf(err, "loader: decode=gpu with cache=1: the cache keeps images decoded on the CPU; use one of them");
        return -1;
    }
    /* One class: the softmax of one logit is 1, the loss 0 from the first step, nothing is
     * learnt, and the run would look fine. */
    if (o->train && ds->num_classes < 2) {
        dt_errf(err, "loader: %s has one class (%s): training a classifier needs at least two (with one, the loss is 0 "
                "from the first step and nothing is learnt); put each class's images in its own folder",
                ds->dir, ds->classes[0]);
        return -1;
    }
    return 0;
}

/* This shard's share of the m images used: *nb batches an epoch of *n_used images. 0, or -1
 * with err set when drop_last leaves no batch. */
static int epoch_sizes(const dt_dataset *ds, dt_loader_opts *o, int64_t *m_out, int64_t *nb_out, int64_t *used_out,
                       dt_err *err) {
    int64_t m = o->subset > 0 && o->subset < ds->count ? o->subset : ds->count;
    if (o->shards == 0) o->shards = 1;
    if (o->shards < 1 || o->shard < 0 || o->shard >= o->shards) {
        dt_errf(err, "loader: shard %d of %d", o->shard, o->shards);
        return -1;
    }
    /* This shard's epoch positions: shard, shard + shards, ... (drop_last: whole global batches) */
    int64_t nb, n_used;
    if (o->drop_last) {
        nb = m / ((int64_t)o->batch * o->shards);
        n_used = nb * o->batch;
    } else {
        n_used = m > o->shard ? dt_ceil_div(m - o->shard, o->shards) : 0;
        nb = dt_ceil_div(n_used, o->batch);
    }
    if (nb == 0 && o->drop_last) {
        if (o->shards > 1)
            dt_errf(err, "loader: %s has %lld images, fewer than one batch of %d on each of %d replicas (drop_last is on)",
                    ds->dir, (long long)m, o->batch, o->shards);
        else
            dt_errf(err, "loader: %s has %lld images, fewer than one batch of %d (drop_last is on)", ds->dir,
                    (long long)m, o->batch);
        return -1;
    }

    *m_out = m;
    *nb_out = nb;
    *used_out = n_used;
    return 0;
}

/* The GPU decoders and their arrays, the first (whose buffers the others share) last; the
 * threads are joined before. */
static void free_gpu_decoders(dt_loader *l) {
    for (int i = l->ndec - 1; i >= 0; i--) {
        loader_decoder *dc = &l->decs[i];
        l->api->free(dc->gpu);
        free(dc->jobs), free(dc->rows), free(dc->refused), free(dc->host);
    }
    free(l->decs);
    l->decs = NULL;
    l->ndec = 0;
    l->gpu = NULL;
}

/* The gpu_decoders GPU decoders, the first owning the buffers the others share (dt_gpu_decode.h):
 * NULL, or the reason one of them could not be made. */
static const char *make_gpu_decoders(dt_loader *l, int device, dt_err *e) {
    const int n = l->o.gpu_decoders;
    l->decs = dt_xcalloc((size_t)n, sizeof *l->decs);
    for (int i = 0; i < n; i++) {
        dt_err ei;
        loader_decoder *dc = &l->decs[i];
        dc->l = l, dc->i = i;
        dc->gpu = l->api->make(device, l->B, l->S, l->K, i ? l->gpu : NULL, &ei);
        if (!dc->gpu) {
            if (n == 1) snprintf(e->msg, sizeof e->msg, "%s", ei.msg);
            else snprintf(e->msg, sizeof e->msg, "decoder %d of %d: %.900s", i + 1, n, ei.msg);
            return e->msg;
        }
        l->ndec++;
        if (!i) l->gpu = dc->gpu;
    }
    return NULL;
}

/* The decoder: the GPU's when asked for (or auto and there), else the CPU workers'. 0, or -1
 * with err set when decode=gpu cannot be had. */
static int choose_decoder(dt_loader *l, dt_err *err) {
    const dt_loader_opts o = l->o;
#ifdef DT_LIBJPEG
    const char *cpu_name = "libjpeg-turbo, libpng, stb_image for BMP";
#else
    const char *cpu_name = "stb_image";
#endif
    snprintf(l->decoder, sizeof l->decoder, "cpu (%s)", cpu_name);
    if (o.decode != DT_DECODE_CPU) {
        dt_err e;
        const char *why = NULL;
        const int real = l->api == &loader_nvjpeg; /* an emulator needs neither CUDA nor a GPU */
        if (o.cache) why = "cache=1 keeps CPU-decoded images";
        else if (real && !dt_built_with_cuda()) why = "deftc was built without CUDA";
        else if (real && !dt_gpu_ready()) why = "no GPU context (dt_gpu_init comes before the loader)";
        else why = make_gpu_decoders(l, real ? dt_gpu_current() : 0, &e);
        if (why && o.decode == DT_DECODE_GPU) {
            dt_errf(err, "loader: decode=gpu: %s", why);
            return -1;
        }
        if (why) free_gpu_decoders(l);
        if (why) snprintf(l->decoder, sizeof l->decoder, "cpu (%s; decode=auto: %.600s)", cpu_name, why);
        else if (l->ndec == 1)
            snprintf(l->decoder, sizeof l->decoder, "gpu: %s (PNG, BMP and the JPEGs it does not take: %s)",
                     l->api->describe(l->gpu), cpu_name);
        else snprintf(l->decoder, sizeof l->decoder, "gpu: %d decoders, %s (PNG, BMP and the JPEGs they do not take: %s)",
                      l->ndec, l->api->describe(l->gpu), cpu_name);
    }
    return 0;
}

/* The ring of K batch slots (pinned when the GPU context exists), and the GPU decoder's
 * per-batch tables. */
static void alloc_ring(dt_loader *l) {
    l->slots = dt_xcalloc((size_t)l->K, sizeof *l->slots);
    for (int k = 0; k < l->K; k++) {
        l->slots[k].images = dt_host_alloc((size_t)l->B * l->S * l->S * 3, l->pinned); /* [B, S, S, 3] u8 */
        l->slots[k].labels = dt_host_alloc((size_t)l->B * sizeof(int32_t), l->pinned);
        l->slots[k].state = SLOT_FREE;
        if (l->gpu) {
            slot *sk = &l->slots[k];
            sk->files = dt_xcalloc((size_t)l->B, sizeof *sk->files);
            sk->jobs = dt_xcalloc((size_t)l->B, sizeof *sk->jobs);
            sk->route = dt_xcalloc((size_t)l->B, sizeof *sk->route);
            sk->idx = dt_xcalloc((size_t)l->B, sizeof *sk->idx);
            sk->pos = dt_xcalloc((size_t)l->B, sizeof *sk->pos);
        }
    }
    for (int i = 0; i < l->ndec; i++) {
        loader_decoder *dc = &l->decs[i];
        dc->jobs = dt_xcalloc((size_t)l->B, sizeof *dc->jobs);
        dc->rows = dt_xcalloc((size_t)l->B, sizeof *dc->rows);
        dc->refused = dt_xcalloc((size_t)l->B, sizeof *dc->refused);
        dc->host = dt_xcalloc((size_t)l->B, sizeof *dc->host);
    }
}

/* The CPU workers, and the GPU decode threads. 0, or -1 with err set. */
static int start_threads(dt_loader *l, dt_err *err) {
    l->threads = dt_xcalloc((size_t)l->nthreads, sizeof *l->threads);
    for (int t = 0; t < l->nthreads; t++) {
        worker_ctx *w = dt_xcalloc(1, sizeof *w);
        w->l = l;
        int rc = pthread_create(&l->threads[t], NULL, loader_worker_main, w);
        if (rc != 0) {
            free(w);
            dt_errf(err, "loader: cannot start worker thread %d of %d: %s", t + 1, l->nthreads, strerror(rc));
            return -1;
        }
        l->nstarted++;
    }
    for (int i = 0; i < l->ndec; i++) {
        int rc = pthread_create(&l->decs[i].thread, NULL, loader_decode_main, &l->decs[i]);
        if (rc != 0) {
            dt_errf(err, "loader: cannot start GPU decode thread %d of %d: %s", i + 1, l->ndec, strerror(rc));
            return -1;
        }
        l->decs[i].started = 1;
    }
    return 0;
}

dt_loader *dt_loader_new(const dt_dataset *ds, const dt_loader_opts *opts, dt_err *err) {
    return loader_new_with(ds, opts, &loader_nvjpeg, err);
}

dt_loader *loader_new_with(const dt_dataset *ds, const dt_loader_opts *opts, const loader_gpu_api *api, dt_err *err) {
    dt_loader_opts o = opts ? *opts : dt_loader_default_opts(1);
    int cache_size = 0;
    int64_t m, nb, n_used;
    if (check_opts(ds, &o, &cache_size, err) || epoch_sizes(ds, &o, &m, &nb, &n_used, err)) return NULL;

    dt_loader *l = dt_xcalloc(1, sizeof *l);
    l->ds = ds;
    l->o = o;
    l->api = api;
    l->S = o.image_size;
    l->B = o.batch;
    l->K = o.prefetch;
    l->n = ds->count;
    l->nb = nb;
    l->n_used = n_used;
    l->nthreads = o.workers ? o.workers : dt_num_cores();
    l->epoch = -1;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->work_cv, NULL);
    pthread_cond_init(&l->ready_cv, NULL);
    pthread_cond_init(&l->idle_cv, NULL);
    /* Pinned only when the GPU context exists now; remembered so that free matches. */
    l->pinned = dt_gpu_ready();
    if (choose_decoder(l, err)) {
        dt_loader_free(l);
        return NULL;
    }
    alloc_ring(l);
    l->bad = dt_xcalloc((size_t)dt_ceil_div(l->n, 64), sizeof *l->bad);
    l->class_bad = dt_xcalloc((size_t)ds->num_classes, sizeof *l->class_bad);
    l->max_pixels = o.max_pixels;
    loader_choose_images(l, m);
    l->perm = dt_xmalloc((size_t)l->m * sizeof *l->perm);
    if (loader_probe_classes(l, err)) {
        dt_loader_free(l);
        return NULL;
    }
    if (o.cache) {
        l->cache = dt_xcalloc((size_t)l->n, sizeof *l->cache);
        l->cache_size = cache_size;
        l->cache_max = (size_t)o.cache_max_mb << 20;
    }
    if (start_threads(l, err)) {
        dt_loader_free(l);
        return NULL;
    }
    return l;
}

void dt_loader_start_epoch(dt_loader *l, int epoch) {
    pthread_mutex_lock(&l->mu);
    l->active = 0; /* no new claims; let the samples in flight finish */
    while (l->inflight > 0) pthread_cond_wait(&l->idle_cv, &l->mu);
    l->gen++;
    for (int k = 0; k < l->K; k++) {
        /* a batch still held is abandoned: its device buffer is reused after the reads queued so far */
        if (l->gpu && l->slots[k].state == SLOT_HELD) l->api->released(l->gpu, k);
        l->slots[k].state = SLOT_FREE;
    }
    memcpy(l->perm, l->base, (size_t)l->m * sizeof *l->perm);
    if (l->o.train) {
        /* Fisher-Yates from the stream (seed, epoch, tag): a function of the epoch only. */
        dt_rng r;
        dt_rng_derive(&r, l->o.seed, (uint64_t)epoch, 0x53485546464c45ULL /* "SHUFFLE" */);
        for (int64_t i = l->m - 1; i > 0; i--) {
            int64_t j = dt_rng_below(&r, (uint32_t)(i + 1));
            int64_t t = l->perm[i];
            l->perm[i] = l->perm[j];
            l->perm[j] = t;
        }
    }
    l->epoch = epoch;
    l->next_item = 0;
    l->next_batch = 0;
    l->dec_next = 0;
    l->dec_failed = 0;
    l->n_gpu = l->n_not_jpeg = l->n_layout = l->n_refused = 0;
    l->gpu_ms = 0;
    l->gpu_times = (dt_gpu_decode_times){0, 0, 0};
    l->skipped = 0;
    l->images_out = 0;
    l->decode_ms = 0;
    l->wait_ms = 0;
    l->t_start = dt_now_ms();
    l->t_end = 0;
    l->started = 1;
    l->active = 1;
    pthread_cond_broadcast(&l->work_cv);
    pthread_cond_broadcast(&l->ready_cv); /* the decode thread */
    pthread_mutex_unlock(&l->mu);
}

int dt_loader_next(dt_loader *l, dt_batch *b) {
    pthread_mutex_lock(&l->mu);
    if (!l->started) {
        pthread_mutex_unlock(&l->mu);
        dt_fatal("dt_loader_next: call dt_loader_start_epoch first");
    }
    if (l->failed) {
        pthread_mutex_unlock(&l->mu);
        return -1;
    }
    if (l->next_batch >= l->nb) {
        pthread_mutex_unlock(&l->mu);
        return 0;
    }
    slot *s = &l->slots[l->next_batch % l->K];
    if (s->state == SLOT_HELD) {
        pthread_mutex_unlock(&l->mu);
        dt_fatal("dt_loader_next: all %d batch slots are held (batch %lld was never released); release a "
                 "batch before fetching the one %d later",
                 l->K, (long long)s->batch, l->K);
    }
    double t0 = dt_now_ms();
    /* slot k's own batch, never a later one: with several decode threads batch k + 1 may be
     * done first, and a failure is this batch's */
    const int done = l->gpu ? SLOT_DECODED : SLOT_READY;
    while (!((s->state == done || s->state == SLOT_FAILED) && s->batch == l->next_batch) && !l->failed)
        pthread_cond_wait(&l->ready_cv, &l->mu);
    double waited = dt_now_ms() - t0;
    l->wait_ms += waited;
    l->total_wait_ms += waited;
    if (!l->failed && s->state == SLOT_FAILED) loader_fail_locked(l, s->why);
    if (l->failed) {
        pthread_mutex_unlock(&l->mu);
        return -1;
    }
    s->state = SLOT_HELD;
    b->images = l->gpu ? NULL : s->images;
    b->dev_images = l->gpu ? l->api->images(l->gpu, (int)(l->next_batch % l->K)) : NULL;
    if (l->gpu) l->api->acquire(l->gpu, (int)(l->next_batch % l->K)); /* deftc's stream waits for it */
    b->labels = s->labels;
    b->n = s->n;
    b->index = l->next_batch;
    b->slot_ = (int)(l->next_batch % l->K);
    b->gen_ = l->gen;
    l->next_batch++;
    l->images_out += s->n;
    if (l->next_batch == l->nb) { /* the epoch's last batch: every sample of it is done */
        l->t_end = dt_now_ms();
        if (l->skipped)
            dt_warn("epoch %d of %s: %lld images did not decode and were replaced by the next ones (%lld bad files "
                    "known)",
                    l->epoch, l->ds->dir, (long long)l->skipped, (long long)atomic_load(&l->bad_count));
    }
    pthread_mutex_unlock(&l->mu);
    return 1;
}

void dt_loader_release(dt_loader *l, dt_batch *b) {
    if (!b->images && !b->dev_images) return;
    pthread_mutex_lock(&l->mu);
    slot *s = &l->slots[b->slot_];
    /* A batch of an abandoned epoch (start_epoch came between) is no longer ours to free. */
    if (b->gen_ == l->gen && s->state == SLOT_HELD && s->batch == b->index) {
        if (l->gpu) l->api->released(l->gpu, b->slot_); /* before a worker can refill it */
        s->state = SLOT_FREE;
        pthread_cond_broadcast(&l->work_cv);
    }
    pthread_mutex_unlock(&l->mu);
    b->images = NULL;
    b->dev_images = NULL;
    b->labels = NULL;
}

int64_t dt_loader_batches(const dt_loader *l) { return l->nb; }
int64_t dt_loader_size(const dt_loader *l) { return l->m; }
int dt_loader_classes(const dt_loader *l) { return l->classes_used; }

dt_loader_stats dt_loader_epoch_stats(dt_loader *l) {
    dt_loader_stats st;
    memset(&st, 0, sizeof st);
    pthread_mutex_lock(&l->mu);
    st.epoch = l->epoch;
    st.batches = l->next_batch;
    st.images = l->images_out;
    st.skipped = l->skipped;
    st.decode_ms = l->decode_ms;
    st.wait_ms = l->wait_ms;
    st.total_wait_ms = l->total_wait_ms;
    st.epoch_ms = l->started ? (l->t_end ? l->t_end : dt_now_ms()) - l->t_start : 0;
    st.gpu_decode = l->gpu != NULL;
    st.gpu_images = l->n_gpu;
    st.cpu_not_jpeg = l->n_not_jpeg;
    st.cpu_jpeg_layout = l->n_layout;
    st.cpu_refused = l->n_refused;
    st.gpu_ms = l->gpu_ms;
    st.gpu_wait_ms = l->gpu_times.wait_ms;
    st.gpu_nvjpeg_ms = l->gpu_times.nvjpeg_ms;
    st.gpu_augment_ms = l->gpu_times.augment_ms;
    pthread_mutex_unlock(&l->mu);
    st.bad_files = atomic_load(&l->bad_count);
    st.cache_images = l->cache ? atomic_load(&l->cache_images) : 0;
    st.cache_bytes = l->cache ? atomic_load(&l->cache_bytes) : 0;
    return st;
}

void dt_loader_stats_str(const dt_loader_stats *s, char *buf, size_t cap) {
    int len = snprintf(buf, cap,
                       "epoch %d: %lld batches, %lld images in %.1f s, %lld skipped (%lld bad files), decode %.1f s "
                       "(all workers), waited %.2f s",
                       s->epoch, (long long)s->batches, (long long)s->images, s->epoch_ms / 1e3,
                       (long long)s->skipped, (long long)s->bad_files, s->decode_ms / 1e3, s->wait_ms / 1e3);
    if (s->cache_images && len > 0 && (size_t)len < cap)
        len += snprintf(buf + len, cap - (size_t)len, ", cache %lld images %.1f MB", (long long)s->cache_images,
                        s->cache_bytes / 1048576.0);
    if (s->gpu_decode && len > 0 && (size_t)len < cap)
        snprintf(buf + len, cap - (size_t)len,
                 "; GPU decode: %lld images, on the CPU %lld (%lld not JPEG, %lld JPEG layout, %lld refused by nvJPEG), "
                 "decode threads %.2f s (in nvJPEG's calls %.2f, the augmentation %.2f, waiting for a buffer %.2f)",
                 (long long)s->gpu_images, (long long)(s->cpu_not_jpeg + s->cpu_jpeg_layout + s->cpu_refused),
                 (long long)s->cpu_not_jpeg, (long long)s->cpu_jpeg_layout, (long long)s->cpu_refused, s->gpu_ms / 1e3,
                 s->gpu_nvjpeg_ms / 1e3, s->gpu_augment_ms / 1e3, s->gpu_wait_ms / 1e3);
}

const char *dt_loader_decoder(const dt_loader *l) { return l->decoder; }

const char *dt_loader_error(dt_loader *l) {
    pthread_mutex_lock(&l->mu);
    const char *m = l->failed ? l->errmsg : "";
    pthread_mutex_unlock(&l->mu);
    return m;
}

void dt_loader_free(dt_loader *l) {
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->work_cv);
    pthread_cond_broadcast(&l->ready_cv);
    pthread_mutex_unlock(&l->mu);
    for (int t = 0; t < l->nstarted; t++) pthread_join(l->threads[t], NULL);
    for (int i = 0; i < l->ndec; i++)
        if (l->decs[i].started) pthread_join(l->decs[i].thread, NULL);
    free_gpu_decoders(l);
    free(l->threads);
    for (int k = 0; l->slots && k < l->K; k++) {
        slot *sk = &l->slots[k];
        dt_host_free(sk->images, l->pinned);
        dt_host_free(sk->labels, l->pinned);
        for (int j = 0; sk->files && j < l->B; j++) dt_scratch_free(&sk->files[j]);
        free(sk->files), free(sk->jobs), free(sk->route), free(sk->idx), free(sk->pos);
    }
    free(l->slots);
    free(l->perm);
    free(l->base);
    free(l->class_n);
    free((void *)l->bad);
    free((void *)l->class_bad);
    if (l->cache) {
        for (int64_t i = 0; i < l->n; i++) {
            cached *c = atomic_load(&l->cache[i]);
            if (c) {
                free(c->img.pix);
                free(c);
            }
        }
        free((void *)l->cache);
    }
    pthread_cond_destroy(&l->work_cv);
    pthread_cond_destroy(&l->ready_cv);
    pthread_cond_destroy(&l->idle_cv);
    pthread_mutex_destroy(&l->mu);
    free(l);
}
