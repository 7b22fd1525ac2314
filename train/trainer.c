/* dt_train_run: a training run. Checks the configuration, locks and opens the outputs, opens
 * the datasets, reads and checks the checkpoint to resume from, and runs one replica per device
 * (replica.c): with one device on the calling thread, with several on a thread each, joined by
 * a dt_dist group (NCCL on GPUs, shared memory on the CPU). The replicas' first failure ends the
 * run on all of them (dt_dist_abort) and is the run's error. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/dt_alloc.h"
#include "core/dt_autograd.h"
#include "core/dt_device.h"
#include "ops/dt_layers.h"
#include "ops/linear/gemm.h"
#include "train/atomic_file.h"
#include "core/dt_file.h"
#include "train/dt_weights.h"
#include "train/train_run.h"
#include "train/path_check.h"

static int open_data(train_run *run, dt_err *err) {
    const dt_train_cfg *c = run->c;
    if (c->synthetic) {
        run->classes = c->classes;
        return 0;
    }
    if (dt_dataset_open(&run->train_ds, c->data, "train", NULL, err)) return -1;
    run->have_data = 1;
    if (dt_dataset_open(&run->val_ds, c->data, "val", &run->train_ds, err)) return -1;
    run->have_data = 2;
    run->classes = run->train_ds.num_classes;
    int64_t global = (int64_t)c->batch * run->world;
    if (run->train_ds.count < global) {
        if (run->world > 1)
            return dt_errf(err, "%s/train has %lld images, fewer than one global batch of %lld (batch %d x %d replicas)",
                           c->data, (long long)run->train_ds.count, (long long)global, c->batch, run->world);
        return dt_errf(err, "%s/train has %lld images, fewer than one batch of %d", c->data,
                       (long long)run->train_ds.count, c->batch);
    }
    return 0;
}

static void close_data(train_run *run) {
    if (run->have_data >= 1) dt_dataset_close(&run->train_ds);
    if (run->have_data >= 2) dt_dataset_close(&run->val_ds);
    run->have_data = 0;
}

/* The keys that make the model (which parameters it has, and their shapes): a checkpoint's
 * state fits only the model of the run that wrote it. */
static const char *const MODEL_KEYS[] = {"model", "width", "deform", "deform_version", "offset_groups"};

/* What a resume changes: a changed model key is refused (`model` collects them all), any other
 * run key is warned. */
typedef struct {
    train_run *run;
    char model[1024];
} resume_changes;

static void note_changed(const char *key, const char *was, const char *now, void *ctx) {
    resume_changes *ch = ctx;
    for (size_t i = 0; i < sizeof MODEL_KEYS / sizeof *MODEL_KEYS; i++)
        if (!strcmp(key, MODEL_KEYS[i])) {
            size_t o = strlen(ch->model);
            snprintf(ch->model + o, sizeof ch->model - o, "%s%s = %s now, %s", o ? "; " : "", key, now, was);
            return;
        }
    train_warn(&ch->run->out, "resume: %s = %s now, %s in the run that wrote %s: the resumed run differs from it", key,
               now, was, ch->run->c->resume);
}

/* Reads the checkpoint (its tensors are copied into each replica's model by replica_setup),
 * checks its position against the run that wrote it and this one, names every setting that
 * differs, and maps the position onto this run's global batch. */
static int read_resume(train_run *run, const dt_ckpt_run *now, dt_err *err) {
    const dt_train_cfg *c = run->c;
    if (dt_checkpoint_read(c->resume, &run->ck, err)) return -1;
    run->have_ck = 1;
    dt_ckpt_resume *rs = &run->resume;
    /* a run of several processes stores one process's gpus=: the others are assumed alike */
    int processes = run->world / run->local;
    if (dt_checkpoint_plan_resume(&run->ck, now, processes, run->have_data ? run->train_ds.count : 0, c->resume, rs, err))
        return -1;
    if (!rs->have_config) {
        train_warn(&run->out, "resume: cannot compare with the checkpoint's config (%s)", rs->config_error);
    } else {
        resume_changes ch = {.run = run};
        dt_config_diff(&rs->config, c, note_changed, &ch);
        if (ch.model[0])
            return dt_errf(err, "resume: %s in the run that wrote %s: a checkpoint resumes only the model that wrote it "
                           "(the same model, width, deform, deform_version and offset_groups)", ch.model, c->resume);
    }
    run->pos = rs->pos;
    if (rs->was.global_batch != now->global_batch)
        train_warn(&run->out, "resume: the global batch was %lld images, now %lld: batch %lld of epoch %lld becomes batch "
                   "%lld of epoch %lld, step %lld%s", (long long)rs->was.global_batch, (long long)now->global_batch,
                   (long long)run->ck.pos.batch, (long long)run->ck.pos.epoch, (long long)run->pos.batch,
                   (long long)run->pos.epoch, (long long)run->pos.step,
                   rs->exact ? "" : " (the images done were not whole batches: rounded to a batch)");
    return 0;
}

