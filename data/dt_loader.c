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
 * DECODING (the decode thread took it) -> DECODED -> HELD. Batch b lives in slot b % K. All
 * state changes happen under the loader mutex; the pixel writes of a sample happen outside
 * it, and the mutex hand-over (done++ under the lock, READY seen under the lock) orders them
 * before the consumer's (or the decode thread's) reads. */
enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_DECODING, SLOT_DECODED, SLOT_HELD };

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
} slot;

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

    /* GPU decode: the decoder, its thread, the next batch it decodes, its arrays [B] (the
     * chosen jobs, their rows, why nvJPEG refused one, the rows copied up from the host) */
    dt_gpu_decoder *gpu;
    pthread_t dec_thread;
    int dec_started;
    int64_t dec_next;
    dt_gpu_decode_job *dec_jobs;
    int *dec_rows, *dec_refused, *dec_host;
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
    o.crop_scale_min = 0.08;
    o.max_pixels = DT_IMAGE_MAX_PIXELS;
    return o;
}

static int is_bad(dt_loader *l, int64_t i) {
    return (atomic_load_explicit(&l->bad[i >> 6], memory_order_relaxed) >> (i & 63)) & 1;
}

/* Marks file i bad; warns the first time (exactly once across threads and epochs). When it
 * was the last good file of its class, the class is dead: the loader fails (see worker_main). */
static void mark_bad(dt_loader *l, int64_t i, const char *why) {
    uint64_t bit = 1ULL << (i & 63);
    uint64_t old = atomic_fetch_or_explicit(&l->bad[i >> 6], bit, memory_order_relaxed);
    if (!(old & bit)) {
        atomic_fetch_add_explicit(&l->bad_count, 1, memory_order_relaxed);
        dt_warn("%s (skipped from now on; the slot takes the next image)", why);
        int c = l->ds->labels[i];
        if (atomic_fetch_add(&l->class_bad[c], 1) + 1 == l->class_n[c]) {
            int none = 0;
            atomic_compare_exchange_strong(&l->dead_class, &none, c + 1);
        }
    }
}

/* Reads file idx into `file` and the size in its header, checked against the pixel cap. */
static int read_and_probe(dt_loader *l, dt_scratch *file, int64_t idx, size_t *n, int *iw, int *ih, dt_err *err) {
    const char *path = l->ds->paths[idx];
    if (dt_file_read(path, "", DT_IMAGE_MAX_FILE_BYTES, file, n, err)) return -1;
    return dt_image_probe(file->p, *n, path, l->max_pixels, iw, ih, err);
}

/* The cached form of image idx: its shorter side reduced to cache_size (never enlarged),
 * decoded and published the first time. When it is not kept (the cache is full), *tmp holds
 * it and *owned is set: the caller frees it. */
static const dt_image *cached_image(worker_ctx *w, int64_t idx, dt_image *tmp, int *owned, dt_err *err) {
    dt_loader *l = w->l;
    *owned = 0;
    cached *c = atomic_load_explicit(&l->cache[idx], memory_order_acquire);
    if (c) return &c->img;
    size_t n;
    int iw, ih, rw, rh;
    if (read_and_probe(l, &w->file, idx, &n, &iw, &ih, err)) return NULL;
    int sh = iw < ih ? iw : ih;
    if (sh > l->cache_size)
        dt_resize_shorter_dims(iw, ih, l->cache_size, &rw, &rh);
    else
        rw = iw, rh = ih;
    /* A JPEG may come out of the decoder already reduced, down to the cache size. */
    double need = (double)rw / iw > (double)rh / ih ? (double)rw / iw : (double)rh / ih;
    if (dt_image_decode(w->file.p, n, l->ds->paths[idx], l->max_pixels, need, tmp, err)) return NULL;
    c = dt_xmalloc(sizeof *c);
    if (tmp->w != rw || tmp->h != rh) {
        c->img.w = rw;
        c->img.h = rh;
        c->img.pix = dt_xmalloc((size_t)rw * rh * 3);
        dt_image_resize(tmp, rw, rh, c->img.pix, &w->resample);
        dt_image_free(tmp);
    } else {
        c->img = *tmp; /* the decoder's buffer is plain malloc memory: take it over */
        tmp->pix = NULL;
    }
    size_t bytes = (size_t)c->img.w * c->img.h * 3 + sizeof *c;
    size_t before = atomic_fetch_add(&l->cache_bytes, bytes);
    int fits = !l->cache_max || before + bytes <= l->cache_max;
    cached *expected = NULL;
    if (fits && atomic_compare_exchange_strong_explicit(&l->cache[idx], &expected, c, memory_order_acq_rel,
                                                        memory_order_acquire)) {
        atomic_fetch_add(&l->cache_images, 1);
        return &c->img;
    }
    atomic_fetch_sub(&l->cache_bytes, bytes);
    if (!fits && !atomic_exchange(&l->cache_full_warned, 1))
        dt_warn("loader cache is full (%d MB): further images are decoded every epoch", l->o.cache_max_mb);
    if (expected) { /* another worker cached the same image first: identical, use it */
        free(c->img.pix);
        free(c);
        return &expected->img;
    }
    *tmp = c->img; /* not kept: the caller frees it after the transform */
    free(c);
    *owned = 1;
    return tmp;
}

