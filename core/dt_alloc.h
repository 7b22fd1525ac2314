/* dt_alloc.h: device memory through a caching allocator, host memory (optionally pinned).
 *
 * Why a cache: cudaMalloc/cudaFree synchronize the device and cost tens of microseconds, so a
 * training step must not call them. Freed device blocks go to a free list and are handed out
 * again for a request of the same (rounded) size; a steady-state step, which asks for the same
 * sizes in the same order every time, then runs with zero cudaMalloc calls
 * (dt_mem_stats.device_mallocs stops growing; a test checks it).
 *
 * All device work of a device runs on one stream, so a block freed on the host can be given to
 * the next request at once: the kernels that use it are queued behind the ones that used it
 * before. Each device has its own pool (allocations go to the calling thread's current device,
 * dt_gpu_use), and a captured CUDA graph has a private one; the statistics are the current
 * device's, over all of its pools.
 */
#ifndef DT_ALLOC_H
#define DT_ALLOC_H

#include "core/dt_api.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

typedef struct {
    size_t in_use;          /* bytes in live blocks (rounded sizes) */
    size_t peak_in_use;     /* high-water mark of in_use since the last reset */
    size_t reserved;        /* bytes obtained from cudaMalloc and not yet returned */
    size_t peak_reserved;
    uint64_t device_mallocs; /* cudaMalloc calls so far */
    uint64_t allocs;         /* dt_gpu_malloc calls so far */
} dt_mem_stats;

void *dt_gpu_malloc(size_t bytes); /* never NULL; out of memory is fatal with the numbers */
void dt_gpu_free(void *ptr);       /* NULL is ignored */
void dt_gpu_empty_cache(void);     /* returns every cached free block to the driver */
dt_mem_stats dt_gpu_mem_stats(void);
void dt_gpu_reset_peak(void);
/* Private pools, for CUDA graphs (dt_graph.h): while p is this thread's pool (dt_gpu_pool_use),
 * its allocations come from p, and a block freed into p serves only p's later allocations, so
 * the addresses a captured graph bakes in are never handed to other work while the graph
 * lives. dt_gpu_pool_use returns the previous pool (NULL: the device's own). Retiring p (its
 * graph is gone) gives its free blocks to the device's pool, and its live blocks when freed. */
typedef struct dt_gpu_pool dt_gpu_pool;
dt_gpu_pool *dt_gpu_pool_new(void); /* on the current device */
dt_gpu_pool *dt_gpu_pool_use(dt_gpu_pool *p);
void dt_gpu_pool_retire(dt_gpu_pool *p);
/* A caller's scratch allocator (a framework's own caching allocator, e.g. PyTorch's, so that
 * scratch follows its stream and CUDA-graph rules): while a is this thread's (dt_gpu_scratch_use),
 * every dt_gpu_malloc comes from a->alloc(ctx, bytes, stream) - stream: dt_stream(), the
 * cudaStream_t the block is used on - and goes back through a->free(ctx, ptr, stream) at its
 * dt_gpu_free, in stream order (work queued before may still read it: the allocator must not
 * give it to another stream before that work is done). Blocks that outlive one call must not be
 * made meanwhile: it is for calls whose every allocation is scratch (the deform C API). A NULL
 * from alloc raises DT_ERR_OOM. dt_gpu_scratch_use returns the previous one (NULL: deftc's
 * pools). */
typedef struct {
    void *(*alloc)(void *ctx, size_t bytes, void *stream);
    void (*free)(void *ctx, void *ptr, void *stream);
    void *ctx;
} dt_gpu_allocator;
const dt_gpu_allocator *dt_gpu_scratch_use(const dt_gpu_allocator *a);
/* One block of the caller's allocator for a whole call's scratch, so that a call costs the
 * allocator one alloc and one free instead of one per buffer (a dozen in a deformable backward;
 * PyTorch's caching allocator takes a lock and walks its pools for each). While this thread's
 * arena is open (begin, under dt_gpu_scratch_use), dt_gpu_malloc carves each block from it in
 * order, 256-byte aligned (cudaMalloc's alignment), while it has room, and from the allocator
 * past that; dt_gpu_free of a carved block does nothing (the call's blocks are not reused within
 * it: the arena holds their sum, not their peak). end gives the block back in stream order and
 * returns the bytes the call's blocks took in all, as carved: the size for the next call of the
 * same problem, which then takes one block (begin(0) opens an arena that only measures). Without
 * a caller's allocator both do nothing (end returns 0): deftc's own pool costs no lock. */
void dt_gpu_scratch_arena_begin(size_t bytes);
size_t dt_gpu_scratch_arena_end(void);
/* Poison mode (tests): every block handed out is filled with 0xFF bytes (a NaN in float32),
 * so an element a kernel forgot to write shows up as NaN in the comparison. on = 2 also fills
 * every block given back (outside a capture), so that a read of a freed block - a dangling
 * pointer, or a read past a block's end into a cached neighbour - shows up as NaN too, not as
 * the finite values an earlier user left there (the test runner's DT_TEST_POISON). */
void dt_gpu_set_poison(int on);

/* Host memory, 64-byte aligned. pinned=1 gives page-locked memory (cudaMallocHost) when a GPU
 * is in use, so host-to-device copies from it can be asynchronous; otherwise plain memory. */
void *dt_host_alloc(size_t bytes, int pinned);
void dt_host_free(void *ptr, int pinned);

/* Scratch memory on either device (GPU: the caching allocator; CPU: aligned host memory):
 * workspaces of ops that live for one call. */
#include "core/dt_device.h"
void *dt_dev_alloc(dt_dev dev, size_t bytes);
void dt_dev_free(dt_dev dev, void *ptr);

/* Device <-> host copies on the context stream. The synchronous ones wait for the stream. */
void dt_copy_h2d(void *dst, const void *src, size_t bytes);
void dt_copy_d2h(void *dst, const void *src, size_t bytes);
void dt_copy_d2d(void *dst, const void *src, size_t bytes);
void dt_copy_h2d_async(void *dst, const void *src, size_t bytes); /* src must be pinned */
void dt_copy_d2h_async(void *dst, const void *src, size_t bytes); /* dst must be pinned; read it after an event */
void dt_memset_gpu(void *dst, int byte, size_t bytes);

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
