/* deftc's own walk of a JPEG's markers (dt_jpeg_read_layout) and the rule that sends a file
 * to nvJPEG (dt_jpeg_gpu_decodable): real JPEGs from the repo's writer (stb_image_write, as
 * mkdata writes them) and, with libjpeg-turbo, progressive ones; variants made by editing
 * their bytes (SOF type, precision, sampling, an inserted Adobe marker, truncations, trailing
 * bytes); hand-made marker streams (4 components, R G B ids, stuffing, restarts and fill in
 * the entropy-coded data, broken segments); every prefix of a file; the fuzz corpus; mkdata's
 * dataset. Every walk reads from a buffer of exactly the walked size, so that ASan (make test
 * SAN=1) sees any read past the end. */
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/data_testutil.h"
#include "data/dt_image.h"
#include "data/dt_image_header.h"
#include "data/dt_synth.h"
#include "tests/dt_test.h"
#include "core/dt_timer.h"
#ifdef DT_LIBJPEG
#include <setjmp.h>
#include <jpeglib.h>
#endif

/* ---- helpers ---- */

/* The walk on a private copy of exactly n bytes (ASan catches a read past it). */
static int walk(const unsigned char *p, size_t n, dt_jpeg_layout *l, const char **why) {
    unsigned char *c = malloc(n ? n : 1);
    if (n) memcpy(c, p, n);
    int rc = dt_jpeg_read_layout(c, n, l, why);
    free(c);
    return rc;
}

/* A walk that must succeed; returns dt_jpeg_gpu_decodable's verdict (its reason in *why). */
static int walk_ok(const char *what, const unsigned char *p, size_t n, dt_jpeg_layout *l, const char **why) {
    const char *w = NULL;
    int rc = walk(p, n, l, &w);
    EXPECT_MSG(rc == 0, "%s: the walk failed: %s", what, w ? w : "(no reason)");
    if (rc) return -1;
    return dt_jpeg_gpu_decodable(l, why);
}

/* A walk that must fail with `needle` in its reason. */
static void expect_broken(const char *what, const unsigned char *p, size_t n, const char *needle) {
    dt_jpeg_layout l;
    const char *why = NULL;
    int rc = walk(p, n, &l, &why);
    EXPECT_MSG(rc == -1, "%s: walked (expected a failure naming '%s')", what, needle);
    if (rc == -1)
        EXPECT_MSG(why && strstr(why, needle), "%s: reason '%s', expected '%s'", what, why ? why : "(null)", needle);
}

/* Decodable, or not with `needle` in the reason. */
static void expect_gpu(const char *what, const unsigned char *p, size_t n, int want, const char *needle) {
    dt_jpeg_layout l;
    const char *why = NULL;
    int ok = walk_ok(what, p, n, &l, &why);
    if (ok < 0) return;
    EXPECT_MSG(ok == want, "%s: gpu_decodable %d, expected %d (%s)", what, ok, want, why ? why : "no reason");
    if (!want && ok == 0) EXPECT_MSG(why && strstr(why, needle), "%s: reason '%s', expected '%s'", what, why, needle);
    if (want && ok == 1) EXPECT(why == NULL);
}

/* A shapes image of w x h written by the repo's writer (stb_image_write: baseline, JFIF,
 * component ids 1 2 3; 4:2:0 at quality <= 90, 4:4:4 above), read back whole. */
static unsigned char *stb_jpeg(int w, int h, int quality, size_t *n) {
    uint8_t *rgb = malloc((size_t)w * h * 3);
    dt_synth_render(5, w, h, 1, 0, 3, rgb);
    dt_err err;
    EXPECT_EQ_INT(dt_image_write_jpg(dt_test_path("stb.jpg"), w, h, 3, rgb, quality, &err), 0);
    free(rgb);
    return dt_test_read_file("stb.jpg", n);
}

/* The offset of the FF of the first segment with marker m (walked from SOI up to the first
 * SOS: a separate, simple walk of a well-formed file), or SIZE_MAX. */
static size_t find_seg(const unsigned char *p, size_t n, int m) {
    size_t at = 2;
    while (at + 4 <= n && p[at] == 0xFF) {
        if (p[at + 1] == m) return at;
        if (p[at + 1] == 0xDA) break;
        at += 2 + ((size_t)p[at + 2] << 8 | p[at + 3]);
    }
    return SIZE_MAX;
}

/* A copy of p with `ins` (k bytes) inserted at offset `where`. */
static unsigned char *insert(const unsigned char *p, size_t n, size_t where, const void *ins, size_t k) {
    unsigned char *q = malloc(n + k);
    memcpy(q, p, where);
    memcpy(q + where, ins, k);
    memcpy(q + where + k, p + where, n - where);
    return q;
}

static void put_bytes(dt_test_buf *b, const unsigned char *d, size_t n) { dt_test_put(b, d, n); }
#define PUT(b, ...)                                                    \
    do {                                                               \
        static const unsigned char bytes_[] = {__VA_ARGS__};          \
        put_bytes((b), bytes_, sizeof bytes_);                          \
    } while (0)

/* A marker segment: FF m, length (n + 2, big-endian), data. */
static void put_seg(dt_test_buf *b, int m, const unsigned char *data, size_t n) {
    unsigned char h[4] = {0xFF, (unsigned char)m, (unsigned char)((n + 2) >> 8), (unsigned char)(n + 2)};
    dt_test_put(b, h, 4);
    dt_test_put(b, data, n);
}

/* SOF marker m: 8-bit, w x h, nc components with ids[c] and sampling hv[c] (H << 4 | V). */
static void put_sof(dt_test_buf *b, int m, int precision, int w, int h, int nc, const unsigned char *ids,
                    const unsigned char *hv) {
    unsigned char d[6 + 3 * 4] = {(unsigned char)precision, (unsigned char)(h >> 8), (unsigned char)h,
                                  (unsigned char)(w >> 8), (unsigned char)w, (unsigned char)nc};
    for (int c = 0; c < nc; c++) d[6 + 3 * c] = ids[c], d[7 + 3 * c] = hv[c], d[8 + 3 * c] = 0;
    put_seg(b, m, d, 6 + 3 * (size_t)nc);
}

