/* The loader's CPU workers: each claims epoch positions, reads, probes and decodes its image
 * (or routes a JPEG to the GPU decoder), plans and applies the augmentation, and writes the
 * sample into its batch slot (dt_loader_internal.h). */
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
    if (l->api->hardware(l->gpu) && lay.sof != 0xC0) return ROUTE_JPEG_LAYOUT; /* the engines: baseline only */
    return l->api->supported(l->gpu, data, n, &w->parse) ? ROUTE_GPU : ROUTE_REFUSED;
}

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
        img = loader_cached_image(w, idx, &tmp, &owned, &err);
        if (img) make_plan(l, img->w, img->h, r, &plan);
    } else {
        size_t n;
        int iw, ih;
        dt_scratch *file = g ? &g->s->files[g->j] : &w->file; /* a GPU row keeps its file for nvJPEG */
        if (loader_read_and_probe(l, file, idx, &n, &iw, &ih, &err) == 0) {
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
        loader_mark_bad(l, idx, err.msg);
        return -1;
    }
    dt_transform_apply(&plan, img, l->S, out, &w->resample);
    if (owned) dt_image_free(&tmp);
    return 0;
}

/* Fills one batch row for epoch position p (of the whole epoch, not the shard). Returns 1 if perm[p] itself was skipped, -1 if
 * no image of the dataset decodes. */
int loader_fill_sample(worker_ctx *w, const int64_t *perm, int epoch, int64_t p, uint8_t *out, int32_t *label,
                       const gpu_row *g) {
    dt_loader *l = w->l;
    int skipped = 0;
    for (int64_t d = 0; d < l->m; d++) {
        int64_t q = p + d < l->m ? p + d : p + d - l->m;
        int64_t idx = perm[q];
        if (loader_is_bad(l, idx)) {
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

/* Under mu, after a sample or a batch: the loader fails with `why` (NULL: only when a class
 * died - training on would drop it without a word), the first failure's message kept. */
void loader_fail_locked(dt_loader *l, const char *why) {
    int dead = atomic_load(&l->dead_class);
    if (l->failed || (!why && !dead)) return;
    l->failed = 1;
    if (why) snprintf(l->errmsg, sizeof l->errmsg, "%s", why);
    else loader_dead_class_error(l, dead - 1, l->errmsg, sizeof l->errmsg);
    pthread_cond_broadcast(&l->ready_cv);
}

void *loader_worker_main(void *arg) {
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
                int rc = loader_fill_sample(w, perm, epoch, pos, s->images + (size_t)j * per_image, &s->labels[j],
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
                    loader_no_image_decodes(l, msg, sizeof msg);
                    loader_fail_locked(l, msg);
                } else {
                    loader_fail_locked(l, NULL);
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
    if (w->parse) l->api->parse_free(l->gpu, w->parse);
    free(w);
    return NULL;
}
