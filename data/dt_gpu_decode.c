/* The loader's GPU decode (dt_gpu_decode.h): nvJPEG's batched decoder, then the augmentation
 * kernel, on a stream of the decoder's own. CUDA builds only (the Makefile's choice): a CPU-only
 * build links dt_gpu_decode_nocuda.c instead, whose decoder refuses to start. */
#include "data/dt_gpu_decode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/dt_augment.h"
#include "core/dt_device.h"
#include "data/dt_nvjpeg.h"
#include "core/dt_timer.h"
#include "core/dt_cuda.h"

/* One nvJPEG batched decoding state and the host arrays of its last call. A state is not
 * reusable while its last call is in flight: the call copies the batch's bitstreams into the
 * state's own staging and queues their upload and the decode on the stream, and a second call
 * on the state refills that staging while the first upload may still read it - which decoded
 * some of a batch's images from the next batch's files (whole images wrong: 2 of 192 on the
 * H200 with a training job beside it, gpu_loader_gpu_decode_matches_cpu). So the decoder
 * alternates two states and waits, before a state's call, for the one two batches back
 * (`decoded`): one batch decodes while the next one stages. */
typedef struct {
    dt_nvjpeg_state st;
    int init_n;               /* the batch size st is initialized for (0: none) */
    int pre_w, pre_h;         /* the image size st's buffers are preallocated for (0: none) */
    cudaEvent_t decoded;      /* recorded on the decoder's stream after the call's decode */
    /* [B] each: the call's inputs (the selected jobs' files, sizes, output images) */
    const unsigned char **data;
    size_t *len;
    dt_nvjpeg_image *img;
} nj_call;

struct dt_gpu_decoder {
    int device, B, S, K, hw;
    int shares;               /* 1: out, released and done are the first decoder's (dt_gpu_decoder_new) */
    const dt_nvjpeg_api *nj;
    dt_nvjpeg_handle h;
    nj_call calls[2];         /* used in turn, batch by batch */
    int turn;                 /* the next batch's call */
    cudaStream_t stream;
    uint8_t *out;             /* K buffers u8 [B, S, S, 3], one allocation */
    /* [K] events; one never recorded counts as complete in CUDA (a wait on it returns at once),
     * so the first use of a buffer needs no flag. Shared by all decoders of a loader with the
     * buffers: out_k's batches alternate between their streams, and each waits for the last. */
    cudaEvent_t *released;    /* recorded by the consumer on its stream */
    cudaEvent_t *done;        /* recorded on the stream of the decoder that wrote out_k last */
    /* [K] this decoder's own: recorded with done[k] on its stream, so that aug[k] is reused
     * after this decoder's last batch in out_k (done[k] may be another decoder's since) */
    cudaEvent_t *aug_done;
    uint8_t *pix;             /* the batch's decoded images, packed: [h_i, w_i, 3] at 256-byte offsets */
    size_t pix_cap;
    dt_augment_scratch *aug;  /* [K] the augmentation's table staging, one per buffer (reused after done[k]) */
    /* per batch, [B] each: the selected jobs' inputs to the augmentation */
    dt_augment_sample *as;
    int *sel, *arow;
    char desc[640];
};

static int cuda_err(dt_err *err, const char *what, cudaError_t e) {
    return dt_errf(err, "GPU decode: %s failed: %s", what, cudaGetErrorString(e));
}

static int nj_err(dt_err *err, const char *what, dt_nvjpeg_status s) {
    return dt_errf(err, "GPU decode: %s failed: %s", what, dt_nvjpeg_status_str(s));
}

/* The backend: the JPEG engines where the GPU has them (nvJPEG refuses them elsewhere), else
 * the hybrid one; a decoder after the first takes the first one's backend or fails. */
static int create_handle(dt_gpu_decoder *d, const dt_gpu_decoder *first, dt_err *err) {
    const dt_nvjpeg_api *nj = d->nj;
    dt_nvjpeg_status s = 0;
    if (!first || first->hw) {
        s = nj->CreateEx(DT_NVJPEG_BACKEND_HARDWARE, NULL, NULL, 0, &d->h);
        d->hw = s == 0;
        if (s && first) {
            d->h = NULL;
            return dt_errf(err, "GPU decode: the hardware backend, which the first decoder got, failed here: "
                           "nvjpegCreateEx: %s", dt_nvjpeg_status_str(s));
        }
    }
    if (!d->hw) s = nj->CreateEx(DT_NVJPEG_BACKEND_DEFAULT, NULL, NULL, 0, &d->h);
    if (s) {
        d->h = NULL;
        return nj_err(err, "nvjpegCreateEx", s);
    }
    return 0;
}

