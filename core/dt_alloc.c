#include "dt_alloc.h"

#include <stdlib.h>
#include <string.h>

#include "dt_common.h"
#include "dt_device.h"
#ifdef DT_CUDA
#include "dt_cuda.h"
#endif

void *dt_host_alloc(size_t bytes, int pinned) {
    void *p = NULL;
#ifdef DT_CUDA
    if (pinned && dt_gpu_ready()) {
        if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess)
            dt_fatal("cudaMallocHost of %zu bytes failed", bytes);
        return p;
    }
#else
    (void)pinned;
#endif
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
        dt_fatal("out of host memory allocating %zu bytes", bytes);
    return p;
}

void *dt_dev_alloc(dt_dev dev, size_t bytes) {
    return dev == DT_GPU ? dt_gpu_malloc(bytes) : dt_host_alloc(bytes, 0);
}

void dt_dev_free(dt_dev dev, void *ptr) {
    if (dev == DT_GPU) dt_gpu_free(ptr); else dt_host_free(ptr, 0);
}

void dt_host_free(void *ptr, int pinned) {
    if (!ptr) return;
#ifdef DT_CUDA
    if (pinned && dt_gpu_ready()) {
        cudaFreeHost(ptr);
        return;
    }
#else
    (void)pinned;
#endif
    free(ptr);
}

#ifdef DT_CUDA

/* Free blocks sorted by size (ascending); live blocks in an open-addressing hash table
 * keyed by pointer. Both stay small (hundreds of entries), so this costs well under a
 * microsecond per call. */
typedef struct {
    void *ptr;
    size_t size;
} block;

static block *g_free;
static int g_nfree, g_capfree;
static block *g_live; /* ptr == NULL: empty slot; ptr == TOMB: deleted */
static size_t g_livecap, g_nlive, g_ntomb;
static dt_mem_stats g_stats;
static int g_poison;
static void *const TOMB = (void *)1;

static size_t round_size(size_t b) { return b < 512 ? 512 : (b + 511) & ~(size_t)511; }

static size_t hash_ptr(void *p) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x;
}

static void live_insert(void *p, size_t size);

static void live_grow(void) {
    block *old = g_live;
    size_t oldcap = g_livecap;
    g_livecap = oldcap ? oldcap * 2 : 1024;
    g_live = dt_xcalloc(g_livecap, sizeof(block));
    g_nlive = g_ntomb = 0;
    for (size_t i = 0; i < oldcap; i++)
        if (old[i].ptr && old[i].ptr != TOMB) live_insert(old[i].ptr, old[i].size);
    free(old);
}

static void live_insert(void *p, size_t size) {
    if ((g_nlive + g_ntomb + 1) * 2 > g_livecap) live_grow();
    size_t m = g_livecap - 1, i = hash_ptr(p) & m;
    while (g_live[i].ptr && g_live[i].ptr != TOMB) i = (i + 1) & m;
    if (g_live[i].ptr == TOMB) g_ntomb--;
    g_live[i].ptr = p;
    g_live[i].size = size;
    g_nlive++;
}

static size_t live_remove(void *p) {
    if (!g_livecap) return 0;
    size_t m = g_livecap - 1, i = hash_ptr(p) & m;
    while (g_live[i].ptr) {
        if (g_live[i].ptr == p) {
            size_t s = g_live[i].size;
            g_live[i].ptr = TOMB;
            g_nlive--;
            g_ntomb++;
            return s;
        }
        i = (i + 1) & m;
    }
    return 0;
}

static int free_lower_bound(size_t size) {
    int lo = 0, hi = g_nfree;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (g_free[mid].size < size) lo = mid + 1; else hi = mid;
    }
    return lo;
}

static void free_insert(void *p, size_t size) {
    if (g_nfree == g_capfree) {
        g_capfree = g_capfree ? g_capfree * 2 : 256;
        g_free = dt_xrealloc(g_free, g_capfree * sizeof(block));
    }
    int i = free_lower_bound(size);
    memmove(g_free + i + 1, g_free + i, (g_nfree - i) * sizeof(block));
    g_free[i].ptr = p;
    g_free[i].size = size;
    g_nfree++;
}

void dt_gpu_empty_cache(void) {
    if (!g_nfree) return;
    DT_CHECK(cudaStreamSynchronize(dt_stream()));
    for (int i = 0; i < g_nfree; i++) {
        DT_CHECK(cudaFree(g_free[i].ptr));
        g_stats.reserved -= g_free[i].size;
    }
    g_nfree = 0;
}

