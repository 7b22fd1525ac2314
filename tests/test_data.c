/* Data pipeline tests: folder scanning and labels, decoding of every format and of broken
 * files, the transforms (crop boxes, resampling, normalization), the loader (determinism
 * across thread counts, epochs, cache, skipped files, shutdown) and the sample-dataset
 * generator. All on small generated trees in the test's temp folder. */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/train_testutil.h"
#include "tests/data_testutil.h"
#include "data/dt_dataset.h"
#include "data/dt_image.h"
#include "data/dt_loader.h"
#include "ops/dt_ops.h"
#include "data/dt_synth.h"
#include "tests/dt_test.h"
#include "core/dt_timer.h"
#include "train/dt_trainer.h"
#include "data/dt_transform.h"

/* ---- helpers ---- */

static void write_noise_png(const char *rel, int w, int h, int comp) {
    uint8_t *p = malloc((size_t)w * h * comp);
    for (int i = 0; i < w * h * comp; i++) p[i] = (uint8_t)dt_rng_u64(dt_test_rng());
    dt_err err;
    EXPECT_EQ_INT(dt_image_write_png(dt_test_path(rel), w, h, comp, p, &err), 0);
    free(p);
}

static void write_random_bytes(const char *rel, size_t n) {
    uint8_t *p = malloc(n);
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)dt_rng_u64(dt_test_rng());
    dt_test_write_file(rel, p, n);
    free(p);
}

/* Copies the first `keep` bytes of file a to b (a truncated download). */
static void truncate_copy(const char *a, const char *b, long keep) {
    FILE *f = fopen(dt_test_path(a), "rb");
    char *buf = calloc(1, (size_t)keep);
    size_t got = f ? fread(buf, 1, (size_t)keep, f) : 0;
    if (f) fclose(f);
    EXPECT_EQ_INT(got, keep);
    dt_test_write_file(b, buf, got);
    free(buf);
}

/* A 16-bit RGB PNG, written by hand (stb_image_write only writes 8-bit). */
static void write_png16(const char *rel, int w, int h, const uint16_t *rgb) {
    size_t row = 1 + (size_t)w * 6, raw_n = row * h;
    uint8_t *raw = malloc(raw_n);
    for (int y = 0; y < h; y++) {
        raw[y * row] = 0; /* filter: none */
        for (int i = 0; i < w * 3; i++) {
            raw[y * row + 1 + 2 * i] = (uint8_t)(rgb[y * w * 3 + i] >> 8);
            raw[y * row + 2 + 2 * i] = (uint8_t)rgb[y * w * 3 + i];
        }
    }
    dt_test_buf b = {0};
    dt_test_png_begin(&b, (uint32_t)w, (uint32_t)h, 16, 2, 0);
    dt_test_png_idat(&b, raw, raw_n);
    dt_test_png_end(&b);
    dt_test_write_file(rel, b.p, b.n);
    free(b.p);
    free(raw);
}

/* A small shapes dataset under tmp/name (train: classes x ntrain, val: classes x nval). */
static int make_shapes(const char *name, int classes, int ntrain, int nval, int size) {
    dt_synth_opts o;
    dt_synth_default_opts(&o);
    o.out = dt_test_path(name);
    o.classes = classes;
    o.train_per_class = ntrain;
    o.val_per_class = nval;
    o.width = o.height = size;
    o.seed = 7;
    o.threads = 2;
    o.quiet = 1;
    dt_err err;
    int rc = dt_synth_write(&o, NULL, &err);
    EXPECT_MSG(rc == 0, "mkdata failed: %s", err.msg);
    return rc;
}

/* All batches of one epoch, concatenated: images [n_total, S, S, 3] u8, labels, batch sizes. */
typedef struct {
    uint8_t *images;
    int32_t *labels;
    int *sizes;
    int64_t n, nb;
} epoch_dump;

static epoch_dump run_epoch(dt_loader *l, int epoch, int S) {
    epoch_dump d = {0};
    size_t per = (size_t)S * S * 3;
    d.images = malloc(per * (size_t)dt_loader_size(l));
    d.labels = malloc(sizeof(int32_t) * (size_t)dt_loader_size(l));
    d.sizes = malloc(sizeof(int) * (size_t)dt_loader_batches(l));
    dt_loader_start_epoch(l, epoch);
    dt_batch b = {0}, prev = {0};
    int rc;
    while ((rc = dt_loader_next(l, &b)) == 1) {
        EXPECT_EQ_INT(b.index, d.nb);
        memcpy(d.images + d.n * per, b.images, per * (size_t)b.n);
        memcpy(d.labels + d.n, b.labels, sizeof(int32_t) * (size_t)b.n);
        d.sizes[d.nb++] = b.n;
        d.n += b.n;
        /* the training loop's pattern: release the previous batch after fetching the next */
        dt_loader_release(l, &prev);
        prev = b;
    }
    dt_loader_release(l, &prev);
    EXPECT_EQ_INT(rc, 0);
    EXPECT_EQ_INT(d.nb, dt_loader_batches(l));
    return d;
}

static void free_dump(epoch_dump *d) {
    free(d->images);
    free(d->labels);
    free(d->sizes);
}

static int same_dump(const epoch_dump *a, const epoch_dump *b, int S) {
    return a->n == b->n && a->nb == b->nb && !memcmp(a->labels, b->labels, sizeof(int32_t) * (size_t)a->n) &&
           !memcmp(a->sizes, b->sizes, sizeof(int) * (size_t)a->nb) &&
           !memcmp(a->images, b->images, (size_t)S * S * 3 * (size_t)a->n);
}

/* ---- scanning ---- */

DT_TEST(data_scan_sorted_classes_and_exact_labels) {
    /* "cat" is a prefix of "cats": both must be classes with their own labels. "Zebra" sorts
     * first (bytewise, like Python's sorted). */
    const char *classes[] = {"dog", "cats", "cat", "Zebra"};
    for (int i = 0; i < 4; i++) {
        char d[64];
        snprintf(d, sizeof d, "root/train/%s", classes[i]);
        dt_test_mkdirs(d);
    }
    dt_test_touch("root/train/cat/b.jpg");
    dt_test_touch("root/train/cat/a.JPG");
    dt_test_touch("root/train/cat/c.png");
    dt_test_touch("root/train/cat/notes.txt");    /* ignored: not an image extension */
    dt_test_touch("root/train/cat/.hidden.jpg");  /* ignored: hidden */
    dt_test_mkdirs("root/train/cat/sub");
    dt_test_touch("root/train/cat/sub/d.jpeg");   /* nested folders are walked, like ImageFolder */
    dt_test_touch("root/train/cats/x.bmp");
    dt_test_touch("root/train/cats/y.PNG");
    dt_test_touch("root/train/cats/w.gif");       /* ignored: not a format deftc decodes */
    dt_test_touch("root/train/dog/z.jpeg");
    dt_test_touch("root/train/Zebra/q.jpg");
    dt_test_touch("root/train/README.txt");       /* files directly in train/ are not classes */
    dt_test_mkdirs("root/train/.git");            /* hidden folders are not classes */
    dt_dataset ds;
    dt_err err;
    int rc = dt_dataset_open(&ds, dt_test_path("root"), "train", NULL, &err);
    EXPECT_MSG(rc == 0, "open failed: %s", err.msg);
    if (rc) return;
    EXPECT_EQ_INT(ds.num_classes, 4);
    const char *want[] = {"Zebra", "cat", "cats", "dog"};
    for (int c = 0; c < 4 && c < ds.num_classes; c++)
        EXPECT_MSG(!strcmp(ds.classes[c], want[c]), "class %d is %s, expected %s", c, ds.classes[c], want[c]);
    EXPECT_EQ_INT(ds.count, 8);
    EXPECT_EQ_INT(ds.skipped, 0);
    const char *files[] = {"Zebra/q.jpg", "cat/a.JPG", "cat/b.jpg", "cat/c.png", "cat/sub/d.jpeg",
                           "cats/x.bmp",  "cats/y.PNG", "dog/z.jpeg"};
    int labels[] = {0, 1, 1, 1, 1, 2, 2, 3};
    for (int i = 0; i < 8 && i < ds.count; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dt_test_path("root/train"), files[i]);
        EXPECT_MSG(!strcmp(ds.paths[i], p), "path %d is %s, expected %s", i, ds.paths[i], p);
        EXPECT_EQ_INT(ds.labels[i], labels[i]);
    }
    /* val with the same classes gets the train labels */
    for (int i = 0; i < 4; i++) {
        char d[64], f[64];
        snprintf(d, sizeof d, "root/val/%s", want[i]);
        dt_test_mkdirs(d);
        snprintf(f, sizeof f, "root/val/%s/v%d.jpg", want[i], i);
        dt_test_touch(f);
    }
    dt_dataset val;
    rc = dt_dataset_open(&val, dt_test_path("root"), "val", &ds, &err);
    EXPECT_MSG(rc == 0, "val open failed: %s", err.msg);
    if (!rc) {
        EXPECT_EQ_INT(val.count, 4);
        for (int i = 0; i < 4 && i < val.count; i++) EXPECT_EQ_INT(val.labels[i], i);
        dt_dataset_close(&val);
    }
    dt_dataset_close(&ds);
}

