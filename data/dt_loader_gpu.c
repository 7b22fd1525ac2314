/* The loader's GPU decode threads (decode=gpu, gpu_decoders of them): each claims the next ready
 * slot in batch order, decodes its JPEGs with its own nvJPEG decoder and augments them on its
 * stream, the rows nvJPEG refuses replaced on the CPU (dt_loader_internal.h). */
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

/* nvJPEG's decode for the loader's table (the batch index is an emulator's). */
static int nvjpeg_decode(dt_gpu_decoder *d, int64_t batch, int k, const dt_gpu_decode_job *jobs, const int *rows,
                         int n, int *refused, dt_gpu_decode_times *times, dt_err *err) {
    (void)batch;
    return dt_gpu_decoder_decode(d, k, jobs, rows, n, refused, times, err);
}

const loader_gpu_api loader_nvjpeg = {
    dt_gpu_decoder_new,     dt_gpu_decoder_describe, dt_gpu_decoder_hardware, dt_gpu_decoder_supported,
    dt_gpu_decoder_parse_free, dt_gpu_decoder_bind_thread, nvjpeg_decode,   dt_gpu_decoder_finish,
    dt_gpu_decoder_acquire, dt_gpu_decoder_images,   dt_gpu_decoder_released, dt_gpu_decoder_free,
};

/* GPU decode, one batch (slot k, claimed by decode thread dc): its JPEG rows through nvJPEG
 * and the augmentation kernel; the rows nvJPEG refuses decoded on the CPU here, and one that
 * does not decode there either replaced by the next image of the epoch order, as a worker
 * would have (loader_fill_sample from the same epoch position: the bad file is skipped, the next one
 * gets the stream it gets on the CPU path); then the host rows copied up. *skipped: rows whose
 * own image turned out bad; *refused_n: rows nvJPEG refused. 0, or -1 with err. */
static int decode_batch(loader_decoder *dc, worker_ctx *w, slot *s, int k, const int64_t *perm, int epoch,
                        int64_t *skipped, int64_t *refused_n, dt_gpu_decode_times *times, dt_err *err) {
    dt_loader *l = w->l;
    const loader_gpu_api *api = l->api;
    const size_t per = (size_t)l->S * l->S * 3;
    int m = 0, nh = 0;
    for (int j = 0; j < s->n; j++)
        if (s->route[j] == ROUTE_GPU) dc->jobs[m] = s->jobs[j], dc->rows[m++] = j;
        else dc->host[nh++] = j;
    if (api->decode(dc->gpu, s->batch, k, dc->jobs, dc->rows, m, dc->refused, times, err)) return -1;
    for (int i = 0; i < m; i++) {
        if (!dc->refused[i]) continue;
        const int j = dc->rows[i];
        const dt_gpu_decode_job *jb = &s->jobs[j];
        const int64_t idx = s->idx[j];
        uint8_t *out = s->images + (size_t)j * per;
        dt_image img;
        dt_err e;
        s->route[j] = ROUTE_REFUSED;
        (*refused_n)++;
        dc->host[nh++] = j;
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
    return api->finish(dc->gpu, k, s->images, dc->host, nh, err);
}

/* decode_batch with a raise inside it (a failed allocation, a CUDA check) turned into its error:
 * the decode thread has no caller to unwind to. */
static int decode_batch_guarded(loader_decoder *dc, worker_ctx *w, slot *s, int k, const int64_t *perm, int epoch,
                                int64_t *skipped, int64_t *refused_n, dt_gpu_decode_times *times, dt_err *err) {
    dt_guard g;
    DT_GUARD(g) {
        dt_guard_unwind(&g);
        return dt_errf(err, "%s", dt_last_error());
    }
    int rc = decode_batch(dc, w, s, k, perm, epoch, skipped, refused_n, times, err);
    dt_guard_leave(&g);
    return rc;
}

/* A decode thread: claims the batches in order (dec_next, under mu) as the workers finish them,
 * several threads on consecutive batches at once; each batch's result (decoded, or this
 * thread's error) is left in its slot, which the consumer takes in batch order. */
void *loader_decode_main(void *arg) {
    loader_decoder *dc = arg;
    dt_loader *l = dc->l;
    worker_ctx w = {.l = l};
    l->api->bind_thread(dc->gpu);
    pthread_mutex_lock(&l->mu);
    for (;;) {
        if (l->stop) break;
        slot *s = &l->slots[l->dec_next % l->K];
        if (l->active && !l->failed && !l->dec_failed && l->dec_next < l->nb && s->state == SLOT_READY &&
            s->batch == l->dec_next) {
            s->state = SLOT_DECODING;
            const int k = (int)(l->dec_next % l->K), epoch = l->epoch;
            const int64_t *perm = l->perm;
            l->dec_next++;
            l->inflight++;
            pthread_mutex_unlock(&l->mu);

            double t0 = dt_now_ms();
            int64_t skipped = 0, refused = 0;
            dt_gpu_decode_times times = {0, 0, 0};
            dt_err err;
            int rc = decode_batch_guarded(dc, &w, s, k, perm, epoch, &skipped, &refused, &times, &err);
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
            if (rc) {
                snprintf(s->why, sizeof s->why, "GPU decode thread %d of %d: %.900s", dc->i + 1, l->ndec, err.msg);
                l->dec_failed = 1;
                s->state = SLOT_FAILED;
            } else {
                s->state = SLOT_DECODED;
            }
            loader_fail_locked(l, NULL); /* a class all of whose files went bad meanwhile */
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
