/* dt_gpu_decode.h: the loader's GPU decode - a batch of JPEG files (host bytes) decoded by
 * nvJPEG (dt_nvjpeg.h) into device memory and augmented there (dt_augment.h's kernel: crop,
 * antialiased resize, flip) into one of K output buffers:
 *
 *   jobs [n]  whole JPEG files in host memory, each with its size and transform plan
 *   ->  out_k  u8 [B, S, S, 3] HWC in device memory, job i written to row rows[i]
 *
 * The decoder works on a CUDA stream of its own, from the loader's decode thread, so that
 * decoding overlaps the training step on deftc's stream; it allocates with cudaMalloc, not
 * deftc's caching allocator (which orders reuse by deftc's stream alone). Backend: nvJPEG's
 * hardware JPEG engines where the GPU has them (A100, H100/H200: baseline files of one scan),
 * else the hybrid backend (Huffman decoding on the calling CPU thread, the rest on the GPU).
 *
 * The consumer never waits on the host: a batch's work ends in an event that the consumer's
 * stream waits for (dt_gpu_decoder_acquire) before it reads out_k, and
 * dt_gpu_decoder_released(k) records an event on the consumer's stream that the decoder's
 * stream waits for before it writes out_k again. The decode thread prepares batch k + 1 while
 * the engines and the kernel still work on batch k; it waits only for batch k - 1's decode
 * before it hands batch k + 1 to nvJPEG (two nvJPEG states in turn: a state's staging is
 * refilled by its next call, dt_gpu_decode.c). */
#ifndef DT_GPU_DECODE_H
#define DT_GPU_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "core/dt_common.h"
#include "data/dt_transform.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_gpu_decoder dt_gpu_decoder;

typedef struct {
    const uint8_t *jpeg;    /* the whole file (host memory) */
    size_t bytes;
    int w, h;               /* its size (the header's) */
    dt_transform_plan plan; /* made for w x h */
} dt_gpu_decode_job;

/* Why decode refused a job (refused[i]); its pixels then come from the CPU decoder. */
enum {
    DT_GPU_DECODE_OK = 0,
    DT_GPU_DECODE_FAILED = 1,    /* nvJPEG failed on it */
    DT_GPU_DECODE_TOO_LARGE = 2, /* its pixels do not fit in what is left of the batch's budget */
};

/* A decoder on `device` (the calling thread's device is left as it was) for batches of up to
 * B images into K output buffers u8 [B, S, S, 3]. NULL with err when there is no GPU, deftc
 * was built without CUDA, or nvJPEG cannot be loaded or started.
 *
 * Several decoders (the loader's gpu_decoders, one thread each): the first is made with first =
 * NULL and owns the K output buffers and their events; each later one is made with first = that
 * decoder and the same device, B, S and K, has its own nvJPEG handle, states, stream, decoded-
 * pixel buffer and augmentation staging, and writes the batches it decodes into the shared
 * buffers (out_k's release and done events are shared too, so a batch in out_k waits for the
 * last one there whichever decoder wrote it). A later decoder takes the first one's backend or
 * fails (no mix of hardware and hybrid). dt_gpu_decoder_images / acquire / released may be called
 * on any of them (the same buffers and events); the first is freed last. */
dt_gpu_decoder *dt_gpu_decoder_new(int device, int B, int S, int K, const dt_gpu_decoder *first, dt_err *err);
/* "nvJPEG 13.0.1 (...), hardware backend" */
const char *dt_gpu_decoder_describe(const dt_gpu_decoder *d);
/* 1 with the hardware backend (baseline JPEGs only: progressive and 12-bit files go to the CPU) */
int dt_gpu_decoder_hardware(const dt_gpu_decoder *d);
/* Makes the decoder's device current on the calling thread (the decode thread, once). */
void dt_gpu_decoder_bind_thread(const dt_gpu_decoder *d);

/* The decoded pixels one batch may hold in device memory (RGB, 3 bytes a pixel): 1 GiB, 256
 * ImageNet-sized images 7 times over; the images past it go to the CPU decoder. */
#define DT_GPU_DECODE_BUDGET ((size_t)1 << 30)

/* Whether nvJPEG's batched decoder takes this file (the hardware backend: its header parsed
 * and checked; the hybrid backend: always). Called by the loader's workers, each with its own
 * parse state (*parse, NULL at first; dt_gpu_decoder_parse_free at the end), so that the check
 * runs in parallel and not on the decode thread. */
typedef struct dt_gpu_parse dt_gpu_parse;
int dt_gpu_decoder_supported(const dt_gpu_decoder *d, const uint8_t *jpeg, size_t bytes, dt_gpu_parse **parse);
void dt_gpu_decoder_parse_free(const dt_gpu_decoder *d, dt_gpu_parse *parse);

/* Where the decode thread's time goes, ms, added to by dt_gpu_decoder_decode: waiting on the
 * host for out_k's previous batch, inside nvJPEG's calls, building and launching the
 * augmentation. */
typedef struct {
    double wait_ms, nvjpeg_ms, augment_ms;
} dt_gpu_decode_times;

/* Decodes jobs [n] into rows rows[i] of out_k (waiting first for out_k's release), on the
 * decoder's stream; refused[i] = 0, or why the job was not decoded (its row is not written);
 * *times (or NULL) gets this call's time added. 0, or -1 with err on a CUDA error. */
int dt_gpu_decoder_decode(dt_gpu_decoder *d, int k, const dt_gpu_decode_job *jobs, const int *rows, int n,
                          int *refused, dt_gpu_decode_times *times, dt_err *err);
/* Copies host rows (u8 [S, S, 3] each, row r at host_images + r * S * S * 3, pinned memory,
 * untouched until out_k is released) into the same rows of out_k, and records the batch's end:
 * work queued on deftc's stream after dt_gpu_decoder_acquire(k) sees the whole batch. -1 with
 * err on a CUDA error. */
int dt_gpu_decoder_finish(dt_gpu_decoder *d, int k, const uint8_t *host_images, const int *rows, int n, dt_err *err);
/* The consumer (deftc's stream of the calling thread) waits for out_k's batch. */
void dt_gpu_decoder_acquire(const dt_gpu_decoder *d, int k);
/* Waits on the host for every batch queued (benchmarks). */
int dt_gpu_decoder_sync(dt_gpu_decoder *d, dt_err *err);
/* out_k: u8 [B, S, S, 3] in device memory */
const uint8_t *dt_gpu_decoder_images(const dt_gpu_decoder *d, int k);
/* The consumer is done queueing reads of out_k on its stream (deftc's stream of the calling
 * thread; not while that stream captures a graph); returns when out_k's host rows may be
 * refilled (its batch's copies from them are done). */
void dt_gpu_decoder_released(dt_gpu_decoder *d, int k);
void dt_gpu_decoder_free(dt_gpu_decoder *d);

#ifdef __cplusplus
}
#endif
#endif