DT_TEST(data_scan_errors_name_the_problem) {
    dt_dataset ds, tr;
    dt_err err;
    /* missing root */
    EXPECT(dt_dataset_open(&ds, dt_test_path("nope"), "train", NULL, &err) != 0);
    EXPECT_MSG(strstr(err.msg, dt_test_path("nope")) && strstr(err.msg, "No such file"), "message: %s", err.msg);
    /* root without the split folder */
    dt_test_mkdirs("r1");
    EXPECT(dt_dataset_open(&ds, dt_test_path("r1"), "train", NULL, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "has no train/ folder"), "message: %s", err.msg);
    /* split folder without class folders */
    dt_test_mkdirs("r2/train");
    dt_test_touch("r2/train/img.jpg");
    EXPECT(dt_dataset_open(&ds, dt_test_path("r2"), "train", NULL, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "no class folders in") && strstr(err.msg, "r2/train"), "message: %s", err.msg);
    /* classes, but no images anywhere */
    dt_test_mkdirs("r3/train/a");
    dt_test_mkdirs("r3/train/b");
    dt_test_touch("r3/train/a/x.txt");
    EXPECT(dt_dataset_open(&ds, dt_test_path("r3"), "train", NULL, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "no images in") && strstr(err.msg, "2 class folders, all empty"), "message: %s",
               err.msg);
    /* val classes differing from train */
    dt_test_mkdirs("r4/train/cat");
    dt_test_mkdirs("r4/train/cats");
    dt_test_mkdirs("r4/train/dog");
    dt_test_touch("r4/train/cat/1.jpg");
    dt_test_touch("r4/train/cats/1.jpg");
    dt_test_touch("r4/train/dog/1.jpg");
    dt_test_mkdirs("r4/val/cat");
    dt_test_mkdirs("r4/val/dog");
    dt_test_mkdirs("r4/val/bird");
    EXPECT_EQ_INT(dt_dataset_open(&tr, dt_test_path("r4"), "train", NULL, &err), 0);
    EXPECT(dt_dataset_open(&ds, dt_test_path("r4"), "val", &tr, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "missing in val: cats") && strstr(err.msg, "extra in val: bird") &&
                   strstr(err.msg, "r4/val"),
               "message: %s", err.msg);
    dt_dataset_close(&tr);
}

DT_TEST(data_scan_speed) {
    /* Scanning must be readdir-only: 2000 empty files in 20 classes (build/loaderbench
     * --scan-test N measures bigger trees; docs/data.md has the numbers). */
    int n = 2000, classes = 20;
    dt_test_mkdirs("big/train");
    for (int c = 0; c < classes; c++) {
        char d[64];
        snprintf(d, sizeof d, "big/train/n%04d", c);
        dt_test_mkdirs(d);
    }
    for (int i = 0; i < n; i++) {
        char f[96];
        snprintf(f, sizeof f, "big/train/n%04d/img_%06d.JPEG", i % classes, i);
        int fd = open(dt_test_path(f), O_CREAT | O_WRONLY, 0644);
        if (fd >= 0) close(fd);
    }
    dt_dataset ds;
    dt_err err;
    double t0 = dt_now_ms();
    int rc = dt_dataset_open(&ds, dt_test_path("big"), "train", NULL, &err);
    double ms = dt_now_ms() - t0;
    EXPECT_MSG(rc == 0, "%s", err.msg);
    if (rc) return;
    EXPECT_EQ_INT(ds.count, n);
    EXPECT_EQ_INT(ds.num_classes, classes);
    double rate = n / (ms / 1e3);
    if (dt_test_verbose()) printf("    scan: %d files in %.2f ms = %.0f files/s\n", n, ms, rate);
    /* ~1M files/s measured; 20k/s would mean a per-file syscall crept in */
    EXPECT_MSG(rate > 20000, "scan of %d files took %.1f ms (%.0f files/s)", n, ms, rate);
    dt_dataset_close(&ds);
}

/* ---- decoding ---- */

