#include "core/dt_alloc.h"

#include <stdlib.h>
#include <string.h>

#include "core/dt_common.h"
#include "core/dt_device.h"
#ifdef DT_CUDA
#include "core/dt_cuda.h"
#endif

void *dt_host_alloc(size_t bytes, int pinned) {
    void *p = NULL;
    if (dt_inject_hit(DT_INJECT_HOST_ALLOC)) dt_fail(DT_ERR_OOM, "out of host memory allocating %zu bytes", bytes);
#ifdef DT_CUDA
    if (pinned && dt_gpu_ready()) {
        cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 1);
        if (e != cudaSuccess) {
            cudaGetLastError();
            dt_fail(e == cudaErrorMemoryAllocation ? DT_ERR_OOM : DT_ERR_DEVICE, "cudaMallocHost of %zu bytes failed: %s",
                    bytes, cudaGetErrorString(e));
        }
        return p;
    }
#else
    (void)pinned;
#endif
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
        dt_fail(DT_ERR_OOM, "out of host memory allocating %zu bytes", bytes);
    return p;
}

/* ---- the scratch log ----
 * Scratch (dt_dev_alloc) lives for one call by the layering rule (dt_alloc.h), so a raise that
 * unwinds the call must give back the scratch it held: while a guard is open on the thread,
 * every dt_dev_alloc is logged and every dt_dev_free unlogs; a guard's unwind frees what is
 * still logged since its entry, and leaving the outermost guard forgets the log (what is still
 * live then is the caller's, as without a guard). Memory that outlives a call is not scratch:
 * it comes from dt_gpu_malloc / dt_host_alloc directly (tensor storage, tables). */
typedef struct {
    void *p;
    dt_dev dev;
} logged;
static __thread logged *t_log;
static __thread size_t t_nlog, t_caplog;

static void log_add(void *p, dt_dev dev) {
    if (t_nlog == t_caplog) {
        size_t cap = t_caplog ? 2 * t_caplog : 64;
        logged *q = dt_try_malloc(cap * sizeof *q);
        if (!q) {
            dt_dev_free(dev, p); /* not logged yet: freed here, then the raise */
            dt_fail(DT_ERR_OOM, "out of host memory logging a scratch block");
        }
        if (t_nlog) memcpy(q, t_log, t_nlog * sizeof *q);
        free(t_log);
        t_log = q;
        t_caplog = cap;
    }
    t_log[t_nlog++] = (logged){p, dev};
}

static void log_remove(void *p) {
    for (size_t i = t_nlog; i-- > 0;)
        if (t_log[i].p == p) {
            t_log[i] = t_log[--t_nlog];
            return;
        }
}

static size_t log_mark(void) { return t_nlog; }
static void log_release(size_t mark) {
    while (t_nlog > mark) {
        logged b = t_log[--t_nlog];
        if (b.dev == DT_GPU) dt_gpu_free(b.p); else dt_host_free(b.p, 0);
    }
}
/* The outermost guard gives the log's array back too: a thread-pool worker's log would
 * otherwise outlive what owns it (a forked child has no workers, and their arrays leak). */
static void log_leave(int outermost) {
    if (!outermost) return;
    t_nlog = 0;
    free(t_log);
    t_log = NULL;
    t_caplog = 0;
}
/* Released last (order 3): the tape and the scopes free their tensors first. */
__attribute__((constructor)) static void register_log(void) {
    dt_guard_register((dt_guard_participant){3, log_mark, log_release, log_leave});
}

void *dt_dev_alloc(dt_dev dev, size_t bytes) {
    void *p = dev == DT_GPU ? dt_gpu_malloc(bytes) : dt_host_alloc(bytes, 0);
    if (dt_guard_active()) log_add(p, dev);
    return p;
}

