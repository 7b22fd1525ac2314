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

void dt_event_init(dt_event *e, dt_dev dev) {
    e->cuda = NULL;
    e->host_ms = 0;
    if (dev == DT_GPU) {
        cudaEvent_t ev;
        DT_CHECK(cudaEventCreate(&ev));
        e->cuda = ev;
    }
}
void dt_event_destroy(dt_event *e) {
    if (e->cuda) cudaEventDestroy((cudaEvent_t)e->cuda);
    e->cuda = NULL;
}
void dt_event_record(dt_event *e) {
    if (e->cuda) DT_CHECK(cudaEventRecord((cudaEvent_t)e->cuda, dt_stream()));
    else e->host_ms = dt_now_ms();
}
void dt_event_sync(const dt_event *e) {
    if (e->cuda) DT_CHECK(cudaEventSynchronize((cudaEvent_t)e->cuda));
}
float dt_event_ms(const dt_event *from, const dt_event *to) {
    if (!from->cuda) return (float)(to->host_ms - from->host_ms);
    float ms;
    DT_CHECK(cudaEventElapsedTime(&ms, (cudaEvent_t)from->cuda, (cudaEvent_t)to->cuda));
    return ms;
}

#else /* CPU-only build: host-clock events only */

void dt_event_init(dt_event *e, dt_dev dev) {
    e->cuda = NULL;
    e->host_ms = 0;
    if (dev == DT_GPU) dt_fail(DT_ERR_DEVICE, "dt_event_init: deftc was built without CUDA (CUDA=0)");
}
void dt_event_destroy(dt_event *e) { (void)e; }
void dt_event_record(dt_event *e) { e->host_ms = dt_now_ms(); }
void dt_event_sync(const dt_event *e) { (void)e; }
float dt_event_ms(const dt_event *from, const dt_event *to) { return (float)(to->host_ms - from->host_ms); }

#endif

/* A pair of events of the device in use when it is made. */
struct dt_gpu_timer {
    dt_event e0, e1;
};

dt_gpu_timer *dt_gpu_timer_new(void) {
    dt_gpu_timer *t = dt_xcalloc(1, sizeof *t);
    dt_event_init(&t->e0, dt_gpu_ready() ? DT_GPU : DT_CPU);
    dt_event_init(&t->e1, dt_gpu_ready() ? DT_GPU : DT_CPU);
    return t;
}

void dt_gpu_timer_free(dt_gpu_timer *t) {
    if (!t) return;
    dt_event_destroy(&t->e0);
    dt_event_destroy(&t->e1);
    free(t);
}

void dt_gpu_timer_start(dt_gpu_timer *t) { dt_event_record(&t->e0); }
void dt_gpu_timer_stop(dt_gpu_timer *t) { dt_event_record(&t->e1); }

float dt_gpu_timer_ms(dt_gpu_timer *t) {
    dt_event_sync(&t->e1);
    return dt_event_ms(&t->e0, &t->e1);
}