/* Where this run's checkpoints go: checkpoint=, else PREFIX.ckpt beside the logs of log=PREFIX
 * (the log prefix names the run), else train-PID.ckpt in the working folder (a name no other
 * run has). Written at an interrupt or stop_at, checkpoint_every / _minutes, and with
 * checkpoint= at every epoch's end. */
void train_checkpoint_path(const dt_train_cfg *c, char *out, size_t cap) {
    if (c->checkpoint[0]) snprintf(out, cap, "%s", c->checkpoint);
    else if (c->log[0]) snprintf(out, cap, "%s.ckpt", c->log);
    else snprintf(out, cap, "train-%ld.ckpt", (long)getpid());
}

/* The outputs' locks: the log files (they cover PREFIX.ckpt too), checkpoint= and export=, each
 * taken before anything of it is written. The checkpoint is prepared first (dt_checkpoint_prepare:
 * its folder made, its path refused when a rename must not replace it), which touches only
 * temporaries of dead processes and this one's. A lock left by a killed run is taken over and
 * named in a warning once the log is open (stale[]). */
static int lock_outputs(train_run *run, long stale[3], dt_err *err) {
    const dt_train_cfg *c = run->c;
    char what[700];
    dt_err e;
    if (c->log[0]) {
        if (dt_make_parent_dirs(c->log, &e)) return dt_errf(err, "cannot write the log files %s.*: %s", c->log, e.msg);
        snprintf(what, sizeof what, "log files %s.*", c->log);
        if (train_lock_take(&run->log_lock, c->log, what, &stale[0], err)) return -1;
    }
    if (c->checkpoint[0]) {
        char target[PATH_MAX + 1]; /* a symlink's target is what is written: its name is locked */
        if (dt_checkpoint_prepare(c->checkpoint, err) ||
            dt_atomic_target(c->checkpoint, "checkpoint", target, sizeof target, err))
            return -1;
        snprintf(what, sizeof what, "checkpoint %s", c->checkpoint);
        if (train_lock_take(&run->ckpt_lock, target, what, &stale[1], err)) return -1;
    }
    if (c->export_path[0]) {
        char target[PATH_MAX + 1];
        if (dt_weights_export_prepare(c->export_path, err) ||
            dt_atomic_target(c->export_path, "export", target, sizeof target, err))
            return -1;
        snprintf(what, sizeof what, "export %s", c->export_path);
        if (train_lock_take(&run->export_lock, target, what, &stale[2], err)) return -1;
    }
    return 0;
}

/* Several processes (several hosts): each runs build/train with its own gpus= and these
 * variables, set by a launcher (docs/training.md, "Several GPUs"):
 *   DT_DIST_WORLD  replicas in the whole run
 *   DT_DIST_RANK   global rank of this process's first replica
 *   DT_DIST_FILE   rendezvous file on a filesystem all processes see (NCCL's unique id), or
 *   NCCL_COMM_ID   host:port where rank 0's process serves the rendezvous over TCP */
static int read_dist_env(train_run *run, dt_err *err) {
    const char *w = getenv("DT_DIST_WORLD"), *r = getenv("DT_DIST_RANK");
    run->first_rank = 0;
    if (!w || !*w) {
        run->world = run->local;
        return 0;
    }
    char *end;
    long wv = strtol(w, &end, 10), rv = r && *r ? strtol(r, &end, 10) : -1;
    if (wv < 1 || wv > 4096) return dt_errf(err, "DT_DIST_WORLD=%s: expected the number of replicas of the run", w);
    if (rv < 0 || rv + run->local > wv)
        return dt_errf(err, "DT_DIST_RANK=%s: expected this process's first rank, 0..%ld (DT_DIST_WORLD=%ld, %d local "
                       "replicas)", r ? r : "(unset)", wv - run->local, wv, run->local);
    const char *f = getenv("DT_DIST_FILE"), *id = getenv("NCCL_COMM_ID");
    if (wv > run->local && (!f || !*f) && (!id || !*id))
        return dt_errf(err, "DT_DIST_WORLD=%ld with %d replicas here: set DT_DIST_FILE to a rendezvous file every process "
                       "sees, or NCCL_COMM_ID=host:port of rank 0's host", wv, run->local);
    run->world = (int)wv;
    run->first_rank = (int)rv;
    return 0;
}

