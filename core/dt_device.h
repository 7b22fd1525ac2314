/* dt_device.h: the device context. One GPU, one stream, one cuBLAS handle, one cuRAND
 * generator, one seed. Every kernel and library call of deftc runs on dt_stream(), so the
 * order of work on the device is the order of calls on the host and nothing needs an
 * explicit synchronization except reading results back.
 *
 * This header is plain C and usable in a CPU-only build (CUDA=0): there dt_gpu_count()
 * returns 0 and asking for a GPU is a clear error. CUDA types live in dt_cuda.h.
 */
#ifndef DT_DEVICE_H
#define DT_DEVICE_H

#include "core/dt_api.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

/* Where a tensor lives. */
typedef enum { DT_CPU = 0, DT_GPU = 1 } dt_dev;

const char *dt_dev_name(dt_dev dev);

/* 1 when deftc was built with CUDA (make CUDA=1). */
int dt_built_with_cuda(void);

/* Number of visible CUDA devices; 0 when none is visible or deftc was built without CUDA.
 * Never fatal: programs use it to fall back to the CPU or to explain why they cannot. */
int dt_gpu_count(void);

/* Several GPUs: one context (stream, cuBLAS handle, cuRAND generator, memory pool) per device,
 * created on first use, and a current device per host thread; every launch and allocation
 * goes to the calling thread's current device. */
#define DT_MAX_GPUS 64
/* Makes `device` the calling thread's current device, creating its context if needed; fatal
 * with a clear message when it does not exist. */
void dt_gpu_use(int device);
/* The calling thread's current device (the process's first device until dt_gpu_use). */
int dt_gpu_current(void);

/* Creates the context on `device` (idempotent: the first call picks the process's default
 * device; later calls keep the thread's current one). Fatal with a clear message when there is no
 * GPU. Debug mode (every launch followed by a synchronize and an error check) is switched on
 * by dt_set_debug_sync(1) or the environment variable DT_DEBUG_SYNC=1. */
void dt_gpu_init(int device);
int dt_gpu_ready(void);
void dt_gpu_sync(void);                 /* waits for all work on dt_stream() */
void dt_set_debug_sync(int on);
int dt_debug_sync(void);

/* The global seed: cuRAND (device init) and every host RNG stream derive from it. */
void dt_set_seed(uint64_t seed);
uint64_t dt_seed(void);

/* Runs deftc's work on a caller's CUDA stream (a cudaStream_t passed as void*; NULL gives
 * deftc's own stream back). Switching orders the new stream after the work queued on the
 * previous one (an event it waits for; the host waits only when the new stream captures a graph
 * and the previous one does not), so that memory deftc frees and reuses is never still in use on
 * another stream. */
void dt_set_stream(void *stream);

/* A side stream for work that can overlap the main stream's (the deformable inverse index is
 * built there while the column GEMMs run). dt_side_begin() makes the side stream wait for all
 * work queued so far and sends later launches (dt_stream()) to it; dt_side_end() sends them
 * back to the main stream; dt_side_join() makes the main stream wait for the side work.
 * Memory used on the side must be allocated before dt_side_begin() and released only after
 * dt_side_join() (the caching allocator orders reuse by the main stream alone). */
void dt_side_begin(void);
void dt_side_end(void);
void dt_side_join(void);

/* Where a caller's pointer lives (the C API takes raw buffers): the index of the CUDA device
 * that holds it (device or managed memory), DT_PTR_HOST for host memory, DT_PTR_UNKNOWN for a
 * pointer CUDA does not know - and always DT_PTR_UNKNOWN in a CUDA=0 build. Never fatal. */
enum { DT_PTR_HOST = -1, DT_PTR_UNKNOWN = -2 };
int dt_gpu_pointer_device(const void *p);

/* One line naming the GPU, its memory, SM count and L2 size (or "cpu"). */
void dt_device_describe(char *buf, int len);
int dt_gpu_sm_count(void);
/* 1 when the current GPU runs the Hopper conv engine (ops/conv/sm90_gemm.cuh): compute
 * capability 9.0 and a build that carries sm_90a code (CUDA_ARCH=sm_90, the default). */
int dt_gpu_has_sm90a(void);

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
