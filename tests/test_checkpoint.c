/* Checkpoints as untrusted input: crafted files (a tensor count of 0xFFFFFFFF, lengths far
 * past the end, element counts that overflow, every one-bit flip of a real checkpoint) are
 * "corrupt checkpoint" errors, never a huge allocation or a read outside the file (run under
 * `make test SAN=1` to have ASan watch); the start-up checks of a checkpoint path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train/dt_checkpoint.h"
#include "tests/dt_test.h"

/* ---- building crafted files ---- */

typedef struct {
    unsigned char b[4096];
    size_t n;
} bytes;

static void add(bytes *x, const void *p, size_t n) {
    memcpy(x->b + x->n, p, n);
    x->n += n;
}
static void add_u32(bytes *x, uint32_t v) { add(x, &v, 4); }
static void add_i64(bytes *x, int64_t v) { add(x, &v, 8); }

/* The checksum the format uses (FNV-1a, 64 bit): a crafted file must pass it to reach the
 * parser of the contents, as an attacker's would. */
static uint64_t fnv1a(const unsigned char *p, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

/* Header (magic, version 1, length, checksum of the contents) + contents. */
static void wrap(const bytes *contents, bytes *file) {
    file->n = 0;
    add(file, "DEFTCKPT", 8);
    add_u32(file, 1);
    add_i64(file, (int64_t)contents->n);
    uint64_t sum = fnv1a(contents->b, contents->n);
    add(file, &sum, 8);
    add(file, contents->b, contents->n);
}

/* Contents: empty config, position (1, 0, 2), `count` as the tensor count, then one tensor
 * "t" with the given shape and `floats` floats of data. */
static void contents(bytes *c, uint32_t count, int nd, const int64_t *shape, int floats) {
    c->n = 0;
    add_u32(c, 0);
    add_i64(c, 1), add_i64(c, 0), add_i64(c, 2);
    add_u32(c, count);
    add_u32(c, 1);
    add(c, "t", 1);
    add_u32(c, (uint32_t)nd);
    for (int d = 0; d < nd; d++) add_i64(c, shape[d]);
    for (int i = 0; i < floats; i++) {
        float v = (float)i;
        add(c, &v, 4);
    }
}

static char g_path[600];

/* Writes `file`, reads it back; returns the reader's status, err holds its message. */
static int read_bytes(const bytes *file, dt_err *err) {
    snprintf(g_path, sizeof g_path, "%s/crafted.ckpt", dt_test_tmpdir());
    FILE *f = fopen(g_path, "wb");
    fwrite(file->b, 1, file->n, f);
    fclose(f);
    dt_checkpoint ck;
    int rc = dt_checkpoint_read(g_path, &ck, err);
    if (rc == 0) dt_checkpoint_free(&ck);
    return rc;
}

/* Expects the crafted contents to be refused as corrupt, with `detail` in the message. */
static void expect_corrupt(const bytes *c, const char *detail, const char *what) {
    bytes file;
    wrap(c, &file);
    dt_err err;
    int rc = read_bytes(&file, &err);
    EXPECT_MSG(rc != 0, "%s: the crafted checkpoint was accepted", what);
    if (rc) EXPECT_MSG(strstr(err.msg, "corrupt checkpoint (") && strstr(err.msg, detail), "%s: %s", what, err.msg);
}

DT_TEST(checkpoint_crafted_headers_are_corrupt_not_crashes) {
    bytes c, file;
    dt_err err;
    int64_t one[1] = {3};
    contents(&c, 1, 1, one, 3);
    wrap(&c, &file);
    EXPECT_MSG(read_bytes(&file, &err) == 0, "the well-formed crafted file is refused: %s", err.msg);
    /* the count that wrapped n + 1 to 0 in the old reader */
    contents(&c, 0xFFFFFFFFu, 1, one, 3);
    expect_corrupt(&c, "4294967295 tensors cannot fit", "tensor count 0xFFFFFFFF");
    contents(&c, 2, 1, one, 3);
    expect_corrupt(&c, "its name runs past the end", "a second tensor that is not there");
    /* element counts: past the end, overflowing int64, negative, too many dimensions */
    int64_t huge[1] = {(int64_t)1 << 40};
    contents(&c, 1, 1, huge, 3);
    expect_corrupt(&c, "1099511627776 floats run past the end", "2^40 floats");
    int64_t ovf[2] = {(int64_t)1 << 62, 4};
    contents(&c, 1, 2, ovf, 3);
    expect_corrupt(&c, "more than 2^63 elements", "shape (2^62, 4)");
    int64_t neg[2] = {-1, -3};
    contents(&c, 1, 2, neg, 3);
    expect_corrupt(&c, "negative dimension", "shape (-1, -3)");
    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    contents(&c, 1, 9, nine, 1);
    expect_corrupt(&c, "9 dimensions (at most 8)", "9 dimensions");
    contents(&c, 1, 1, one, 4);
    expect_corrupt(&c, "4 bytes after the last tensor", "trailing data");
    /* a name length of 4 GB */
    contents(&c, 1, 1, one, 3);
    uint32_t big = 0xFFFFFFF0u;
    memcpy(c.b + 4 + 24 + 4, &big, 4);
    expect_corrupt(&c, "its name runs past the end", "name length 0xFFFFFFF0");
    /* a config text length past the end */
    memcpy(c.b, &big, 4);
    expect_corrupt(&c, "config text of 4294967280 bytes", "config length 0xFFFFFFF0");

    /* header only (28 bytes) announcing 1 TiB: refused from the file size, nothing allocated */
    contents(&c, 1, 1, one, 3);
    wrap(&c, &file);
    int64_t tib = (int64_t)1 << 40;
    memcpy(file.b + 12, &tib, 8);
    file.n = 28;
    EXPECT(read_bytes(&file, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "corrupt checkpoint (truncated: the header announces 1099511627776 bytes"), "%s",
               err.msg);
    /* every one-bit flip of the length field */
    wrap(&c, &file);
    int bad = 0;
    for (int bit = 0; bit < 64; bit++) {
        bytes f = file;
        f.b[12 + bit / 8] ^= (unsigned char)(1u << (bit % 8));
        bad += read_bytes(&f, &err) == 0 || !strstr(err.msg, "corrupt checkpoint (");
    }
    EXPECT_MSG(bad == 0, "%d of 64 one-bit flips of the length field were not 'corrupt checkpoint' errors", bad);
}

DT_TEST(checkpoint_every_bit_flip_is_refused) {
    /* A real checkpoint (two tensors) with each of its bits flipped in turn: the checksum or the
     * header catches every one. Then the same flips with the checksum recomputed, as a crafted
     * file would have: the parser of the contents must refuse or accept each without reading
     * outside the file (ASan checks that under SAN=1) and never with a tensor past its end. */
    char path[600];
    snprintf(path, sizeof path, "%s/real.ckpt", dt_test_tmpdir());
    dt_tensor *a = dt_tensor_new2(DT_CPU, 2, 3), *b = dt_tensor_new1(DT_CPU, 4);
    dt_tensor_fill(a, 1.5f);
    dt_tensor_fill(b, -2.0f);
    dt_ckpt_item items[2] = {{"w", a}, {"momentum/w", b}};
    dt_ckpt_pos pos = {3, 1, 40};
    dt_err err;
    EXPECT_EQ_INT(dt_checkpoint_save(path, "lr = 0.1\nbatch = 8\n", &pos, items, 2, &err), 0);
    FILE *f = fopen(path, "rb");
    bytes file;
    file.n = fread(file.b, 1, sizeof file.b, f);
    fclose(f);
    EXPECT(file.n > 28 && file.n < sizeof file.b);
    int accepted = 0, accepted_fixed = 0, out_of_file = 0;
    for (size_t bit = 0; bit < file.n * 8; bit++) {
        bytes g = file;
        g.b[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        accepted += read_bytes(&g, &err) == 0;
        if (bit < 28 * 8) continue;
        /* the checksum recomputed over the flipped contents */
        uint64_t sum = fnv1a(g.b + 28, g.n - 28);
        memcpy(g.b + 20, &sum, 8);
        void *copy = malloc(g.n);
        memcpy(copy, g.b, g.n);
        dt_checkpoint ck;
        if (dt_checkpoint_parse(copy, g.n, "flipped", &ck, &err) == 0) {
            accepted_fixed++;
            const unsigned char *lo = ck.blob, *hi = lo + g.n;
            for (int i = 0; i < ck.n; i++) {
                int64_t numel = dt_numel(ck.ndim[i], ck.shape[i]);
                const unsigned char *d = (const unsigned char *)ck.data[i];
                out_of_file += numel < 0 || d < lo || d + numel * 4 > hi;
            }
            dt_checkpoint_free(&ck);
        } else {
            EXPECT_MSG(strstr(err.msg, "corrupt checkpoint ("), "flip of bit %zu: %s", bit, err.msg);
        }
    }
    EXPECT_MSG(accepted == 0, "%d single-bit flips were accepted", accepted);
    EXPECT_EQ_INT(out_of_file, 0);
    /* flips in the float data stay valid checkpoints: most of the fixed ones are accepted */
    EXPECT(accepted_fixed > 0);
    if (dt_test_verbose()) printf("    %zu bits; with the checksum fixed, %d parse\n", file.n * 8, accepted_fixed);
}

DT_TEST(checkpoint_prepare_reports_bad_folders_and_cleans_stale_temporaries) {
    const char *tmp = dt_test_tmpdir();
    char path[700], p[800];
    dt_err err;
    /* a missing folder is created */
    snprintf(path, sizeof path, "%s/runs/sub/x.ckpt", tmp);
    EXPECT_MSG(dt_checkpoint_prepare(path, &err) == 0, "%s", err.msg);
    struct stat st;
    snprintf(p, sizeof p, "%s/runs/sub", tmp);
    EXPECT(stat(p, &st) == 0 && S_ISDIR(st.st_mode));
    /* a file where a folder should be is an error naming it (root may write anywhere, so an
     * unwritable folder is made this way) */
    snprintf(p, sizeof p, "%s/afile", tmp);
    fclose(fopen(p, "w"));
    snprintf(path, sizeof path, "%s/afile/x.ckpt", tmp);
    EXPECT(dt_checkpoint_prepare(path, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "cannot write checkpoint") && strstr(err.msg, "afile"), "%s", err.msg);
    /* stale temporaries: only ours, only of dead processes (PIDs above pid_max are never alive) */
    snprintf(path, sizeof path, "%s/runs/x.ckpt", tmp);
    const char *names[] = {"x.ckpt.tmp.999999999", "x.ckpt.tmp.999999998", "x.ckpt.tmp.%d" /* ours: alive */,
                           "y.ckpt.tmp.999999999", "x.ckpt.tmp.12ab", "x.ckpt"};
    int removed[] = {1, 1, 0, 0, 0, 0};
    for (int i = 0; i < 6; i++) {
        char name[64];
        snprintf(name, sizeof name, names[i], (int)getppid());
        snprintf(p, sizeof p, "%s/runs/%s", tmp, name);
        fclose(fopen(p, "w"));
    }
    EXPECT_MSG(dt_checkpoint_prepare(path, &err) == 0, "%s", err.msg);
    for (int i = 0; i < 6; i++) {
        char name[64];
        snprintf(name, sizeof name, names[i], (int)getppid());
        snprintf(p, sizeof p, "%s/runs/%s", tmp, name);
        EXPECT_MSG((stat(p, &st) != 0) == removed[i], "%s was %s", name, removed[i] ? "kept" : "removed");
    }
}

/* ---- positions read from a checkpoint, checked against the run ---- */

/* A parsed checkpoint with no tensors, the given stored config and position. */
static dt_checkpoint ck_at(const char *config, int64_t epoch, int64_t batch, int64_t step) {
    dt_checkpoint ck;
    memset(&ck, 0, sizeof ck);
    ck.config_text = (char *)config;
    ck.pos = (dt_ckpt_pos){epoch, batch, step};
    return ck;
}

/* dt_checkpoint_plan_resume on a training set of 640 images, resumed by a run of global batch
 * 64 over 3 epochs (10 steps each); err holds the message. */
static int plan(const char *config, int64_t epoch, int64_t batch, int64_t step, dt_ckpt_resume *rs, dt_err *err) {
    dt_checkpoint ck = ck_at(config, epoch, batch, step);
    dt_ckpt_run now = {64, 10, 30};
    return dt_checkpoint_plan_resume(&ck, &now, 1, 640, "x.ckpt", rs, err);
}

DT_TEST(checkpoint_positions_are_checked_against_the_run) {
    /* Stored batch 64 x 1 replica, epochs 3: 10 steps per epoch, 30 in all (as the resuming
     * run); values near 2^62 .. 2^63 must be errors, never a wrapped product (SAN=1 checks that
     * no signed overflow happens on the way). */
    const char *cfg = "batch = 64\nepochs = 3\n";
    const int64_t big = INT64_MAX, q = (int64_t)1 << 62;
    struct {
        int64_t e, b, s;
        const char *needle;
    } bad[] = {
        {0, 10, 10, "batch 10 of epoch 0 is past the end of the epoch: the run that wrote it had 10 batches"},
        {0, q, q, "past the end of the epoch"},
        {0, big, big, "past the end of the epoch"},
        {q, 0, 0, "past 2^63 steps"},
        {big, 9, big, "past 2^63 steps"},
        {big / 10, 7, big / 10 * 10 + 7, "past the end of the run that wrote it (30 steps)"},
        {3, 1, 31, "past the end of the run that wrote it (30 steps)"},
        {2, 3, 24, "inconsistent position: epoch 2, batch 3 is step 23"},
        {1, 0, big, "inconsistent position"},
        {-1, 0, 0, "negative position"},
    };
    dt_ckpt_resume rs;
    dt_err err;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = plan(cfg, bad[i].e, bad[i].b, bad[i].s, &rs, &err);
        EXPECT_MSG(rc != 0, "position (%lld, %lld, %lld) was accepted", (long long)bad[i].e, (long long)bad[i].b,
                   (long long)bad[i].s);
        if (rc) EXPECT_MSG(strstr(err.msg, "x.ckpt") && strstr(err.msg, bad[i].needle), "%s", err.msg);
    }
    /* the valid ones: mid-epoch, an epoch's end, the end of the run (a finished run) */
    int64_t good[][3] = {{0, 0, 0}, {1, 4, 14}, {2, 0, 20}, {3, 0, 30}};
    for (int i = 0; i < 4; i++) {
        EXPECT_MSG(plan(cfg, good[i][0], good[i][1], good[i][2], &rs, &err) == 0, "%s", err.msg);
        EXPECT(rs.have_config && rs.exact == 1 && rs.pos.step == good[i][2]);
    }
    /* written by 2 replicas x 16 (global 32: 20 steps per epoch, 60 in all), resumed at 64 */
    EXPECT_MSG(plan("batch = 16\ngpus = 2\nepochs = 3\ndevice = cpu\n", 1, 19, 39, &rs, &err) == 0, "%s", err.msg);
    EXPECT(rs.was.global_batch == 32 && rs.was.steps_per_epoch == 20 && rs.was.total_steps == 60);
    EXPECT(rs.pos.epoch == 1 && rs.pos.batch == 9 && rs.pos.step == 19 && rs.exact == 0);
    /* in those units the end of the run is past this one's end */
    EXPECT(plan("batch = 16\ngpus = 2\nepochs = 4\ndevice = cpu\n", 3, 10, 70, &rs, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "is at step 35, past the end of this run (30 steps)"), "%s", err.msg);
    /* synthetic data, steps = 10^15 of 65536 images: the images done overflow 64 bits */
    EXPECT(plan("synthetic = 1\nbatch = 65536\nsteps = 1000000000000000\n", 0, 999999999999999, 999999999999999, &rs,
                &err) != 0);
    EXPECT_MSG(strstr(err.msg, "does not fit 64 bits"), "%s", err.msg);
    /* a config that does not parse: said, and the position taken in the resuming run's units */
    EXPECT_MSG(plan("no such key = 1\n", 1, 2, 12, &rs, &err) == 0, "%s", err.msg);
    EXPECT(!rs.have_config && strstr(rs.config_error, "no such key") && rs.pos.step == 12);
    /* the rescale on its own: an overflowing product is reported, not computed */
    int exact;
    dt_ckpt_pos p = dt_ckpt_pos_rescale((dt_ckpt_pos){1, q, q}, 4, 1, 10, &exact);
    EXPECT(exact == -1 && p.batch == q);
    p = dt_ckpt_pos_rescale((dt_ckpt_pos){big, 0, 0}, 4, 2, 10, &exact);
    EXPECT(exact == -1);
    /* a batch that reaches the new epoch's end starts the next epoch: 9 of 10 images done, 4 per batch */
    p = dt_ckpt_pos_rescale((dt_ckpt_pos){0, 9, 9}, 1, 4, 2, &exact);
    EXPECT(exact == 0 && p.epoch == 1 && p.batch == 0 && p.step == 2);
}

DT_TEST(checkpoint_non_finite_tensors_and_huge_files_are_errors) {
    char path[700];
    snprintf(path, sizeof path, "%s/nan.ckpt", dt_test_tmpdir());
    dt_tensor *a = dt_tensor_new1(DT_CPU, 4);
    float v[4] = {1, 2, NAN, 4};
    dt_tensor_set_values(a, v);
    dt_ckpt_item it = {"conv1.weight", a};
    dt_ckpt_pos pos = {0, 0, 0};
    dt_err err;
    EXPECT_EQ_INT(dt_checkpoint_save(path, "", &pos, &it, 1, &err), 0);
    dt_checkpoint ck;
    EXPECT_EQ_INT(dt_checkpoint_read(path, &ck, &err), 0);
    dt_tensor *b = dt_tensor_new1(DT_CPU, 4);
    dt_tensor_fill(b, 7);
    EXPECT(dt_checkpoint_copy_to(&ck, "conv1.weight", b, path, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "tensor 'conv1.weight' holds a NaN at element 2"), "%s", err.msg);
    EXPECT(dt_data_f32(b)[0] == 7); /* untouched */
    dt_checkpoint_free(&ck);
    v[2] = -INFINITY;
    dt_tensor_set_values(a, v);
    EXPECT_EQ_INT(dt_checkpoint_save(path, "", &pos, &it, 1, &err), 0);
    EXPECT_EQ_INT(dt_checkpoint_read(path, &ck, &err), 0);
    EXPECT(dt_checkpoint_copy_to(&ck, "conv1.weight", b, path, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "holds an infinity at element 2"), "%s", err.msg);
    dt_checkpoint_free(&ck);
    /* a sparse file of 1 TiB: refused from its size, before anything is allocated */
    snprintf(path, sizeof path, "%s/huge.ckpt", dt_test_tmpdir());
    fclose(fopen(path, "w"));
    EXPECT(truncate(path, (off_t)1 << 40) == 0);
    EXPECT(dt_checkpoint_read(path, &ck, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "is 1099511627776 bytes, more than the 34359738368 accepted"), "%s", err.msg);
}

DT_TEST(checkpoint_state_round_trips_and_must_match) {
    /* dt_checkpoint_serialize_state / load_state: parameters, buffers, momentum by name */
    dt_params ps = {0};
    int64_t s2[2] = {2, 3}, s1[1] = {2};
    dt_tensor *w = dt_param_new(&ps, "conv1.weight", 2, s2, DT_CPU, DT_NCHW, 1);
    dt_param_new(&ps, "fc.bias", 1, s1, DT_CPU, DT_NCHW, 0);
    dt_tensor *bn = dt_tensor_new_unscoped(1, s1, DT_CPU, DT_F32, DT_NCHW);
    dt_tensor_set_name(bn, "bn1.running_var");
    dt_tensor_fill(w, 0.5f);
    dt_tensor_fill(bn, 2.0f);
    dt_tensor *mom[2] = {dt_tensor_new_unscoped(2, s2, DT_CPU, DT_F32, DT_NCHW), NULL};
    dt_tensor_fill(mom[0], -1.0f);
    char path[700];
    snprintf(path, sizeof path, "%s/state.ckpt", dt_test_tmpdir());
    dt_ckpt_pos pos = {1, 2, 3};
    dt_err err;
    dt_ckpt_image img = {0};
    dt_checkpoint_serialize_state("", &pos, &ps, mom, &bn, 1, &img);
    EXPECT_MSG(dt_ckpt_image_write(path, &img, &err) == 0, "%s", err.msg);
    dt_ckpt_image_free(&img);
    dt_tensor_fill(w, 0);
    dt_tensor_fill(bn, 0);
    dt_tensor_free(mom[0]);
    mom[0] = NULL;
    dt_checkpoint ck;
    EXPECT_EQ_INT(dt_checkpoint_read(path, &ck, &err), 0);
    EXPECT_EQ_INT(ck.n, 4);
    EXPECT_MSG(dt_checkpoint_load_state(&ck, &ps, mom, &bn, 1, path, &err) == 0, "%s", err.msg);
    EXPECT(dt_data_f32(w)[5] == 0.5f && dt_data_f32(bn)[1] == 2.0f);
    EXPECT(mom[0] && dt_data_f32(mom[0])[3] == -1.0f && !mom[1]); /* made on load; none stored for fc.bias */
    /* the model without its buffer: the checkpoint holds a tensor the model does not */
    EXPECT(dt_checkpoint_load_state(&ck, &ps, mom, NULL, 0, path, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "it holds 4 tensors, the model 3"), "%s", err.msg);
    dt_checkpoint_free(&ck);
    dt_tensor_free(mom[0]);
    dt_tensor_free(bn);
    dt_params_free(&ps);
}

/* ---- paths a rename must not replace ---- */

DT_TEST(checkpoint_refuses_devices_fifos_and_folders_and_writes_through_symlinks) {
    const char *tmp = dt_test_tmpdir();
    char fifo[700], dir[700], real[700], link[700], dangling[700], to_fifo[700];
    snprintf(fifo, sizeof fifo, "%s/fifo.ckpt", tmp);
    snprintf(dir, sizeof dir, "%s/dir.ckpt", tmp);
    snprintf(real, sizeof real, "%s/real.ckpt", tmp);
    snprintf(link, sizeof link, "%s/link.ckpt", tmp);
    snprintf(dangling, sizeof dangling, "%s/dangling.ckpt", tmp);
    snprintf(to_fifo, sizeof to_fifo, "%s/to_fifo.ckpt", tmp);
    EXPECT(mkfifo(fifo, 0644) == 0);
    EXPECT(mkdir(dir, 0755) == 0);
    EXPECT(symlink("real.ckpt", link) == 0);
    EXPECT(symlink("nothing-here", dangling) == 0);
    EXPECT(symlink(fifo, to_fifo) == 0);
    dt_tensor *t = dt_tensor_new1(DT_CPU, 3);
    dt_tensor_fill(t, 1.0f);
    dt_ckpt_item it = {"t", t};
    dt_ckpt_pos pos = {0, 1, 1};
    dt_err err;
    struct {
        const char *path, *needle;
    } refused[] = {{fifo, "it is a FIFO"}, {dir, "it is a folder"}, {dangling, "a symlink that leads nowhere"},
                   {to_fifo, "which is a FIFO"}};
    for (int i = 0; i < 4; i++) {
        EXPECT(dt_checkpoint_prepare(refused[i].path, &err) != 0);
        EXPECT_MSG(strstr(err.msg, "cannot write checkpoint") && strstr(err.msg, refused[i].needle), "%s", err.msg);
        EXPECT(dt_checkpoint_save(refused[i].path, "", &pos, &it, 1, &err) != 0);
        EXPECT_MSG(strstr(err.msg, refused[i].needle), "%s", err.msg);
    }
    struct stat st;
    EXPECT(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode)); /* still what they were */
    EXPECT(lstat(dir, &st) == 0 && S_ISDIR(st.st_mode));
    EXPECT(lstat(dangling, &st) == 0 && S_ISLNK(st.st_mode));
    /* a symlink to a regular file: written through, atomically in the target's folder */
    FILE *f = fopen(real, "w");
    fputs("old contents", f);
    fclose(f);
    EXPECT_MSG(dt_checkpoint_prepare(link, &err) == 0, "%s", err.msg);
    EXPECT_MSG(dt_checkpoint_save(link, "", &pos, &it, 1, &err) == 0, "%s", err.msg);
    EXPECT(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
    dt_checkpoint ck;
    EXPECT_MSG(dt_checkpoint_read(real, &ck, &err) == 0, "the link's target was not written: %s", err.msg);
    if (ck.blob) EXPECT(ck.pos.step == 1 && ck.n == 1);
    dt_checkpoint_free(&ck);
}

/* A GPU run's snapshot (train/dt_checkpoint.h: page-locked body, copies queued on the stream,
 * other dtypes and layouts converted on the GPU) is byte for byte the CPU's of the same tensors:
 * fp32 NCHW, fp32 channels last (a bf16 run's conv masters), bf16 channels last, a vector, an
 * empty tensor. Serialized twice into the same body (a writer's spare), the second time too. */
DT_GPU_TEST(gpu_checkpoint_snapshot_matches_the_cpus) {
    const int64_t s4[4] = {5, 7, 3, 3}, s1[1] = {37}, s0[1] = {0};
    const struct { int ndim; const int64_t *shape; dt_dtype dtype; dt_layout layout; } T[] = {
        {4, s4, DT_F32, DT_NCHW}, {4, s4, DT_F32, DT_NHWC}, {4, s4, DT_BF16, DT_NHWC}, {1, s1, DT_F32, DT_NCHW},
        {1, s0, DT_F32, DT_NCHW}};
    enum { NT = sizeof T / sizeof *T };
    dt_tensor *cpu[NT], *gpu[NT];
    dt_ckpt_item ci[NT], gi[NT];
    static const char *const names[NT] = {"a", "b_cl", "c_bf16_cl", "d", "e"};
    dt_rng *r = dt_test_rng();
    for (int i = 0; i < NT; i++) {
        cpu[i] = dt_tensor_new_unscoped(T[i].ndim, T[i].shape, DT_CPU, T[i].dtype, T[i].layout);
        dt_tensor_fill_normal(cpu[i], r, 0.0f, 1.0f);
        gpu[i] = dt_tensor_new_unscoped(T[i].ndim, T[i].shape, DT_GPU, T[i].dtype, T[i].layout);
        dt_tensor_copy(gpu[i], cpu[i]);
        ci[i] = (dt_ckpt_item){names[i], cpu[i]};
        gi[i] = (dt_ckpt_item){names[i], gpu[i]};
    }
    dt_ckpt_pos pos = {3, 1, 7};
    dt_ckpt_image a = {0}, b = {0};
    dt_checkpoint_serialize("lr = 0.1\n", &pos, ci, NT, &a);
    for (int pass = 0; pass < 2; pass++) {
        unsigned char *body = b.body;
        dt_checkpoint_serialize("lr = 0.1\n", &pos, gi, NT, &b);
        EXPECT(b.pinned);
        if (pass) EXPECT_MSG(b.body == body, "the second snapshot did not reuse the body");
        EXPECT_EQ_INT((int64_t)b.len, (int64_t)a.len);
        EXPECT_MSG(a.len == b.len && !memcmp(a.body, b.body, a.len), "pass %d: the GPU's snapshot differs from the CPU's", pass);
        for (int i = 0; i < NT; i++) dt_tensor_fill_normal(gpu[i], r, 0.0f, 1.0f); /* changed after: the snapshot stays */
        for (int i = 0; i < NT; i++) dt_tensor_copy(gpu[i], cpu[i]);
    }
    dt_ckpt_image_free(&a);
    dt_ckpt_image_free(&b);
    for (int i = 0; i < NT; i++) dt_tensor_free(cpu[i]), dt_tensor_free(gpu[i]);
}
