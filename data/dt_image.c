#include "data/dt_image.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dt_file.h"
#include "data/dt_image_header.h"
#include "data/dt_stb.h"
#ifdef DT_LIBJPEG
#include "data/dt_jpeg.h"
#endif
#ifdef DT_LIBPNG
#include "data/dt_png.h"
#endif
#include "stb_image.h"
#include "stb_image_write.h"

/* stb_image takes an int length. */
static int check_bytes(size_t bytes, const char *name, dt_err *err) {
    if (bytes == 0) return dt_errf(err, "cannot decode %s: empty file", name);
    if (bytes > (size_t)INT32_MAX) return dt_errf(err, "cannot decode %s: file larger than 2 GB", name);
    return 0;
}

static int unknown_format(const void *data, size_t bytes, const char *name, dt_err *err) {
    const unsigned char *p = data;
    char head[40] = "";
    for (size_t i = 0, len = 0; i < bytes && i < 8; i++) len += (size_t)snprintf(head + len, sizeof head - len, " %02x", p[i]);
    return dt_errf(err, "cannot decode %s: not a JPEG, PNG or BMP file (it starts with%s)", name, head);
}

/* The header's size, by the reader of the file's format, before the cap. */
static int header_size(const void *data, size_t bytes, const char *name, int *w, int *h, dt_err *err) {
    switch (dt_image_format_of(data, bytes)) {
    case DT_FMT_JPEG:
#ifdef DT_LIBJPEG
        return dt_jpeg_probe(data, bytes, name, w, h, err);
#else
        dt_stb_set_limit(1 << 20); /* a header read allocates at most the decoder's own state */
        if (!dt_stb_jpeg_info(data, (int)bytes, w, h))
            return dt_errf(err, "cannot decode %s: JPEG header: %s", name, dt_stb_failure());
        return 0;
#endif
    case DT_FMT_PNG: {
        dt_png_header ph;
        if (dt_png_read_header(data, bytes, name, &ph, err)) return -1;
        *w = (int)ph.w, *h = (int)ph.h;
        return 0;
    }
    case DT_FMT_BMP: {
        dt_bmp_header bh;
        if (dt_bmp_read_header(data, bytes, name, &bh, err)) return -1;
        *w = (int)bh.w, *h = (int)bh.h;
        return 0;
    }
    default:
        return unknown_format(data, bytes, name, err);
    }
}

int dt_image_probe(const void *data, size_t bytes, const char *name, int64_t max_pixels, int *w, int *h, dt_err *err) {
    *w = *h = 0;
    if (check_bytes(bytes, name, err) || header_size(data, bytes, name, w, h, err)) return -1;
    return dt_image_check_size(name, *w, *h, max_pixels, err);
}

/* stb_image at full size, its memory held to the smaller of the decode budget and `need`, the
 * most a w x h image of its format can take (more is a corrupt file asking for it). */
static int stb_decode(const void *data, size_t bytes, const char *name, int w, int h, size_t need, int64_t max_pixels,
                      dt_image *img, dt_err *err) {
    size_t budget = dt_image_decode_budget(max_pixels);
    dt_stb_set_limit(need < budget ? need : budget);
    int sw, sh, comp;
    /* req_comp = 3: stb converts gray / gray+alpha / RGBA / palette to RGB, 16-bit to 8-bit. */
    uint8_t *pix = stbi_load_from_memory(data, (int)bytes, &sw, &sh, &comp, 3);
    if (!pix && dt_stb_over_limit()) {
        if (need < budget)
            return dt_errf(err, "cannot decode %s: corrupt (its data asks for more memory than a %d x %d image needs)",
                           name, w, h);
        return dt_errf(err, "%s: decoding this %d x %d image with stb_image takes more than the %.1f MB that "
                       "max_image_pixels = %lld allows (%d bytes a pixel; raise max_image_pixels to read it)",
                       name, w, h, budget / 1e6, (long long)max_pixels, DT_IMAGE_BYTES_PER_PIXEL);
    }
    if (!pix) return dt_errf(err, "cannot decode %s: %s", name, dt_stb_failure());
    if (sw != w || sh != h) { /* the header read above and stb's disagree: never trust either */
        free(pix);
        return dt_errf(err, "cannot decode %s: corrupt (its header says %d x %d, the decoder %d x %d)", name, w, h, sw, sh);
    }
    img->w = w;
    img->h = h;
    img->pix = pix;
    return 0;
}