static void make_plan(const dt_loader *l, int iw, int ih, dt_rng *r, dt_transform_plan *p) {
    if (l->o.train)
        dt_transform_plan_train(iw, ih, l->S, l->o.crop_scale_min, r, p);
    else
        dt_transform_plan_val(iw, ih, l->S, p);
}

/* GPU decode: whether the file in `data` goes to nvJPEG (ROUTE_GPU) or, with the route's
 * reason, to the CPU decoder. nvJPEG gets only the JPEGs it decodes as libjpeg-turbo does,
 * checked by deftc's own walk of the markers - a truncated file (no EOI), which the CPU path
 * refuses, among the files that stay on the CPU - and whose size the walk and the CPU probe
 * agree on. */
static int gpu_route(worker_ctx *w, const uint8_t *data, size_t n, int iw, int ih) {
    const dt_loader *l = w->l;
    if (dt_image_format_of(data, n) != DT_FMT_JPEG) return ROUTE_NOT_JPEG;
    dt_jpeg_layout lay;
    const char *why;
    if (dt_jpeg_read_layout(data, n, &lay, &why) || !dt_jpeg_gpu_decodable(&lay, &why) || lay.w != iw || lay.h != ih)
        return ROUTE_JPEG_LAYOUT;
    if (dt_gpu_decoder_hardware(l->gpu) && lay.sof != 0xC0) return ROUTE_JPEG_LAYOUT; /* the engines: baseline only */
    return dt_gpu_decoder_supported(l->gpu, data, n, &w->parse) ? ROUTE_GPU : ROUTE_REFUSED;
}

/* A GPU-decode batch row a worker fills (NULL: decode on the CPU). */
typedef struct {
    slot *s;
    int j;
} gpu_row;

/* Decodes and transforms one candidate; 0 on success. Without the cache the transform is
 * planned from the header's size first, so a JPEG is decoded only as large as the plan needs;
 * with it, planned on the cached image (so the first epoch equals the later ones). With GPU
 * decode (g), a JPEG nvJPEG takes is only read, probed and planned: its row's job is set. */
static int load_sample(worker_ctx *w, int64_t idx, dt_rng *r, uint8_t *out, const gpu_row *g) {
    dt_loader *l = w->l;
    dt_image tmp = {0};
    const dt_image *img = NULL;
    int owned = 0;
    dt_transform_plan plan;
    dt_err err;
    if (l->cache) {
        img = cached_image(w, idx, &tmp, &owned, &err);
        if (img) make_plan(l, img->w, img->h, r, &plan);
    } else {
        size_t n;
        int iw, ih;
        dt_scratch *file = g ? &g->s->files[g->j] : &w->file; /* a GPU row keeps its file for nvJPEG */
        if (read_and_probe(l, file, idx, &n, &iw, &ih, &err) == 0) {
            make_plan(l, iw, ih, r, &plan);
            if (g) {
                int route = gpu_route(w, file->p, n, iw, ih);
                g->s->route[g->j] = route;
                if (route == ROUTE_GPU) {
                    g->s->jobs[g->j] = (dt_gpu_decode_job){file->p, n, iw, ih, plan};
                    return 0;
                }
            }
            if (dt_image_decode(file->p, n, l->ds->paths[idx], l->max_pixels, plan.min_scale, &tmp, &err) == 0) {
                img = &tmp;
                owned = 1;
            }
        }
    }
    if (!img) {
        mark_bad(l, idx, err.msg);
        return -1;
    }
    dt_transform_apply(&plan, img, l->S, out, &w->resample);
    if (owned) dt_image_free(&tmp);
    return 0;
}