/* SOS over nc components with ids[c], a full spectral range. */
static void put_sos(dt_test_buf *b, int nc, const unsigned char *ids) {
    unsigned char d[1 + 2 * 4 + 3] = {(unsigned char)nc};
    for (int c = 0; c < nc; c++) d[1 + 2 * c] = ids[c], d[2 + 2 * c] = 0;
    d[1 + 2 * nc] = 0, d[2 + 2 * nc] = 63, d[3 + 2 * nc] = 0;
    put_seg(b, 0xDA, d, 4 + 2 * (size_t)nc);
}

/* An 8-bit frame of nc components and its one scan's header: SOF m, then SOS (the entropy data
 * and EOI come after). */
static void put_frame(dt_test_buf *b, int m, int w, int h, int nc, const unsigned char *ids, const unsigned char *hv) {
    put_sof(b, m, 8, w, h, nc, ids, hv);
    put_sos(b, nc, ids);
}

/* APP14 "Adobe" with the given transform: "Adobe", version 100, flags0, flags1, transform. */
static const unsigned char adobe0[16] = {0xFF, 0xEE, 0, 14, 'A', 'd', 'o', 'b', 'e', 0, 100, 0, 0, 0, 0, 0};
static void put_adobe(dt_test_buf *b, int transform) {
    unsigned char a[16];
    memcpy(a, adobe0, 16);
    a[15] = (unsigned char)transform;
    dt_test_put(b, a, 16);
}

static const unsigned char ids123[4] = {1, 2, 3, 4};

#ifdef DT_LIBJPEG
/* A JPEG written by libjpeg (dt_test_libjpeg): `progressive` with libjpeg's standard script (10
 * scans for YCbCr), 4:2:0. The bytes are malloc'ed. */
static unsigned char *libjpeg_jpeg(int w, int h, int progressive, size_t *n) {
    uint8_t *rgb = malloc((size_t)w * h * 3);
    dt_synth_render(2, w, h, 1, 0, 4, rgb);
    unsigned char *q = dt_test_libjpeg(w, h, rgb, 3, JCS_RGB, JCS_YCbCr, NULL, progressive ? -1 : 0, n);
    free(rgb);
    return q;
}

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf back;
} lj_guard;
static void lj_fail(j_common_ptr c) { longjmp(((lj_guard *)c->err)->back, 1); }
static void lj_quiet(j_common_ptr c, int level) { (void)c, (void)level; }

/* What libjpeg's jpeg_read_header reads from the same file agrees with the walk. */
static void expect_libjpeg_agrees(const char *what, const unsigned char *p, size_t n, const dt_jpeg_layout *l) {
    struct jpeg_decompress_struct d;
    lj_guard g;
    d.err = jpeg_std_error(&g.pub);
    g.pub.error_exit = lj_fail;
    g.pub.emit_message = lj_quiet;
    jpeg_create_decompress(&d);
    if (setjmp(g.back)) {
        dt_test_fail(__FILE__, __LINE__, "%s: libjpeg cannot read the header the walk read", what);
        jpeg_destroy_decompress(&d);
        return;
    }
    jpeg_mem_src(&d, p, (unsigned long)n);
    jpeg_read_header(&d, TRUE);
    EXPECT_MSG((int)d.image_width == l->w && (int)d.image_height == l->h, "%s: %d x %d, libjpeg %u x %u", what, l->w,
               l->h, d.image_width, d.image_height);
    EXPECT_MSG(d.num_components == l->components, "%s: %d components, libjpeg %d", what, l->components,
               d.num_components);
    EXPECT_MSG(d.data_precision == l->precision, "%s: precision %d, libjpeg %d", what, l->precision, d.data_precision);
    EXPECT_MSG(!!d.progressive_mode == (l->sof == 0xC2 || l->sof == 0xC6 || l->sof == 0xCA || l->sof == 0xCE),
               "%s: SOF %02X, libjpeg progressive %d", what, l->sof, d.progressive_mode);
    EXPECT_MSG(!!d.saw_Adobe_marker == (l->adobe_transform >= 0), "%s: Adobe transform %d, libjpeg saw Adobe %d",
               what, l->adobe_transform, d.saw_Adobe_marker);
    if (d.saw_Adobe_marker) EXPECT_EQ_INT(d.Adobe_transform, l->adobe_transform);
    for (int c = 0; c < d.num_components && c < 4; c++) {
        EXPECT_MSG(d.comp_info[c].h_samp_factor == l->hs[c] && d.comp_info[c].v_samp_factor == l->vs[c] &&
                   d.comp_info[c].component_id == l->ids[c], "%s: component %d differs from libjpeg's", what, c);
    }
    jpeg_destroy_decompress(&d);
}
#endif

/* ---- real files ---- */

