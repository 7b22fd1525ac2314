/* The loader's GPU decode threads (gpu_decoders) without a GPU: an emulated decoder in the place
 * of nvJPEG's (loader_new_with) decodes and augments each job on the CPU exactly as the CPU
 * workers do, after a delay that differs per batch and per thread, so that N threads finish
 * their batches out of order. The batches must still come in order and bit-identical to
 * decode=cpu for N = 1..4; a failure injected on one thread comes back as that thread's error at
 * the batch it failed on, after every batch before it; the loader shuts down cleanly after an
 * error and mid-epoch. And the option's bounds (1 .. 8, at most prefetch - 1). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/data_testutil.h"
#include "core/dt_alloc.h"
#include "core/dt_rng.h"
#include "data/dt_dataset.h"
#include "data/dt_image.h"
#include "data/dt_loader_internal.h"
#include "tests/dt_test.h"

/* The emulator's knobs, set by the test before a loader is made (the loader's calls carry no
 * context): decoders made so far (a decoder's thread index), the thread that fails (-1: none)
 * from which batch on, and the batch it failed on (-1: none yet). */
static struct {
    atomic_int made;
    int fail_thread;
    int64_t fail_from;
    _Atomic int64_t failed_at;
} emu;

/* One emulated decoder: its output buffers K x u8 [B, S, S, 3] in host memory (the first
 * decoder's, shared as nvJPEG's are), its resampling scratch. */
typedef struct {
    int i, owner, B, S, K;
    uint8_t *out;
    dt_scratch resample;
} emu_decoder;

static dt_gpu_decoder *emu_make(int device, int B, int S, int K, const dt_gpu_decoder *first, dt_err *err) {
    (void)device, (void)err;
    emu_decoder *d = dt_xcalloc(1, sizeof *d);
    d->i = atomic_fetch_add(&emu.made, 1);
    d->B = B, d->S = S, d->K = K;
    d->owner = first == NULL;
    d->out = first ? ((const emu_decoder *)(const void *)first)->out : dt_xcalloc((size_t)K * B * S * S * 3, 1);
    return (dt_gpu_decoder *)(void *)d;
}
static emu_decoder *emu_of(const dt_gpu_decoder *d) { return (emu_decoder *)(void *)d; }
static const char *emu_describe(const dt_gpu_decoder *d) { (void)d; return "the emulator"; }
static int emu_hardware(const dt_gpu_decoder *d) { (void)d; return 0; }
static int emu_supported(const dt_gpu_decoder *d, const uint8_t *jpeg, size_t bytes, dt_gpu_parse **parse) {
    (void)d, (void)jpeg, (void)bytes, (void)parse;
    return 1;
}
static void emu_parse_free(const dt_gpu_decoder *d, dt_gpu_parse *parse) { (void)d, (void)parse; }
static void emu_bind_thread(const dt_gpu_decoder *d) { (void)d; }

/* The CPU path's decode and transform of each job into its row of out_k (the workers' calls), after
 * 0.2 .. 2.2 ms that depend on the batch and the thread; the failing thread waits none (it claims
 * as often as it can). */
static int emu_decode(dt_gpu_decoder *gd, int64_t batch, int k, const dt_gpu_decode_job *jobs, const int *rows, int n,
                      int *refused, dt_gpu_decode_times *times, dt_err *err) {
    (void)times;
    emu_decoder *d = emu_of(gd);
    if (d->i == emu.fail_thread && batch >= emu.fail_from) {
        atomic_store(&emu.failed_at, batch);
        return dt_errf(err, "emulated failure at batch %lld", (long long)batch);
    }
    if (d->i != emu.fail_thread) usleep((useconds_t)(200 + dt_hash64((uint64_t)batch * 8 + (uint64_t)d->i) % 2000));
    const size_t per = (size_t)d->S * d->S * 3;
    uint8_t *out = d->out + (size_t)k * d->B * per;
    for (int i = 0; i < n; i++) {
        dt_image img;
        dt_err e;
        refused[i] = DT_GPU_DECODE_OK;
        if (dt_image_decode(jobs[i].jpeg, jobs[i].bytes, "emulated", DT_IMAGE_MAX_PIXELS, jobs[i].plan.min_scale, &img,
                            &e)) {
            refused[i] = DT_GPU_DECODE_FAILED;
            continue;
        }
        dt_transform_apply(&jobs[i].plan, &img, d->S, out + (size_t)rows[i] * per, &d->resample);
        dt_image_free(&img);
    }
    return 0;
}
static int emu_finish(dt_gpu_decoder *gd, int k, const uint8_t *host, const int *rows, int n, dt_err *err) {
    (void)err;
    emu_decoder *d = emu_of(gd);
    const size_t per = (size_t)d->S * d->S * 3;
    for (int i = 0; i < n; i++)
        memcpy(d->out + ((size_t)k * d->B + rows[i]) * per, host + (size_t)rows[i] * per, per);
    return 0;
}
static void emu_acquire(const dt_gpu_decoder *d, int k) { (void)d, (void)k; }
static const uint8_t *emu_images(const dt_gpu_decoder *gd, int k) {
    const emu_decoder *d = emu_of(gd);
    return d->out + (size_t)k * d->B * d->S * d->S * 3;
}
static void emu_released(dt_gpu_decoder *d, int k) { (void)d, (void)k; }
static void emu_free(dt_gpu_decoder *gd) {
    emu_decoder *d = emu_of(gd);
    if (!d) return;
    if (d->owner) free(d->out);
    dt_scratch_free(&d->resample);
    free(d);
}

