/* The run's outputs: terminal, log files and summary (train_output.h). */
#include "train/train_output.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
    /* the lines before training are held in memory: a run that never starts writes no file */
    if (!(o->log = open_memstream(&o->held, &o->held_len))) dt_fatal("open_memstream failed");
    o->log_held = 1;
    return 0;
}

/* The log file itself, once the run starts: the lines held so far first. */
static int open_log_file(train_output *o, const dt_train_cfg *c, dt_err *err) {
    if (!o->log_held) return 0;
    fclose(o->log);
    o->log = NULL;
    o->log_held = 0;
    FILE *f = fopen(o->log_path, c->resume[0] ? "a" : "w");
    if (!f) {
        free(o->held);
        o->held = NULL;
        return dt_errf(err, "cannot write %s: %s", o->log_path, strerror(errno));
    }
    if (o->held_len) fwrite(o->held, 1, o->held_len, f);
    free(o->held);
    o->held = NULL;
    o->log = f;
    train_output_check(o, o->log, o->log_path);
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
        if (!rc && kept == 0)
            train_say(o, "resume: %s: its %lld row%s go%s (the checkpoint is before %s first %s; this run writes %s "
                      "again)", path, dropped, dropped == 1 ? "" : "s", dropped == 1 ? "es" : "", "its", column,
                      dropped == 1 ? "it" : "them");
        else if (!rc)
            train_say(o, "resume: %s keeps its %lld row%s up to %s %lld; the %lld row%s after it go%s (this run writes "
                      "%s again)", path, kept, kept == 1 ? "" : "s", column, (long long)last, dropped, dropped == 1 ? "" : "s",
                      dropped == 1 ? "es" : "", dropped == 1 ? "it" : "them");
    }
    dt_scratch_free(&buf);
    return rc;
}

int train_output_open_tables(train_output *o, const dt_train_cfg *c, const dt_ckpt_pos *resumed, dt_err *err) {
    if (!c->log[0]) return 0;
    if (open_log_file(o, c, err)) return -1;
    if (!resumed && c->overwrite) { /* overwrite=1: no summary of the run replaced outlives it */
        char p[620];
        snprintf(p, sizeof p, "%.560s_summary.txt", c->log);
        unlink(p);
        for (int i = 0; i < 3; i++) {
            static const char *const st[3] = {"interrupted", "failed", "stopped"};
            snprintf(p, sizeof p, "%.560s_summary_%s.txt", c->log, st[i]);
            unlink(p);
        }
    }
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
    if (o->log_held) { /* the run never started: its lines go nowhere but the terminal */
        fclose(o->log);
        o->log = NULL;
        free(o->held);
        o->held = NULL;
        o->log_held = 0;
    }
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

/* The status an existing summary names: "finished" for one of before the status line (only
 * finished runs wrote one), "" when there is none. */
static void summary_status(const char *path, char *status, size_t cap, long long *steps, double *top1) {
    status[0] = 0;
    *steps = -1;
    *top1 = -1;
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[256];
    int any = 0;
    snprintf(status, cap, "finished");
    while (fgets(line, sizeof line, f)) {
        char v[64];
        any = 1;
        if (sscanf(line, "status %63s", v) == 1) snprintf(status, cap, "%s", v);
        sscanf(line, "steps %lld", steps);
        sscanf(line, "val_top1 %lf", top1);
    }
    fclose(f);
    if (!any) status[0] = 0;
}

int train_write_summary(const dt_train_cfg *c, const dt_train_result *res, const char *status, const char *error,
                        char *written, size_t cap, dt_err *err) {
    char p[620];
    snprintf(p, sizeof p, "%.560s_summary.txt", c->log);
    /* a run that did not finish never replaces a finished run's summary: its own goes beside it */
    char was[64];
    long long was_steps;
    double was_top1;
    summary_status(p, was, sizeof was, &was_steps, &was_top1);
    if (strcmp(status, "finished") && !strcmp(was, "finished"))
        snprintf(p, sizeof p, "%.560s_summary_%s.txt", c->log, status);
    if (written) snprintf(written, cap, "%s", p);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) dt_fatal("open_memstream failed");
    fprintf(f, "status %s\n", status);
    if (error && error[0]) {
        fputs("error ", f);
        for (const char *q = error; *q; q++) fputc(*q == '\n' || *q == '\r' ? ' ' : *q, f);
        fputc('\n', f);
    }
    fprintf(f, "steps %lld\nglobal_step %lld\nmedian_step_ms %.4f\np90_step_ms %.4f\nfwd_ms %.4f\nbwd_ms %.4f\nopt_ms %.4f\n"
               "img_per_s %.2f\ndata_wait_ms %.4f\npeak_mem_gib %.4f\nval_top1 %.4f\nval_top5 %.4f\nlast_loss %.6f\n",
            (long long)res->steps, (long long)res->global_step, res->median_step_ms, res->p90_step_ms, res->median_fwd_ms,
            res->median_bwd_ms, res->median_opt_ms, res->img_per_s, res->data_wait_ms, res->peak_mem / 1073741824.0,
            res->val_top1, res->val_top5, res->last_loss);
    fclose(f);
    int rc = dt_atomic_write(p, "", text, len, NULL, 0, err);
    free(text);
    return rc;
}

