#include "core/dt_device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dt_common.h"

static uint64_t g_seed = 0x5eed;
static int g_debug_sync = -1; /* -1: not read from the environment yet */

const char *dt_dev_name(dt_dev dev) { return dev == DT_GPU ? "cuda" : "cpu"; }

void dt_set_seed(uint64_t seed) { g_seed = seed; }
uint64_t dt_seed(void) { return g_seed; }

void dt_set_debug_sync(int on) { g_debug_sync = on; }
int dt_debug_sync(void) {
    if (g_debug_sync < 0) g_debug_sync = (int)dt_env_long("DT_DEBUG_SYNC", 0);
    return g_debug_sync;
}

#ifdef DT_CUDA
#include "core/dt_cuda.h"

/* One context per device; each host thread has a current device (dt_gpu_use), by default the
 * first device initialized. */
typedef struct {
    int ready;
    int device;
    cudaStream_t stream;      /* where launches go now (the main stream, or the side one) */
    cudaStream_t main, side;  /* side: created on first use */
    cudaStream_t own;         /* deftc's own stream (dt_set_stream(NULL) returns to it) */
    cudaEvent_t forked, done;
    cudaEvent_t switched;     /* dt_set_stream: the previous stream's work, waited for by the next */
    cublasHandle_t cublas;
    curandGenerator_t curand;
    struct cudaDeviceProp props;
} gpu_ctx;

static gpu_ctx g_ctxs[DT_MAX_GPUS];
static int g_default = -1;      /* the first device initialized */
static __thread int t_dev = -1; /* this thread's current device, -1: g_default */

static gpu_ctx *cur_ctx(void) {
    int d = t_dev >= 0 ? t_dev : g_default;
    return &g_ctxs[d >= 0 ? d : 0];
}
#define g_ctx (*cur_ctx())

int dt_built_with_cuda(void) { return 1; }

/* The devices a process sees are fixed when CUDA initializes (CUDA_VISIBLE_DEVICES is read
 * then), so the count is queried once and kept: the deform C API asks for it on every call.
 * A failed query (no driver, no device) is not kept: 0 is answered again by asking. */
int dt_gpu_count(void) {
    static int known; /* 0: not queried successfully yet */
    int n = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (n > 0) return n;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no device" error */
        return 0;
    }
    __atomic_store_n(&known, n, __ATOMIC_RELAXED);
    return n;
}

static dt_cuda_error_hook g_error_hook; /* set once at load time (core/dt_graph.c) */
void dt_set_cuda_error_hook(dt_cuda_error_hook hook) { g_error_hook = hook; }

/* Raises DT_ERR_DEVICE - or DT_ERR_OOM when the library ran out of memory - with the message
 * "CUDA error at FILE:LINE: CALL failed: MSG" (dt_common.h: to the guard, or to the program). */
void dt_cuda_fail(const char *what, const char *call, const char *msg, const char *file,
                  int line) {
    if (g_error_hook && g_error_hook(what, call, msg, file, line)) return;
    int oom = strstr(msg, "out of memory") || strstr(msg, "ALLOC_FAILED") || strstr(msg, "ALLOCATION_FAILED");
    char kind[32];
    snprintf(kind, sizeof kind, "%s error", what);
    dt_fail_at(oom ? DT_ERR_OOM : DT_ERR_DEVICE, kind, file, line, "%s failed: %s", call, msg);
}

/* A raise between dt_side_begin and dt_side_end leaves launches going to the side stream:
 * the unwind sends them back to the main stream (the side work is joined by the next call's
 * stream order anyway). */
static size_t side_mark(void) { return 0; }
static void side_release(size_t mark) {
    (void)mark;
    int d = t_dev >= 0 ? t_dev : g_default;
    if (d < 0) return;
    gpu_ctx *c = &g_ctxs[d];
    if (c->ready && c->side && c->stream == c->side) c->stream = c->main;
}
__attribute__((constructor)) static void register_side(void) {
    dt_guard_register((dt_guard_participant){2, side_mark, side_release, NULL});
}

void dt_check_launch_at(const char *file, int line) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) dt_cuda_fail("CUDA", "kernel launch", cudaGetErrorString(e), file, line);
    if (dt_debug_sync()) {
        e = cudaStreamSynchronize(g_ctx.stream);
        if (e != cudaSuccess)
            dt_cuda_fail("CUDA", "kernel (debug sync)", cudaGetErrorString(e), file, line);
    }
}

const char *dt_cublas_status_str(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "unknown cuBLAS status";
    }
}

