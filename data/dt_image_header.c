#include "data/dt_image_header.h"

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

/* ---- JPEG ---- */

static unsigned be16(const uint8_t *p) { return (unsigned)p[0] << 8 | p[1]; }

/* The start-of-frame markers: C0-C3, C5-C7, C9-CB, CD-CF (C4 is DHT, C8 JPG, CC DAC). */
static int jpeg_is_sof(int m) { return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC; }

static int layout_fail(const char **why, const char *reason) {
    if (why) *why = reason;
    return -1;
}

/* An SOF segment's data s[0 .. n): precision (1), height (2), width (2), component count Nf
 * (1), then per component its id (1), H << 4 | V (1), quantization table (1). As in libjpeg,
 * the length must be exactly that and the size not 0 (a height given later by a DNL marker
 * is not read by libjpeg either). NULL, or the reason it is broken. */
static const char *read_sof(const uint8_t *s, size_t n, int marker, dt_jpeg_layout *l) {
    if (n < 6) return "SOF segment too short";
    int nf = s[5];
    if (nf == 0) return "0 components";
    if (nf > 4) return "more than 4 components";
    if (n < 6 + 3 * (size_t)nf) return "SOF segment too short";
    if (n > 6 + 3 * (size_t)nf) return "SOF segment longer than its components";
    l->sof = marker;
    l->precision = s[0];
    l->h = (int)be16(s + 1);
    l->w = (int)be16(s + 3);
    l->components = nf;
    if (l->w == 0 || l->h == 0) return "image size 0 in the SOF";
    for (int c = 0; c < nf; c++) {
        const uint8_t *q = s + 6 + 3 * c;
        l->ids[c] = q[0];
        l->hs[c] = q[1] >> 4;
        l->vs[c] = q[1] & 15;
        if (l->hs[c] < 1 || l->hs[c] > 4 || l->vs[c] < 1 || l->vs[c] > 4) return "a sampling factor outside 1 .. 4";
    }
    return NULL;
}

/* An SOS segment's data: component count Ns (1), per component its id (1) and Huffman
 * tables (1), then Ss, Se, Ah << 4 | Al (3). libjpeg's checks: 1 .. 4 components, the exact
 * length, ids the SOF declared. */
static const char *read_sos(const uint8_t *s, size_t n, const dt_jpeg_layout *l) {
    if (n < 1) return "SOS segment too short";
    int ns = s[0];
    if (ns < 1 || ns > 4) return "SOS with 0 or more than 4 components";
    if (n != 4 + 2 * (size_t)ns) return "SOS segment length does not match its component count";
    for (int k = 0; k < ns; k++) {
        int c = 0;
        while (c < l->components && l->ids[c] != s[1 + 2 * k]) c++;
        if (c == l->components) return "SOS names a component the SOF does not have";
    }
    return NULL;
}

int dt_jpeg_read_layout(const void *data, size_t bytes, dt_jpeg_layout *out, const char **why) {
    const uint8_t *p = data;
    memset(out, 0, sizeof *out);
    out->adobe_transform = -1;
    if (why) *why = NULL;
    if (bytes < 2 || p[0] != 0xFF || p[1] != 0xD8) return layout_fail(why, "no SOI marker");
    int saw_sof = 0;
    size_t at = 2; /* the next byte to read; at <= bytes throughout */
    while (at < bytes) {
        /* Between segments: a marker, after any number of 0xFF fill bytes. libjpeg skips other
         * bytes here with a warning; they mean a segment's length is wrong, and a file whose
         * structure is in doubt stays off the GPU. */
        if (p[at] != 0xFF) return layout_fail(why, "a byte other than a marker between the segments");
        while (at < bytes && p[at] == 0xFF) at++;
        if (at == bytes) break;
        int m = p[at++];
        if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) continue; /* TEM, RST0-7: no length */
        if (m == 0x00) return layout_fail(why, "a stuffed byte (FF 00) outside the entropy-coded data");
        if (m == 0xD8) return layout_fail(why, "a second SOI marker");
        if (m == 0xD9) { /* EOI: what follows is not read */
            if (!out->scans) return layout_fail(why, "an EOI marker before any SOS (no image data)");
            out->has_eoi = 1;
            return 0;
        }
        /* A segment: a 2-byte big-endian length that counts itself, then its data. */
        if (bytes - at < 2) return layout_fail(why, "a marker segment runs past the end of the file");
        size_t len = be16(p + at);
        if (len < 2) return layout_fail(why, "a marker segment length below 2");
        if (len > bytes - at) return layout_fail(why, "a marker segment runs past the end of the file");
        const uint8_t *s = p + at + 2;
        size_t n = len - 2;
        at += len;
        const char *bad = NULL;
        if (jpeg_is_sof(m)) {
            if (saw_sof) return layout_fail(why, "two SOF markers");
            saw_sof = 1;
            bad = read_sof(s, n, m, out);
        } else if (m == 0xEE) {
            /* APP14 "Adobe": "Adobe" (5), version (2), flags0 (2), flags1 (2), transform (1).
             * libjpeg's colour guess reads the last one before the first SOS. */
            if (!out->scans && n >= 12 && !memcmp(s, "Adobe", 5)) out->adobe_transform = s[11];
        } else if (m == 0xDA) {
            if (!saw_sof) return layout_fail(why, "no SOF before the first SOS");
            bad = read_sos(s, n, out);
            if (bad) return layout_fail(why, bad);
            out->scans++;
            /* The entropy-coded data, up to the marker that ends it: FF 00 is a stuffed 0xFF,
             * FF D0-D7 a restart marker, FF FF fill before a marker; any other FF xx is the
             * marker, read by the loop above. memchr keeps this linear and fast. */
            for (;;) {
                const uint8_t *ff = at < bytes ? memchr(p + at, 0xFF, bytes - at) : NULL;
                if (!ff) return 0; /* the file ends inside the data: truncated, has_eoi = 0 */
                size_t i = (size_t)(ff - p);
                if (bytes - i < 2) return 0;
                int b = p[i + 1];
                if (b == 0x00 || (b >= 0xD0 && b <= 0xD7)) at = i + 2;
                else if (b == 0xFF) at = i + 1;
                else {
                    at = i;
                    break;
                }
            }
        }
        /* DHT, DQT, DRI, DAC, DNL, APPn, COM and any other marker with a length: skipped */
        if (bad) return layout_fail(why, bad);
    }
    /* The file ends between segments: after a scan it is a truncated file (a progressive one
     * cut between its scans), before any it has no image. */
    if (!out->scans) return layout_fail(why, "the file ends before any SOS (no image data)");
    return 0;
}

