/* A run's outputs never destroy its inputs (issue 39): every output path is checked against
 * every input and every other output before anything is written - the same path, a symlink,
 * a hard link, a file not made yet whose path resolves to another -, build/train --export
 * never writes over its checkpoint, and it checks a checkpoint's tensor table, its model's
 * size and its position before it builds the model the checkpoint names. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data_testutil.h"
#include "train/dt_checkpoint.h"
#include "train/dt_config.h"
#include "core/dt_file.h"
#include "dt_test.h"
#include "core/dt_timer.h"
#include "train/dt_trainer.h"
#include "train/dt_weights.h"
#include "train/model_tensors.h"
#include "train/path_check.h"
#include "train/train_cli.h"
#include "train/train_run.h"

/* A width-0.25 plain ResNet-18 on a 2-class shapes set at 32 px: a step takes milliseconds. */
static void small_cfg(dt_train_cfg *c, const char *log) {
    dt_config_defaults(c);
    snprintf(c->data, sizeof c->data, "%s", dt_test_shapes("shapes", 2, 8, 4, 40));
    strcpy(c->device, "cpu");
    c->image_size = 32;
    c->width = 0.25f;
    c->batch = 8;
    c->workers = 1;
    c->steps = 2;
    c->warmup = 0;
    c->progress = 0;
    c->quiet = 1;
    c->max_val_batches = 1;
    c->seed = 3;
    if (log) snprintf(c->log, sizeof c->log, "%s", dt_test_path(log));
}

/* The checkpoint of a finished 2-step run, at tmpdir/rel. */
static const char *small_checkpoint(const char *rel) {
    dt_train_cfg c;
    small_cfg(&c, NULL);
    snprintf(c.checkpoint, sizeof c.checkpoint, "%s", dt_test_path(rel));
    dt_train_result r;
    dt_err err;
    dt_set_quiet(1);
    int rc = dt_train_run(&c, &r, &err);
    EXPECT_MSG(rc == 0, "%s", err.msg);
    dt_train_result_free(&r);
    static char path[8][600];
    static int k;
    char *p = path[k++ % 8];
    snprintf(p, 600, "%s", c.checkpoint);
    return p;
}

static int same_bytes(const char *a, const char *b) {
    dt_scratch x = {0}, y = {0};
    size_t nx = 0, ny = 0;
    dt_err err;
    int ok = !dt_file_read(a, "a", (size_t)1 << 30, &x, &nx, &err) && !dt_file_read(b, "b", (size_t)1 << 30, &y, &ny, &err) &&
             nx == ny && !memcmp(x.p, y.p, nx);
    dt_scratch_free(&x);
    dt_scratch_free(&y);
    return ok;
}

static void copy_file(const char *from, const char *to) {
    dt_scratch x = {0};
    size_t n = 0;
    dt_err err;
    EXPECT(dt_file_read(from, "a", (size_t)1 << 30, &x, &n, &err) == 0);
    FILE *f = fopen(to, "wb");
    EXPECT(f && fwrite(x.p, 1, n, f) == n);
    if (f) fclose(f);
    dt_scratch_free(&x);
}

DT_TEST(paths_same_file_through_links_and_unmade_paths) {
    dt_test_mkdirs("d/sub");
    dt_test_touch("d/a");
    dt_test_touch("d/b");
    const char *a = dt_test_path("d/a");
    EXPECT(dt_paths_same(a, a));
    EXPECT(!dt_paths_same(a, dt_test_path("d/b")));
    EXPECT(symlink(a, dt_test_path("d/link")) == 0);
    EXPECT(dt_paths_same(a, dt_test_path("d/link")));
    EXPECT(link(a, dt_test_path("d/hard")) == 0);
    EXPECT(dt_paths_same(dt_test_path("d/hard"), a));
    EXPECT(dt_paths_same(dt_test_path("d/sub/../a"), a));
    EXPECT(dt_paths_same(dt_test_path("d/./sub/../a"), dt_test_path("d/link")));
    /* not made yet: the same place by another name (a linked folder, a folder still to make) */
    EXPECT(symlink(dt_test_path("d/sub"), dt_test_path("d/sublink")) == 0);
    EXPECT(dt_paths_same(dt_test_path("d/sub/new.ckpt"), dt_test_path("d/sublink/new.ckpt")));
    EXPECT(dt_paths_same(dt_test_path("d/new/x/../y.ckpt"), dt_test_path("d/new/y.ckpt")));
    EXPECT(!dt_paths_same(dt_test_path("d/sub/new.ckpt"), dt_test_path("d/sub/other.ckpt")));
    /* a dangling link names the file it would make */
    EXPECT(symlink(dt_test_path("d/sub/target"), dt_test_path("d/dangling")) == 0);
    EXPECT(dt_paths_same(dt_test_path("d/dangling"), dt_test_path("d/sublink/target")));
    char cwd[4096];
    EXPECT(getcwd(cwd, sizeof cwd) != NULL);
    EXPECT(chdir(dt_test_path("d")) == 0);
    EXPECT(dt_paths_same("a", dt_test_path("d/hard")) && dt_paths_same("sub/../new", dt_test_path("d/new")));
    EXPECT(chdir(cwd) == 0);
}

