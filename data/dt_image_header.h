/* dt_image_header.h: what an image file says about itself before any pixel is decoded: its
 * format (by content), and for PNG and BMP the header read by deftc itself, so that the size,
 * the samples a decoder will hold and, for BMP, the presence of the pixel data are checked by
 * the same code whichever decoder runs (libpng, stb_image). A JPEG's size and buffers are
 * read by the JPEG decoder (dt_jpeg.c), which knows its own; deftc's own walk of a JPEG's
 * markers (dt_jpeg_read_layout, below) decides, before anything is decoded, whether the file
 * may go to nvJPEG on the GPU instead: what it holds (SOF, sampling, Adobe transform, scans)
 * and whether its data reaches the EOI marker. It needs no JPEG library.
 *
 * Why not stb_image's header reader: it tries every format in turn and reports the last one's
 * complaint, so a 100000 x 100000 PNG came back as "unknown image type"; it cannot say how
 * many bytes a sample takes (a 16-bit RGBA PNG decodes through 16 bytes a pixel); and its BMP
 * reader turns a file that ends after the header into a black image. */
#ifndef DT_IMAGE_HEADER_H
#define DT_IMAGE_HEADER_H

#include <stddef.h>
#include <stdint.h>

#include "core/dt_common.h"

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

/* ---- JPEG ---- */

/* What deftc's own walk of a JPEG's markers found (dt_jpeg_read_layout). */
typedef struct {
    int w, h;            /* from the SOF, pixels: 1 .. 65535 each */
    int sof;             /* the SOF marker's low byte: 0xC0 baseline, 0xC1 extended sequential, 0xC2 progressive, ... */
    int precision;       /* bits per sample (8 or 12 ...) */
    int components;      /* 1 .. 4 */
    int hs[4], vs[4];    /* sampling factors per component, 1 .. 4 (0 past `components`) */
    int ids[4];          /* component identifiers from the SOF: libjpeg reads 3 components named 'R', 'G', 'B'
                          * (82, 71, 66) as RGB when there is no JFIF or Adobe marker */
    int adobe_transform; /* APP14 "Adobe" transform byte, -1 when there is no Adobe marker */
    int scans;           /* SOS markers seen */
    int has_eoi;         /* the entropy-coded data of the last scan ends in an EOI marker inside the file */
} dt_jpeg_layout;

/* Walks a JPEG's markers: SOI, the marker segments, and after each SOS the entropy-coded data
 * up to the marker that ends it, until EOI (bytes after it are ignored, as libjpeg does).
 * Records the first SOF (a second is an error, as in libjpeg), the last APP14 "Adobe" marker
 * before the first SOS (what libjpeg's colour guess reads), counts the scans. 0 with the
 * layout filled; a file that ends inside the entropy-coded data or between the segments after
 * a scan is no error of the walk (has_eoi = 0 says it is truncated). -1 with *why (a static
 * string) for a file whose structure is broken: no SOI, a segment running past the end or
 * shorter than its length field allows, no SOF before the first SOS, a bad SOF or SOS, the end
 * of the file before any SOS. Safe on any input: reads only data[0 .. bytes), allocates
 * nothing, linear in bytes. why may be NULL. */
int dt_jpeg_read_layout(const void *data, size_t bytes, dt_jpeg_layout *out, const char **why);

/* 1 when nvJPEG may decode the file as deftc's CPU path (libjpeg-turbo) would: baseline or
 * extended sequential Huffman (SOF0, SOF1), 8-bit samples, 1 component (any sampling) or 3
 * that libjpeg reads as YCbCr (not an Adobe transform 0, nor 'R', 'G', 'B' ids without an
 * Adobe marker) with chroma 1 x 1 and luma 1x1 (4:4:4), 2x1 (4:2:2), 2x2 (4:2:0) or 1x2
 * (4:4:0) - the layouts nvJPEG's hardware decoder takes -, one scan, and an EOI marker. Else 0
 * with *why a short static reason (the loader counts files by it): "not baseline/sequential
 * (progressive, lossless or arithmetic)", "12-bit samples", "4 components (CMYK/YCCK)",
 * "RGB (Adobe transform 0)", "chroma subsampling 4 x 1", "3 scans", "truncated: no EOI
 * marker", ... why may be NULL. */
int dt_jpeg_gpu_decodable(const dt_jpeg_layout *l, const char **why);

#ifdef __cplusplus
}
#endif
#endif