/* The K output buffers and their events: the first decoder's own, shared by the others. 0, or -1 with err. */
static int make_outputs(dt_gpu_decoder *d, const dt_gpu_decoder *first, dt_err *err) {
    const int K = d->K;
    cudaError_t ce;
    d->aug_done = dt_xcalloc((size_t)K, sizeof *d->aug_done);
    for (int k = 0; k < K; k++)
        if ((ce = cudaEventCreateWithFlags(&d->aug_done[k], cudaEventDisableTiming)) != cudaSuccess)
            return cuda_err(err, "cudaEventCreate", ce);
    if (first) {
        d->shares = 1;
        d->out = first->out, d->released = first->released, d->done = first->done;
        return 0;
    }
    size_t per = (size_t)d->S * d->S * 3;
    if ((ce = cudaMalloc((void **)&d->out, (size_t)K * d->B * per)) != cudaSuccess) {
        d->out = NULL;
        return cuda_err(err, "cudaMalloc of the output buffers", ce);
    }
    d->released = dt_xcalloc((size_t)K, sizeof *d->released);
    d->done = dt_xcalloc((size_t)K, sizeof *d->done);
    for (int k = 0; k < K; k++)
        if ((ce = cudaEventCreateWithFlags(&d->released[k], cudaEventDisableTiming)) != cudaSuccess ||
            (ce = cudaEventCreateWithFlags(&d->done[k], cudaEventDisableTiming)) != cudaSuccess)
            return cuda_err(err, "cudaEventCreate", ce);
    return 0;
}

dt_gpu_decoder *dt_gpu_decoder_new(int device, int B, int S, int K, const dt_gpu_decoder *first, dt_err *err) {
    const char *why;
    const dt_nvjpeg_api *nj = dt_nvjpeg(&why);
    if (!nj) {
        dt_errf(err, "GPU decode: %s", why);
        return NULL;
    }
    if (first && (first->device != device || first->B != B || first->S != S || first->K != K)) {
        dt_errf(err, "GPU decode: a decoder sharing another's buffers has its device, batch, size and buffer count");
        return NULL;
    }
    if (B > 65535) { /* the augmentation kernel's grid holds a batch in y */
        dt_errf(err, "GPU decode: a batch of %d images is more than the augmentation kernel's 65535", B);
        return NULL;
    }
    int ndev = dt_gpu_count();
    if (device < 0 || device >= ndev) {
        dt_errf(err, "GPU decode: no CUDA device %d (%d visible)", device, ndev);
        return NULL;
    }
    int prev = 0;
    cudaGetDevice(&prev);
    cudaError_t ce = cudaSetDevice(device);
    if (ce != cudaSuccess) {
        cuda_err(err, "cudaSetDevice", ce);
        return NULL;
    }
    dt_gpu_decoder *d = dt_xcalloc(1, sizeof *d);
    d->device = device, d->B = B, d->S = S, d->K = K, d->nj = nj;
    dt_nvjpeg_status s;
    if (create_handle(d, first, err)) goto fail;
    for (int c = 0; c < 2; c++) {
        nj_call *call = &d->calls[c];
        if ((s = nj->JpegStateCreate(d->h, &call->st))) {
            call->st = NULL;
            nj_err(err, "nvjpegJpegStateCreate", s);
            goto fail;
        }
        if ((ce = cudaEventCreateWithFlags(&call->decoded, cudaEventDisableTiming)) != cudaSuccess) {
            call->decoded = NULL;
            cuda_err(err, "cudaEventCreate", ce);
            goto fail;
        }
        call->data = dt_xcalloc((size_t)B, sizeof *call->data);
        call->len = dt_xcalloc((size_t)B, sizeof *call->len);
        call->img = dt_xcalloc((size_t)B, sizeof *call->img);
    }
    /* The highest priority: the augmentation's blocks are scheduled ahead of the training
     * step's queued ones, so that a batch is not held up behind a whole step (measured: the
     * decode thread took twice as long per batch beside a training step at default priority). */
    int least = 0, greatest = 0;
    cudaDeviceGetStreamPriorityRange(&least, &greatest);
    if ((ce = cudaStreamCreateWithPriority(&d->stream, cudaStreamNonBlocking, greatest)) != cudaSuccess) {
        d->stream = NULL;
        cuda_err(err, "cudaStreamCreateWithFlags", ce);
        goto fail;
    }
    if (make_outputs(d, first, err)) goto fail;
    d->aug = dt_xcalloc((size_t)K, sizeof *d->aug);
    d->as = dt_xcalloc((size_t)B, sizeof *d->as);
    d->sel = dt_xcalloc((size_t)B, sizeof *d->sel);
    d->arow = dt_xcalloc((size_t)B, sizeof *d->arow);
    snprintf(d->desc, sizeof d->desc, "%s, %s backend", dt_nvjpeg_describe(),
             d->hw ? "hardware (the GPU's JPEG engines)" : "hybrid (Huffman decoding on the CPU)");
    cudaSetDevice(prev);
    return d;
fail:
    dt_gpu_decoder_free(d);
    cudaSetDevice(prev);
    return NULL;
}