DT_TEST(jpeg_layout_baseline_420_and_444_files_are_gpu_decodable) {
    size_t n;
    unsigned char *p = stb_jpeg(80, 60, 90, &n);
    dt_jpeg_layout l;
    const char *why = NULL;
    EXPECT_EQ_INT(walk_ok("4:2:0", p, n, &l, &why), 1);
    EXPECT_EQ_INT(l.w, 80);
    EXPECT_EQ_INT(l.h, 60);
    EXPECT_EQ_INT(l.sof, 0xC0);
    EXPECT_EQ_INT(l.precision, 8);
    EXPECT_EQ_INT(l.components, 3);
    EXPECT_EQ_INT(l.hs[0], 2);
    EXPECT_EQ_INT(l.vs[0], 2);
    EXPECT_EQ_INT(l.hs[1], 1);
    EXPECT_EQ_INT(l.vs[1], 1);
    EXPECT_EQ_INT(l.hs[2], 1);
    EXPECT_EQ_INT(l.vs[2], 1);
    EXPECT_EQ_INT(l.hs[3], 0);
    EXPECT_EQ_INT(l.ids[0], 1);
    EXPECT_EQ_INT(l.ids[2], 3);
    EXPECT_EQ_INT(l.adobe_transform, -1);
    EXPECT_EQ_INT(l.scans, 1);
    EXPECT_EQ_INT(l.has_eoi, 1);
#ifdef DT_LIBJPEG
    expect_libjpeg_agrees("4:2:0", p, n, &l);
#endif
    free(p);
    /* 4:4:4 above quality 90; an odd size (not a multiple of the MCU) */
    p = stb_jpeg(501, 375, 95, &n);
    EXPECT_EQ_INT(walk_ok("4:4:4", p, n, &l, &why), 1);
    EXPECT_EQ_INT(l.w, 501);
    EXPECT_EQ_INT(l.h, 375);
    EXPECT_EQ_INT(l.hs[0], 1);
    EXPECT_EQ_INT(l.vs[0], 1);
    free(p);
}

DT_TEST(jpeg_layout_sof_type_and_precision_name_the_reason) {
    size_t n;
    unsigned char *p = stb_jpeg(48, 32, 90, &n);
    size_t o = find_seg(p, n, 0xC0);
    EXPECT(o != SIZE_MAX);
    if (o == SIZE_MAX) {
        free(p);
        return;
    }
    static const struct {
        int sof;
        const char *needle;
    } kinds[] = {{0xC1, NULL}, {0xC2, "progressive"}, {0xC3, "lossless"}, {0xC9, "arithmetic"}, {0xCA, "progressive"}};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        unsigned char *q = malloc(n);
        memcpy(q, p, n);
        q[o + 1] = (unsigned char)kinds[k].sof;
        char what[32];
        snprintf(what, sizeof what, "SOF %02X", kinds[k].sof);
        expect_gpu(what, q, n, kinds[k].needle == NULL, kinds[k].needle ? kinds[k].needle : "");
        dt_jpeg_layout l;
        if (walk(q, n, &l, NULL) == 0) EXPECT_EQ_INT(l.sof, kinds[k].sof);
        free(q);
    }
    /* precision 12 (and 16): the byte after the SOF's length */
    p[o + 4] = 12;
    expect_gpu("12-bit", p, n, 0, "12-bit samples");
    p[o + 4] = 16;
    expect_gpu("16-bit", p, n, 0, "other than 8 bits");
    free(p);
}

DT_TEST(jpeg_layout_four_components_are_not_gpu_decodable) {
    /* SOI, (Adobe transform 2: YCCK), SOF0 with 4 components, SOS, a few bytes, EOI */
    for (int adobe = 0; adobe < 2; adobe++) {
        dt_test_buf b = {0};
        PUT(&b, 0xFF, 0xD8);
        if (adobe) put_adobe(&b, 2);
        static const unsigned char hv[4] = {0x22, 0x11, 0x11, 0x22};
        put_frame(&b, 0xC0, 16, 16, 4, ids123, hv);
        PUT(&b, 0x12, 0x34, 0x56, 0xFF, 0xD9);
        dt_jpeg_layout l;
        const char *why;
        EXPECT_EQ_INT(walk_ok("4 components", b.p, b.n, &l, &why), 0);
        EXPECT_EQ_INT(l.components, 4);
        EXPECT_EQ_INT(l.hs[3], 2);
    EXPECT_EQ_INT(l.vs[3], 2);
        EXPECT_EQ_INT(l.adobe_transform, adobe ? 2 : -1);
        EXPECT_EQ_INT(l.has_eoi, 1);
        EXPECT_MSG(why && !strcmp(why, "4 components (CMYK/YCCK)"), "reason '%s'", why ? why : "(null)");
        free(b.p);
    }
    /* 2 components */
    dt_test_buf b = {0};
    PUT(&b, 0xFF, 0xD8);
    static const unsigned char hv2[2] = {0x11, 0x11};
    put_frame(&b, 0xC0, 8, 8, 2, ids123, hv2);
    PUT(&b, 0x00, 0xFF, 0xD9);
    expect_gpu("2 components", b.p, b.n, 0, "2 components");
    free(b.p);
}

