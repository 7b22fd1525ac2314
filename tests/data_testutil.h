/* data_testutil.h: files in the test's temporary folder, shared by the data tests. Paths are
 * relative to dt_test_tmpdir(); a failure to create one is a test failure. */
#ifndef DT_DATA_TESTUTIL_H
#define DT_DATA_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

/* tmpdir/rel, in one of 8 rotating buffers (so several can be used in one call). */
const char *dt_test_path(const char *rel);
/* mkdir -p tmpdir/rel */
void dt_test_mkdirs(const char *rel);
/* Writes n bytes (n = 0: an empty file). */
void dt_test_write_file(const char *rel, const void *data, size_t n);
void dt_test_touch(const char *rel);
/* The whole file (malloc'ed; *n its size). */
unsigned char *dt_test_read_file(const char *rel, size_t *n);
/* A sample dataset of drawn shapes in tmpdir/rel (train/ and val/, size x size JPEGs), made on
 * the first call of a test and reused after; returns its path. */
const char *dt_test_shapes(const char *rel, int classes, int train_per_class, int val_per_class, int size);
/* A smooth, detailed RGB test picture, u8 [h, w, 3] (malloc'ed): the sample dataset's renderer
 * drawing class `cls`. */
uint8_t *dt_test_picture(int w, int h, int cls);

/* Crafted files in memory: a growing byte buffer (free(b.p) when done). */
typedef struct {
    unsigned char *p;
    size_t n, cap;
} dt_test_buf;
void dt_test_put(dt_test_buf *b, const void *data, size_t n);
/* A PNG chunk by chunk, CRCs computed: the signature and IHDR, any chunk, IDAT holding `raw`
 * (filtered rows) as zlib stored blocks, IDAT holding n zero bytes deflated (about 1:1000, a
 * zlib bomb when n is large), IEND. */
void dt_test_png_begin(dt_test_buf *b, uint32_t w, uint32_t h, int depth, int color, int interlace);
void dt_test_png_chunk(dt_test_buf *b, const char *type, const void *data, size_t n);
void dt_test_png_idat(dt_test_buf *b, const unsigned char *raw, size_t n);
void dt_test_png_idat_zeros(dt_test_buf *b, size_t n);
void dt_test_png_end(dt_test_buf *b);

#ifdef DT_LIBJPEG
/* A JPEG written by libjpeg into memory (malloc'ed; *n its size), quality 95: `in` has `comps`
 * components of colour space `in_cs` (a J_COLOR_SPACE), stored as `jpeg_cs`; `scans` (a
 * jpeg_scan_info array of nscans) a progressive scan script, or NULL: baseline, or libjpeg's
 * standard progression when nscans < 0. */
unsigned char *dt_test_libjpeg(int w, int h, const uint8_t *in, int comps, int in_cs, int jpeg_cs, const void *scans,
                               int nscans, size_t *n);
/* The same JPEG written to tmpdir/rel. */
void dt_test_write_libjpeg(const char *rel, int w, int h, const uint8_t *in, int comps, int in_cs, int jpeg_cs,
                           const void *scans, int nscans);
#endif

#endif
