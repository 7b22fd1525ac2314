/* dt_loader.h: a multi-threaded batch loader over a dt_dataset.
 *
 * Worker threads decode and transform samples (dt_transform.h) into a ring of `prefetch`
 * batch slots in host memory (pinned when the GPU context is up: init the GPU before making
 * the loader, so the training loop's host->device copies can be asynchronous):
 *
 *   images [B, S, S, 3] uint8, HWC (RGB interleaved)   labels [B] int32
 *
 * The pixels are the transform's (crop, antialiased resize rounded to uint8 like PIL, flip),
 * not yet normalized: the consumer uploads them (a quarter of the bytes of float32) and turns
 * them into the model's input on its device in one pass, ToTensor + Normalize with
 * dt_imagenet_mean / dt_imagenet_std:
 *
 *   x = dt_normalize_images(u8 [n, S, S, 3], dt_imagenet_mean, dt_imagenet_std, dtype, layout)
 *       -> [n, 3, S, S] in the model's dtype and layout (f32 NCHW, f32 NHWC or bf16 NHWC)
 *
 * The training loop, per epoch:
 *
 *   dt_loader_start_epoch(l, epoch);
 *   dt_batch cur = {0}, prev = {0};
 *   while (dt_loader_next(l, &cur) == 1) {      // blocks only while the workers are behind
 *       copy cur.images (or cur.dev_images) / cur.labels to the device (async), normalize, step ...
 *       dt_loader_release(l, &prev);            // after its copy has completed (dev_images: queued)
 *       prev = cur;
 *   }
 *   dt_loader_release(l, &prev);
 *
 * Determinism: the order of an epoch is a Fisher-Yates shuffle from (seed, epoch) when
 * training, the dataset order otherwise; sample i's augmentation draws from the stream
 * (seed, epoch, i). Batches are bit-identical for any number of workers and any timing.
 *
 * Sharding (data parallel, PyTorch's DistributedSampler): replica r of R takes the epoch
 * positions r, r + R, r + 2R, ... of the same epoch order, so the shards are disjoint and
 * together hold every image once. Training (drop_last) keeps floor(n / (B R)) batches on
 * every replica, so that batch b of all replicas together is exactly batch b of one replica
 * with batch B R; evaluation keeps every image, the shards differing by at most one image. A
 * sample's augmentation depends on (seed, epoch, image) alone, and an unreadable image is
 * replaced by the next one of the epoch order, as without sharding: the global batch is the
 * same whatever R.
 *
 * Subset (opts.subset = N): an epoch draws from a fixed sample of N images instead of all,
 * stratified by class (each class in proportion to its size), chosen from the seed alone: the
 * same images every epoch, every run with that seed, for any number of shards (which split it
 * as they split the whole set). Evaluation on a budget scores every class, not the first ones
 * in folder order.
 *
 * Unreadable images (missing, corrupt, truncated, over max_pixels) are skipped: one warning
 * naming the file the first time, a thread-safe bitmap remembers it for later epochs, and the
 * slot is filled with the next sample of the epoch order that decodes (wrapping around), so a
 * batch never shrinks and the result does not depend on which worker found the bad file. The
 * epoch's count is in dt_loader_epoch_stats and in a warning when its last batch is handed
 * out. A class all of whose files are bad is an error: dt_loader_new decodes images of each
 * class until one does (one decode per class, at the smallest scale) and fails naming the
 * class when none does; a class whose files go bad later makes dt_loader_next return -1
 * naming it. It would otherwise vanish from training without a word. A train loader over a
 * dataset of one class is an error too (the loss is 0 from the first step).
 *
 * Decoding: the header's size is read first and the transform planned from it, so that a JPEG
 * is decoded only as large as the transform needs (dt_image_decode's min_scale).
 *
 * GPU decode (opts.decode = DT_DECODE_GPU, or AUTO where nvJPEG and the GPU context are there;
 * not with the cache, which keeps CPU-decoded images): the workers read each file, probe its
 * header and plan its transform as before, and check the JPEG's markers (dt_jpeg_read_layout);
 * a baseline JPEG that nvJPEG decodes as the CPU would stays encoded in the slot, everything else
 * (PNG, BMP, progressive, CMYK, 12-bit, truncated) is decoded and transformed on the CPU into
 * the slot's host row as before. A decode thread then decodes the slot's JPEGs with nvJPEG's
 * batched decoder on a stream of its own, augments them on the GPU (dt_augment.h's kernel:
 * the CPU path's filter), copies the CPU rows up, and hands the batch out complete in device
 * memory: dt_batch.dev_images = u8 [B, S, S, 3] (images is NULL; deftc's stream waits for its
 * writes, so work queued there after dt_loader_next reads the whole batch). A file nvJPEG refuses is
 * decoded on the CPU by that thread; one that does not decode there either is skipped and
 * replaced exactly as on the CPU path (same labels, same order, same streams). The consumer
 * reads dev_images on deftc's stream; dt_loader_release records an event there that the
 * decode thread's stream waits for before it reuses the buffer. The epoch's counts per route are in
 * dt_loader_stats.
 *
 * Several GPU decoders (opts.gpu_decoders = N): N decode threads, each with its own nvJPEG
 * handle, states, stream, decoded-pixel buffer and augmentation staging, claim the ready batches
 * in order (a batch counter under the loader's mutex) and decode consecutive batches at once
 * into the ring's shared device buffers; dt_loader_next hands batch k out only once its own
 * thread is done with it (never a later one first), so batches come in order, bit-identical for
 * any N (sample i's streams do not depend on the thread). N <= prefetch - 1: the consumer holds
 * a slot while N others decode. A decode thread's error ("GPU decode thread i of N: ...") is
 * returned by dt_loader_next at the batch it failed on (the batches before it are handed out),
 * and no thread claims a batch after it in that epoch.
 *
 * Cache (opts.cache): every decoded image is kept in memory as uint8 with its shorter side
 * reduced to cache_size (default round(S * 256 / 224), the val resize, so val batches are
 * bit-identical with and without the cache); train crops are then taken from the cached
 * image, also on the first epoch, so results do not depend on whether an image was already
 * cached. Shared by all workers and epochs; cache_max_mb caps it.
 */
