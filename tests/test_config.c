/* The config parser as untrusted input: lines of any length (a long comment's tail is never
 * read as a setting), NaN and infinities fail every numeric range, a folder, /dev/zero, an
 * over-large file, a NUL or another control byte are errors naming the file and line. The text
 * a checkpoint stores reads back to the same values, whatever a path holds (quoting), so that a
 * resume compares and rescales. And a new user's first hour: a mistyped key names the closest
 * keys, --keys prints integers as integers, epochs= on the command line beats the file's steps=,
 * and without a GPU the run points at the CPU config. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/train_testutil.h"
#include "tests/data_testutil.h"
#include "train/dt_checkpoint.h"
#include "train/dt_config.h"
#include "core/dt_device.h"
#include "tests/dt_test.h"
#include "train/dt_trainer.h"
#include "train/train_cli.h"

static const char *write_cfg(const char *name, const char *text, size_t n) {
    static char path[600];
    snprintf(path, sizeof path, "%s/%s", dt_test_tmpdir(), name);
    FILE *f = fopen(path, "wb");
    fwrite(text, 1, n, f);
    fclose(f);
    return path;
}

DT_TEST(config_long_lines_are_read_whole) {
    /* A 5000-byte comment ending in "lr = 777": the old 1023-byte buffer parsed the tail. */
    size_t n = 5000;
    char *text = malloc(n + 64);
    memset(text, 'x', n);
    text[0] = '#';
    memcpy(text + n - 9, " lr = 777", 9);
    int len = (int)n + snprintf(text + n, 64, "\nbatch = 16\n");
    dt_train_cfg c;
    dt_config_defaults(&c);
    dt_err err;
    int rc = dt_config_load(&c, write_cfg("long.cfg", text, (size_t)len), &err);
    EXPECT_MSG(rc == 0, "%s", err.msg);
    EXPECT_NEAR(c.lr, 0.1, 1e-7);
    EXPECT_EQ_INT(c.batch, 16);
    /* a long value is read whole and refused for its length, naming line and key */
    len = snprintf(text, 64, "device = cpu\ndata = ");
    memset(text + len, 'd', 3000);
    len += 3000;
    text[len++] = '\n';
    EXPECT(dt_config_load(&c, write_cfg("longval.cfg", text, (size_t)len), &err) != 0);
    EXPECT_MSG(strstr(err.msg, "longval.cfg:2: value for 'data' is too long"), "%s", err.msg);
    /* CRLF line ends and a last line without a newline are fine */
    const char *crlf = "batch = 32\r\nlr = 0.5";
    EXPECT_EQ_INT(dt_config_load(&c, write_cfg("crlf.cfg", crlf, strlen(crlf)), &err), 0);
    EXPECT_EQ_INT(c.batch, 32);
    EXPECT_NEAR(c.lr, 0.5, 1e-7);
    /* overrides have no length limit either */
    char *ov = malloc(4000);
    snprintf(ov, 4000, "lr=0.25%3000s", "");
    EXPECT_EQ_INT(dt_config_set(&c, ov, &err), 0);
    EXPECT_NEAR(c.lr, 0.25, 1e-7);
    free(ov);
    free(text);
}

DT_TEST(config_nan_and_inf_fail_every_numeric_key) {
    /* Every key with a numeric range (from the help table, so a new key is covered too). */
    char *help = NULL;
    size_t hl = 0;
    FILE *f = open_memstream(&help, &hl);
    dt_config_help(f);
    fclose(f);
    const char *bad[] = {"nan", "NaN", "-nan", "inf", "-inf", "infinity", "1e999"};
    int keys = 0;
    for (char *line = strtok(help, "\n"); line; line = strtok(NULL, "\n")) {
        char key[64], dom[64];
        if (line[2] == ' ' || sscanf(line, " %63s %63s", key, dom) != 2 || !strstr(dom, "..")) continue; /* a key's line */
        keys++;
        for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
            dt_train_cfg c;
            dt_config_defaults(&c);
            char kv[128];
            snprintf(kv, sizeof kv, "%s=%s", key, bad[i]);
            dt_err err;
            EXPECT_MSG(dt_config_set(&c, kv, &err) != 0, "%s was accepted", kv);
        }
    }
    free(help);
    EXPECT_MSG(keys >= 30, "only %d numeric keys found in the help table", keys);
    /* the unsigned seed: the whole range, no negative numbers */
    dt_train_cfg c;
    dt_config_defaults(&c);
    dt_err err;
    EXPECT_EQ_INT(dt_config_set(&c, "seed=18446744073709551615", &err), 0);
    EXPECT(c.seed == UINT64_MAX);
    EXPECT(dt_config_set(&c, "seed=-1", &err) != 0);
    EXPECT(dt_config_set(&c, "seed=18446744073709551616", &err) != 0);
}