static const loader_gpu_api emulator = {
    emu_make,   emu_describe, emu_hardware, emu_supported, emu_parse_free, emu_bind_thread,
    emu_decode, emu_finish,   emu_acquire,  emu_images,    emu_released,   emu_free,
};

/* The decode=cpu loader's epoch: nb batches' pixels u8 [nb, B, S, S, 3] and labels [nb, B]. */
typedef struct {
    int64_t nb;
    uint8_t *images;
    int32_t *labels;
    int *n;
} epoch_ref;

static void reference_epoch(const dt_dataset *ds, dt_loader_opts o, int epoch, epoch_ref *r) {
    dt_err err;
    o.decode = DT_DECODE_CPU;
    dt_loader *l = dt_loader_new(ds, &o, &err);
    EXPECT_MSG(l != NULL, "%s", err.msg);
    if (!l) return;
    const size_t per = (size_t)o.image_size * o.image_size * 3;
    r->nb = dt_loader_batches(l);
    r->images = dt_xcalloc((size_t)r->nb * o.batch, per);
    r->labels = dt_xcalloc((size_t)r->nb * o.batch, sizeof *r->labels);
    r->n = dt_xcalloc((size_t)r->nb, sizeof *r->n);
    dt_loader_start_epoch(l, epoch);
    dt_batch b = {0};
    while (dt_loader_next(l, &b) == 1) {
        memcpy(r->images + (size_t)b.index * o.batch * per, b.images, per * (size_t)b.n);
        memcpy(r->labels + (size_t)b.index * o.batch, b.labels, sizeof *b.labels * (size_t)b.n);
        r->n[b.index] = b.n;
        dt_loader_release(l, &b);
    }
    dt_loader_free(l);
}

/* One epoch of an emulated loader with N decode threads, checked batch by batch against the
 * reference: index, count, labels and pixels. Returns the rc of the last dt_loader_next (0 at the
 * epoch's end, -1 at a failure) and the batches it handed out in *got; stops after `stop_after`
 * batches when > 0 (an early stop: the loader is freed with batches in flight). */
static int emulated_epoch(const dt_dataset *ds, dt_loader_opts o, int epoch, const epoch_ref *r, int stop_after,
                          int64_t *got, char *errbuf, size_t cap) {
    dt_err err;
    o.decode = DT_DECODE_GPU;
    atomic_store(&emu.made, 0);
    atomic_store(&emu.failed_at, -1);
    dt_loader *l = loader_new_with(ds, &o, &emulator, &err);
    EXPECT_MSG(l != NULL, "%s", err.msg);
    if (!l) return -2;
    EXPECT_MSG(strstr(dt_loader_decoder(l), "the emulator") != NULL, "%s", dt_loader_decoder(l));
    const size_t per = (size_t)o.image_size * o.image_size * 3;
    dt_loader_start_epoch(l, epoch);
    dt_batch b = {0};
    int rc;
    *got = 0;
    while ((rc = dt_loader_next(l, &b)) == 1) {
        EXPECT_EQ_INT(b.index, *got);
        EXPECT(b.images == NULL && b.dev_images != NULL);
        if (b.index >= r->nb || b.n != r->n[b.index]) {
            EXPECT_MSG(0, "N %d batch %lld: %d images, the CPU loader's %d", o.gpu_decoders, (long long)b.index, b.n,
                       b.index < r->nb ? r->n[b.index] : -1);
            break;
        }
        EXPECT_MSG(!memcmp(b.labels, r->labels + (size_t)b.index * o.batch, sizeof *b.labels * (size_t)b.n),
                   "N %d batch %lld: labels differ", o.gpu_decoders, (long long)b.index);
        EXPECT_MSG(!memcmp(b.dev_images, r->images + (size_t)b.index * o.batch * per, per * (size_t)b.n),
                   "N %d batch %lld: pixels differ from the CPU loader's", o.gpu_decoders, (long long)b.index);
        dt_loader_release(l, &b);
        if (++*got == stop_after) break;
    }
    snprintf(errbuf, cap, "%s", dt_loader_error(l));
    if (rc < 0) EXPECT_EQ_INT(dt_loader_next(l, &b), -1); /* the failure stays */
    dt_loader_free(l); /* joins every thread: a hang here is the failure */
    return rc;
}

