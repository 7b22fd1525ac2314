/* The data pipeline against hostile or broken inputs: symlink loops and duplicate paths in
 * the dataset tree; images whose header declares a decompression bomb; libjpeg-turbo's errors
 * (returned, never an exit), colour spaces, scan limit and DCT-domain downscaling; a class
 * none of whose files decodes; the end-of-epoch summary of skipped files. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/data_testutil.h"
#include "data/dt_dataset.h"
#include "data/dt_image.h"
#include "data/dt_loader.h"
#include "data/dt_synth.h"
#include "tests/dt_test.h"
#include "core/dt_timer.h"
#include "data/dt_transform.h"
#ifdef DT_LIBJPEG
#include <jpeglib.h>
#endif

static void link_to(const char *target, const char *rel) { EXPECT_EQ_INT(symlink(target, dt_test_path(rel)), 0); }

/* Opens root/train and checks the image count; returns 0 when it opened. */
static int open_count(const char *root, dt_dataset *ds, int64_t want) {
    dt_err err;
    int rc = dt_dataset_open(ds, dt_test_path(root), "train", NULL, &err);
    EXPECT_MSG(rc == 0, "%s: %s", root, err.msg);
    if (rc) return rc;
    EXPECT_MSG(ds->count == want, "%s: %lld images, expected %lld", root, (long long)ds->count, (long long)want);
    return 0;
}

DT_TEST(data_scan_symlink_loops_and_duplicates_count_once) {
    dt_dataset ds;
    /* `ln -s . loop` in a class: the old scan found a/1.jpg, a/loop/1.jpg, ... 17 times */
    dt_test_mkdirs("r1/train/a");
    dt_test_mkdirs("r1/train/b");
    dt_test_touch("r1/train/a/1.jpg");
    dt_test_touch("r1/train/b/2.jpg");
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
    dt_test_mkdirs("r2/train/a");
    dt_test_touch("r2/train/a/1.jpg");
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
    dt_test_mkdirs("shared");
    dt_test_touch("shared/s.jpg");
    dt_test_mkdirs("r3/train/a");
    dt_test_touch("r3/train/a/1.jpg");
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
    /* a class folder that is a link to another class: its files are counted under the first,
     * which leaves the second without images, an error that says why */
    dt_test_mkdirs("r4/train/a");
    dt_test_touch("r4/train/a/1.jpg");
    link_to("a", "r4/train/b");
    dt_err err;
    EXPECT(dt_dataset_open(&ds, dt_test_path("r4"), "train", NULL, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "1 class folder of") && strstr(err.msg, "without images: b") &&
                   strstr(err.msg, "already counted under another class"),
               "%s", err.msg);
}

/* Opens tmp/ROOT/train (arg) without root's power to read any folder, and dies with the
 * scan's error: a child that is root becomes nobody first. The scan starts at the cwd, so the
 * test's own folders are the only ones nobody has to pass. */
static void scan_unprivileged(void *arg) {
    if (chdir(dt_test_path(arg)) != 0) dt_fatal("chdir %s: %s", dt_test_path(arg), strerror(errno));
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
        dt_fatal("cannot become nobody to test a folder root could read: %s", strerror(errno));
    dt_dataset ds;
    dt_err err;
    if (dt_dataset_open(&ds, ".", "train", NULL, &err)) dt_fatal("%s", err.msg);
    printf("opened: %lld images\n", (long long)ds.count);
}

/* Opens tmp/ROOT/train (arg) with warnings on: how the tests see them. */
static void scan_loud(void *arg) {
    dt_dataset ds;
    dt_err err;
    if (dt_dataset_open(&ds, dt_test_path(arg), "train", NULL, &err)) dt_fatal("%s", err.msg);
    printf("opened: %lld images, %lld skipped\n", (long long)ds.count, (long long)ds.skipped);
    dt_dataset_close(&ds);
}

DT_TEST(data_scan_loses_no_class_without_a_word) {
    /* A class folder that cannot be read only warned "has no images, keeps its label" and
     * training went on without the class, exit status 0: now an error naming it. So is a
     * sub-folder of a class that cannot be read. */
    dt_test_mkdirs("perm/train/a");
    dt_test_mkdirs("perm/train/locked");
    dt_test_touch("perm/train/a/1.jpg");
    dt_test_touch("perm/train/locked/2.jpg");
    EXPECT_EQ_INT(chmod(dt_test_path("perm/train/locked"), 0), 0);
    EXPECT_DEATH(scan_unprivileged, "perm", "cannot read class folder ./train/locked: Permission denied");
    EXPECT_EQ_INT(chmod(dt_test_path("perm/train/locked"), 0755), 0);
    dt_test_mkdirs("perm/train/locked/sub");
    dt_test_touch("perm/train/locked/sub/3.jpg");
    EXPECT_EQ_INT(chmod(dt_test_path("perm/train/locked/sub"), 0), 0);
    EXPECT_DEATH(scan_unprivileged, "perm", "cannot read the folder ./train/locked/sub: Permission denied");
    EXPECT_EQ_INT(chmod(dt_test_path("perm/train/locked/sub"), 0755), 0);
    EXPECT_OUTPUT(scan_unprivileged, "perm", "opened: 3 images");
    /* A class folder without images is an error (as in torchvision), naming it. */
    dt_dataset ds;
    dt_err err;
    dt_test_mkdirs("emp/train/a");
    dt_test_mkdirs("emp/train/b");
    dt_test_touch("emp/train/a/1.jpg");
    dt_test_touch("emp/train/b/notes.txt");
    EXPECT(dt_dataset_open(&ds, dt_test_path("emp"), "train", NULL, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "1 class folder of") && strstr(err.msg, "emp/train without images: b (every class needs"),
               "%s", err.msg);
    /* Entries that look like data but are not used are named: a FIFO named like an image (was
     * ignored without a word), a link to nothing, an image outside the class folders; a folder
     * named like an image is walked, with a word. */
    dt_test_mkdirs("odd/train/a/dir.jpg");
    dt_test_mkdirs("odd/train/b");
    dt_test_touch("odd/train/a/1.jpg");
    dt_test_touch("odd/train/a/dir.jpg/2.jpg");
    dt_test_touch("odd/train/b/3.jpg");
    dt_test_touch("odd/train/stray.jpg");
    EXPECT_EQ_INT(mkfifo(dt_test_path("odd/train/a/pipe.jpg"), 0644), 0);
    link_to("nowhere.png", "odd/train/a/gone.png");
    if (open_count("odd", &ds, 3) == 0) {
        EXPECT_EQ_INT(ds.skipped, 3);
        EXPECT_MSG(strstr(ds.paths[1], "a/dir.jpg/2.jpg") != NULL, "%s", ds.paths[1]);
        dt_dataset_close(&ds);
    }
    EXPECT_OUTPUT(scan_loud, "odd", "odd/train/a/pipe.jpg is a FIFO, not an image file: skipped");
    EXPECT_OUTPUT(scan_loud, "odd", "odd/train/a/gone.png: a link that cannot be followed (No such file or directory)");
    EXPECT_OUTPUT(scan_loud, "odd", "odd/train/a/dir.jpg is a folder named like an image: walked as a sub-folder");
    EXPECT_OUTPUT(scan_loud, "odd", "odd/train/stray.jpg: an image outside the class folders is not used");
    /* the first 10 are named, the rest counted */
    for (int i = 0; i < 12; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "odd/train/b/p%02d.png", i);
        EXPECT_EQ_INT(mkfifo(dt_test_path(rel), 0644), 0);
    }
    EXPECT_OUTPUT(scan_loud, "odd", "6 more entries like those above (15 entries not used in all)");
    EXPECT_OUTPUT(scan_loud, "odd", "opened: 3 images, 15 skipped");
}