typedef struct {
    replica r;
    pthread_t th;
    int started, rc;
} replica_slot;

static void *replica_thread(void *arg) {
    replica_slot *s = arg;
    s->rc = replica_main(&s->r);
    replica_teardown(&s->r);
    if (s->started) { /* a thread of its own: its tape and scope lists go with it */
        dt_tape_release_thread();
        dt_scope_release_thread();
    }
    return NULL;
}

/* Runs the replicas; returns the run's status with err set from the root failure. */
static int run_replicas(train_run *run, dt_err *err) {
    int n = run->local;
    replica_slot *slots = dt_xcalloc(n, sizeof *slots);
    for (int i = 0; i < n; i++) {
        slots[i].r.run = run;
        slots[i].r.rank = run->first_rank + i;
    }
    int rc = 0;
    if (n == 1 && !run->group) {
        replica_thread(&slots[0]);
    } else {
        for (int i = 0; i < n; i++) {
            slots[i].started = 1;
            int e = pthread_create(&slots[i].th, NULL, replica_thread, &slots[i]);
            if (e) {
                slots[i].started = 0;
                dt_dist_abort(run->group, "cannot start the thread of replica %d: %s", i, strerror(e));
                break;
            }
        }
        for (int i = 0; i < n; i++)
            if (slots[i].started) pthread_join(slots[i].th, NULL);
    }
    for (int i = 0; i < n; i++)
        if (slots[i].rc > rc) rc = slots[i].rc;
    if (run->group && dt_dist_aborted(run->group)) {
        if (!rc) rc = 1;
        dt_errf(err, "%s", dt_dist_abort_reason(run->group));
    } else if (rc) {
        for (int i = 0; i < n; i++)
            if (slots[i].rc) {
                *err = slots[i].r.err;
                break;
            }
    }
    free(slots);
    return rc;
}

/* Where a run without a GPU should go: a config sized for the CPU. device=cpu alone trains the
 * GPU config's model on the CPU (make run's: full width at 18.7 s a step, ~10 hours). */
#define NO_GPU_HINT \
    "train on the CPU with a config made for it, configs/sample_cpu.cfg (make run " \
    "RUN_CONFIG=configs/sample_cpu.cfg); device=cpu alone keeps this config's model and image size, hours on a CPU"

/* Makes every GPU's context from this thread (the replicas' threads then only select theirs)
 * and checks that each exists. */
static int init_gpus(train_run *run, dt_err *err) {
    if (!dt_built_with_cuda()) return dt_errf(err, "device=cuda but deftc was built with CUDA=0: " NO_GPU_HINT);
    int n = dt_gpu_count();
    if (n == 0) return dt_errf(err, "device=cuda but no CUDA GPU is visible: " NO_GPU_HINT);
    for (int i = 0; i < run->local; i++)
        if (run->gpus[i] >= n)
            return dt_errf(err, "gpus=%s asks for GPU %d, but %d GPU%s visible (ids 0..%d)", run->c->gpus, run->gpus[i], n,
                           n == 1 ? " is" : "s are", n - 1);
    for (int i = run->local - 1; i >= 0; i--) dt_gpu_use(run->gpus[i]); /* ends on the first replica's */
    return 0;
}

/* The end of a run that finished: where each output is (build/train adds what to run next). */
static void say_outputs(train_run *run) {
    const dt_train_cfg *c = run->c;
    train_output *o = &run->out;
    if (c->log[0])
        train_say(o, "outputs: %s (this log), %s and %s (per step, per epoch), %.560s_summary.txt", o->log_path,
                  o->steps_path, o->epochs_path, c->log);
    if (run->res->checkpoint[0]) train_say(o, "checkpoint: %s", run->res->checkpoint);
    if (c->export_path[0]) train_say(o, "weights for PyTorch: %s (docs/weights.md)", c->export_path);
}