/* build/train --export CKPT OUT in a child: the program's exit status. */
static void cli_export(void *arg) { exit(dt_train_cli(4, arg)); }

DT_TEST(export_never_writes_over_its_checkpoint) {
    const char *ck = small_checkpoint("x.ckpt");
    char keep[700];
    snprintf(keep, sizeof keep, "%s.orig", ck);
    copy_file(ck, keep);
    EXPECT(symlink(ck, dt_test_path("link.safetensors")) == 0);
    EXPECT(link(ck, dt_test_path("hard.safetensors")) == 0);
    const char *outs[] = {ck, dt_test_path("link.safetensors"), dt_test_path("hard.safetensors"),
                          dt_test_path("sub/../x.ckpt")};
    dt_test_mkdirs("sub");
    dt_err err;
    for (int i = 0; i < 4; i++) {
        EXPECT_MSG(dt_weights_export_checkpoint(ck, outs[i], &err) != 0, "--export %s %s was written", ck, outs[i]);
        EXPECT_MSG(strstr(err.msg, "same file") && strstr(err.msg, outs[i]) && strstr(err.msg, ck), "%s", err.msg);
        EXPECT_MSG(same_bytes(ck, keep), "--export %s %s changed the checkpoint", ck, outs[i]);
    }
    /* and through build/train's command line: status 1, the checkpoint whole */
    char *argv[4] = {"train", "--export", (char *)ck, (char *)ck};
    EXPECT_DEATH(cli_export, argv, "same file");
    EXPECT(same_bytes(ck, keep));
    /* an export elsewhere works, and is locked while it is written (no lock file left) */
    EXPECT_MSG(dt_weights_export_checkpoint(ck, dt_test_path("ok.safetensors"), &err) == 0, "%s", err.msg);
    EXPECT(access(dt_test_path("ok.safetensors.lock"), F_OK) != 0);
}

/* A run whose output is one of its inputs or another output: refused at once (status 1), with
 * both paths named, nothing written. */
static void expect_refused(dt_train_cfg *c, const char *a, const char *b, const char *guard) {
    char keep[700];
    int have = guard && access(guard, F_OK) == 0;
    if (have) {
        snprintf(keep, sizeof keep, "%s.orig", guard);
        copy_file(guard, keep);
    }
    dt_train_result r;
    dt_err err;
    double t0 = dt_now_ms();
    int rc = dt_train_run(c, &r, &err);
    EXPECT_MSG(rc == 1, "rc %d: %s", rc, err.msg);
    EXPECT_MSG(strstr(err.msg, "same file") && strstr(err.msg, a) && strstr(err.msg, b), "%s", err.msg);
    EXPECT_EQ_INT(r.steps, 0);
    EXPECT_MSG(dt_now_ms() - t0 < 5e3, "refused only after %.0f ms", dt_now_ms() - t0);
    if (have) EXPECT_MSG(same_bytes(guard, keep), "the refused run changed %s", guard);
    dt_train_result_free(&r);
}

