/* build/loaderbench: how fast the data pipeline decodes and augments, without a GPU.
 *
 *   build/loaderbench --data DIR [--split train] [--workers N] [--batch 64] [--size 224]
 *                     [--epochs 1] [--cache 0|1] [--val] [--max-batches N] [--decode cpu|gpu|auto]
 *                     [--gpu-decoders N]
 *   build/loaderbench --data DIR --decode-only [--batch 256] [--max-batches N] [--beside-ms M] [--gpu-decoders N]
 *                                                    (nvJPEG alone, or beside a stream kept busy)
 *   build/loaderbench --scan-test N [--scan-classes C] [--tmp DIR]
 *                                                    time dt_dataset_open on N empty files
 *
 * It prints the scan's time and memory (the index's heap bytes a file, the scan's peak), the
 * loader's start, and for the first epochs their start (sampling, shuffle) and first batch: at
 * ImageNet's scale on the tree bench/imagenet_tree.py makes (docs/data.md).
 * Without --workers it runs once with 1 worker and once with one per core, and prints
 * images/s in total and per worker. The consumer releases each batch at once, so the numbers
 * are the pipeline's ceiling; a training step slower than B / (images/s) never waits.
 */
#include <stdlib.h>

#include "core/dt_common.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "core/dt_alloc.h"
#include "data/dt_dataset.h"
#include "core/dt_device.h"
#include "core/dt_file.h"
#include "data/dt_gpu_decode.h"
#include "data/dt_image.h"
#include "data/dt_image_header.h"
#include "data/dt_loader.h"
#include "core/dt_timer.h"
#include "data/dt_transform.h"
#include <pthread.h>
#ifdef DT_CUDA
#include <cuda_runtime.h>
#include <stdatomic.h>
#endif

static void usage(void) {
    puts("usage: loaderbench --data DIR [--split train] [--workers N] [--batch 64] [--size 224]\n"
         "                   [--epochs 1] [--cache 0|1] [--val] [--max-batches N] [--decode cpu|gpu|auto]\n"
         "                   [--gpu-decoders N]\n"
         "       loaderbench --data DIR --decode-only [--batch 256] [--max-batches N] [--beside-ms M] [--gpu-decoders N]\n"
         "       loaderbench --scan-test N [--scan-classes C] [--tmp DIR]\n"
         "  --data DIR       dataset root (DIR/train/<class>/<image>)\n"
         "  --split NAME     split to read (default train)\n"
         "  --workers N      loader threads (default: run with 1, then with one per core)\n"
         "  --batch B        batch size (default 64)\n"
         "  --size S         output image size S x S (default 224)\n"
         "  --epochs E       epochs per run (default 1; with --cache 1 the first one fills the cache)\n"
         "  --cache 0|1      keep decoded images in memory (default 0)\n"
         "  --val            val transform (resize + center crop, no shuffle) instead of train\n"
         "  --max-batches N  stop each epoch after N batches\n"
         "  --decode WHERE   cpu (the workers, default), gpu (nvJPEG + the GPU augmentation: batches in device\n"
         "                   memory), auto (gpu where a CUDA GPU is visible, else cpu)\n"
         "  --decode-only    the GPU decoder alone on files read into memory first: nvJPEG + the augmentation of\n"
         "                   a val transform, batches of --batch, every JPEG nvJPEG takes (--max-batches of them)\n"
         "  --gpu-decoders N GPU decode threads, each with its own nvJPEG decoder and stream, on consecutive batches\n"
         "                   (1 .. 8, default 2 as the loader's; the loader's prefetch is raised to N + 1 where 4 is too few)\n"
         "  --beside-ms M    with --decode-only: another stream of the device kept busy meanwhile by host functions\n"
         "                   of M ms each, back to back (no kernel: no SM is used); a decoder slowed by it waits\n"
         "                   for the whole device somewhere (an implicit synchronization), not for SMs\n"
         "  --scan-test N    create N empty *.JPEG files in C class folders (--scan-classes, default 100)\n"
         "                   under --tmp (default /tmp), time the dataset scan, remove them");
}

static int arg_int(const char *flag, const char *v, int lo, int hi) {
    char *end;
    long x = strtol(v, &end, 10);
    if (!*v || *end || x < lo || x > hi) {
        fprintf(stderr, "loaderbench: %s '%s' is not an integer in %d .. %d\n", flag, v, lo, hi);
        exit(2);
    }
    return (int)x;
}

