/* The training loop: data -> device -> forward -> loss -> backward -> SGD, with timing by
 * device events, evaluation, offset statistics, checkpoints and logs.
 *
 * Pipelining: the host enqueues step i, then waits for step i-1 to finish (its events, its
 * loss copied to pinned memory) and logs it. The GPU therefore always has the next step
 * queued while the host reads the previous one, and no step waits for a log line. The
 * batch of step i-1 is released to the loader at that point, once its copy has landed. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dt_alloc.h"
#include "dt_checkpoint.h"
#include "dt_dataset.h"
#include "dt_device.h"
#include "dt_file.h"
#include "dt_init.h"
#include "dt_layers.h"
#include "dt_loader.h"
#include "dt_ops.h"
#include "dt_optim.h"
#include "dt_resnet.h"
#include "dt_schedule.h"
#include "dt_timer.h"
#include "dt_trainer.h"
#ifdef DT_CUDA
#include "dt_cuda.h"
#endif

/* ---- small helpers ---- */

/* The log files, and the first write to them that failed (a full disk, a quota): the run
 * stops with that message rather than leaving cut or empty files behind a status of 0. */
typedef struct {
    FILE *log, *steps_csv, *epochs_csv;
    char log_path[600], steps_path[600], epochs_path[600];
    int tty, quiet;
    char failed[800]; /* "cannot write PATH: reason", empty while every write succeeded */
} outputs;

/* Flushes f (where buffered write errors surface) and records the first failure. */
static void out_check(outputs *o, FILE *f, const char *path) {
    if (!f || o->failed[0]) return;
    if (fflush(f) != 0 || ferror(f)) snprintf(o->failed, sizeof o->failed, "cannot write %.600s: %.150s", path, strerror(errno));
}

/* One line to the terminal (unless quiet; a warning to stderr through dt_warn) and the log. */
static void emit(outputs *o, int warning, const char *fmt, va_list ap) {
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
        out_check(o, o->log, o->log_path);
    }
}