const char *dt_gpu_decoder_describe(const dt_gpu_decoder *d) { return d->desc; }
int dt_gpu_decoder_hardware(const dt_gpu_decoder *d) { return d->hw; }
void dt_gpu_decoder_bind_thread(const dt_gpu_decoder *d) { cudaSetDevice(d->device); }
const uint8_t *dt_gpu_decoder_images(const dt_gpu_decoder *d, int k) {
    return d->out + (size_t)k * d->B * d->S * d->S * 3;
}

/* (Re)initializes a call's batched state for n images when it is set up for another count. */
static dt_nvjpeg_status init_batch(const dt_gpu_decoder *d, nj_call *call, int n) {
    if (call->init_n == n) return 0;
    dt_nvjpeg_status s = d->nj->DecodeBatchedInitialize(d->h, call->st, n, 1, DT_NVJPEG_OUTPUT_RGBI);
    call->init_n = s ? 0 : n;
    call->pre_w = call->pre_h = 0;
    return s;
}

/* The hardware backend's buffers sized ahead for the largest image so far (a quarter more, whole
 * 64 pixels): without it nvJPEG frees and reallocates them inside nvjpegDecodeBatched as the
 * images' sizes change, and each of those CUDA calls waits for the whole device - beside a
 * training step, for the step (measured: `loaderbench --decode-only --beside-ms 5`, another
 * stream held by 5 ms host functions and no kernel, took nvJPEG's calls from 10.8 to 64 ms a
 * batch of 256; PERF section 25). Sized for 4:4:4, the most memory a file of that size needs.
 * A failure is not an error: decoding works without it, as before. */
static void preallocate(const dt_gpu_decoder *d, nj_call *call, int n, int max_w, int max_h) {
    if (!d->hw || !d->nj->DecodeBatchedPreAllocate || (max_w <= call->pre_w && max_h <= call->pre_h)) return;
    int w = max_w > call->pre_w ? (max_w + max_w / 4 + 63) / 64 * 64 : call->pre_w;
    int h = max_h > call->pre_h ? (max_h + max_h / 4 + 63) / 64 * 64 : call->pre_h;
    d->nj->DecodeBatchedPreAllocate(d->h, call->st, n, w, h, DT_NVJPEG_CSS_444, DT_NVJPEG_OUTPUT_RGBI);
    call->pre_w = w, call->pre_h = h; /* tried once a size, done or not */
}

