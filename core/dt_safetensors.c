/* The safetensors format (dt_safetensors.h): a strict reader of untrusted files and the
 * encoder of the files deftc writes. */
#include "core/dt_safetensors.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dt_file.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian: dt_safetensors reads and writes it as the host stores it"
#endif

static const struct {
    const char *name;
    size_t size;
    int is_float;
} DTYPES[DT_ST_NUM_DTYPES] = {
    [DT_ST_F32] = {"F32", 4, 1}, [DT_ST_BF16] = {"BF16", 2, 1}, [DT_ST_F16] = {"F16", 2, 1},
    [DT_ST_F64] = {"F64", 8, 1}, [DT_ST_I64] = {"I64", 8, 0},   [DT_ST_I32] = {"I32", 4, 0},
};

const char *dt_st_dtype_name(dt_st_dtype t) { return (unsigned)t < DT_ST_NUM_DTYPES ? DTYPES[t].name : "?"; }
size_t dt_st_dtype_size(dt_st_dtype t) { return (unsigned)t < DT_ST_NUM_DTYPES ? DTYPES[t].size : 0; }
int dt_st_dtype_is_float(dt_st_dtype t) { return (unsigned)t < DT_ST_NUM_DTYPES && DTYPES[t].is_float; }

/* A name as a message shows it: control bytes as '?', cut after 80 bytes (a name comes from
 * the file and must not be able to forge lines of a log). */
static const char *shown(const char *name, char out[96]) {
    size_t i = 0;
    for (; name[i] && i < 80; i++) out[i] = (unsigned char)name[i] < 32 || name[i] == 127 ? '?' : name[i];
    strcpy(out + i, name[i] ? "..." : "");
    return out;
}

static void shape_text(int nd, const int64_t *s, char *b, size_t len) {
    size_t o = (size_t)snprintf(b, len, "[");
    for (int i = 0; i < nd && o < len; i++) o += (size_t)snprintf(b + o, len - o, i ? ", %lld" : "%lld", (long long)s[i]);
    if (o < len) snprintf(b + o, len - o, "]");
}

/* ---- the JSON header, parsed by the format's schema ----
 * The parser knows where each value of the format stands, so it never recurses: the nesting
 * is the format's (an object of objects holding strings and arrays of integers), and a value
 * of any other kind there is an error naming what was expected. */

typedef struct {
    const unsigned char *s, *p, *end; /* the header's text, the cursor, its end */
    const char *file;
    const char *tensor;               /* the entry being parsed, for messages (NULL: none) */
    dt_err *err;
} json;

