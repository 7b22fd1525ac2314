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

struct dt_gpu_decoder {
    int device, B, S, K, hw;
    const dt_nvjpeg_api *nj;
    dt_nvjpeg_handle h;
    dt_nvjpeg_state st;
    int init_n;               /* the batch size st is initialized for (0: none) */
    cudaStream_t stream;
    uint8_t *out;             /* K buffers u8 [B, S, S, 3], one allocation */
    /* [K] events; one never recorded counts as complete in CUDA (a wait on it returns at once),
     * so the first use of a buffer needs no flag */
    cudaEvent_t *released;    /* recorded by the consumer on its stream */
    cudaEvent_t *done;        /* recorded on the decoder's stream after out_k's last write */
    uint8_t *pix;             /* the batch's decoded images, packed: [h_i, w_i, 3] at 256-byte offsets */
    size_t pix_cap;
    dt_augment_scratch *aug;  /* [K] the augmentation's table staging, one per buffer (reused after done[k]) */
    /* per batch, [B] each: the selected jobs' inputs to nvJPEG and to the augmentation */
    const unsigned char **data;
    size_t *len;
    dt_nvjpeg_image *img;
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

dt_gpu_decoder *dt_gpu_decoder_new(int device, int B, int S, int K, dt_err *err) {
    const char *why;
    const dt_nvjpeg_api *nj = dt_nvjpeg(&why);
    if (!nj) {
        dt_errf(err, "GPU decode: %s", why);
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
    /* The JPEG engines where the GPU has them; nvJPEG refuses the backend elsewhere. */
    dt_nvjpeg_status s = nj->CreateEx(DT_NVJPEG_BACKEND_HARDWARE, NULL, NULL, 0, &d->h);
    d->hw = s == 0;
    if (!d->hw) s = nj->CreateEx(DT_NVJPEG_BACKEND_DEFAULT, NULL, NULL, 0, &d->h);
    if (s) {
        d->h = NULL;
        nj_err(err, "nvjpegCreateEx", s);
        goto fail;
    }
    if ((s = nj->JpegStateCreate(d->h, &d->st))) {
        d->st = NULL;
        nj_err(err, "nvjpegJpegStateCreate", s);
        goto fail;
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
    size_t per = (size_t)S * S * 3;
    if ((ce = cudaMalloc((void **)&d->out, (size_t)K * B * per)) != cudaSuccess) {
        d->out = NULL;
        cuda_err(err, "cudaMalloc of the output buffers", ce);
        goto fail;
    }
    d->released = dt_xcalloc((size_t)K, sizeof *d->released);
    d->done = dt_xcalloc((size_t)K, sizeof *d->done);
    d->aug = dt_xcalloc((size_t)K, sizeof *d->aug);
    for (int k = 0; k < K; k++)
        if ((ce = cudaEventCreateWithFlags(&d->released[k], cudaEventDisableTiming)) != cudaSuccess ||
            (ce = cudaEventCreateWithFlags(&d->done[k], cudaEventDisableTiming)) != cudaSuccess) {
            cuda_err(err, "cudaEventCreate", ce);
            goto fail;
        }
    d->data = dt_xcalloc((size_t)B, sizeof *d->data);
    d->len = dt_xcalloc((size_t)B, sizeof *d->len);
    d->img = dt_xcalloc((size_t)B, sizeof *d->img);
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

/* (Re)initializes the batched decoder for n images when it is set up for another count. */
static dt_nvjpeg_status init_batch(dt_gpu_decoder *d, int n) {
    if (d->init_n == n) return 0;
    dt_nvjpeg_status s = d->nj->DecodeBatchedInitialize(d->h, d->st, n, 1, DT_NVJPEG_OUTPUT_RGBI);
    d->init_n = s ? 0 : n;
    return s;
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
    /* the consumer's reads of out_k come before this batch's writes */
    if ((ce = cudaStreamWaitEvent(d->stream, d->released[k], 0)) != cudaSuccess)
        return cuda_err(err, "cudaStreamWaitEvent", ce);
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
        d->data[j] = jb->jpeg;
        d->len[j] = jb->bytes;
        memset(&d->img[j], 0, sizeof d->img[j]);
        d->img[j].channel[0] = d->pix + d->as[j].offset;
        d->img[j].pitch[0] = (size_t)jb->w * 3;
    }
    t0 = dt_now_ms();
    dt_nvjpeg_status s = init_batch(d, m);
    if (!s) s = nj->DecodeBatched(d->h, d->st, d->data, d->len, d->img, d->stream);
    if (s) {
        /* One file of the batch that nvJPEG cannot decode fails the whole call: decode them one
         * by one to find it (a rare path: the CPU checks passed these files). */
        for (int j = 0; j < m; j++) {
            dt_nvjpeg_status s1 = init_batch(d, 1);
            if (!s1) s1 = nj->DecodeBatched(d->h, d->st, &d->data[j], &d->len[j], &d->img[j], d->stream);
            if (s1) refused[d->sel[j]] = DT_GPU_DECODE_FAILED;
        }
    }
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
    if ((ce = cudaEventRecord(d->done[k], d->stream)) != cudaSuccess) return cuda_err(err, "cudaEventRecord", ce);
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
    if (d->st) d->nj->JpegStateDestroy(d->st);
    if (d->h) d->nj->Destroy(d->h);
    for (int k = 0; d->aug && k < d->K; k++) dt_augment_scratch_free(&d->aug[k]);
    cudaFree(d->pix);
    cudaFree(d->out);
    for (int k = 0; d->released && k < d->K; k++) {
        if (d->released[k]) cudaEventDestroy(d->released[k]);
        if (d->done[k]) cudaEventDestroy(d->done[k]);
    }
    if (d->stream) cudaStreamDestroy(d->stream);
    free(d->released), free(d->done), free(d->aug);
    free(d->data), free(d->len), free(d->img), free(d->as), free(d->sel), free(d->arow);
    free(d);
    cudaSetDevice(prev);
}
