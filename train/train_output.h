/* train_output.h: what a training run writes: the terminal, PREFIX.log, PREFIX_steps.csv,
 * PREFIX_epochs.csv and PREFIX_summary.txt (the trainer's internal header). Only replica 0
 * of a data-parallel run writes; the others never touch these. */
#ifndef DT_TRAIN_OUTPUT_H
#define DT_TRAIN_OUTPUT_H

#include <stdio.h>

#include "train/dt_checkpoint.h"
#include "train/dt_config.h"
#include "train/dt_trainer.h"


/* The log files, and the first write to them that failed (a full disk, a quota): the run
 * stops with that message rather than leaving cut or empty files behind a status of 0. */
typedef struct {
    FILE *log, *steps_csv, *epochs_csv;
    char log_path[600], steps_path[600], epochs_path[600];
    int tty, quiet;
    char failed[800]; /* "cannot write PATH: reason", empty while every write succeeded */
} train_output;

/* Opens PREFIX.log of c->log (appended to when resuming: it is the run's history); -1 with err
 * set. The tables come later, once the position resumed from is known. */
int train_output_open(train_output *o, const dt_train_cfg *c, dt_err *err);
/* Opens PREFIX_steps.csv and PREFIX_epochs.csv: new ones, or when resuming from `resumed` (the
 * position the checkpoint stores) the existing ones cut back to it - the rows of steps up to
 * resumed->step and of epochs before resumed->epoch stay, the rest go (the resumed run writes
 * them again, so every step is in the table once) - each rewritten whole by rename, so that a
 * failure leaves it as it was. A table whose first line is not deftc's header is refused.
 * -1 with err set. */
int train_output_open_tables(train_output *o, const dt_train_cfg *c, const dt_ckpt_pos *resumed, dt_err *err);
/* Closes them; a failure (the last buffered bytes not written) is recorded in o->failed. */
void train_output_close(train_output *o);
/* Flushes f (where buffered write errors surface) and records the first failure. */
void train_output_check(train_output *o, FILE *f, const char *path);
/* One line to the terminal (unless quiet) and the log. */
void train_say(train_output *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A warning: to stderr (dt_warn) and the log. */
void train_warn(train_output *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The machine-readable summary (read by bench/reproduce.sh), written whole or not at all. */
int train_write_summary(const dt_train_cfg *c, const dt_train_result *res, dt_err *err);

#endif
