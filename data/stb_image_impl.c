/* stb_image_impl.c: the one translation unit that compiles stb_image, the decoder of every
 * format but JPEG when libjpeg-turbo is built in (dt_jpeg.c), and of JPEG too without it.
 * Third-party code: its warnings are silenced here and in stb_write_impl.c and nowhere else.
 *
 * Thread safety: stb_image 2.x keeps its failure reason (and the flip/unpremultiply flags we
 * never set) in thread-local storage, so loader workers may decode concurrently. */
#include <stdlib.h>

#include "dt_stb.h"
#include "stb_quiet.h"

/* Decoding goes through memory buffers we read ourselves (one read per file). */
#define STBI_NO_STDIO
/* Only the formats deftc reads (dt_is_image_name). tests/fuzz/fuzz_image found in stb 2.27's
 * readers of others, each within minutes: HDR looping forever on a run length of 0, PNM reading
 * past a 16-bit image's buffer and overflowing an int while parsing its header; GIF, TGA, PSD
 * and PIC are not ImageFolder formats. JPEG only when libjpeg-turbo is not built in. */
#define STBI_ONLY_PNG
#define STBI_ONLY_BMP
#ifndef DT_LIBJPEG
#define STBI_ONLY_JPEG
#endif
/* Every allocation goes through the budget dt_image.c sets from the header's size: stb takes
 * lengths from the file (a 100-byte PNG whose IDAT chunk claims 2 GB made it realloc 2 GB;
 * a zlib bomb expands without limit). Past the budget stb sees "out of memory", an error. */
static __thread size_t t_limit;
void dt_stb_set_limit(size_t bytes) { t_limit = bytes; }
static void *limited_malloc(size_t n) { return n > t_limit ? NULL : malloc(n); }
static void *limited_realloc(void *p, size_t n) { return n > t_limit ? NULL : realloc(p, n); }
#define STBI_MALLOC(n) limited_malloc(n)
#define STBI_REALLOC(p, n) limited_realloc(p, n)
#define STBI_FREE(p) free(p)
#define STB_IMAGE_IMPLEMENTATION
#include "stb_image.h"

#pragma GCC diagnostic pop
