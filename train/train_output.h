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
    int log_held;     /* 1: PREFIX.log not opened yet - `log` is a memory stream of the lines so far */
    char *held;
    size_t held_len;
} train_output;

/* Prepares PREFIX.log of c->log (appended to when resuming: it is the run's history): its
 * folders made, its lines held in memory until train_output_open_tables opens the file, so that
 * a run that fails before it trains writes no file (nor empties an earlier one). -1 with err
 * set. The tables come later, once the position resumed from is known. */
int train_output_open(train_output *o, const dt_train_cfg *c, dt_err *err);
/* Opens PREFIX.log (the lines held so far first), PREFIX_steps.csv and PREFIX_epochs.csv: new
 * ones (overwrite=1: an earlier run's summaries removed), or when resuming from `resumed` (the
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
/* The machine-readable summary PREFIX_summary.txt (read by bench/reproduce.sh), written whole
 * or not at all: `status` (finished, stopped - by stop_at -, interrupted, failed) first, then
 * `error` (a failed run's message), the steps and the statistics. A run that did not finish
 * never replaces the summary of one that did: it writes PREFIX_summary_STATUS.txt instead.
 * written[cap] (may be NULL) gets the path. 0, or -1 with err set. */
int train_write_summary(const dt_train_cfg *c, const dt_train_result *res, const char *status, const char *error,
                        char *written, size_t cap, dt_err *err);
/* A new run (not resume=, not overwrite=1) on outputs that hold an earlier run's results - a
 * log prefix whose files are there (not empty), its checkpoint ckpt_path, an existing
 * checkpoint= or export= - is refused, naming the files, what the summary says of that run,
 * resume= and overwrite=1. 0, or -1 with err set. */
int train_output_refuse_rerun(const dt_train_cfg *c, const char *ckpt_path, dt_err *err);

#endif