void dt_dev_free(dt_dev dev, void *ptr) {
    if (!ptr) return;
    if (t_nlog) log_remove(ptr);
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

/* One pool per device, and the private pools of captured CUDA graphs (dt_gpu_pool_new). Free
 * blocks sorted by size (ascending); live blocks in an open-addressing hash table keyed by
 * pointer. Both stay small (hundreds of entries), so this costs well under a microsecond per
 * call. A block is freed into the pool it came from; the statistics are the device's, over all
 * of its pools. */
typedef struct {
    void *ptr;
    size_t size;
} block;

typedef struct pool {
    block *free;
    int nfree, capfree;
    block *live; /* ptr == NULL: empty slot; ptr == TOMB: deleted */
    size_t livecap, nlive, ntomb;
    int device;
    int retired;       /* a private pool whose graph is gone: its blocks serve the device's pool */
    struct pool *next; /* the device's private pools */
} pool;

static pool g_pools[DT_MAX_GPUS];
static pool *g_private[DT_MAX_GPUS]; /* each device's private pools, a list */
static dt_mem_stats g_stats[DT_MAX_GPUS];
static __thread pool *t_pool; /* this thread's private pool while it captures a graph, else NULL */
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

static void live_insert(pool *o, void *p, size_t size);

static void live_grow(pool *o) {
    block *old = o->live;
    size_t oldcap = o->livecap;
    o->livecap = oldcap ? oldcap * 2 : 1024;
    o->live = dt_xcalloc(o->livecap, sizeof(block));
    o->nlive = o->ntomb = 0;
    for (size_t i = 0; i < oldcap; i++)
        if (old[i].ptr && old[i].ptr != TOMB) live_insert(o, old[i].ptr, old[i].size);
    free(old);
}

static void live_insert(pool *o, void *p, size_t size) {
    if ((o->nlive + o->ntomb + 1) * 2 > o->livecap) live_grow(o);
    size_t m = o->livecap - 1, i = hash_ptr(p) & m;
    while (o->live[i].ptr && o->live[i].ptr != TOMB) i = (i + 1) & m;
    if (o->live[i].ptr == TOMB) o->ntomb--;
    o->live[i].ptr = p;
    o->live[i].size = size;
    o->nlive++;
}

static size_t live_remove(pool *o, void *p) {
    if (!o->livecap) return 0;
    size_t m = o->livecap - 1, i = hash_ptr(p) & m;
    while (o->live[i].ptr) {
        if (o->live[i].ptr == p) {
            size_t s = o->live[i].size;
            o->live[i].ptr = TOMB;
            o->nlive--;
            o->ntomb++;
            return s;
        }
        i = (i + 1) & m;
    }
    return 0;
}

static int free_lower_bound(const pool *o, size_t size) {
    int lo = 0, hi = o->nfree;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (o->free[mid].size < size) lo = mid + 1; else hi = mid;
    }
    return lo;
}

static void free_insert(pool *o, void *p, size_t size) {
    if (o->nfree == o->capfree) {
        o->capfree = o->capfree ? o->capfree * 2 : 256;
        o->free = dt_xrealloc(o->free, o->capfree * sizeof(block));
    }
    int i = free_lower_bound(o, size);
    memmove(o->free + i + 1, o->free + i, (o->nfree - i) * sizeof(block));
    o->free[i].ptr = p;
    o->free[i].size = size;
    o->nfree++;
}

static pool *device_pool(int d) {
    g_pools[d].device = d;
    return &g_pools[d];
}
static pool *cur_pool(void) { return t_pool ? t_pool : device_pool(dt_gpu_current()); }

void dt_gpu_empty_cache(void) {
    if (!dt_gpu_ready()) return;
    pool *o = device_pool(dt_gpu_current());
    if (!o->nfree) return;
    DT_CHECK(cudaStreamSynchronize(dt_stream()));
    for (int i = 0; i < o->nfree; i++) {
        DT_CHECK(cudaFree(o->free[i].ptr));
        g_stats[o->device].reserved -= o->free[i].size;
    }
    o->nfree = 0;
}

/* cudaMalloc is not a stream operation: during a capture it would invalidate the graph in the
 * thread-local capture mode, so it runs in the relaxed mode (the block it returns is the
 * private pool's, whose addresses the graph may bake in). */
static cudaError_t device_malloc(void **p, size_t size) {
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    DT_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    cudaError_t e = cudaMalloc(p, size);
    /* restored before anything can raise: the thread's capture mode must not stay relaxed */
    cudaError_t e2 = cudaThreadExchangeStreamCaptureMode(&mode);
    if (e2 != cudaSuccess) {
        if (e == cudaSuccess) cudaFree(*p);
        DT_CHECK(e2);
    }
    return e;
}

