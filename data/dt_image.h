/* dt_image.h: 8-bit RGB images, decoding (stb_image) and the resampler every transform uses.
 *
 * An image is always 3 channels out, whatever the file holds (gray, gray+alpha, RGB, RGBA,
 * palette; 8 or 16 bits per channel): alpha is dropped, 16-bit samples are reduced to 8 bits,
 * HDR is tone-mapped by stb_image. Decoding reads the file with one fread and decodes from
 * memory; a missing, unreadable, corrupt or truncated file returns -1 with a message naming
 * the file and stb_image's reason, never crashes.
 *
 * The resampler is a separable triangle filter ("bilinear") that widens its support by the
 * downscale factor, like PIL's BILINEAR resize that torchvision uses on PIL images: shrinking
 * a 500-pixel crop to 80 pixels averages every source pixel instead of sampling 2 of every 6
 * (no aliasing). Output pixels are rounded to uint8, as PIL's are.
 */
#ifndef DT_IMAGE_H
#define DT_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "dt_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* pix: [h, w, 3] uint8, row-major HWC, RGB. Owned by the image (malloc'ed). */
typedef struct {
    int w, h;
    uint8_t *pix;
} dt_image;

/* Images larger than this many pixels are refused (a corrupt header, or a 200-megapixel
 * scan that would cost 600 MB to decode). */
#define DT_IMAGE_MAX_PIXELS (1LL << 27)

int dt_image_decode(const void *data, size_t bytes, const char *name, dt_image *img, dt_err *err);
/* Reads `path` into `buf` (reused between calls, may be NULL) and decodes it. */
int dt_image_load(const char *path, dt_image *img, dt_scratch *buf, dt_err *err);
void dt_image_free(dt_image *img);

/* Writers (sample-dataset generator, tests). comp = channels of `pix` (1..4), rows packed. */
int dt_image_write_jpg(const char *path, int w, int h, int comp, const uint8_t *pix, int quality, dt_err *err);
int dt_image_write_png(const char *path, int w, int h, int comp, const uint8_t *pix, dt_err *err);

/* One axis of a resampling: output position o (0 <= o < out) takes its value around the
 * source coordinate  origin + (o + offset + 0.5) * scale  (pixel centers at i + 0.5), with
 * filter taps clamped to the source window [lo, hi). The split into origin and integer
 * offset makes "resize, then crop at `offset`" compute bit-identical weights to the full
 * resize (the val transform from the cache relies on it). */
typedef struct {
    int out;        /* output length */
    double origin;  /* source coordinate of output position -offset */
    int offset;     /* output index offset (a crop inside the resized image) */
    double scale;   /* source pixels per output pixel */
    int lo, hi;     /* source window for the taps */
} dt_axis_map;

/* dst: [my->out, mx->out, 3] uint8, rows packed. */
void dt_image_resample(const dt_image *src, const dt_axis_map *mx, const dt_axis_map *my, uint8_t *dst,
                       dt_scratch *scratch);

/* Whole-image resize to w x h (dst: [h, w, 3]). */
void dt_image_resize(const dt_image *src, int w, int h, uint8_t *dst, dt_scratch *scratch);

/* Crop box [x, x+cw) x [y, y+ch) of src resized to ow x oh (dst: [oh, ow, 3]); the filter
 * only sees pixels inside the box, as torchvision's crop-then-resize. */
void dt_image_crop_resize(const dt_image *src, int x, int y, int cw, int ch, int ow, int oh, uint8_t *dst,
                          dt_scratch *scratch);

#ifdef __cplusplus
}
#endif
#endif