const char *dt_curand_status_str(curandStatus_t s) {
    switch (s) {
    case CURAND_STATUS_SUCCESS: return "CURAND_STATUS_SUCCESS";
    case CURAND_STATUS_NOT_INITIALIZED: return "CURAND_STATUS_NOT_INITIALIZED";
    case CURAND_STATUS_ALLOCATION_FAILED: return "CURAND_STATUS_ALLOCATION_FAILED";
    case CURAND_STATUS_TYPE_ERROR: return "CURAND_STATUS_TYPE_ERROR";
    case CURAND_STATUS_OUT_OF_RANGE: return "CURAND_STATUS_OUT_OF_RANGE";
    case CURAND_STATUS_LAUNCH_FAILURE: return "CURAND_STATUS_LAUNCH_FAILURE";
    default: return "other cuRAND status";
    }
}

static void ctx_create(int device) {
    gpu_ctx *c = &g_ctxs[device];
    DT_CHECK(cudaSetDevice(device));
    DT_CHECK(cudaGetDeviceProperties(&c->props, device));
    DT_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    c->own = c->stream;
    DT_CUBLAS(cublasCreate(&c->cublas));
    DT_CUBLAS(cublasSetStream(c->cublas, c->stream));
    /* strict fp32 until a GEMM asks otherwise (dt_gemm_cuda sets the mode per call) */
    DT_CUBLAS(cublasSetMathMode(c->cublas, CUBLAS_PEDANTIC_MATH));
    DT_CURAND(curandCreateGenerator(&c->curand, CURAND_RNG_PSEUDO_PHILOX4_32_10));
    DT_CURAND(curandSetStream(c->curand, c->stream));
    DT_CURAND(curandSetPseudoRandomGeneratorSeed(c->curand, g_seed));
    c->device = device;
    c->ready = 1;
}

void dt_gpu_use(int device) {
    /* the steady state of a caller that names the device on every call (the deform C API):
     * nothing to query */
    if (device >= 0 && device < DT_MAX_GPUS && g_ctxs[device].ready && t_dev == device) return;
    int n = dt_gpu_count();
    if (n == 0)
        dt_fail(DT_ERR_DEVICE, "no CUDA device is visible (cudaGetDeviceCount returned 0 or failed); "
                 "run on a machine with a GPU or use device=cpu");
    if (device < 0 || device >= n || device >= DT_MAX_GPUS)
        dt_fatal("CUDA device %d requested but only %d visible", device, n);
    if (!g_ctxs[device].ready) ctx_create(device);
    if (g_default < 0) g_default = device;
    if (t_dev != device) DT_CHECK(cudaSetDevice(device));
    t_dev = device;
}

/* The first call picks the process's default device; later calls only make `device` current
 * when this thread has none yet (dt_gpu_use switches explicitly). */
void dt_gpu_init(int device) {
    if (t_dev >= 0 && g_ctxs[t_dev].ready) return;
    if (t_dev < 0 && g_default >= 0) {
        dt_gpu_use(g_default);
        return;
    }
    dt_gpu_use(device);
}

int dt_gpu_current(void) {
    if (t_dev < 0 && g_default < 0) dt_gpu_init(0);
    return t_dev >= 0 ? t_dev : g_default;
}

int dt_gpu_ready(void) { return g_default >= 0; }

void dt_gpu_sync(void) {
    if (g_ctx.ready) DT_CHECK(cudaStreamSynchronize(g_ctx.stream));
}

static int capturing(cudaStream_t s) {
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    DT_CHECK(cudaStreamIsCapturing(s, &cs));
    return cs != cudaStreamCaptureStatusNone;
}

/* The new stream is ordered after everything queued on the previous one, so that a block of
 * deftc's pool freed by work there and handed out again is no longer in use (and cuBLAS's
 * workspace neither): an event the new stream waits for - no host wait. Not across a capture's
 * boundary (one stream capturing a graph, the other not): CUDA refuses a captured wait on work
 * outside the capture, and a host wait while a capture runs ends the capture (the error a
 * torch.cuda.graph of the drop-in got, issue 36). There the caller's order holds: a capture
 * begins after the device has finished what came before (torch.cuda.graph synchronizes first),
 * and what the graph allocates comes from the caller's allocator during it (deform C API). */
void dt_set_stream(void *stream) {
    dt_gpu_init(0);
    cudaStream_t s = stream ? (cudaStream_t)stream : g_ctx.own;
    if (s == g_ctx.stream) return;
    if (capturing(s) == capturing(g_ctx.stream)) { /* not across a capture's boundary (above) */
        if (!g_ctx.switched) DT_CHECK(cudaEventCreateWithFlags(&g_ctx.switched, cudaEventDisableTiming));
        DT_CHECK(cudaEventRecord(g_ctx.switched, g_ctx.stream));
        DT_CHECK(cudaStreamWaitEvent(s, g_ctx.switched, 0));
    }
    g_ctx.stream = s;
    DT_CUBLAS(cublasSetStream(g_ctx.cublas, s));
    DT_CURAND(curandSetStream(g_ctx.curand, s));
}

