/* The data pipeline against hostile or broken inputs: symlink loops and duplicate paths in
 * the dataset tree; images whose header declares a decompression bomb; libjpeg-turbo's errors
 * (returned, never an exit), colour spaces, scan limit and DCT-domain downscaling; a class
 * none of whose files decodes; the end-of-epoch summary of skipped files. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data_testutil.h"
#include "dt_dataset.h"
#include "dt_image.h"
#include "dt_loader.h"
#include "dt_synth.h"
#include "dt_test.h"
#include "dt_timer.h"
#include "dt_transform.h"
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
    /* a class folder that is a link to another class: its files are counted under the first */
    dt_test_mkdirs("r4/train/a");
    dt_test_touch("r4/train/a/1.jpg");
    link_to("a", "r4/train/b");
    if (open_count("r4", &ds, 1) == 0) {
        EXPECT_EQ_INT(ds.num_classes, 2);
        EXPECT_EQ_INT(ds.class_count[1], 0);
        EXPECT_EQ_INT(ds.empty_classes, 1);
        dt_dataset_close(&ds);
    }
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

static void write_junk(const char *rel) {
    const char *junk = "not an image at all";
    dt_test_write_file(rel, junk, strlen(junk));
}


/* A smooth, detailed RGB test picture: the sample dataset's renderer. */
static uint8_t *picture(int w, int h, int cls) {
    uint8_t *p = malloc((size_t)w * h * 3);
    dt_synth_render(cls, w, h, 3, 0, 5, p);
    return p;
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
    uint8_t *px = picture(16, 16, 1);
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

DT_TEST(data_stb_sees_only_its_formats_within_a_budget) {
    dt_err err;
    dt_image im;
    /* A 16x16 PNG whose IDAT chunk claims 2 GB: stb reallocated that much for a 100-byte file. */
    unsigned char png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n',
                           0, 0, 0, 13, 'I', 'H', 'D', 'R', 0, 0, 0, 16, 0, 0, 0, 16, 8, 2, 0, 0, 0, 0x90, 0x91, 0x68, 0x36,
                           0x7f, 0xff, 0xff, 0xf0, 'I', 'D', 'A', 'T', 0x78, 0x9c, 1, 2, 3, 4, 5, 6, 7, 8};
    double t0 = dt_now_ms();
    EXPECT(dt_image_decode(png, sizeof png, "idat.png", DT_IMAGE_MAX_PIXELS, 1.0, &im, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "idat.png: corrupt (its data asks for more memory than a 16 x 16 image needs)"), "%s",
               err.msg);
    /* Radiance HDR whose run length of 0 at the end of the file made stb 2.27 loop forever, and
     * a 16-bit PNM that it read past: formats stb is no longer built with. */
    const char hdr[] = "#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n\n-Y 1 +X 8\n\x02\x02\x00\x08";
    const char pnm[] = "P6\n2 2\n65535\n\x01\x02\x03\x04\x05\x06";
    EXPECT(dt_image_decode(hdr, sizeof hdr - 1, "loop.hdr", DT_IMAGE_MAX_PIXELS, 1.0, &im, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "unknown image type"), "%s", err.msg);
    EXPECT(dt_image_decode(pnm, sizeof pnm - 1, "deep.ppm", DT_IMAGE_MAX_PIXELS, 1.0, &im, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "unknown image type"), "%s", err.msg);
    EXPECT_MSG(dt_now_ms() - t0 < 100, "took %.0f ms", dt_now_ms() - t0);
}

DT_TEST(data_loader_skips_oversized_images_with_a_warning) {
    dt_err err;
    dt_test_mkdirs("bombset/train/a");
    uint8_t *px = picture(24, 24, 2);
    for (int i = 0; i < 3; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "bombset/train/a/%d.png", i);
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
    /* a lower cap (the loader option behind the config key) refuses the 24x24 ones too */
    dt_dataset ds;
    dt_batch b;
    dt_loader *l = start_loader("bombset", &ds, 3, 1, 24 * 24 - 1);
    EXPECT_EQ_INT(dt_loader_next(l, &b), -1);
    dt_loader_free(l);
    dt_dataset_close(&ds);
    l = start_loader("bombset", &ds, 3, 1, 24 * 24);
    EXPECT_EQ_INT(dt_loader_next(l, &b), 1);
    dt_loader_free(l);
    dt_dataset_close(&ds);
}