DT_TEST(config_non_text_inputs_are_errors) {
    dt_train_cfg c;
    dt_config_defaults(&c);
    dt_err err;
    /* a folder (the old reader trained with the defaults) */
    EXPECT(dt_config_load(&c, dt_test_tmpdir(), &err) != 0);
    EXPECT_MSG(strstr(err.msg, "is a folder, not a file"), "%s", err.msg);
    /* a device that never ends (the old reader hung) */
    EXPECT(dt_config_load(&c, "/dev/zero", &err) != 0);
    EXPECT_MSG(strstr(err.msg, "cannot read config /dev/zero: not a regular file"), "%s", err.msg);
    /* over-large */
    size_t big = DT_CONFIG_MAX_BYTES + 1;
    char *text = malloc(big);
    memset(text, '\n', big);
    EXPECT(dt_config_load(&c, write_cfg("big.cfg", text, big), &err) != 0);
    EXPECT_MSG(strstr(err.msg, "is 1048577 bytes, more than the 1048576 accepted"), "%s", err.msg);
    free(text);
    /* a NUL byte in a line (the old reader dropped the rest of the line) and other binary */
    const char nul[] = "batch = 8\nlr = 0.1\0lr = 5\n";
    EXPECT(dt_config_load(&c, write_cfg("nul.cfg", nul, sizeof nul - 1), &err) != 0);
    EXPECT_MSG(strstr(err.msg, "nul.cfg:2: byte 0x00 at column 9: not a text file"), "%s", err.msg);
    const char bin[] = "\x7f" "ELF\x02\x01";
    EXPECT(dt_config_load(&c, write_cfg("bin.cfg", bin, sizeof bin - 1), &err) != 0);
    EXPECT_MSG(strstr(err.msg, "bin.cfg:1: byte 0x7f"), "%s", err.msg);
    /* UTF-8 in a comment is text */
    const char *utf8 = "# \xc3\xa9t\xc3\xa9 \xe2\x80\x94 r\xc3\xa9sum\xc3\xa9\nbatch = 4\n";
    EXPECT_MSG(dt_config_load(&c, write_cfg("utf8.cfg", utf8, strlen(utf8)), &err) == 0, "%s", err.msg);
}

static void folder_as_config(void *a) {
    (void)a;
    char *argv[] = {"train", (char *)dt_test_tmpdir()};
    exit(dt_train_cli(2, argv));
}
static void nan_lr(void *a) {
    (void)a;
    char *argv[] = {"train", (char *)write_cfg("n.cfg", "device = cpu\nsynthetic = 1\n", 27), "warmup_start=nan"};
    exit(dt_train_cli(3, argv));
}

DT_TEST(config_errors_stop_the_program) {
    EXPECT_DEATH(folder_as_config, NULL, "is a folder, not a file");
    EXPECT_DEATH(nan_lr, NULL, "value nan for 'warmup_start' is out of range");
}

typedef struct {
    char keys[512];
    char last[256];
} diff_log;

static void note_diff(const char *key, const char *was, const char *now, void *ctx) {
    diff_log *d = ctx;
    size_t n = strlen(d->keys);
    snprintf(d->keys + n, sizeof d->keys - n, "%s%s", n ? "," : "", key);
    snprintf(d->last, sizeof d->last, "%s: %s -> %s", key, was, now);
}

