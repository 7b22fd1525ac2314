/* dt_png.h: PNG decoding with libpng, built when PNG=1; dt_image.c sends every file with the
 * PNG signature here (stb_image decodes PNG only in a build without libpng).
 *
 * Why: libpng is the reference decoder, fuzzed continuously upstream (OSS-Fuzz); it checks
 * every chunk's CRC (stb_image checks none) and reports its errors per call (stb_image's
 * message for an unknown chunk lives in one static buffer that every thread writes); and it
 * converts while it reads, row by row, so a 16-bit RGBA image costs the 3 bytes a pixel of
 * its RGB8 result instead of stb_image's 16 (the raw samples and a copy of them converted).
 *
 * Output as PIL's and stb_image's: gray is replicated, palettes expanded, alpha dropped
 * (tRNS too), 16-bit samples keep their high byte, no gamma is applied. Ancillary chunks are
 * skipped unread but CRC-checked; a CRC error in any chunk, data past the end of the file or
 * a file that ends before IEND are errors. libpng's errors longjmp back into the call and come
 * back as -1 with its message; its warnings are dropped. */
#ifndef DT_PNG_H
#define DT_PNG_H

#include <stddef.h>

#include "core/dt_common.h"
#include "data/dt_image.h"
#include "data/dt_image_header.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most bytes libpng's own buffers take for an image of header h: two rows at the widest
 * depth a transform passes through, and its fixed state (zlib's window included). */
size_t dt_png_state_bytes(const dt_png_header *h);

/* Decodes to RGB8 at full size; the header has been read (and checked against the caps) by
 * the caller. Every allocation libpng makes is held to dt_png_state_bytes(h). */
int dt_png_decode(const void *data, size_t bytes, const char *name, const dt_png_header *h, dt_image *img, dt_err *err);

#ifdef __cplusplus
}
#endif
#endif
