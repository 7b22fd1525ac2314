/* dt_dispatch.h: calling a kernel family's CPU twin or CUDA version by the tensor's device.
 *   DT_CALL(dev, dt_relu_fwd, n, x, y)  ->  dt_relu_fwd_cpu(n, x, y) or dt_relu_fwd_cuda(n, x, y)
 * In a CPU-only build the CUDA branch is not compiled at all (no CUDA symbol is referenced);
 * reaching it is a clear error, though no GPU tensor can exist in such a build. */
#ifndef DT_DISPATCH_H
#define DT_DISPATCH_H

#include "dt_common.h"
#include "dt_device.h"

#ifdef DT_CUDA
#define DT_CUDA_ONLY(call) call
#else
#define DT_CUDA_ONLY(call) dt_fatal("this op needs CUDA but deftc was built with CUDA=0")
#endif

#define DT_CALL(dev, fn, ...)                         \
    do {                                              \
        if ((dev) == DT_GPU) {                        \
            DT_CUDA_ONLY(fn##_cuda(__VA_ARGS__));     \
        } else {                                      \
            fn##_cpu(__VA_ARGS__);                    \
        }                                             \
    } while (0)

#endif