#ifndef DT_LOADER_H
#define DT_LOADER_H

#include "core/dt_api.h"

#include <stddef.h>
#include <stdint.h>

#include "core/dt_common.h"
#include "data/dt_dataset.h"

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

typedef struct dt_loader dt_loader;

/* Where JPEGs are decoded: on the CPU workers, on the GPU (nvJPEG; an error when it cannot
 * be), or on the GPU when it can be (the reason otherwise in dt_loader_decoder). */
typedef enum { DT_DECODE_CPU = 0, DT_DECODE_GPU = 1, DT_DECODE_AUTO = 2 } dt_decode;

typedef struct {
    int batch;        /* B (default 64) */
    int image_size;   /* S (default 224) */
    int train;        /* 1: shuffle + RandomResizedCrop + flip; 0: resize + center crop */
    int workers;      /* threads (0 = number of cores) */
    uint64_t seed;
    int cache;        /* keep decoded, downsized images in memory */
    int cache_size;   /* shorter side of cached images (0 = round(S * 256 / 224)) */
    int cache_max_mb; /* cap on cache memory (0 = no cap); images past it are not kept */
    int drop_last;    /* -1 = default: 1 when training, 0 otherwise (last batch short) */
    int prefetch;     /* ring slots K (default 4, at least 2) */
    double crop_scale_min; /* RandomResizedCrop's smallest area fraction (default 0.08) */
    int64_t max_pixels;    /* images with more pixels (read in the header) are skipped with a
                              warning before decoding (default DT_IMAGE_MAX_PIXELS, PIL's) */
    int shard, shards;     /* data parallel: this replica's share of each epoch (default 0 of 1) */
    int64_t subset;        /* 0: every image; N: a fixed sample of N, stratified by class (see above) */
    int decode;            /* dt_decode (default DT_DECODE_CPU: batches in host memory) */
    int gpu_decoders;      /* GPU decode: decode threads, each with its own nvJPEG decoder, on
                              consecutive batches at once (1 .. DT_LOADER_MAX_GPU_DECODERS, at most
                              prefetch - 1; 0: DT_LOADER_GPU_DECODERS, at most prefetch - 1; not
                              used when the CPU decodes) */
} dt_loader_opts;