static int jerr(json *j, const char *fmt, ...) DT_PRINTF(2, 3);
static int jerr(json *j, const char *fmt, ...) {
    char detail[600], nm[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    if (j->tensor)
        return dt_errf(j->err, "%s: bad safetensors header at byte %zu (tensor '%s'): %s", j->file, (size_t)(j->p - j->s),
                       shown(j->tensor, nm), detail);
    return dt_errf(j->err, "%s: bad safetensors header at byte %zu: %s", j->file, (size_t)(j->p - j->s), detail);
}

/* What the cursor is at, for "expected X, found Y". */
static const char *found(const json *j, char out[32]) {
    if (j->p >= j->end) return "the end of the header";
    unsigned char c = *j->p;
    if (c >= 33 && c < 127) snprintf(out, 32, "'%c'", c);
    else snprintf(out, 32, "byte 0x%02x", c);
    return out;
}

static void skip_ws(json *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

/* Skips spaces and takes `c` when it is next: 1, else 0 (nothing taken). */
static int take(json *j, char c) {
    skip_ws(j);
    if (j->p < j->end && *j->p == (unsigned char)c) {
        j->p++;
        return 1;
    }
    return 0;
}

static int expect(json *j, char c, const char *what) {
    char f[32];
    return take(j, c) ? 0 : jerr(j, "expected %s, found %s", what, found(j, f));
}

static int hex4(const unsigned char *p, unsigned *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = p[i], d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                                              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : 16;
        if (d == 16) return -1;
        *v = *v * 16 + d;
    }
    return 0;
}

static char *put_utf8(char *w, unsigned cp) {
    if (cp < 0x80) *w++ = (char)cp;
    else if (cp < 0x800) *w++ = (char)(0xc0 | cp >> 6), *w++ = (char)(0x80 | (cp & 63));
    else if (cp < 0x10000)
        *w++ = (char)(0xe0 | cp >> 12), *w++ = (char)(0x80 | (cp >> 6 & 63)), *w++ = (char)(0x80 | (cp & 63));
    else
        *w++ = (char)(0xf0 | cp >> 18), *w++ = (char)(0x80 | (cp >> 12 & 63)), *w++ = (char)(0x80 | (cp >> 6 & 63)),
        *w++ = (char)(0x80 | (cp & 63));
    return w;
}

/* A JSON string (`what` names it in messages) into *out (malloc'ed, NUL-terminated; a \u0000
 * is refused, so its length is strlen). The decoded text is never longer than the raw one:
 * that bounds the allocation. */
static int parse_string(json *j, const char *what, char **out) {
    char f[32];
    *out = NULL;
    if (!take(j, '"')) return jerr(j, "expected %s (a string), found %s", what, found(j, f));
    const unsigned char *q = j->p;
    while (q < j->end && *q != '"') {
        if (*q < 32) {
            j->p = q;
            return jerr(j, "control byte 0x%02x inside %s (JSON needs it escaped)", *q, what);
        }
        q += *q == '\\' && q + 1 < j->end ? 2 : 1;
    }
    if (q >= j->end) return jerr(j, "%s has no closing quote", what);
    char *s = dt_xmalloc((size_t)(q - j->p) + 1), *w = s;
    while (j->p < q) {
        unsigned char c = *j->p++;
        if (c != '\\') {
            *w++ = (char)c;
            continue;
        }
        unsigned cp, lo;
        switch (c = *j->p++) {
        case '"': case '\\': case '/': *w++ = (char)c; break;
        case 'b': *w++ = '\b'; break;
        case 'f': *w++ = '\f'; break;
        case 'n': *w++ = '\n'; break;
        case 'r': *w++ = '\r'; break;
        case 't': *w++ = '\t'; break;
        case 'u':
            if (q - j->p < 4 || hex4(j->p, &cp)) goto bad_u;
            j->p += 4;
            if (cp >= 0xdc00 && cp <= 0xdfff) goto bad_u; /* a low surrogate first */
            if (cp >= 0xd800 && cp <= 0xdbff) {           /* a high one: its low one must follow */
                if (q - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' || hex4(j->p + 2, &lo) || lo < 0xdc00 || lo > 0xdfff)
                    goto bad_u;
                j->p += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            if (cp == 0) {
                free(s);
                return jerr(j, "\\u0000 (a NUL) inside %s", what);
            }
            w = put_utf8(w, cp);
            break;
        default:
            free(s);
            j->p--;
            return jerr(j, "unknown escape '\\%c' inside %s (JSON's: \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)",
                        c >= 33 && c < 127 ? c : '?', what);
        }
    }
    j->p = q + 1;
    *w = 0;
    *out = s;
    return 0;
bad_u:
    free(s);
    return jerr(j, "a \\u escape inside %s is not 4 hex digits of a character (or a surrogate pair)", what);
}

/* A non-negative JSON integer of at most 2^63 - 1 (`what` names it). A number of another kind
 * (a sign, a fraction, an exponent, a leading zero) is named as it is written. */
static int parse_uint(json *j, const char *what, int64_t *v) {
    char f[32];
    skip_ws(j);
    const unsigned char *q = j->p;
    while (q < j->end && (*q == '-' || *q == '+' || *q == '.' || *q == 'e' || *q == 'E' || (*q >= '0' && *q <= '9'))) q++;
    int n = (int)(q - j->p);
    if (n == 0) return jerr(j, "expected %s (a non-negative integer), found %s", what, found(j, f));
    const unsigned char *p = j->p;
    int digits = 1;
    for (int i = 0; i < n; i++) digits &= p[i] >= '0' && p[i] <= '9';
    if (!digits || (n > 1 && p[0] == '0'))
        return jerr(j, "%s is %.*s%s: expected a non-negative integer (no sign, fraction, exponent or leading zero)", what,
                    n > 40 ? 40 : n, (const char *)p, n > 40 ? "..." : "");
    uint64_t x = 0;
    for (int i = 0; i < n; i++) {
        if (x > ((uint64_t)INT64_MAX - (p[i] - '0')) / 10)
            return jerr(j, "%s %.*s%s is more than 2^63 - 1", what, n > 40 ? 40 : n, (const char *)p, n > 40 ? "..." : "");
        x = x * 10 + (p[i] - '0');
    }
    j->p = q;
    *v = (int64_t)x;
    return 0;
}

/* One tensor's entry: {"dtype": ..., "shape": [...], "data_offsets": [BEGIN, END]}, each once. */
static int parse_entry(json *j, dt_st_tensor *t) {
    char f[32];
    if (expect(j, '{', "'{' (the tensor's entry: dtype, shape, data_offsets)")) return -1;
    int seen[3] = {0, 0, 0};
    static const char *const FIELDS[3] = {"dtype", "shape", "data_offsets"};
    if (!take(j, '}'))
        for (;;) {
            char *key;
            if (parse_string(j, "a field name", &key)) return -1;
            int k = 0;
            while (k < 3 && strcmp(key, FIELDS[k])) k++;
            if (k == 3) {
                char nm[96];
                jerr(j, "unknown field '%s' (a tensor's entry has dtype, shape and data_offsets)", shown(key, nm));
                free(key);
                return -1;
            }
            free(key);
            if (seen[k]++) return jerr(j, "field '%s' appears twice", FIELDS[k]);
            if (expect(j, ':', "':' after the field name")) return -1;
            if (k == 0) { /* dtype */
                char *d;
                if (parse_string(j, "the dtype", &d)) return -1;
                int i = 0;
                while (i < DT_ST_NUM_DTYPES && strcmp(d, DTYPES[i].name)) i++;
                if (i == DT_ST_NUM_DTYPES) {
                    char nm[96];
                    jerr(j, "dtype '%s' is not one deftc reads (F32, BF16, F16, F64, I64, I32)", shown(d, nm));
                    free(d);
                    return -1;
                }
                free(d);
                t->dtype = (dt_st_dtype)i;
            } else if (k == 1) { /* shape */
                if (expect(j, '[', "'[' (the shape: an array of integers)")) return -1;
                t->ndim = 0;
                if (!take(j, ']'))
                    for (;;) {
                        if (t->ndim == DT_MAX_DIMS) return jerr(j, "the shape has more than %d dimensions", DT_MAX_DIMS);
                        if (parse_uint(j, "a dimension of the shape", &t->shape[t->ndim])) return -1;
                        t->ndim++;
                        if (take(j, ']')) break;
                        if (expect(j, ',', "',' or ']' in the shape")) return -1;
                    }
            } else { /* data_offsets */
                int64_t b, e;
                if (expect(j, '[', "'[' (data_offsets: [BEGIN, END])") || parse_uint(j, "BEGIN of data_offsets", &b) ||
                    expect(j, ',', "',' after BEGIN (data_offsets: [BEGIN, END])") ||
                    parse_uint(j, "END of data_offsets", &e) || expect(j, ']', "']' after END (data_offsets: [BEGIN, END])"))
                    return -1;
                t->begin = (size_t)b;
                t->end = (size_t)e;
            }
            if (take(j, '}')) break;
            if (!take(j, ',')) return jerr(j, "expected ',' or '}' in the entry, found %s", found(j, f));
        }
    for (int k = 0; k < 3; k++)
        if (!seen[k]) return jerr(j, "the entry has no '%s'", FIELDS[k]);
    return 0;
}

/* __metadata__: {"key": "value", ...}, strings only. */
static int parse_meta(json *j, dt_safetensors *st, int *cap) {
    char f[32];
    if (expect(j, '{', "'{' (__metadata__ is an object of strings)")) return -1;
    if (take(j, '}')) return 0;
    for (;;) {
        if (st->n_meta == *cap) {
            *cap = *cap ? 2 * *cap : 8;
            st->meta = dt_xrealloc(st->meta, (size_t)*cap * sizeof *st->meta);
        }
        dt_st_meta *m = &st->meta[st->n_meta];
        m->value = NULL;
        if (parse_string(j, "a metadata key", &m->key)) return -1;
        st->n_meta++;
        if (expect(j, ':', "':' after the metadata key") || parse_string(j, "a metadata value", &m->value)) return -1;
        if (take(j, '}')) return 0;
        if (!take(j, ',')) return jerr(j, "expected ',' or '}' in __metadata__, found %s", found(j, f));
    }
}

/* The whole header: {"__metadata__": {...}, "name": {entry}, ...} and nothing after it but
 * spaces. The tensors' names and entries go into st as they are read. */
static int parse_header(json *j, dt_safetensors *st) {
    char f[32];
    int cap = 0, meta_cap = 0, have_meta = 0;
    if (expect(j, '{', "'{' (the header is a JSON object)")) return -1;
    if (!take(j, '}'))
        for (;;) {
            char *key;
            if (parse_string(j, "a tensor name", &key)) return -1;
            if (!strcmp(key, "__metadata__")) {
                free(key);
                if (have_meta++) return jerr(j, "'__metadata__' appears twice");
                if (expect(j, ':', "':' after the key") || parse_meta(j, st, &meta_cap)) return -1;
            } else {
                if (strlen(key) > DT_SAFETENSORS_MAX_NAME) {
                    char nm[96];
                    jerr(j, "the tensor name '%s' is %zu bytes long (at most %d)", shown(key, nm), strlen(key),
                         DT_SAFETENSORS_MAX_NAME);
                    free(key);
                    return -1;
                }
                if (st->n == cap) {
                    cap = cap ? 2 * cap : 64;
                    st->t = dt_xrealloc(st->t, (size_t)cap * sizeof *st->t);
                }
                dt_st_tensor *t = &st->t[st->n++];
                memset(t, 0, sizeof *t);
                t->name = key;
                j->tensor = key;
                if (expect(j, ':', "':' after the tensor name") || parse_entry(j, t)) return -1;
                j->tensor = NULL;
            }
            if (take(j, '}')) break;
            if (!take(j, ',')) return jerr(j, "expected ',' or '}' after an entry, found %s", found(j, f));
        }
    skip_ws(j);
    if (j->p != j->end) return jerr(j, "%s after the header's object (only spaces may pad it)", found(j, f));
    return 0;
}

/* The first byte at which s[0..n) is not UTF-8 (overlong forms and surrogates are not), or n. */
static size_t utf8_prefix(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i], len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
        if (!len || n - i < len) return i;
        unsigned cp = len == 1 ? c : len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
        for (unsigned k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80) return i;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        static const unsigned MIN[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < MIN[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
        i += len;
    }
    return n;
}

/* ---- the checks after parsing ---- */

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const dt_st_tensor *const *)a)->name, (*(const dt_st_tensor *const *)b)->name);
}