DT_TEST(data_decode_formats_to_rgb) {
    dt_err err;
    dt_image im;
    /* gray, gray+alpha, RGB, RGBA PNGs: exact values, alpha dropped */
    uint8_t px[4 * 3 * 4];
    for (int i = 0; i < (int)sizeof px; i++) px[i] = (uint8_t)(i * 7 + 3);
    for (int comp = 1; comp <= 4; comp++) {
        char name[32];
        snprintf(name, sizeof name, "c%d.png", comp);
        EXPECT_EQ_INT(dt_image_write_png(dt_test_path(name), 4, 3, comp, px, &err), 0);
        int rc = dt_image_load(dt_test_path(name), &im, NULL, &err);
        EXPECT_MSG(rc == 0, "%s", err.msg);
        if (rc) continue;
        EXPECT_EQ_INT(im.w, 4);
        EXPECT_EQ_INT(im.h, 3);
        int bad = 0;
        for (int i = 0; i < 12; i++)
            for (int c = 0; c < 3; c++) {
                int want = comp <= 2 ? px[i * comp] : px[i * comp + c];
                bad += im.pix[i * 3 + c] != want;
            }
        EXPECT_MSG(bad == 0, "%d wrong values decoding a %d-channel PNG", bad, comp);
        dt_image_free(&im);
    }
    /* 16-bit PNG: reduced to the high byte */
    uint16_t p16[2 * 2 * 3];
    for (int i = 0; i < 12; i++) p16[i] = (uint16_t)(0x1234 + i * 0x1111);
    write_png16("deep.png", 2, 2, p16);
    int rc = dt_image_load(dt_test_path("deep.png"), &im, NULL, &err);
    EXPECT_MSG(rc == 0, "16-bit PNG: %s", err.msg);
    if (!rc) {
        for (int i = 0; i < 12; i++) EXPECT_EQ_INT(im.pix[i], p16[i] >> 8);
        dt_image_free(&im);
    }
    /* Adam7-interlaced, 8-bit gray + alpha and 1-bit gray (the passes written by hand): the same
     * pixels as stored, each pass laid over the rows before */
    static const int pass[7][4] = {{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4},
                                   {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}}; /* x0, y0, dx, dy */
    for (int depth = 8; depth >= 1; depth -= 7) {
        int w = 13, h = 11, ch = depth == 8 ? 2 : 1;
        uint8_t raw[4096];
        size_t n = 0;
        for (int k = 0; k < 7; k++)
            for (int y = pass[k][1]; y < h && pass[k][0] < w; y += pass[k][3]) {
                raw[n++] = 0; /* filter: none */
                int bits = 0;
                for (int x = pass[k][0]; x < w; x += pass[k][2]) {
                    int v = (x * 19 + y * 7) & 255;
                    if (depth == 8) raw[n++] = (uint8_t)v, raw[n++] = (uint8_t)(255 - v);
                    else {
                        if (bits % 8 == 0) raw[n++] = 0;
                        raw[n - 1] |= (uint8_t)((v >> 7) << (7 - bits % 8));
                        bits++;
                    }
                }
            }
        dt_test_buf b = {0};
        dt_test_png_begin(&b, (uint32_t)w, (uint32_t)h, depth, depth == 8 ? 4 : 0, 1);
        dt_test_png_idat(&b, raw, n);
        dt_test_png_end(&b);
        int rc = dt_image_decode(b.p, b.n, "adam7.png", DT_IMAGE_MAX_PIXELS, 1.0, &im, &err);
        EXPECT_MSG(rc == 0, "interlaced %d-bit PNG: %s", depth, err.msg);
        int bad = 0;
        for (int y = 0; !rc && y < h; y++)
            for (int x = 0; x < w; x++) {
                int v = (x * 19 + y * 7) & 255, want = depth == 8 ? v : (v >> 7) * 255;
                for (int c = 0; c < 3; c++) bad += im.pix[(y * w + x) * 3 + c] != want;
            }
        EXPECT_MSG(bad == 0, "%d wrong values decoding an interlaced %d-bit PNG (%d channel)", bad, depth, ch);
        if (!rc) dt_image_free(&im);
        free(b.p);
    }
    /* JPEG of a flat colour: close to it; BMP and TGA exact */
    uint8_t flat[16 * 16 * 3];
    for (int i = 0; i < 16 * 16; i++) flat[i * 3] = 200, flat[i * 3 + 1] = 40, flat[i * 3 + 2] = 90;
    EXPECT_EQ_INT(dt_image_write_jpg(dt_test_path("flat.jpg"), 16, 16, 3, flat, 95, &err), 0);
    rc = dt_image_load(dt_test_path("flat.jpg"), &im, NULL, &err);
    EXPECT_MSG(rc == 0, "%s", err.msg);
    if (!rc) {
        EXPECT_NEAR(im.pix[0], 200, 4);
        EXPECT_NEAR(im.pix[1], 40, 4);
        EXPECT_NEAR(im.pix[2], 90, 4);
        dt_image_free(&im);
    }
    /* grayscale JPEG -> 3 equal channels */
    uint8_t g[16 * 16];
    memset(g, 77, sizeof g);
    EXPECT_EQ_INT(dt_image_write_jpg(dt_test_path("gray.jpg"), 16, 16, 1, g, 95, &err), 0);
    rc = dt_image_load(dt_test_path("gray.jpg"), &im, NULL, &err);
    EXPECT_MSG(rc == 0, "%s", err.msg);
    if (!rc) {
        EXPECT(im.pix[0] == im.pix[1] && im.pix[1] == im.pix[2]);
        EXPECT_NEAR(im.pix[0], 77, 3);
        dt_image_free(&im);
    }
}

DT_TEST(data_decode_broken_files_fail_cleanly) {
    dt_err err;
    dt_image im;
    write_random_bytes("noise.jpg", 3000);
    EXPECT(dt_image_load(dt_test_path("noise.jpg"), &im, NULL, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "cannot decode") && strstr(err.msg, "noise.jpg"), "message: %s", err.msg);
    EXPECT(im.pix == NULL);
    const char *text = "this is not an image, just text with a .jpg name\n";
    dt_test_write_file("text.jpg", text, strlen(text));
    EXPECT(dt_image_load(dt_test_path("text.jpg"), &im, NULL, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "text.jpg"), "message: %s", err.msg);
    write_noise_png("full.png", 64, 64, 3);
    truncate_copy("full.png", "trunc.png", 2000);
    EXPECT(dt_image_load(dt_test_path("trunc.png"), &im, NULL, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "trunc.png"), "message: %s", err.msg);
    dt_test_touch("empty.png");
    EXPECT(dt_image_load(dt_test_path("empty.png"), &im, NULL, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "empty file"), "message: %s", err.msg);
    EXPECT(dt_image_load(dt_test_path("missing.png"), &im, NULL, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "cannot open") && strstr(err.msg, "missing.png"), "message: %s", err.msg);
    /* a truncated JPEG must not crash (stb may return a partly grey image or an error) */
    uint8_t *px = malloc(64 * 64 * 3);
    for (int i = 0; i < 64 * 64 * 3; i++) px[i] = (uint8_t)dt_rng_u64(dt_test_rng());
    EXPECT_EQ_INT(dt_image_write_jpg(dt_test_path("full.jpg"), 64, 64, 3, px, 90, &err), 0);
    free(px);
    truncate_copy("full.jpg", "trunc.jpg", 1500);
    if (dt_image_load(dt_test_path("trunc.jpg"), &im, NULL, &err) == 0) dt_image_free(&im);
}

/* ---- transforms ---- */

DT_TEST(data_rrc_boxes_respect_bounds) {
    dt_rng *r = dt_test_rng();
    int sizes[][2] = {{1000, 800}, {640, 480}, {480, 640}, {333, 999}, {64, 64}, {7, 5}, {1, 1}};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        int W = sizes[s][0], H = sizes[s][1], outside = 0, bad_scale = 0, bad_ratio = 0, flips_x = 0;
        int minx = W, maxx = 0;
        for (int i = 0; i < 5000; i++) {
            dt_box b = dt_rrc_box(W, H, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0, r);
            outside += b.x < 0 || b.y < 0 || b.w < 1 || b.h < 1 || b.x + b.w > W || b.y + b.h > H;
            if (b.x < minx) minx = b.x;
            if (b.x > maxx) maxx = b.x;
            flips_x += b.x > 0;
            /* bounds of a sampled box, widened by the rounding of w and h to integers */
            double area = (double)b.w * b.h / ((double)W * H);
            double tol_a = (1 + 0.5 / b.w) * (1 + 0.5 / b.h);
            bad_scale += area > 1.0 + 1e-12 || area < 0.08 / tol_a;
            double ratio = (double)b.w / b.h;
            int fallback = b.w == W || b.h == H; /* the whole side: possibly the fallback box */
            if (!fallback) bad_ratio += ratio < 0.75 * (b.w - 0.5) / b.w * b.h / (b.h + 0.5) ||
                                        ratio > 4.0 / 3.0 * (b.w + 0.5) / b.w * b.h / (b.h - 0.5);
        }
        EXPECT_MSG(outside == 0, "%dx%d: %d boxes outside the image", W, H, outside);
        EXPECT_MSG(bad_scale == 0, "%dx%d: %d boxes outside the scale range", W, H, bad_scale);
        EXPECT_MSG(bad_ratio == 0, "%dx%d: %d boxes outside the ratio range", W, H, bad_ratio);
        if (W >= 64) EXPECT_MSG(maxx - minx > W / 4, "%dx%d: x positions barely vary (%d..%d)", W, H, minx, maxx);
    }
    /* the fallback: a 1000x10 strip never fits a sampled box -> centered 13x10 (ratio 4/3) */
    for (int i = 0; i < 50; i++) {
        dt_box b = dt_rrc_box(1000, 10, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0, r);
        EXPECT_EQ_INT(b.w, 13);
        EXPECT_EQ_INT(b.h, 10);
        EXPECT_EQ_INT(b.x, (1000 - 13) / 2);
        EXPECT_EQ_INT(b.y, 0);
    }
    dt_box t = dt_rrc_box(10, 1000, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0, r);
    EXPECT_EQ_INT(t.w, 10);
    EXPECT_EQ_INT(t.h, 13);
    EXPECT_EQ_INT(t.y, (1000 - 13) / 2);
    /* the mean area of sampled boxes on a large image is near the middle of [0.08, 1]
     * (a little lower: boxes that do not fit are redrawn) */
    double sum = 0;
    for (int i = 0; i < 20000; i++) {
        dt_box b = dt_rrc_box(2000, 2000, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0, r);
        sum += (double)b.w * b.h / 4e6;
    }
    EXPECT_NEAR(sum / 20000, 0.50, 0.06);
}