static int scan_test(int n, int classes, const char *tmpbase) {
    char root[1024], path[1200];
    snprintf(root, sizeof root, "%s/loaderbench-scan-XXXXXX", tmpbase);
    if (!mkdtemp(root)) {
        fprintf(stderr, "loaderbench: cannot create a folder under %s: %s\n", tmpbase, strerror(errno));
        return 1;
    }
    double t0 = dt_now_ms();
    snprintf(path, sizeof path, "%s/train", root);
    mkdir(path, 0777);
    for (int c = 0; c < classes; c++) {
        snprintf(path, sizeof path, "%s/train/n%08d", root, c);
        mkdir(path, 0777);
    }
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/train/n%08d/n%08d_%d.JPEG", root, i % classes, i % classes, i);
        int fd = open(path, O_CREAT | O_WRONLY, 0644);
        if (fd < 0) {
            fprintf(stderr, "loaderbench: cannot create %s: %s\n", path, strerror(errno));
            return 1;
        }
        close(fd);
    }
    double t_make = dt_now_ms() - t0;
    dt_dataset ds;
    dt_err err;
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        t0 = dt_now_ms();
        if (dt_dataset_open(&ds, root, "train", NULL, &err) != 0) {
            fprintf(stderr, "loaderbench: %s\n", err.msg);
            return 1;
        }
        double ms = dt_now_ms() - t0;
        if (ms < best) best = ms;
        if (ds.count != n) fprintf(stderr, "loaderbench: scanned %lld files, expected %d\n", (long long)ds.count, n);
        dt_dataset_close(&ds);
    }
    printf("scan: %d files in %d classes: created in %.2f s; dataset scan %.1f ms = %.0f files/s (best of 3, warm "
           "cache)\n",
           n, classes, t_make / 1e3, best, n / (best / 1e3));
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    return system(cmd) == 0 ? 0 : 1;
}

#ifdef DT_CUDA
/* --beside-ms: a non-blocking stream of the decoder's device held by host functions that sleep
 * `ms` each, one always queued behind the running one, until `stop`. It occupies no SM and no
 * copy engine: only work that waits for the whole device (cudaDeviceSynchronize, cudaFree, an
 * allocation between two streams' commands) waits for it. */
typedef struct {
    int device, ms;
    atomic_int stop;
    long long holds;
    pthread_t th;
} beside_load;

static void CUDART_CB hold_stream(void *ms) { usleep((useconds_t)(*(const int *)ms) * 1000u); }

static void *beside_main(void *arg) {
    beside_load *b = arg;
    cudaSetDevice(b->device);
    cudaStream_t st;
    cudaEvent_t ev[2];
    if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreateWithFlags(&ev[0], cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&ev[1], cudaEventDisableTiming) != cudaSuccess) {
        fprintf(stderr, "loaderbench: --beside-ms: could not make its stream\n");
        return NULL;
    }
    for (long long i = 0; !atomic_load(&b->stop); i++) {
        cudaLaunchHostFunc(st, hold_stream, &b->ms);
        cudaEventRecord(ev[i & 1], st);
        if (i > 0) cudaEventSynchronize(ev[(i - 1) & 1]); /* the next hold is queued before this one ends */
        b->holds = i;
    }
    cudaStreamSynchronize(st);
    cudaEventDestroy(ev[0]), cudaEventDestroy(ev[1]);
    cudaStreamDestroy(st);
    return NULL;
}
#endif

/* --decode-only, one of its --gpu-decoders threads: decoder d (its own nvJPEG decoder and
 * stream; the first one's 2 N output buffers, shared) decodes batches i, i + N, i + 2N, ... of
 * jobs [nb, batch] into buffer b % 2N (each buffer stays one thread's: no release needed).
 * Batch i warms up (allocations, the engines), then the threads wait for each other and the
 * clock at `start` (decode_only_bench has at least 2 N batches: every thread warms up). */
typedef struct {
    dt_gpu_decoder *d;
    const dt_gpu_decode_job *jobs;
    int64_t nb, refusals;
    int i, n, batch, rc;
    int *rows, *refused;
    dt_gpu_decode_times times;
    pthread_barrier_t *start;
    dt_err err;
} decode_thread;