/* Fills one batch row for epoch position p (of the whole epoch, not the shard). Returns 1 if perm[p] itself was skipped, -1 if
 * no image of the dataset decodes. */
static int fill_sample(worker_ctx *w, const int64_t *perm, int epoch, int64_t p, uint8_t *out, int32_t *label,
                       const gpu_row *g) {
    dt_loader *l = w->l;
    int skipped = 0;
    for (int64_t d = 0; d < l->m; d++) {
        int64_t q = p + d < l->m ? p + d : p + d - l->m;
        int64_t idx = perm[q];
        if (is_bad(l, idx)) {
            skipped |= d == 0;
            continue;
        }
        /* The stream of the image itself; a replacement (d > 0) gets its own stream, so an
         * image appearing twice in an epoch is augmented differently. */
        dt_rng r;
        dt_rng_derive(&r, d ? l->o.seed ^ dt_hash64((uint64_t)d) : l->o.seed, (uint64_t)epoch, (uint64_t)idx);
        if (load_sample(w, idx, &r, out, g) == 0) {
            *label = l->ds->labels[idx];
            if (g) g->s->idx[g->j] = idx;
            return skipped;
        }
        skipped |= d == 0;
    }
    memset(out, 0, (size_t)l->S * l->S * 3);
    *label = -1;
    return -1;
}

/* The error of a dataset none of whose images decodes. */
static void no_image_decodes(const dt_loader *l, char *buf, size_t cap) {
    snprintf(buf, cap, "none of the %lld images of %s decodes", (long long)l->m, l->ds->dir);
}

/* The error of a class none of whose images decodes. */
static void dead_class_error(const dt_loader *l, int c, char *buf, size_t cap) {
    snprintf(buf, cap,
             "none of the %lld images of class '%s' (%s/%s) decodes (each file was named in a warning): the class would "
             "vanish from training; fix or remove its files",
             (long long)l->class_n[c], l->ds->classes[c], l->ds->dir, l->ds->classes[c]);
}

/* Under mu, after a sample or a batch: the loader fails with `why` (NULL: only when a class
 * died - training on would drop it without a word), the first failure's message kept. */
static void fail_locked(dt_loader *l, const char *why) {
    int dead = atomic_load(&l->dead_class);
    if (l->failed || (!why && !dead)) return;
    l->failed = 1;
    if (why) snprintf(l->errmsg, sizeof l->errmsg, "%s", why);
    else dead_class_error(l, dead - 1, l->errmsg, sizeof l->errmsg);
    pthread_cond_broadcast(&l->ready_cv);
}

static void *worker_main(void *arg) {
    worker_ctx *w = arg;
    dt_loader *l = w->l;
    size_t per_image = (size_t)l->S * l->S * 3; /* bytes of one [S, S, 3] u8 row */
    pthread_mutex_lock(&l->mu);
    for (;;) {
        if (l->stop) break;
        if (l->active && l->next_item < l->n_used) {
            int64_t b = l->next_item / l->B;
            slot *s = &l->slots[b % l->K];
            if (s->state == SLOT_FREE) {
                s->state = SLOT_FILLING;
                s->batch = b;
                int64_t left = l->n_used - b * l->B;
                s->n = left < l->B ? (int)left : l->B;
                s->done = 0;
            }
            if (s->state == SLOT_FILLING && s->batch == b) {
                int64_t p = l->next_item++;
                int j = (int)(p - b * l->B), epoch = l->epoch;
                const int64_t *perm = l->perm;
                l->inflight++;
                pthread_mutex_unlock(&l->mu);

                double t0 = dt_now_ms();
                const int64_t pos = l->o.shard + p * l->o.shards;
                const gpu_row g = {s, j};
                if (l->gpu) s->pos[j] = pos;
                int rc = fill_sample(w, perm, epoch, pos, s->images + (size_t)j * per_image, &s->labels[j],
                                     l->gpu ? &g : NULL);
                double dt = dt_now_ms() - t0;

                pthread_mutex_lock(&l->mu);
                l->inflight--;
                l->decode_ms += dt;
                if (rc > 0) l->skipped++;
                if (l->gpu && rc >= 0) {
                    const int route = s->route[j];
                    l->n_not_jpeg += route == ROUTE_NOT_JPEG;
                    l->n_layout += route == ROUTE_JPEG_LAYOUT;
                    l->n_refused += route == ROUTE_REFUSED;
                }
                if (rc < 0) {
                    char msg[512];
                    no_image_decodes(l, msg, sizeof msg);
                    fail_locked(l, msg);
                } else {
                    fail_locked(l, NULL);
                }
                if (++s->done == s->n) {
                    s->state = SLOT_READY;
                    pthread_cond_broadcast(&l->ready_cv);
                }
                if (l->inflight == 0) pthread_cond_broadcast(&l->idle_cv);
                continue;
            }
        }
        pthread_cond_wait(&l->work_cv, &l->mu);
    }
    pthread_mutex_unlock(&l->mu);
    dt_scratch_free(&w->file);
    dt_scratch_free(&w->resample);
    if (w->parse) dt_gpu_decoder_parse_free(l->gpu, w->parse);
    free(w);
    return NULL;
}