static int decode_png(const void *data, size_t bytes, const char *name, int64_t max_pixels, dt_image *img, dt_err *err) {
    dt_png_header ph;
    if (dt_png_read_header(data, bytes, name, &ph, err) || dt_image_check_size(name, ph.w, ph.h, max_pixels, err))
        return -1;
    size_t px = (size_t)ph.w * (size_t)ph.h;
#ifdef DT_LIBPNG
    /* libpng converts row by row: the RGB8 pixels and two rows of its own */
    size_t need = 3 * px + dt_png_state_bytes(&ph);
    if (dt_image_check_memory(name, ph.w, ph.h, "PNG (the RGB pixels and libpng's rows)", need, max_pixels, err))
        return -1;
    return dt_png_decode(data, bytes, name, &ph, img, err);
#else
    if (dt_png_check_chunks(data, bytes, name, err)) return -1;
    /* stb holds the compressed data (grown by doubling), the inflated rows (a filter byte each
     * and up to 8 bytes a pixel) and, while it converts 16-bit RGBA in steps, up to three
     * image-sized buffers of up to 8 bytes a pixel */
    size_t need = 2 * bytes + (size_t)ph.h * (1 + 8 * (size_t)ph.w) + 3 * 8 * px + 65536;
    return stb_decode(data, bytes, name, (int)ph.w, (int)ph.h, need, max_pixels, img, err);
#endif
}

int dt_image_decode(const void *data, size_t bytes, const char *name, int64_t max_pixels, double min_scale,
                    dt_image *img, dt_err *err) {
    img->w = img->h = 0;
    img->pix = NULL;
#ifndef DT_LIBJPEG
    (void)min_scale; /* only libjpeg-turbo decodes at a reduced size */
#endif
    if (check_bytes(bytes, name, err)) return -1;
    switch (dt_image_format_of(data, bytes)) {
    case DT_FMT_JPEG: {
#ifdef DT_LIBJPEG
        return dt_jpeg_decode(data, bytes, name, max_pixels, min_scale, img, err);
#else
        int w, h;
        if (header_size(data, bytes, name, &w, &h, err) || dt_image_check_size(name, w, h, max_pixels, err)) return -1;
        /* stb decodes at full size only; it holds per component (at most 4) the samples and, for
         * progressive files, their DCT coefficients (2 bytes each), both padded to whole MCUs
         * (at most 32 pixels a side), and the RGB pixels */
        size_t padded = ((size_t)w + 32) * ((size_t)h + 32);
        size_t need = 2 * bytes + 4 * 3 * padded + 3 * (size_t)w * h + 65536;
        return stb_decode(data, bytes, name, w, h, need, max_pixels, img, err);
#endif
    }
    case DT_FMT_PNG:
        return decode_png(data, bytes, name, max_pixels, img, err);
    case DT_FMT_BMP: {
        dt_bmp_header bh;
        if (dt_bmp_read_header(data, bytes, name, &bh, err) || dt_image_check_size(name, bh.w, bh.h, max_pixels, err) ||
            dt_bmp_check_rows(&bh, bytes, name, err))
            return -1;
        /* stb writes the RGB pixels straight from the rows */
        return stb_decode(data, bytes, name, (int)bh.w, (int)bh.h, 3 * (size_t)bh.w * (size_t)bh.h + 65536, max_pixels,
                          img, err);
    }
    default:
        return unknown_format(data, bytes, name, err);
    }
}

int dt_image_load(const char *path, dt_image *img, dt_scratch *buf, dt_err *err) {
    img->w = img->h = 0;
    img->pix = NULL;
    dt_scratch local = {0};
    dt_scratch *b = buf ? buf : &local;
    size_t n;
    int rc = dt_file_read(path, "", DT_IMAGE_MAX_FILE_BYTES, b, &n, err);
    if (!rc) rc = dt_image_decode(b->p, n, path, DT_IMAGE_MAX_PIXELS, 1.0, img, err);
    if (!buf) dt_scratch_free(&local);
    return rc;
}

void dt_image_free(dt_image *img) {
    free(img->pix); /* stb_image allocates with malloc, as dt_jpeg does */
    img->pix = NULL;
    img->w = img->h = 0;
}

int dt_image_write_jpg(const char *path, int w, int h, int comp, const uint8_t *pix, int quality, dt_err *err) {
    errno = 0;
    if (!stbi_write_jpg(path, w, h, comp, pix, quality))
        return dt_errf(err, "cannot write %s: %s", path, errno ? strerror(errno) : "encoder failed");
    return 0;
}

int dt_image_write_png(const char *path, int w, int h, int comp, const uint8_t *pix, dt_err *err) {
    errno = 0;
    if (!stbi_write_png(path, w, h, comp, pix, w * comp))
        return dt_errf(err, "cannot write %s: %s", path, errno ? strerror(errno) : "encoder failed");
    return 0;
}

/* ---- resampling ---- */

static inline float tri(double x) {
    x = fabs(x);
    return x < 1.0 ? (float)(1.0 - x) : 0.0f;
}

int dt_axis_taps(const dt_axis_map *m) {
    double fs = m->scale > 1.0 ? m->scale : 1.0;
    return 2 * (int)ceil(fs) + 1;
}

