/* dt_graph.h: this thread's device work captured once into a CUDA graph and replayed (the
 * training step, docs/training.md "The step as one CUDA graph").
 *
 * Why: a ResNet step is hundreds of short kernels; launched one by one, the host's launch rate
 * and the gaps between kernels set a floor under the step. A graph launch submits them all at
 * once, with the dependencies already resolved.
 *
 * What a capture records is the device work queued on dt_stream() (and on the streams that
 * join it through events: the deformable side stream, NCCL's stream) between dt_graph_begin
 * and dt_graph_end, with every pointer and kernel argument as it was then. So:
 *   - allocations of the capturing thread come from the graph's private memory pool
 *     (dt_gpu_pool_new): the addresses baked in stay the graph's for its lifetime;
 *   - host code inside the capture runs once, at capture time: per-step scalars (the learning
 *     rate) must live in device memory, written before each launch;
 *   - a call that needs the device to have run (a synchronizing copy, a read-back) cannot be
 *     captured. During a capture such a failure does not end the program: the first CUDA,
 *     cuBLAS or cuRAND error of the thread is recorded with its call site and the op it
 *     happened in (the autograd engine names each op as it is recorded or run backward:
 *     dt_graph_note_op), and dt_graph_end returns -1 with that reason. The caller then runs the
 *     work eagerly; nothing of the failed capture ever ran.
 * The capture uses the thread-local mode: other threads (other replicas) are unaffected. */
#ifndef DT_GRAPH_H
#define DT_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_graph dt_graph;

/* Starts capturing dt_stream() on the current GPU (fatal without one). */
dt_graph *dt_graph_begin(void);
/* Ends the capture and instantiates it: 0, or -1 with why[] saying what could not be captured
 * (then g is freed). *capture_ms: host time from dt_graph_begin to the instantiated graph. */
int dt_graph_end(dt_graph *g, char *why, size_t cap, double *capture_ms);
void dt_graph_launch(dt_graph *g);        /* on dt_stream(), asynchronous */
size_t dt_graph_nodes(const dt_graph *g); /* kernels, copies, memsets, event and NCCL nodes */
/* Waits for the graph's launches, destroys it and retires its pool. NULL is ignored. */
void dt_graph_free(dt_graph *g);

/* For the engine and the error macros: */
void dt_graph_note_op(const char *op, int backward); /* after op's work was queued */
/* dt_cuda_fail's question: 1 when the error is recorded as the capture's failure (the thread
 * is capturing), 0 when the program should stop on it. */
int dt_graph_absorb_error(const char *what, const char *call, const char *msg, const char *file, int line);

#ifdef __cplusplus
}
#endif
#endif
