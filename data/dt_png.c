#include "data/dt_png.h"

#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <png.h>

/* What libpng's callbacks share: the bytes, the read position, the memory it holds against
 * its budget, the last error. */
typedef struct {
    const uint8_t *p;
    size_t n, at;
    size_t used, limit;
    int over; /* an allocation was refused: the budget, not libpng, is why it failed */
    char msg[256];
} ctx;

static void on_error(png_structp png, png_const_charp msg) {
    ctx *c = png_get_error_ptr(png);
    snprintf(c->msg, sizeof c->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

static void on_read(png_structp png, png_bytep out, size_t n) {
    ctx *c = png_get_io_ptr(png);
    if (n > c->n - c->at) png_error(png, "truncated (the file ends inside a chunk or before its IEND chunk)");
    memcpy(out, c->p + c->at, n);
    c->at += n;
}

/* Each block carries its size in front (16 bytes keep malloc's alignment), so that a free
 * gives it back to the budget. */
#define HEAD 16
static png_voidp on_malloc(png_structp png, png_alloc_size_t n) {
    ctx *c = png_get_mem_ptr(png);
    if (n > c->limit - c->used) {
        c->over = 1;
        return NULL;
    }
    unsigned char *b = malloc(n + HEAD);
    if (!b) return NULL;
    memcpy(b, &n, sizeof n);
    c->used += n;
    return b + HEAD;
}

static void on_free(png_structp png, png_voidp p) {
    if (!p) return;
    ctx *c = png_get_mem_ptr(png);
    unsigned char *b = (unsigned char *)p - HEAD;
    png_alloc_size_t n;
    memcpy(&n, b, sizeof n);
    c->used -= n;
    free(b);
}

size_t dt_png_state_bytes(const dt_png_header *h) {
    /* rows: the current and the previous one (filters read it), each at most 8 bytes a pixel
     * (16-bit RGBA, the widest a transform passes through) plus libpng's margins; fixed:
     * the structs, zlib's inflate state and 32 KiB window, the chunk read buffer */
    return 2 * ((size_t)h->w * 8 + 64) + (256 << 10);
}

int dt_png_decode(const void *data, size_t bytes, const char *name, const dt_png_header *h, dt_image *img, dt_err *err) {
    img->w = img->h = 0;
    img->pix = NULL;
    ctx c = {.p = data, .n = bytes, .limit = dt_png_state_bytes(h)};
    png_structp png = png_create_read_struct_2(PNG_LIBPNG_VER_STRING, &c, on_error, on_warning, &c, on_malloc, on_free);
    if (!png) return dt_errf(err, "cannot decode %s: libpng cannot start", name);
    png_infop info = png_create_info_struct(png);
    /* Written between setjmp and longjmp, so volatile. */
    uint8_t *volatile pix = NULL;
    if (!info || setjmp(png_jmpbuf(png))) {
        if (!info) snprintf(c.msg, sizeof c.msg, "libpng cannot start");
        png_destroy_read_struct(&png, info ? &info : NULL, NULL);
        free(pix);
        if (c.over)
            return dt_errf(err, "cannot decode %s: corrupt (its data asks libpng for more memory than a %lld x %lld image "
                           "needs)", name, (long long)h->w, (long long)h->h);
        return dt_errf(err, "cannot decode %s: %s", name, c.msg);
    }
    png_set_read_fn(png, &c, on_read);
    /* A CRC error is an error in every chunk (libpng's default only warns for ancillary ones),
     * as in PIL. Ancillary chunks are skipped unstored (their CRC is still checked): nothing
     * in them changes the pixels deftc keeps, and a text or ICC chunk cannot cost memory. */
    png_set_crc_action(png, PNG_CRC_DEFAULT, PNG_CRC_ERROR_QUIT);
    png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, NULL, -1);
    /* The caller has checked the size against max_image_pixels: no second, smaller limit. */
    png_set_user_limits(png, PNG_UINT_31_MAX, PNG_UINT_31_MAX);
    png_read_info(png, info);
    int depth = png_get_bit_depth(png, info), color = png_get_color_type(png, info);
    if (depth == 16) png_set_strip_16(png); /* the high byte, as PIL and stb_image */
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
    /* alpha, also the one a palette's tRNS chunk expands to */
    if ((color & PNG_COLOR_MASK_ALPHA) || png_get_valid(png, info, PNG_INFO_tRNS)) png_set_strip_alpha(png);
    int passes = png_set_interlace_handling(png);
    png_read_update_info(png, info);
    size_t w = (size_t)h->w, rows = (size_t)h->h;
    if (png_get_rowbytes(png, info) != w * 3) png_error(png, "does not convert to 8-bit RGB");
    pix = malloc(w * rows * 3); /* counted by the caller against max_image_pixels */
    if (!pix) png_error(png, "out of memory for the pixels");
    /* Row by row, each pass of an interlaced image over the rows before (no row-pointer
     * array: a 1-pixel-wide image of 89 M rows would need 716 MB of it). */
    for (int pass = 0; pass < passes; pass++)
        for (size_t y = 0; y < rows; y++) png_read_row(png, pix + y * w * 3, NULL);
    png_read_end(png, NULL); /* the chunks after the pixels, through IEND */
    png_destroy_read_struct(&png, &info, NULL);
    img->w = (int)w;
    img->h = (int)rows;
    img->pix = pix;
    return 0;
}