DT_TEST(data_loader_gpu_decoders_in_order_on_the_emulator) {
    dt_dataset ds;
    dt_err err;
    EXPECT_EQ_INT(dt_dataset_open(&ds, dt_test_shapes("shapes48", 3, 16, 2, 48), "train", NULL, &err), 0);
    dt_loader_opts o = dt_loader_default_opts(1);
    o.batch = 2, o.image_size = 24, o.workers = 3, o.seed = 9, o.prefetch = 6;
    epoch_ref r = {0};
    reference_epoch(&ds, o, 1, &r);
    EXPECT(r.nb == 24);
    char why[1024];
    int64_t got;
    emu.fail_thread = -1;
    for (int n = 1; n <= 4; n++) {
        o.gpu_decoders = n;
        EXPECT_EQ_INT(emulated_epoch(&ds, o, 1, &r, 0, &got, why, sizeof why), 0);
        EXPECT_MSG(got == r.nb, "N %d: %lld of %lld batches", n, (long long)got, (long long)r.nb);
        EXPECT_EQ_INT(atomic_load(&emu.made), n);
    }
    /* a failure on thread i (index i - 1) of N from batch 4 on: batches 0 .. f - 1 come, then its error */
    for (int n = 2; n <= 4; n++) {
        o.gpu_decoders = n;
        emu.fail_thread = n - 1, emu.fail_from = 4;
        int rc = emulated_epoch(&ds, o, 1, &r, 0, &got, why, sizeof why);
        const int64_t f = atomic_load(&emu.failed_at);
        EXPECT_MSG(rc == -1 && f >= 4, "N %d: rc %d, the emulator failed at batch %lld", n, rc, (long long)f);
        EXPECT_MSG(got == f, "N %d: %lld batches before the failure at batch %lld", n, (long long)got, (long long)f);
        char want[200];
        snprintf(want, sizeof want, "GPU decode thread %d of %d: emulated failure at batch %lld", n, n, (long long)f);
        EXPECT_MSG(!strcmp(why, want), "N %d: '%s', expected '%s'", n, why, want);
    }
    /* an early stop with every thread busy: free joins them all */
    emu.fail_thread = -1;
    o.gpu_decoders = 4;
    EXPECT_EQ_INT(emulated_epoch(&ds, o, 1, &r, 3, &got, why, sizeof why), 1);
    EXPECT_EQ_INT(got, 3);
    free(r.images), free(r.labels), free(r.n);
    dt_dataset_close(&ds);
}

DT_TEST(data_loader_gpu_decoders_option_errors) {
    dt_dataset ds;
    dt_err err;
    EXPECT_EQ_INT(dt_dataset_open(&ds, dt_test_shapes("shapes", 3, 6, 2, 40), "train", NULL, &err), 0);
    dt_loader_opts o = dt_loader_default_opts(1);
    o.batch = 4, o.image_size = 16, o.workers = 1, o.decode = DT_DECODE_GPU;
    EXPECT_EQ_INT(o.gpu_decoders, 0); /* the default: DT_LOADER_GPU_DECODERS, at most prefetch - 1 */
    const int prefetch[] = {4, 2}, made[] = {DT_LOADER_GPU_DECODERS, 1};
    for (int i = 0; i < 2; i++) {
        o.prefetch = prefetch[i];
        emu.fail_thread = -1;
        dt_loader *l = loader_new_with(&ds, &o, &emulator, &err);
        char want[64];
        snprintf(want, sizeof want, made[i] == 1 ? "gpu: the emulator" : "gpu: %d decoders, the emulator", made[i]);
        EXPECT_MSG(l && strstr(dt_loader_decoder(l), want), "prefetch %d: '%s', wanted '%s'", prefetch[i],
                   l ? dt_loader_decoder(l) : err.msg, want);
        dt_loader_free(l);
    }
    o.prefetch = 4;
    const int bad[] = {-1, 9};
    for (int i = 0; i < 2; i++) {
        o.gpu_decoders = bad[i];
        EXPECT(loader_new_with(&ds, &o, &emulator, &err) == NULL);
        EXPECT_MSG(strstr(err.msg, "gpu_decoders") && strstr(err.msg, "out of range (1 .. 8)"), "%s", err.msg);
    }
    o.gpu_decoders = 4; /* prefetch 4 lets 3 decode */
    EXPECT(loader_new_with(&ds, &o, &emulator, &err) == NULL);
    EXPECT_MSG(strstr(err.msg, "gpu_decoders 4 needs prefetch 5 or more") && strstr(err.msg, "prefetch 4"), "%s",
               err.msg);
    o.prefetch = 5;
    atomic_store(&emu.made, 0);
    emu.fail_thread = -1;
    dt_loader *l = loader_new_with(&ds, &o, &emulator, &err);
    EXPECT_MSG(l && strstr(dt_loader_decoder(l), "gpu: 4 decoders, the emulator"), "%s",
               l ? dt_loader_decoder(l) : err.msg);
    dt_loader_free(l);
    dt_dataset_close(&ds);
}
