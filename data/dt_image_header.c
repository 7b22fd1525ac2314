#include "dt_image_header.h"

#include <string.h>
#ifndef DT_LIBPNG
#include <pthread.h>
#endif

static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }
static uint32_t le32(const uint8_t *p) { return (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0]; }
static unsigned le16(const uint8_t *p) { return (unsigned)p[1] << 8 | p[0]; }

dt_image_format dt_image_format_of(const void *data, size_t bytes) {
    const uint8_t *p = data;
    if (bytes >= 2 && p[0] == 0xFF && p[1] == 0xD8) return DT_FMT_JPEG;
    if (bytes >= 8 && !memcmp(p, png_sig, 8)) return DT_FMT_PNG;
    if (bytes >= 2 && p[0] == 'B' && p[1] == 'M') return DT_FMT_BMP;
    return DT_FMT_UNKNOWN;
}

/* ---- PNG ---- */

int dt_png_read_header(const void *data, size_t bytes, const char *name, dt_png_header *h, dt_err *err) {
    const uint8_t *p = data;
    memset(h, 0, sizeof *h);
    /* signature (8), IHDR length and type (8), 13 bytes of IHDR, its CRC (4) */
    if (bytes < 33) return dt_errf(err, "cannot decode %s: PNG header: truncated (%zu bytes)", name, bytes);
    if (be32(p + 8) != 13 || memcmp(p + 12, "IHDR", 4))
        return dt_errf(err, "cannot decode %s: PNG header: the first chunk is not a 13-byte IHDR", name);
    const uint8_t *d = p + 16;
    uint32_t w = be32(d), hh = be32(d + 4);
    h->depth = d[8];
    h->color = d[9];
    h->interlaced = d[12];
    if (w == 0 || hh == 0 || w > INT32_MAX || hh > INT32_MAX)
        return dt_errf(err, "cannot decode %s: PNG header: size %u x %u (each side must be 1 .. 2^31 - 1)", name, w, hh);
    h->w = w;
    h->h = hh;
    static const int channels[7] = {1, 0, 3, 1, 2, 0, 4};
    /* the depths each colour type allows, as bits: 1 << depth */
    static const unsigned depths[7] = {1u << 1 | 1u << 2 | 1u << 4 | 1u << 8 | 1u << 16, 0, 1u << 8 | 1u << 16,
                                       1u << 1 | 1u << 2 | 1u << 4 | 1u << 8, 1u << 8 | 1u << 16, 0,
                                       1u << 8 | 1u << 16};
    if (h->color > 6 || !channels[h->color] || h->depth > 16 || !(depths[h->color] >> h->depth & 1))
        return dt_errf(err, "cannot decode %s: PNG header: colour type %d with %d bits a sample is not a PNG format", name,
                       h->color, h->depth);
    if (d[10] != 0 || d[11] != 0 || h->interlaced > 1)
        return dt_errf(err, "cannot decode %s: PNG header: unknown compression %d, filter %d or interlace %d method", name,
                       d[10], d[11], d[12]);
    h->channels = channels[h->color];
    return 0;
}

#ifndef DT_LIBPNG
/* CRC-32 as PNG (and zlib) define it, from a table made once. */
static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static void make_crc_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t crc32_of(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 255] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

int dt_png_check_chunks(const void *data, size_t bytes, const char *name, dt_err *err) {
    pthread_once(&crc_once, make_crc_table);
    const uint8_t *p = data;
    size_t at = 8;
    for (int k = 0;; k++) {
        if (bytes - at < 12)
            return dt_errf(err, "cannot decode %s: truncated (the file ends after %zu bytes, before its IEND chunk)", name,
                           bytes);
        uint32_t len = be32(p + at);
        const uint8_t *type = p + at + 4;
        char t[5] = {0};
        for (int i = 0; i < 4; i++) {
            int letter = (type[i] >= 'A' && type[i] <= 'Z') || (type[i] >= 'a' && type[i] <= 'z');
            t[i] = letter ? (char)type[i] : '?';
        }
        if (strchr(t, '?'))
            return dt_errf(err, "cannot decode %s: corrupt (a chunk at byte %zu has no type name)", name, at);
        if (len > INT32_MAX || len > bytes - at - 12)
            return dt_errf(err, "cannot decode %s: truncated (chunk %s at byte %zu is %u bytes, the file ends before)", name,
                           t, at, len);
        if (crc32_of(type, 4 + (size_t)len) != be32(type + 4 + len))
            return dt_errf(err, "cannot decode %s: corrupt (CRC error in chunk %s at byte %zu)", name, t, at);
        if ((k == 0) != !memcmp(t, "IHDR", 4))
            return dt_errf(err, "cannot decode %s: corrupt (%s chunk at byte %zu: IHDR must come first, once)", name, t, at);
        if (!memcmp(t, "IEND", 4)) return 0;
        /* bit 5 of the first letter clear (upper case): critical, the decoder must know it */
        if (!(type[0] & 0x20) && memcmp(t, "PLTE", 4) && memcmp(t, "IDAT", 4) && memcmp(t, "IHDR", 4))
            return dt_errf(err, "cannot decode %s: unknown critical chunk %s at byte %zu", name, t, at);
        at += 12 + (size_t)len;
    }
}
#endif

