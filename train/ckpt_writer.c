/* Checkpoints written in the background (ckpt_writer.h): one writer thread for the run's life,
 * a slot for the image being written and one for the newest image waiting; the newest wins. */
#include "train/ckpt_writer.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/dt_timer.h"

struct dt_ckpt_writer {
    pthread_mutex_t mu;
    pthread_cond_t work; /* a pending image, or the end: the thread wakes */
    pthread_cond_t idle; /* nothing pending, nothing being written: waiters wake */
    pthread_t thread;
    int started, ending;
    int have_pending, writing;
    char pending_path[1024];
    dt_ckpt_image pending; /* the newest submitted image not yet started */
    dt_ckpt_image spare;   /* a written (or superseded) image's body, for the next snapshot */
    int failed;            /* a write failed and no call has reported it yet */
    dt_err err;
    double ms;             /* the last finished write's time in the writer thread */
    dt_ckpt_writer_counts counts;
};

/* Keeps img's body as the spare (freeing the older spare) and empties img; the lock is held. */
static void keep_spare(dt_ckpt_writer *w, dt_ckpt_image *img) {
    dt_ckpt_image_free(&w->spare);
    w->spare = *img;
    memset(img, 0, sizeof *img);
}

/* The writer thread: takes the pending image, writes it with the lock released, records the
 * result, and sleeps until the next one or the end. */
static void *write_main(void *arg) {
    dt_ckpt_writer *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->have_pending && !w->ending) pthread_cond_wait(&w->work, &w->mu);
        if (!w->have_pending) break; /* ending, nothing left */
        char path[sizeof w->pending_path];
        memcpy(path, w->pending_path, sizeof path);
        dt_ckpt_image img = w->pending;
        memset(&w->pending, 0, sizeof w->pending);
        w->have_pending = 0;
        w->writing = 1;
        pthread_mutex_unlock(&w->mu);
        dt_err err;
        const double t0 = dt_now_ms();
        const int rc = dt_ckpt_image_write(path, &img, &err);
        const double ms = dt_now_ms() - t0;
        pthread_mutex_lock(&w->mu);
        keep_spare(w, &img);
        w->writing = 0;
        w->ms = ms;
        if (rc) {
            if (!w->failed) w->err = err; /* the first failure is the one reported */
            w->failed = 1;
            w->counts.failed++;
        } else {
            w->counts.written++;
        }
        if (!w->have_pending) pthread_cond_broadcast(&w->idle);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

dt_ckpt_writer *dt_ckpt_writer_new(void) {
    dt_ckpt_writer *w = dt_xcalloc(1, sizeof(dt_ckpt_writer));
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->work, NULL);
    pthread_cond_init(&w->idle, NULL);
    w->started = pthread_create(&w->thread, NULL, write_main, w) == 0; /* no thread: submit writes in place */
    return w;
}

/* Reports (and clears) a failure no call has reported yet; the lock is held. */
static int take_failure(dt_ckpt_writer *w, dt_err *err) {
    if (!w->failed) return 0;
    w->failed = 0;
    if (err) *err = w->err;
    return -1;
}

int dt_ckpt_writer_wait(dt_ckpt_writer *w, double *write_ms, dt_err *err) {
    if (write_ms) *write_ms = 0;
    if (!w) return 0;
    pthread_mutex_lock(&w->mu);
    const int busy = w->have_pending || w->writing;
    while (w->have_pending || w->writing) pthread_cond_wait(&w->idle, &w->mu);
    if (write_ms && busy) *write_ms = w->ms;
    const int rc = take_failure(w, err);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int dt_ckpt_writer_submit(dt_ckpt_writer *w, const char *path, dt_ckpt_image *img, dt_err *err) {
    if (strlen(path) >= sizeof w->pending_path) {
        dt_ckpt_image_free(img);
        return dt_errf(err, "checkpoint path %.64s... is longer than %zu bytes", path, sizeof w->pending_path - 1);
    }
    pthread_mutex_lock(&w->mu);
    if (take_failure(w, err)) {
        pthread_mutex_unlock(&w->mu);
        dt_ckpt_image_free(img);
        return -1;
    }
    w->counts.submitted++;
    if (!w->started) { /* no writer thread: the write happens here, as a synchronous one would */
        pthread_mutex_unlock(&w->mu);
        const int rc = dt_ckpt_image_write(path, img, err);
        dt_ckpt_image_free(img);
        pthread_mutex_lock(&w->mu);
        if (rc) w->counts.failed++;
        else w->counts.written++;
        pthread_mutex_unlock(&w->mu);
        return rc;
    }
    if (w->have_pending) { /* never started: the newer image replaces it */
        keep_spare(w, &w->pending);
        w->counts.superseded++;
    }
    snprintf(w->pending_path, sizeof w->pending_path, "%s", path);
    w->pending = *img;
    memset(img, 0, sizeof *img);
    w->have_pending = 1;
    pthread_cond_signal(&w->work);
    pthread_mutex_unlock(&w->mu);
    return 0;
}

void dt_ckpt_writer_spare(dt_ckpt_writer *w, dt_ckpt_image *img) {
    pthread_mutex_lock(&w->mu);
    if (!img->body) {
        *img = w->spare;
        memset(&w->spare, 0, sizeof w->spare);
    }
    pthread_mutex_unlock(&w->mu);
}

dt_ckpt_writer_counts dt_ckpt_writer_counts_of(dt_ckpt_writer *w) {
    pthread_mutex_lock(&w->mu);
    dt_ckpt_writer_counts c = w->counts;
    pthread_mutex_unlock(&w->mu);
    return c;
}

void dt_ckpt_writer_free(dt_ckpt_writer *w) {
    if (!w) return;
    dt_ckpt_writer_wait(w, NULL, NULL);
    if (w->started) {
        pthread_mutex_lock(&w->mu);
        w->ending = 1;
        pthread_cond_signal(&w->work);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL);
    }
    dt_ckpt_image_free(&w->spare);
    pthread_cond_destroy(&w->idle);
    pthread_cond_destroy(&w->work);
    pthread_mutex_destroy(&w->mu);
    free(w);
}