DT_TEST(jpeg_layout_rgb_without_ycbcr_is_not_gpu_decodable) {
    size_t n;
    unsigned char *p = stb_jpeg(32, 32, 90, &n);
    /* an Adobe APP14 segment right after SOI: transform 0 = RGB, 1 = YCbCr */
    for (int t = 0; t < 3; t++) {
        unsigned char a[16];
        memcpy(a, adobe0, 16);
        a[15] = (unsigned char)t;
        unsigned char *q = insert(p, n, 2, a, 16);
        dt_jpeg_layout l;
        const char *why;
        int ok = walk_ok("Adobe", q, n + 16, &l, &why);
        EXPECT_EQ_INT(l.adobe_transform, t);
        EXPECT_EQ_INT(ok, t != 0);
        if (t == 0) EXPECT_MSG(why && !strcmp(why, "RGB (Adobe transform 0)"), "reason '%s'", why ? why : "(null)");
#ifdef DT_LIBJPEG
        expect_libjpeg_agrees("Adobe", q, n + 16, &l);
#endif
        free(q);
    }
    /* an APP14 too short to hold the transform, or not "Adobe": no Adobe marker */
    static const unsigned char short_adobe[] = {0xFF, 0xEE, 0, 13, 'A', 'd', 'o', 'b', 'e', 0, 100, 0, 0, 0, 0};
    static const unsigned char other_app14[] = {0xFF, 0xEE, 0, 14, 'A', 'd', 'o', 'b', 'X', 0, 100, 0, 0, 0, 0, 0};
    unsigned char *q = insert(p, n, 2, short_adobe, sizeof short_adobe);
    dt_jpeg_layout l;
    const char *why;
    EXPECT_EQ_INT(walk_ok("short APP14", q, n + sizeof short_adobe, &l, &why), 1);
    EXPECT_EQ_INT(l.adobe_transform, -1);
    free(q);
    q = insert(p, n, 2, other_app14, sizeof other_app14);
    EXPECT_EQ_INT(walk_ok("other APP14", q, n + sizeof other_app14, &l, &why), 1);
    EXPECT_EQ_INT(l.adobe_transform, -1);
    free(q);
    free(p);
    /* components named R, G, B without an Adobe marker: libjpeg reads RGB; with Adobe
     * transform 1 it reads YCbCr */
    static const unsigned char rgb_ids[3] = {'R', 'G', 'B'}, hv[3] = {0x22, 0x11, 0x11};
    for (int adobe = 0; adobe < 2; adobe++) {
        dt_test_buf b = {0};
        PUT(&b, 0xFF, 0xD8);
        if (adobe) put_adobe(&b, 1);
        put_frame(&b, 0xC0, 16, 16, 3, rgb_ids, hv);
        PUT(&b, 0x12, 0x34, 0xFF, 0xD9);
        expect_gpu(adobe ? "R G B ids, Adobe 1" : "R G B ids", b.p, b.n, adobe, "RGB (components named R, G, B)");
        free(b.p);
    }
}

DT_TEST(jpeg_layout_sampling_factors_nvjpeg_takes) {
    size_t n;
    unsigned char *p = stb_jpeg(64, 64, 90, &n);
    size_t o = find_seg(p, n, 0xC0);
    EXPECT(o != SIZE_MAX);
    if (o == SIZE_MAX) {
        free(p);
        return;
    }
    /* o + 11, + 14, + 17: H << 4 | V of components 0, 1, 2 */
    EXPECT_EQ_INT(p[o + 11], 0x22);
    static const struct {
        unsigned char y, cb;
        int ok;
        const char *needle;
    } cases[] = {
        {0x11, 0x11, 1, NULL},                        /* 4:4:4 */
        {0x21, 0x11, 1, NULL},                        /* 4:2:2 */
        {0x22, 0x11, 1, NULL},                        /* 4:2:0 */
        {0x12, 0x11, 1, NULL},                        /* 4:4:0 */
        {0x41, 0x11, 0, "chroma subsampling 4 x 1"},  /* 4:1:1 */
        {0x44, 0x11, 0, "chroma subsampling 4 x 4"},
        {0x13, 0x11, 0, "chroma subsampling 1 x 3"},
        {0x22, 0x21, 0, "chroma sampled other than 1 x 1"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        p[o + 11] = cases[k].y;
        p[o + 14] = cases[k].cb;
        char what[32];
        snprintf(what, sizeof what, "Y %02X Cb %02X", cases[k].y, cases[k].cb);
        expect_gpu(what, p, n, cases[k].ok, cases[k].needle ? cases[k].needle : "");
    }
    /* a factor of 0 or 5 is a broken SOF */
    p[o + 14] = 0x11;
    p[o + 11] = 0x02;
    expect_broken("H 0", p, n, "sampling factor");
    p[o + 11] = 0x25;
    expect_broken("V 5", p, n, "sampling factor");
    free(p);
    /* one component: any factors */
    dt_test_buf b = {0};
    PUT(&b, 0xFF, 0xD8);
    static const unsigned char hv[1] = {0x41};
    put_frame(&b, 0xC1, 16, 16, 1, ids123, hv);
    PUT(&b, 0x12, 0xFF, 0xD9);
    expect_gpu("gray 4 x 1", b.p, b.n, 1, "");
    free(b.p);
}

DT_TEST(jpeg_layout_truncated_files) {
    size_t n;
    unsigned char *p = stb_jpeg(64, 48, 90, &n);
    size_t sos = find_seg(p, n, 0xDA), sof = find_seg(p, n, 0xC0), dqt = find_seg(p, n, 0xDB);
    EXPECT(sos != SIZE_MAX && sof != SIZE_MAX && dqt != SIZE_MAX);
    if (sos == SIZE_MAX || sof == SIZE_MAX || dqt == SIZE_MAX) {
        free(p);
        return;
    }
    size_t data = sos + 2 + ((size_t)p[sos + 2] << 8 | p[sos + 3]); /* the first entropy-coded byte */
    EXPECT(data < n - 2);
    EXPECT_EQ_INT(p[n - 2], 0xFF);
    EXPECT_EQ_INT(p[n - 1], 0xD9);
    /* inside the entropy-coded data (n - 1: the EOI's FF is there, its D9 is not) */
    size_t cuts[] = {data, data + 1, (data + n) / 2, n - 3, n - 2, n - 1};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
        dt_jpeg_layout l;
        const char *why;
        char what[48];
        snprintf(what, sizeof what, "cut at %zu of %zu", cuts[k], n);
        int ok = walk_ok(what, p, cuts[k], &l, &why);
        if (ok < 0) continue;
        EXPECT_EQ_INT(l.scans, 1);
        EXPECT_EQ_INT(l.has_eoi, 0);
        EXPECT_EQ_INT(ok, 0);
        EXPECT_MSG(why && !strcmp(why, "truncated: no EOI marker"), "%s: reason '%s'", what, why ? why : "(null)");
    }
    /* inside a marker segment: its length, its data, the SOS segment */
    expect_broken("cut in the SOF's length", p, sof + 3, "runs past the end of the file");
    expect_broken("cut in the SOF", p, sof + 9, "runs past the end of the file");
    expect_broken("cut in the DQT", p, dqt + 20, "runs past the end of the file");
    expect_broken("cut in the SOS", p, sos + 6, "runs past the end of the file");
    expect_broken("cut after a marker byte", p, sof + 2, "runs past the end of the file");
    /* between segments before the first SOS: no image */
    expect_broken("cut before the SOS", p, sos, "before any SOS");
    expect_broken("cut before the SOS's marker byte", p, sos + 1, "before any SOS");
    free(p);
}