int dt_jpeg_gpu_decodable(const dt_jpeg_layout *l, const char **why) {
    /* Reasons are static strings (the loader counts files by them), so the numbers in them
     * come from tables: [h - 1][v - 1] of the luma's sampling factors. */
#define SUBSAMPLING_ROW(h) \
    {"chroma subsampling " #h " x 1", "chroma subsampling " #h " x 2", "chroma subsampling " #h " x 3", \
     "chroma subsampling " #h " x 4"}
    static const char *const subsampling[4][4] = {SUBSAMPLING_ROW(1), SUBSAMPLING_ROW(2), SUBSAMPLING_ROW(3),
                                                  SUBSAMPLING_ROW(4)};
#undef SUBSAMPLING_ROW
    static const char *const scans[5] = {"0 scans", "1 scan", "2 scans", "3 scans", "4 scans"};
    const char *r = NULL;
    int h = l->hs[0], v = l->vs[0];
    if (l->sof != 0xC0 && l->sof != 0xC1) r = "not baseline/sequential (progressive, lossless or arithmetic)";
    else if (l->precision != 8) r = l->precision == 12 ? "12-bit samples" : "samples of other than 8 bits";
    else if (l->components == 2) r = "2 components";
    else if (l->components == 4) r = "4 components (CMYK/YCCK)";
    else if (l->components != 1 && l->components != 3) r = "not 1 to 4 components";
    else if (l->components == 3) {
        /* libjpeg reads 3 components as RGB (no colour transform) after an Adobe marker with
         * transform 0, or without an Adobe marker when they are named 'R', 'G', 'B'; nvJPEG
         * would convert them as YCbCr. (A JFIF marker makes libjpeg read YCbCr whatever the
         * Adobe marker says; refusing those too only sends them to the CPU.) */
        int rgb_ids = l->ids[0] == 'R' && l->ids[1] == 'G' && l->ids[2] == 'B';
        int in_range = 1;
        for (int c = 0; c < 3; c++) in_range &= l->hs[c] >= 1 && l->hs[c] <= 4 && l->vs[c] >= 1 && l->vs[c] <= 4;
        if (l->adobe_transform == 0) r = "RGB (Adobe transform 0)";
        else if (l->adobe_transform < 0 && rgb_ids) r = "RGB (components named R, G, B)";
        else if (!in_range) r = "sampling factors outside 1 .. 4";
        else if (l->hs[1] != 1 || l->vs[1] != 1 || l->hs[2] != 1 || l->vs[2] != 1)
            r = "chroma sampled other than 1 x 1";
        else if (!(v == 1 && (h == 1 || h == 2)) && !(v == 2 && (h == 1 || h == 2))) r = subsampling[h - 1][v - 1];
    }
    if (!r && l->scans != 1) r = l->scans >= 0 && l->scans <= 4 ? scans[l->scans] : "more than 4 scans";
    if (!r && !l->has_eoi) r = "truncated: no EOI marker";
    if (why) *why = r;
    return r == NULL;
}
