/* dt_cuda.h: CUDA-only declarations: the stream/handles of the context and the checking
 * macros. Include it only from files compiled with CUDA on (DT_CUDA defined).
 *
 * DT_CHECK(call), DT_CUBLAS(call), DT_CURAND(call) raise (dt_common.h: DT_ERR_DEVICE, or
 * DT_ERR_OOM for an allocation failure) with the failing call, its error string and file:line:
 * the guarded entry returns the status, a program outside guards prints it and exits - except
 * while the thread captures a CUDA graph: then the first error is the capture's failure
 * (dt_graph.h) and the program goes on to dt_graph_end. Each check is also a failure-injection
 * point (DT_INJECT_DEVICE_CALL): an injected failure replaces the call, which then never runs -
 * as a real failure leaves nothing behind, where failing a call that succeeded would leak the
 * block a cudaMalloc made or keep the update a kernel wrote. A kernel's failure is injected at
 * its op-table dispatch (core/dt_kernel.c), before it launches, so DT_CHECK_LAUNCH is not an
 * injection point. DT_CHECK_LAUNCH() goes after every kernel launch: it
 * catches launch errors at once and, in debug mode, synchronizes so that an error inside the
 * kernel is reported at the launch that caused it.
 */
#ifndef DT_CUDA_H
#define DT_CUDA_H

#ifndef DT_CUDA
#error "dt_cuda.h included in a build without CUDA"
#endif

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <curand.h>

#include "core/dt_common.h"
#include "core/dt_device.h"

#ifdef __cplusplus
extern "C" {
#endif

cudaStream_t dt_stream(void);
cublasHandle_t dt_cublas(void);
curandGenerator_t dt_curand(void);
const struct cudaDeviceProp *dt_gpu_props(void);
/* Lets kernel fn take `bytes` of dynamic shared memory on the current device
 * (cudaFuncAttributeMaxDynamicSharedMemorySize): a driver call the first time a larger limit is
 * needed, nothing after - the attribute is the function's on its device and stays set. */
void dt_gpu_func_smem(const void *fn, size_t bytes);

const char *dt_cublas_status_str(cublasStatus_t s);
const char *dt_curand_status_str(curandStatus_t s);
/* Returns only while the thread captures a graph (the error then fails the capture). */
void dt_cuda_fail(const char *what, const char *call, const char *msg, const char *file, int line);
/* dt_cuda_fail asks this hook first, and returns when it says 1 (the error is recorded as the
 * capture's failure): set once at load time by core/dt_graph.c, which sits above the device. */
typedef int (*dt_cuda_error_hook)(const char *what, const char *call, const char *msg, const char *file, int line);
void dt_set_cuda_error_hook(dt_cuda_error_hook hook);
void dt_check_launch_at(const char *file, int line);

#ifdef __cplusplus
}
#endif

#define DT_CHECK(call)                                                                  \
    do {                                                                                \
        cudaError_t dt_e_ = dt_inject_hit(DT_INJECT_DEVICE_CALL) ? cudaErrorUnknown : (call); \
        if (dt_e_ != cudaSuccess)                                                       \
            dt_cuda_fail("CUDA", #call, cudaGetErrorString(dt_e_), __FILE__, __LINE__); \
    } while (0)

#define DT_CUBLAS(call)                                                                    \
    do {                                                                                   \
        cublasStatus_t dt_s_ = dt_inject_hit(DT_INJECT_DEVICE_CALL) ? CUBLAS_STATUS_EXECUTION_FAILED : (call); \
        if (dt_s_ != CUBLAS_STATUS_SUCCESS)                                                \
            dt_cuda_fail("cuBLAS", #call, dt_cublas_status_str(dt_s_), __FILE__, __LINE__); \
    } while (0)

#define DT_CURAND(call)                                                                    \
    do {                                                                                   \
        curandStatus_t dt_s_ = dt_inject_hit(DT_INJECT_DEVICE_CALL) ? CURAND_STATUS_LAUNCH_FAILURE : (call); \
        if (dt_s_ != CURAND_STATUS_SUCCESS)                                                \
            dt_cuda_fail("cuRAND", #call, dt_curand_status_str(dt_s_), __FILE__, __LINE__); \
    } while (0)

#define DT_CHECK_LAUNCH() dt_check_launch_at(__FILE__, __LINE__)

#endif