/* GPU decode, one batch (slot k, taken by the decode thread): its JPEG rows through nvJPEG
 * and the augmentation kernel; the rows nvJPEG refuses decoded on the CPU here, and one that
 * does not decode there either replaced by the next image of the epoch order, as a worker
 * would have (fill_sample from the same epoch position: the bad file is skipped, the next one
 * gets the stream it gets on the CPU path); then the host rows copied up. *skipped: rows whose
 * own image turned out bad; *refused_n: rows nvJPEG refused. 0, or -1 with err. */
static int decode_batch(worker_ctx *w, slot *s, int k, const int64_t *perm, int epoch, int64_t *skipped,
                        int64_t *refused_n, dt_gpu_decode_times *times, dt_err *err) {
    dt_loader *l = w->l;
    const size_t per = (size_t)l->S * l->S * 3;
    int m = 0, nh = 0;
    for (int j = 0; j < s->n; j++)
        if (s->route[j] == ROUTE_GPU) l->dec_jobs[m] = s->jobs[j], l->dec_rows[m++] = j;
        else l->dec_host[nh++] = j;
    if (dt_gpu_decoder_decode(l->gpu, k, l->dec_jobs, l->dec_rows, m, l->dec_refused, times, err)) return -1;
    for (int i = 0; i < m; i++) {
        if (!l->dec_refused[i]) continue;
        const int j = l->dec_rows[i];
        const dt_gpu_decode_job *jb = &s->jobs[j];
        const int64_t idx = s->idx[j];
        uint8_t *out = s->images + (size_t)j * per;
        dt_image img;
        dt_err e;
        s->route[j] = ROUTE_REFUSED;
        (*refused_n)++;
        l->dec_host[nh++] = j;
        if (dt_image_decode(jb->jpeg, jb->bytes, l->ds->paths[idx], l->max_pixels, jb->plan.min_scale, &img, &e) == 0) {
            dt_transform_apply(&jb->plan, &img, l->S, out, &w->resample);
            dt_image_free(&img);
            continue;
        }
        mark_bad(l, idx, e.msg);
        int rc = fill_sample(w, perm, epoch, s->pos[j], out, &s->labels[j], NULL);
        if (rc < 0) {
            no_image_decodes(l, err->msg, sizeof err->msg);
            return -1;
        }
        *skipped += rc > 0;
    }
    return dt_gpu_decoder_finish(l->gpu, k, s->images, l->dec_host, nh, err);
}