/* ---- dt_train_run's steps, in order; each returns 0, or the run's status with err set ---- */

/* The settings that need no file: the config, the replicas and the devices, the precision and
 * layout against the deformable mode; the GPUs initialized, the column budget and the seed set. */
static int check_settings(train_run *run, dt_err *err) {
    const dt_train_cfg *c = run->c;
    if (dt_config_check(c, err)) return 2;
    run->dev = strcmp(c->device, "cuda") ? DT_CPU : DT_GPU;
    run->local = dt_config_gpus(c, run->gpus, err);
    if (run->local < 0 || read_dist_env(run, err)) return 2;
    if (run->world > 1 && !dt_dist_available(run->dev))
        return dt_errf(err, "gpus=%s: deftc was built without NCCL, so it trains on one GPU only; install NCCL (or set "
                       "NCCL_HOME) and rebuild, or use gpus=1", c->gpus), 2;
    dt_precision prec;
    if (dt_precision_parse(c->precision, &prec)) return dt_errf(err, "precision=%s: expected fp32, tf32 or bf16", c->precision), 2;
    dt_resnet_model model;
    if (dt_resnet_model_parse(c->model, &model, err)) return 2;
    dt_layout layout = dt_precision_layout(prec);
    if (strcmp(c->layout, "auto") && dt_layout_parse(c->layout, &layout))
        return dt_errf(err, "layout=%s: expected auto, nchw or nhwc", c->layout), 2;
    if (prec == DT_PREC_BF16 && layout != DT_NHWC)
        return dt_errf(err, "precision=bf16 runs channels last: layout=nchw is fp32/tf32 only (use layout=auto or nhwc)"), 2;
    if (strcmp(c->deform, "none") && !strcmp(c->deform_mode, "unfused") && (prec == DT_PREC_BF16 || layout == DT_NHWC))
        return dt_errf(err, "deform_mode=unfused is the fp32 NCHW baseline: it takes precision fp32 or tf32 with layout "
                       "nchw (deform_mode=deft runs bf16 and channels last)"), 2;
    if (run->dev == DT_GPU && init_gpus(run, err)) return 2;
    dt_conv_set_col_budget((size_t)c->col_budget_mb << 20);
    dt_set_seed(c->seed); /* each replica reseeds the RNGs from it before it builds its model */
    return 0;
}

/* Everything a run will write is checked before it trains: the outputs are locked against a
 * second run, the log files opened, and the checkpoint's folder made if missing and proven
 * writable (stale temporaries of killed runs removed). Only the writer (replica 0's process). */
static int prepare_outputs(train_run *run, int writer, dt_err *err) {
    const dt_train_cfg *c = run->c;
    train_checkpoint_path(c, run->ckpt_path, sizeof run->ckpt_path);
    run->ckpt_writer = dt_ckpt_writer_new();
    long stale[3] = {0, 0, 0};
    if (!writer) {
        run->out.quiet = 1;
        return 0;
    }
    if (dt_run_paths_check(c, run->ckpt_path, c->config_path, err) || train_output_refuse_rerun(c, run->ckpt_path, err) ||
        lock_outputs(run, stale, err) || train_output_open(&run->out, c, err))
        return 1;
    for (int i = 0; i < 3; i++)
        if (stale[i])
            train_warn(&run->out, "took over the lock file %s of PID %ld, a run that is gone (it was killed or crashed)",
                       i == 2 ? run->export_lock.path : i ? run->ckpt_lock.path : run->log_lock.path, stale[i]);
    /* a derived path is written at an interrupt anyway; prepared when something asks for it */
    if (!c->checkpoint[0] && (c->log[0] || c->stop_at || c->checkpoint_every || c->checkpoint_minutes) &&
        dt_checkpoint_prepare(run->ckpt_path, err))
        return 1;
    return 0;
}

/* The model's knobs checked, the run's length from its data, and what it is said on the
 * terminal and in the log. */