/* The caller's scratch allocator of this thread (dt_gpu_scratch_use), and the blocks it gave
 * that are not freed yet (a call holds a few dozen at most: a linear search). */
static __thread const dt_gpu_allocator *t_scratch;
static __thread void **t_lent;
static __thread size_t t_nlent, t_caplent;

const dt_gpu_allocator *dt_gpu_scratch_use(const dt_gpu_allocator *a) {
    const dt_gpu_allocator *prev = t_scratch;
    t_scratch = a;
    return prev;
}

static void *lent_alloc(size_t bytes) {
    if (t_nlent == t_caplent) {
        t_caplent = t_caplent ? 2 * t_caplent : 32;
        t_lent = dt_xrealloc(t_lent, t_caplent * sizeof *t_lent);
    }
    void *p = t_scratch->alloc(t_scratch->ctx, bytes ? bytes : 1, dt_stream());
    if (!p) dt_fail(DT_ERR_OOM, "out of GPU memory allocating %.1f MiB (the caller's allocator)", bytes / 1048576.0);
    t_lent[t_nlent++] = p;
    return p;
}

/* 1 when ptr came from the caller's allocator (then it went back to it). */
static int lent_free(void *ptr) {
    for (size_t i = t_nlent; i-- > 0;)
        if (t_lent[i] == ptr) {
            t_lent[i] = t_lent[--t_nlent];
            t_scratch->free(t_scratch->ctx, ptr, dt_stream());
            return 1;
        }
    return 0;
}

/* This thread's scratch arena (dt_gpu_scratch_arena_begin): [base, base + size) from the
 * caller's allocator, `used` bytes of it carved; `took` counts every block of the call as
 * carved (256-byte steps), carved or not. */
static __thread struct {
    int open;
    char *base;
    size_t size, used, took;
} t_arena;

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

void dt_gpu_scratch_arena_begin(size_t bytes) {
    if (!t_scratch) return;
    t_arena.open = 1;
    t_arena.used = t_arena.took = 0;
    t_arena.size = bytes;
    t_arena.base = NULL;
    if (!bytes) return;
    t_arena.base = t_scratch->alloc(t_scratch->ctx, bytes, dt_stream());
    if (!t_arena.base) {
        t_arena.open = 0;
        dt_fail(DT_ERR_OOM, "out of GPU memory allocating %.1f MiB (the caller's allocator)", bytes / 1048576.0);
    }
}

size_t dt_gpu_scratch_arena_end(void) {
    if (!t_arena.open) return 0;
    if (t_arena.base) t_scratch->free(t_scratch->ctx, t_arena.base, dt_stream());
    t_arena.open = 0;
    t_arena.base = NULL;
    return t_arena.took;
}

static int in_arena(const void *p) {
    return t_arena.base && (const char *)p >= t_arena.base && (const char *)p < t_arena.base + t_arena.size;
}

/* A block of the call's scratch from the caller's allocator: carved from the arena while it has
 * room, else a block of its own. */
static void *scratch_block(size_t bytes) {
    if (!t_arena.open) return lent_alloc(bytes);
    const size_t step = align256(bytes ? bytes : 1);
    t_arena.took += step;
    if (t_arena.base && t_arena.size - t_arena.used >= step) {
        void *p = t_arena.base + t_arena.used;
        t_arena.used += step;
        return p;
    }
    return lent_alloc(bytes);
}