/* ---- images and the loader ---- */

/* The train loader over tmp/ROOT/train (opened into *ds) at 16 x 16, drop_last off, epoch 0
 * started. */
static dt_loader *start_loader(const char *root, dt_dataset *ds, int batch, int workers, int64_t max_pixels) {
    dt_err err;
    if (dt_dataset_open(ds, dt_test_path(root), "train", NULL, &err)) dt_fatal("%s", err.msg);
    dt_loader_opts o = dt_loader_default_opts(1);
    o.batch = batch;
    o.image_size = 16;
    o.workers = workers;
    o.drop_last = 0;
    o.max_pixels = max_pixels;
    dt_loader *l = dt_loader_new(ds, &o, &err);
    if (!l) dt_fatal("%s", err.msg);
    dt_loader_start_epoch(l, 0);
    return l;
}

/* One epoch over tmp/ROOT (arg), then "skipped N" on stdout. */
static void run_one_epoch(void *arg) {
    dt_dataset ds;
    dt_loader *l = start_loader(arg, &ds, 2, 2, DT_IMAGE_MAX_PIXELS);
    dt_batch b;
    /* fetch exactly the epoch's batches, as the trainer does, never asking for one more */
    for (int64_t i = 0; i < dt_loader_batches(l); i++) {
        if (dt_loader_next(l, &b) != 1) dt_fatal("batch %lld: %s", (long long)i, dt_loader_error(l));
        dt_loader_release(l, &b);
    }
    printf("skipped %lld\n", (long long)dt_loader_epoch_stats(l).skipped);
    dt_loader_free(l);
    dt_dataset_close(&ds);
}

/* Makes the train loader over tmp/ROOT (arg) with warnings on; prints its error, if any. */
static void new_loader_loud(void *arg) {
    dt_dataset ds;
    dt_err err;
    if (dt_dataset_open(&ds, dt_test_path(arg), "train", NULL, &err)) dt_fatal("%s", err.msg);
    dt_loader_opts o = dt_loader_default_opts(1);
    o.batch = 1;
    o.image_size = 16;
    dt_loader *l = dt_loader_new(&ds, &o, &err);
    printf("%s\n", l ? "made" : err.msg);
    dt_loader_free(l);
    dt_dataset_close(&ds);
}

static void write_junk(const char *rel) {
    const char *junk = "not an image at all";
    dt_test_write_file(rel, junk, strlen(junk));
}


/* Offset of the JPEG frame header's height field (SOF0..SOF2: FF C0..C2, length, precision). */
static size_t sof_dims(const unsigned char *j, size_t n) {
    for (size_t i = 2; i + 9 < n; i++)
        if (j[i] == 0xFF && j[i + 1] >= 0xC0 && j[i + 1] <= 0xC2) return i + 5;
    return 0;
}

static void put16be(unsigned char *p, unsigned v) { p[0] = (unsigned char)(v >> 8), p[1] = (unsigned char)v; }


