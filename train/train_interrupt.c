/* The run's stop request (dt_train_interrupt, dt_trainer.h): set by a signal handler, polled by
 * the replicas once per step (train_run.h), cleared by dt_train_run when the run ends. */
#include <signal.h>
#include <stdatomic.h>

#include "train/dt_trainer.h"
#include "train/train_run.h"

/* The pending stop request: a signal number, 0 when none. A lock-free atomic, so that the
 * signal handler may set it (C11 7.14.1.1) and the replicas' threads read it. */
static atomic_int g_interrupt;

void dt_train_interrupt(int signo) {
    int none = 0;
    atomic_compare_exchange_strong(&g_interrupt, &none, signo > 0 ? signo : SIGTERM); /* the first one counts */
}

int train_interrupt_pending(void) { return atomic_load(&g_interrupt); }

void train_interrupt_clear(void) { atomic_store(&g_interrupt, 0); }
