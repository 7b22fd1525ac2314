/* stb_image_impl.c: the one translation unit that compiles stb_image, the decoder of every
 * format but JPEG when libjpeg-turbo is built in (dt_jpeg.c), and of JPEG too without it.
 * Third-party code: its warnings are silenced here and in stb_write_impl.c and nowhere else.
 *
 * Thread safety: stb_image 2.x keeps its failure reason (and the flip/unpremultiply flags we
 * never set) in thread-local storage, so loader workers may decode concurrently. */
#include "stb_quiet.h"

/* Decoding goes through memory buffers we read ourselves (one read per file). */
#define STBI_NO_STDIO
#ifdef DT_LIBJPEG
/* stb's JPEG decoder is the one fuzzing finds undefined behaviour in; with libjpeg-turbo it
 * is not compiled at all. */
#define STBI_NO_JPEG
#endif
#define STB_IMAGE_IMPLEMENTATION
#include "stb_image.h"

#pragma GCC diagnostic pop