DT_TEST(run_outputs_that_are_inputs_are_refused) {
    dt_set_quiet(1);
    dt_train_cfg c;
    /* checkpoint=X export=X: the end's export would replace the checkpoint just written */
    small_cfg(&c, NULL);
    snprintf(c.checkpoint, sizeof c.checkpoint, "%s", dt_test_path("cx.ckpt"));
    snprintf(c.export_path, sizeof c.export_path, "%s", dt_test_path("cx.ckpt"));
    expect_refused(&c, "checkpoint=", "export=", NULL);
    EXPECT(access(dt_test_path("cx.ckpt"), F_OK) != 0);
    /* resume=R export=R, by the same name and through a link to it */
    const char *r = small_checkpoint("r.ckpt");
    EXPECT(symlink(r, dt_test_path("r_link.safetensors")) == 0);
    const char *exports[2] = {r, dt_test_path("r_link.safetensors")};
    for (int i = 0; i < 2; i++) {
        small_cfg(&c, NULL);
        c.steps = 4;
        snprintf(c.resume, sizeof c.resume, "%s", r);
        snprintf(c.export_path, sizeof c.export_path, "%s", exports[i]);
        expect_refused(&c, "resume=", "export=", r);
    }
    /* the finished run's export= (nothing to train: the export of the checkpoint) too */
    small_cfg(&c, NULL);
    snprintf(c.resume, sizeof c.resume, "%s", r);
    snprintf(c.export_path, sizeof c.export_path, "%s", r);
    expect_refused(&c, "resume=", "export=", r);
    /* a hard link to the checkpoint as the log prefix's summary */
    small_cfg(&c, "h");
    EXPECT(link(r, dt_test_path("h_summary.txt")) == 0);
    snprintf(c.resume, sizeof c.resume, "%s", r);
    c.steps = 4;
    expect_refused(&c, "h_summary.txt", "resume=", r);
    /* init_from= as the export; the checkpoint as the log; the config file as the export */
    small_cfg(&c, NULL);
    EXPECT_MSG(dt_weights_export_checkpoint(r, dt_test_path("w.safetensors"), &(dt_err){0}) == 0, "export failed");
    snprintf(c.init_from, sizeof c.init_from, "%s", dt_test_path("w.safetensors"));
    snprintf(c.export_path, sizeof c.export_path, "%s", dt_test_path("w.safetensors"));
    expect_refused(&c, "init_from=", "export=", dt_test_path("w.safetensors"));
    small_cfg(&c, "p");
    snprintf(c.checkpoint, sizeof c.checkpoint, "%s", dt_test_path("p.log"));
    expect_refused(&c, "checkpoint=", "p.log", NULL);
    small_cfg(&c, NULL);
    dt_test_write_file("run.cfg", "device = cpu\n", 13);
    snprintf(c.config_path, sizeof c.config_path, "%s", dt_test_path("run.cfg"));
    snprintf(c.export_path, sizeof c.export_path, "%s", dt_test_path("sub/../run.cfg"));
    dt_test_mkdirs("sub");
    expect_refused(&c, "config file", "export=", dt_test_path("run.cfg"));
    /* an output inside the dataset would be read as one of its images */
    small_cfg(&c, NULL);
    snprintf(c.export_path, sizeof c.export_path, "%.400s/train/x.safetensors", c.data);
    dt_train_result res;
    dt_err err;
    EXPECT(dt_train_run(&c, &res, &err) == 1);
    EXPECT_MSG(strstr(err.msg, "inside the dataset"), "%s", err.msg);
    dt_train_result_free(&res);
    /* resuming into the checkpoint it resumes from is how a run continues: allowed */
    small_cfg(&c, NULL);
    c.steps = 3;
    snprintf(c.resume, sizeof c.resume, "%s", r);
    snprintf(c.checkpoint, sizeof c.checkpoint, "%s", r);
    EXPECT_MSG(dt_train_run(&c, &res, &err) == 0, "%s", err.msg);
    EXPECT_EQ_INT(res.steps, 1);
    dt_train_result_free(&res);
}

/* ---- --export checks before it allocates ---- */

