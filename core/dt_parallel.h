/* dt_parallel.h: a small persistent thread pool for the CPU twins of the kernels.
 * dt_parallel_for splits [0, n) into contiguous ranges, one per worker, and returns when all
 * are done. Work is split by index only, so results never depend on the thread count as long
 * as each index is computed independently (every CPU kernel is written that way).
 * Threads: DT_THREADS from the environment, else the number of cores. A call made from inside
 * a worker runs serially. A process forked after the pool started gets a pool of its own. */
#ifndef DT_PARALLEL_H
#define DT_PARALLEL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*dt_range_fn)(void *ctx, int64_t begin, int64_t end);

/* Runs fn over [0, n) in chunks of at least `grain` indices. */
void dt_parallel_for(int64_t n, int64_t grain, dt_range_fn fn, void *ctx);
int dt_parallel_threads(void);
void dt_parallel_set_threads(int n); /* before the first dt_parallel_for */

#ifdef __cplusplus
}
#endif
#endif