static int describe_run(train_run *run, dt_ckpt_run *now, dt_err *err) {
    const dt_train_cfg *c = run->c;
    dt_resnet_cfg mc;
    train_model_cfg(c, 2, &mc);
    char kerr[256];
    if (dt_deform_knobs_validate(&mc.knobs, kerr, sizeof kerr)) /* once, with a clear message */
        return dt_errf(err, "bad deft knob: %s", kerr), 2;
    char devs[256];
    dt_device_describe(devs, sizeof devs);
    if (run->dev == DT_CPU) /* which matrix kernel runs says what speed to expect (gemm_cpu.c) */
        train_say(&run->out, "deftc train: %s, %s matrix kernel -- running on the CPU (slow; use small image_size)",
                  devs, dt_gemm_cpu_isa());
    else
        train_say(&run->out, "deftc train: %s", devs);
    if (run->have_data)
        train_say(&run->out, "data %s: %d classes, %lld train / %lld val images", c->data, run->classes,
                  (long long)run->train_ds.count, (long long)run->val_ds.count);
    if (dt_ckpt_run_of(c, run->world, run->have_data ? run->train_ds.count : 0, now, err)) return 2;
    run->steps_per_epoch = now->steps_per_epoch;
    run->total_steps = now->total_steps;
    if (run->world > 1) {
        char list[400] = "";
        for (int i = 0, o = 0; i < run->local && o < (int)sizeof list; i++)
            o += snprintf(list + o, sizeof list - o, "%s%d", i ? "," : "", run->gpus[i]);
        train_say(&run->out, "data parallel: %d replicas (%s %s here%s) over %s, global batch %lld = %d x %d, batch norm %s, "
                  "gradient buckets of %d MiB", run->world, run->dev == DT_GPU ? "GPUs" : "CPU threads", list,
                  run->world > run->local ? ", the rest in other processes" : "", dt_dist_backend(run->dev),
                  (long long)now->global_batch, c->batch, run->world, c->sync_bn ? "synchronized (sync_bn=1)" : "per replica",
                  c->bucket_mb);
    }
    train_say(&run->out, "model %s: deform=%s (v%d, %s), precision %s, batch %d%s, %dx%d, %lld steps (%lld per epoch)",
              c->model, c->deform, c->deform_version, c->deform_mode, c->precision, c->batch,
              run->world > 1 ? " per replica" : "", c->image_size, c->image_size, (long long)run->total_steps,
              (long long)run->steps_per_epoch);
    run->stop = c->stop_at > 0 && c->stop_at < run->total_steps ? c->stop_at : run->total_steps;
    return 0;
}

/* resume=: the checkpoint read and checked against the run. A run already at its stop starts
 * nothing (*nothing = 1; export= of a finished one writes its weights). */
static int resume_from(train_run *run, const dt_ckpt_run *now, int writer, int *nothing, dt_err *err) {
    const dt_train_cfg *c = run->c;
    if (read_resume(run, now, err)) return 1;
    run->res->global_step = run->pos.step;
    if (run->pos.step < run->stop) {
        train_say(&run->out, "resumed from %s at epoch %lld, batch %lld, step %lld", c->resume, (long long)run->pos.epoch,
                  (long long)run->pos.batch, (long long)run->pos.step);
        return 0;
    }
    *nothing = 1; /* a finished run (or one past stop_at): no table is cut */
    if (run->pos.step == run->total_steps)
        train_say(&run->out, "nothing to do: the run finished at step %lld (%s); raise steps= or epochs= to train "
                  "it further", (long long)run->pos.step, c->resume);
    else
        train_say(&run->out, "nothing to do: %s is at step %lld, and stop_at = %lld; raise stop_at (or set it to 0) "
                  "to continue", c->resume, (long long)run->pos.step, (long long)c->stop_at);
    if (!writer || !c->export_path[0]) return 0;
    if (run->pos.step != run->total_steps) { /* its checkpoint holds the weights of its end only when finished */
        train_say(&run->out, "export=%s is not written: the run has not reached its end (build/train --export %s %s "
                  "writes the checkpoint's weights as they are)", c->export_path, c->resume, c->export_path);
        return 0;
    }
    if (train_export_checkpoint(c->resume, c->export_path, err)) return 1;
    train_say(&run->out, "export: the weights of %s (step %lld) to %s", c->resume, (long long)run->pos.step, c->export_path);
    return 0;
}