DT_TEST(jpeg_layout_trailing_bytes_after_eoi_are_ignored) {
    size_t n;
    unsigned char *p = stb_jpeg(40, 40, 90, &n);
    /* garbage that would break the walk if it were read: a segment running past the end, a
     * second SOI, a progressive SOF */
    static const unsigned char tail[] = {0x00, 0x17, 0xFF, 0xD8, 0xFF, 0xC2, 0x7F, 0xFF, 0x01, 0xFF, 0xE1, 0xFF, 0xFF};
    unsigned char *q = insert(p, n, n, tail, sizeof tail);
    expect_gpu("trailing garbage", q, n + sizeof tail, 1, "");
    free(q);
    /* a whole second JPEG after the first (thumbnails appended by some cameras) */
    q = insert(p, n, n, p, n);
    dt_jpeg_layout l;
    const char *why;
    EXPECT_EQ_INT(walk_ok("two JPEGs", q, 2 * n, &l, &why), 1);
    EXPECT_EQ_INT(l.scans, 1);
    free(q);
    free(p);
}

DT_TEST(jpeg_layout_entropy_data_stuffing_restarts_and_fill) {
    static const unsigned char hv[3] = {0x22, 0x11, 0x11};
    /* scan 1: a stuffed FF before D9 and DA (not EOI, not SOS), restarts, fill before a
     * restart's marker byte; scan 2: stuffing at its end, fill before EOI */
    dt_test_buf b = {0};
    PUT(&b, 0xFF, 0xD8);
    PUT(&b, 0xFF, 0xDD, 0x00, 0x04, 0x00, 0x01); /* DRI: a restart every MCU */
    put_frame(&b, 0xC0, 32, 16, 3, ids123, hv);
    PUT(&b, 0x12, 0xFF, 0x00, 0xD9, 0xFF, 0xD0, 0x34, 0xFF, 0x00, 0xDA, 0xFF, 0xD7, 0xFF, 0xFF, 0xD1, 0x56, 0xFF, 0x00,
        0xFF, 0x00);
    put_sos(&b, 3, ids123);
    PUT(&b, 0x78, 0xFF, 0x00, 0xFF, 0xFF, 0xFF, 0xD9);
    dt_jpeg_layout l;
    const char *why;
    EXPECT_EQ_INT(walk_ok("stuffing", b.p, b.n, &l, &why), 0);
    EXPECT_EQ_INT(l.scans, 2); /* the walk went past every FF 00, FF Dn and FF FF to the second SOS */
    EXPECT_EQ_INT(l.has_eoi, 1);
    EXPECT_MSG(why && !strcmp(why, "2 scans"), "reason '%s'", why ? why : "(null)");
    /* the same data in one scan is decodable */
    dt_test_buf c = {0};
    PUT(&c, 0xFF, 0xD8);
    put_sof(&c, 0xC0, 8, 32, 16, 3, ids123, hv);
    put_sos(&c, 3, ids123);
    PUT(&c, 0x12, 0xFF, 0x00, 0xD9, 0xFF, 0xD0, 0x34, 0xFF, 0x00, 0xDA, 0xFF, 0xD7, 0xFF, 0xFF, 0xD1, 0xFF, 0x00, 0xFF,
        0xFF, 0xD9, 0xAA);
    expect_gpu("one scan", c.p, c.n, 1, "");
    /* cut after each byte of the entropy-coded data up to the EOI's D9: no error, no EOI */
    size_t start = c.n - 21;
    for (size_t k = start; k < c.n - 1; k++) {
        EXPECT_EQ_INT(walk(c.p, k, &l, &why), 0);
        EXPECT_EQ_INT(l.has_eoi, 0);
    }
    /* a segment after the scan, then the end: truncated between segments, no error */
    dt_test_buf d = {0};
    dt_test_put(&d, c.p, start);
    PUT(&d, 0x12, 0x34, 0xFF, 0xFE, 0x00, 0x04, 'h', 'i');
    EXPECT_EQ_INT(walk(d.p, d.n, &l, &why), 0);
    EXPECT_EQ_INT(l.has_eoi, 0);
    EXPECT_EQ_INT(l.scans, 1);
    /* TEM and a restart marker between segments have no length */
    dt_test_buf e = {0};
    PUT(&e, 0xFF, 0xD8, 0xFF, 0x01, 0xFF, 0xD3, 0xFF, 0xFF, 0xFF, 0xFE, 0x00, 0x02);
    put_sof(&e, 0xC0, 8, 8, 8, 3, ids123, hv);
    put_sos(&e, 3, ids123);
    PUT(&e, 0x00, 0xFF, 0xD9);
    expect_gpu("TEM, RST, fill, empty COM", e.p, e.n, 1, "");
    free(b.p), free(c.p), free(d.p), free(e.p);
}

