#include "dt_image.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_file.h"
#include "dt_stb.h"
#ifdef DT_LIBJPEG
#include "dt_jpeg.h"
#endif
#include "stb_image.h"
#include "stb_image_write.h"

int dt_image_check_size(const char *name, int64_t w, int64_t h, int64_t max_pixels, dt_err *err) {
    if (w <= 0 || h <= 0) return dt_errf(err, "cannot decode %s: image size %lld x %lld", name, (long long)w, (long long)h);
    if (w * h > max_pixels) /* both at most 2^31: no overflow */
        return dt_errf(err, "%s: %lld x %lld = %.1f Mpx is more than max_image_pixels = %lld (a decompression bomb or a "
                       "huge scan; raise max_image_pixels to read it)",
                       name, (long long)w, (long long)h, (double)(w * h) / 1e6, (long long)max_pixels);
    return 0;
}

/* stb_image takes an int length. */
static int check_bytes(size_t bytes, const char *name, dt_err *err) {
    if (bytes == 0) return dt_errf(err, "cannot decode %s: empty file", name);
    if (bytes > (size_t)INT32_MAX) return dt_errf(err, "cannot decode %s: file larger than 2 GB", name);
    return 0;
}

/* stb_image's header reader, then the cap. Reading a header allocates at most the decoder's
 * own state (about 20 KB for JPEG). */
static int stb_probe(const void *data, size_t bytes, const char *name, int64_t max_pixels, int *w, int *h,
                     dt_err *err) {
    int comp;
    dt_stb_set_limit(1 << 20);
    if (!stbi_info_from_memory(data, (int)bytes, w, h, &comp))
        return dt_errf(err, "cannot decode %s: %s", name, stbi_failure_reason());
    return dt_image_check_size(name, *w, *h, max_pixels, err);
}

int dt_image_probe(const void *data, size_t bytes, const char *name, int64_t max_pixels, int *w, int *h, dt_err *err) {
    *w = *h = 0;
    if (check_bytes(bytes, name, err)) return -1;
#ifdef DT_LIBJPEG
    if (dt_jpeg_is_jpeg(data, bytes)) {
        if (dt_jpeg_probe(data, bytes, name, w, h, err)) return -1;
        return dt_image_check_size(name, *w, *h, max_pixels, err);
    }
#endif
    return stb_probe(data, bytes, name, max_pixels, w, h, err);
}

int dt_image_decode(const void *data, size_t bytes, const char *name, int64_t max_pixels, double min_scale,
                    dt_image *img, dt_err *err) {
    img->w = img->h = 0;
    img->pix = NULL;
    if (check_bytes(bytes, name, err)) return -1;
#ifdef DT_LIBJPEG
    if (dt_jpeg_is_jpeg(data, bytes)) return dt_jpeg_decode(data, bytes, name, max_pixels, min_scale, img, err);
#endif
    (void)min_scale; /* stb_image decodes at full size only */
    int w, h, comp;
    /* The header first: refuse absurd sizes before stb allocates for them. */
    if (stb_probe(data, bytes, name, max_pixels, &w, &h, err)) return -1;
    /* The largest buffer a decode of a w x h image needs: the inflated PNG data, at most 8 bytes
     * (16-bit RGBA) a pixel plus a filter byte a row, doubled as stb grows buffers; the
     * compressed data, at most the file, doubled. */
    dt_stb_set_limit(2 * (8 * (size_t)w * h + (size_t)h) + 2 * bytes + 65536);
    /* req_comp = 3: stb converts gray / gray+alpha / RGBA / palette to RGB, 16-bit to 8-bit. */
    uint8_t *pix = stbi_load_from_memory(data, (int)bytes, &w, &h, &comp, 3);
    if (!pix && !strcmp(stbi_failure_reason(), "outofmem"))
        return dt_errf(err, "cannot decode %s: corrupt (its data asks for more memory than a %d x %d image needs)", name,
                       w, h);
    if (!pix) return dt_errf(err, "cannot decode %s: %s", name, stbi_failure_reason());
    img->w = w;
    img->h = h;
    img->pix = pix;
    return 0;
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

static int axis_taps(const dt_axis_map *m) {
    double fs = m->scale > 1.0 ? m->scale : 1.0;
    return 2 * (int)ceil(fs) + 1;
}

/* Filter weights of one axis: output o reads source pixels start[o] .. start[o]+count[o]-1
 * with weights w[o * taps + k] (normalized to sum 1). */
static void axis_weights(const dt_axis_map *m, int taps, int *start, int *count, float *w) {
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
    int tx = axis_taps(mx), ty = axis_taps(my), ow = mx->out, oh = my->out;
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
    axis_weights(mx, tx, sx, cx, wx);
    axis_weights(my, ty, sy, cy, wy);
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