DT_TEST(data_image_bomb_headers_are_refused_before_decoding) {
    /* A 16x16 JPEG and PNG whose headers then declare 8201 x 16167 (132.6 Mpx): the old decoder
     * spent 2 s and 0.9 GB per worker on the 530-byte JPEG. */
    dt_err err;
    uint8_t *px = dt_test_picture(16, 16, 1);
    EXPECT_EQ_INT(dt_image_write_jpg(dt_test_path("bomb.jpg"), 16, 16, 3, px, 90, &err), 0);
    EXPECT_EQ_INT(dt_image_write_png(dt_test_path("bomb.png"), 16, 16, 3, px, &err), 0);
    free(px);
    size_t n;
    unsigned char *j = dt_test_read_file("bomb.jpg", &n);
    size_t at = sof_dims(j, n);
    EXPECT(at > 0);
    put16be(j + at, 16167);
    put16be(j + at + 2, 8201);
    dt_test_write_file("bomb.jpg", j, n);
    unsigned char *p = dt_test_read_file("bomb.png", &n);
    unsigned char big[8] = {0, 0, 0x20, 0x09, 0, 0, 0x3f, 0x27}; /* IHDR width 8201, height 16167 */
    memcpy(p + 16, big, 8);
    dt_test_write_file("bomb.png", p, n);
    dt_image im;
    const char *files[] = {"bomb.jpg", "bomb.png"};
    for (int i = 0; i < 2; i++) {
        double t0 = dt_now_ms();
        int rc = dt_image_load(dt_test_path(files[i]), &im, NULL, &err);
        EXPECT_MSG(rc != 0, "%s decoded", files[i]);
        if (rc == 0) dt_image_free(&im);
        EXPECT_MSG(strstr(err.msg, "8201 x 16167 = 132.6 Mpx is more than max_image_pixels = 89478485"), "%s", err.msg);
        EXPECT_MSG(dt_now_ms() - t0 < 50, "%s: refusing took %.0f ms", files[i], dt_now_ms() - t0);
    }
    /* the probe reads the size without decoding; the cap is a parameter */
    free(p);
    for (int i = 0; i < 2; i++) {
        p = dt_test_read_file(files[i], &n);
        int w, h;
        EXPECT_EQ_INT(dt_image_probe(p, n, files[i], 200000000, &w, &h, &err), 0);
        EXPECT_EQ_INT(w, 8201);
        EXPECT_EQ_INT(h, 16167);
        EXPECT(dt_image_probe(p, n, files[i], 132582566, &w, &h, &err) != 0);
        free(p);
    }
    free(j);
}

DT_TEST(data_image_only_its_formats_within_a_budget) {
    dt_err err;
    dt_image im;
    /* A 16x16 PNG whose IDAT chunk claims 2 GB: stb reallocated that much for a 100-byte file.
     * Now the chunk is read against the file's length: truncated. */
    unsigned char png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n',
                           0, 0, 0, 13, 'I', 'H', 'D', 'R', 0, 0, 0, 16, 0, 0, 0, 16, 8, 2, 0, 0, 0, 0x90, 0x91, 0x68, 0x36,
                           0x7f, 0xff, 0xff, 0xf0, 'I', 'D', 'A', 'T', 0x78, 0x9c, 1, 2, 3, 4, 5, 6, 7, 8};
    double t0 = dt_now_ms();
    EXPECT(dt_image_decode(png, sizeof png, "idat.png", DT_IMAGE_MAX_PIXELS, 1.0, &im, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "cannot decode idat.png: truncated"), "%s", err.msg);
    /* A zlib bomb: a 16x16 PNG whose IDAT inflates to 10 MB. stb_image's buffers stay within what
     * a 16 x 16 image needs; libpng inflates row by row and drops the excess, as PIL does. */
    dt_test_buf b = {0};
    dt_test_png_begin(&b, 16, 16, 8, 2, 0);
    dt_test_png_idat_zeros(&b, 10 << 20);
    dt_test_png_end(&b);
    int rc = dt_image_decode(b.p, b.n, "bomb.png", DT_IMAGE_MAX_PIXELS, 1.0, &im, &err);
#ifdef DT_LIBPNG
    EXPECT_MSG(rc == 0 && im.w == 16 && im.pix[0] == 0, "%s", err.msg);
    if (!rc) dt_image_free(&im);
#else
    EXPECT_MSG(rc != 0 && strstr(err.msg, "bomb.png: corrupt (its data asks for more memory than a 16 x 16 image needs)"),
               "%s", err.msg);
#endif
    free(b.p);
    /* Radiance HDR whose run length of 0 at the end of the file made stb 2.27 loop forever, and
     * a 16-bit PNM that it read past: formats that are not read, said with the first bytes. */
    const char hdr[] = "#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n\n-Y 1 +X 8\n\x02\x02\x00\x08";
    const char pnm[] = "P6\n2 2\n65535\n\x01\x02\x03\x04\x05\x06";
    EXPECT(dt_image_decode(hdr, sizeof hdr - 1, "loop.hdr", DT_IMAGE_MAX_PIXELS, 1.0, &im, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "loop.hdr: not a JPEG, PNG or BMP file (it starts with 23 3f 52 41 44 49 41 4e)"), "%s",
               err.msg);
    EXPECT(dt_image_decode(pnm, sizeof pnm - 1, "deep.ppm", DT_IMAGE_MAX_PIXELS, 1.0, &im, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "deep.ppm: not a JPEG, PNG or BMP file"), "%s", err.msg);
    EXPECT_MSG(dt_now_ms() - t0 < 200, "took %.0f ms", dt_now_ms() - t0);
}