DT_TEST(jpeg_layout_broken_structure_is_refused) {
    static const unsigned char hv[3] = {0x22, 0x11, 0x11};
    static const unsigned char no_soi[] = {0xFF, 0xD9, 0xFF, 0xD8};
    expect_broken("empty", no_soi, 0, "no SOI marker");
    expect_broken("1 byte", no_soi + 2, 1, "no SOI marker");
    expect_broken("EOI first", no_soi, sizeof no_soi, "no SOI marker");
    size_t n;
    unsigned char *p = stb_jpeg(16, 16, 90, &n);
    p[1] = 0xD9;
    expect_broken("SOI changed", p, n, "no SOI marker");
    p[1] = 0xD8;
    /* a segment length of 0 or 1 (it counts its own 2 bytes), and of 2 (no data: fine) */
    for (int len = 0; len < 3; len++) {
        unsigned char com[4] = {0xFF, 0xFE, 0x00, (unsigned char)len};
        unsigned char *q = insert(p, n, 2, com, 4);
        if (len < 2) expect_broken("length < 2", q, n + 4, "length below 2");
        else expect_gpu("an empty COM", q, n + 4, 1, "");
        free(q);
    }
    /* a length running past the end */
    static const unsigned char huge[4] = {0xFF, 0xE1, 0xFF, 0xFF};
    unsigned char *q = insert(p, n, 2, huge, 4);
    expect_broken("APP1 of 65535 bytes", q, n + 4, "runs past the end of the file");
    free(q);
    /* bytes between segments that are not a marker; FF 00 there; a second SOI */
    static const unsigned char junk[2] = {0x00, 0x41}, stuffed[2] = {0xFF, 0x00}, soi[2] = {0xFF, 0xD8};
    q = insert(p, n, 2, junk, 2);
    expect_broken("junk", q, n + 2, "other than a marker");
    free(q);
    q = insert(p, n, 2, stuffed, 2);
    expect_broken("FF 00", q, n + 2, "outside the entropy-coded data");
    free(q);
    q = insert(p, n, 2, soi, 2);
    expect_broken("two SOIs", q, n + 2, "second SOI");
    free(q);
    /* two SOFs */
    size_t sof = find_seg(p, n, 0xC0);
    size_t sof_len = 2 + ((size_t)p[sof + 2] << 8 | p[sof + 3]);
    q = insert(p, n, sof, p + sof, sof_len);
    expect_broken("two SOFs", q, n + sof_len, "two SOF markers");
    free(q);
    free(p);
    /* hand-made streams */
    struct {
        const char *what, *needle;
        int kind;
    } cases[] = {
        {"SOS before SOF", "no SOF before the first SOS", 0},
        {"EOI before SOS", "EOI marker before any SOS", 1},
        {"SOF of 5 bytes", "SOF segment too short", 2},
        {"SOF of 0 components", "0 components", 3},
        {"SOF of 5 components", "more than 4 components", 4},
        {"SOF shorter than its components", "SOF segment too short", 5},
        {"SOF longer than its components", "longer than its components", 6},
        {"width 0", "image size 0", 7},
        {"SOS of 0 components", "SOS with 0", 8},
        {"SOS length", "SOS segment length", 9},
        {"SOS component id", "SOS names a component", 10},
        {"SOS of 0 bytes", "SOS segment too short", 11},
        {"DHT is not a SOF", "no SOF before the first SOS", 12},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        dt_test_buf b = {0};
        PUT(&b, 0xFF, 0xD8);
        int kind = cases[k].kind;
        if (kind == 2) PUT(&b, 0xFF, 0xC0, 0x00, 0x07, 8, 0, 16, 0, 16);
        if (kind == 3) PUT(&b, 0xFF, 0xC0, 0x00, 0x08, 8, 0, 16, 0, 16, 0);
        if (kind == 4) PUT(&b, 0xFF, 0xC0, 0x00, 0x08, 8, 0, 16, 0, 16, 5);
        if (kind == 5) PUT(&b, 0xFF, 0xC0, 0x00, 0x0E, 8, 0, 16, 0, 16, 3, 1, 0x22, 0, 2, 0x11, 0);
        if (kind == 6) PUT(&b, 0xFF, 0xC0, 0x00, 0x0C, 8, 0, 16, 0, 16, 1, 1, 0x11, 0, 0);
        if (kind == 7) PUT(&b, 0xFF, 0xC0, 0x00, 0x0B, 8, 0, 16, 0, 0, 1, 1, 0x11, 0);
        if (kind == 12) PUT(&b, 0xFF, 0xC4, 0x00, 0x0B, 8, 0, 16, 0, 16, 1, 1, 0x11, 0); /* a SOF's bytes under DHT */
        if (kind >= 8 && kind <= 11) put_sof(&b, 0xC0, 8, 16, 16, 3, ids123, hv);
        if (kind == 0 || kind == 12) put_sos(&b, 3, ids123);
        if (kind == 1) PUT(&b, 0xFF, 0xD9);
        if (kind == 8) PUT(&b, 0xFF, 0xDA, 0x00, 0x06, 0, 0, 63, 0);
        if (kind == 9) PUT(&b, 0xFF, 0xDA, 0x00, 0x0A, 1, 1, 0, 0, 63, 0, 0, 0);
        if (kind == 10) PUT(&b, 0xFF, 0xDA, 0x00, 0x08, 1, 9, 0, 0, 63, 0);
        if (kind == 11) PUT(&b, 0xFF, 0xDA, 0x00, 0x02);
        PUT(&b, 0x12, 0x34, 0xFF, 0xD9);
        expect_broken(cases[k].what, b.p, b.n, cases[k].needle);
        free(b.p);
    }
}

/* Every prefix of a file walks without a crash or a read past it: -1, or 0 with has_eoi 0,
 * for all but the whole file. */
static void every_prefix(const char *what, const unsigned char *p, size_t n) {
    dt_jpeg_layout l;
    const char *why;
    int fails = 0, truncated = 0;
    for (size_t k = 0; k < n; k++) {
        why = NULL;
        int rc = walk(p, k, &l, &why);
        if (rc == -1) {
            fails++;
            EXPECT_MSG(why && *why, "%s: prefix %zu: -1 without a reason", what, k);
        } else {
            truncated++;
            EXPECT_MSG(rc == 0 && l.has_eoi == 0, "%s: prefix %zu of %zu: rc %d, has_eoi %d", what, k, n, rc, l.has_eoi);
            EXPECT_MSG(dt_jpeg_gpu_decodable(&l, &why) == 0, "%s: prefix %zu is GPU-decodable", what, k);
        }
    }
    EXPECT_EQ_INT(walk(p, n, &l, &why), 0);
    EXPECT_EQ_INT(l.has_eoi, 1);
    EXPECT_MSG(fails > 0 && truncated > 0, "%s: %d prefixes refused, %d truncated", what, fails, truncated);
}

