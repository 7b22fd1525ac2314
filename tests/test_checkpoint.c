/* Checkpoints as untrusted input: crafted files (a tensor count of 0xFFFFFFFF, lengths far
 * past the end, element counts that overflow, every one-bit flip of a real checkpoint) are
 * "corrupt checkpoint" errors, never a huge allocation or a read outside the file (run under
 * `make test SAN=1` to have ASan watch); the start-up checks of a checkpoint path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dt_checkpoint.h"
#include "dt_test.h"

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