static void *decode_thread_main(void *arg) {
    decode_thread *t = arg;
    dt_gpu_decoder_bind_thread(t->d);
    for (int64_t b = t->i; b < t->nb && !t->rc; b += t->n) {
        const int k = (int)(b % (2 * t->n));
        t->rc = dt_gpu_decoder_decode(t->d, k, t->jobs + b * t->batch, t->rows, t->batch, t->refused, &t->times,
                                      &t->err) ||
                dt_gpu_decoder_finish(t->d, k, NULL, t->rows, 0, &t->err);
        for (int r = 0; b >= t->n && r < t->batch; r++) t->refusals += t->refused[r] != 0;
        if (b == t->i) { /* the warm-up batch: done, then the others' */
            if (!t->rc) t->rc = dt_gpu_decoder_sync(t->d, &t->err);
            t->times = (dt_gpu_decode_times){0};
            pthread_barrier_wait(t->start);
        }
    }
    if (!t->rc) t->rc = dt_gpu_decoder_sync(t->d, &t->err);
    return NULL;
}

/* --decode-only: the JPEGs of ds (as many as max_batches + 1 batches take, or all) read into
 * memory, probed and planned (a val transform): jobs [*m] over files [n] (malloc'ed). */
static dt_gpu_decode_job *read_jobs(const dt_dataset *ds, int64_t n, int size, dt_scratch **files_out, int64_t *m_out,
                                    double *bytes) {
    dt_err err;
    dt_gpu_decode_job *jobs = dt_xcalloc((size_t)n, sizeof *jobs);
    dt_scratch *files = dt_xcalloc((size_t)n, sizeof *files);
    int64_t m = 0;
    *bytes = 0;
    for (int64_t i = 0; i < n; i++) {
        size_t len;
        int w, h;
        if (dt_file_read(ds->paths[i], "", DT_IMAGE_MAX_FILE_BYTES, &files[m], &len, &err) ||
            dt_image_probe(files[m].p, len, ds->paths[i], DT_IMAGE_MAX_PIXELS, &w, &h, &err) ||
            dt_image_format_of(files[m].p, len) != DT_FMT_JPEG)
            continue;
        jobs[m].jpeg = files[m].p, jobs[m].bytes = len, jobs[m].w = w, jobs[m].h = h;
        dt_transform_plan_val(w, h, size, &jobs[m].plan);
        *bytes += (double)len;
        m++;
    }
    *files_out = files;
    *m_out = m;
    return jobs;
}

/* --decode-only: the files read into memory first, then the GPU decoders alone - nvJPEG's
 * batched decode and the augmentation kernel with a val transform, ndec threads on batches in
 * turn (decode_thread) - timed from the end of the warm-up batches to the end of the last. */
static int decode_only_bench(const dt_dataset *ds, int batch, int size, int max_batches, int beside_ms, int ndec) {
    int64_t n = ds->count;
    if (max_batches && (int64_t)(max_batches + ndec) * batch < n) n = (int64_t)(max_batches + ndec) * batch;
    dt_err err;
    dt_gpu_decoder *d[DT_LOADER_MAX_GPU_DECODERS] = {0};
    for (int i = 0; i < ndec; i++)
        if (!(d[i] = dt_gpu_decoder_new(dt_gpu_current(), batch, size, 2 * ndec, i ? d[0] : NULL, &err))) {
            fprintf(stderr, "loaderbench: decoder %d of %d: %s\n", i + 1, ndec, err.msg);
            return 1;
        }
    printf("decode-only: %d decoder%s, %s, batch %d, val transform to %d\n", ndec, ndec > 1 ? "s" : "",
           dt_gpu_decoder_describe(d[0]), batch, size);
    dt_scratch *files;
    int64_t m;
    double bytes;
    dt_gpu_decode_job *jobs = read_jobs(ds, n, size, &files, &m, &bytes);
    int64_t nb = m / batch, images = 0, refusals = 0;
    if (nb < 2 * ndec) {
        fprintf(stderr, "loaderbench: --decode-only needs at least %d batches of JPEGs (%lld found)\n", 2 * ndec,
                (long long)m);
        return 1;
    }
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)ndec + 1);
    decode_thread th[DT_LOADER_MAX_GPU_DECODERS];
    pthread_t tid[DT_LOADER_MAX_GPU_DECODERS];
#ifdef DT_CUDA
    beside_load load = {.device = dt_gpu_current(), .ms = beside_ms};
    if (beside_ms > 0 && pthread_create(&load.th, NULL, beside_main, &load)) {
        fprintf(stderr, "loaderbench: --beside-ms: no thread\n");
        return 1;
    }