int dt_gpu_decoder_decode(dt_gpu_decoder *d, int k, const dt_gpu_decode_job *jobs, const int *rows, int n,
                          int *refused, dt_gpu_decode_times *times, dt_err *err) {
    const dt_nvjpeg_api *nj = d->nj;
    cudaError_t ce;
    dt_gpu_decode_times none;
    if (!times) times = &none;
    double t0 = dt_now_ms();
    /* The host side of out_k's last batch (its table staging, the host rows it copied up) is
     * free once that batch's work is done: long ago, when the consumer has released it. */
    if ((ce = cudaEventSynchronize(d->done[k])) != cudaSuccess) return cuda_err(err, "the decode stream", ce);
    if ((ce = cudaEventSynchronize(d->aug_done[k])) != cudaSuccess) return cuda_err(err, "the decode stream", ce);
    /* the consumer's reads of out_k come before this batch's writes */
    if ((ce = cudaStreamWaitEvent(d->stream, d->released[k], 0)) != cudaSuccess)
        return cuda_err(err, "cudaStreamWaitEvent", ce);
    /* this batch's nvJPEG state: free once its call two batches back has decoded (nj_call) */
    nj_call *call = &d->calls[d->turn];
    d->turn ^= 1;
    if ((ce = cudaEventSynchronize(call->decoded)) != cudaSuccess) return cuda_err(err, "the decode stream", ce);
    times->wait_ms += dt_now_ms() - t0;
    /* Choose the jobs within the budget (the workers asked dt_gpu_decoder_supported first). */
    int m = 0;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        refused[i] = DT_GPU_DECODE_OK;
        size_t bytes = ((size_t)jobs[i].w * jobs[i].h * 3 + 255) & ~(size_t)255;
        if (m > 0 && total + bytes > DT_GPU_DECODE_BUDGET) {
            refused[i] = DT_GPU_DECODE_TOO_LARGE;
            continue;
        }
        d->sel[m] = i;
        d->as[m].offset = (int64_t)total;
        total += bytes;
        m++;
    }
    if (m == 0) return 0;
    if (total > d->pix_cap) { /* grow; the stream's earlier use of the old buffer finishes first */
        if ((ce = cudaStreamSynchronize(d->stream)) != cudaSuccess) return cuda_err(err, "cudaStreamSynchronize", ce);
        cudaFree(d->pix);
        d->pix = NULL;
        d->pix_cap = 0;
        size_t want = total + total / 4;
        if ((ce = cudaMalloc((void **)&d->pix, want)) != cudaSuccess)
            return cuda_err(err, "cudaMalloc of the decoded images", ce);
        d->pix_cap = want;
    }
    for (int j = 0; j < m; j++) {
        const dt_gpu_decode_job *jb = &jobs[d->sel[j]];
        call->data[j] = jb->jpeg;
        call->len[j] = jb->bytes;
        memset(&call->img[j], 0, sizeof call->img[j]);
        call->img[j].channel[0] = d->pix + d->as[j].offset;
        call->img[j].pitch[0] = (size_t)jb->w * 3;
    }
    t0 = dt_now_ms();
    dt_nvjpeg_status s = init_batch(d, call, m);
    int max_w = 0, max_h = 0;
    for (int j = 0; j < m; j++) {
        const dt_gpu_decode_job *jb = &jobs[d->sel[j]];
        if (jb->w > max_w) max_w = jb->w;
        if (jb->h > max_h) max_h = jb->h;
    }
    if (!s) preallocate(d, call, m, max_w, max_h);
    if (!s) s = nj->DecodeBatched(d->h, call->st, call->data, call->len, call->img, d->stream);
    if (s) {
        /* One file of the batch that nvJPEG cannot decode fails the whole call: decode them one
         * by one to find it (a rare path: the CPU checks passed these files), each call on the
         * state after the one before it has decoded (nj_call). */
        for (int j = 0; j < m; j++) {
            if ((ce = cudaStreamSynchronize(d->stream)) != cudaSuccess) return cuda_err(err, "the decode stream", ce);
            dt_nvjpeg_status s1 = init_batch(d, call, 1);
            if (!s1) s1 = nj->DecodeBatched(d->h, call->st, &call->data[j], &call->len[j], &call->img[j], d->stream);
            if (s1) refused[d->sel[j]] = DT_GPU_DECODE_FAILED;
        }
    }
    if ((ce = cudaEventRecord(call->decoded, d->stream)) != cudaSuccess) return cuda_err(err, "cudaEventRecord", ce);
    times->nvjpeg_ms += dt_now_ms() - t0;
    t0 = dt_now_ms();
    int na = 0;
    for (int j = 0; j < m; j++) {
        int i = d->sel[j];
        if (refused[i]) continue;
        d->as[na].offset = d->as[j].offset;
        d->as[na].w = jobs[i].w;
        d->as[na].h = jobs[i].h;
        d->as[na].plan = jobs[i].plan;
        d->arow[na] = rows[i];
        na++;
    }
    if (dt_augment_images_on_stream(na, d->S, d->pix, d->as, d->arow, (uint8_t *)dt_gpu_decoder_images(d, k), &d->aug[k],
                                    d->stream))
        return cuda_err(err, "the augmentation kernel", cudaGetLastError());
    times->augment_ms += dt_now_ms() - t0;
    return 0;
}