static int cmp_offsets(const void *a, const void *b) {
    const dt_st_tensor *x = *(const dt_st_tensor *const *)a, *y = *(const dt_st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int cmp_meta(const void *a, const void *b) {
    return strcmp(((const dt_st_meta *)a)->key, ((const dt_st_meta *)b)->key);
}

/* Each tensor's size against its shape and the data; then that the tensors tile the data. */
static int check_tensors(dt_safetensors *st, const unsigned char *data, size_t data_size, const char *name, dt_err *err) {
    char nm[96], sh[200];
    for (int i = 0; i < st->n; i++) {
        dt_st_tensor *t = &st->t[i];
        const char *dt = DTYPES[t->dtype].name;
        int64_t bytes;
        t->numel = dt_numel(t->ndim, t->shape);
        int huge = t->numel < 0 || __builtin_mul_overflow(t->numel, (int64_t)DTYPES[t->dtype].size, &bytes);
        if (huge || t->begin > t->end || t->end > data_size || (uint64_t)(t->end - t->begin) != (uint64_t)bytes) {
            shown(t->name, nm);
            shape_text(t->ndim, t->shape, sh, sizeof sh);
        }
        if (huge) return dt_errf(err, "%s: tensor '%s': its shape %s of %s has more than 2^63 bytes", name, nm, sh, dt);
        if (t->begin > t->end)
            return dt_errf(err, "%s: tensor '%s': data_offsets [%zu, %zu] begin after they end", name, nm, t->begin, t->end);
        if (t->end > data_size)
            return dt_errf(err, "%s: tensor '%s': data_offsets [%zu, %zu] run past the %zu bytes of data after the header",
                           name, nm, t->begin, t->end, data_size);
        if ((uint64_t)(t->end - t->begin) != (uint64_t)bytes)
            return dt_errf(err, "%s: tensor '%s': data_offsets [%zu, %zu] hold %zu bytes, but its shape %s of %s needs %lld",
                           name, nm, t->begin, t->end, t->end - t->begin, sh, dt, (long long)bytes);
        t->data = data + t->begin;
    }
    const dt_st_tensor **o = dt_xmalloc((size_t)(st->n ? st->n : 1) * sizeof *o);
    for (int i = 0; i < st->n; i++) o[i] = &st->t[i];
    qsort(o, (size_t)st->n, sizeof *o, cmp_offsets);
    size_t at = 0;
    int rc = 0;
    for (int i = 0; i < st->n && !rc; i++) {
        char nm2[96];
        if (o[i]->begin < at)
            rc = dt_errf(err, "%s: tensors '%s' (bytes [%zu, %zu)) and '%s' ([%zu, %zu)) overlap", name,
                         shown(o[i - 1]->name, nm), o[i - 1]->begin, o[i - 1]->end, shown(o[i]->name, nm2), o[i]->begin,
                         o[i]->end);
        else if (o[i]->begin > at)
            rc = dt_errf(err, "%s: bytes [%zu, %zu) of the data belong to no tensor (a gap before '%s')", name, at,
                         o[i]->begin, shown(o[i]->name, nm));
        at = o[i]->end;
    }
    free(o);
    if (!rc && at != data_size)
        rc = dt_errf(err, "%s: %zu bytes of data after the last tensor (the header accounts for %zu of %zu)", name,
                     data_size - at, at, data_size);
    return rc;
}

/* Duplicate names and metadata keys (sorted, then neighbours compared: n log n for any n);
 * leaves st->by_name. */
static int check_unique(dt_safetensors *st, const char *name, dt_err *err) {
    char nm[96];
    const dt_st_tensor **o = dt_xmalloc((size_t)(st->n ? st->n : 1) * sizeof *o);
    for (int i = 0; i < st->n; i++) o[i] = &st->t[i];
    qsort(o, (size_t)st->n, sizeof *o, cmp_name);
    int rc = 0;
    st->by_name = dt_xmalloc((size_t)(st->n ? st->n : 1) * sizeof *st->by_name);
    for (int i = 0; i < st->n; i++) {
        st->by_name[i] = (int)(o[i] - st->t);
        if (!rc && i && !strcmp(o[i]->name, o[i - 1]->name))
            rc = dt_errf(err, "%s: tensor '%s' appears twice in the header", name, shown(o[i]->name, nm));
    }
    free(o);
    if (rc) return rc;
    if (st->n_meta > 1) qsort(st->meta, (size_t)st->n_meta, sizeof *st->meta, cmp_meta);
    for (int i = 1; i < st->n_meta; i++)
        if (!strcmp(st->meta[i].key, st->meta[i - 1].key))
            return dt_errf(err, "%s: metadata key '%s' appears twice in the header", name, shown(st->meta[i].key, nm));
    return 0;
}

int dt_safetensors_parse(void *file, size_t size, const char *name, dt_safetensors *st, dt_err *err) {
    memset(st, 0, sizeof *st);
    st->blob = file; /* owned from here on, also on failure */
    const unsigned char *b = file;
    uint64_t n = 0;
    int rc = 0;
    if (size < 8) {
        rc = dt_errf(err, "%s is %zu bytes: not a safetensors file (it starts with an 8-byte header length)", name, size);
    } else {
        for (int i = 7; i >= 0; i--) n = n << 8 | b[i];
        if (n == 0)
            rc = dt_errf(err, "%s: not a safetensors file (its header length is 0)", name);
        else if (n > size - 8)
            rc = dt_errf(err, "%s: not a safetensors file, or truncated: its header length %llu runs past the end of the "
                         "file (%zu bytes)", name, (unsigned long long)n, size);
        else if (n > DT_SAFETENSORS_MAX_HEADER)
            rc = dt_errf(err, "%s: a safetensors header of %llu bytes, more than the %zu accepted", name,
                         (unsigned long long)n, DT_SAFETENSORS_MAX_HEADER);
    }
    if (!rc) {
        size_t bad = utf8_prefix(b + 8, (size_t)n);
        if (bad < n) rc = dt_errf(err, "%s: bad safetensors header at byte %zu: not UTF-8", name, bad);
    }
    if (!rc) {
        json j = {.s = b + 8, .p = b + 8, .end = b + 8 + n, .file = name, .err = err};
        rc = parse_header(&j, st);
    }
    if (!rc) rc = check_unique(st, name, err);
    if (!rc) rc = check_tensors(st, b + 8 + n, size - 8 - (size_t)n, name, err);
    if (rc) dt_safetensors_free(st);
    return rc;
}

int dt_safetensors_read(const char *path, dt_safetensors *st, dt_err *err) {
    memset(st, 0, sizeof *st);
    dt_scratch buf = {0};
    size_t size;
    if (dt_file_read(path, "safetensors file", DT_SAFETENSORS_MAX_BYTES, &buf, &size, err)) {
        dt_scratch_free(&buf);
        return -1;
    }
    return dt_safetensors_parse(buf.p, size, path, st, err);
}

const dt_st_tensor *dt_safetensors_find(const dt_safetensors *st, const char *name) {
    int lo = 0, hi = st->n; /* by_name is sorted by strcmp */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(st->t[st->by_name[mid]].name, name);
        if (!c) return &st->t[st->by_name[mid]];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

const char *dt_safetensors_meta(const dt_safetensors *st, const char *key) {
    for (int i = 0; i < st->n_meta; i++)
        if (!strcmp(st->meta[i].key, key)) return st->meta[i].value;
    return NULL;
}

void dt_safetensors_free(dt_safetensors *st) {
    for (int i = 0; st->t && i < st->n; i++) free(st->t[i].name);
    for (int i = 0; st->meta && i < st->n_meta; i++) free(st->meta[i].key), free(st->meta[i].value);
    free(st->t);
    free(st->meta);
    free(st->by_name);
    free(st->blob);
    memset(st, 0, sizeof *st);
}

void dt_st_tensor_to_f32(const dt_st_tensor *t, float *out) {
    const unsigned char *p = t->data;
    size_t es = DTYPES[t->dtype].size;
    for (int64_t i = 0; i < t->numel; i++, p += es) {
        uint16_t h;
        int32_t i32;
        int64_t i64;
        double d;
        switch (t->dtype) {
        case DT_ST_F32: memcpy(&out[i], p, 4); break;
        case DT_ST_BF16: memcpy(&h, p, 2), out[i] = dt_bf16_to_float(h); break;
        case DT_ST_F16: memcpy(&h, p, 2), out[i] = dt_f16_to_float(h); break;
        case DT_ST_F64: /* a double beyond the float range would be undefined behaviour to convert */
            memcpy(&d, p, 8);
            out[i] = d > FLT_MAX ? INFINITY : d < -FLT_MAX ? -INFINITY : (float)d;
            break;
        case DT_ST_I64: memcpy(&i64, p, 8), out[i] = (float)i64; break;
        default: memcpy(&i32, p, 4), out[i] = (float)i32; break;
        }
    }
}

/* ---- the writer ---- */

/* s as a JSON string: quotes, backslashes and control bytes escaped; other bytes as they are. */
static void put_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 32) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

int dt_safetensors_encode(const dt_st_item *items, int n, const dt_st_meta *meta, int n_meta, void **file, size_t *size,
                          dt_err *err) {
    *file = NULL;
    *size = 0;
    char nm[96];
    size_t data_size = 0;
    for (int i = 0; i < n; i++) {
        const dt_st_item *it = &items[i];
        size_t len = strlen(it->name);
        int64_t numel = it->ndim >= 0 && it->ndim <= DT_MAX_DIMS ? dt_numel(it->ndim, it->shape) : -1, bytes;
        if (len > DT_SAFETENSORS_MAX_NAME || !strcmp(it->name, "__metadata__"))
            return dt_errf(err, "cannot write tensor '%s': a name has at most %d bytes and is not __metadata__",
                           shown(it->name, nm), DT_SAFETENSORS_MAX_NAME);
        if ((unsigned)it->dtype >= DT_ST_NUM_DTYPES || numel < 0 ||
            __builtin_mul_overflow(numel, (int64_t)DTYPES[it->dtype].size, &bytes))
            return dt_errf(err, "cannot write tensor '%s': a bad dtype or shape", shown(it->name, nm));
        for (int k = 0; k < i; k++) /* the writer's callers pass a model's few hundred tensors */
            if (!strcmp(items[k].name, it->name)) return dt_errf(err, "cannot write tensor '%s' twice", shown(it->name, nm));
        data_size += (size_t)bytes;
    }
    for (int i = 0; i < n_meta; i++)
        for (int k = 0; k < i; k++)
            if (!strcmp(meta[k].key, meta[i].key))
                return dt_errf(err, "cannot write metadata key '%s' twice", shown(meta[i].key, nm));
    /* placement: 8-byte elements first, then 4, 2 (the order given within a size) */
    int *order = dt_xmalloc((size_t)(n ? n : 1) * sizeof *order), k = 0;
    for (size_t es = 8; es >= 1; es /= 2)
        for (int i = 0; i < n; i++)
            if (DTYPES[items[i].dtype].size == es) order[k++] = i;
    char *json = NULL;
    size_t jlen = 0;
    FILE *f = open_memstream(&json, &jlen);
    if (!f) dt_fatal("open_memstream failed");
    fputc('{', f);
    if (n_meta) {
        fputs("\"__metadata__\":{", f);
        for (int i = 0; i < n_meta; i++) {
            if (i) fputc(',', f);
            put_string(f, meta[i].key);
            fputc(':', f);
            put_string(f, meta[i].value);
        }
        fputc('}', f);
    }
    size_t at = 0;
    for (int o = 0; o < n; o++) {
        const dt_st_item *it = &items[order[o]];
        size_t bytes = (size_t)dt_numel(it->ndim, it->shape) * DTYPES[it->dtype].size;
        if (o || n_meta) fputc(',', f);
        put_string(f, it->name);
        fprintf(f, ":{\"dtype\":\"%s\",\"shape\":[", DTYPES[it->dtype].name);
        for (int d = 0; d < it->ndim; d++) fprintf(f, d ? ",%lld" : "%lld", (long long)it->shape[d]);
        fprintf(f, "],\"data_offsets\":[%zu,%zu]}", at, at + bytes);
        at += bytes;
    }
    fputc('}', f);
    fclose(f);
    size_t hlen = (jlen + 7) / 8 * 8; /* spaces up to a multiple of 8: the data starts aligned */
    unsigned char *out = dt_xmalloc(8 + hlen + data_size);
    for (int i = 0; i < 8; i++) out[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    memcpy(out + 8, json, jlen);
    memset(out + 8 + jlen, ' ', hlen - jlen);
    free(json);
    at = 8 + hlen;
    for (int o = 0; o < n; o++) {
        const dt_st_item *it = &items[order[o]];
        size_t bytes = (size_t)dt_numel(it->ndim, it->shape) * DTYPES[it->dtype].size;
        if (bytes) memcpy(out + at, it->data, bytes);
        at += bytes;
    }
    free(order);
    *file = out;
    *size = at;
    return 0;
}