static void put_le(unsigned char *p, uint32_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* A BMP file header and 40-byte info header: w x h at bpp bits, pixels from `offset`. */
static void bmp_header(unsigned char *p, int w, int h, int bpp, uint32_t offset) {
    memset(p, 0, 54);
    p[0] = 'B', p[1] = 'M';
    put_le(p + 10, offset, 4);
    put_le(p + 14, 40, 4);
    put_le(p + 18, (uint32_t)w, 4);
    put_le(p + 22, (uint32_t)h, 4);
    put_le(p + 26, 1, 2);
    put_le(p + 28, (uint32_t)bpp, 2);
}

DT_TEST(data_bmp_without_its_pixels_is_an_error) {
    /* A 54-byte BMP holding only its headers, declaring 9459 x 9459: stb_image decoded it
     * silently as a black image of 268 MB, and it was trained on. */
    dt_err err;
    dt_image im;
    unsigned char bmp[54 + 2 * 12 + 2 * 4 * 8 + 1024];
    bmp_header(bmp, 9459, 9459, 24, 54);
    double t0 = dt_now_ms();
    EXPECT(dt_image_decode(bmp, 54, "empty.bmp", DT_IMAGE_MAX_PIXELS, 1.0, &im, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "empty.bmp: truncated (its 9459 x 9459 pixels need 268446417 bytes from byte 54 on, the "
                               "file has 0)"), "%s", err.msg);
    EXPECT_MSG(dt_now_ms() - t0 < 50, "took %.0f ms", dt_now_ms() - t0);
    /* With its rows it decodes: 3 x 2 at 24 bits (rows padded to 12 bytes, bottom-up, BGR) ... */
    bmp_header(bmp, 3, 2, 24, 54);
    for (int i = 0; i < 24; i++) bmp[54 + i] = (unsigned char)(10 * i);
    EXPECT_MSG(dt_image_decode(bmp, 54 + 24, "rgb.bmp", DT_IMAGE_MAX_PIXELS, 1.0, &im, &err) == 0, "%s", err.msg);
    if (im.pix) {
        /* top-left pixel = the first of the second (last) row, B G R stored */
        EXPECT(im.w == 3 && im.h == 2 && im.pix[0] == 140 && im.pix[1] == 130 && im.pix[2] == 120);
        dt_image_free(&im);
    }
    /* ... without its last row's padding too, but not without any of its pixels */
    EXPECT(dt_image_decode(bmp, 54 + 21, "nopad.bmp", DT_IMAGE_MAX_PIXELS, 1.0, &im, &err) == 0);
    dt_image_free(&im);
    EXPECT(dt_image_decode(bmp, 54 + 20, "cut.bmp", DT_IMAGE_MAX_PIXELS, 1.0, &im, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "cut.bmp: truncated (its 3 x 2 pixels need 21 bytes from byte 54 on, the file has 20)"),
               "%s", err.msg);
    /* 8 bits with a palette of 2 colours (4 bytes each) before the pixels */
    bmp_header(bmp, 2, 1, 8, 62);
    unsigned char pal[8] = {1, 2, 3, 0, 40, 50, 60, 0}, row[4] = {1, 0, 0, 0};
    memcpy(bmp + 54, pal, 8);
    memcpy(bmp + 62, row, 4);
    EXPECT_MSG(dt_image_decode(bmp, 66, "pal.bmp", DT_IMAGE_MAX_PIXELS, 1.0, &im, &err) == 0, "%s", err.msg);
    if (im.pix) {
        EXPECT(im.pix[0] == 60 && im.pix[1] == 50 && im.pix[2] == 40 && im.pix[3] == 3);
        dt_image_free(&im);
    }
    /* pixels said to start inside the headers: stb read them from the end of the file (black) */
    bmp_header(bmp, 2, 1, 24, 20);
    EXPECT(dt_image_decode(bmp, 66, "inside.bmp", DT_IMAGE_MAX_PIXELS, 1.0, &im, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "pixel data at byte 20, inside the 54 bytes of headers"), "%s", err.msg);
}

/* The memory a decode takes at its peak, measured in a forked child whose resident high-water
 * mark is reset first (/proc/self/clear_refs), with its outcome. In MiB of the program's own
 * memory. */
typedef struct {
    const void *data;
    size_t bytes;
    int64_t max_pixels;
    int rc;
    double peak_mb; /* -1: the kernel could not reset the mark */
    char msg[sizeof(dt_err)];
} decode_run;

/* Resident bytes for each byte a program touches: a sanitizer's shadow memory comes on top
 * (ThreadSanitizer's about 4 bytes a byte, AddressSanitizer's 1/8). */
#if defined(__SANITIZE_THREAD__)
#define RSS_PER_BYTE 5.0
#elif defined(__SANITIZE_ADDRESS__)
#define RSS_PER_BYTE 1.125
#else
#define RSS_PER_BYTE 1.0
#endif

static long status_kb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, strlen(key))) v = atol(line + strlen(key));
    if (f) fclose(f);
    return v;
}

static void decode_measured(decode_run *r) {
    int fd[2];
    if (pipe(fd) != 0) dt_fatal("pipe");
    fflush(stdout); /* or the child's copy of the buffer may be written too */
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        FILE *f = fopen("/proc/self/clear_refs", "w");
        int reset = f && fputs("5", f) >= 0;
        if (f) reset &= fclose(f) == 0;
        long rss0 = status_kb("VmRSS:");
        dt_image im;
        dt_err err = {{0}};
        r->rc = dt_image_decode(r->data, r->bytes, "x", r->max_pixels, 1.0, &im, &err);
        r->peak_mb = reset ? (status_kb("VmHWM:") - rss0) / 1024.0 / RSS_PER_BYTE : -1;
        snprintf(r->msg, sizeof r->msg, "%s", err.msg);
        if (write(fd[1], r, sizeof *r) != (ssize_t)sizeof *r) _exit(1);
        _exit(0);
    }
    close(fd[1]);
    ssize_t got = read(fd[0], r, sizeof *r);
    close(fd[0]);
    int st;
    waitpid(pid, &st, 0);
    if (got != (ssize_t)sizeof *r) r->rc = 99, snprintf(r->msg, sizeof r->msg, "the child died (status %d)", st);
}

