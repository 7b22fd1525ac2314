/* stb_image_impl.c: the one translation unit that compiles stb_image, the decoder of BMP, of
 * PNG when libpng is not built in (dt_png.c), and of JPEG when libjpeg-turbo is not
 * (dt_jpeg.c). Third-party code: its warnings are silenced here and in stb_write_impl.c and
 * nowhere else.
 *
 * Thread safety: stb_image 2.x keeps its failure reason (and the flip/unpremultiply flags we
 * never set) in thread-local storage, so loader workers may decode concurrently. One message
 * is not: the name of an unknown critical PNG chunk is written into a static buffer, which
 * every thread shares; dt_png_check_chunks refuses such files before stb sees them. */
#include <stdlib.h>

#include "data/dt_stb.h"
#include "data/stb_quiet.h"

/* Decoding goes through memory buffers we read ourselves (one read per file). */
#define STBI_NO_STDIO
/* Only the formats deftc hands to stb. tests/fuzz/fuzz_image found in stb 2.27's readers of
 * others, each within minutes: HDR looping forever on a run length of 0, PNM reading past a
 * 16-bit image's buffer and overflowing an int while parsing its header; GIF, TGA, PSD and PIC
 * are not ImageFolder formats. */
#define STBI_ONLY_BMP
#ifndef DT_LIBPNG
#define STBI_ONLY_PNG
#endif
#ifndef DT_LIBJPEG
#define STBI_ONLY_JPEG
#endif

/* Every allocation goes through a budget of live bytes that dt_image.c sets from the header's
 * size and the caps: stb takes lengths from the file (a 100-byte PNG whose IDAT chunk claims
 * 2 GB made it realloc 2 GB; a zlib bomb expands without limit) and holds several image-sized
 * buffers at once (a 16-bit RGBA PNG: 16 bytes a pixel). Past the budget stb sees "out of
 * memory", an error. The sizes of the blocks stb holds are kept beside it (it holds a few
 * dozen at most), so that its blocks stay plain malloc blocks: the image it returns is freed
 * with free(). */
#define MAX_LIVE 64
typedef struct {
    void *p;
    size_t n;
} live_block;
static __thread live_block t_live[MAX_LIVE];
static __thread int t_nlive, t_over;
static __thread size_t t_limit, t_used;

void dt_stb_set_limit(size_t bytes) {
    t_limit = bytes;
    t_used = 0;
    t_nlive = 0; /* the blocks of earlier calls are the caller's or freed */
    t_over = 0;
}

int dt_stb_over_limit(void) { return t_over; }

static live_block *find_live(void *p) {
    for (int i = 0; i < t_nlive; i++)
        if (t_live[i].p == p) return &t_live[i];
    return NULL;
}

static void *limited_malloc(size_t n) {
    if (n > t_limit - t_used || t_nlive == MAX_LIVE) {
        t_over = 1;
        return NULL;
    }
    void *p = malloc(n);
    if (p) {
        t_live[t_nlive++] = (live_block){p, n};
        t_used += n;
    }
    return p;
}

static void limited_free(void *p) {
    live_block *b = p ? find_live(p) : NULL;
    if (b) {
        t_used -= b->n;
        *b = t_live[--t_nlive];
    }
    free(p);
}

static void *limited_realloc(void *p, size_t n) {
    live_block *b = p ? find_live(p) : NULL;
    if (!b) return limited_malloc(n); /* stb reallocates only what it allocated */
    if (n > b->n && n - b->n > t_limit - t_used) {
        t_over = 1;
        return NULL;
    }
    void *q = realloc(p, n);
    if (q) {
        t_used = t_used - b->n + n;
        *b = (live_block){q, n};
    }
    return q;
}

#define STBI_MALLOC(n) limited_malloc(n)
#define STBI_REALLOC(p, n) limited_realloc(p, n)
#define STBI_FREE(p) limited_free(p)
#define STB_IMAGE_IMPLEMENTATION
#include "stb_image.h"

const char *dt_stb_failure(void) {
    const char *r = stbi_failure_reason();
    return r && r[0] ? r : "corrupt";
}

#ifndef DT_LIBJPEG
int dt_stb_jpeg_info(const void *data, int len, int *w, int *h) {
    stbi__context s;
    int comp;
    stbi__start_mem(&s, data, len);
    return stbi__jpeg_info(&s, w, h, &comp);
}
#endif

#pragma GCC diagnostic pop