DT_TEST(data_resize_shorter_side_matches_torchvision) {
    int w, h;
    dt_resize_shorter_dims(500, 375, 256, &w, &h);
    EXPECT_EQ_INT(w, 341); /* int(256 * 500 / 375) = int(341.33) */
    EXPECT_EQ_INT(h, 256);
    dt_resize_shorter_dims(375, 500, 256, &w, &h);
    EXPECT_EQ_INT(w, 256);
    EXPECT_EQ_INT(h, 341);
    dt_resize_shorter_dims(300, 300, 73, &w, &h);
    EXPECT_EQ_INT(w, 73);
    EXPECT_EQ_INT(h, 73);
    EXPECT_EQ_INT(dt_val_resize_size(224), 256);
    EXPECT_EQ_INT(dt_val_resize_size(64), 73);
    EXPECT_EQ_INT(dt_val_resize_size(80), 91);
}

/* The loader's former CPU normalization, from the u8 [n, S, S, 3] batch: out [n, 3, S, S] f32 CHW,
 * element by element as its lookup table was filled. */
static void old_normalize(const uint8_t *u8, int64_t n, int S, float *out) {
    for (int64_t i = 0; i < n; i++)
        for (int c = 0; c < 3; c++)
            for (int64_t p = 0; p < (int64_t)S * S; p++)
                out[(i * 3 + c) * S * S + p] =
                    ((float)u8[(i * S * S + p) * 3 + c] / 255.0f - dt_imagenet_mean[c]) / dt_imagenet_std[c];
}

/* dt_normalize_images on the CPU of u8 [n, S, S, 3] in (dtype, layout), back as logical values. */
static float *normalized(const uint8_t *u8, int64_t n, int S, dt_dtype dtype, dt_layout layout) {
    int64_t s[4] = {n, S, S, 3};
    dt_scope_begin();
    dt_tensor *x = dt_tensor_new_as(4, s, DT_CPU, DT_U8, DT_NCHW);
    memcpy(dt_data_u8(x), u8, (size_t)x->numel);
    float *v = dt_tensor_host_copy(dt_normalize_images(x, dt_imagenet_mean, dt_imagenet_std, dtype, layout));
    dt_scope_end();
    return v;
}

DT_TEST(data_normalize_constant_image_exact) {
    /* A constant colour survives any crop, resize and flip unchanged: every u8 output is the
     * colour, and every normalized value exactly (v / 255 - mean) / std of its channel. */
    int W = 53, H = 37, S = 24;
    uint8_t col[3] = {10, 128, 250};
    dt_image im = {W, H, malloc((size_t)W * H * 3)};
    for (int i = 0; i < W * H; i++) memcpy(im.pix + i * 3, col, 3);
    uint8_t *u8 = malloc((size_t)S * S * 3);
    dt_scratch sc = {0};
    float *out = NULL;
    for (int mode = 0; mode < 2; mode++) {
        dt_rng r;
        dt_rng_derive(&r, 1, 2, 3);
        dt_transform_plan p;
        if (mode == 0)
            dt_transform_plan_train(W, H, S, 0.08, &r, &p);
        else
            dt_transform_plan_val(W, H, S, &p);
        dt_transform_apply(&p, &im, S, u8, &sc);
        int bad = 0;
        for (int i = 0; i < S * S * 3; i++) bad += u8[i] != col[i % 3];
        EXPECT_MSG(bad == 0, "%s transform: %d pixels differ from the colour", mode ? "val" : "train", bad);
        free(out);
        out = normalized(u8, 1, S, DT_F32, DT_NCHW);
        bad = 0;
        for (int c = 0; c < 3; c++) {
            float want = ((float)col[c] / 255.0f - dt_imagenet_mean[c]) / dt_imagenet_std[c];
            for (int i = 0; i < S * S; i++) bad += out[c * S * S + i] != want;
        }
        EXPECT_MSG(bad == 0, "%s transform: %d values differ from (v/255 - mean)/std", mode ? "val" : "train", bad);
    }
    /* and the reference values themselves */
    EXPECT_NEAR(out[0], (10 / 255.0 - 0.485) / 0.229, 1e-5);
    EXPECT_NEAR(out[S * S], (128 / 255.0 - 0.456) / 0.224, 1e-5);
    EXPECT_NEAR(out[2 * S * S], (250 / 255.0 - 0.406) / 0.225, 1e-5);
    dt_scratch_free(&sc);
    free(out);
    free(u8);
    free(im.pix);
}

DT_TEST(data_loader_batch_normalizes_as_before) {
    /* The loader hands out u8 HWC pixels; dt_normalize_images must give exactly what the
     * loader's own CPU normalization gave (same fp32 arithmetic): bit for bit in f32 NCHW and
     * f32 NHWC, and bf16 NHWC rounded once from those values. Train (flips) and val batches. */
    if (make_shapes("shapes", 3, 10, 3, 40)) return;
    dt_dataset ds;
    dt_err err;
    EXPECT_EQ_INT(dt_dataset_open(&ds, dt_test_path("shapes"), "train", NULL, &err), 0);
    int S = 32;
    for (int train = 1; train >= 0; train--) {
        dt_loader_opts o = dt_loader_default_opts(train);
        o.batch = 5;
        o.image_size = S;
        o.seed = 7;
        o.workers = 2;
        dt_loader *l = dt_loader_new(&ds, &o, &err);
        EXPECT_MSG(l, "%s", err.msg);
        if (!l) break;
        epoch_dump d = run_epoch(l, 0, S);
        int64_t n = d.n, per = 3 * (int64_t)S * S;
        float *want = malloc(sizeof(float) * (size_t)(n * per));
        old_normalize(d.images, n, S, want);
        float *nchw = normalized(d.images, n, S, DT_F32, DT_NCHW), *nhwc = normalized(d.images, n, S, DT_F32, DT_NHWC);
        float *bf = normalized(d.images, n, S, DT_BF16, DT_NHWC);
        int64_t bad32 = 0, bad16 = 0, changed = 0;
        for (int64_t i = 0; i < n * per; i++) {
            bad32 += memcmp(&nchw[i], &want[i], 4) != 0 || memcmp(&nhwc[i], &want[i], 4) != 0;
            bad16 += bf[i] != dt_bf16_round(want[i]);
            changed += bf[i] != want[i];
        }
        EXPECT_MSG(bad32 == 0, "%s: %lld f32 values differ from the old normalization", train ? "train" : "val",
                   (long long)bad32);
        EXPECT_MSG(bad16 == 0, "%s: %lld bf16 values are not the old value rounded once", train ? "train" : "val",
                   (long long)bad16);
        EXPECT(changed > 0); /* bf16 did round */
        /* and the pixels are a real batch: not all one value */
        int64_t distinct = 0;
        for (int64_t i = 1; i < n * S * S * 3; i++) distinct += d.images[i] != d.images[0];
        EXPECT(distinct > 0);
        free(want), free(nchw), free(nhwc), free(bf);
        free_dump(&d);
        dt_loader_free(l);
    }
    dt_dataset_close(&ds);
}

