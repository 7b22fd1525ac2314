/* CUDA version of dt_augment.h: the filter tables built on the host from the transform's own
 * axes, then one thread per output byte. */
#include <cstring>
#include <vector>

#include "core/dt_alloc.h"
#include "data/dt_augment.h"
#include "core/dt_kernel_util.cuh"

namespace {

/* One sample on the device: its pixels, and where its tables start. The int table holds, from
 * ix: x starts [S], x counts [S], y starts [S], y counts [S]; the float table the x weights
 * [S, tx] from wx and the y weights [S, ty] from wy. */
struct aug_desc {
    int64_t src;     /* byte offset of the [h, w, 3] image */
    int w, flip, tx, ty;
    int row;         /* the output row it writes */
    int64_t wx, wy, ix;
};

/* out [N, S, S, 3]: grid (blocks, N), a thread per byte of one sample. The sums are
 * dt_image_resample's, operation for operation (__fmul_rn / __fadd_rn: never an fma). */
__global__ void k_augment(int S, const uint8_t *__restrict__ src, const aug_desc *__restrict__ d,
                          const float *__restrict__ wt, const int *__restrict__ it, uint8_t *__restrict__ out) {
    const aug_desc q = d[blockIdx.y];
    const int64_t per = (int64_t)S * S * 3;
    const int *ix = it + q.ix;
    uint8_t *o = out + (int64_t)q.row * per;
    DT_GRID_STRIDE(e, per) {
        int c = (int)(e % 3), x = (int)((e / 3) % S), y = (int)(e / (3 * (int64_t)S));
        int xs = q.flip ? S - 1 - x : x; /* RandomHorizontalFlip: the resampled row, mirrored */
        int x0 = ix[xs], nx = ix[S + xs], y0 = ix[2 * S + y], ny = ix[3 * S + y];
        const float *wx = wt + q.wx + (int64_t)xs * q.tx, *wy = wt + q.wy + (int64_t)y * q.ty;
        float acc = 0.0f;
        for (int k = 0; k < ny; k++) {
            const uint8_t *p = src + q.src + ((int64_t)(y0 + k) * q.w + x0) * 3 + c;
            float h = 0.0f; /* the horizontal pass's value of source row y0 + k */
            for (int j = 0; j < nx; j++) h = __fadd_rn(h, __fmul_rn(wx[j], (float)p[j * 3]));
            float m = __fmul_rn(wy[k], h);
            acc = k ? __fadd_rn(acc, m) : m;
        }
        float v = acc < 0.0f ? 0.0f : acc > 255.0f ? 255.0f : acc;
        o[e] = (uint8_t)__fadd_rn(v, 0.5f);
    }
}

}  // namespace

/* The three tables of n samples, laid out in one block: descriptors, then the float weights,
 * then the int starts and counts, each part 256-byte aligned. */
struct aug_tables {
    std::vector<aug_desc> desc;
    std::vector<float> wt;
    std::vector<int> it;
    size_t fo, io, bytes; /* where the weights and the ints start; the block's size */
};

static void build_tables(int n, int S, const dt_augment_sample *samples, const int *rows, aug_tables *t) {
    t->desc.assign((size_t)n, aug_desc());
    std::vector<dt_axis_map> axes(2 * (size_t)n);
    int64_t nf = 0;
    for (int i = 0; i < n; i++) {
        const dt_augment_sample *s = &samples[i];
        dt_transform_axes(&s->plan, s->w, s->h, S, &axes[2 * i], &axes[2 * i + 1]);
        aug_desc &q = t->desc[i];
        q.src = s->offset;
        q.w = s->w;
        q.flip = s->plan.flip;
        q.row = rows ? rows[i] : i;
        q.tx = dt_axis_taps(&axes[2 * i]);
        q.ty = dt_axis_taps(&axes[2 * i + 1]);
        q.wx = nf;
        nf += (int64_t)S * q.tx;
        q.wy = nf;
        nf += (int64_t)S * q.ty;
        q.ix = (int64_t)i * 4 * S;
    }
    t->wt.assign((size_t)nf, 0.0f);
    t->it.assign((size_t)n * 4 * S, 0);
    for (int i = 0; i < n; i++) {
        const aug_desc &q = t->desc[i];
        int *ix = &t->it[(size_t)q.ix];
        dt_axis_weights(&axes[2 * i], q.tx, ix, ix + S, &t->wt[(size_t)q.wx]);
        dt_axis_weights(&axes[2 * i + 1], q.ty, ix + 2 * S, ix + 3 * S, &t->wt[(size_t)q.wy]);
    }
    size_t db = t->desc.size() * sizeof(aug_desc), fb = t->wt.size() * sizeof(float), ib = t->it.size() * sizeof(int);
    t->fo = (db + 255) & ~(size_t)255;
    t->io = (t->fo + fb + 255) & ~(size_t)255;
    t->bytes = t->io + ib;
}

