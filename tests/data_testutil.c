#include "data_testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dt_file.h"
#include "dt_synth.h"
#include "dt_test.h"

const char *dt_test_path(const char *rel) {
    static char buf[8][1024];
    static int k;
    char *p = buf[k++ & 7];
    snprintf(p, sizeof buf[0], "%s/%s", dt_test_tmpdir(), rel);
    return p;
}

void dt_test_mkdirs(const char *rel) {
    char p[1024];
    snprintf(p, sizeof p, "%s", dt_test_path(rel));
    for (char *s = p + strlen(dt_test_tmpdir()) + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            mkdir(p, 0777);
            *s = '/';
        }
    mkdir(p, 0777);
}

void dt_test_write_file(const char *rel, const void *data, size_t n) {
    FILE *f = fopen(dt_test_path(rel), "wb");
    EXPECT_MSG(f != NULL, "cannot create %s", dt_test_path(rel));
    if (!f) return;
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

void dt_test_touch(const char *rel) { dt_test_write_file(rel, NULL, 0); }

unsigned char *dt_test_read_file(const char *rel, size_t *n) {
    dt_scratch b = {0};
    dt_err err;
    if (dt_file_read(dt_test_path(rel), "", (size_t)1 << 30, &b, n, &err)) dt_fatal("%s", err.msg);
    return b.p;
}

const char *dt_test_shapes(const char *rel, int classes, int train_per_class, int val_per_class, int size) {
    const char *path = dt_test_path(rel);
    struct stat st;
    if (stat(path, &st) == 0) return path;
    dt_synth_opts o;
    dt_synth_default_opts(&o);
    o.out = path;
    o.classes = classes;
    o.train_per_class = train_per_class;
    o.val_per_class = val_per_class;
    o.width = o.height = size;
    o.quiet = 1;
    o.threads = 2;
    dt_err err;
    if (dt_synth_write(&o, NULL, &err)) dt_fatal("making the test dataset: %s", err.msg);
    return path;
}
