#include "core/dt_timer.h"

#include <stdlib.h>
#include <time.h>

#include "core/dt_common.h"
#include "core/dt_device.h"

double dt_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

#ifdef DT_CUDA
#include "core/dt_cuda.h"
#endif

struct dt_gpu_timer {
    int gpu;
    double t0, t1;
#ifdef DT_CUDA
    cudaEvent_t e0, e1;
#endif
};

dt_gpu_timer *dt_gpu_timer_new(void) {
    dt_gpu_timer *t = dt_xcalloc(1, sizeof *t);
    t->gpu = dt_gpu_ready();
#ifdef DT_CUDA
    if (t->gpu) {
        DT_CHECK(cudaEventCreate(&t->e0));
        DT_CHECK(cudaEventCreate(&t->e1));
    }
#endif
    return t;
}

void dt_gpu_timer_free(dt_gpu_timer *t) {
    if (!t) return;
#ifdef DT_CUDA
    if (t->gpu) {
        cudaEventDestroy(t->e0);
        cudaEventDestroy(t->e1);
    }
#endif
    free(t);
}

void dt_gpu_timer_start(dt_gpu_timer *t) {
#ifdef DT_CUDA
    if (t->gpu) { DT_CHECK(cudaEventRecord(t->e0, dt_stream())); return; }
#endif
    t->t0 = dt_now_ms();
}

void dt_gpu_timer_stop(dt_gpu_timer *t) {
#ifdef DT_CUDA
    if (t->gpu) { DT_CHECK(cudaEventRecord(t->e1, dt_stream())); return; }
#endif
    t->t1 = dt_now_ms();
}

float dt_gpu_timer_ms(dt_gpu_timer *t) {
#ifdef DT_CUDA
    if (t->gpu) {
        float ms;
        DT_CHECK(cudaEventSynchronize(t->e1));
        DT_CHECK(cudaEventElapsedTime(&ms, t->e0, t->e1));
        return ms;
    }
#endif
    return (float)(t->t1 - t->t0);
}
