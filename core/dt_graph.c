#include "core/dt_graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dt_alloc.h"
#include "core/dt_common.h"
#include "core/dt_timer.h"

/* This thread's capture in progress: its first failure and the op it belongs to. */
typedef struct {
    int on;
    int failed;       /* an error was absorbed, or the capture was found invalidated */
    int attributed;   /* failed, and the op it happened in is named */
    char why[600];    /* the failing call */
    char op[96];      /* the op it happened in */
} capture_state;

static __thread capture_state t_cap;

int dt_graph_absorb_error(const char *what, const char *call, const char *msg, const char *file, int line) {
    if (!t_cap.on) return 0;
    if (!t_cap.failed) {
        t_cap.failed = 1;
        snprintf(t_cap.why, sizeof t_cap.why, "%s call %s failed: %s (%s:%d)", what, call, msg, file, line);
    }
    return 1;
}

#ifdef DT_CUDA
#include "core/dt_cuda.h"

__attribute__((constructor)) static void set_error_hook(void) { dt_set_cuda_error_hook(dt_graph_absorb_error); }

struct dt_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    dt_gpu_pool *pool, *prev_pool;
    size_t nodes;
    double t0;
};

void dt_graph_note_op(const char *op, int backward) {
    if (!t_cap.on || t_cap.attributed) return;
    if (!t_cap.failed) { /* a library may have invalidated the capture without an error of ours */
        enum cudaStreamCaptureStatus st;
        if (cudaStreamIsCapturing(dt_stream(), &st) != cudaSuccess || st != cudaStreamCaptureStatusActive) {
            cudaGetLastError();
            t_cap.failed = 1;
            snprintf(t_cap.why, sizeof t_cap.why, "the capture was invalidated (by a synchronizing call or a library)");
        }
    }
    if (t_cap.failed) {
        snprintf(t_cap.op, sizeof t_cap.op, "%s%s", op, backward ? " (backward)" : "");
        t_cap.attributed = 1;
    }
}

dt_graph *dt_graph_begin(void) {
    if (t_cap.on) dt_fatal("dt_graph_begin: this thread is capturing already");
    dt_graph *g = dt_xcalloc(1, sizeof *g);
    g->t0 = dt_now_ms();
    g->pool = dt_gpu_pool_new();
    g->prev_pool = dt_gpu_pool_use(g->pool);
    DT_CHECK(cudaStreamBeginCapture(dt_stream(), cudaStreamCaptureModeThreadLocal));
    memset(&t_cap, 0, sizeof t_cap);
    t_cap.on = 1;
    return g;
}

static void discard(dt_graph *g) {
    if (g->exec) cudaGraphExecDestroy(g->exec);
    if (g->graph) cudaGraphDestroy(g->graph);
    dt_gpu_pool_retire(g->pool);
    free(g);
}

int dt_graph_end(dt_graph *g, char *why, size_t cap, double *capture_ms) {
    cudaError_t e = cudaStreamEndCapture(dt_stream(), &g->graph);
    t_cap.on = 0;
    dt_gpu_pool_use(g->prev_pool);
    cudaGetLastError(); /* a failed capture's launch errors are not the next launch's */
    if (!t_cap.failed && (e != cudaSuccess || !g->graph))
        snprintf(t_cap.why, sizeof t_cap.why, "cudaStreamEndCapture failed: %s", cudaGetErrorString(e)), t_cap.failed = 1;
    if (!t_cap.failed) {
        e = cudaGraphInstantiateWithFlags(&g->exec, g->graph, 0);
        if (e != cudaSuccess) {
            cudaGetLastError();
            g->exec = NULL;
            snprintf(t_cap.why, sizeof t_cap.why, "cudaGraphInstantiate failed: %s", cudaGetErrorString(e));
            t_cap.failed = 1;
        }
    }
    if (t_cap.failed) {
        snprintf(why, cap, "%s%s%s", t_cap.why, t_cap.attributed ? " in op " : " (outside any op)",
                 t_cap.attributed ? t_cap.op : "");
        discard(g);
        return -1;
    }
    DT_CHECK(cudaGraphGetNodes(g->graph, NULL, &g->nodes));
    DT_CHECK(cudaGraphUpload(g->exec, dt_stream())); /* the first launch does not pay for it */
    if (capture_ms) *capture_ms = dt_now_ms() - g->t0;
    return 0;
}

void dt_graph_launch(dt_graph *g) { DT_CHECK(cudaGraphLaunch(g->exec, dt_stream())); }

size_t dt_graph_nodes(const dt_graph *g) { return g->nodes; }

void dt_graph_free(dt_graph *g) {
    if (!g) return;
    DT_CHECK(cudaStreamSynchronize(dt_stream()));
    discard(g);
}

#else /* CPU-only build: there is nothing to capture */

void dt_graph_note_op(const char *op, int backward) {
    (void)op;
    (void)backward;
}
dt_graph *dt_graph_begin(void) { dt_fatal("dt_graph_begin: deftc was built without CUDA (CUDA=0)"); }
int dt_graph_end(dt_graph *g, char *why, size_t cap, double *capture_ms) {
    (void)g;
    (void)capture_ms;
    snprintf(why, cap, "deftc was built without CUDA");
    return -1;
}
void dt_graph_launch(dt_graph *g) { (void)g; }
size_t dt_graph_nodes(const dt_graph *g) { (void)g; return 0; }
void dt_graph_free(dt_graph *g) { (void)g; }

#endif