DT_TEST(data_resample_copy_antialias_and_crop_identity) {
    dt_scratch sc = {0};
    int W = 40, H = 30;
    dt_image im = {W, H, malloc((size_t)W * H * 3)};
    for (int i = 0; i < W * H * 3; i++) im.pix[i] = (uint8_t)dt_rng_u64(dt_test_rng());
    /* scale 1: an exact copy (also of a crop) */
    uint8_t *o = malloc((size_t)W * H * 3);
    dt_image_resize(&im, W, H, o, &sc);
    EXPECT(!memcmp(o, im.pix, (size_t)W * H * 3));
    dt_axis_map cx = {10, 5.0, 0, 1.0, 5, 15}, cy = {12, 7.0, 0, 1.0, 7, 19};
    dt_image_resample(&im, &cx, &cy, o, &sc);
    int bad = 0;
    for (int y = 0; y < 12; y++) bad += memcmp(o + y * 10 * 3, im.pix + ((y + 7) * W + 5) * 3, 30) != 0;
    EXPECT_EQ_INT(bad, 0);
    /* antialiasing: 1-pixel black/white columns shrunk 8x average to grey (point sampling
     * would give pure black or white) */
    dt_image st = {256, 16, malloc(256 * 16 * 3)};
    for (int y = 0; y < 16; y++)
        for (int x = 0; x < 256; x++) memset(st.pix + (y * 256 + x) * 3, x & 1 ? 255 : 0, 3);
    uint8_t small[32 * 2 * 3];
    dt_image_resize(&st, 32, 2, small, &sc);
    int far = 0;
    for (int i = 0; i < 32 * 2 * 3; i++) far += abs(small[i] - 128) > 10;
    EXPECT_MSG(far == 0, "%d of %d values are not grey after an 8x shrink", far, 32 * 2 * 3);
    /* val geometry: one resample into the crop == full resize, then crop (bit-identical) */
    dt_image big = {517, 389, malloc(517 * 389 * 3)};
    for (int i = 0; i < 517 * 389 * 3; i++) big.pix[i] = (uint8_t)(dt_rng_u64(dt_test_rng()) & 0xff);
    int S = 64, R = dt_val_resize_size(S), rw, rh;
    dt_resize_shorter_dims(big.w, big.h, R, &rw, &rh);
    uint8_t *full = malloc((size_t)rw * rh * 3), *crop = malloc((size_t)S * S * 3);
    dt_image_resize(&big, rw, rh, full, &sc);
    dt_resize_center_crop(&big, big.w, big.h, R, S, crop, &sc);
    int left = (int)nearbyint((rw - S) / 2.0), top = (int)nearbyint((rh - S) / 2.0);
    bad = 0;
    for (int y = 0; y < S; y++) bad += memcmp(crop + y * S * 3, full + ((y + top) * rw + left) * 3, (size_t)S * 3) != 0;
    EXPECT_MSG(bad == 0, "%d rows of the one-pass center crop differ from resize-then-crop", bad);
    /* and the resized image, val-transformed again, gives the same crop (the cache's path) */
    dt_image small_img = {rw, rh, full};
    uint8_t *crop2 = malloc((size_t)S * S * 3);
    dt_resize_center_crop(&small_img, rw, rh, R, S, crop2, &sc);
    EXPECT(!memcmp(crop, crop2, (size_t)S * S * 3));
    free(crop2);
    free(full);
    free(crop);
    free(big.pix);
    free(st.pix);
    free(o);
    free(im.pix);
    dt_scratch_free(&sc);
}

/* ---- loader ---- */

DT_TEST(data_loader_deterministic_across_workers_and_epochs) {
    if (make_shapes("shapes", 3, 10, 3, 40)) return;
    dt_dataset ds;
    dt_err err;
    EXPECT_EQ_INT(dt_dataset_open(&ds, dt_test_path("shapes"), "train", NULL, &err), 0);
    EXPECT_EQ_INT(ds.count, 30);
    int S = 32;
    dt_loader_opts o = dt_loader_default_opts(1);
    o.batch = 4;
    o.image_size = S;
    o.seed = 1234;
    o.workers = 1;
    dt_loader *l1 = dt_loader_new(&ds, &o, &err);
    o.workers = 3;
    o.prefetch = 2; /* tight ring: workers block on slots, a different schedule */
    dt_loader *l3 = dt_loader_new(&ds, &o, &err);
    EXPECT(l1 && l3);
    if (!l1 || !l3) return;
    EXPECT_EQ_INT(dt_loader_batches(l1), 7); /* drop_last: 30 / 4 */
    epoch_dump a0 = run_epoch(l1, 0, S), b0 = run_epoch(l3, 0, S);
    epoch_dump a1 = run_epoch(l1, 1, S), b1 = run_epoch(l3, 1, S);
    EXPECT_MSG(same_dump(&a0, &b0, S), "epoch 0: 1 and 3 workers give different batches");
    EXPECT_MSG(same_dump(&a1, &b1, S), "epoch 1: 1 and 3 workers give different batches");
    EXPECT_EQ_INT(a0.n, 28);
    for (int i = 0; i < a0.nb; i++) EXPECT_EQ_INT(a0.sizes[i], 4);
    /* epochs differ in order (labels) and in augmentation (pixels) */
    EXPECT(memcmp(a0.labels, a1.labels, sizeof(int32_t) * 28) != 0);
    EXPECT(memcmp(a0.images, a1.images, (size_t)S * S * 3 * 28) != 0);
    /* a rerun of epoch 0 (after epoch 1) repeats it exactly */
    epoch_dump a0b = run_epoch(l3, 0, S);
    EXPECT_MSG(same_dump(&a0, &a0b, S), "epoch 0 run again differs");
    /* every label is a class */
    for (int i = 0; i < a0.n; i++) EXPECT(a0.labels[i] >= 0 && a0.labels[i] < 3);
    /* the shuffle is a permutation: each class appears about 28/3 times */
    int counts[3] = {0};
    for (int i = 0; i < a0.n; i++) counts[a0.labels[i]]++;
    for (int c = 0; c < 3; c++) EXPECT(counts[c] >= 8 && counts[c] <= 10);
    dt_loader_stats st = dt_loader_epoch_stats(l1);
    EXPECT_EQ_INT(st.skipped, 0);
    EXPECT_EQ_INT(st.images, 28);
    free_dump(&a0), free_dump(&b0), free_dump(&a1), free_dump(&b1), free_dump(&a0b);
    dt_loader_free(l1);
    dt_loader_free(l3);
    /* a different seed gives a different epoch 0 */
    o.seed = 99;
    dt_loader *l4 = dt_loader_new(&ds, &o, &err);
    epoch_dump c0 = run_epoch(l4, 0, S);
    o.seed = 1234;
    dt_loader *l5 = dt_loader_new(&ds, &o, &err);
    epoch_dump d0 = run_epoch(l5, 0, S);
    EXPECT(!same_dump(&c0, &d0, S));
    free_dump(&c0), free_dump(&d0);
    dt_loader_free(l4);
    dt_loader_free(l5);
    dt_dataset_close(&ds);
}

DT_TEST(data_loader_val_order_short_batch_and_cache) {
    if (make_shapes("shapes", 3, 2, 7, 48)) return;
    dt_dataset tr, ds;
    dt_err err;
    EXPECT_EQ_INT(dt_dataset_open(&tr, dt_test_path("shapes"), "train", NULL, &err), 0);
    int rc = dt_dataset_open(&ds, dt_test_path("shapes"), "val", &tr, &err);
    EXPECT_MSG(rc == 0, "%s", err.msg);
    if (rc) return;
    int S = 32;
    dt_loader_opts o = dt_loader_default_opts(0);
    o.batch = 4;
    o.image_size = S;
    o.workers = 2;
    dt_loader *plain = dt_loader_new(&ds, &o, &err);
    o.cache = 1;
    o.workers = 3;
    dt_loader *cached = dt_loader_new(&ds, &o, &err);
    EXPECT(plain && cached);
    if (!plain || !cached) return;
    EXPECT_EQ_INT(dt_loader_batches(plain), 6); /* 21 images: 5 x 4 + 1, last one short */
    epoch_dump p = run_epoch(plain, 0, S);
    EXPECT_EQ_INT(p.n, 21);
    EXPECT_EQ_INT(p.sizes[5], 1);
    for (int i = 0; i < 21; i++) EXPECT_EQ_INT(p.labels[i], ds.labels[i]); /* dataset order */
    epoch_dump c0 = run_epoch(cached, 0, S); /* fills the cache */
    epoch_dump c1 = run_epoch(cached, 1, S); /* reads it */
    EXPECT_MSG(same_dump(&p, &c0, S), "val batches with the cache (first epoch) differ from without");
    EXPECT_MSG(same_dump(&p, &c1, S), "val batches from the cache differ from without");
    dt_loader_stats st = dt_loader_epoch_stats(cached);
    EXPECT_EQ_INT(st.cache_images, 21);
    EXPECT(st.cache_bytes >= 21u * 37 * 37 * 3); /* shorter side cut to round(32 * 256 / 224) = 37 */
    char line[512];
    dt_loader_stats_str(&st, line, sizeof line);
    EXPECT_MSG(strstr(line, "cache 21 images"), "stats line: %s", line);
    free_dump(&p), free_dump(&c0), free_dump(&c1);
    dt_loader_free(plain);
    dt_loader_free(cached);
    dt_dataset_close(&ds);
    dt_dataset_close(&tr);
}