static void say(outputs *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(outputs *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    emit(o, 0, fmt, ap);
    va_end(ap);
}

static void warn_logged(outputs *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn_logged(outputs *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    emit(o, 1, fmt, ap);
    va_end(ap);
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double percentile(double *v, int64_t n, double q) {
    if (n <= 0) return NAN;
    qsort(v, n, sizeof *v, cmp_d);
    int64_t i = (int64_t)(q * (n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

/* Per-step device timing: events at start, after forward, after backward, after the update. */
typedef struct {
#ifdef DT_CUDA
    cudaEvent_t ev[4];
#endif
    double host[4];
    float *loss_host; /* pinned */
    int gpu;
} step_marks;

static void marks_init(step_marks *m, int gpu) {
    memset(m, 0, sizeof *m);
    m->gpu = gpu;
#ifdef DT_CUDA
    if (gpu)
        for (int i = 0; i < 4; i++) DT_CHECK(cudaEventCreate(&m->ev[i]));
#endif
    m->loss_host = dt_host_alloc(sizeof(float), 1);
}

static void marks_free(step_marks *m) {
#ifdef DT_CUDA
    if (m->gpu)
        for (int i = 0; i < 4; i++) cudaEventDestroy(m->ev[i]);
#endif
    dt_host_free(m->loss_host, 1);
}

static void mark(step_marks *m, int i) {
#ifdef DT_CUDA
    if (m->gpu) {
        DT_CHECK(cudaEventRecord(m->ev[i], dt_stream()));
        return;
    }
#endif
    m->host[i] = dt_now_ms();
}

/* Waits for the step and returns its phase times t[0..2] and its period t[3]: from its start
 * to the start of the next step (`next`, already recorded), which includes any time the
 * device sat idle waiting for data; the last step of a run has no next and counts its own
 * phases. */
static void marks_read(step_marks *m, step_marks *next, float t[4]) {
#ifdef DT_CUDA
    if (m->gpu) {
        DT_CHECK(cudaEventSynchronize(m->ev[3]));
        for (int i = 0; i < 3; i++) DT_CHECK(cudaEventElapsedTime(&t[i], m->ev[i], m->ev[i + 1]));
        if (next) {
            DT_CHECK(cudaEventSynchronize(next->ev[0]));
            DT_CHECK(cudaEventElapsedTime(&t[3], m->ev[0], next->ev[0]));
        } else {
            t[3] = t[0] + t[1] + t[2];
        }
        return;
    }
#endif
    for (int i = 0; i < 3; i++) t[i] = (float)(m->host[i + 1] - m->host[i]);
    t[3] = next ? (float)(next->host[0] - m->host[0]) : t[0] + t[1] + t[2];
}

/* ---- the run ---- */

typedef struct {
    const dt_train_cfg *c;
    dt_dev dev;
    dt_resnet model;
    dt_sgd opt;
    dt_schedule sched;
    dt_dataset train_ds, val_ds;
    dt_loader *train_ld, *val_ld;
    int have_data;
    int classes;
    int64_t steps_per_epoch, total_steps;
    dt_tensor *syn_x, *syn_y; /* synthetic mode */
    float *label_host[2];      /* pinned float labels, double-buffered */
    outputs out;
} run_state;

static int setup_data(run_state *s, dt_err *err) {
    const dt_train_cfg *c = s->c;
    if (c->synthetic) {
        s->classes = c->classes;
        return 0;
    }
    if (dt_dataset_open(&s->train_ds, c->data, "train", NULL, err)) return -1;
    s->have_data = 1;
    if (dt_dataset_open(&s->val_ds, c->data, "val", &s->train_ds, err)) {
        dt_dataset_close(&s->train_ds);
        s->have_data = 0;
        return -1;
    }
    s->have_data = 2;
    s->classes = s->train_ds.num_classes;
    if (s->train_ds.count < c->batch)
        return dt_errf(err, "%s/train has %lld images, fewer than one batch of %d", c->data, (long long)s->train_ds.count,
                       c->batch);
    for (int train = 1; train >= 0; train--) { /* the train loader, then the val one */
        dt_loader_opts o = dt_loader_default_opts(train);
        o.batch = c->batch;
        o.image_size = c->image_size;
        o.workers = c->workers;
        o.seed = c->seed;
        o.cache = c->cache;
        o.crop_scale_min = c->crop_scale_min;
        o.max_pixels = c->max_image_pixels;
        dt_loader **l = train ? &s->train_ld : &s->val_ld;
        *l = dt_loader_new(train ? &s->train_ds : &s->val_ds, &o, err);
        if (!*l) return -1;
    }
    return 0;
}

static void model_cfg(const dt_train_cfg *c, int classes, dt_resnet_cfg *mc) {
    *mc = dt_resnet_cfg_default(classes);
    mc->deform_stages = (unsigned)dt_resnet_parse_stages(c->deform);
    mc->width = c->width;
    mc->deform_version = c->deform_version;
    mc->offset_groups = c->offset_groups;
    mc->offset_init_std = c->offset_init_std;
    mc->offset_lr_mult = c->offset_lr_mult;
    mc->deform_mode = (dt_deform_mode)dt_deform_mode_parse(c->deform_mode);
    dt_deform_knobs k = dt_deform_knobs_default();
    if (strcmp(c->tile, "auto")) sscanf(c->tile, "%dx%d", &k.tile_h, &k.tile_w);
    k.halo = c->halo;
    k.halo_refresh = c->halo_refresh;
    k.swizzle = c->swizzle;
    k.fuse_offset = c->fuse_offset;
    k.stage = c->stage;
    k.dx = dt_deform_dx_parse(c->dx);
    k.deterministic = c->deterministic;
    mc->knobs = k;
}

/* Tensors of a checkpoint: parameters, BN buffers, momentum buffers. */
static int ckpt_items(run_state *s, dt_ckpt_item *items, char (*names)[96], int max) {
    int n = 0;
    for (int i = 0; i < s->model.params.n && n < max; i++) {
        items[n].name = s->model.params.items[i]->name;
        items[n++].t = s->model.params.items[i];
    }
    dt_tensor *bufs[64];
    int nb = dt_resnet_buffers(&s->model, bufs, 64);
    for (int i = 0; i < nb && n < max; i++) {
        items[n].name = bufs[i]->name;
        items[n++].t = bufs[i];
    }
    for (int i = 0; i < s->model.params.n && n < max; i++)
        if (s->opt.bufs[i]) {
            snprintf(names[i], 96, "momentum/%s", s->model.params.items[i]->name);
            items[n].name = names[i];
            items[n++].t = s->opt.bufs[i];
        }
    return n;
}

static char *config_text(const dt_train_cfg *c) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) dt_fatal("open_memstream failed");
    dt_config_write(c, f);
    fclose(f);
    return text;
}

static int save_ckpt(run_state *s, const dt_ckpt_pos *pos, dt_err *err) {
    static dt_ckpt_item items[1024];
    static char names[512][96];
    int n = ckpt_items(s, items, names, 1024);
    char *text = config_text(s->c);
    int r = dt_checkpoint_save(s->c->checkpoint, text, pos, items, n, err);
    free(text);
    return r;
}

static void warn_changed(const char *key, const char *was, const char *now, void *ctx) {
    run_state *s = ctx;
    warn_logged(&s->out, "resume: %s = %s now, %s in the run that wrote %s: the resumed run differs from it", key, now,
                was, s->c->resume);
}

static int load_ckpt(run_state *s, dt_ckpt_pos *pos, dt_err *err) {
    const char *path = s->c->resume;
    dt_checkpoint ck;
    if (dt_checkpoint_read(path, &ck, err)) return -1;
    /* The checkpoint's run, as its config text says: every key that changes what is trained
     * and differs now is named (a resume is usually meant to continue the same run). */
    dt_train_cfg was;
    dt_config_defaults(&was);
    dt_err e;
    if (dt_config_parse(&was, ck.config_text, strlen(ck.config_text), path, &e))
        warn_logged(&s->out, "resume: cannot compare with the checkpoint's config (%s)", e.msg);
    else
        dt_config_diff(&was, s->c, warn_changed, s);
    int r = 0;
    int known = 0;
    for (int i = 0; i < s->model.params.n && !r; i++) {
        dt_tensor *p = s->model.params.items[i];
        r = dt_checkpoint_copy_to(&ck, p->name, p, path, err);
        known++;
        char mname[128];
        snprintf(mname, sizeof mname, "momentum/%s", p->name);
        if (!r && dt_checkpoint_find(&ck, mname) >= 0) {
            if (!s->opt.bufs[i]) s->opt.bufs[i] = dt_tensor_new_unscoped(p->ndim, p->shape, p->dev);
            r = dt_checkpoint_copy_to(&ck, mname, s->opt.bufs[i], path, err);
            known++;
        }
    }
    dt_tensor *bufs[64];
    int nb = dt_resnet_buffers(&s->model, bufs, 64);
    for (int i = 0; i < nb && !r; i++, known++) r = dt_checkpoint_copy_to(&ck, bufs[i]->name, bufs[i], path, err);
    if (!r && known != ck.n)
        r = dt_errf(err, "checkpoint %s does not match the model: it holds %d tensors, the model %d (another deform setting or "
                    "class count?)", path, ck.n, known);
    if (!r) {
        *pos = ck.pos;
        s->opt.steps = ck.pos.step;
    }
    dt_checkpoint_free(&ck);
    return r;
}

/* Evaluates on the val set; returns top-1/top-5 fractions and the mean loss. Collects the
 * offset statistics of every deformable layer on the first batch. -1 (with err set) when the
 * val loader fails: no image, or no image of a class, decodes. */
static int evaluate(run_state *s, double *top1, double *top5, double *loss, int stats, dt_err *err) {
    const dt_train_cfg *c = s->c;
    dt_set_grad_enabled(0);
    dt_loader_start_epoch(s->val_ld, 0);
    dt_batch b;
    double c1 = 0, c5 = 0, l = 0;
    int64_t n = 0, nbat = 0;
    int got;
    while ((got = dt_loader_next(s->val_ld, &b)) == 1) {
        if (c->max_val_batches && nbat >= c->max_val_batches) {
            dt_loader_release(s->val_ld, &b);
            break;
        }
        dt_scope_begin();
        for (int i = 0; stats && nbat == 0; i++) {
            dt_deform_conv *dl = dt_resnet_deform_layer(&s->model, i);
            if (!dl) break;
            dl->collect_stats = 1;
            dl->stats_halo = dl->cur_halo;
        }
        int64_t sx[4] = {b.n, 3, c->image_size, c->image_size}, sy[1] = {b.n};
        dt_tensor *x = dt_tensor_new(4, sx, s->dev), *y = dt_tensor_new(1, sy, s->dev);
        dt_tensor_upload(x, b.images);
        for (int i = 0; i < b.n; i++) s->label_host[0][i] = (float)b.labels[i];
        dt_tensor_upload(y, s->label_host[0]);
        dt_tensor *logits = dt_resnet18_forward(&s->model, x, 0);
        float cc[2];
        dt_topk_correct(logits, y, cc);
        l += dt_item(dt_softmax_cross_entropy(logits, y, 0.0f)) * b.n;
        c1 += cc[0];
        c5 += cc[1];
        n += b.n;
        nbat++;
        for (int i = 0;; i++) {
            dt_deform_conv *dl = dt_resnet_deform_layer(&s->model, i);
            if (!dl) break;
            dl->collect_stats = 0;
        }
        dt_scope_end();
        dt_loader_release(s->val_ld, &b);
    }
    dt_set_grad_enabled(1);
    *top1 = n ? c1 / n : NAN;
    *top5 = n ? c5 / n : NAN;
    *loss = n ? l / n : NAN;
    return got < 0 ? dt_errf(err, "%s", dt_loader_error(s->val_ld)) : 0;
}

static void log_offset_stats(run_state *s, int64_t epoch) {
    for (int i = 0;; i++) {
        dt_deform_conv *dl = dt_resnet_deform_layer(&s->model, i);
        if (!dl) break;
        if (!dl->stats_valid) continue;
        char buf[512];
        dt_offset_stats_format(&dl->stats, buf, sizeof buf);
        say(&s->out, "epoch %lld offsets %-18s %s (halo in use %d)", (long long)epoch, dl->name, buf, dl->cur_halo);
        dl->stats_valid = 0;
    }
}

static int open_outputs(run_state *s, dt_err *err) {
    const dt_train_cfg *c = s->c;
    outputs *o = &s->out;
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
    out_check(o, o->steps_csv, o->steps_path);
    out_check(o, o->epochs_csv, o->epochs_path);
    return o->failed[0] ? dt_errf(err, "%s", o->failed) : 0;
}

/* Closes the log files; a failure (the last buffered bytes not written) is recorded. */
static void close_outputs(run_state *s) {
    outputs *o = &s->out;
    FILE **f[3] = {&o->log, &o->steps_csv, &o->epochs_csv};
    const char *path[3] = {o->log_path, o->steps_path, o->epochs_path};
    for (int i = 0; i < 3; i++) {
        if (!*f[i]) continue;
        out_check(o, *f[i], path[i]);
        if (fclose(*f[i]) != 0 && !o->failed[0])
            snprintf(o->failed, sizeof o->failed, "cannot write %.600s: %.150s", path[i], strerror(errno));
        *f[i] = NULL;
    }
}

/* The machine-readable summary (read by bench/reproduce.sh), written whole or not at all. */
static int write_summary(const dt_train_cfg *c, const dt_train_result *res, dt_err *err) {
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

static void cleanup(run_state *s) {
    if (s->train_ld) dt_loader_free(s->train_ld);
    if (s->val_ld) dt_loader_free(s->val_ld);
    if (s->have_data >= 1) dt_dataset_close(&s->train_ds);
    if (s->have_data >= 2) dt_dataset_close(&s->val_ds);
    for (int i = 0; i < 2; i++) dt_host_free(s->label_host[i], 1);
    dt_tensor_free(s->syn_x);
    dt_tensor_free(s->syn_y);
    close_outputs(s);
}

void dt_train_result_free(dt_train_result *r) {
    free(r->losses);
    r->losses = NULL;
}

/* One pending (enqueued, not yet read) step. */
typedef struct {
    int active;
    int64_t step, epoch;
    float lr;
    int n;
    dt_batch batch;
    int has_batch;
    double wait_ms, host_start;
    step_marks m;
} pending;

int dt_train_run(const dt_train_cfg *c, dt_train_result *res, dt_err *err) {
    memset(res, 0, sizeof *res);
    res->val_top1 = res->val_top5 = -1;
    if (dt_config_check(c, err)) return 2;
    run_state st;
    memset(&st, 0, sizeof st);
    run_state *s = &st;
    s->c = c;
    s->dev = strcmp(c->device, "cuda") ? DT_CPU : DT_GPU;
    if (s->dev == DT_GPU) {
        if (!dt_built_with_cuda()) return dt_errf(err, "device=cuda but deftc was built with CUDA=0; use device=cpu"), 2;
        if (dt_gpu_count() == 0) return dt_errf(err, "device=cuda but no CUDA GPU is visible; use device=cpu"), 2;
        dt_gpu_init(0);
    }
    dt_precision prec;
    if (dt_precision_parse(c->precision, &prec)) return dt_errf(err, "precision=%s: expected fp32, tf32 or bf16", c->precision), 2;
    dt_set_precision(prec);
    dt_conv_set_col_budget((size_t)c->col_budget_mb << 20);
    dt_set_seed(c->seed);
    dt_init_reseed();
    /* Everything a run will write is checked before it trains: the log files, and the
     * checkpoint's folder (made if missing, stale temporaries of killed runs removed). */
    if (open_outputs(s, err) || (c->checkpoint[0] && dt_checkpoint_prepare(c->checkpoint, err)) || setup_data(s, err)) {
        cleanup(s);
        return 1;
    }
    char devs[256];
    dt_device_describe(devs, sizeof devs);
    say(&s->out, "deftc train: %s%s", devs, s->dev == DT_CPU ? " -- running on the CPU (slow; use small image_size)" : "");
    if (s->have_data)
        say(&s->out, "data %s: %d classes, %lld train / %lld val images", c->data, s->classes, (long long)s->train_ds.count,
            (long long)s->val_ds.count);
    dt_resnet_cfg mc;
    model_cfg(c, s->classes, &mc);
    char kerr[256];
    if (dt_deform_knobs_validate(&mc.knobs, kerr, sizeof kerr)) {
        cleanup(s);
        return dt_errf(err, "bad deft knob: %s", kerr), 2;
    }
    dt_resnet18_init(&s->model, &mc, s->dev);
    dt_sgd_opts so = {.momentum = c->momentum, .weight_decay = c->weight_decay, .nesterov = c->nesterov,
                      .decay_all = c->decay_bn_bias};
    dt_sgd_init(&s->opt, &s->model.params, &so);
    s->steps_per_epoch = c->synthetic ? (c->steps > 0 ? c->steps : 100) : dt_loader_batches(s->train_ld);
    s->total_steps = c->steps > 0 ? c->steps : (int64_t)c->epochs * s->steps_per_epoch;
    s->sched = (dt_schedule){.kind = (dt_sched_kind)dt_schedule_kind(c->schedule), .base_lr = c->lr, .min_lr = c->min_lr,
                             .gamma = c->lr_gamma, .warmup_start = c->warmup_start, .total_steps = s->total_steps,
                             .step_size = (int64_t)c->lr_step_epochs * s->steps_per_epoch, .warmup_steps = c->warmup};
    for (int i = 0; i < 2; i++) s->label_host[i] = dt_host_alloc((size_t)c->batch * sizeof(float), 1);
    say(&s->out, "model resnet18: %lld parameters, deform=%s (v%d, %s), precision %s, batch %d, %dx%d, %lld steps (%lld per epoch)",
        (long long)dt_params_numel(&s->model.params), c->deform, c->deform_version, c->deform_mode, c->precision, c->batch, c->image_size,
        c->image_size, (long long)s->total_steps, (long long)s->steps_per_epoch);
    dt_ckpt_pos pos = {0, 0, 0};
    if (c->resume[0]) {
        if (load_ckpt(s, &pos, err)) {
            dt_sgd_free(&s->opt);
            dt_resnet18_free(&s->model);
            cleanup(s);
            return 1;
        }
        say(&s->out, "resumed from %s at epoch %lld, batch %lld, step %lld", c->resume, (long long)pos.epoch,
            (long long)pos.batch, (long long)pos.step);
    }
    if (c->synthetic) {
        int64_t sx[4] = {c->batch, 3, c->image_size, c->image_size}, sy[1] = {c->batch};
        s->syn_x = dt_tensor_new_unscoped(4, sx, s->dev);
        s->syn_y = dt_tensor_new_unscoped(1, sy, s->dev);
        dt_init_normal(s->syn_x, 0.0f, 1.0f);
        dt_rng r;
        dt_rng_seed(&r, c->seed + 1);
        for (int i = 0; i < c->batch; i++) s->label_host[0][i] = (float)dt_rng_below(&r, (uint32_t)c->classes);
        dt_tensor_upload(s->syn_y, s->label_host[0]);
        say(&s->out, "synthetic data: one random batch on the %s (times pure compute)", dt_dev_name(s->dev));
    }

    int64_t cap = s->total_steps - pos.step + 1;
    res->losses = dt_xcalloc(cap > 0 ? cap : 1, sizeof(float));
    double *t_step = dt_xcalloc(cap > 0 ? cap : 1, sizeof(double));
    double *t_fwd = dt_xcalloc(cap > 0 ? cap : 1, sizeof(double)), *t_bwd = dt_xcalloc(cap > 0 ? cap : 1, sizeof(double));
    double *t_opt = dt_xcalloc(cap > 0 ? cap : 1, sizeof(double)), *t_wait = dt_xcalloc(cap > 0 ? cap : 1, sizeof(double));
    int64_t ntimed = 0;
    pending pq[2];
    memset(pq, 0, sizeof pq);
    marks_init(&pq[0].m, s->dev == DT_GPU);
    marks_init(&pq[1].m, s->dev == DT_GPU);
    int cur = 0;
    int rc = 0;
    int64_t step = pos.step;
    int64_t stop = c->stop_at > 0 && c->stop_at < s->total_steps ? c->stop_at : s->total_steps;
    dt_gpu_reset_peak();
    double run_t0 = dt_now_ms();
    double epoch_loss = 0;
    int64_t epoch_steps = 0;

    /* Reads back a finished step: loss, times; logs it; releases its batch. */
#define FINISH(P, NEXT)                                                                                    \
    do {                                                                                                   \
        pending *p_ = (P);                                                                                 \
        if (!p_->active) break;                                                                            \
        float tt[4];                                                                                       \
        marks_read(&p_->m, (NEXT), tt);                                                                    \
        double step_ms = tt[3];                                                                            \
        float loss = *p_->m.loss_host;                                                                     \
        int64_t k = p_->step - pos.step;                                                                   \
        if (k >= 0 && k < cap) res->losses[k] = loss;                                                      \
        if (res->steps == 0) res->first_loss = loss;                                                       \
        res->last_loss = loss;                                                                             \
        res->steps++;                                                                                      \
        epoch_loss += loss;                                                                                \
        epoch_steps++;                                                                                     \
        if (ntimed < cap) { /* every step; the warm-up is cut when the statistics are taken */             \
            t_step[ntimed] = step_ms;                                                                      \
            t_fwd[ntimed] = tt[0];                                                                         \
            t_bwd[ntimed] = tt[1];                                                                         \
            t_opt[ntimed] = tt[2];                                                                         \
            t_wait[ntimed++] = p_->wait_ms;                                                                \
        }                                                                                                  \
        if (s->out.steps_csv)                                                                              \
            fprintf(s->out.steps_csv, "%lld,%lld,%.6f,%.6g,%.3f,%.3f,%.3f,%.3f,%.3f,%.1f\n",               \
                    (long long)p_->step + 1, (long long)p_->epoch, loss, p_->lr, tt[0], tt[1], tt[2], step_ms, \
                    p_->wait_ms, p_->n / step_ms * 1e3);                                                   \
        if (!isfinite(loss)) {                                                                             \
            rc = 1; dt_errf(err, "the loss is %f at step %lld: training diverged (lower lr?)", loss,     \
                         (long long)p_->step + 1);                                                         \
        }                                                                                                  \
        if ((p_->step + 1) % c->log_every == 0 || p_->step + 1 == stop)                                    \
            out_check(&s->out, s->out.steps_csv, s->out.steps_path), say(&s->out, "step %6lld/%lld epoch %lld  loss %.4f  lr %.4g  fwd %.2f bwd %.2f opt %.2f ms  step %.2f ms  data %.2f ms  %.0f img/s", \
                (long long)p_->step + 1, (long long)s->total_steps, (long long)p_->epoch, loss, p_->lr, tt[0],      \
                tt[1], tt[2], step_ms, p_->wait_ms, p_->n / step_ms * 1e3);                                \
        else if (s->out.tty)                                                                               \
            printf("\r\033[Kstep %lld/%lld loss %.4f %.2f ms/step", (long long)p_->step + 1,               \
                   (long long)s->total_steps, loss, step_ms), fflush(stdout);                              \
        if (s->out.failed[0] && !rc) rc = 1, dt_errf(err, "%s", s->out.failed);                           \
        if (p_->has_batch) dt_loader_release(s->train_ld, &p_->batch);                                     \
        p_->has_batch = 0;                                                                                 \
        p_->active = 0;                                                                                    \
    } while (0)

    for (int64_t epoch = pos.epoch; step < stop && !rc; epoch++) {
        double ep_t0 = dt_now_ms();
        epoch_loss = 0;
        epoch_steps = 0;
        if (s->train_ld) dt_loader_start_epoch(s->train_ld, (int)epoch);
        int64_t b_in_epoch = 0;
        if (epoch == pos.epoch && pos.batch > 0) { /* resume inside an epoch: skip what was done */
            dt_batch skip;
            for (; b_in_epoch < pos.batch; b_in_epoch++) {
                if (!s->train_ld) continue;
                if (dt_loader_next(s->train_ld, &skip) != 1) break;
                dt_loader_release(s->train_ld, &skip);
            }
        }
        for (; b_in_epoch < s->steps_per_epoch && step < stop && !rc; b_in_epoch++) {
            pending *p = &pq[cur];
            p->step = step;
            p->epoch = epoch;
            p->active = 1;
            double w0 = dt_now_ms();
            dt_tensor *x, *y;
            dt_scope_begin();
            int got_batch = 1;
            if (c->synthetic) {
                x = s->syn_x;
                y = s->syn_y;
                p->n = c->batch;
                p->wait_ms = 0;
            } else {
                int got = dt_loader_next(s->train_ld, &p->batch);
                if (got != 1) {
                    dt_scope_end();
                    p->active = 0;
                    if (got < 0) rc = 1, dt_errf(err, "%s", dt_loader_error(s->train_ld));
                    got_batch = 0;
                    break;
                }
                p->has_batch = 1;
                p->wait_ms = dt_now_ms() - w0;
                mark(&p->m, 0);
                p->n = p->batch.n;
                int64_t sx[4] = {p->n, 3, c->image_size, c->image_size}, sy[1] = {p->n};
                x = dt_tensor_new(4, sx, s->dev);
                y = dt_tensor_new(1, sy, s->dev);
                float *lh = s->label_host[cur];
                for (int i = 0; i < p->n; i++) lh[i] = (float)p->batch.labels[i];
                size_t xb = (size_t)x->numel * sizeof(float);
                if (s->dev == DT_GPU) {
                    dt_copy_h2d_async(x->data, p->batch.images, xb);
                    dt_copy_h2d_async(y->data, lh, (size_t)p->n * sizeof(float));
                } else {
                    memcpy(x->data, p->batch.images, xb);
                    memcpy(y->data, lh, (size_t)p->n * sizeof(float));
                }
            }
            (void)got_batch;
            if (c->synthetic) mark(&p->m, 0);
            p->lr = dt_schedule_lr(&s->sched, step);
            dt_params_zero_grad(&s->model.params);
            dt_tensor *logits = dt_resnet18_forward(&s->model, x, 1);
            dt_tensor *loss = dt_softmax_cross_entropy(logits, y, c->label_smoothing);
            loss->retain = 1;
            mark(&p->m, 1);
            dt_backward(loss);
            mark(&p->m, 2);
            dt_sgd_step(&s->opt, p->lr);
            mark(&p->m, 3);
            if (s->dev == DT_GPU) {
#ifdef DT_CUDA
                DT_CHECK(cudaMemcpyAsync(p->m.loss_host, loss->data, sizeof(float), cudaMemcpyDeviceToHost, dt_stream()));
#endif
            } else {
                *p->m.loss_host = loss->data[0];
            }
            dt_scope_end();
            step++;
            cur ^= 1;
            FINISH(&pq[cur], &pq[cur ^ 1].m); /* the previous step; the one just queued is next */
        }
        FINISH(&pq[cur ^ 1], NULL);
        FINISH(&pq[cur], NULL);
        if (rc) break;
        int epoch_done = b_in_epoch >= s->steps_per_epoch;
        double ep_s = (dt_now_ms() - ep_t0) / 1e3;
        double v1 = NAN, v5 = NAN, vl = NAN;
        int last = step >= s->total_steps;
        /* Evaluate every eval_every epochs, and at the end of the run even mid-epoch (a
         * steps-limited run); not when stop_at interrupts it (it will resume). */
        if (s->val_ld && ((epoch_done && c->eval_every && (epoch + 1) % c->eval_every == 0) || last)) {
            if (evaluate(s, &v1, &v5, &vl, 1, err)) {
                rc = 1;
                break;
            }
            res->val_top1 = v1;
            res->val_top5 = v5;
            say(&s->out, "epoch %lld done in %.1f s: train loss %.4f, val loss %.4f, val top-1 %.2f%%, top-5 %.2f%%",
                (long long)epoch, ep_s, epoch_steps ? epoch_loss / epoch_steps : NAN, vl, 100 * v1, 100 * v5);
            log_offset_stats(s, epoch);
            if (s->train_ld) {
                dt_loader_stats ls = dt_loader_epoch_stats(s->train_ld);
                char lb[512];
                dt_loader_stats_str(&ls, lb, sizeof lb);
                say(&s->out, "loader: %s", lb);
            }
        }
        if (s->out.epochs_csv)
            fprintf(s->out.epochs_csv, "%lld,%lld,%.6f,%.6f,%.6f,%.6f,%.3f,%lld\n", (long long)epoch, (long long)epoch_steps,
                    epoch_steps ? epoch_loss / epoch_steps : NAN, vl, v1, v5, ep_s,
                    s->train_ld ? (long long)dt_loader_epoch_stats(s->train_ld).skipped : 0LL);
        out_check(&s->out, s->out.epochs_csv, s->out.epochs_path);
        out_check(&s->out, s->out.steps_csv, s->out.steps_path);
        if (s->out.failed[0]) {
            rc = 1;
            dt_errf(err, "%s", s->out.failed);
            break;
        }
        if (c->checkpoint[0]) {
            dt_ckpt_pos np = {epoch_done ? epoch + 1 : epoch, epoch_done ? 0 : b_in_epoch, step};
            if (save_ckpt(s, &np, err)) {
                rc = 1;
                break;
            }
            say(&s->out, "checkpoint %s (epoch %lld, batch %lld, step %lld)", c->checkpoint, (long long)np.epoch,
                (long long)np.batch, (long long)np.step);
        }
        if (!epoch_done) break; /* stopped inside the epoch */
    }
    res->global_step = step;
    if (!rc) {
        dt_mem_stats ms = dt_gpu_mem_stats();
        res->peak_mem = ms.peak_in_use;
        char peak[48] = "n/a (CPU run)";
        if (s->dev == DT_GPU) snprintf(peak, sizeof peak, "%.2f GiB", res->peak_mem / 1073741824.0);
        /* Statistics after the warm-up steps; a run shorter than the warm-up uses all of them. */
        int64_t w = ntimed > c->timing_warmup ? c->timing_warmup : 0, n = ntimed - w;
        if (!w && ntimed) say(&s->out, "note: only %lld steps, fewer than timing_warmup=%d: times include the warm-up",
                              (long long)ntimed, c->timing_warmup);
        res->median_step_ms = percentile(t_step + w, n, 0.5);
        res->p90_step_ms = percentile(t_step + w, n, 0.9);
        res->median_fwd_ms = percentile(t_fwd + w, n, 0.5);
        res->median_bwd_ms = percentile(t_bwd + w, n, 0.5);
        res->median_opt_ms = percentile(t_opt + w, n, 0.5);
        res->img_per_s = c->batch / res->median_step_ms * 1e3;
        double wsum = 0;
        for (int64_t i = w; i < ntimed; i++) wsum += t_wait[i];
        res->data_wait_ms = n ? wsum / n : 0;
        say(&s->out,
            "summary: %lld steps in %.1f s; after %d warm-up steps: step median %.2f ms (p90 %.2f) = fwd %.2f + bwd %.2f + opt "
            "%.2f; %.0f img/s; data wait %.2f ms/step; peak GPU memory %s",
            (long long)res->steps, (dt_now_ms() - run_t0) / 1e3, (int)w, res->median_step_ms, res->p90_step_ms,
            res->median_fwd_ms, res->median_bwd_ms, res->median_opt_ms, res->img_per_s, res->data_wait_ms, peak);
        if (res->val_top1 >= 0) say(&s->out, "final val top-1 %.2f%%, top-5 %.2f%%", 100 * res->val_top1, 100 * res->val_top5);
        else say(&s->out, "no evaluation (%s)", c->synthetic ? "synthetic data" : "stopped by stop_at; resume to continue");
        if (c->log[0] && write_summary(c, res, err)) rc = 1; /* machine-readable, for bench/reproduce.sh */
    }
#undef FINISH
    marks_free(&pq[0].m);
    marks_free(&pq[1].m);
    free(t_step);
    free(t_fwd);
    free(t_bwd);
    free(t_opt);
    free(t_wait);
    dt_sgd_free(&s->opt);
    dt_resnet18_free(&s->model);
    cleanup(s);
    if (!rc && s->out.failed[0]) rc = 1, dt_errf(err, "%s", s->out.failed); /* the last bytes of a log */
    return rc;
}

int dt_train_cli(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fprintf(argc < 2 ? stderr : stdout, "usage: build/train CONFIG.cfg [key=value ...]\n       build/train --keys\n");
        if (argc >= 2) dt_config_help(stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--keys")) {
        dt_config_help(stdout);
        return 0;
    }
    dt_train_cfg c;
    dt_config_defaults(&c);
    dt_err err;
    if (dt_config_load(&c, argv[1], &err)) {
        fprintf(stderr, "train: error: %s\n", err.msg);
        return 2;
    }
    for (int i = 2; i < argc; i++)
        if (dt_config_set(&c, argv[i], &err)) {
            fprintf(stderr, "train: error: %s\n", err.msg);
            return 2;
        }
    dt_train_result r;
    int rc = dt_train_run(&c, &r, &err);
    if (rc) fprintf(stderr, "train: error: %s\n", err.msg);
    dt_train_result_free(&r);
    return rc;
}
