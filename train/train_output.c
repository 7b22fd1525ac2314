/* The run's outputs: terminal, log files and summary (train_output.h). */
#include "train_output.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dt_file.h"

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
    int fresh = !c->resume[0] || access(o->steps_path, F_OK) != 0;
    int fresh_e = !c->resume[0] || access(o->epochs_path, F_OK) != 0;
    FILE **f[3] = {&o->log, &o->steps_csv, &o->epochs_csv};
    const char *path[3] = {o->log_path, o->steps_path, o->epochs_path};
    const char *mode[3] = {c->resume[0] ? "a" : "w", fresh ? "w" : "a", fresh_e ? "w" : "a"};
    for (int i = 0; i < 3; i++)
        if (!(*f[i] = fopen(path[i], mode[i]))) return dt_errf(err, "cannot write %s: %s", path[i], strerror(errno));
    if (fresh) fprintf(o->steps_csv, "step,epoch,loss,lr,fwd_ms,bwd_ms,opt_ms,step_ms,data_wait_ms,img_per_s\n");
    if (fresh_e) fprintf(o->epochs_csv, "epoch,steps,train_loss,val_loss,val_top1,val_top5,epoch_s,skipped_images\n");
    train_output_check(o, o->steps_csv, o->steps_path);
    train_output_check(o, o->epochs_csv, o->epochs_path);
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
    char p[600], tmp[640];
    snprintf(p, sizeof p, "%s_summary.txt", c->log);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", p, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return dt_errf(err, "cannot write %s: %s", p, strerror(errno));
    fprintf(f, "steps %lld\nmedian_step_ms %.4f\np90_step_ms %.4f\nfwd_ms %.4f\nbwd_ms %.4f\nopt_ms %.4f\n"
               "img_per_s %.2f\ndata_wait_ms %.4f\npeak_mem_gib %.4f\nval_top1 %.4f\nval_top5 %.4f\nlast_loss %.6f\n",
            (long long)res->steps, res->median_step_ms, res->p90_step_ms, res->median_fwd_ms, res->median_bwd_ms,
            res->median_opt_ms, res->img_per_s, res->data_wait_ms, res->peak_mem / 1073741824.0, res->val_top1,
            res->val_top5, res->last_loss);
    int ok = fflush(f) == 0 && !ferror(f);
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, p) != 0) {
        int e = errno;
        unlink(tmp);
        return dt_errf(err, "cannot write %s: %s", p, strerror(e));
    }
    return 0;
}