DT_TEST(data_loader_skips_bad_files_and_keeps_batches_full) {
    if (make_shapes("shapes", 3, 6, 0, 40)) return;
    /* three broken files among 18 good ones */
    write_random_bytes("shapes/train/00_circle/zz_noise.jpg", 2000);
    const char *text = "plain text, named like a JPEG\n";
    dt_test_write_file("shapes/train/01_ring/zz_text.jpg", text, strlen(text));
    write_noise_png("full.png", 40, 40, 3);
    truncate_copy("full.png", "shapes/train/02_triangle/zz_trunc.png", 1200);
    dt_test_touch("shapes/train/02_triangle/notes.txt"); /* ignored by the scan */
    dt_dataset ds;
    dt_err err;
    EXPECT_EQ_INT(dt_dataset_open(&ds, dt_test_path("shapes"), "train", NULL, &err), 0);
    EXPECT_EQ_INT(ds.count, 21);
    int S = 24;
    dt_loader_opts o = dt_loader_default_opts(1);
    o.batch = 4;
    o.image_size = S;
    o.drop_last = 0; /* every position is used, so every bad file is met */
    o.workers = 3;
    o.seed = 5;
    dt_loader *l = dt_loader_new(&ds, &o, &err);
    o.workers = 1;
    dt_loader *l1 = dt_loader_new(&ds, &o, &err);
    if (!l || !l1) return;
    for (int e = 0; e < 2; e++) {
        epoch_dump d = run_epoch(l, e, S), d1 = run_epoch(l1, e, S);
        EXPECT_EQ_INT(d.n, 21);
        for (int i = 0; i < d.nb - 1; i++) EXPECT_EQ_INT(d.sizes[i], 4); /* never shrunk */
        for (int i = 0; i < d.n; i++) EXPECT(d.labels[i] >= 0 && d.labels[i] < 3);
        EXPECT_MSG(same_dump(&d, &d1, S), "epoch %d with bad files: 1 and 3 workers differ", e);
        dt_loader_stats st = dt_loader_epoch_stats(l);
        EXPECT_EQ_INT(st.skipped, 3);
        EXPECT_EQ_INT(st.bad_files, 3); /* remembered, not counted again in epoch 1 */
        char line[512];
        dt_loader_stats_str(&st, line, sizeof line);
        EXPECT_MSG(strstr(line, "3 skipped (3 bad files)"), "stats line: %s", line);
        free_dump(&d), free_dump(&d1);
    }
    dt_loader_free(l);
    dt_loader_free(l1);
    dt_dataset_close(&ds);
}

DT_TEST(data_loader_all_bad_and_option_errors) {
    dt_test_mkdirs("bad/train/a");
    dt_test_mkdirs("bad/train/b");
    write_noise_png("bad/train/a/1.png", 8, 8, 3);
    write_noise_png("bad/train/b/2.png", 8, 8, 3);
    dt_dataset ds;
    dt_err err;
    EXPECT_EQ_INT(dt_dataset_open(&ds, dt_test_path("bad"), "train", NULL, &err), 0);
    dt_loader_opts o = dt_loader_default_opts(1);
    o.batch = 2;
    o.image_size = 16;
    o.workers = 2;
    dt_loader *l = dt_loader_new(&ds, &o, &err);
    EXPECT_MSG(l != NULL, "%s", err.msg);
    if (!l) return;
    /* every file goes bad after the loader has checked them: the epoch fails, naming why */
    write_random_bytes("bad/train/a/1.png", 500);
    write_random_bytes("bad/train/b/2.png", 500);
    dt_loader_start_epoch(l, 0);
    dt_batch b = {0};
    EXPECT_EQ_INT(dt_loader_next(l, &b), -1);
    EXPECT_MSG(strstr(dt_loader_error(l), "none of the"), "error: %s", dt_loader_error(l));
    dt_loader_free(l);
    /* bad from the start: the loader itself fails, naming the first class */
    EXPECT(dt_loader_new(&ds, &o, &err) == NULL);
    EXPECT_MSG(strstr(err.msg, "none of the 1 images of class 'a'"), "message: %s", err.msg);
    /* bad options are errors naming the value */
    o.batch = 0;
    EXPECT(dt_loader_new(&ds, &o, &err) == NULL);
    EXPECT_MSG(strstr(err.msg, "batch size 0"), "message: %s", err.msg);
    o.batch = 3; /* 2 images, drop_last on: not one batch */
    EXPECT(dt_loader_new(&ds, &o, &err) == NULL);
    EXPECT_MSG(strstr(err.msg, "fewer than one batch of 3"), "message: %s", err.msg);
    o.batch = 2;
    o.prefetch = 1;
    EXPECT(dt_loader_new(&ds, &o, &err) == NULL);
    EXPECT_MSG(strstr(err.msg, "prefetch 1"), "message: %s", err.msg);
    o.prefetch = 4;
    o.cache = 1;
    o.cache_size = 8;
    EXPECT(dt_loader_new(&ds, &o, &err) == NULL);
    EXPECT_MSG(strstr(err.msg, "cache_size 8 is smaller"), "message: %s", err.msg);
    dt_dataset_close(&ds);
}

/* A flat 8x8 PNG whose red level says which image it is (id 0 .. 48). */
static void write_id_png(const char *rel, int id) {
    uint8_t px[8 * 8 * 3];
    for (int i = 0; i < 64; i++) px[i * 3] = (uint8_t)(5 * id + 10), px[i * 3 + 1] = 77, px[i * 3 + 2] = 0;
    dt_err err;
    EXPECT_EQ_INT(dt_image_write_png(dt_test_path(rel), 8, 8, 3, px, &err), 0);
}

/* The id of each image of an epoch dump (from its first red value), sorted. */
static void dump_ids(const epoch_dump *d, int S, int *ids) {
    for (int64_t i = 0; i < d->n; i++) ids[i] = (d->images[i * S * S * 3] - 10) / 5;
    for (int64_t i = 1; i < d->n; i++) /* insertion sort: a few dozen */
        for (int64_t k = i; k > 0 && ids[k - 1] > ids[k]; k--) {
            int t = ids[k];
            ids[k] = ids[k - 1];
            ids[k - 1] = t;
        }
}