#endif
    for (int i = 0; i < ndec; i++) {
        th[i] = (decode_thread){.d = d[i], .jobs = jobs, .nb = nb, .i = i, .n = ndec, .batch = batch, .start = &start};
        th[i].rows = dt_xcalloc((size_t)batch, sizeof *th[i].rows);
        th[i].refused = dt_xcalloc((size_t)batch, sizeof *th[i].refused);
        for (int r = 0; r < batch; r++) th[i].rows[r] = r;
        if (pthread_create(&tid[i], NULL, decode_thread_main, &th[i])) {
            fprintf(stderr, "loaderbench: no decode thread %d\n", i + 1);
            return 1;
        }
    }
    pthread_barrier_wait(&start);
    double t0 = dt_now_ms();
    dt_gpu_decode_times times = {0};
    int rc = 0;
    for (int i = 0; i < ndec; i++) {
        pthread_join(tid[i], NULL);
        if (th[i].rc && !rc) fprintf(stderr, "loaderbench: decode thread %d of %d: %s\n", i + 1, ndec, th[i].err.msg);
        rc |= th[i].rc;
        refusals += th[i].refusals;
        times.nvjpeg_ms += th[i].times.nvjpeg_ms, times.wait_ms += th[i].times.wait_ms;
        free(th[i].rows), free(th[i].refused);
    }
    double s = (dt_now_ms() - t0) / 1e3;
    images = (nb - ndec) * batch;
    long long holds = 0;
#ifdef DT_CUDA
    if (beside_ms > 0) {
        atomic_store(&load.stop, 1);
        pthread_join(load.th, NULL);
        holds = load.holds;
    }
#endif
    pthread_barrier_destroy(&start);
    if (!rc) {
        printf("decode-only: %lld images in %.3f s = %.0f images/s (%lld refused by nvJPEG; %.0f KB a file); a batch: "
               "%.2f ms in nvJPEG's calls, %.2f ms waiting for its buffer (a thread's, on average)",
               (long long)images, s, images / s, (long long)refusals, bytes / (double)m / 1024,
               times.nvjpeg_ms / (double)(nb - ndec), times.wait_ms / (double)(nb - ndec));
        if (beside_ms > 0) printf("; beside a stream held %d ms at a time (%lld holds)", beside_ms, holds);
        printf("\n");
    }
    for (int64_t i = 0; i < n; i++) dt_scratch_free(&files[i]);
    free(files), free(jobs);
    for (int i = ndec - 1; i >= 0; i--) dt_gpu_decoder_free(d[i]); /* the first, owning the buffers, last */
    return rc ? 1 : 0;
}

/* The command line's settings (usage() says what each means). */
typedef struct {
    const char *data, *split, *tmpbase;
    int workers, batch, size, epochs, cache, val, max_batches, scan_n, scan_classes, decode, decode_only, beside_ms;
    int gpu_decoders;
} bench_opts;