DT_TEST(config_diff_names_what_changes_the_run) {
    dt_train_cfg a, b;
    dt_config_defaults(&a);
    b = a;
    diff_log d = {"", ""};
    EXPECT_EQ_INT(dt_config_diff(&a, &b, note_diff, &d), 0);
    /* logs, workers, checkpoints, performance knobs: the same run */
    b.workers = 7;
    b.log_every = 3;
    b.halo = 4;
    strcpy(b.log, "elsewhere");
    strcpy(b.checkpoint, "x.ckpt");
    EXPECT_EQ_INT(dt_config_diff(&a, &b, note_diff, &d), 0);
    /* batch, image size, momentum, seed: another run; values as typed */
    b.batch = 128;
    b.image_size = 96;
    b.momentum = 0.8f;
    b.seed = 5;
    EXPECT_EQ_INT(dt_config_diff(&a, &b, note_diff, &d), 4);
    EXPECT_MSG(!strcmp(d.keys, "image_size,batch,momentum,seed"), "keys: %s", d.keys);
    EXPECT_MSG(!strcmp(d.last, "seed: 0 -> 5"), "%s", d.last);
    d.keys[0] = 0;
    b = a;
    b.momentum = 0.8f;
    dt_config_diff(&a, &b, note_diff, &d);
    EXPECT_MSG(!strcmp(d.last, "momentum: 0.9 -> 0.8"), "%s", d.last);
}

/* precision: the three names and nothing else; the key it replaced (tf32) is now unknown and
 * the error points at precision (whose help names tf32). */
DT_TEST(config_precision_values) {
    dt_train_cfg c;
    dt_config_defaults(&c);
    dt_err err;
    EXPECT(!strcmp(c.precision, "fp32"));
    const char *ok[] = {"precision=fp32", "precision=tf32", "precision=bf16"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) EXPECT_EQ_INT(dt_config_set(&c, ok[i], &err), 0);
    EXPECT(!strcmp(c.precision, "bf16"));
    const char *bad[] = {"precision=fp16", "precision=BF16", "precision=", "precision=bf16x"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        EXPECT_MSG(dt_config_set(&c, bad[i], &err) != 0, "%s was accepted", bad[i]);
        EXPECT_MSG(strstr(err.msg, "precision") && strstr(err.msg, "fp32|tf32|bf16"), "%s: message '%s'", bad[i], err.msg);
    }
    EXPECT(!strcmp(c.precision, "bf16")); /* a refused value leaves the setting alone */
    EXPECT(dt_config_set(&c, "tf32=1", &err) != 0 && strstr(err.msg, "unknown key") && strstr(err.msg, "precision"));
}

/* dx: the deft input gradient's two forms; the one by output tile, a lab record since it lost
 * 8-22x to the gather on the H200 (docs/deft.md), is refused, naming the key and the values. */
DT_TEST(config_dx_values) {
    dt_train_cfg c;
    dt_config_defaults(&c);
    dt_err err;
    EXPECT(!strcmp(c.dx, "gather"));
    EXPECT_EQ_INT(dt_config_set(&c, "dx=atomic", &err), 0);
    EXPECT(!strcmp(c.dx, "atomic"));
    EXPECT_EQ_INT(dt_config_set(&c, "dx=gather", &err), 0);
    EXPECT(dt_config_set(&c, "dx=tile", &err) != 0);
    EXPECT_MSG(strstr(err.msg, "bad value 'tile' for 'dx': expected one of gather|atomic"), "%s", err.msg);
    EXPECT(!strcmp(c.dx, "gather")); /* a refused value leaves the setting alone */
}

/* ---- the config text a checkpoint stores reads back to the same values ---- */

static char *config_text(const dt_train_cfg *c) {
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    dt_config_write(c, f);
    fclose(f);
    return text;
}

/* Writes c, parses the text into the defaults, and expects the same config back (the written
 * text again, which holds every key; floats with 9 digits are exact). */
static void expect_round_trip(const dt_train_cfg *c, const char *what) {
    char *text = config_text(c);
    dt_train_cfg back;
    dt_config_defaults(&back);
    dt_err err;
    int rc = dt_config_parse(&back, text, strlen(text), "stored", &err);
    EXPECT_MSG(rc == 0, "%s: the written config does not parse: %s", what, err.msg);
    if (!rc) {
        char *again = config_text(&back);
        EXPECT_MSG(!strcmp(text, again), "%s: read back differently:\n%s\nvs\n%s", what, text, again);
        EXPECT_MSG(!strcmp(back.data, c->data) && !strcmp(back.log, c->log), "%s: data '%s' read back as '%s'", what,
                   c->data, back.data);
        free(again);
    }
    free(text);
}

