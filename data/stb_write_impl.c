/* stb_write_impl.c: the one translation unit that compiles stb_image_write (JPEG and PNG
 * writers for the sample-dataset generator and the tests; it only ever sees our own pixels).
 * Third-party code: its warnings are silenced here and in stb_image_impl.c and nowhere else,
 * and the sanitizer build leaves its signed left shifts alone (see the Makefile). */
#include "data/stb_quiet.h"

#define STB_IMAGE_WRITE_IMPLEMENTATION
#include "stb_image_write.h"

#pragma GCC diagnostic pop
