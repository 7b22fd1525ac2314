/* dt_nvjpeg_pool.h: the memory nvJPEG allocates for itself (its bitstream staging, its scratch
 * and its decode buffers, device and pinned host), kept and reused instead of freed.
 *
 * Why: with its default allocators nvJPEG calls cudaMalloc / cudaFree and cudaHostAlloc /
 * cudaFreeHost as a batch's sizes change. Each of those orders itself against the device's
 * other work (cudaFree and cudaFreeHost wait for the whole device; an allocation between two
 * streams' commands keeps them from running concurrently - CUDA programming guide, "implicit
 * synchronization"), so a decode call beside a training step waited for that step: measured
 * on the H200 (docs/PERF.md section 25), nvJPEG's calls took 0.58 s for 5888 images inside a
 * training run against 0.22 s alone, about one 15 ms step a batch. With these allocators, once
 * nvJPEG's working set has been allocated (the first batches), a decode call makes no CUDA
 * allocation call at all.
 *
 * The allocators match nvJPEG's ABI (nvjpegDevAllocator_t, nvjpegPinnedAllocator_t: functions
 * without a user pointer), so the pool is one per process, shared by every decoder and device,
 * behind a mutex (nvJPEG may allocate from its own threads). A block is reused for a request
 * of its kind (device and device index, or pinned and the same flags) at least half its size;
 * new blocks are rounded up to 64 KiB. Blocks go back to CUDA when the last decoder using the
 * pool is freed (dt_nvjpeg_pool_release). CUDA builds only, like dt_gpu_decode.c. */
#ifndef DT_NVJPEG_POOL_H
#define DT_NVJPEG_POOL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* nvjpegDevAllocator_t and nvjpegPinnedAllocator_t, as nvJPEG's ABI has them: 0 = success. */
typedef struct {
    int (*dev_malloc)(void **ptr, size_t bytes);
    int (*dev_free)(void *ptr);
} dt_nvjpeg_dev_allocator;
typedef struct {
    int (*pinned_malloc)(void **ptr, size_t bytes, unsigned int flags);
    int (*pinned_free)(void *ptr);
} dt_nvjpeg_pinned_allocator;

/* The pool's allocators, for nvjpegCreateEx; each call counts one more decoder using the pool. */
void dt_nvjpeg_pool_acquire(const dt_nvjpeg_dev_allocator **dev, const dt_nvjpeg_pinned_allocator **pinned);
/* One decoder fewer (after its nvjpegDestroy); with none left, the kept blocks are freed. */
void dt_nvjpeg_pool_release(void);

/* What the pool did since the process started: CUDA allocation calls made (cudaMalloc,
 * cudaHostAlloc) and requests served from kept blocks, and the bytes it holds now. */
typedef struct {
    long long dev_allocs, dev_reuses, pinned_allocs, pinned_reuses;
    size_t dev_bytes, pinned_bytes;
} dt_nvjpeg_pool_stats;
dt_nvjpeg_pool_stats dt_nvjpeg_pool_get_stats(void);

#ifdef __cplusplus
}
#endif
#endif
