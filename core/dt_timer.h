/* dt_timer.h: host clocks and device events.
 * Device work is asynchronous, so a host clock around a kernel measures the launch, not the
 * kernel: time device work with dt_gpu_timer (CUDA events on the context stream). */
#ifndef DT_TIMER_H
#define DT_TIMER_H

#include "core/dt_api.h"
#include "core/dt_device.h"

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

double dt_now_ms(void); /* monotonic host clock in milliseconds */

/* A pair of CUDA events; on the CPU (or a CPU-only build) it falls back to the host clock,
 * which is then exact because CPU work is synchronous. */
typedef struct dt_gpu_timer dt_gpu_timer;
dt_gpu_timer *dt_gpu_timer_new(void);
void dt_gpu_timer_free(dt_gpu_timer *t);
void dt_gpu_timer_start(dt_gpu_timer *t);
void dt_gpu_timer_stop(dt_gpu_timer *t);
float dt_gpu_timer_ms(dt_gpu_timer *t); /* waits for the stop event */

DT_PUBLIC_END

/* ---- device events (the library's own, not exported) ----
 * A point in a device's queued work, for code that pipelines work without knowing the device
 * (the trainer's step marks): on the GPU a CUDA event recorded on the calling thread's
 * dt_stream(), on the CPU, where work is synchronous, the host clock when it was recorded. A
 * plain value, so that CPU events cost no allocation. */
typedef struct {
    void *cuda;     /* the cudaEvent_t (a GPU event; as void * for dt_dist_wait_event), NULL on the CPU */
    double host_ms; /* dt_now_ms() at the last record (a CPU event) */
} dt_event;
/* An event of `dev`'s work; on the GPU one of the calling thread's current device, with timing
 * (a CPU-only build raises DT_ERR_DEVICE for DT_GPU). */
void dt_event_init(dt_event *e, dt_dev dev);
void dt_event_destroy(dt_event *e);
void dt_event_record(dt_event *e); /* after the work queued so far */
void dt_event_sync(const dt_event *e); /* waits on the host for the work before the record (CPU: none) */
/* ms from one record to another, both done (dt_event_sync) and of one device. */
float dt_event_ms(const dt_event *from, const dt_event *to);
#ifdef __cplusplus
}
#endif
#endif
