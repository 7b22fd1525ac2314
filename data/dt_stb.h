/* dt_stb.h: what deftc adds to stb_image (compiled in stb_image_impl.c): a budget on the
 * memory stb holds at once on the calling thread, which dt_image.c sets before each decode
 * from the image's header and the caps, and a failure reason that is never empty. */
#ifndef DT_STB_H
#define DT_STB_H

#include <stddef.h>

/* Starts a budget of `bytes` live bytes for the next stb calls on this thread: an allocation
 * that would go past it fails, and stb reports "outofmem". */
void dt_stb_set_limit(size_t bytes);
/* 1 when an allocation was refused since dt_stb_set_limit. */
int dt_stb_over_limit(void);
/* stb's reason for the last failure on this thread ("corrupt" when it set none). */
const char *dt_stb_failure(void);
#ifndef DT_LIBJPEG
/* The size in a JPEG's header, from stb's JPEG reader alone (stbi_info tries every format and
 * reports the last one's complaint): 1, or 0 with dt_stb_failure() saying why. */
int dt_stb_jpeg_info(const void *data, int len, int *w, int *h);
#endif

#endif
