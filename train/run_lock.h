/* run_lock.h: keeping two runs from writing the same outputs at once (the trainer's internal
 * header). A run that writes the log files PREFIX.* or a checkpoint PATH first takes the lock
 * PREFIX.lock or PATH.lock: a file holding the owner's PID as text, locked with flock(2).
 * While the owner runs, a second run that asks for it is refused with an error naming the
 * owner's PID; the kernel releases a flock when its process exits however it exits, so the
 * lock file a killed run left behind is free, and the next run takes it over (the caller
 * warns, naming the PID that is gone). The owner removes the file when it is done. */
#ifndef DT_RUN_LOCK_H
#define DT_RUN_LOCK_H

#include "core/dt_common.h"

typedef struct {
    int held, fd;    /* a zeroed struct holds nothing */
    char path[4200]; /* NAME.lock */
} train_lock;

/* Takes NAME.lock; `what` says what it guards in messages ("log files runs/x.*"). *stale_pid
 * is the PID a killed run left in the file when the lock was taken over from it, else 0.
 * 0, or -1 with err set (held by a running process, or the file cannot be made). */
int train_lock_take(train_lock *l, const char *name, const char *what, long *stale_pid, dt_err *err);
/* Removes the file and drops the lock (nothing when not held). */
void train_lock_release(train_lock *l);

#endif