/* The decode thread: takes the batches in order as the workers finish them. */
static void *decode_main(void *arg) {
    dt_loader *l = arg;
    worker_ctx w = {.l = l};
    dt_gpu_decoder_bind_thread(l->gpu);
    pthread_mutex_lock(&l->mu);
    for (;;) {
        if (l->stop) break;
        slot *s = &l->slots[l->dec_next % l->K];
        if (l->active && !l->failed && l->dec_next < l->nb && s->state == SLOT_READY && s->batch == l->dec_next) {
            s->state = SLOT_DECODING;
            const int k = (int)(l->dec_next % l->K), epoch = l->epoch;
            const int64_t *perm = l->perm;
            l->inflight++;
            pthread_mutex_unlock(&l->mu);

            double t0 = dt_now_ms();
            int64_t skipped = 0, refused = 0;
            dt_gpu_decode_times times = {0, 0, 0};
            dt_err err;
            int rc = decode_batch(&w, s, k, perm, epoch, &skipped, &refused, &times, &err);
            double dt = dt_now_ms() - t0;

            pthread_mutex_lock(&l->mu);
            l->inflight--;
            l->gpu_ms += dt;
            l->gpu_times.wait_ms += times.wait_ms;
            l->gpu_times.nvjpeg_ms += times.nvjpeg_ms;
            l->gpu_times.augment_ms += times.augment_ms;
            l->skipped += skipped;
            l->n_refused += refused;
            for (int j = 0; j < s->n; j++) l->n_gpu += s->route[j] == ROUTE_GPU;
            fail_locked(l, rc ? err.msg : NULL);
            if (!rc) s->state = SLOT_DECODED;
            l->dec_next++;
            pthread_cond_broadcast(&l->ready_cv);
            if (l->inflight == 0) pthread_cond_broadcast(&l->idle_cv);
            continue;
        }
        pthread_cond_wait(&l->ready_cv, &l->mu);
    }
    pthread_mutex_unlock(&l->mu);
    dt_scratch_free(&w.file);
    dt_scratch_free(&w.resample);
    return NULL;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The images an epoch draws from (l->base, l->m, l->class_n): all of them, or a fixed sample of
 * `n` stratified by class. Class c gives n * count_c / total images, the fractions rounded by
 * largest remainder with ties broken by a draw from the seed (not by class order: one batch
 * of ImageNet's balanced val would otherwise be classes 0 .. 63); its images are picked
 * uniformly by a partial Fisher-Yates shuffle from the stream (seed, class, tag). A function
 * of (dataset, n, seed) alone: the same sample every epoch, every run, any shard count. */
static void choose_images(dt_loader *l, int64_t n) {
    const dt_dataset *ds = l->ds;
    int K = ds->num_classes;
    int64_t total = ds->count;
    l->class_n = dt_xcalloc((size_t)K, sizeof *l->class_n);
    l->base = dt_xmalloc((size_t)total * sizeof *l->base);
    if (n <= 0 || n >= total) {
        l->m = total;
        for (int64_t i = 0; i < total; i++) l->base[i] = i;
        for (int c = 0; c < K; c++) l->class_n[c] = ds->class_count[c];
    } else {
        typedef struct {
            int64_t rem;  /* n * count_c mod total: the fraction dropped */
            uint64_t key; /* breaks ties */
            int taken;    /* has had its one more */
        } share;
        share *sh = dt_xmalloc((size_t)K * sizeof *sh);
        int64_t given = 0;
        for (int c = 0; c < K; c++) {
            dt_rng r;
            dt_rng_derive(&r, l->o.seed, (uint64_t)c, 0x53414d504c45ULL /* "SAMPLE" */);
            l->class_n[c] = n * ds->class_count[c] / total; /* both < 2^31: no overflow */
            sh[c] = (share){n * ds->class_count[c] % total, dt_rng_u64(&r), 0};
            given += l->class_n[c];
        }
        /* the n - given largest remainders get one more (each of them is > 0, so each such
         * class still has the image to give) */
        for (int64_t k = 0; k < n - given; k++) {
            int best = -1;
            for (int c = 0; c < K; c++)
                if (!sh[c].taken && (best < 0 || sh[c].rem > sh[best].rem ||
                                     (sh[c].rem == sh[best].rem && sh[c].key < sh[best].key)))
                    best = c;
            l->class_n[best]++;
            sh[best].taken = 1;
        }
        free(sh);
        int64_t *pool = dt_xmalloc((size_t)total * sizeof *pool);
        l->m = 0;
        for (int64_t first = 0; first < total;) {
            int c = ds->labels[first];
            int64_t cnt = ds->class_count[c]; /* the dataset's images are grouped by class */
            for (int64_t i = 0; i < cnt; i++) pool[i] = first + i;
            dt_rng r;
            dt_rng_derive(&r, l->o.seed, (uint64_t)c, 0x5049434bULL /* "PICK" */);
            for (int64_t i = 0; i < l->class_n[c]; i++) {
                int64_t j = i + dt_rng_below(&r, (uint32_t)(cnt - i));
                int64_t t = pool[i];
                pool[i] = pool[j];
                pool[j] = t;
            }
            qsort(pool, (size_t)l->class_n[c], sizeof *pool, cmp_i64); /* the sample in dataset order */
            memcpy(l->base + l->m, pool, (size_t)l->class_n[c] * sizeof *pool);
            l->m += l->class_n[c];
            first += cnt;
        }
        free(pool);
    }
    l->classes_used = 0;
    for (int c = 0; c < K; c++) l->classes_used += l->class_n[c] > 0;
}

/* The classes probe_classes shares out among its threads. */
typedef struct {
    dt_loader *l;
    const int64_t *run; /* [nruns + 1] where each class's images start in base */
    int nruns;
    atomic_int next;    /* the next run to probe */
    atomic_int dead;    /* the lowest dead class + 1 (0: none), whichever thread found it */
} probe_job;

static void *probe_worker(void *arg) {
    probe_job *j = arg;
    dt_loader *l = j->l;
    worker_ctx w = {.l = l};
    for (int k; (k = atomic_fetch_add(&j->next, 1)) < j->nruns;) {
        int ok = 0;
        for (int64_t i = j->run[k]; i < j->run[k + 1] && !ok; i++) {
            int64_t idx = l->base[i];
            size_t n;
            int iw, ih;
            dt_image img;
            dt_err e;
            if (read_and_probe(l, &w.file, idx, &n, &iw, &ih, &e) == 0 &&
                dt_image_decode(w.file.p, n, l->ds->paths[idx], l->max_pixels, 1.0 / 8, &img, &e) == 0) {
                dt_image_free(&img);
                ok = 1;
            } else {
                mark_bad(l, idx, e.msg);
            }
        }
        int c = l->ds->labels[l->base[j->run[k]]], cur = atomic_load(&j->dead);
        while (!ok && (cur == 0 || c + 1 < cur) && !atomic_compare_exchange_weak(&j->dead, &cur, c + 1)) {
        }
    }
    dt_scratch_free(&w.file);
    return NULL;
}

/* Before the first epoch: in each class, its images (of base, in order) until one decodes,
 * each that does not marked bad with a warning naming it. A class none of whose images
 * decodes is an error here, not at the end of an epoch that trained without it. The cost:
 * one decode per class, at the smallest size the decoder offers (JPEG at 1/8: about 1 ms for
 * an ImageNet-sized file), more only for the bad files met first; the classes are shared out
 * among as many threads as the loader has workers. */
static int probe_classes(dt_loader *l, dt_err *err) {
    int64_t *run = dt_xmalloc(((size_t)l->ds->num_classes + 1) * sizeof *run);
    int nruns = 0;
    for (int64_t i = 0; i < l->m; i++)
        if (i == 0 || l->ds->labels[l->base[i]] != l->ds->labels[l->base[i - 1]]) run[nruns++] = i;
    run[nruns] = l->m;
    probe_job j = {.l = l, .run = run, .nruns = nruns};
    atomic_init(&j.next, 0);
    atomic_init(&j.dead, 0);
    int nt = l->nthreads < nruns ? l->nthreads : nruns, started = 0;
    pthread_t *t = dt_xcalloc((size_t)nt, sizeof *t);
    for (int i = 1; i < nt; i++) started += pthread_create(&t[started], NULL, probe_worker, &j) == 0;
    probe_worker(&j); /* this thread too; it finishes the work of threads that did not start */
    for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
    free(t);
    free(run);
    int dead = atomic_load(&j.dead);
    if (!dead) return 0;
    char msg[1024];
    dead_class_error(l, dead - 1, msg, sizeof msg);
    return dt_errf(err, "%s", msg);
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
        if (o.cache) why = "cache=1 keeps CPU-decoded images";
        else if (!dt_built_with_cuda()) why = "deftc was built without CUDA";
        else if (!dt_gpu_ready()) why = "no GPU context (dt_gpu_init comes before the loader)";
        else if (!(l->gpu = dt_gpu_decoder_new(dt_gpu_current(), l->B, l->S, l->K, &e))) why = e.msg;
        if (why && o.decode == DT_DECODE_GPU) {
            dt_errf(err, "loader: decode=gpu: %s", why);
            return -1;
        }
        if (why) snprintf(l->decoder, sizeof l->decoder, "cpu (%s; decode=auto: %.600s)", cpu_name, why);
        else snprintf(l->decoder, sizeof l->decoder, "gpu: %s (PNG, BMP and the JPEGs it does not take: %s)",
                      dt_gpu_decoder_describe(l->gpu), cpu_name);
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
    if (l->gpu) {
        l->dec_jobs = dt_xcalloc((size_t)l->B, sizeof *l->dec_jobs);
        l->dec_rows = dt_xcalloc((size_t)l->B, sizeof *l->dec_rows);
        l->dec_refused = dt_xcalloc((size_t)l->B, sizeof *l->dec_refused);
        l->dec_host = dt_xcalloc((size_t)l->B, sizeof *l->dec_host);
    }
}

/* The CPU workers, and the GPU decode thread. 0, or -1 with err set. */
static int start_threads(dt_loader *l, dt_err *err) {
    l->threads = dt_xcalloc((size_t)l->nthreads, sizeof *l->threads);
    for (int t = 0; t < l->nthreads; t++) {
        worker_ctx *w = dt_xcalloc(1, sizeof *w);
        w->l = l;
        int rc = pthread_create(&l->threads[t], NULL, worker_main, w);
        if (rc != 0) {
            free(w);
            dt_errf(err, "loader: cannot start worker thread %d of %d: %s", t + 1, l->nthreads, strerror(rc));
            return -1;
        }
        l->nstarted++;
    }
    if (l->gpu) {
        int rc = pthread_create(&l->dec_thread, NULL, decode_main, l);
        if (rc != 0) {
            dt_errf(err, "loader: cannot start the GPU decode thread: %s", strerror(rc));
            return -1;
        }
        l->dec_started = 1;
    }
    return 0;
}

dt_loader *dt_loader_new(const dt_dataset *ds, const dt_loader_opts *opts, dt_err *err) {
    dt_loader_opts o = opts ? *opts : dt_loader_default_opts(1);
    int cache_size = 0;
    int64_t m, nb, n_used;
    if (check_opts(ds, &o, &cache_size, err) || epoch_sizes(ds, &o, &m, &nb, &n_used, err)) return NULL;

    dt_loader *l = dt_xcalloc(1, sizeof *l);
    l->ds = ds;
    l->o = o;
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
    choose_images(l, m);
    l->perm = dt_xmalloc((size_t)l->m * sizeof *l->perm);
    if (probe_classes(l, err)) {
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
        if (l->gpu && l->slots[k].state == SLOT_HELD) dt_gpu_decoder_released(l->gpu, k);
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
    const int done = l->gpu ? SLOT_DECODED : SLOT_READY;
    while (!(s->state == done && s->batch == l->next_batch) && !l->failed) pthread_cond_wait(&l->ready_cv, &l->mu);
    double waited = dt_now_ms() - t0;
    l->wait_ms += waited;
    l->total_wait_ms += waited;
    if (l->failed) {
        pthread_mutex_unlock(&l->mu);
        return -1;
    }
    s->state = SLOT_HELD;
    b->images = l->gpu ? NULL : s->images;
    b->dev_images = l->gpu ? dt_gpu_decoder_images(l->gpu, (int)(l->next_batch % l->K)) : NULL;
    if (l->gpu) dt_gpu_decoder_acquire(l->gpu, (int)(l->next_batch % l->K)); /* deftc's stream waits for it */
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
        if (l->gpu) dt_gpu_decoder_released(l->gpu, b->slot_); /* before a worker can refill it */
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
                 "decode thread %.2f s (in nvJPEG's calls %.2f, the augmentation %.2f, waiting for a buffer %.2f)",
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
    if (l->dec_started) pthread_join(l->dec_thread, NULL);
    dt_gpu_decoder_free(l->gpu);
    free(l->threads);
    for (int k = 0; l->slots && k < l->K; k++) {
        slot *sk = &l->slots[k];
        dt_host_free(sk->images, l->pinned);
        dt_host_free(sk->labels, l->pinned);
        for (int j = 0; sk->files && j < l->B; j++) dt_scratch_free(&sk->files[j]);
        free(sk->files), free(sk->jobs), free(sk->route), free(sk->idx), free(sk->pos);
    }
    free(l->dec_jobs), free(l->dec_rows), free(l->dec_refused), free(l->dec_host);
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
