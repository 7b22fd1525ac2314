/* The loader's GPU decode thread (decode=gpu): takes the ready slots in batch order, decodes
 * their JPEGs with nvJPEG and augments them on its stream, the rows it refuses replaced on the
 * CPU (dt_loader_internal.h). */
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

/* GPU decode, one batch (slot k, taken by the decode thread): its JPEG rows through nvJPEG
 * and the augmentation kernel; the rows nvJPEG refuses decoded on the CPU here, and one that
 * does not decode there either replaced by the next image of the epoch order, as a worker
 * would have (loader_fill_sample from the same epoch position: the bad file is skipped, the next one
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
        loader_mark_bad(l, idx, e.msg);
        int rc = loader_fill_sample(w, perm, epoch, s->pos[j], out, &s->labels[j], NULL);
        if (rc < 0) {
            loader_no_image_decodes(l, err->msg, sizeof err->msg);
            return -1;
        }
        *skipped += rc > 0;
    }
    return dt_gpu_decoder_finish(l->gpu, k, s->images, l->dec_host, nh, err);
}

/* The decode thread: takes the batches in order as the workers finish them. */
void *loader_decode_main(void *arg) {
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
            loader_fail_locked(l, rc ? err.msg : NULL);
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
