/* The data pipeline against hostile or broken inputs: symlink loops and duplicate paths in
 * the dataset tree. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dt_dataset.h"
#include "dt_test.h"
#include "dt_timer.h"

static const char *tp(const char *rel) {
    static char buf[8][1024];
    static int k;
    char *p = buf[k++ & 7];
    snprintf(p, sizeof buf[0], "%s/%s", dt_test_tmpdir(), rel);
    return p;
}

/* Makes each folder of a '/'-separated relative path. */
static void mkdirs(const char *rel) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", tp(rel));
    EXPECT_EQ_INT(system(cmd), 0);
}

static void touch(const char *rel) {
    FILE *f = fopen(tp(rel), "w");
    EXPECT_MSG(f != NULL, "cannot create %s", tp(rel));
    if (f) fclose(f);
}

static void link_to(const char *target, const char *rel) { EXPECT_EQ_INT(symlink(target, tp(rel)), 0); }

/* Opens root/train and checks the image count; returns 0 when it opened. */
static int open_count(const char *root, dt_dataset *ds, int64_t want) {
    dt_err err;
    int rc = dt_dataset_open(ds, tp(root), "train", NULL, &err);
    EXPECT_MSG(rc == 0, "%s: %s", root, err.msg);
    if (rc) return rc;
    EXPECT_MSG(ds->count == want, "%s: %lld images, expected %lld", root, (long long)ds->count, (long long)want);
    return 0;
}

DT_TEST(data_scan_symlink_loops_and_duplicates_count_once) {
    dt_dataset ds;
    /* `ln -s . loop` in a class: the old scan found a/1.jpg, a/loop/1.jpg, ... 17 times */
    mkdirs("r1/train/a");
    mkdirs("r1/train/b");
    touch("r1/train/a/1.jpg");
    touch("r1/train/b/2.jpg");
    link_to(".", "r1/train/a/loop");
    if (open_count("r1", &ds, 2) == 0) {
        EXPECT_EQ_INT(ds.dup_dirs, 1);
        EXPECT_EQ_INT(ds.labels[0], 0);
        EXPECT_EQ_INT(ds.labels[1], 1);
        dt_dataset_close(&ds);
    }
    /* a link up into the split: b/up/a/1.jpg was labelled b */
    link_to("..", "r1/train/b/up");
    if (open_count("r1", &ds, 2) == 0) {
        EXPECT_MSG(!strstr(ds.paths[1], "/up/"), "class b holds %s", ds.paths[1]);
        EXPECT_EQ_INT(ds.class_count[0], 1);
        EXPECT_EQ_INT(ds.class_count[1], 1);
        dt_dataset_close(&ds);
    }
    /* a link into another class (a later and an earlier one) */
    link_to("../b", "r1/train/a/tob");
    link_to("../a", "r1/train/b/toa");
    if (open_count("r1", &ds, 2) == 0) {
        EXPECT_EQ_INT(ds.class_count[0], 1);
        EXPECT_EQ_INT(ds.class_count[1], 1);
        dt_dataset_close(&ds);
    }
    /* two and three self-links: 1 image became 131,072 samples; three ran for minutes */
    mkdirs("r2/train/a");
    touch("r2/train/a/1.jpg");
    link_to(".", "r2/train/a/l1");
    link_to(".", "r2/train/a/l2");
    if (open_count("r2", &ds, 1) == 0) dt_dataset_close(&ds);
    link_to(".", "r2/train/a/l3");
    link_to("..", "r2/train/a/l4");
    double t0 = dt_now_ms();
    if (open_count("r2", &ds, 1) == 0) {
        EXPECT_EQ_INT(ds.dup_dirs, 4);
        dt_dataset_close(&ds);
    }
    EXPECT_MSG(dt_now_ms() - t0 < 1000, "the scan with three self-links took %.0f ms", dt_now_ms() - t0);
    /* two links to one folder outside the split, and a link to a file: each file once, under
     * the first path in name order */
    mkdirs("shared");
    touch("shared/s.jpg");
    mkdirs("r3/train/a");
    touch("r3/train/a/1.jpg");
    link_to("../../../shared", "r3/train/a/q");
    link_to("../../../shared", "r3/train/a/p");
    link_to("1.jpg", "r3/train/a/x.jpg");
    if (open_count("r3", &ds, 2) == 0) {
        EXPECT_MSG(strstr(ds.paths[0], "/a/1.jpg") != NULL, "first path %s", ds.paths[0]);
        EXPECT_MSG(strstr(ds.paths[1], "/a/p/s.jpg") != NULL, "second path %s", ds.paths[1]);
        EXPECT_EQ_INT(ds.dup_dirs, 1);
        EXPECT_EQ_INT(ds.dup_files, 1);
        dt_dataset_close(&ds);
    }
    /* a class folder that is a link to another class: its files are counted under the first */
    mkdirs("r4/train/a");
    touch("r4/train/a/1.jpg");
    link_to("a", "r4/train/b");
    if (open_count("r4", &ds, 1) == 0) {
        EXPECT_EQ_INT(ds.num_classes, 2);
        EXPECT_EQ_INT(ds.class_count[1], 0);
        EXPECT_EQ_INT(ds.empty_classes, 1);
        dt_dataset_close(&ds);
    }
}
