/* dt_stb.h: the one knob deftc adds to stb_image (compiled in stb_image_impl.c): a limit on
 * the size of any single allocation stb makes on the calling thread, which dt_image.c sets
 * before each decode from the size in the image's header (already under the pixel cap). */
#ifndef DT_STB_H
#define DT_STB_H

#include <stddef.h>

void dt_stb_set_limit(size_t bytes);

#endif
