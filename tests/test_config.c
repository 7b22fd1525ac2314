/* The config parser as untrusted input: lines of any length (a long comment's tail is never
 * read as a setting), NaN and infinities fail every numeric range, a folder, /dev/zero, an
 * over-large file, a NUL or another control byte are errors naming the file and line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_config.h"
#include "dt_test.h"
#include "dt_trainer.h"
#include "train_cli.h"

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
        if (sscanf(line, " %63s %63s", key, dom) != 2 || !strstr(dom, "..")) continue;
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
 * the error lists the valid keys. */
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
