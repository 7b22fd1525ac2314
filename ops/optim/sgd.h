/* sgd.h: SGD with momentum / Nesterov / weight decay (PyTorch's torch.optim.SGD rule) over
 * many tensors in one launch ("multi-tensor apply"):
 *   g = grad + wd * p
 *   m = first ? g : momentum * m + (1 - dampening) * g       (when momentum != 0)
 *   d = nesterov ? g + momentum * m : m                        (d = g without momentum)
 *   p = p - lr * lr_mult * d
 * The CUDA version walks a table of fixed-size chunks, so one launch covers every parameter
 * whatever their sizes; the tables live on the device and change only when the set of
 * parameters with a gradient changes. lr is read from memory (one float on the device of the
 * tables: the CUDA version's is a device pointer), so that a step captured in a CUDA graph
 * takes each step's learning rate without being re-captured. */
#ifndef DT_K_SGD_H
#define DT_K_SGD_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    float *p;
    const float *g;
    float *m; /* momentum buffer (unused when momentum == 0) */
    int64_t n;
    float wd;
    float lr_mult; /* this tensor's learning rate is lr * lr_mult */
    int first;     /* the momentum buffer starts as g */
} dt_sgd_tensor;

typedef struct {
    int32_t tensor;
    int32_t pad;
    int64_t begin, end;
} dt_sgd_chunk;

#define DT_SGD_CHUNK 16384

/* ts: count tensors; chunks: their nchunks chunk table (the CUDA version walks the chunks,
 * device copies of both; the CPU twin walks the tensors, host memory, and ignores chunks). */
void dt_sgd_step_cpu(const dt_sgd_tensor *ts, int count, const dt_sgd_chunk *chunks, int nchunks, const float *lr,
                     float momentum, float dampening, int nesterov);
void dt_sgd_step_cuda(const dt_sgd_tensor *ts, int count, const dt_sgd_chunk *chunks, int nchunks, const float *lr,
                      float momentum, float dampening, int nesterov);

#ifdef __cplusplus
}
#endif
#endif