/* Reads the flags into *o: -1 to go on, else the exit code (0 after --help, 2 on a bad flag). */
static int parse_args(int argc, char **argv, bench_opts *o) {
    *o = (bench_opts){.split = "train", .tmpbase = "/tmp", .workers = -1, .batch = 64, .size = 224, .epochs = 1,
                      .scan_classes = 100, .decode = DT_DECODE_CPU, .gpu_decoders = DT_LOADER_GPU_DECODERS};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 0;
        } else if (!strcmp(a, "--val")) {
            o->val = 1;
        } else if (!strcmp(a, "--decode-only")) {
            o->decode_only = 1;
        } else if (!has) {
            fprintf(stderr, "loaderbench: %s needs a value (or is unknown); --help lists the flags\n", a);
            return 2;
        } else if (!strcmp(a, "--data")) {
            o->data = argv[++i];
        } else if (!strcmp(a, "--split")) {
            o->split = argv[++i];
        } else if (!strcmp(a, "--tmp")) {
            o->tmpbase = argv[++i];
        } else if (!strcmp(a, "--workers")) {
            o->workers = arg_int(a, argv[++i], 1, 1024);
        } else if (!strcmp(a, "--batch")) {
            o->batch = arg_int(a, argv[++i], 1, 65536);
        } else if (!strcmp(a, "--size")) {
            o->size = arg_int(a, argv[++i], 8, 8192);
        } else if (!strcmp(a, "--epochs")) {
            o->epochs = arg_int(a, argv[++i], 1, 1000);
        } else if (!strcmp(a, "--cache")) {
            o->cache = arg_int(a, argv[++i], 0, 1);
        } else if (!strcmp(a, "--decode")) {
            const char *v = argv[++i];
            o->decode = !strcmp(v, "cpu")    ? DT_DECODE_CPU
                        : !strcmp(v, "gpu")  ? DT_DECODE_GPU
                        : !strcmp(v, "auto") ? DT_DECODE_AUTO
                                             : -1;
            if (o->decode < 0) {
                fprintf(stderr, "loaderbench: --decode '%s': expected cpu, gpu or auto\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--gpu-decoders")) {
            o->gpu_decoders = arg_int(a, argv[++i], 1, DT_LOADER_MAX_GPU_DECODERS);
        } else if (!strcmp(a, "--beside-ms")) {
            o->beside_ms = arg_int(a, argv[++i], 1, 10000);
        } else if (!strcmp(a, "--max-batches")) {
            o->max_batches = arg_int(a, argv[++i], 1, 1 << 30);
        } else if (!strcmp(a, "--scan-classes")) {
            o->scan_classes = arg_int(a, argv[++i], 1, 100000);
        } else if (!strcmp(a, "--scan-test")) {
            o->scan_n = arg_int(a, argv[++i], 1, 100000000);
        } else {
            fprintf(stderr, "loaderbench: unknown flag %s; valid: --data --split --workers --batch --size --epochs "
                            "--cache --val --max-batches --decode --decode-only --gpu-decoders --beside-ms --scan-test --scan-classes "
                            "--tmp\n", a);
            return 2;
        }
    }
    if (o->beside_ms && !o->decode_only) {
        fprintf(stderr, "loaderbench: --beside-ms goes with --decode-only\n");
        return 2;
    }
    return -1;
}

/* Settles where the images are decoded (auto: the GPU where there is one, as the trainer) and
 * readies the GPU when one is needed: 0, or 1 with the reason on stderr. */
static int choose_decoder(bench_opts *o) {
    if (o->decode == DT_DECODE_AUTO && dt_gpu_count() == 0) {
        printf("decode auto: no CUDA GPU is visible, so the CPU workers decode (--decode cpu)\n");
        o->decode = DT_DECODE_CPU;
    }
    if (o->decode == DT_DECODE_CPU && !o->decode_only) return 0;
    if (dt_gpu_count() == 0) {
        fprintf(stderr, "loaderbench: %s needs a CUDA GPU (none is visible%s)\n",
                o->decode_only ? "--decode-only" : "--decode gpu", dt_built_with_cuda() ? "" : ": this build has CUDA=0");
        return 1;
    }
    dt_gpu_init(0); /* before the loader: pinned slots, and the decoder's device */
    return 0;
}

/* Bytes of heap in use (glibc: small blocks and mmap'd ones), for the index's memory; 0 where
 * the C library does not say. */
static size_t heap_in_use(void) {
#ifdef __GLIBC__
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
#else
    return 0;
#endif
}

/* This process's peak resident memory so far, bytes. */
static size_t peak_rss(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (size_t)ru.ru_maxrss * 1024 : 0;
}

/* One epoch of loader l, every batch released at once: one line of the table (and the loader's
 * statistics when they say more: skipped files, the GPU decode, the cache's last epoch); for the
 * first epoch of the first run also what an epoch's start costs (its sampling and shuffle) and
 * when the first batch came. */
static int time_epoch(dt_loader *l, const bench_opts *o, int workers, int e, int first) {
    double te = dt_now_ms();
    dt_loader_start_epoch(l, e);
    const double start_ms = dt_now_ms() - te;
    dt_batch b = {0};
    int64_t images = 0, nb = 0;
    int rc;
    while ((rc = dt_loader_next(l, &b)) == 1) {
        if (first && nb == 0)
            printf("epoch %d: started (sampling, shuffle) in %.1f ms, first batch after %.1f ms\n", e, start_ms,
                   dt_now_ms() - te);
        images += b.n;
        dt_loader_release(l, &b);
        if (o->max_batches && ++nb >= o->max_batches) break;
    }
    if (rc < 0) {
        fprintf(stderr, "loaderbench: %s\n", dt_loader_error(l));
        return 1;
    }
    double s = (dt_now_ms() - te) / 1e3;
    dt_loader_stats st = dt_loader_epoch_stats(l);
    printf("%8d %6d %9lld %9.2f %10.1f %12.1f %12.2f %10.1f\n", workers, e, (long long)images, s, images / s,
           images / s / workers, st.decode_ms / (double)(images ? images : 1), 100.0 * st.wait_ms / (s * 1e3));
    if (st.skipped || st.gpu_decode || (o->cache && e == o->epochs - 1)) {
        char line[1024];
        dt_loader_stats_str(&st, line, sizeof line);
        printf("         %s\n", line);
    }
    return 0;
}