void *dt_gpu_malloc(size_t bytes) {
    size_t size = round_size(bytes);
    void *p = NULL;
    g_stats.allocs++;
    /* Reuse the smallest cached block that fits, unless it would waste more than a quarter. */
    int i = free_lower_bound(size);
    if (i < g_nfree && g_free[i].size <= size + size / 4) {
        p = g_free[i].ptr;
        size = g_free[i].size;
        memmove(g_free + i, g_free + i + 1, (g_nfree - i - 1) * sizeof(block));
        g_nfree--;
    } else {
        dt_gpu_init(0);
        cudaError_t e = cudaMalloc(&p, size);
        if (e != cudaSuccess) {
            cudaGetLastError();
            dt_gpu_empty_cache();
            e = cudaMalloc(&p, size);
        }
        if (e != cudaSuccess)
            dt_fatal("out of GPU memory allocating %.1f MiB (in use %.1f MiB, reserved %.1f MiB): %s",
                     size / 1048576.0, g_stats.in_use / 1048576.0, g_stats.reserved / 1048576.0,
                     cudaGetErrorString(e));
        g_stats.device_mallocs++;
        g_stats.reserved += size;
        if (g_stats.reserved > g_stats.peak_reserved) g_stats.peak_reserved = g_stats.reserved;
    }
    live_insert(p, size);
    g_stats.in_use += size;
    if (g_stats.in_use > g_stats.peak_in_use) g_stats.peak_in_use = g_stats.in_use;
    if (g_poison) DT_CHECK(cudaMemsetAsync(p, 0xFF, size, dt_stream()));
    return p;
}

void dt_gpu_free(void *ptr) {
    if (!ptr) return;
    size_t size = live_remove(ptr);
    if (!size) dt_fatal("dt_gpu_free(%p): not a block from dt_gpu_malloc (double free?)", ptr);
    g_stats.in_use -= size;
    free_insert(ptr, size);
}

dt_mem_stats dt_gpu_mem_stats(void) { return g_stats; }
void dt_gpu_reset_peak(void) {
    g_stats.peak_in_use = g_stats.in_use;
    g_stats.peak_reserved = g_stats.reserved;
}
void dt_gpu_set_poison(int on) { g_poison = on; }

void dt_copy_h2d(void *dst, const void *src, size_t bytes) {
    DT_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, dt_stream()));
    DT_CHECK(cudaStreamSynchronize(dt_stream()));
}
void dt_copy_d2h(void *dst, const void *src, size_t bytes) {
    DT_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, dt_stream()));
    DT_CHECK(cudaStreamSynchronize(dt_stream()));
}
void dt_copy_d2d(void *dst, const void *src, size_t bytes) {
    DT_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, dt_stream()));
}
void dt_copy_h2d_async(void *dst, const void *src, size_t bytes) {
    DT_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, dt_stream()));
}
void dt_memset_gpu(void *dst, int byte, size_t bytes) {
    DT_CHECK(cudaMemsetAsync(dst, byte, bytes, dt_stream()));
}

#else /* CPU-only build: every device entry point explains that there is no CUDA. */

static DT_NORETURN void no_cuda(const char *what) {
    dt_fatal("%s: deftc was built without CUDA (CUDA=0)", what);
}
void *dt_gpu_malloc(size_t bytes) { (void)bytes; no_cuda("dt_gpu_malloc"); }
void dt_gpu_free(void *ptr) { if (ptr) no_cuda("dt_gpu_free"); }
void dt_gpu_empty_cache(void) {}
dt_mem_stats dt_gpu_mem_stats(void) { dt_mem_stats s; memset(&s, 0, sizeof s); return s; }
void dt_gpu_reset_peak(void) {}
void dt_gpu_set_poison(int on) { (void)on; }
void dt_copy_h2d(void *d, const void *s, size_t b) { (void)d; (void)s; (void)b; no_cuda("dt_copy_h2d"); }
void dt_copy_d2h(void *d, const void *s, size_t b) { (void)d; (void)s; (void)b; no_cuda("dt_copy_d2h"); }
void dt_copy_d2d(void *d, const void *s, size_t b) { (void)d; (void)s; (void)b; no_cuda("dt_copy_d2d"); }
void dt_copy_h2d_async(void *d, const void *s, size_t b) { (void)d; (void)s; (void)b; no_cuda("dt_copy_h2d_async"); }
void dt_memset_gpu(void *d, int v, size_t b) { (void)d; (void)v; (void)b; no_cuda("dt_memset_gpu"); }

#endif