int dt_gpu_decoder_finish(dt_gpu_decoder *d, int k, const uint8_t *host_images, const int *rows, int n, dt_err *err) {
    size_t per = (size_t)d->S * d->S * 3;
    uint8_t *out = (uint8_t *)dt_gpu_decoder_images(d, k);
    cudaError_t ce;
    for (int i = 0; i < n; i++)
        if ((ce = cudaMemcpyAsync(out + (size_t)rows[i] * per, host_images + (size_t)rows[i] * per, per,
                                  cudaMemcpyHostToDevice, d->stream)) != cudaSuccess)
            return cuda_err(err, "cudaMemcpyAsync of a CPU-decoded row", ce);
    /* No host wait: the consumer's stream waits for this event (dt_gpu_decoder_acquire), and the
     * decode thread goes on to the next batch while the engines and the kernel work on this one. */
    if ((ce = cudaEventRecord(d->done[k], d->stream)) != cudaSuccess ||
        (ce = cudaEventRecord(d->aug_done[k], d->stream)) != cudaSuccess)
        return cuda_err(err, "cudaEventRecord", ce);
    return 0;
}

void dt_gpu_decoder_acquire(const dt_gpu_decoder *d, int k) { DT_CHECK(cudaStreamWaitEvent(dt_stream(), d->done[k], 0)); }

int dt_gpu_decoder_sync(dt_gpu_decoder *d, dt_err *err) {
    cudaError_t ce = cudaStreamSynchronize(d->stream);
    return ce == cudaSuccess ? 0 : cuda_err(err, "the decode stream", ce);
}

int dt_gpu_decoder_supported(const dt_gpu_decoder *d, const uint8_t *jpeg, size_t bytes, dt_gpu_parse **parse) {
    if (!d->hw) return 1; /* the hybrid backend decodes every file the CPU walk lets through */
    const dt_nvjpeg_api *nj = d->nj;
    if (!*parse && nj->JpegStreamCreate(d->h, (dt_nvjpeg_jpeg_stream *)parse)) {
        *parse = NULL;
        return 0;
    }
    dt_nvjpeg_jpeg_stream js = (dt_nvjpeg_jpeg_stream)*parse;
    int unsupported = 1;
    return !nj->JpegStreamParseHeader(d->h, jpeg, bytes, js) && !nj->DecodeBatchedSupported(d->h, js, &unsupported) &&
           !unsupported;
}

void dt_gpu_decoder_parse_free(const dt_gpu_decoder *d, dt_gpu_parse *parse) {
    if (parse) d->nj->JpegStreamDestroy((dt_nvjpeg_jpeg_stream)parse);
}

void dt_gpu_decoder_released(dt_gpu_decoder *d, int k) {
    DT_CHECK(cudaEventRecord(d->released[k], dt_stream()));
    /* a worker refills the slot's pinned host rows next: the copies up from them are done first */
    DT_CHECK(cudaEventSynchronize(d->done[k]));
}

void dt_gpu_decoder_free(dt_gpu_decoder *d) {
    if (!d) return;
    int prev = 0;
    cudaGetDevice(&prev);
    cudaSetDevice(d->device);
    if (d->stream) cudaStreamSynchronize(d->stream);
    for (int c = 0; c < 2; c++) {
        nj_call *call = &d->calls[c];
        if (call->st) d->nj->JpegStateDestroy(call->st);
        if (call->decoded) cudaEventDestroy(call->decoded);
        free(call->data), free(call->len), free(call->img);
    }
    if (d->h) d->nj->Destroy(d->h);
    for (int k = 0; d->aug && k < d->K; k++) dt_augment_scratch_free(&d->aug[k]);
    cudaFree(d->pix);
    for (int k = 0; d->aug_done && k < d->K; k++)
        if (d->aug_done[k]) cudaEventDestroy(d->aug_done[k]);
    free(d->aug_done);
    if (!d->shares) { /* the first decoder's, freed after the others (dt_gpu_decode.h) */
        cudaFree(d->out);
        for (int k = 0; d->released && k < d->K; k++) {
            if (d->released[k]) cudaEventDestroy(d->released[k]);
            if (d->done[k]) cudaEventDestroy(d->done[k]);
        }
        free(d->released), free(d->done);
    }
    if (d->stream) cudaStreamDestroy(d->stream);
    free(d->aug);
    free(d->as), free(d->sel), free(d->arow);
    free(d);
    cudaSetDevice(prev);
}
