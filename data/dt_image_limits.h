/* dt_image_limits.h: what an image may cost before it is decoded - the pixel cap and the memory
 * budget it sets - and the checks every decoder (dt_image.c, dt_jpeg.c, dt_png.c) makes before it
 * allocates (dt_image.h: decoding; docs/inputs.md). */
#ifndef DT_IMAGE_LIMITS_H
#define DT_IMAGE_LIMITS_H

#include "core/dt_api.h"

#include <stddef.h>
#include <stdint.h>

#include "core/dt_common.h"

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

/* PIL's Image.MAX_IMAGE_PIXELS (89.5 Mpx, 1 GiB of RGBA): the default cap on the pixels of an
 * image, checked in the header before decoding (a 530-byte JPEG can declare 8201 x 16167).
 * The config key max_image_pixels sets the loader's. */
#define DT_IMAGE_MAX_PIXELS 89478485LL
/* Image files larger than this are refused unread (stb_image takes an int length). */
#define DT_IMAGE_MAX_FILE_BYTES ((size_t)INT32_MAX)
/* The memory a decode may hold: an RGBA image at the pixel cap (PIL chose its cap as a third
 * of a GiB of RGBA: 358 MB at the default), plus a decoder's fixed state. An 8-bit RGB decode
 * takes 3 bytes a pixel, so every image under the cap fits; what takes more a pixel (a
 * progressive JPEG's coefficients, a 16-bit PNG through stb_image) is refused at fewer pixels. */
#define DT_IMAGE_BYTES_PER_PIXEL 4
#define DT_IMAGE_DECODER_STATE ((size_t)1 << 20)

/* 0 when a w x h image is at most max_pixels; otherwise -1 and a message naming the file, the
 * size and the key that raises the cap. */
int dt_image_check_size(const char *name, int64_t w, int64_t h, int64_t max_pixels, dt_err *err);
/* The bytes a decode under max_pixels may hold: max_pixels * DT_IMAGE_BYTES_PER_PIXEL +
 * DT_IMAGE_DECODER_STATE. */
size_t dt_image_decode_budget(int64_t max_pixels);
/* 0 when decoding a w x h image (`what`: its kind, for the message) needs at most the budget;
 * otherwise -1 and a message naming the file, both sizes and the key. */
int dt_image_check_memory(const char *name, int64_t w, int64_t h, const char *what, size_t need, int64_t max_pixels,
                          dt_err *err);

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