#define DT_LOADER_MAX_GPU_DECODERS 8
/* The default count (opts.gpu_decoders 0, the config's gpu_decoders): two decode threads measured
 * 1.27x one decode-only and took the real-data bf16 batch-256 step from 28.4 to 19.7 ms (H100,
 * 2026-12-06, docs/data.md); three were no faster than two. */
#define DT_LOADER_GPU_DECODERS 2

/* The defaults above; train selects the train defaults. */
dt_loader_opts dt_loader_default_opts(int train);

typedef struct {
    uint8_t *images;  /* [B, S, S, 3] uint8 HWC, not normalized (rows past n are stale); NULL with GPU decode */
    const uint8_t *dev_images; /* GPU decode: the same, in device memory; deftc's stream (of the thread
                                  that called dt_loader_next) waits for it to be written */
    int32_t *labels;  /* [B] int32 */
    int n;            /* samples in this batch (B except a short last batch) */
    int64_t index;    /* batch number in the epoch */
    int slot_;        /* ring slot, for dt_loader_release */
    int64_t gen_;
} dt_batch;

typedef struct {
    int epoch;
    int64_t batches;      /* handed out so far in this epoch */
    int64_t images;       /* samples in those batches */
    int64_t skipped;      /* samples of this epoch that did not decode (slot refilled) */
    int64_t bad_files;    /* distinct files known not to decode, all epochs */
    double decode_ms;     /* worker time decoding + transforming, summed over workers */
    double wait_ms;       /* time dt_loader_next blocked in this epoch */
    double total_wait_ms; /* ... over all epochs */
    double epoch_ms;      /* since dt_loader_start_epoch */
    int64_t cache_images; /* images held in the cache */
    size_t cache_bytes;
    /* GPU decode, this epoch: images decoded by nvJPEG; decoded on the CPU instead because the
     * file is not a JPEG, because its layout is not one nvJPEG decodes as the CPU does
     * (progressive, CMYK, 12-bit, truncated, ...), or because nvJPEG refused it; the decode
     * threads' time (summed over the gpu_decoders threads), and of it: inside nvJPEG's calls, building and launching the augmentation,
     * waiting on the host for a buffer's previous batch */
    int gpu_decode;
    int64_t gpu_images, cpu_not_jpeg, cpu_jpeg_layout, cpu_refused;
    double gpu_ms, gpu_nvjpeg_ms, gpu_augment_ms, gpu_wait_ms;
} dt_loader_stats;

/* ds must outlive the loader. One consumer thread calls start_epoch / next / release. Errors
 * (bad option, fewer images than one batch with drop_last, one class for training, a class
 * none of whose images decodes) return NULL with err set. */
dt_loader *dt_loader_new(const dt_dataset *ds, const dt_loader_opts *opts, dt_err *err);
/* Starts (or restarts) an epoch; batches of an unfinished epoch are abandoned and any batch
 * still held becomes invalid. */
void dt_loader_start_epoch(dt_loader *l, int epoch);
/* 1: got a batch (blocks until ready); 0: the epoch is done; -1: no image of the dataset, or
 * of one class, decodes (dt_loader_error says why). At most prefetch - 1 batches may be held
 * at once. */
int dt_loader_next(dt_loader *l, dt_batch *b);
void dt_loader_release(dt_loader *l, dt_batch *b);
int64_t dt_loader_batches(const dt_loader *l); /* batches per epoch */
int64_t dt_loader_size(const dt_loader *l);    /* images an epoch draws from (the subset's, or all), all shards */
int dt_loader_classes(const dt_loader *l);     /* classes among them */
dt_loader_stats dt_loader_epoch_stats(dt_loader *l);
/* One line: "epoch 3: 1251 batches, 0 skipped, decode 812.3 s (worker), wait 1.2 s, ..." */
void dt_loader_stats_str(const dt_loader_stats *s, char *buf, size_t cap);
const char *dt_loader_error(dt_loader *l);
/* Which decoder runs: "gpu: nvJPEG 13.0.1 (...), hardware backend" or "cpu (libjpeg-turbo)",
 * with decode=auto's reason when it fell back to the CPU. */
const char *dt_loader_decoder(const dt_loader *l);
void dt_loader_free(dt_loader *l); /* joins the workers, also mid-epoch */

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