DT_TEST(data_image_decoding_memory_is_bounded_by_the_cap) {
    /* max_image_pixels bounds the memory a decode holds, not only the pixels: 4 bytes for each
     * pixel of the cap plus 1 MiB. A 1000 x 1000 16-bit RGBA PNG under a cap of 1 Mpx (5.0 MB):
     * stb_image held 16 MB (the raw samples, 8 bytes a pixel, and a 16-bit copy), as a
     * 9459 x 9459 one under the default cap held 1.37 GB per worker. libpng converts while it
     * reads (3 bytes a pixel); stb_image, in a build without libpng, is refused. */
    EXPECT_EQ_INT(dt_image_decode_budget(1000000), 4000000 + (1 << 20));
    dt_test_buf b = {0};
    dt_test_png_begin(&b, 1000, 1000, 16, 6, 0);
    dt_test_png_idat_zeros(&b, 1000 * (1 + 1000 * 8));
    dt_test_png_end(&b);
    decode_run r = {b.p, b.n, 1000000, 0, 0, ""};
    decode_measured(&r);
    if (dt_test_verbose()) printf("    16-bit RGBA 1000 x 1000: rc %d, peak %.1f MB, %s\n", r.rc, r.peak_mb, r.msg);
    EXPECT_MSG(r.peak_mb >= 0, "cannot measure memory here (/proc/self/clear_refs)");
#ifdef DT_LIBPNG
    EXPECT_MSG(r.rc == 0, "%s", r.msg);
#else
    EXPECT_MSG(r.rc != 0 && strstr(r.msg, "more than the 5.0 MB that max_image_pixels = 1000000 allows"), "%s", r.msg);
#endif
    /* in MiB, as the kernel counts: the budget is 4.8 MiB */
    EXPECT_MSG(r.peak_mb <= 5.0, "the decode held %.2f MiB, more than the 4.8 MiB the cap allows", r.peak_mb);
    free(b.p);
    /* the same pixels in one row: libpng's rows alone (16 MB) are over the budget */
    b = (dt_test_buf){0};
    dt_test_png_begin(&b, 1000000, 1, 16, 6, 0);
    dt_test_png_idat_zeros(&b, 1 + 1000000 * 8);
    dt_test_png_end(&b);
    r = (decode_run){b.p, b.n, 1000000, 0, 0, ""};
    decode_measured(&r);
    EXPECT_MSG(r.rc != 0 && strstr(r.msg, "x: decoding this 1000000 x 1") &&
                   strstr(r.msg, "more than the 5.0 MB that max_image_pixels = 1000000 allows (4 bytes a pixel"),
               "%s", r.msg);
    EXPECT_MSG(r.peak_mb <= 5.0, "held %.2f MiB", r.peak_mb);
    free(b.p);
#ifdef DT_LIBJPEG
    /* An 866-byte progressive JPEG declaring 9000 x 9000 took 627 MB: libjpeg holds the DCT
     * coefficients of every block for a file of several scans (243 MB here, zeroed first) and
     * the pixels (243 MB): refused from the header, before anything is allocated. */
    uint8_t *px = dt_test_picture(16, 16, 6);
    dt_test_write_libjpeg("prog9000.jpg", 16, 16, px, 3, JCS_RGB, JCS_YCbCr, NULL, -1);
    free(px);
    size_t n;
    unsigned char *j = dt_test_read_file("prog9000.jpg", &n);
    size_t at = sof_dims(j, n);
    EXPECT(at > 0 && j[at - 4] == 0xC2); /* SOF2: progressive */
    put16be(j + at, 9000);
    put16be(j + at + 2, 9000);
    r = (decode_run){j, n, DT_IMAGE_MAX_PIXELS, 0, 0, ""};
    double t0 = dt_now_ms();
    decode_measured(&r);
    if (dt_test_verbose()) printf("    progressive 9000 x 9000 (%zu bytes): peak %.1f MB, %s\n", n, r.peak_mb, r.msg);
    EXPECT_MSG(r.rc != 0 && strstr(r.msg, "decoding this 9000 x 9000 multi-scan JPEG (its DCT coefficients and the "
                                          "pixels) takes 48") && strstr(r.msg, "more than the 359.0 MB"), "%s", r.msg);
    EXPECT_MSG(r.peak_mb < 10, "held %.1f MB", r.peak_mb);
    EXPECT_MSG(dt_now_ms() - t0 < 500, "took %.0f ms", dt_now_ms() - t0);
    /* the same file declaring 1000 x 1000 (6 MB of coefficients and pixels) is under the
     * budget: it decodes, its missing blocks grey, as in PIL */
    put16be(j + at, 1000);
    put16be(j + at + 2, 1000);
    dt_image im;
    dt_err err;
    EXPECT_MSG(dt_image_decode(j, n, "p1000", DT_IMAGE_MAX_PIXELS, 1.0, &im, &err) == 0, "%s", err.msg);
    EXPECT(im.w == 1000 && im.h == 1000);
    dt_image_free(&im);
    free(j);
#endif
}

/* PNGs with one flaw each, made from a 16x16 RGB image; `which` picks the flaw. */
static dt_test_buf flawed_png(int which, const char *chunk_name) {
    unsigned char raw[16 * (1 + 48)];
    for (size_t i = 0; i < sizeof raw; i++) raw[i] = i % 49 ? (unsigned char)(i * 7) : 0;
    dt_test_buf b = {0};
    dt_test_png_begin(&b, 16, 16, 8, 2, 0);
    if (which == 2) dt_test_png_chunk(&b, "tEXt", "Comment\0hi", 10);
    if (which == 3) dt_test_png_chunk(&b, chunk_name, "abc", 3);
    size_t idat = b.n;
    dt_test_png_idat(&b, raw, sizeof raw);
    if (which == 1) b.p[b.n - 1] ^= 1; /* the IDAT chunk's CRC */
    if (which == 2) b.p[idat - 5] ^= 1; /* the tEXt chunk's CRC */
    if (which != 0) dt_test_png_end(&b); /* 0: no IEND */
    return b;
}

typedef struct {
    dt_test_buf png;
    char name[8];
    int wrong;
} reason_job;

static void *decode_many(void *arg) {
    reason_job *j = arg;
    for (int i = 0; i < 300; i++) {
        dt_image im;
        dt_err err;
        if (dt_image_decode(j->png.p, j->png.n, "t.png", DT_IMAGE_MAX_PIXELS, 1.0, &im, &err) == 0) dt_image_free(&im);
        else j->wrong += !strstr(err.msg, j->name);
    }
    return NULL;
}

