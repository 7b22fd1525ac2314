/* dt_nvjpeg_pool.c: nvJPEG's own allocations kept and reused (dt_nvjpeg_pool.h says why). */
#include "data/dt_nvjpeg_pool.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdlib.h>

enum { KIND_DEVICE = 0, KIND_PINNED = 1 };
#define GRANULE ((size_t)64 << 10) /* new blocks are whole 64 KiB */

typedef struct {
    void *p;
    size_t bytes;
    int kind, device; /* device: the CUDA device of a device block (-1 for pinned ones) */
    unsigned flags;   /* cudaHostAlloc's flags of a pinned block */
    int in_use;
} block;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static block *g_blocks; /* [g_n] of [g_cap] */
static int g_n, g_cap, g_users;
static dt_nvjpeg_pool_stats g_stats;

static void cuda_free_block(const block *b) {
    if (b->kind == KIND_PINNED) {
        cudaFreeHost(b->p);
        return;
    }
    int prev = 0;
    cudaGetDevice(&prev);
    cudaSetDevice(b->device);
    cudaFree(b->p);
    cudaSetDevice(prev);
}

/* Frees the kept blocks no one uses (of one kind, or of both with kind < 0); g_mu held. */
static void drop_unused(int kind) {
    int m = 0;
    for (int i = 0; i < g_n; i++) {
        block *b = &g_blocks[i];
        if (!b->in_use && (kind < 0 || b->kind == kind)) {
            cuda_free_block(b);
            *(b->kind == KIND_DEVICE ? &g_stats.dev_bytes : &g_stats.pinned_bytes) -= b->bytes;
        } else {
            g_blocks[m++] = *b;
        }
    }
    g_n = m;
}

static cudaError_t cuda_alloc(int kind, void **p, size_t bytes, unsigned flags) {
    return kind == KIND_DEVICE ? cudaMalloc(p, bytes) : cudaHostAlloc(p, bytes, flags);
}

static int pool_alloc(int kind, void **ptr, size_t bytes, unsigned flags) {
    int device = -1;
    if (kind == KIND_DEVICE && cudaGetDevice(&device) != cudaSuccess) return (int)cudaErrorInvalidDevice;
    if (bytes == 0) bytes = 1;
    pthread_mutex_lock(&g_mu);
    /* the smallest free block of this kind that holds the request and is at most twice it */
    int best = -1;
    for (int i = 0; i < g_n; i++) {
        const block *b = &g_blocks[i];
        if (b->in_use || b->kind != kind || b->device != device || b->flags != flags || b->bytes < bytes ||
            b->bytes / 2 > bytes)
            continue;
        if (best < 0 || b->bytes < g_blocks[best].bytes) best = i;
    }
    if (best >= 0) {
        g_blocks[best].in_use = 1;
        *ptr = g_blocks[best].p;
        ++*(kind == KIND_DEVICE ? &g_stats.dev_reuses : &g_stats.pinned_reuses);
        pthread_mutex_unlock(&g_mu);
        return 0;
    }
    const size_t want = (bytes + GRANULE - 1) / GRANULE * GRANULE;
    void *p = NULL;
    cudaError_t ce = cuda_alloc(kind, &p, want, flags);
    if (ce != cudaSuccess) { /* what is kept and unused may be what stands in the way: once more without it */
        cudaGetLastError();
        drop_unused(kind);
        ce = cuda_alloc(kind, &p, want, flags);
    }
    if (ce == cudaSuccess && g_n == g_cap) {
        int cap = g_cap ? 2 * g_cap : 64;
        block *nb = realloc(g_blocks, (size_t)cap * sizeof *nb);
        if (!nb) {
            kind == KIND_DEVICE ? cudaFree(p) : cudaFreeHost(p);
            ce = cudaErrorMemoryAllocation;
        } else {
            g_blocks = nb, g_cap = cap;
        }
    }
    if (ce == cudaSuccess) {
        g_blocks[g_n++] = (block){p, want, kind, device, flags, 1};
        ++*(kind == KIND_DEVICE ? &g_stats.dev_allocs : &g_stats.pinned_allocs);
        *(kind == KIND_DEVICE ? &g_stats.dev_bytes : &g_stats.pinned_bytes) += want;
        *ptr = p;
    }
    pthread_mutex_unlock(&g_mu);
    return (int)ce;
}

/* A block back to the pool (kept, not freed); a pointer the pool never gave out goes to CUDA. */
static int pool_free(int kind, void *ptr) {
    if (!ptr) return 0;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_n; i++)
        if (g_blocks[i].p == ptr && g_blocks[i].kind == kind) {
            g_blocks[i].in_use = 0;
            pthread_mutex_unlock(&g_mu);
            return 0;
        }
    pthread_mutex_unlock(&g_mu);
    return (int)(kind == KIND_DEVICE ? cudaFree(ptr) : cudaFreeHost(ptr));
}

static int dev_malloc(void **ptr, size_t bytes) { return pool_alloc(KIND_DEVICE, ptr, bytes, 0); }
static int dev_free(void *ptr) { return pool_free(KIND_DEVICE, ptr); }
static int pinned_malloc(void **ptr, size_t bytes, unsigned int flags) {
    return pool_alloc(KIND_PINNED, ptr, bytes, flags);
}
static int pinned_free(void *ptr) { return pool_free(KIND_PINNED, ptr); }

static const dt_nvjpeg_dev_allocator g_dev = {dev_malloc, dev_free};
static const dt_nvjpeg_pinned_allocator g_pinned = {pinned_malloc, pinned_free};

void dt_nvjpeg_pool_acquire(const dt_nvjpeg_dev_allocator **dev, const dt_nvjpeg_pinned_allocator **pinned) {
    pthread_mutex_lock(&g_mu);
    g_users++;
    pthread_mutex_unlock(&g_mu);
    *dev = &g_dev;
    *pinned = &g_pinned;
}

void dt_nvjpeg_pool_release(void) {
    pthread_mutex_lock(&g_mu);
    if (g_users > 0 && --g_users == 0) {
        drop_unused(-1);
        if (g_n == 0) {
            free(g_blocks);
            g_blocks = NULL;
            g_cap = 0;
        }
    }
    pthread_mutex_unlock(&g_mu);
}

dt_nvjpeg_pool_stats dt_nvjpeg_pool_get_stats(void) {
    pthread_mutex_lock(&g_mu);
    dt_nvjpeg_pool_stats s = g_stats;
    pthread_mutex_unlock(&g_mu);
    return s;
}
