/* dt_image_header.h: what an image file says about itself before any pixel is decoded: its
 * format (by content), and for PNG and BMP the header read by deftc itself, so that the size,
 * the samples a decoder will hold and, for BMP, the presence of the pixel data are checked by
 * the same code whichever decoder runs (libpng, stb_image). JPEG headers are read by the JPEG
 * decoder (dt_jpeg.c), which knows its own buffers.
 *
 * Why not stb_image's header reader: it tries every format in turn and reports the last one's
 * complaint, so a 100000 x 100000 PNG came back as "unknown image type"; it cannot say how
 * many bytes a sample takes (a 16-bit RGBA PNG decodes through 16 bytes a pixel); and its BMP
 * reader turns a file that ends after the header into a black image. */
#ifndef DT_IMAGE_HEADER_H
#define DT_IMAGE_HEADER_H

#include <stddef.h>
#include <stdint.h>

#include "dt_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DT_FMT_UNKNOWN, DT_FMT_JPEG, DT_FMT_PNG, DT_FMT_BMP } dt_image_format;

/* By the first bytes: JPEG's SOI marker, PNG's 8-byte signature, BMP's "BM". */
dt_image_format dt_image_format_of(const void *data, size_t bytes);

/* A PNG's IHDR chunk. */
typedef struct {
    int64_t w, h;   /* 1 .. 2^31 - 1 each */
    int depth;      /* bits per sample: 1, 2, 4, 8, 16 */
    int color;      /* colour type: 0 gray, 2 RGB, 3 palette, 4 gray + alpha, 6 RGBA */
    int channels;   /* samples per pixel in the file: 1 (gray, palette), 2, 3, 4 */
    int interlaced; /* Adam7 */
} dt_png_header;

/* Reads and checks the IHDR chunk (the first, as the format requires): 0, or -1 with err
 * "cannot decode NAME: PNG header: ...". */
int dt_png_read_header(const void *data, size_t bytes, const char *name, dt_png_header *h, dt_err *err);

#ifndef DT_LIBPNG
/* For the stb_image fallback, which checks neither: every chunk lies inside the file, its CRC
 * matches, IHDR comes first, no critical chunk is unknown, and the file reaches IEND. 0, or
 * -1 with err naming the chunk. (libpng checks the same itself.) */
int dt_png_check_chunks(const void *data, size_t bytes, const char *name, dt_err *err);
#endif

/* A BMP's file and info headers, in the variants stb_image decodes (info header of 12, 40,
 * 56, 108 or 124 bytes; 1, 4, 8, 16, 24 or 32 bits a pixel; uncompressed or bit fields). */
typedef struct {
    int64_t w, h;    /* h is positive; top-down files store it negated */
    int bpp;         /* bits per pixel */
    size_t offset;   /* where the pixel rows start */
    size_t row;      /* bytes a row takes, padded to 4 */
} dt_bmp_header;

/* Reads and checks the headers. 0, or -1 with err. */
int dt_bmp_read_header(const void *data, size_t bytes, const char *name, dt_bmp_header *h, dt_err *err);
/* That the file (`bytes` long) holds all h rows from `offset` on: a file without its pixel
 * data is an error (stb_image decodes it as black). 0, or -1 with err. */
int dt_bmp_check_rows(const dt_bmp_header *h, size_t bytes, const char *name, dt_err *err);

#ifdef __cplusplus
}
#endif
#endif