DT_TEST(config_text_round_trips_hostile_values) {
    /* Before quoting: a newline made the text unparseable, a # cut the value (a false
     * "data differs" on resume), spaces at the ends and quotes were lost. */
    const char *hostile[] = {"/data/run #3/images", "/a\nb", "line\r\nend", " lead", "trail ", "\ttab\t", "a=b",
                             "\"quoted\"", "\"", "back\\slash", "\\x41 \\n literal", "ctl\x01\x1f\x7f", "caf\xc3\xa9 #",
                             "#", "=", "", "   "};
    for (size_t i = 0; i < sizeof hostile / sizeof *hostile; i++) {
        dt_train_cfg c;
        dt_config_defaults(&c);
        snprintf(c.data, sizeof c.data, "%s", hostile[i]);
        snprintf(c.log, sizeof c.log, "%s/log", hostile[i]);
        expect_round_trip(&c, hostile[i]);
    }
    /* the longest value, every byte escaped */
    dt_train_cfg c;
    dt_config_defaults(&c);
    memset(c.data, '\n', sizeof c.data - 1);
    c.data[sizeof c.data - 1] = 0;
    expect_round_trip(&c, "511 newlines");
    /* every numeric key at both ends of its range (0.01 is stored as 0.00999999978, below 0.01
     * as a double: it was refused when read back) */
    char *help = NULL;
    size_t hl = 0;
    FILE *f = open_memstream(&help, &hl);
    dt_config_help(f);
    fclose(f);
    int keys = 0;
    for (char *line = strtok(help, "\n"); line; line = strtok(NULL, "\n")) {
        char key[64], dom[64], *dots;
        if (line[2] == ' ' || sscanf(line, " %63s %63s", key, dom) != 2 || !(dots = strstr(dom, ".."))) continue;
        *dots = 0;
        const char *ends[] = {dom, dots + 2};
        for (int e = 0; e < 2; e++) {
            char kv[200];
            snprintf(kv, sizeof kv, "%s=%s", key, ends[e]);
            dt_config_defaults(&c);
            dt_err err;
            EXPECT_MSG(dt_config_set(&c, kv, &err) == 0, "%s: %s", kv, err.msg);
            expect_round_trip(&c, kv);
        }
        keys++;
    }
    free(help);
    EXPECT_MSG(keys >= 30, "only %d numeric keys found in the help table", keys);
}

