/* The images an epoch draws from (a stratified subset when asked), the classes' probe at start,
 * and the bad-file policy: which files are known not to decode, and when a class, or the whole
 * dataset, has none left (dt_loader_internal.h). */
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

int loader_is_bad(dt_loader *l, int64_t i) {
    return (atomic_load_explicit(&l->bad[i >> 6], memory_order_relaxed) >> (i & 63)) & 1;
}

/* Marks file i bad; warns the first time (exactly once across threads and epochs). When it
 * was the last good file of its class, the class is dead: the loader fails (see loader_worker_main). */
void loader_mark_bad(dt_loader *l, int64_t i, const char *why) {
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
int loader_read_and_probe(dt_loader *l, dt_scratch *file, int64_t idx, size_t *n, int *iw, int *ih, dt_err *err) {
    const char *path = l->ds->paths[idx];
    if (dt_file_read(path, "", DT_IMAGE_MAX_FILE_BYTES, file, n, err)) return -1;
    return dt_image_probe(file->p, *n, path, l->max_pixels, iw, ih, err);
}

/* The error of a dataset none of whose images decodes. */
void loader_no_image_decodes(const dt_loader *l, char *buf, size_t cap) {
    snprintf(buf, cap, "none of the %lld images of %s decodes", (long long)l->m, l->ds->dir);
}

/* The error of a class none of whose images decodes. */
void loader_dead_class_error(const dt_loader *l, int c, char *buf, size_t cap) {
    snprintf(buf, cap,
             "none of the %lld images of class '%s' (%s/%s) decodes (each file was named in a warning): the class would "
             "vanish from training; fix or remove its files",
             (long long)l->class_n[c], l->ds->classes[c], l->ds->dir, l->ds->classes[c]);
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
void loader_choose_images(dt_loader *l, int64_t n) {
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

/* The classes loader_probe_classes shares out among its threads. */
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
            if (loader_read_and_probe(l, &w.file, idx, &n, &iw, &ih, &e) == 0 &&
                dt_image_decode(w.file.p, n, l->ds->paths[idx], l->max_pixels, 1.0 / 8, &img, &e) == 0) {
                dt_image_free(&img);
                ok = 1;
            } else {
                loader_mark_bad(l, idx, e.msg);
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
int loader_probe_classes(dt_loader *l, dt_err *err) {
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
    loader_dead_class_error(l, dead - 1, msg, sizeof msg);
    return dt_errf(err, "%s", msg);
}