/* 1 when the table at `path` holds a row below its header. */
static int table_has_rows(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int lines = 0;
    for (int ch; lines < 2 && (ch = fgetc(f)) != EOF;) lines += ch == '\n';
    fclose(f);
    return lines >= 2;
}

int train_output_refuse_rerun(const dt_train_cfg *c, const char *ckpt_path, dt_err *err) {
    if (c->resume[0] || c->overwrite) return 0;
    struct stat st;
    if (c->log[0]) {
        /* results: a step or an epoch in the tables, a checkpoint, a summary of a run that
         * trained (a run that failed before its first step leaves only its log: no results) */
        char tp[620];
        snprintf(tp, sizeof tp, "%.560s_steps.csv", c->log);
        int results = table_has_rows(tp);
        snprintf(tp, sizeof tp, "%.560s_epochs.csv", c->log);
        results |= table_has_rows(tp);
        snprintf(tp, sizeof tp, "%.560s.ckpt", c->log);
        results |= !strcmp(tp, ckpt_path) && stat(tp, &st) == 0 && S_ISREG(st.st_mode);
        char s0[64];
        long long s_steps;
        double s_top1;
        snprintf(tp, sizeof tp, "%.560s_summary.txt", c->log);
        summary_status(tp, s0, sizeof s0, &s_steps, &s_top1);
        results |= s0[0] && (strcmp(s0, "failed") || s_steps > 0);
        if (!results) goto other_outputs;
        static const char *const tails[5] = {".log", "_steps.csv", "_epochs.csv", "_summary.txt", ".ckpt"};
        char found[1400] = "", p[620];
        size_t o = 0;
        for (int i = 0; i < 5; i++) {
            snprintf(p, sizeof p, "%.560s%s", c->log, tails[i]);
            if (i == 4 && strcmp(p, ckpt_path)) continue; /* checkpoint= elsewhere: below */
            if (stat(p, &st) == 0 && (st.st_size > 0 || i == 4) && o < sizeof found)
                o += (size_t)snprintf(found + o, sizeof found - o, "%s%s", o ? ", " : "", p);
        }
        if (found[0]) {
            char status[64], what[200] = "";
            long long steps;
            double top1;
            snprintf(p, sizeof p, "%.560s_summary.txt", c->log);
            summary_status(p, status, sizeof status, &steps, &top1);
            if (status[0] && top1 >= 0)
                snprintf(what, sizeof what, " (%s after %lld steps, val top-1 %.2f %%)", status, steps, 100 * top1);
            else if (status[0])
                snprintf(what, sizeof what, " (%s after %lld steps)", status, steps);
            int have_ck = stat(ckpt_path, &st) == 0;
            char resume[700] = "";
            if (have_ck)
                snprintf(resume, sizeof resume, "resume=%.600s continues that run (raise steps= or epochs= to train a "
                         "finished one further), ", ckpt_path);
            return dt_errf(err, "log=%s holds an earlier run's results%s: %s; a new run would replace them. %soverwrite=1 "
                           "replaces them, or give this run another log=", c->log, what, found, resume);
        }
    }
other_outputs: /* a folder, a FIFO, a device is no run's output: the start-up checks name it */
    if (c->checkpoint[0] && stat(c->checkpoint, &st) == 0 && S_ISREG(st.st_mode))
        return dt_errf(err, "checkpoint=%s holds an earlier run's checkpoint; a new run would replace it. resume=%s "
                       "continues that run, overwrite=1 replaces it, or give checkpoint= another path", c->checkpoint,
                       c->checkpoint);
    if (c->export_path[0] && stat(c->export_path, &st) == 0 && S_ISREG(st.st_mode))
        return dt_errf(err, "export=%s exists (an earlier run's weights?); a new run would replace it at its end. "
                       "overwrite=1 replaces it, or give export= another path", c->export_path);
    return 0;
}