DT_TEST(jpeg_layout_every_prefix_walks_safely) {
    size_t n;
    unsigned char *p = stb_jpeg(48, 40, 90, &n);
    every_prefix("baseline", p, n);
    free(p);
#ifdef DT_LIBJPEG
    p = libjpeg_jpeg(40, 24, 1, &n);
    every_prefix("progressive", p, n);
    free(p);
#endif
}

#ifdef DT_LIBJPEG
DT_TEST(jpeg_layout_libjpeg_files_baseline_and_progressive) {
    size_t n;
    unsigned char *p = libjpeg_jpeg(120, 90, 0, &n);
    dt_jpeg_layout l;
    const char *why;
    EXPECT_EQ_INT(walk_ok("libjpeg baseline", p, n, &l, &why), 1);
    expect_libjpeg_agrees("libjpeg baseline", p, n, &l);
    free(p);
    p = libjpeg_jpeg(120, 90, 1, &n);
    EXPECT_EQ_INT(walk_ok("libjpeg progressive", p, n, &l, &why), 0);
    EXPECT_EQ_INT(l.sof, 0xC2);
    EXPECT_EQ_INT(l.scans, 10); /* jpeg_simple_progression's script for YCbCr */
    EXPECT_EQ_INT(l.has_eoi, 1);
    EXPECT_MSG(why && strstr(why, "progressive"), "reason '%s'", why ? why : "(null)");
    expect_libjpeg_agrees("libjpeg progressive", p, n, &l);
    /* cut between two scans: right before each SOS or DHT after the first SOS (FF DA and
     * FF C4 occur nowhere else after it: the entropy-coded data stuffs its FFs) */
    size_t first = find_seg(p, n, 0xDA), cuts = 0;
    EXPECT(first != SIZE_MAX);
    for (size_t i = first + 2; first != SIZE_MAX && i + 1 < n; i++) {
        if (p[i] != 0xFF || (p[i + 1] != 0xDA && p[i + 1] != 0xC4)) continue;
        EXPECT_EQ_INT(walk(p, i, &l, &why), 0);
        EXPECT_EQ_INT(l.has_eoi, 0);
        cuts++;
    }
    EXPECT(cuts >= 9);
    free(p);
}
#endif

/* ---- the fuzz corpus and mkdata ---- */

static int is_jpeg_name(const char *s) {
    size_t k = strlen(s);
    return (k > 4 && !strcasecmp(s + k - 4, ".jpg")) || (k > 5 && !strcasecmp(s + k - 5, ".jpeg"));
}

/* Calls fn on every JPEG-named regular file under dir (depth <= 4); returns how many. */
static int each_jpeg(const char *dir, int depth, void (*fn)(const char *path, void *ctx), void *ctx) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%.255s", dir, e->d_name) >= (int)sizeof path - 256) continue;
        struct stat st;
        if (stat(path, &st)) continue;
        if (S_ISDIR(st.st_mode) && depth < 4) count += each_jpeg(path, depth + 1, fn, ctx);
        else if (S_ISREG(st.st_mode) && is_jpeg_name(e->d_name)) fn(path, ctx), count++;
    }
    closedir(d);
    return count;
}

static unsigned char *read_whole(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    EXPECT_MSG(f != NULL, "cannot open %s", path);
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long k = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc(k > 0 ? (size_t)k : 1);
    *n = k > 0 ? fread(p, 1, (size_t)k, f) : 0;
    fclose(f);
    return p;
}

static void corpus_file(const char *path, void *ctx) {
    (void)ctx;
    size_t n;
    unsigned char *p = read_whole(path, &n);
    if (!p) return;
    dt_jpeg_layout l;
    const char *why;
    int ok = walk_ok(path, p, n, &l, &why);
    if (ok >= 0) {
        EXPECT_MSG(l.has_eoi, "%s: no EOI", path);
#ifdef DT_LIBJPEG
        expect_libjpeg_agrees(path, p, n, &l);
#endif
        const char *base = strrchr(path, '/') + 1;
        /* what the seeds are (tests/fuzz/README.md) */
        if (!strcmp(base, "rgb_baseline.jpg") || !strcmp(base, "gray.jpg"))
            EXPECT_MSG(ok == 1, "%s: not GPU-decodable: %s", path, why);
        if (!strcmp(base, "gray.jpg")) EXPECT_EQ_INT(l.components, 1);
        if (!strcmp(base, "rgb_progressive.jpg")) EXPECT_MSG(l.sof == 0xC2 && l.scans > 1 && ok == 0, "%s", path);
        if (!strcmp(base, "cmyk_adobe.jpg")) EXPECT_MSG(l.components == 4 && l.adobe_transform == 0 && ok == 0, "%s", path);
        if (!strcmp(base, "ycck_adobe.jpg")) EXPECT_MSG(l.components == 4 && l.adobe_transform == 2 && ok == 0, "%s", path);
    }
    free(p);
}

DT_TEST(jpeg_layout_fuzz_corpus_jpegs_walk) {
    /* the repository's corpus: from the working directory (make test runs in the repository),
     * or beside the test binary's folder (build/test) */
    char dir[PATH_MAX] = "tests/fuzz/corpus";
    struct stat st;
    if (stat(dir, &st) != 0) {
        char exe[PATH_MAX];
        ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (k > 0) {
            exe[k] = 0;
            for (int up = 0; up < 2; up++) {
                char *s = strrchr(exe, '/');
                if (s) *s = 0;
            }
            snprintf(dir, sizeof dir, "%.*s/tests/fuzz/corpus", (int)(sizeof dir - 32), exe);
        }
    }
    int count = each_jpeg(dir, 0, corpus_file, NULL);
    EXPECT_MSG(count >= 5, "%d JPEGs under %s (run build/test from the repository)", count, dir);
}