DT_TEST(config_quoted_values) {
    const char *text = "data = \"/mnt/run #3/images \\\"x\\\"\"   # where the images are\n"
                       "log = \"a\\tb\\\\c\\x01\\n\"\n"
                       "checkpoint = plain # an unquoted value ends at a #\n"
                       "deform = \"all\"\n";
    dt_train_cfg c;
    dt_config_defaults(&c);
    dt_err err;
    EXPECT_MSG(dt_config_parse(&c, text, strlen(text), "q.cfg", &err) == 0, "%s", err.msg);
    EXPECT_MSG(!strcmp(c.data, "/mnt/run #3/images \"x\""), "data = '%s'", c.data);
    EXPECT_MSG(!strcmp(c.log, "a\tb\\c\x01\n"), "log = '%s'", c.log);
    EXPECT_MSG(!strcmp(c.checkpoint, "plain"), "checkpoint = '%s'", c.checkpoint);
    EXPECT(!strcmp(c.deform, "all"));
    struct {
        const char *line, *msg;
    } bad[] = {
        {"data = \"open", "q.cfg:1: the quoted value of 'data' has no closing quote"},
        {"data = \"a\\q\"", "q.cfg:1: the quoted value of 'data' has an unknown escape '\\q'"},
        {"data = \"a\\x0\"", "has \\x without two hex digits"},
        {"data = \"a\\x00b\"", "has \\x00 (a value cannot hold a NUL)"},
        {"data = \"a\" b", "q.cfg:1: text after the closing quote of 'data': 'b'"},
        {"data = \"a\\", "no closing quote"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        EXPECT_MSG(dt_config_parse(&c, bad[i].line, strlen(bad[i].line), "q.cfg", &err) != 0, "%s was accepted", bad[i].line);
        EXPECT_MSG(strstr(err.msg, bad[i].msg), "%s: message '%s'", bad[i].line, err.msg);
    }
    /* on the command line a value is taken as it is: the shell has removed its quotes */
    EXPECT_EQ_INT(dt_config_set(&c, "data=/a#b \"c\"", &err), 0);
    EXPECT_MSG(!strcmp(c.data, "/a#b \"c\""), "data = '%s'", c.data);
}

/* A resume of a run whose data path holds a #, quotes, a newline, a tab and a trailing space
 * compares the configs (no false "data differs") and rescales a changed batch: before, the
 * stored text did not parse ("cannot compare"), and the position was not rescaled. */
static void hostile_cfg(dt_train_cfg *c, const char *data) {
    dt_test_run_cfg(c, data, 32, 0.0625f, 8);
    c->workers = 1;
    c->steps = 4;
    c->max_val_batches = 1;
    c->eval_every = 0;
    c->quiet = 1;
}

static const char *g_hostile_ckpt;
static void resume_hostile(void *arg) {
    dt_train_cfg c;
    hostile_cfg(&c, arg);
    c.batch = 4;
    snprintf(c.resume, sizeof c.resume, "%s", g_hostile_ckpt);
    dt_train_result r;
    dt_err err;
    if (dt_train_run(&c, &r, &err)) dt_fatal("%s", err.msg);
    dt_train_result_free(&r);
}

DT_TEST(config_resume_with_hostile_data_path_rescales) {
    char data[400], ckpt[500];
    snprintf(data, sizeof data, "%s/run #3 \"a=b\"\n\tx ", dt_test_tmpdir());
    if (symlink(dt_test_shapes("shapes", 2, 8, 1, 40), data)) dt_fatal("symlink %s failed", data);
    snprintf(ckpt, sizeof ckpt, "%s/h.ckpt", dt_test_tmpdir());
    dt_train_cfg a;
    hostile_cfg(&a, data);
    a.stop_at = 1; /* 16 images, batch 8: stops after batch 1 of epoch 0 */
    snprintf(a.checkpoint, sizeof a.checkpoint, "%s", ckpt);
    dt_train_result r;
    dt_err err;
    int rc = dt_train_run(&a, &r, &err);
    dt_train_result_free(&r);
    EXPECT_MSG(rc == 0, "%s", err.msg);
    if (rc) return;
    /* the stored config reads back to the run's, so nothing but the batch differs */
    dt_checkpoint ck;
    EXPECT_MSG(dt_checkpoint_read(ckpt, &ck, &err) == 0, "%s", err.msg);
    dt_train_cfg was;
    dt_config_defaults(&was);
    EXPECT_MSG(dt_config_parse(&was, ck.config_text, strlen(ck.config_text), ckpt, &err) == 0, "%s", err.msg);
    dt_checkpoint_free(&ck);
    EXPECT_MSG(!strcmp(was.data, data), "data read back as '%s'", was.data);
    dt_train_cfg now;
    hostile_cfg(&now, data);
    now.batch = 4;
    diff_log d = {"", ""};
    EXPECT_EQ_INT(dt_config_diff(&was, &now, note_diff, &d), 1);
    EXPECT_MSG(!strcmp(d.keys, "batch"), "keys that differ: %s", d.keys);
    /* resumed at batch 4: the 8 images done are 2 batches, so 2 of the 4 steps remain */
    g_hostile_ckpt = ckpt;
    EXPECT_OUTPUT(resume_hostile, data, "resume: the global batch was 8 images, now 4: batch 1 of epoch 0 becomes batch 2");
    hostile_cfg(&now, data);
    now.batch = 4;
    snprintf(now.resume, sizeof now.resume, "%s", ckpt);
    dt_set_quiet(1);
    rc = dt_train_run(&now, &r, &err);
    EXPECT_MSG(rc == 0, "%s", err.msg);
    EXPECT_EQ_INT(r.steps, 2);
    dt_train_result_free(&r);
}

/* ---- a new user's first hour: a mistyped key, --keys, the run length, no GPU ---- */

DT_TEST(config_unknown_key_names_the_closest) {
    /* The error listed all keys; now the closest by edit distance, substring or help words. */
    struct {
        const char *kv, *msg;
    } cases[] = {
        {"bach=8", "unknown key 'bach' (did you mean batch? build/train --keys lists all"},
        {"epoch=3", "did you mean epochs?"},
        {"Batch_Size=8", "did you mean batch"},
        {"learning_rate=0.1", "did you mean lr"},
        {"lr_warmup=5", "did you mean warmup"},
        {"zzzzqqq=1", "unknown key 'zzzzqqq' (no key is close to it; build/train --keys lists all"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        dt_train_cfg c;
        dt_config_defaults(&c);
        dt_err err;
        EXPECT_MSG(dt_config_set(&c, cases[i].kv, &err) != 0, "%s was accepted", cases[i].kv);
        EXPECT_MSG(strstr(err.msg, cases[i].msg), "%s: message '%s'", cases[i].kv, err.msg);
        EXPECT_MSG(strlen(err.msg) < 160, "%s: message of %zu bytes: '%s'", cases[i].kv, strlen(err.msg), err.msg);
    }
    /* a long unknown key: no suggestion, no overflow */
    char kv[400];
    memset(kv, 'k', 300);
    strcpy(kv + 300, "=1");
    dt_train_cfg c;
    dt_config_defaults(&c);
    dt_err err;
    EXPECT(dt_config_set(&c, kv, &err) != 0 && strstr(err.msg, "no key is close to it"));
}

static char *help_text(void) {
    char *help = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&help, &n);
    dt_config_help(f);
    fclose(f);
    return help;
}

DT_TEST(config_keys_prints_integers_as_integers) {
    /* --keys printed 0..1.07374e+09 for integer ranges */
    char *help = help_text();
    const char *want[][2] = {{"max_val_batches", "0..1073741824"}, {"steps", "0..1000000000000000"},
                             {"seed", "0..18446744073709551615"}, {"image_size", "32..1024"}, {"lr", "0..1e+06"},
                             {"crop_scale_min", "0.01..1"}};
    int found[6] = {0};
    char *copy = strdup(help);
    for (char *l = strtok(copy, "\n"); l; l = strtok(NULL, "\n")) {
        char key[64], dom[64];
        if (l[2] == ' ' || sscanf(l, " %63s %63s", key, dom) != 2) continue;
        for (int i = 0; i < 6; i++) found[i] |= !strcmp(key, want[i][0]) && !strcmp(dom, want[i][1]);
    }
    free(copy);
    for (int i = 0; i < 6; i++) EXPECT_MSG(found[i], "no '%s %s' in --keys", want[i][0], want[i][1]);
    /* the columns line up and lines stay short (they ran to 274 characters): every key's line
     * starts its default at one column; the help wraps under its own column */
    int col = -1, ok = 1;
    size_t longest = 0;
    for (char *l = strtok(help, "\n"); l; l = strtok(NULL, "\n")) {
        if (strlen(l) > longest) longest = strlen(l);
        char *d = strstr(l, "  default ");
        if (!d) continue;
        if (col < 0) col = (int)(d - l);
        ok &= (int)(d - l) == col;
    }
    EXPECT_MSG(ok && col > 0, "the defaults do not line up");
    EXPECT_MSG(longest <= 112, "a --keys line of %zu characters", longest);
    free(help);
}

DT_TEST(config_cli_epochs_clears_the_files_steps) {
    /* RUN_ARGS="epochs=1" on a config with steps=240 was silently a 240-step run */
    struct {
        int64_t file_steps;
        const char *args[2];
        int64_t steps;
        int epochs;
        const char *note;
    } cases[] = {
        {240, {"epochs=1", NULL}, 0, 1, "epochs=1 on the command line replaces the config's steps=240: the run is 1 epoch"},
        {240, {"epochs=3", "steps=50"}, 50, 3, "steps=50 and epochs=3 on the command line: steps governs (50 steps"},
        {0, {"steps=100", "epochs=2"}, 100, 2, "steps=100 and epochs=2 on the command line: steps governs"},
        {240, {"steps=0", "epochs=2"}, 0, 2, ""},
        {0, {"epochs=3", NULL}, 0, 3, ""},
        {240, {"lr=0.2", NULL}, 240, 1, ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        dt_train_cfg c;
        dt_config_defaults(&c);
        c.steps = cases[i].file_steps;
        char note[256];
        dt_err err;
        int n = cases[i].args[1] ? 2 : 1;
        EXPECT_MSG(dt_config_override(&c, n, (char *const *)cases[i].args, note, sizeof note, &err) == 0, "%s", err.msg);
        EXPECT_MSG(c.steps == cases[i].steps && c.epochs == cases[i].epochs, "%s: steps %lld epochs %d", cases[i].args[0],
                   (long long)c.steps, c.epochs);
        EXPECT_MSG(cases[i].note[0] ? strstr(note, cases[i].note) != NULL : !note[0], "%s: note '%s'", cases[i].args[0], note);
    }
    /* a bad override is an error naming it, and the ones after it are not applied */
    dt_train_cfg c;
    dt_config_defaults(&c);
    char note[256];
    dt_err err;
    char *const bad[] = {"lr=fast", "batch=9"};
    EXPECT(dt_config_override(&c, 2, bad, note, sizeof note, &err) != 0 && strstr(err.msg, "bad value 'fast' for 'lr'"));
    EXPECT_EQ_INT(c.batch, 64);
}

static void cli_epochs_over_steps(void *a) {
    (void)a;
    const char *t = "device = cpu\nsteps = 240\ndata = /nonexistent/imagenet\n";
    char *argv[] = {"train", (char *)write_cfg("s.cfg", t, strlen(t)), "epochs=1"};
    exit(dt_train_cli(3, argv));
}

DT_TEST(config_cli_says_what_governs_the_run_length) {
    EXPECT_DEATH(cli_epochs_over_steps, NULL, "train: epochs=1 on the command line replaces the config's steps=240");
}

static void train_on_cuda(void *a) {
    (void)a;
    dt_train_cfg c;
    dt_config_defaults(&c);
    c.synthetic = 1;
    dt_train_result r;
    dt_err err;
    int rc = dt_train_run(&c, &r, &err);
    fprintf(stderr, "%s\n", err.msg);
    exit(rc);
}
static void devices_cli(void *a) {
    (void)a;
    char *argv[] = {"train", "--devices"};
    exit(dt_train_cli(2, argv));
}

/* Without a GPU, make run said "use device=cpu", which trains the GPU config's full-width model
 * on the CPU (~10 h); it points at the CPU config. --devices is what make reproduce asks. */
DT_TEST(config_no_gpu_points_at_the_cpu_config) {
    if (dt_gpu_count() > 0) {
        EXPECT_OUTPUT(devices_cli, NULL, "CUDA GPU");
        return;
    }
    EXPECT_DEATH(train_on_cuda, NULL, "train on the CPU with a config made for it, configs/sample_cpu.cfg (make run "
                                      "RUN_CONFIG=configs/sample_cpu.cfg)");
    EXPECT_DEATH(devices_cli, NULL, "no CUDA GPU");
}

/* gpu_decoders: 1 .. 8, and at most prefetch - 1 (the loader's rule, checked before a loader is
 * made), the refusal naming both keys. */
DT_TEST(config_gpu_decoders_range_and_prefetch) {
    dt_train_cfg c;
    dt_config_defaults(&c);
    dt_err err;
    EXPECT_EQ_INT(c.gpu_decoders, 2);
    EXPECT_EQ_INT(c.prefetch, 4);
    const char *bad[] = {"gpu_decoders=0", "gpu_decoders=9"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        EXPECT_MSG(dt_config_set(&c, bad[i], &err) != 0, "%s was accepted", bad[i]);
        EXPECT_MSG(strstr(err.msg, "gpu_decoders"), "%s: message '%s'", bad[i], err.msg);
    }
    EXPECT_EQ_INT(c.gpu_decoders, 2);
    EXPECT_EQ_INT(dt_config_set(&c, "synthetic=1", &err), 0);
    EXPECT_EQ_INT(dt_config_set(&c, "gpu_decoders=3", &err), 0);
    EXPECT_MSG(dt_config_check(&c, &err) == 0, "%s", err.msg);
    EXPECT_EQ_INT(dt_config_set(&c, "gpu_decoders=4", &err), 0);
    EXPECT(dt_config_check(&c, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "gpu_decoders=4 needs prefetch=5 or more") && strstr(err.msg, "prefetch=4"), "%s",
               err.msg);
    EXPECT_EQ_INT(dt_config_set(&c, "prefetch=5", &err), 0);
    EXPECT_MSG(dt_config_check(&c, &err) == 0, "%s", err.msg);
    EXPECT_EQ_INT(dt_config_set(&c, "gpu_decoders=8", &err), 0);
    EXPECT(dt_config_check(&c, &err) != 0 && strstr(err.msg, "prefetch=9"));
}
