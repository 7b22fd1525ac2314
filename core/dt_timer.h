/* dt_timer.h: host clocks and device events.
 * Device work is asynchronous, so a host clock around a kernel measures the launch, not the
 * kernel: time device work with dt_gpu_timer (CUDA events on the context stream). */
#ifndef DT_TIMER_H
#define DT_TIMER_H

#include "core/dt_api.h"

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
#ifdef __cplusplus
}
#endif
#endif
