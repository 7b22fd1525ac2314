/* dt_jpeg.h: JPEG decoding with libjpeg-turbo (the libjpeg API), built when JPEG=1; dt_image.c
 * sends every file that starts with a JPEG marker here and everything else to stb_image.
 *
 * Why: libjpeg-turbo is fuzzed continuously upstream (stb_image is not hardened against crafted
 * files), about 3x faster than stb_image, and the decoder PIL uses, with the same defaults
 * (accurate integer IDCT, smooth chroma upsampling), so pixels match torchvision's. It can also
 * decode at M/8 of the size in the DCT domain, skipping most of the work for an image much
 * larger than what the transform keeps.
 *
 * Errors never leave the process: libjpeg's error_exit is replaced by a longjmp back into the
 * call, which returns -1 with libjpeg's message. Warnings about corrupt data are ignored, as
 * PIL does, except "Premature end of JPEG file" (a truncated file), an error as in PIL. A
 * progressive file with more than DT_JPEG_MAX_SCANS scans is refused (each scan re-reads the
 * whole coefficient buffer: a few hundred bytes could cost minutes), as TurboJPEG's
 * TJFLAG_LIMITSCANS does. */
#ifndef DT_JPEG_H
#define DT_JPEG_H

#include <stddef.h>
#include <stdint.h>

#include "core/dt_common.h"
#include "data/dt_image.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DT_JPEG_MAX_SCANS 500

struct jpeg_decompress_struct;
/* After jpeg_read_header: the bytes of the coefficient buffer libjpeg holds for the whole
 * image (2 bytes a coefficient, 64 a block, every block of every component) when the file has
 * more than one scan (progressive, or components in separate scans); 0 otherwise, when it
 * decodes strip by strip. A 866-byte progressive file declaring 9000 x 9000 asks for 243 MB. */
size_t dt_jpeg_coef_bytes(const struct jpeg_decompress_struct *cinfo);

/* The size in the header; 0, or -1 with err set. */
int dt_jpeg_probe(const void *data, size_t bytes, const char *name, int *w, int *h, dt_err *err);
/* Decodes to RGB8 at scale M/8, the smallest M of 1, 2, 4, 8 with M/8 >= min_scale (the image
 * is then ceil(w * M / 8) x ceil(h * M / 8)), after refusing more than max_pixels in the header
 * and more memory than the budget they set (dt_image_decode_budget): the pixels, the
 * coefficient buffer below, the decoder's strips. Gray, YCbCr, RGB, CMYK and YCCK (Adobe)
 * files give RGB. */
int dt_jpeg_decode(const void *data, size_t bytes, const char *name, int64_t max_pixels, double min_scale, dt_image *img,
                   dt_err *err);

#ifdef __cplusplus
}
#endif
#endif