DT_TEST(data_loader_subset_is_stratified_fixed_and_sharded) {
    /* max_val_batches evaluated the first batches of an unshuffled val set: the first classes
     * only (the CPU demo's 6.56 % top-1, below chance, came from classes 00-03). A subset is
     * now a fixed sample stratified by class. Classes of 7, 7, 7 and 3 images (ids 0 .. 23). */
    const int counts[4] = {7, 7, 7, 3};
    for (int c = 0, id = 0; c < 4; c++)
        for (int i = 0; i < counts[c]; i++, id++) {
            char rel[64];
            snprintf(rel, sizeof rel, "strat/train/c%d/%02d.png", c, i);
            dt_test_mkdirs(rel);
            rmdir(dt_test_path(rel));
            write_id_png(rel, id);
        }
    dt_dataset ds;
    dt_err err;
    EXPECT_EQ_INT(dt_dataset_open(&ds, dt_test_path("strat"), "train", NULL, &err), 0);
    const int S = 8;
    dt_loader_opts o = dt_loader_default_opts(0);
    o.batch = 4;
    o.image_size = S;
    o.workers = 2;
    o.seed = 11;
    o.subset = 10;
    dt_loader *l = dt_loader_new(&ds, &o, &err);
    EXPECT_MSG(l != NULL, "%s", err.msg);
    if (!l) return;
    EXPECT_EQ_INT(dt_loader_size(l), 10);
    EXPECT_EQ_INT(dt_loader_classes(l), 4);
    EXPECT_EQ_INT(dt_loader_batches(l), 3);
    /* 10 * 7 / 24 = 2.9 for each big class, 1.25 for the small one: 3, 3, 3, 1 */
    epoch_dump e0 = run_epoch(l, 0, S), e1 = run_epoch(l, 1, S);
    int ids0[24], ids1[24], per[4] = {0};
    dump_ids(&e0, S, ids0);
    dump_ids(&e1, S, ids1);
    EXPECT_MSG(e0.n == 10 && !memcmp(ids0, ids1, sizeof(int) * 10), "epochs 0 and 1 evaluate different images");
    for (int i = 0; i < 10; i++) {
        EXPECT(i == 0 || ids0[i] > ids0[i - 1]); /* each once */
        per[ids0[i] < 21 ? ids0[i] / 7 : 3]++;
    }
    EXPECT_MSG(per[0] == 3 && per[1] == 3 && per[2] == 3 && per[3] == 1, "per class %d %d %d %d", per[0], per[1], per[2],
               per[3]);
    for (int i = 0; i < 10; i++) EXPECT_EQ_INT(e0.labels[i], ids0[i] < 21 ? ids0[i] / 7 : 3); /* dataset order */
    /* the same sample on 3 replicas (batch 2 each): their shards together are the same images */
    int all[24], n = 0;
    for (int r = 0; r < 3; r++) {
        dt_loader_opts os = o;
        os.batch = 2, os.shard = r, os.shards = 3;
        dt_loader *ls = dt_loader_new(&ds, &os, &err);
        epoch_dump d = run_epoch(ls, 0, S);
        dump_ids(&d, S, all + n);
        n += (int)d.n;
        free_dump(&d);
        dt_loader_free(ls);
    }
    EXPECT_EQ_INT(n, 10);
    for (int i = 1; i < n; i++)
        for (int k = i; k > 0 && all[k - 1] > all[k]; k--) {
            int t = all[k];
            all[k] = all[k - 1];
            all[k - 1] = t;
        }
    EXPECT_MSG(n == 10 && !memcmp(all, ids0, sizeof(int) * 10), "the shards' images differ from one replica's");
    /* another seed, another sample; a training loader draws from its sample in a new order each
     * epoch */
    dt_loader_opts o2 = o;
    o2.seed = 12;
    dt_loader *l2 = dt_loader_new(&ds, &o2, &err);
    epoch_dump f = run_epoch(l2, 0, S);
    int idsf[24];
    dump_ids(&f, S, idsf);
    EXPECT_MSG(memcmp(idsf, ids0, sizeof(int) * 10) != 0, "seeds 11 and 12 sampled the same images");
    free_dump(&f);
    dt_loader_free(l2);
    o2 = o;
    o2.train = 1;
    o2.batch = 5;
    dt_loader *lt = dt_loader_new(&ds, &o2, &err);
    epoch_dump t0 = run_epoch(lt, 0, S), t1 = run_epoch(lt, 1, S);
    EXPECT(memcmp(t0.labels, t1.labels, sizeof(int32_t) * 10) != 0 || memcmp(t0.images, t1.images, (size_t)S * S * 3 * 10) != 0);
    int a[24], b[24];
    dump_ids(&t0, S, a);
    dump_ids(&t1, S, b);
    EXPECT_MSG(!memcmp(a, ids0, sizeof(int) * 10) && !memcmp(b, ids0, sizeof(int) * 10),
               "the training loader's epochs are not the same sample");
    free_dump(&t0), free_dump(&t1);
    dt_loader_free(lt);
    /* fewer images than classes: ties are broken by the seed, not by class order */
    int first_two = 0;
    for (uint64_t seed = 1; seed <= 16; seed++) {
        dt_loader_opts o3 = o;
        o3.subset = 2;
        o3.seed = seed;
        dt_loader *l3 = dt_loader_new(&ds, &o3, &err);
        EXPECT_EQ_INT(dt_loader_classes(l3), 2);
        epoch_dump d = run_epoch(l3, 0, S);
        first_two += d.labels[0] == 0 && d.labels[1] == 1;
        free_dump(&d);
        dt_loader_free(l3);
    }
    EXPECT_MSG(first_two < 16, "16 seeds all sampled classes 0 and 1");
    o.subset = -1;
    EXPECT(dt_loader_new(&ds, &o, &err) == NULL);
    EXPECT_MSG(strstr(err.msg, "subset -1 is negative"), "%s", err.msg);
    free_dump(&e0), free_dump(&e1);
    dt_loader_free(l);
    dt_dataset_close(&ds);
}

/* A one-step training run on a tiny shapes set (2 classes, 4 val images each) evaluating on
 * max_val_batches = 1 batch of 4: what the log says about it. */
static void train_with_val_subset(void *arg) {
    (void)arg;
    dt_train_cfg c;
    dt_test_run_cfg(&c, dt_test_shapes("shapes", 2, 4, 4, 40), 32, 0.25f, 4);
    c.workers = 1;
    c.steps = 1;
    c.max_val_batches = 1;
    dt_train_result r;
    dt_err err;
    if (dt_train_run(&c, &r, &err)) dt_fatal("%s", err.msg);
    dt_train_result_free(&r);
}

DT_TEST(data_val_subset_reaches_the_log) {
    EXPECT_OUTPUT(train_with_val_subset, NULL,
                  "evaluating on 4 of 8 images, stratified over 2 classes (max_val_batches = 1 x batch 4");
}

typedef struct {
    const dt_dataset *ds;
    dt_loader_opts o;
} loader_args;

/* Runs in a forked child (no threads are inherited): makes its own loader. */
static void hold_every_slot(void *arg) {
    loader_args *a = arg;
    dt_err err;
    dt_loader *l = dt_loader_new(a->ds, &a->o, &err);
    dt_loader_start_epoch(l, 0);
    dt_batch b[3];
    for (int i = 0; i < 3; i++) dt_loader_next(l, &b[i]); /* prefetch 2: the third cannot come */
}

DT_TEST(data_loader_restart_and_free_mid_epoch) {
    if (make_shapes("shapes", 2, 12, 0, 32)) return;
    dt_dataset ds;
    dt_err err;
    EXPECT_EQ_INT(dt_dataset_open(&ds, dt_test_path("shapes"), "train", NULL, &err), 0);
    dt_loader_opts o = dt_loader_default_opts(1);
    o.batch = 2;
    o.image_size = 16;
    o.workers = 3;
    o.prefetch = 2;
    dt_loader *l = dt_loader_new(&ds, &o, &err);
    if (!l) return;
    /* abandon epoch 0 after one batch (held), restart it: the same first batch again */
    dt_loader_start_epoch(l, 0);
    dt_batch b = {0};
    EXPECT_EQ_INT(dt_loader_next(l, &b), 1);
    uint8_t first[16 * 16 * 3];
    memcpy(first, b.images, sizeof first);
    dt_loader_start_epoch(l, 0);
    dt_loader_release(l, &b); /* stale: ignored */
    EXPECT_EQ_INT(dt_loader_next(l, &b), 1);
    EXPECT(!memcmp(first, b.images, sizeof first));
    EXPECT_EQ_INT(b.index, 0);
    /* free while batches are held and workers are blocked on the ring */
    double t0 = dt_now_ms();
    dt_loader_free(l);
    EXPECT_MSG(dt_now_ms() - t0 < 2000, "free took %.0f ms", dt_now_ms() - t0);
    /* holding every slot and asking for more is a clear error, not a hang */
    loader_args la = {&ds, o};
    EXPECT_DEATH(hold_every_slot, &la, "batch slots are held");
    dt_dataset_close(&ds);
}