static uint64_t fnv1a(const unsigned char *p, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

/* Rewrites checkpoint `path` with position pos[3], its checksum fixed (a crafted file). */
static void set_position(const char *path, const int64_t *pos) {
    size_t n;
    dt_scratch x = {0};
    dt_err err;
    EXPECT(dt_file_read(path, "c", (size_t)1 << 30, &x, &n, &err) == 0);
    unsigned char *b = x.p;
    uint32_t cl;
    memcpy(&cl, b + 28, 4);
    memcpy(b + 32 + cl, pos, 24);
    uint64_t sum = fnv1a(b + 28, n - 28);
    memcpy(b + 20, &sum, 8);
    FILE *f = fopen(path, "wb");
    EXPECT(f && fwrite(b, 1, n, f) == n);
    if (f) fclose(f);
    dt_scratch_free(&x);
}

DT_TEST(export_checks_a_crafted_checkpoint_before_building_its_model) {
    /* 4 KB whose stored config names resnet101 at width 4, every stage deformable: building it
     * would take gigabytes and many seconds */
    dt_train_cfg c;
    small_cfg(&c, NULL);
    strcpy(c.model, "resnet101");
    c.width = 4;
    strcpy(c.deform, "all");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    dt_config_write(&c, f);
    fclose(f);
    int64_t s10[1] = {10};
    dt_tensor *fcb = dt_tensor_new_unscoped(1, s10, DT_CPU, DT_F32, DT_NCHW);
    dt_tensor_fill(fcb, 0.0f);
    dt_ckpt_item items[1] = {{"fc.bias", fcb}};
    dt_ckpt_pos pos = {0, 0, 0};
    dt_err err;
    const char *ck = dt_test_path("huge.ckpt");
    EXPECT_MSG(dt_checkpoint_save(ck, text, &pos, items, 1, &err) == 0, "%s", err.msg);
    free(text);
    dt_tensor_free(fcb);
    double t0 = dt_now_ms();
    EXPECT(dt_weights_export_checkpoint(ck, dt_test_path("huge.safetensors"), &err) != 0);
    double ms = dt_now_ms() - t0;
    EXPECT_MSG(strstr(err.msg, "lacks 'conv1.weight'") && strstr(err.msg, "stored config"), "%s", err.msg);
    EXPECT_MSG(ms < 1000, "refused after %.0f ms: the model was built first", ms);
    EXPECT(access(dt_test_path("huge.safetensors"), F_OK) != 0);
    /* a real checkpoint with a position no run writes: refused as a resume refuses it, no 2^62
     * num_batches_tracked written */
    const char *real = small_checkpoint("real.ckpt");
    const int64_t q = (int64_t)1 << 62;
    const int64_t bad[3][3] = {{0, 0, q}, {q / 2, 0, q}, {1, 7, 9}};
    for (int i = 0; i < 3; i++) {
        set_position(real, bad[i]);
        EXPECT_MSG(dt_weights_export_checkpoint(real, dt_test_path("real.safetensors"), &err) != 0,
                   "position %d exported", i);
        EXPECT_MSG(strstr(err.msg, "position") || strstr(err.msg, "past the end"), "%s", err.msg);
    }
    EXPECT(access(dt_test_path("real.safetensors"), F_OK) != 0);
    const int64_t fine[3] = {1, 0, 2}; /* where the run ended */
    set_position(real, fine);
    EXPECT_MSG(dt_weights_export_checkpoint(real, dt_test_path("real.safetensors"), &err) == 0, "%s", err.msg);
}

/* The tensors model_tensors.h lists are those dt_resnet_init makes, name for name, shape for
 * shape, in order. */
typedef struct {
    dt_resnet *m;
    int i, bad;
    char first[200];
} walk_check;

static int check_one(const char *name, int ndim, const int64_t *shape, void *ctx) {
    walk_check *w = ctx;
    dt_resnet *m = w->m;
    int n = m->params.n + m->n_buffers;
    const dt_tensor *t = w->i < m->params.n ? m->params.items[w->i]->t : w->i < n ? m->buffers[w->i - m->params.n] : NULL;
    w->i++;
    if (!t || strcmp(t->name, name) || t->ndim != ndim || memcmp(t->shape, shape, (size_t)ndim * sizeof *shape)) {
        if (!w->bad++) snprintf(w->first, sizeof w->first, "#%d %s (model: %s)", w->i - 1, name, t ? t->name : "none");
    }
    return 0;
}

DT_TEST(model_tensors_are_the_models) {
    const char *models[] = {"resnet18", "resnet34", "resnet50", "resnet101", "resnext50_32x4d", "mobilenet_v2"};
    const char *deform[] = {"none", "all", "2,3,4"};
    for (int mi = 0; mi < 6; mi++)
        for (int d = 0; d < (mi < 4 ? 3 : 1); d++) { /* resnext50_32x4d and mobilenet_v2 have no deformable placement */
            dt_train_cfg c;
            dt_config_defaults(&c);
            strcpy(c.model, models[mi]);
            strcpy(c.deform, deform[d]);
            c.width = mi == 4 ? 0.25f : 0.125f; /* resnext50_32x4d: 32 groups of at least 1 channel */
            c.deform_version = 1 + (d == 2);
            c.offset_groups = d == 2 ? 2 : 1;
            dt_resnet_cfg mc;
            train_model_cfg(&c, 7, &mc);
            mc.precision = DT_PREC_FP32;
            mc.layout = DT_NCHW;
            dt_resnet m;
            dt_resnet_init(&m, &mc, DT_CPU);
            walk_check w = {&m, 0, 0, ""};
            int64_t elements = 0, want = 0;
            dt_err err;
            EXPECT(train_model_tensors(&mc, check_one, &w, &elements, &err) == 0);
            for (int i = 0; i < m.params.n + m.n_buffers; i++)
                want += (i < m.params.n ? m.params.items[i]->t : m.buffers[i - m.params.n])->numel;
            EXPECT_MSG(!w.bad && w.i == m.params.n + m.n_buffers && elements == want,
                       "%s deform=%s: %d differ (first %s), %d listed, %d in the model", models[mi], deform[d], w.bad,
                       w.first, w.i, m.params.n + m.n_buffers);
            dt_resnet_free(&m);
        }
}

/* ---- no run silently destroys an earlier run's results ---- */

static int file_has(const char *path, const char *needle) {
    dt_scratch x = {0};
    size_t n = 0;
    dt_err err;
    int ok = !dt_file_read(path, "f", (size_t)1 << 26, &x, &n, &err);
    int has = ok && n && memmem(x.p, n, needle, strlen(needle)) != NULL;
    dt_scratch_free(&x);
    return has;
}

DT_TEST(rerun_on_a_finished_prefix_is_refused_unless_overwrite) {
    dt_set_quiet(1);
    dt_train_cfg c;
    dt_train_result r;
    dt_err err;
    small_cfg(&c, "run");
    snprintf(c.checkpoint, sizeof c.checkpoint, "%s", dt_test_path("run.ckpt"));
    EXPECT_MSG(dt_train_run(&c, &r, &err) == 0, "%s", err.msg);
    dt_train_result_free(&r);
    const char *files[] = {"run.log", "run_steps.csv", "run_epochs.csv", "run_summary.txt", "run.ckpt"};
    char keep[5][700];
    for (int i = 0; i < 5; i++) {
        snprintf(keep[i], sizeof keep[i], "%s.orig", dt_test_path(files[i]));
        copy_file(dt_test_path(files[i]), keep[i]);
    }
    EXPECT(file_has(dt_test_path("run_summary.txt"), "status finished\n"));
    /* the end says where every output is and what to run next */
    const char *log = dt_test_path("run.log");
    EXPECT_MSG(file_has(log, "outputs: ") && file_has(log, "run_summary.txt") && file_has(log, "checkpoint: "),
               "the end of the run does not say where its outputs are");
    /* the same command again, and without its checkpoint=: refused, naming the files, resume=
     * and overwrite=1; nothing changed */
    small_cfg(&c, "run");
    snprintf(c.checkpoint, sizeof c.checkpoint, "%s", dt_test_path("run.ckpt"));
    EXPECT_EQ_INT(dt_train_run(&c, &r, &err), 1);
    EXPECT_MSG(strstr(err.msg, "holds an earlier run's results (finished after 2 steps") && strstr(err.msg, "run.log") &&
               strstr(err.msg, "resume=") && strstr(err.msg, "run.ckpt continues that run") && strstr(err.msg, "overwrite=1"),
               "%s", err.msg);
    EXPECT_EQ_INT(r.steps, 0);
    dt_train_result_free(&r);
    for (int i = 0; i < 5; i++) EXPECT_MSG(same_bytes(dt_test_path(files[i]), keep[i]), "the refused run changed %s", files[i]);
    /* overwrite=1, with a run that fails before it trains (no dataset): nothing is touched */
    small_cfg(&c, "run");
    c.overwrite = 1;
    snprintf(c.data, sizeof c.data, "%s", dt_test_path("no_such_data"));
    EXPECT_EQ_INT(dt_train_run(&c, &r, &err), 1);
    dt_train_result_free(&r);
    for (int i = 0; i < 5; i++) EXPECT_MSG(same_bytes(dt_test_path(files[i]), keep[i]), "the failed run changed %s", files[i]);
    /* overwrite=1 replaces them */
    small_cfg(&c, "run");
    c.overwrite = 1;
    c.steps = 1;
    EXPECT_MSG(dt_train_run(&c, &r, &err) == 0, "%s", err.msg);
    EXPECT_EQ_INT(r.steps, 1);
    dt_train_result_free(&r);
    EXPECT(file_has(dt_test_path("run_summary.txt"), "status finished\nsteps 1\n"));
    /* an existing checkpoint= or export= of another run: refused the same way */
    small_cfg(&c, NULL);
    snprintf(c.checkpoint, sizeof c.checkpoint, "%s", dt_test_path("run.ckpt"));
    EXPECT_EQ_INT(dt_train_run(&c, &r, &err), 1);
    EXPECT_MSG(strstr(err.msg, "holds an earlier run's checkpoint") && strstr(err.msg, "overwrite=1"), "%s", err.msg);
    dt_train_result_free(&r);
    small_cfg(&c, NULL);
    snprintf(c.export_path, sizeof c.export_path, "%s", dt_test_path("run_steps.csv"));
    EXPECT_EQ_INT(dt_train_run(&c, &r, &err), 1);
    EXPECT_MSG(strstr(err.msg, "export=") && strstr(err.msg, "overwrite=1"), "%s", err.msg);
    dt_train_result_free(&r);
    /* a run that never started leaves no empty log */
    small_cfg(&c, "never");
    snprintf(c.data, sizeof c.data, "%s", dt_test_path("no_such_data"));
    EXPECT_EQ_INT(dt_train_run(&c, &r, &err), 1);
    dt_train_result_free(&r);
    EXPECT_MSG(access(dt_test_path("never.log"), F_OK) != 0, "a run that never started wrote never.log");
    EXPECT(access(dt_test_path("never_steps.csv"), F_OK) != 0 && access(dt_test_path("never_summary.txt"), F_OK) != 0);
}

DT_TEST(interrupted_and_failed_runs_say_so_in_their_summary) {
    dt_set_quiet(1);
    dt_train_cfg c;
    dt_train_result r;
    dt_err err;
    /* a fresh run stopped by a signal: its summary says interrupted */
    small_cfg(&c, "i");
    c.steps = 50;
    dt_train_interrupt(SIGINT); /* pending: the run stops after its first step or two */
    EXPECT_EQ_INT(dt_train_run(&c, &r, &err), 128 + SIGINT);
    dt_train_result_free(&r);
    EXPECT_MSG(file_has(dt_test_path("i_summary.txt"), "status interrupted\n"), "no interrupted summary");
    /* a finished run, then a resumed longer one interrupted: the finished run's summary stays,
     * the interrupted one's goes beside it */
    small_cfg(&c, "f");
    snprintf(c.checkpoint, sizeof c.checkpoint, "%s", dt_test_path("f.ckpt"));
    EXPECT_MSG(dt_train_run(&c, &r, &err) == 0, "%s", err.msg);
    dt_train_result_free(&r);
    char keep[700];
    snprintf(keep, sizeof keep, "%s.orig", dt_test_path("f_summary.txt"));
    copy_file(dt_test_path("f_summary.txt"), keep);
    small_cfg(&c, "f");
    c.steps = 50;
    snprintf(c.resume, sizeof c.resume, "%s", dt_test_path("f.ckpt"));
    dt_train_interrupt(SIGINT);
    EXPECT_EQ_INT(dt_train_run(&c, &r, &err), 128 + SIGINT);
    dt_train_result_free(&r);
    EXPECT_MSG(same_bytes(dt_test_path("f_summary.txt"), keep), "the interrupted run replaced the finished run's summary");
    EXPECT_MSG(file_has(dt_test_path("f_summary_interrupted.txt"), "status interrupted\n"), "no f_summary_interrupted.txt");
    EXPECT(file_has(dt_test_path("f.log"), "f_summary_interrupted.txt (status interrupted)"));
    /* a run that fails while it trains (diverged): status failed, with the error */
    small_cfg(&c, "d");
    c.lr = 1e6f;
    c.steps = 40;
    c.warmup = 0;
    int rc = dt_train_run(&c, &r, &err);
    dt_train_result_free(&r);
    EXPECT_EQ_INT(rc, 1);
    EXPECT_MSG(file_has(dt_test_path("d_summary.txt"), "status failed\nerror ") &&
               file_has(dt_test_path("d_summary.txt"), "diverged"), "no failed summary: %s", err.msg);
}

DT_TEST(resume_says_plainly_what_its_tables_keep) {
    /* a run that ends inside epoch 0 has that epoch's row; resumed there, the row goes: said
     * so, not as "keeps its 0 rows up to epoch -1; 1 rows after it go" */
    dt_set_quiet(1);
    dt_train_cfg c;
    dt_train_result r;
    dt_err err;
    small_cfg(&c, "t");
    c.steps = 1;
    snprintf(c.checkpoint, sizeof c.checkpoint, "%s", dt_test_path("t.ckpt"));
    EXPECT_MSG(dt_train_run(&c, &r, &err) == 0, "%s", err.msg);
    dt_train_result_free(&r);
    small_cfg(&c, "t");
    c.steps = 2;
    snprintf(c.resume, sizeof c.resume, "%s", dt_test_path("t.ckpt"));
    EXPECT_MSG(dt_train_run(&c, &r, &err) == 0, "%s", err.msg);
    dt_train_result_free(&r);
    const char *log = dt_test_path("t.log");
    EXPECT_MSG(file_has(log, "t_epochs.csv: its 1 row goes (the checkpoint is before its first epoch"), "no plain resume line");
    EXPECT_MSG(!file_has(log, "0 rows") && !file_has(log, "epoch -1") && !file_has(log, "1 rows"), "an odd resume line");
    /* the log lines carry the elapsed time and what is left */
    EXPECT_MSG(file_has(log, "elapsed "), "no elapsed time on the step lines");
}

/* build/train CFG KEY=VALUE... in a child (the test's dataset), its exit status the program's. */
static void cli_run(void *arg) {
    char **argv = arg;
    int argc = 0;
    while (argv[argc]) argc++;
    exit(dt_train_cli(argc, argv));
}

DT_TEST(a_finished_run_says_what_to_run_next) {
    dt_train_cfg c;
    small_cfg(&c, "n");
    char cfg[2000];
    int len = snprintf(cfg, sizeof cfg,
                       "data = %s\ndevice = cpu\nimage_size = 32\nwidth = 0.25\nbatch = 8\nworkers = 1\nsteps = 2\n"
                       "progress = 0\nmax_val_batches = 1\nlog = %s\ncheckpoint = %s.ckpt\n",
                       c.data, c.log, c.log);
    dt_test_write_file("n.cfg", cfg, (size_t)len);
    char path[700], want[2000];
    snprintf(path, sizeof path, "%s", dt_test_path("n.cfg"));
    char *argv[] = {"train", path, "seed=5", NULL};
    /* the command that continues it keeps the command line's keys, with resume= and the length */
    snprintf(want, sizeof want, "train %s seed=5 resume=%s.ckpt steps=4", path, c.log);
    EXPECT_OUTPUT(cli_run, argv, want);
}

/* The val loader's warnings name the epoch evaluated (they said "epoch 0" every time). */
static void run_two_epochs_with_a_bad_val_image(void *arg) {
    (void)arg;
    dt_train_cfg c;
    small_cfg(&c, NULL);
    c.quiet = 0;
    c.steps = 4; /* 2 epochs of 2 steps, each evaluated */
    c.max_val_batches = 0;
    dt_train_result r;
    dt_err err;
    int rc = dt_train_run(&c, &r, &err);
    if (rc) printf("%s\n", err.msg);
    exit(rc);
}

DT_TEST(val_warnings_name_the_epoch_evaluated) {
    const char *data = dt_test_shapes("shapes", 2, 8, 4, 40);
    char rel[700];
    snprintf(rel, sizeof rel, "shapes/val/00_circle/00_circle_bad.jpg");
    dt_test_write_file(rel, "\xff\xd8not a jpeg", 12);
    char want[900];
    snprintf(want, sizeof want, "epoch 1 of %s/val: 1 images did not decode", data);
    EXPECT_OUTPUT(run_two_epochs_with_a_bad_val_image, NULL, want);
}