DT_TEST(data_png_crcs_end_and_reasons) {
    dt_err err;
    dt_image im;
    /* A PNG without IEND reported "cannot decode X: " with an empty reason (stb_image named the
     * "chunk" it read past the end: four zero bytes). */
    dt_test_buf b = flawed_png(0, NULL);
    EXPECT(dt_image_decode(b.p, b.n, "noend.png", DT_IMAGE_MAX_PIXELS, 1.0, &im, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "noend.png: truncated") && strstr(err.msg, "IEND"), "%s", err.msg);
    free(b.p);
    /* CRCs were not checked: a wrong one in the pixel data or in a text chunk is an error (PIL's
     * rule; libpng's default only warns about ancillary chunks) */
    b = flawed_png(1, NULL);
    EXPECT(dt_image_decode(b.p, b.n, "crc.png", DT_IMAGE_MAX_PIXELS, 1.0, &im, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "crc.png") && strstr(err.msg, "IDAT") && strstr(err.msg, "CRC error"), "%s", err.msg);
    free(b.p);
    b = flawed_png(2, NULL);
    EXPECT(dt_image_decode(b.p, b.n, "text.png", DT_IMAGE_MAX_PIXELS, 1.0, &im, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "text.png") && strstr(err.msg, "tEXt") && strstr(err.msg, "CRC error"), "%s", err.msg);
    free(b.p);
    /* an unknown critical chunk is named; stb_image wrote that name into one static buffer all
     * loader threads share: four threads, each with its own chunk, each get their own name */
    reason_job jobs[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        snprintf(jobs[i].name, sizeof jobs[i].name, "X%cY%c", 'a' + i, 'a' + i);
        jobs[i].png = flawed_png(3, jobs[i].name);
        jobs[i].wrong = 0;
        pthread_create(&t[i], NULL, decode_many, &jobs[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        EXPECT_MSG(jobs[i].wrong == 0, "chunk %s: %d of 300 messages did not name it", jobs[i].name, jobs[i].wrong);
        free(jobs[i].png.p);
    }
    /* the file without a flaw decodes */
    b = flawed_png(4, NULL);
    EXPECT_MSG(dt_image_decode(b.p, b.n, "ok.png", DT_IMAGE_MAX_PIXELS, 1.0, &im, &err) == 0, "%s", err.msg);
    if (!im.pix) return;
    EXPECT(im.w == 16 && im.h == 16 && im.pix[0] == 7 && im.pix[2] == 21);
    dt_image_free(&im);
    free(b.p);
}

DT_TEST(data_image_huge_headers_name_their_size) {
    /* A 100000 x 100000 PNG was refused as "unknown image type": stb_image's header reader
     * tries each format and reports the last one's complaint. */
    dt_test_buf b = {0};
    dt_test_png_begin(&b, 100000, 100000, 8, 2, 0);
    dt_test_png_end(&b);
    unsigned char bmp[54];
    bmp_header(bmp, 100000, -100000, 24, 54);
    struct {
        const void *p;
        size_t n;
        const char *name;
    } files[] = {{b.p, b.n, "huge.png"}, {bmp, sizeof bmp, "huge.bmp"}};
    for (int i = 0; i < 2; i++) {
        dt_err err;
        dt_image im;
        int w, h;
        EXPECT(dt_image_probe(files[i].p, files[i].n, files[i].name, DT_IMAGE_MAX_PIXELS, &w, &h, &err) != 0);
        EXPECT_MSG(strstr(err.msg, ": 100000 x 100000 = 10000.0 Mpx is more than max_image_pixels"), "%s", err.msg);
        EXPECT(dt_image_decode(files[i].p, files[i].n, files[i].name, DT_IMAGE_MAX_PIXELS, 1.0, &im, &err) != 0);
        EXPECT_MSG(strstr(err.msg, files[i].name) && strstr(err.msg, "100000 x 100000 = 10000.0 Mpx"), "%s", err.msg);
    }
    free(b.p);
}

DT_TEST(data_loader_skips_oversized_images_with_a_warning) {
    dt_err err;
    dt_test_mkdirs("bombset/train/a");
    dt_test_mkdirs("bombset/train/b");
    uint8_t *px = dt_test_picture(24, 24, 2);
    for (int i = 0; i < 4; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "bombset/train/%c/%d.png", i < 3 ? 'a' : 'b', i);
        EXPECT_EQ_INT(dt_image_write_png(dt_test_path(rel), 24, 24, 3, px, &err), 0);
    }
    free(px);
    size_t n;
    unsigned char *p = dt_test_read_file("bombset/train/a/1.png", &n);
    unsigned char big[8] = {0, 0, 0x20, 0x09, 0, 0, 0x3f, 0x27};
    memcpy(p + 16, big, 8);
    dt_test_write_file("bombset/train/a/1.png", p, n);
    free(p);
    EXPECT_OUTPUT(run_one_epoch, "bombset", "1.png: 8201 x 16167 = 132.6 Mpx is more than max_image_pixels");
    EXPECT_OUTPUT(run_one_epoch, "bombset", "skipped 1\n");
    /* a lower cap (the loader option behind the config key) refuses the 24x24 ones too: every
     * class is dead before the first epoch */
    dt_dataset ds;
    dt_batch b;
    EXPECT_EQ_INT(dt_dataset_open(&ds, dt_test_path("bombset"), "train", NULL, &err), 0);
    dt_loader_opts o = dt_loader_default_opts(1);
    o.batch = 3;
    o.image_size = 16;
    o.workers = 1;
    o.max_pixels = 24 * 24 - 1;
    EXPECT(dt_loader_new(&ds, &o, &err) == NULL);
    EXPECT_MSG(strstr(err.msg, "none of the 3 images of class 'a'"), "%s", err.msg);
    dt_dataset_close(&ds);
    dt_loader *l = start_loader("bombset", &ds, 3, 1, 24 * 24);
    EXPECT_EQ_INT(dt_loader_next(l, &b), 1);
    dt_loader_free(l);
    dt_dataset_close(&ds);
}

DT_TEST(data_jpeg_errors_are_returned) {
    /* Broken JPEGs come back as errors: the process (and the test runner) lives on. */
    dt_err err;
    uint8_t *px = dt_test_picture(64, 48, 3);
    EXPECT_EQ_INT(dt_image_write_jpg(dt_test_path("ok.jpg"), 64, 48, 3, px, 90, &err), 0);
    free(px);
    size_t n;
    unsigned char *j = dt_test_read_file("ok.jpg", &n);
    dt_image im;
    EXPECT_EQ_INT(dt_image_decode(j, n, "ok", DT_IMAGE_MAX_PIXELS, 1.0, &im, &err), 0);
    dt_image_free(&im);
    size_t at = sof_dims(j, n);
    unsigned char *bad = malloc(n);
    struct {
        const char *what;
        size_t off;
        unsigned char v;
        size_t len;
    } cases[] = {
        {"12-bit precision", at - 1, 12, n},
        {"zero width", at + 2, 0, n},
        {"zero components", at + 4, 0, n},
        {"cut after the header", 0, 0, n / 3},
        {"only the SOI marker", 0, 0xFF, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        memcpy(bad, j, n);
        bad[cases[i].off] = cases[i].v;
        if (cases[i].off == at + 2) bad[at + 3] = 0;
        int rc = dt_image_decode(bad, cases[i].len, cases[i].what, DT_IMAGE_MAX_PIXELS, 1.0, &im, &err);
        EXPECT_MSG(rc != 0, "%s: decoded", cases[i].what);
        if (rc == 0) dt_image_free(&im);
        else EXPECT_MSG(strstr(err.msg, cases[i].what), "%s: %s", cases[i].what, err.msg);
    }
#ifdef DT_LIBJPEG
    /* libjpeg-turbo's own words */
    memcpy(bad, j, n);
    EXPECT(dt_image_decode(bad, n / 2, "half", DT_IMAGE_MAX_PIXELS, 1.0, &im, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "Premature end of JPEG file"), "%s", err.msg);
    bad[at - 1] = 12;
    EXPECT(dt_image_decode(bad, n, "p12", DT_IMAGE_MAX_PIXELS, 1.0, &im, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "Unsupported JPEG data precision 12"), "%s", err.msg);
#endif
    free(bad);
    free(j);
}

#ifdef DT_LIBJPEG
DT_TEST(data_jpeg_cmyk_ycck_and_the_scan_limit) {
    /* Adobe CMYK and YCCK (values stored inverted, as Photoshop writes them) give R = C * K / 255
     * per channel, as PIL and stb_image do. */
    int w = 16, h = 16;
    uint8_t cmyk[16 * 16 * 4];
    for (int i = 0; i < w * h; i++) cmyk[i * 4] = 200, cmyk[i * 4 + 1] = 100, cmyk[i * 4 + 2] = 50, cmyk[i * 4 + 3] = 128;
    dt_test_write_libjpeg("cmyk.jpg", w, h, cmyk, 4, JCS_CMYK, JCS_CMYK, NULL, 0);
    dt_test_write_libjpeg("ycck.jpg", w, h, cmyk, 4, JCS_CMYK, JCS_YCCK, NULL, 0);
    const char *files[] = {"cmyk.jpg", "ycck.jpg"};
    dt_err err;
    dt_image im;
    for (int f = 0; f < 2; f++) {
        int rc = dt_image_load(dt_test_path(files[f]), &im, NULL, &err);
        EXPECT_MSG(rc == 0, "%s: %s", files[f], err.msg);
        if (rc) continue;
        EXPECT_NEAR(im.pix[0], 100, 3);
        EXPECT_NEAR(im.pix[1], 50, 3);
        EXPECT_NEAR(im.pix[2], 25, 3);
        dt_image_free(&im);
    }
    /* A valid progressive file of 631 scans (one AC coefficient and one bit per scan) is refused:
     * every scan re-reads the whole coefficient buffer. */
    static jpeg_scan_info scans[1 + 63 * 10];
    int ns = 0;
    scans[ns++] = (jpeg_scan_info){1, {0}, 0, 0, 0, 0};
    for (int k = 1; k < 64; k++) {
        scans[ns++] = (jpeg_scan_info){1, {0}, k, k, 0, 9};
        for (int al = 8; al >= 0; al--) scans[ns++] = (jpeg_scan_info){1, {0}, k, k, al + 1, al};
    }
    uint8_t gray[16 * 16];
    for (int i = 0; i < w * h; i++) gray[i] = (uint8_t)(i * 7);
    dt_test_write_libjpeg("scans.jpg", w, h, gray, 1, JCS_GRAYSCALE, JCS_GRAYSCALE, scans, ns);
    EXPECT(dt_image_load(dt_test_path("scans.jpg"), &im, NULL, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "more than 500 progressive scans"), "%s", err.msg);
    /* ... while a normal progressive one decodes, gray to RGB */
    dt_test_write_libjpeg("prog.jpg", w, h, gray, 1, JCS_GRAYSCALE, JCS_GRAYSCALE, NULL, -1);
    int rc = dt_image_load(dt_test_path("prog.jpg"), &im, NULL, &err);
    EXPECT_MSG(rc == 0, "%s", err.msg);
    if (!rc) {
        EXPECT(im.pix[30] == im.pix[31] && im.pix[31] == im.pix[32]);
        EXPECT_NEAR(im.pix[30], gray[10], 4);
        dt_image_free(&im);
    }
}

#endif

/* Mean and largest |a - b| over n bytes. */
static void diff_u8(const uint8_t *a, const uint8_t *b, size_t n, double *mean, int *max) {
    double s = 0;
    *max = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs(a[i] - b[i]);
        s += d;
        if (d > *max) *max = d;
    }
    *mean = s / n;
}

DT_TEST(data_jpeg_dct_downscaling_keeps_the_output) {
    /* A 1024x768 photo-like JPEG: decoding at the smallest 1/8, 1/4, 1/2 that the transform still
     * downsizes from gives the same S x S output up to resampling. */
    int W = 1024, H = 768, S = 64;
    uint8_t *px = dt_test_picture(W, H, 10);
    dt_err err;
    EXPECT_EQ_INT(dt_image_write_jpg(dt_test_path("big.jpg"), W, H, 3, px, 90, &err), 0);
    free(px);
    size_t n;
    unsigned char *j = dt_test_read_file("big.jpg", &n);
    dt_image full;
    EXPECT_EQ_INT(dt_image_decode(j, n, "big", DT_IMAGE_MAX_PIXELS, 1.0, &full, &err), 0);
#ifdef DT_LIBJPEG
    /* the decoded size is the smallest power-of-two eighth >= min_scale */
    double asks[] = {1.0, 0.51, 0.5, 0.3, 0.25, 0.2, 0.125, 0.01};
    int want[] = {1024, 1024, 512, 512, 256, 256, 128, 128};
#else /* always full size */
    double asks[] = {1.0, 0.5, 0.01};
    int want[] = {1024, 1024, 1024};
#endif
    for (size_t i = 0; i < sizeof asks / sizeof *asks; i++) {
        dt_image im;
        EXPECT_EQ_INT(dt_image_decode(j, n, "big", DT_IMAGE_MAX_PIXELS, asks[i], &im, &err), 0);
        EXPECT_MSG(im.w == want[i] && im.h == want[i] * 3 / 4, "min_scale %g: %dx%d, expected %dx%d", asks[i], im.w,
                   im.h, want[i], want[i] * 3 / 4);
        dt_image_free(&im);
    }
    /* the val transform and 60 train crops: reduced decode vs full decode, same plan */
    uint8_t *u8a = malloc((size_t)S * S * 3), *u8b = malloc((size_t)S * S * 3);
    dt_scratch sc = {0};
    double worst_mean = 0;
    int worst_max = 0, reduced = 0;
    for (int i = 0; i < 61; i++) {
        dt_transform_plan p;
        dt_rng r;
        dt_rng_derive(&r, 3, 0, (uint64_t)i);
        if (i == 0) dt_transform_plan_val(W, H, S, &p);
        else dt_transform_plan_train(W, H, S, 0.08, &r, &p);
        dt_image im;
        EXPECT_EQ_INT(dt_image_decode(j, n, "big", DT_IMAGE_MAX_PIXELS, p.min_scale, &im, &err), 0);
        reduced += im.w < W;
        dt_transform_apply(&p, &im, S, u8a, &sc);
        dt_transform_apply(&p, &full, S, u8b, &sc);
        double mean;
        int max;
        diff_u8(u8a, u8b, (size_t)S * S * 3, &mean, &max);
        if (mean > worst_mean) worst_mean = mean;
        if (max > worst_max) worst_max = max;
        dt_image_free(&im);
    }
    if (dt_test_verbose()) printf("    %d of 61 reduced; worst mean |diff| %.2f, worst max %d (of 255)\n", reduced,
                                  worst_mean, worst_max);
#ifdef DT_LIBJPEG
    EXPECT_MSG(reduced > 45, "only %d of 61 decodes were reduced", reduced);
    EXPECT_MSG(worst_mean < 2.0, "mean |difference| %.2f levels", worst_mean);
    EXPECT_MSG(worst_max < 64, "largest |difference| %d levels", worst_max);
#else /* stb_image decodes at full size: the same pixels */
    EXPECT_EQ_INT(reduced, 0);
    EXPECT_EQ_INT(worst_max, 0);
#endif
    dt_scratch_free(&sc);
    free(u8a);
    free(u8b);
    dt_image_free(&full);
    free(j);
}

DT_TEST(data_loader_epoch_summary_and_dead_classes) {
    dt_err err;
    dt_test_mkdirs("sum/train/a");
    dt_test_mkdirs("sum/train/b");
    uint8_t *px = dt_test_picture(20, 20, 4);
    for (int i = 0; i < 3; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "sum/train/%c/%d.png", "ab"[i % 2], i);
        EXPECT_EQ_INT(dt_image_write_png(dt_test_path(rel), 20, 20, 3, px, &err), 0);
    }
    free(px);
    write_junk("sum/train/a/junk.jpg");
    /* the summary docs/data.md promises, printed when the epoch's last batch is handed out */
    EXPECT_OUTPUT(run_one_epoch, "sum", "epoch 0 of");
    EXPECT_OUTPUT(run_one_epoch, "sum", "1 images did not decode and were replaced by the next ones");
    EXPECT_OUTPUT(run_one_epoch, "sum", "skipped 1\n");
    /* A class none of whose files decodes is an error naming it, not a silent loss, and before
     * the first epoch: it was caught only at the end of an epoch that had tried all its files,
     * so epoch 0 trained without the class. Each of its files is named in a warning. */
    dt_test_mkdirs("sum/train/c");
    write_junk("sum/train/c/1.jpg");
    write_junk("sum/train/c/2.png");
    EXPECT_DEATH(run_one_epoch, "sum", "none of the 2 images of class 'c'");
    EXPECT_OUTPUT(new_loader_loud, "sum", "sum/train/c/2.png: not a JPEG, PNG or BMP file");
    dt_dataset ds;
    EXPECT_EQ_INT(dt_dataset_open(&ds, dt_test_path("sum"), "train", NULL, &err), 0);
    dt_loader_opts o = dt_loader_default_opts(1);
    o.batch = 2;
    o.image_size = 16;
    EXPECT(dt_loader_new(&ds, &o, &err) == NULL);
    EXPECT_MSG(strstr(err.msg, "class 'c'") && strstr(err.msg, "sum/train/c") && strstr(err.msg, "would vanish"), "%s",
               err.msg);
    dt_dataset_close(&ds);
    /* A dataset of one class trained silently at loss 0: an error for a train loader; a val
     * loader of one class is fine. */
    dt_test_mkdirs("one/train/only");
    px = dt_test_picture(20, 20, 4);
    EXPECT_EQ_INT(dt_image_write_png(dt_test_path("one/train/only/1.png"), 20, 20, 3, px, &err), 0);
    free(px);
    EXPECT_EQ_INT(dt_dataset_open(&ds, dt_test_path("one"), "train", NULL, &err), 0);
    o.batch = 1;
    EXPECT(dt_loader_new(&ds, &o, &err) == NULL);
    EXPECT_MSG(strstr(err.msg, "one/train has one class (only): training a classifier needs at least two"), "%s",
               err.msg);
    o.train = 0;
    dt_loader *l = dt_loader_new(&ds, &o, &err);
    EXPECT_MSG(l != NULL, "%s", err.msg);
    dt_loader_free(l);
    dt_dataset_close(&ds);
}