/* ---- the generator ---- */

DT_TEST(data_synth_deterministic_and_layout) {
    int w = 48, h = 40;
    uint8_t *a = malloc((size_t)w * h * 3), *b = malloc((size_t)w * h * 3);
    for (int cls = 0; cls < DT_SYNTH_MAX_CLASSES; cls++) {
        dt_synth_render(cls, w, h, 3, 0, 17, a);
        dt_synth_render(cls, w, h, 3, 0, 17, b);
        EXPECT_MSG(!memcmp(a, b, (size_t)w * h * 3), "class %d: same seed, different image", cls);
        dt_synth_render(cls, w, h, 3, 0, 18, b);
        EXPECT(memcmp(a, b, (size_t)w * h * 3) != 0);
    }
    free(a);
    free(b);
    if (make_shapes("gen", 12, 3, 2, 24)) return;
    dt_dataset tr, va;
    dt_err err;
    EXPECT_EQ_INT(dt_dataset_open(&tr, dt_test_path("gen"), "train", NULL, &err), 0);
    EXPECT_EQ_INT(dt_dataset_open(&va, dt_test_path("gen"), "val", &tr, &err), 0);
    EXPECT_EQ_INT(tr.num_classes, 12);
    EXPECT_EQ_INT(tr.count, 36);
    EXPECT_EQ_INT(va.count, 24);
    EXPECT(!strcmp(tr.classes[0], "00_circle"));
    EXPECT(!strcmp(tr.classes[11], "11_crescent"));
    dt_image im;
    EXPECT_EQ_INT(dt_image_load(tr.paths[5], &im, NULL, &err), 0);
    EXPECT_EQ_INT(im.w, 24);
    dt_image_free(&im);
    /* the same seed writes the same files, whatever the thread count */
    dt_synth_opts o;
    dt_synth_default_opts(&o);
    o.out = dt_test_path("gen1");
    o.classes = 2;
    o.train_per_class = 3;
    o.val_per_class = 0;
    o.width = o.height = 24;
    o.seed = 7;
    o.threads = 1;
    o.quiet = 1;
    EXPECT_EQ_INT(dt_synth_write(&o, NULL, &err), 0);
    dt_dataset d1, d2;
    EXPECT_EQ_INT(dt_dataset_open(&d1, dt_test_path("gen1"), "train", NULL, &err), 0);
    EXPECT_EQ_INT(dt_dataset_open(&d2, dt_test_path("gen"), "train", NULL, &err), 0);
    for (int i = 0; i < 6; i++) {
        FILE *f1 = fopen(d1.paths[i], "rb"), *f2 = fopen(d2.paths[i], "rb");
        char b1[8192], b2[8192];
        size_t n1 = fread(b1, 1, sizeof b1, f1), n2 = fread(b2, 1, sizeof b2, f2);
        fclose(f1), fclose(f2);
        EXPECT_MSG(n1 == n2 && !memcmp(b1, b2, n1), "%s differs between 1 and 2 threads", d1.paths[i]);
    }
    dt_dataset_close(&d1);
    dt_dataset_close(&d2);
    dt_dataset_close(&tr);
    dt_dataset_close(&va);
    /* no leftovers of the temporary folder */
    struct stat st;
    EXPECT(stat(dt_test_path("gen.tmp"), &st) != 0);
}

DT_TEST(data_synth_flags_and_overwrite_errors) {
    dt_synth_opts o;
    dt_err err;
    char *a1[] = {"mkdata", "--out", "x", "--bogus", "3"};
    dt_synth_default_opts(&o);
    EXPECT_EQ_INT(dt_synth_parse_args(5, a1, &o, &err), -1);
    EXPECT_MSG(strstr(err.msg, "unknown flag --bogus") && strstr(err.msg, "--classes N"), "message: %s", err.msg);
    char *a2[] = {"mkdata", "--out", "x", "--classes", "abc"};
    EXPECT_EQ_INT(dt_synth_parse_args(5, a2, &o, &err), -1);
    EXPECT_MSG(strstr(err.msg, "--classes: 'abc' is not an integer"), "message: %s", err.msg);
    char *a3[] = {"mkdata", "--out", "x", "--classes", "40"};
    EXPECT_EQ_INT(dt_synth_parse_args(5, a3, &o, &err), -1);
    EXPECT_MSG(strstr(err.msg, "--classes 40 is out of range (1 .. 12)"), "message: %s", err.msg);
    char *a4[] = {"mkdata", "--classes", "3"};
    dt_synth_default_opts(&o);
    EXPECT_EQ_INT(dt_synth_parse_args(3, a4, &o, &err), -1);
    EXPECT_MSG(strstr(err.msg, "--out DIR is required"), "message: %s", err.msg);
    char *a5[] = {"mkdata", "--out", "x", "--size"};
    EXPECT_EQ_INT(dt_synth_parse_args(4, a5, &o, &err), -1);
    EXPECT_MSG(strstr(err.msg, "--size needs a value"), "message: %s", err.msg);
    char *a6[] = {"mkdata", "--out=y", "--size", "64", "--width=100", "--seed", "9", "--force"};
    dt_synth_default_opts(&o);
    EXPECT_EQ_INT(dt_synth_parse_args(8, a6, &o, &err), 0);
    EXPECT(!strcmp(o.out, "y"));
    EXPECT_EQ_INT(o.width, 100);
    EXPECT_EQ_INT(o.height, 64);
    EXPECT_EQ_INT(o.seed, 9);
    EXPECT_EQ_INT(o.force, 1);
    char *a7[] = {"mkdata", "--help"};
    EXPECT_EQ_INT(dt_synth_parse_args(2, a7, &o, &err), 1);

    /* a non-empty folder is not overwritten without --force, nor a foreign one with it */
    dt_synth_default_opts(&o);
    o.classes = 1;
    o.train_per_class = 1;
    o.val_per_class = 0;
    o.width = o.height = 16;
    o.quiet = 1;
    dt_test_mkdirs("mine");
    dt_test_touch("mine/precious.txt");
    o.out = dt_test_path("mine");
    EXPECT_EQ_INT(dt_synth_write(&o, NULL, &err), -1);
    EXPECT_MSG(strstr(err.msg, "is not empty; pass --force"), "message: %s", err.msg);
    o.force = 1;
    EXPECT_EQ_INT(dt_synth_write(&o, NULL, &err), -1);
    EXPECT_MSG(strstr(err.msg, "refusing to replace") && strstr(err.msg, "precious.txt"), "message: %s", err.msg);
    struct stat st;
    EXPECT(stat(dt_test_path("mine/precious.txt"), &st) == 0);
    /* an earlier mkdata dataset is replaced with --force; an empty folder needs no --force */
    o.force = 0;
    dt_test_mkdirs("empty_out");
    o.out = dt_test_path("empty_out");
    EXPECT_EQ_INT(dt_synth_write(&o, NULL, &err), 0);
    o.train_per_class = 2;
    EXPECT_EQ_INT(dt_synth_write(&o, NULL, &err), -1);
    o.force = 1;
    EXPECT_EQ_INT(dt_synth_write(&o, NULL, &err), 0);
    dt_dataset ds;
    EXPECT_EQ_INT(dt_dataset_open(&ds, dt_test_path("empty_out"), "train", NULL, &err), 0);
    EXPECT_EQ_INT(ds.count, 2);
    dt_dataset_close(&ds);
}