/* The replicas' group, the training itself, and an interrupt's status and message. */
static int train_replicas(train_run *run, int writer, dt_err *err) {
    const dt_train_cfg *c = run->c;
    if (run->world > 1) {
        dt_dist_opts o = {.dev = run->dev, .local = run->local, .gpus = run->gpus, .world = run->world,
                          .first_rank = run->first_rank, .rendezvous = getenv("DT_DIST_FILE")};
        run->group = dt_dist_group_new(&o, err);
        if (!run->group) return 1;
    }
    if (c->synthetic)
        train_say(&run->out, "synthetic data: one random batch on the %s (times pure compute)", dt_dev_name(run->dev));
    int rc = run_replicas(run, err);
    if (rc || !run->interrupted) return rc;
    /* a stop request of this process, or of another process of the run (then SIGTERM's status) */
    int sig = train_interrupt_pending();
    if (!sig) sig = SIGTERM;
    run->res->interrupted = sig;
    if (writer)
        train_say(&run->out, "interrupted by %s after step %lld: the run is in %s; resume=%s continues it",
                  sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal", (long long)run->res->global_step,
                  run->ckpt_path, run->ckpt_path);
    return 128 + sig;
}

/* The summary of a run that started (machine-readable, for bench/reproduce.sh), what it wrote,
 * and everything released; returns the run's final status. */
static int end_run(train_run *run, int rc, int started, int writer, dt_err *err) {
    const dt_train_cfg *c = run->c;
    dt_train_result *res = run->res;
    if (started && writer && c->log[0]) {
        const char *status = rc == 0 ? (res->global_step < run->total_steps ? "stopped" : "finished")
                             : res->interrupted ? "interrupted"
                                                : "failed";
        char where[700];
        dt_err e;
        if (train_write_summary(c, res, status, rc && !res->interrupted ? err->msg : NULL, where, sizeof where, &e)) {
            if (!rc) rc = 1, *err = e;
        } else if (strcmp(status, "finished")) {
            train_say(&run->out, "summary: %s (status %s)", where, status);
        }
    }
    if (!rc && writer && started) say_outputs(run);
    dt_ckpt_writer_free(run->ckpt_writer); /* a write still running (a failed run's) finishes first */
    if (run->have_ck) dt_checkpoint_free(&run->ck);
    if (run->have_init) dt_safetensors_free(&run->init);
    dt_dist_group_free(run->group);
    close_data(run);
    train_output_close(&run->out);
    train_lock_release(&run->export_lock);
    train_lock_release(&run->ckpt_lock);
    train_lock_release(&run->log_lock);
    pthread_mutex_destroy(&run->init_mu);
    train_interrupt_clear(); /* a stop request is for the run in progress */
    if (!rc && run->out.failed[0]) rc = 1, dt_errf(err, "%s", run->out.failed); /* the last bytes of a log */
    return rc;
}

int dt_train_run(const dt_train_cfg *c, dt_train_result *res, dt_err *err) {
    memset(res, 0, sizeof *res);
    res->val_top1 = res->val_top5 = -1;
    train_run run;
    memset(&run, 0, sizeof run);
    run.c = c;
    run.res = res;
    int rc = check_settings(&run, err);
    if (rc) return rc;
    pthread_mutex_init(&run.init_mu, NULL);
    const int writer = run.first_rank == 0; /* the process of replica 0 writes; the others are silent */
    int started = 0, nothing = 0;
    dt_ckpt_run now;
    if ((rc = prepare_outputs(&run, writer, err)) || (rc = open_data(&run, err) ? 1 : 0) ||
        (rc = describe_run(&run, &now, err)))
        return end_run(&run, rc, started, writer, err);
    if (c->resume[0] && ((rc = resume_from(&run, &now, writer, &nothing, err)) || nothing))
        return end_run(&run, rc, started, writer, err);
    /* init_from: read once, checked against each replica's model as it loads it */
    if (c->init_from[0] && c->resume[0]) {
        train_say(&run.out, "init_from=%s is not loaded: the run resumes from %s, whose weights continue it", c->init_from,
                  c->resume);
    } else if (c->init_from[0]) {
        if (dt_safetensors_read(c->init_from, &run.init, err)) return end_run(&run, 1, started, writer, err);
        run.have_init = 1;
    }
    if (writer && train_output_open_tables(&run.out, c, c->resume[0] ? &run.ck.pos : NULL, err))
        return end_run(&run, 1, started, writer, err);
    started = 1; /* from here a run that ends early says so in its summary */
    rc = train_replicas(&run, writer, err);
    return end_run(&run, rc, started, writer, err);
}

void dt_train_result_free(dt_train_result *r) {
    free(r->losses);
    r->losses = NULL;
}
