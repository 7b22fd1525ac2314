/* dt_image.h: 8-bit RGB images, decoding (libjpeg-turbo for JPEG and libpng for PNG when built
 * in, stb_image for the rest) and the resampler every transform uses.
 *
 * Formats: JPEG, PNG, BMP (by content). An image is always 3 channels out, whatever the file
 * holds (gray, gray+alpha, RGB, RGBA, palette, CMYK; 8 or 16 bits per channel): alpha is
 * dropped, 16-bit samples are reduced to 8 bits. Decoding reads the file whole and decodes from
 * memory. Before anything is decoded, the header's size is checked against a pixel cap, and
 * the memory the decoder will hold for it (the pixels, and its own image-sized buffers: DCT
 * coefficients of a progressive JPEG, stb_image's raw samples) against the budget the same
 * cap sets: DT_IMAGE_BYTES_PER_PIXEL bytes for each pixel of the cap. A missing, unreadable,
 * corrupt, truncated or oversized file returns -1 with a message naming the file and the
 * reason, never crashes or exits (docs/inputs.md).
 *
 * The resampler is a separable triangle filter ("bilinear") that widens its support by the
 * downscale factor, like PIL's BILINEAR resize that torchvision uses on PIL images: shrinking
 * a 500-pixel crop to 80 pixels averages every source pixel instead of sampling 2 of every 6
 * (no aliasing). Output pixels are rounded to uint8, as PIL's are.
 */
#ifndef DT_IMAGE_H
#define DT_IMAGE_H

#include "core/dt_api.h"

#include <stddef.h>
#include <stdint.h>

#include "core/dt_common.h"
#include "data/dt_image_limits.h"

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

/* pix: [h, w, 3] uint8, row-major HWC, RGB. Owned by the image (malloc'ed). */
typedef struct {
    int w, h;
    uint8_t *pix;
} dt_image;

/* The size from the header alone (no pixel decoded), checked against max_pixels. A file that
 * is not a JPEG, PNG or BMP says so, with its first bytes. */
int dt_image_probe(const void *data, size_t bytes, const char *name, int64_t max_pixels, int *w, int *h, dt_err *err);
/* Decodes a file's bytes to RGB8 after the same header check and the memory check. JPEG goes
 * to libjpeg-turbo when built in (dt_jpeg.h), which may decode at a reduced size: min_scale in
 * (0, 1] is the smallest size (as a fraction of each side) the caller can use, and the result
 * is at least that, at most full size (img->w, img->h say which). PNG goes to libpng when
 * built in (dt_png.h). BMP, and the others without their library, go to stb_image at full
 * size. */
int dt_image_decode(const void *data, size_t bytes, const char *name, int64_t max_pixels, double min_scale,
                    dt_image *img, dt_err *err);
/* Reads `path` into `buf` (reused between calls, may be NULL) and decodes it at full size
 * under the default cap. */
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

/* The filter of one axis, as dt_image_resample uses it (and the device augmentation,
 * data/dt_augment.h): at most dt_axis_taps(m) taps per output; output o reads source pixels
 * start[o] .. start[o] + count[o] - 1 with weights w[o * taps + k] (normalized to sum 1).
 * start, count: [m->out]; w: [m->out * taps]. */
int dt_axis_taps(const dt_axis_map *m);
void dt_axis_weights(const dt_axis_map *m, int taps, int *start, int *count, float *w);

/* Separable: a horizontal pass over the rows the output needs into fp32 sums (taps in order
 * k = 0, 1, ...), then a vertical pass over those (the same order), clamped to [0, 255] and
 * rounded half up to uint8. dst: [my->out, mx->out, 3] uint8, rows packed. */
void dt_image_resample(const dt_image *src, const dt_axis_map *mx, const dt_axis_map *my, uint8_t *dst,
                       dt_scratch *scratch);

/* Whole-image resize to w x h (dst: [h, w, 3]). */
void dt_image_resize(const dt_image *src, int w, int h, uint8_t *dst, dt_scratch *scratch);

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