/* ---- BMP ---- */

int dt_bmp_read_header(const void *data, size_t bytes, const char *name, dt_bmp_header *h, dt_err *err) {
    const uint8_t *p = data;
    memset(h, 0, sizeof *h);
    if (bytes < 18) return dt_errf(err, "cannot decode %s: BMP header: truncated (%zu bytes)", name, bytes);
    uint32_t offset = le32(p + 10), hsz = le32(p + 14);
    if (hsz != 12 && hsz != 40 && hsz != 56 && hsz != 108 && hsz != 124)
        return dt_errf(err, "cannot decode %s: BMP header: info header of %u bytes (12, 40, 56, 108 or 124 are read)", name,
                       hsz);
    if (bytes < 14 + (size_t)hsz)
        return dt_errf(err, "cannot decode %s: BMP header: truncated (%zu bytes)", name, bytes);
    const uint8_t *q = p + 14;
    int64_t w, hh;
    unsigned planes, compress = 0;
    if (hsz == 12) {
        w = le16(q + 4), hh = le16(q + 6), planes = le16(q + 8), h->bpp = (int)le16(q + 10);
    } else {
        w = (int32_t)le32(q + 4), hh = (int32_t)le32(q + 8), planes = le16(q + 12), h->bpp = (int)le16(q + 14);
        compress = le32(q + 16);
    }
    if (hh < 0) hh = -hh; /* top-down rows */
    if (w <= 0 || hh <= 0)
        return dt_errf(err, "cannot decode %s: BMP header: size %lld x %lld", name, (long long)w, (long long)hh);
    int bpp = h->bpp;
    if (planes != 1 || (bpp != 1 && bpp != 4 && bpp != 8 && bpp != 16 && bpp != 24 && bpp != 32))
        return dt_errf(err, "cannot decode %s: BMP header: %u planes of %d bits a pixel (1 plane of 1, 4, 8, 16, 24 or 32 "
                       "bits are read)", name, planes, bpp);
    if (compress != 0 && !(compress == 3 && (bpp == 16 || bpp == 32)))
        return dt_errf(err, "cannot decode %s: BMP compression %u is not read (uncompressed and bit fields are)", name,
                       compress);
    /* Where stb_image's reader stands after the headers (bit-field masks follow a 40- or
     * 56-byte header), and the palette it reads: the pixels must start after both, or it reads
     * from the end of the file and returns black. */
    size_t end = 14 + (size_t)hsz + (compress == 3 && (hsz == 40 || hsz == 56) ? 12 : 0);
    if (bpp < 16) { /* stb_image's count of palette colours (3 bytes each after a 12-byte header) */
        int64_t colours = hsz == 12 ? ((int64_t)offset - 38) / 3 : ((int64_t)offset - 14 - hsz) / 4;
        if (colours < 1 || colours > 256)
            return dt_errf(err, "cannot decode %s: BMP header: pixel data at byte %u leaves room for %lld palette colours "
                           "(1 .. 256)", name, offset, (long long)colours);
    }
    if (offset < end)
        return dt_errf(err, "cannot decode %s: BMP header: pixel data at byte %u, inside the %zu bytes of headers", name,
                       offset, end);
    h->w = w;
    h->h = hh;
    h->offset = offset;
    h->row = (size_t)(((uint64_t)w * (unsigned)bpp + 31) / 32 * 4);
    return 0;
}

int dt_bmp_check_rows(const dt_bmp_header *h, size_t bytes, const char *name, dt_err *err) {
    /* The last row's padding may be missing; its pixels may not. */
    uint64_t rows = (uint64_t)h->row * (uint64_t)(h->h - 1) + ((uint64_t)h->w * (unsigned)h->bpp + 7) / 8;
    if (h->offset > bytes || rows > bytes - h->offset)
        return dt_errf(err, "cannot decode %s: truncated (its %lld x %lld pixels need %llu bytes from byte %zu on, the "
                       "file has %zu)", name, (long long)h->w, (long long)h->h, (unsigned long long)rows, h->offset,
                       bytes > h->offset ? bytes - h->offset : 0);
    return 0;
}
