#include "tests/data_testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/dt_file.h"
#include "data/dt_synth.h"
#include "tests/dt_test.h"

#ifdef DT_LIBJPEG
#include <jpeglib.h>
#endif

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

uint8_t *dt_test_picture(int w, int h, int cls) {
    uint8_t *p = malloc((size_t)w * h * 3);
    dt_synth_render(cls, w, h, 3, 0, 5, p);
    return p;
}

void dt_test_put(dt_test_buf *b, const void *data, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 256;
        b->p = realloc(b->p, b->cap);
    }
    if (n) memcpy(b->p + b->n, data, n);
    b->n += n;
}

static uint32_t crc32_of(const unsigned char *p, size_t n, uint32_t c) {
    static uint32_t table[256];
    if (!table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t x = i;
            for (int k = 0; k < 8; k++) x = x & 1 ? 0xEDB88320u ^ (x >> 1) : x >> 1;
            table[i] = x;
        }
    c ^= 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = table[(c ^ p[i]) & 255] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static void put_be32(dt_test_buf *b, uint32_t v) {
    unsigned char x[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16), (unsigned char)(v >> 8), (unsigned char)v};
    dt_test_put(b, x, 4);
}

void dt_test_png_chunk(dt_test_buf *b, const char *type, const void *data, size_t n) {
    put_be32(b, (uint32_t)n);
    size_t at = b->n;
    dt_test_put(b, type, 4);
    dt_test_put(b, data, n);
    put_be32(b, crc32_of(b->p + at, 4 + n, 0));
}

void dt_test_png_begin(dt_test_buf *b, uint32_t w, uint32_t h, int depth, int color, int interlace) {
    dt_test_put(b, "\x89PNG\r\n\x1a\n", 8);
    dt_test_buf ihdr = {0};
    put_be32(&ihdr, w);
    put_be32(&ihdr, h);
    unsigned char rest[5] = {(unsigned char)depth, (unsigned char)color, 0, 0, (unsigned char)interlace};
    dt_test_put(&ihdr, rest, 5);
    dt_test_png_chunk(b, "IHDR", ihdr.p, ihdr.n);
    free(ihdr.p);
}

void dt_test_png_idat(dt_test_buf *b, const unsigned char *raw, size_t n) {
    dt_test_buf z = {0};
    dt_test_put(&z, "\x78\x01", 2);
    size_t off = 0;
    do { /* stored blocks of at most 65535 bytes: no compressor needed */
        size_t len = n - off > 65535 ? 65535 : n - off;
        unsigned char h[5] = {(unsigned char)(off + len == n), (unsigned char)len, (unsigned char)(len >> 8),
                              (unsigned char)~len, (unsigned char)(~len >> 8)};
        dt_test_put(&z, h, 5);
        dt_test_put(&z, raw + off, len);
        off += len;
    } while (off < n);
    uint32_t a = 1, s = 0;
    for (size_t i = 0; i < n; i++) a = (a + raw[i]) % 65521, s = (s + a) % 65521;
    put_be32(&z, s << 16 | a);
    dt_test_png_chunk(b, "IDAT", z.p, z.n);
    free(z.p);
}

/* Deflate's bits go least significant first; Huffman codes most significant bit first. */
typedef struct {
    dt_test_buf *b;
    uint32_t acc;
    int nbits;
} bitw;
static void put_bit(bitw *w, unsigned bit) {
    w->acc |= (bit & 1u) << w->nbits;
    if (++w->nbits == 8) {
        unsigned char c = (unsigned char)w->acc;
        dt_test_put(w->b, &c, 1);
        w->acc = 0, w->nbits = 0;
    }
}
static void put_code(bitw *w, unsigned code, int len) {
    for (int i = len - 1; i >= 0; i--) put_bit(w, code >> i);
}

void dt_test_png_idat_zeros(dt_test_buf *b, size_t n) {
    dt_test_buf z = {0};
    dt_test_put(&z, "\x78\x01", 2);
    bitw w = {&z, 0, 0};
    put_bit(&w, 1), put_bit(&w, 1), put_bit(&w, 0); /* the last block, fixed Huffman codes */
    size_t left = n;
    if (left) put_code(&w, 0x30, 8), left--; /* literal 0 */
    for (; left >= 258; left -= 258) {
        put_code(&w, 0xC5, 8); /* length 258 (code 285) */
        put_code(&w, 0, 5);    /* distance 1 */
    }
    for (; left; left--) put_code(&w, 0x30, 8);
    put_code(&w, 0, 7); /* end of block */
    while (w.nbits) put_bit(&w, 0);
    put_be32(&z, (uint32_t)(n % 65521) << 16 | 1); /* Adler-32 of zeros */
    dt_test_png_chunk(b, "IDAT", z.p, z.n);
    free(z.p);
}

void dt_test_png_end(dt_test_buf *b) { dt_test_png_chunk(b, "IEND", NULL, 0); }

#ifdef DT_LIBJPEG
unsigned char *dt_test_libjpeg(int w, int h, const uint8_t *in, int comps, int in_cs, int jpeg_cs, const void *scans,
                               int nscans, size_t *n) {
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    unsigned char *out = NULL;
    unsigned long size = 0;
    jpeg_mem_dest(&c, &out, &size);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = comps;
    c.in_color_space = (J_COLOR_SPACE)in_cs;
    jpeg_set_defaults(&c);
    jpeg_set_colorspace(&c, (J_COLOR_SPACE)jpeg_cs);
    jpeg_set_quality(&c, 95, TRUE);
    if (scans) {
        c.scan_info = (const jpeg_scan_info *)scans;
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
    /* out is libjpeg's (malloc'ed by jpeg_mem_dest); a copy keeps who frees what plain */
    unsigned char *q = malloc(size);
    memcpy(q, out, size);
    free(out);
    *n = size;
    return q;
}

void dt_test_write_libjpeg(const char *rel, int w, int h, const uint8_t *in, int comps, int in_cs, int jpeg_cs,
                           const void *scans, int nscans) {
    size_t n;
    unsigned char *j = dt_test_libjpeg(w, h, in, comps, in_cs, jpeg_cs, scans, nscans, &n);
    dt_test_write_file(rel, j, n);
    free(j);
}
#endif