/* The whole pipeline: a loader of `workers` threads over ds for o->epochs epochs. */
static int time_loader(const dt_dataset *ds, const bench_opts *o, int workers, int first) {
    dt_loader_opts lo = dt_loader_default_opts(!o->val);
    lo.batch = o->batch;
    lo.image_size = o->size;
    lo.workers = workers;
    lo.cache = o->cache;
    lo.decode = o->decode;
    lo.gpu_decoders = o->gpu_decoders;
    lo.prefetch = o->gpu_decoders + 1 > 4 ? o->gpu_decoders + 1 : 4; /* the loader's rule: at most prefetch - 1 */
    lo.seed = 1;
    dt_err err;
    const size_t heap0 = heap_in_use();
    const double t0 = dt_now_ms();
    dt_loader *l = dt_loader_new(ds, &lo, &err);
    if (!l) {
        fprintf(stderr, "loaderbench: %s\n", err.msg);
        return 1;
    }
    if (first) {
        /* mostly the batch slots (their pixels); the per-file part is the epoch's draw and order
         * (16 bytes a file) and the bad-file bits */
        printf("decode: %s\nloader: ready in %.1f ms, %.1f MB of heap with its batch slots\n", dt_loader_decoder(l),
               dt_now_ms() - t0, (heap_in_use() - heap0) / 1e6);
    }
    int rc = 0;
    for (int e = 0; e < o->epochs && !rc; e++) rc = time_epoch(l, o, workers, e, first && e < 2);
    dt_loader_free(l);
    return rc;
}

/* Without --workers: once with 1 worker and once with one per core. */
static int pipeline_bench(const dt_dataset *ds, const bench_opts *o) {
    int cores = dt_num_cores();
    int runs[2] = {1, cores}, nruns = o->workers > 0 ? 1 : (cores > 1 ? 2 : 1);
    if (o->workers > 0) runs[0] = o->workers;
    printf("%s transform, batch %d, %dx%d, cache %s, %d cores\n", o->val ? "val" : "train", o->batch, o->size, o->size,
           o->cache ? "on" : "off", cores);
    printf("%8s %6s %9s %9s %10s %12s %12s %10s\n", "workers", "epoch", "images", "seconds", "images/s",
           "img/s/worker", "ms/img/worker", "wait %");
    for (int r = 0; r < nruns; r++)
        if (time_loader(ds, o, runs[r], r == 0)) return 1;
    return 0;
}

int main(int argc, char **argv) {
    dt_set_fatal_handler(exit); /* a failure outside a guarded call ends this program (dt_common.h) */
    bench_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0) return rc;
    if (o.scan_n) return scan_test(o.scan_n, o.scan_classes, o.tmpbase);
    if (!o.data) {
        fprintf(stderr, "loaderbench: --data DIR is required (build/mkdata makes one)\n");
        return 2;
    }
    dt_dataset ds;
    dt_err err;
    const size_t heap0 = heap_in_use(), rss0 = peak_rss();
    double t0 = dt_now_ms();
    if (dt_dataset_open(&ds, o.data, o.split, NULL, &err) != 0) {
        fprintf(stderr, "loaderbench: %s\n", err.msg);
        return 1;
    }
    const double scan_ms = dt_now_ms() - t0;
    const size_t index = heap_in_use() - heap0, peak = peak_rss() - rss0;
    const double per = 1.0 / (double)(ds.count ? ds.count : 1);
    printf("dataset %s: %lld images, %d classes, scanned in %.1f ms; index %.1f MB of heap (%.0f bytes a file), "
           "the scan's peak resident memory +%.1f MB (%.0f bytes a file)\n",
           ds.dir, (long long)ds.count, ds.num_classes, scan_ms, index / 1e6, index * per, peak / 1e6, peak * per);
    fflush(stdout); /* before any error on stderr: a caller reading both sees them in order */
    if (choose_decoder(&o)) return 1;
    rc = o.decode_only ? decode_only_bench(&ds, o.batch, o.size, o.max_batches, o.beside_ms, o.gpu_decoders)
                       : pipeline_bench(&ds, &o);
    dt_dataset_close(&ds);
    return rc;
}