void dt_axis_weights(const dt_axis_map *m, int taps, int *start, int *count, float *w) {
    double fs = m->scale > 1.0 ? m->scale : 1.0; /* filter widens when shrinking */
    double support = fs;                          /* triangle: support 1 at unit scale */
    for (int o = 0; o < m->out; o++) {
        double center = m->origin + ((double)(o + m->offset) + 0.5) * m->scale;
        int x0 = (int)floor(center - support + 0.5), x1 = (int)floor(center + support + 0.5);
        if (x0 < m->lo) x0 = m->lo;
        if (x1 > m->hi) x1 = m->hi;
        if (x1 - x0 > taps) x1 = x0 + taps;
        float *wo = w + (size_t)o * taps;
        double sum = 0;
        for (int x = x0; x < x1; x++) sum += (wo[x - x0] = tri((x + 0.5 - center) / fs));
        if (x1 <= x0 || sum <= 0) {
            /* The sample point lies outside the window (only for degenerate maps): nearest. */
            int x = (int)floor(center);
            x0 = x < m->lo ? m->lo : x >= m->hi ? m->hi - 1 : x;
            x1 = x0 + 1;
            wo[0] = 1.0f;
            sum = 1.0;
        }
        for (int k = 0; k < x1 - x0; k++) wo[k] = (float)(wo[k] / sum);
        start[o] = x0;
        count[o] = x1 - x0;
    }
}

void dt_image_resample(const dt_image *src, const dt_axis_map *mx, const dt_axis_map *my, uint8_t *dst,
                       dt_scratch *scratch) {
    DT_REQUIRE(mx->out > 0 && my->out > 0 && mx->lo >= 0 && mx->hi <= src->w && mx->lo < mx->hi &&
                   my->lo >= 0 && my->hi <= src->h && my->lo < my->hi,
               "resample: bad window [%d,%d)x[%d,%d) for a %dx%d image", mx->lo, mx->hi, my->lo, my->hi, src->w,
               src->h);
    int tx = dt_axis_taps(mx), ty = dt_axis_taps(my), ow = mx->out, oh = my->out;
    /* Scratch layout: x weights, y weights, spans, then the horizontally filtered rows. */
    size_t wx_n = (size_t)ow * tx, wy_n = (size_t)oh * ty;
    size_t spans = 2 * (size_t)(ow + oh);
    size_t head = (wx_n + wy_n) * sizeof(float) + spans * sizeof(int);
    head = (head + 63) & ~(size_t)63;
    /* Rows the vertical pass needs: the union of its spans (monotone in o). */
    int rows_max = my->hi - my->lo;
    size_t tmp_bytes = (size_t)(rows_max + 1) * ow * 3 * sizeof(float); /* + one accumulator row */
    uint8_t *base = dt_scratch_get(scratch, head + tmp_bytes);
    float *wx = (float *)base, *wy = wx + wx_n;
    int *sx = (int *)(wy + wy_n), *cx = sx + ow, *sy = cx + ow, *cy = sy + oh;
    float *tmp = (float *)(base + head);
    dt_axis_weights(mx, tx, sx, cx, wx);
    dt_axis_weights(my, ty, sy, cy, wy);
    int y_begin = sy[0], y_end = sy[0] + cy[0];
    for (int o = 1; o < oh; o++) {
        if (sy[o] < y_begin) y_begin = sy[o];
        if (sy[o] + cy[o] > y_end) y_end = sy[o] + cy[o];
    }
    /* Horizontal pass: tmp [y_end - y_begin, ow, 3] float. */
    for (int y = y_begin; y < y_end; y++) {
        const uint8_t *row = src->pix + (size_t)y * src->w * 3;
        float *t = tmp + (size_t)(y - y_begin) * ow * 3;
        for (int o = 0; o < ow; o++) {
            const float *w = wx + (size_t)o * tx;
            const uint8_t *p = row + (size_t)sx[o] * 3;
            float r = 0, g = 0, b = 0;
            for (int k = 0; k < cx[o]; k++, p += 3) {
                r += w[k] * p[0];
                g += w[k] * p[1];
                b += w[k] * p[2];
            }
            t[o * 3 + 0] = r;
            t[o * 3 + 1] = g;
            t[o * 3 + 2] = b;
        }
    }
    /* Vertical pass, tap by tap over a whole row (vectorizes; the sum order per element is
     * still k = 0, 1, ...), then rounded to uint8. */
    float *acc = tmp + (size_t)(y_end - y_begin) * ow * 3;
    for (int o = 0; o < oh; o++) {
        const float *w = wy + (size_t)o * ty;
        uint8_t *d = dst + (size_t)o * ow * 3;
        const float *t = tmp + (size_t)(sy[o] - y_begin) * ow * 3;
        int n = ow * 3;
        for (int i = 0; i < n; i++) acc[i] = w[0] * t[i];
        for (int k = 1; k < cy[o]; k++) {
            t += n;
            for (int i = 0; i < n; i++) acc[i] += w[k] * t[i];
        }
        for (int i = 0; i < n; i++) {
            float v = acc[i];
            v = v < 0 ? 0 : v > 255 ? 255 : v;
            d[i] = (uint8_t)(v + 0.5f);
        }
    }
}

void dt_image_resize(const dt_image *src, int w, int h, uint8_t *dst, dt_scratch *scratch) {
    dt_axis_map mx = {w, 0.0, 0, (double)src->w / w, 0, src->w};
    dt_axis_map my = {h, 0.0, 0, (double)src->h / h, 0, src->h};
    dt_image_resample(src, &mx, &my, dst, scratch);
}