static void mkdata_file(const char *path, void *ctx) {
    size_t n;
    unsigned char *p = read_whole(path, &n);
    if (!p) return;
    dt_jpeg_layout l;
    const char *why = NULL;
    int ok = walk_ok(path, p, n, &l, &why);
    if (ok >= 0) EXPECT_MSG(ok == 1, "%s: not GPU-decodable: %s", path, why);
    if (ok == 1) EXPECT_MSG(l.hs[0] == 2 && l.vs[0] == 2, "%s: not 4:2:0", path); /* mkdata: quality 90 */
    ++*(int *)ctx;
    free(p);
}

DT_TEST(jpeg_layout_mkdata_jpegs_are_gpu_decodable) {
    const char *root = dt_test_shapes("shapes", 3, 4, 2, 80);
    int seen = 0;
    int count = each_jpeg(root, 0, mkdata_file, &seen);
    EXPECT_EQ_INT(count, 3 * (4 + 2));
    /* and mkdata's ImageNet-like size (make bench-loader: 500 x 375) */
    size_t n;
    unsigned char *p = stb_jpeg(500, 375, 90, &n);
    expect_gpu("500 x 375", p, n, 1, "");
    free(p);
}

/* ---- the rule alone ---- */

DT_TEST(jpeg_layout_gpu_rule_reasons) {
    dt_jpeg_layout base = {.w = 8, .h = 8, .sof = 0xC0, .precision = 8, .components = 3, .hs = {2, 1, 1},
                           .vs = {2, 1, 1}, .ids = {1, 2, 3}, .adobe_transform = -1, .scans = 1, .has_eoi = 1};
    const char *why = "x";
    EXPECT_EQ_INT(dt_jpeg_gpu_decodable(&base, &why), 1);
    EXPECT(why == NULL);
    EXPECT_EQ_INT(dt_jpeg_gpu_decodable(&base, NULL), 1);
    struct {
        const char *reason;
        dt_jpeg_layout l;
    } cases[] = {
        {"not baseline/sequential (progressive, lossless or arithmetic)", base},
        {"12-bit samples", base},
        {"4 components (CMYK/YCCK)", base},
        {"RGB (Adobe transform 0)", base},
        {"chroma subsampling 4 x 1", base},
        {"3 scans", base},
        {"more than 4 scans", base},
        {"truncated: no EOI marker", base},
        {"not 1 to 4 components", base},
    };
    cases[0].l.sof = 0xC2;
    cases[1].l.precision = 12;
    cases[2].l.components = 4;
    cases[3].l.adobe_transform = 0;
    cases[4].l.hs[0] = 4, cases[4].l.vs[0] = 1;
    cases[5].l.scans = 3;
    cases[6].l.scans = 500;
    cases[7].l.has_eoi = 0;
    cases[8].l.components = 0;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        why = NULL;
        EXPECT_EQ_INT(dt_jpeg_gpu_decodable(&cases[k].l, &why), 0);
        EXPECT_MSG(why && !strcmp(why, cases[k].reason), "case %zu: '%s', expected '%s'", k, why ? why : "(null)",
                   cases[k].reason);
    }
    /* gray: any sampling; Adobe transforms other than 0 on 3 components; SOF1 */
    dt_jpeg_layout g = base;
    g.components = 1, g.hs[0] = 3, g.vs[0] = 4, g.adobe_transform = 0;
    EXPECT_EQ_INT(dt_jpeg_gpu_decodable(&g, &why), 1);
    g = base;
    g.adobe_transform = 1, g.sof = 0xC1;
    EXPECT_EQ_INT(dt_jpeg_gpu_decodable(&g, &why), 1);
}

DT_TEST(jpeg_layout_walk_is_linear_on_long_runs) {
    /* 16 MiB of entropy-coded data of FF 00 pairs, of fill bytes, and 16 MiB of empty COM
     * segments before the scan: each walk is one pass (a quadratic one would take hours) */
    size_t big = (size_t)16 << 20;
    unsigned char *p = malloc(big + 64);
    dt_test_buf h = {0}, s = {0};
    PUT(&h, 0xFF, 0xD8);
    static const unsigned char hv[1] = {0x11};
    put_sof(&h, 0xC0, 8, 8, 8, 1, ids123, hv);
    put_sos(&s, 1, ids123);
    dt_jpeg_layout l;
    const char *why;
    double t0 = dt_now_ms();
    for (int kind = 0; kind < 3; kind++) {
        size_t n = 0;
        memcpy(p, h.p, h.n), n = h.n;
        if (kind < 2) {
            memcpy(p + n, s.p, s.n), n += s.n;
            for (; n < big; n++) p[n] = kind == 0 && (n - h.n - s.n) & 1 ? 0x00 : 0xFF;
        } else {
            for (; n + 4 <= big; n += 4) p[n] = 0xFF, p[n + 1] = 0xFE, p[n + 2] = 0, p[n + 3] = 2;
            memcpy(p + n, s.p, s.n), n += s.n;
            p[n++] = 0x00, p[n++] = 0xFF, p[n++] = 0xD9;
        }
        int rc = dt_jpeg_read_layout(p, n, &l, &why);
        EXPECT_MSG(rc == 0, "kind %d: %s", kind, rc ? why : "");
        EXPECT_EQ_INT(l.scans, 1);
        EXPECT_EQ_INT(l.has_eoi, kind == 2);
    }
    double ms = dt_now_ms() - t0;
    EXPECT_MSG(ms < 20000, "three walks of 16 MiB took %.0f ms", ms);
    free(p), free(h.p), free(s.p);
}
