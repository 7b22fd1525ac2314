/* Checkpoints written in the background (ckpt_writer.h): one thread a write, joined before
 * the next starts. */
#include "train/ckpt_writer.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/dt_timer.h"

struct dt_ckpt_writer {
    pthread_t thread;
    int busy;          /* a thread was started and not joined */
    char path[1024];   /* the write in progress */
    dt_ckpt_image img; /* its bytes, freed by the join */
    int rc;            /* its result, and its error */
    dt_err err;
    double ms;         /* its time in the writer thread */
};

static void *write_main(void *arg) {
    dt_ckpt_writer *w = arg;
    const double t0 = dt_now_ms();
    w->rc = dt_ckpt_image_write(w->path, &w->img, &w->err);
    w->ms = dt_now_ms() - t0;
    return NULL;
}

dt_ckpt_writer *dt_ckpt_writer_new(void) { return dt_xcalloc(1, sizeof(dt_ckpt_writer)); }

int dt_ckpt_writer_wait(dt_ckpt_writer *w, double *write_ms, dt_err *err) {
    if (write_ms) *write_ms = 0;
    if (!w || !w->busy) return 0;
    pthread_join(w->thread, NULL);
    w->busy = 0;
    dt_ckpt_image_free(&w->img);
    if (write_ms) *write_ms = w->ms;
    if (w->rc) {
        if (err) *err = w->err;
        return -1;
    }
    return 0;
}

int dt_ckpt_writer_submit(dt_ckpt_writer *w, const char *path, dt_ckpt_image *img, dt_err *err) {
    if (dt_ckpt_writer_wait(w, NULL, err)) {
        dt_ckpt_image_free(img);
        return -1;
    }
    if (strlen(path) >= sizeof w->path) {
        dt_ckpt_image_free(img);
        return dt_errf(err, "checkpoint path %.64s... is longer than %zu bytes", path, sizeof w->path - 1);
    }
    snprintf(w->path, sizeof w->path, "%s", path);
    w->img = *img;
    memset(img, 0, sizeof *img);
    w->rc = 0;
    if (pthread_create(&w->thread, NULL, write_main, w) != 0) { /* no thread: write it here */
        write_main(w);
        dt_ckpt_image_free(&w->img);
        if (w->rc) {
            *err = w->err;
            return -1;
        }
        return 0;
    }
    w->busy = 1;
    return 0;
}

void dt_ckpt_writer_free(dt_ckpt_writer *w) {
    if (!w) return;
    dt_ckpt_writer_wait(w, NULL, NULL);
    free(w);
}