void *dt_gpu_malloc(size_t bytes) {
    if (dt_inject_hit(DT_INJECT_DEVICE_ALLOC))
        dt_fail(DT_ERR_OOM, "out of GPU memory allocating %.1f MiB (injected)", bytes / 1048576.0);
    if (t_scratch) return scratch_block(bytes);
    size_t size = round_size(bytes);
    void *p = NULL;
    pool *o = cur_pool(); /* initializes the device on first use */
    dt_mem_stats *st = &g_stats[o->device];
    st->allocs++;
    /* Reuse the smallest cached block that fits, unless it would waste more than a quarter. */
    int i = free_lower_bound(o, size);
    if (i < o->nfree && o->free[i].size <= size + size / 4) {
        p = o->free[i].ptr;
        size = o->free[i].size;
        memmove(o->free + i, o->free + i + 1, (o->nfree - i - 1) * sizeof(block));
        o->nfree--;
    } else {
        cudaError_t e = device_malloc(&p, size);
        if (e != cudaSuccess) {
            cudaGetLastError();
            dt_gpu_empty_cache();
            e = device_malloc(&p, size);
        }
        if (e != cudaSuccess)
            dt_fail(e == cudaErrorMemoryAllocation ? DT_ERR_OOM : DT_ERR_DEVICE, "out of GPU memory allocating %.1f MiB on device %d (in use %.1f MiB, reserved %.1f MiB): %s",
                     size / 1048576.0, o->device, st->in_use / 1048576.0, st->reserved / 1048576.0,
                     cudaGetErrorString(e));
        st->device_mallocs++;
        st->reserved += size;
        if (st->reserved > st->peak_reserved) st->peak_reserved = st->reserved;
    }
    live_insert(o, p, size);
    st->in_use += size;
    if (st->in_use > st->peak_in_use) st->peak_in_use = st->in_use;
    if (g_poison) {
        /* a poison that fails gives the block back before the raise (no caller ever held it),
         * except while the stream captures a graph: then dt_cuda_fail records the capture's
         * failure and returns, and the caller gets the block as if the poison had run */
        const cudaError_t e = dt_inject_hit(DT_INJECT_DEVICE_CALL) ? cudaErrorUnknown : cudaMemsetAsync(p, 0xFF, size, dt_stream());
        if (e != cudaSuccess) {
            enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
            if (cudaStreamIsCapturing(dt_stream(), &cs) != cudaSuccess || cs == cudaStreamCaptureStatusNone) dt_gpu_free(p);
            dt_cuda_fail("CUDA", "cudaMemsetAsync(p, 0xFF, size, dt_stream())", cudaGetErrorString(e), __FILE__, __LINE__);
        }
    }
    return p;
}

/* Unlinks a retired private pool that holds no live block any more. */
static void drop_if_empty(pool *o) {
    if (!o->retired || o->nlive) return;
    for (pool **q = &g_private[o->device]; *q; q = &(*q)->next)
        if (*q == o) {
            *q = o->next;
            break;
        }
    free(o->free);
    free(o->live);
    free(o);
}

void dt_gpu_free(void *ptr) {
    if (!ptr) return;
    if (in_arena(ptr)) return; /* the arena goes back whole (dt_gpu_scratch_arena_end) */
    if (t_nlent && t_scratch && lent_free(ptr)) return;
    pool *o = cur_pool();
    size_t size = live_remove(o, ptr);
    for (int d = 0; !size && d < DT_MAX_GPUS; d++) { /* another pool: the device's, a private one, another device's */
        if (&g_pools[d] != o && (size = live_remove(&g_pools[d], ptr)) != 0) o = &g_pools[d];
        for (pool *q = g_private[d]; !size && q; q = q->next)
            if (q != o && (size = live_remove(q, ptr)) != 0) o = q;
    }
    if (!size) dt_fatal("dt_gpu_free(%p): not a block from dt_gpu_malloc (double free?)", ptr);
    g_stats[o->device].in_use -= size;
    if (g_poison > 1 && o->device == dt_gpu_current()) {
        /* Not while capturing: a block of the device's pool freed then goes back to the driver
         * before the first replay (dt_gpu_empty_cache), and the node would write it. A free
         * does not raise: a poison that fails is left out. */
        enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusActive;
        if (cudaStreamIsCapturing(dt_stream(), &cs) == cudaSuccess && cs == cudaStreamCaptureStatusNone &&
            cudaMemsetAsync(ptr, 0xFF, size, dt_stream()) != cudaSuccess)
            cudaGetLastError();
    }
    if (o->retired) {
        free_insert(device_pool(o->device), ptr, size);
        drop_if_empty(o);
    } else {
        free_insert(o, ptr, size);
    }
}