static void pack_tables(const aug_tables *t, char *host) {
    memcpy(host, t->desc.data(), t->desc.size() * sizeof(aug_desc));
    memcpy(host + t->fo, t->wt.data(), t->wt.size() * sizeof(float));
    memcpy(host + t->io, t->it.data(), t->it.size() * sizeof(int));
}

static void launch(int n, int S, const uint8_t *src, const char *dev_tables, const aug_tables *t, uint8_t *out,
                   cudaStream_t stream) {
    int64_t per = (int64_t)S * S * 3;
    dim3 grid(dt_blocks_per_plane(per, n), (unsigned)n);
    k_augment<<<grid, 256, 0, stream>>>(S, src, (const aug_desc *)dev_tables, (const float *)(dev_tables + t->fo),
                                        (const int *)(dev_tables + t->io), out);
}

extern "C" {
void dt_augment_images_cuda(int n, int S, const uint8_t *src, const dt_augment_sample *samples, uint8_t *out) {
    if (n <= 0) return;
    dt_check_grid_yz("augment_images", n, 1);
    aug_tables t;
    build_tables(n, S, samples, NULL, &t);
    std::vector<char> host(t.bytes);
    pack_tables(&t, host.data());
    /* one device block for the three tables, freed after the launch (one stream: safe to reuse) */
    char *dev = (char *)dt_gpu_malloc(t.bytes);
    dt_copy_h2d(dev, host.data(), t.bytes);
    launch(n, S, src, dev, &t, out, dt_stream());
    DT_CHECK_LAUNCH();
    dt_gpu_free(dev);
}

int dt_augment_images_on_stream(int n, int S, const uint8_t *src, const dt_augment_sample *samples, const int *rows,
                                uint8_t *out, dt_augment_scratch *scratch, void *stream) {
    if (n <= 0) return 0;
    if (n > 65535) return -1;
    aug_tables t;
    build_tables(n, S, samples, rows, &t);
    cudaStream_t st = (cudaStream_t)stream;
    if (scratch->bytes < t.bytes) { /* grow both buffers (the caller's earlier use of them is done) */
        cudaFreeHost(scratch->host);
        cudaFree(scratch->dev);
        scratch->host = scratch->dev = NULL;
        scratch->bytes = 0;
        size_t want = t.bytes + t.bytes / 2;
        if (cudaMallocHost(&scratch->host, want) != cudaSuccess || cudaMalloc(&scratch->dev, want) != cudaSuccess)
            return -1;
        scratch->bytes = want;
    }
    pack_tables(&t, (char *)scratch->host);
    if (cudaMemcpyAsync(scratch->dev, scratch->host, t.bytes, cudaMemcpyHostToDevice, st) != cudaSuccess) return -1;
    launch(n, S, src, (const char *)scratch->dev, &t, out, st);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

void dt_augment_scratch_free(dt_augment_scratch *scratch) {
    cudaFreeHost(scratch->host);
    cudaFree(scratch->dev);
    scratch->host = scratch->dev = NULL;
    scratch->bytes = 0;
}
}