DT_TEST(data_jpeg_errors_are_returned) {
    /* Broken JPEGs come back as errors: the process (and the test runner) lives on. */
    dt_err err;
    uint8_t *px = picture(64, 48, 3);
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
/* Writes a JPEG with libjpeg: `in` has `comps` components of colour space `in_cs`, stored as
 * `jpeg_cs`; `scans` is a progressive scan script (NULL: baseline, or libjpeg's standard
 * progression when nscans < 0). */
static void write_libjpeg(const char *rel, int w, int h, const uint8_t *in, int comps, J_COLOR_SPACE in_cs,
                          J_COLOR_SPACE jpeg_cs, const jpeg_scan_info *scans, int nscans) {
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    FILE *f = fopen(dt_test_path(rel), "wb");
    jpeg_stdio_dest(&c, f);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = comps;
    c.in_color_space = in_cs;
    jpeg_set_defaults(&c);
    jpeg_set_colorspace(&c, jpeg_cs);
    jpeg_set_quality(&c, 95, TRUE);
    if (scans) {
        c.scan_info = scans;
        c.num_scans = nscans;
    } else if (nscans < 0) {
        jpeg_simple_progression(&c);
    }
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)(in + (size_t)c.next_scanline * w * comps);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    fclose(f);
}

DT_TEST(data_jpeg_cmyk_ycck_and_the_scan_limit) {
    /* Adobe CMYK and YCCK (values stored inverted, as Photoshop writes them) give R = C * K / 255
     * per channel, as PIL and stb_image do. */
    int w = 16, h = 16;
    uint8_t cmyk[16 * 16 * 4];
    for (int i = 0; i < w * h; i++) cmyk[i * 4] = 200, cmyk[i * 4 + 1] = 100, cmyk[i * 4 + 2] = 50, cmyk[i * 4 + 3] = 128;
    write_libjpeg("cmyk.jpg", w, h, cmyk, 4, JCS_CMYK, JCS_CMYK, NULL, 0);
    write_libjpeg("ycck.jpg", w, h, cmyk, 4, JCS_CMYK, JCS_YCCK, NULL, 0);
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
    write_libjpeg("scans.jpg", w, h, gray, 1, JCS_GRAYSCALE, JCS_GRAYSCALE, scans, ns);
    EXPECT(dt_image_load(dt_test_path("scans.jpg"), &im, NULL, &err) != 0);
    EXPECT_MSG(strstr(err.msg, "more than 500 progressive scans"), "%s", err.msg);
    /* ... while a normal progressive one decodes, gray to RGB */
    write_libjpeg("prog.jpg", w, h, gray, 1, JCS_GRAYSCALE, JCS_GRAYSCALE, NULL, -1);
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
    uint8_t *px = picture(W, H, 10);
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
    float *out = malloc(sizeof(float) * 3 * S * S);
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
        dt_transform_apply(&p, &im, S, out, u8a, &sc);
        dt_transform_apply(&p, &full, S, out, u8b, &sc);
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
    free(out);
    free(u8a);
    free(u8b);
    dt_image_free(&full);
    free(j);
}

DT_TEST(data_loader_epoch_summary_and_dead_classes) {
    dt_err err;
    dt_test_mkdirs("sum/train/a");
    dt_test_mkdirs("sum/train/b");
    uint8_t *px = picture(20, 20, 4);
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
    /* a class none of whose files decodes is an error naming it, not a silent loss */
    dt_test_mkdirs("sum/train/c");
    write_junk("sum/train/c/1.jpg");
    write_junk("sum/train/c/2.png");
    EXPECT_DEATH(run_one_epoch, "sum", "none of the 2 images of class 'c'");
    dt_dataset ds;
    dt_loader *l = start_loader("sum", &ds, 7, 3, DT_IMAGE_MAX_PIXELS);
    dt_batch b;
    EXPECT_EQ_INT(dt_loader_next(l, &b), -1);
    EXPECT_MSG(strstr(dt_loader_error(l), "class 'c'") && strstr(dt_loader_error(l), "sum/train/c"), "%s",
               dt_loader_error(l));
    dt_loader_free(l);
    dt_dataset_close(&ds);
}
