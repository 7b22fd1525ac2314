/* The run's outputs: terminal, log files and summary (train_output.h). */
#include "train/train_output.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/atomic_file.h"
#include "core/dt_file.h"

#define STEPS_HEADER "step,epoch,loss,lr,fwd_ms,bwd_ms,opt_ms,step_ms,data_wait_ms,img_per_s\n"
#define EPOCHS_HEADER "epoch,steps,train_loss,val_loss,val_top1,val_top5,epoch_s,skipped_images\n"
/* A table read back on resume is at most this large (10^7 steps take about 1 GB). */
#define TABLE_MAX_BYTES ((size_t)4 << 30)

void train_output_check(train_output *o, FILE *f, const char *path) {
    if (!f || o->failed[0]) return;
    if (fflush(f) != 0 || ferror(f)) snprintf(o->failed, sizeof o->failed, "cannot write %.600s: %.150s", path, strerror(errno));
}

/* One line to the terminal (unless quiet; a warning to stderr through dt_warn) and the log. */
static void emit(train_output *o, int warning, const char *fmt, va_list ap) {
    char line[2048];
    vsnprintf(line, sizeof line, fmt, ap);
    if (warning) {
        dt_warn("%s", line);
    } else if (!o->quiet) {
        if (o->tty) fputs("\r\033[K", stdout);
        fputs(line, stdout);
        fputc('\n', stdout);
        fflush(stdout);
    }
    if (o->log) {
        fprintf(o->log, "%s%s\n", warning ? "warning: " : "", line);
        train_output_check(o, o->log, o->log_path);
    }
}

void train_say(train_output *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    emit(o, 0, fmt, ap);
    va_end(ap);
}

void train_warn(train_output *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    emit(o, 1, fmt, ap);
    va_end(ap);
}

int train_output_open(train_output *o, const dt_train_cfg *c, dt_err *err) {
    o->tty = c->progress && !c->quiet && isatty(1);
    o->quiet = c->quiet;
    if (!c->log[0]) return 0;
    dt_err e;
    if (dt_make_parent_dirs(c->log, &e)) return dt_errf(err, "cannot write the log files %s.*: %s", c->log, e.msg);
    snprintf(o->log_path, sizeof o->log_path, "%s.log", c->log);
    snprintf(o->steps_path, sizeof o->steps_path, "%s_steps.csv", c->log);
    snprintf(o->epochs_path, sizeof o->epochs_path, "%s_epochs.csv", c->log);
    if (!(o->log = fopen(o->log_path, c->resume[0] ? "a" : "w")))
        return dt_errf(err, "cannot write %s: %s", o->log_path, strerror(errno));
    return 0;
}

/* Keeps the rows of a table whose first column (a step, an epoch) is at most `last`, and the
 * header; drops the others and a cut last line (a run killed mid-write). The table is
 * rewritten whole (atomic_file.h): the rows kept are never at risk. A missing table is left
 * missing (the caller starts it). */
static int cut_table(train_output *o, const char *path, const char *header, const char *column, int64_t last,
                     dt_err *err) {
    if (access(path, F_OK) != 0) return 0;
    dt_scratch buf = {0};
    size_t size;
    if (dt_file_read(path, "log", TABLE_MAX_BYTES, &buf, &size, err)) {
        dt_scratch_free(&buf);
        return -1;
    }
    char *text = buf.p, *end = text + size;
    size_t hl = strlen(header);
    if (size < hl || memcmp(text, header, hl) != 0) {
        dt_scratch_free(&buf);
        return dt_errf(err, "cannot resume the log %s: its first line is not the header deftc writes (%.*s): move it away "
                       "or give this run another log=", path, (int)hl - 1, header);
    }
    char *w = text + hl; /* rows kept are moved down in place */
    long long kept = 0, dropped = 0;
    for (char *p = text + hl; p < end;) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) { /* cut mid-write */
            dropped++;
            break;
        }
        char *num_end;
        long long key = strtoll(p, &num_end, 10);
        size_t n = (size_t)(nl + 1 - p);
        if (num_end != p && *num_end == ',' && key <= last) {
            memmove(w, p, n);
            w += n;
            kept++;
        } else {
            dropped++;
        }
        p = nl + 1;
    }
    int rc = 0;
    if (dropped) {
        rc = dt_atomic_write(path, "log", text, (size_t)(w - text), NULL, 0, err);
        if (!rc)
            train_say(o, "resume: %s keeps its %lld rows up to %s %lld; %lld rows after it go (this run writes them "
                      "again)", path, kept, column, (long long)last, dropped);
    }
    dt_scratch_free(&buf);
    return rc;
}

int train_output_open_tables(train_output *o, const dt_train_cfg *c, const dt_ckpt_pos *resumed, dt_err *err) {
    if (!c->log[0]) return 0;
    if (resumed && (cut_table(o, o->steps_path, STEPS_HEADER, "step", resumed->step, err) ||
                    cut_table(o, o->epochs_path, EPOCHS_HEADER, "epoch", resumed->epoch - 1, err)))
        return -1;
    FILE **f[2] = {&o->steps_csv, &o->epochs_csv};
    const char *path[2] = {o->steps_path, o->epochs_path}, *header[2] = {STEPS_HEADER, EPOCHS_HEADER};
    for (int i = 0; i < 2; i++) {
        int fresh = !resumed || access(path[i], F_OK) != 0;
        if (!(*f[i] = fopen(path[i], fresh ? "w" : "a"))) return dt_errf(err, "cannot write %s: %s", path[i], strerror(errno));
        if (fresh) fputs(header[i], *f[i]);
        train_output_check(o, *f[i], path[i]);
    }
    return o->failed[0] ? dt_errf(err, "%s", o->failed) : 0;
}

void train_output_close(train_output *o) {
    FILE **f[3] = {&o->log, &o->steps_csv, &o->epochs_csv};
    const char *path[3] = {o->log_path, o->steps_path, o->epochs_path};
    for (int i = 0; i < 3; i++) {
        if (!*f[i]) continue;
        train_output_check(o, *f[i], path[i]);
        if (fclose(*f[i]) != 0 && !o->failed[0])
            snprintf(o->failed, sizeof o->failed, "cannot write %.600s: %.150s", path[i], strerror(errno));
        *f[i] = NULL;
    }
}

int train_write_summary(const dt_train_cfg *c, const dt_train_result *res, dt_err *err) {
    char p[600];
    snprintf(p, sizeof p, "%s_summary.txt", c->log);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) dt_fatal("open_memstream failed");
    fprintf(f, "steps %lld\nmedian_step_ms %.4f\np90_step_ms %.4f\nfwd_ms %.4f\nbwd_ms %.4f\nopt_ms %.4f\n"
               "img_per_s %.2f\ndata_wait_ms %.4f\npeak_mem_gib %.4f\nval_top1 %.4f\nval_top5 %.4f\nlast_loss %.6f\n",
            (long long)res->steps, res->median_step_ms, res->p90_step_ms, res->median_fwd_ms, res->median_bwd_ms,
            res->median_opt_ms, res->img_per_s, res->data_wait_ms, res->peak_mem / 1073741824.0, res->val_top1,
            res->val_top5, res->last_loss);
    fclose(f);
    int rc = dt_atomic_write(p, "", text, len, NULL, 0, err);
    free(text);
    return rc;
}