struct dt_gpu_pool {
    pool o;
};

dt_gpu_pool *dt_gpu_pool_new(void) {
    int d = dt_gpu_current();
    pool *o = dt_xcalloc(1, sizeof(dt_gpu_pool));
    o->device = d;
    o->next = g_private[d];
    g_private[d] = o;
    return (dt_gpu_pool *)o;
}

dt_gpu_pool *dt_gpu_pool_use(dt_gpu_pool *p) {
    pool *prev = t_pool;
    t_pool = p ? &p->o : NULL;
    return (dt_gpu_pool *)prev;
}

void dt_gpu_pool_retire(dt_gpu_pool *p) {
    if (!p) return;
    pool *o = &p->o, *dev = device_pool(o->device);
    if (t_pool == o) t_pool = NULL;
    for (int i = 0; i < o->nfree; i++) free_insert(dev, o->free[i].ptr, o->free[i].size);
    o->nfree = 0;
    o->retired = 1;
    drop_if_empty(o);
}

dt_mem_stats dt_gpu_mem_stats(void) {
    dt_mem_stats none;
    memset(&none, 0, sizeof none);
    return dt_gpu_ready() ? g_stats[dt_gpu_current()] : none; /* no device in use: nothing allocated */
}
void dt_gpu_reset_peak(void) {
    if (!dt_gpu_ready()) return;
    dt_mem_stats *st = &g_stats[dt_gpu_current()];
    st->peak_in_use = st->in_use;
    st->peak_reserved = st->reserved;
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
void dt_copy_d2h_async(void *dst, const void *src, size_t bytes) {
    DT_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, dt_stream()));
}
void dt_memset_gpu(void *dst, int byte, size_t bytes) {
    DT_CHECK(cudaMemsetAsync(dst, byte, bytes, dt_stream()));
}

#else /* CPU-only build: every device entry point explains that there is no CUDA. */

static DT_NORETURN void no_cuda(const char *what) {
    dt_fail(DT_ERR_DEVICE, "%s: deftc was built without CUDA (CUDA=0)", what);
}
void *dt_gpu_malloc(size_t bytes) { (void)bytes; no_cuda("dt_gpu_malloc"); }
void dt_gpu_free(void *ptr) { if (ptr) no_cuda("dt_gpu_free"); }
void dt_gpu_empty_cache(void) {}
dt_mem_stats dt_gpu_mem_stats(void) { dt_mem_stats s; memset(&s, 0, sizeof s); return s; }
void dt_gpu_reset_peak(void) {}
void dt_gpu_set_poison(int on) { (void)on; }
dt_gpu_pool *dt_gpu_pool_new(void) { no_cuda("dt_gpu_pool_new"); }
dt_gpu_pool *dt_gpu_pool_use(dt_gpu_pool *p) { (void)p; return NULL; }
const dt_gpu_allocator *dt_gpu_scratch_use(const dt_gpu_allocator *a) { (void)a; return NULL; }
void dt_gpu_scratch_arena_begin(size_t bytes) { (void)bytes; }
size_t dt_gpu_scratch_arena_end(void) { return 0; }
void dt_gpu_pool_retire(dt_gpu_pool *p) { (void)p; }
void dt_copy_h2d(void *d, const void *s, size_t b) { (void)d; (void)s; (void)b; no_cuda("dt_copy_h2d"); }
void dt_copy_d2h(void *d, const void *s, size_t b) { (void)d; (void)s; (void)b; no_cuda("dt_copy_d2h"); }
void dt_copy_d2d(void *d, const void *s, size_t b) { (void)d; (void)s; (void)b; no_cuda("dt_copy_d2d"); }
void dt_copy_h2d_async(void *d, const void *s, size_t b) { (void)d; (void)s; (void)b; no_cuda("dt_copy_h2d_async"); }
void dt_copy_d2h_async(void *d, const void *s, size_t b) { (void)d; (void)s; (void)b; no_cuda("dt_copy_d2h_async"); }
void dt_memset_gpu(void *d, int v, size_t b) { (void)d; (void)v; (void)b; no_cuda("dt_memset_gpu"); }

#endif