void dt_side_begin(void) {
    dt_gpu_init(0);
    if (!g_ctx.side) {
        DT_CHECK(cudaStreamCreateWithFlags(&g_ctx.side, cudaStreamNonBlocking));
        DT_CHECK(cudaEventCreateWithFlags(&g_ctx.forked, cudaEventDisableTiming));
        DT_CHECK(cudaEventCreateWithFlags(&g_ctx.done, cudaEventDisableTiming));
    }
    if (g_ctx.stream == g_ctx.side) dt_fatal("dt_side_begin: already on the side stream");
    g_ctx.main = g_ctx.stream;
    DT_CHECK(cudaEventRecord(g_ctx.forked, g_ctx.main));
    DT_CHECK(cudaStreamWaitEvent(g_ctx.side, g_ctx.forked, 0));
    g_ctx.stream = g_ctx.side;
}

void dt_side_end(void) {
    if (g_ctx.stream != g_ctx.side || !g_ctx.side) dt_fatal("dt_side_end: not on the side stream");
    DT_CHECK(cudaEventRecord(g_ctx.done, g_ctx.side));
    g_ctx.stream = g_ctx.main;
}

void dt_side_join(void) {
    if (g_ctx.side) DT_CHECK(cudaStreamWaitEvent(g_ctx.stream, g_ctx.done, 0));
}

static void require_ready(void) {
    if (!g_ctx.ready) dt_gpu_init(0);
}
cudaStream_t dt_stream(void) { require_ready(); return g_ctx.stream; }
cublasHandle_t dt_cublas(void) { require_ready(); return g_ctx.cublas; }
curandGenerator_t dt_curand(void) { require_ready(); return g_ctx.curand; }
const struct cudaDeviceProp *dt_gpu_props(void) { require_ready(); return &g_ctx.props; }
int dt_gpu_sm_count(void) { return dt_gpu_props()->multiProcessorCount; }
int dt_gpu_has_sm90a(void) {
#ifdef DT_SM90A
    const struct cudaDeviceProp *p = dt_gpu_props();
    return p->major == 9 && p->minor == 0;
#else
    return 0;
#endif
}

/* The limits set so far, per thread (no lock; another thread sets its own once more - the same
 * value, harmless). Past the table's size every call asks the driver, as before. */
void dt_gpu_func_smem(const void *fn, size_t bytes) {
    static __thread struct {
        const void *fn;
        int device;
        size_t bytes;
    } set[64];
    static __thread int nset;
    const int device = dt_gpu_current();
    int i = 0;
    while (i < nset && !(set[i].fn == fn && set[i].device == device)) i++;
    if (i < nset && set[i].bytes >= bytes) return;
    DT_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    if (i == nset && nset == 64) return;
    if (i == nset) nset++;
    set[i].fn = fn, set[i].device = device, set[i].bytes = bytes;
}

int dt_gpu_pointer_device(const void *p) {
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError(); /* clear the error: the caller reports it as its own */
        return DT_PTR_UNKNOWN;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ? a.device : DT_PTR_HOST;
}

void dt_device_describe(char *buf, int len) {
    if (g_default < 0) {
        snprintf(buf, len, "cpu (%d cores)", dt_num_cores());
        return;
    }
    const struct cudaDeviceProp *p = &cur_ctx()->props;
    snprintf(buf, len, "%s, %.1f GiB, %d SMs, L2 %d MiB, sm_%d%d", p->name,
             p->totalGlobalMem / 1073741824.0, p->multiProcessorCount, p->l2CacheSize >> 20,
             p->major, p->minor);
}

#else /* CPU-only build */

int dt_built_with_cuda(void) { return 0; }
int dt_gpu_count(void) { return 0; }
void dt_gpu_init(int device) {
    (void)device;
    dt_fail(DT_ERR_DEVICE, "deftc was built without CUDA (CUDA=0); rebuild with nvcc available or use device=cpu");
}
int dt_gpu_ready(void) { return 0; }
void dt_gpu_use(int device) { dt_gpu_init(device); }
int dt_gpu_current(void) { return -1; }
void dt_gpu_sync(void) {}
int dt_gpu_sm_count(void) { return 0; }
int dt_gpu_has_sm90a(void) { return 0; }
void dt_side_begin(void) {}
void dt_side_end(void) {}
void dt_side_join(void) {}
void dt_set_stream(void *stream) {
    (void)stream;
    dt_fatal("dt_set_stream: deftc was built without CUDA (CUDA=0)");
}
int dt_gpu_pointer_device(const void *p) {
    (void)p;
    return DT_PTR_UNKNOWN;
}
void dt_device_describe(char *buf, int len) { snprintf(buf, len, "cpu (%d cores)", dt_num_cores()); }

#endif
