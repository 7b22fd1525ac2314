/* The safetensors format as untrusted input (core/dt_safetensors.h): what the encoder writes
 * reads back bit for bit in every dtype, HF's layout rules hold (header padded to 8, tensors
 * aligned, tiling the data), and each crafted header - a length past the file, 0 or over the
 * cap, JSON cut short or not an object, duplicates, numbers that are not integers or overflow,
 * offsets outside the data, overlapping, gaps, sizes that do not match, bad escapes and UTF-8,
 * names too long - is its own clear error, never a crash (make test SAN=1 has ASan watch). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/dt_safetensors.h"
#include "tests/dt_test.h"

/* A file of `json` as its header (length prefix added) followed by `n` data bytes (zeros), as
 * a malloc'ed buffer for dt_safetensors_parse. */
static void *craft(const char *json, size_t n, size_t *size) {
    size_t h = strlen(json);
    unsigned char *b = calloc(8 + h + n + 1, 1);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(b + 8, json, h);
    *size = 8 + h + n;
    return b;
}

/* Expects the crafted file to be refused with `needle` in the message (and the file named). */
static void expect_bad(const char *json, size_t n, const char *needle) {
    size_t size;
    void *f = craft(json, n, &size);
    dt_safetensors st;
    dt_err err = {{0}};
    int rc = dt_safetensors_parse(f, size, "x.safetensors", &st, &err);
    if (rc == 0) {
        dt_test_fail(__FILE__, __LINE__, "accepted %s", json);
        dt_safetensors_free(&st);
        return;
    }
    if (!strstr(err.msg, needle) || !strstr(err.msg, "x.safetensors"))
        dt_test_fail(__FILE__, __LINE__, "for %s: message '%s' lacks '%s'", json, err.msg, needle);
    if (dt_test_verbose()) printf("    %s\n", err.msg);
}

static int parse_ok(const char *json, size_t n, dt_safetensors *st) {
    size_t size;
    void *f = craft(json, n, &size);
    dt_err err;
    int rc = dt_safetensors_parse(f, size, "x.safetensors", st, &err);
    if (rc) dt_test_fail(__FILE__, __LINE__, "refused %s: %s", json, err.msg);
    return rc;
}

DT_TEST(safetensors_round_trips_every_dtype) {
    float f32[6] = {1.5f, -2.25f, 3e-38f, 1e30f, 0.0f, -0.0f};
    uint16_t bf16[3] = {0x3f80, 0xc0a0, 0x7f80}, f16[2] = {0x3c00, 0x8001};
    double f64[2] = {1e-300, -7.5};
    int64_t i64 = -9000000000000LL;
    int32_t i32[4] = {1, -2, 3, 2147483647};
    int64_t s23[2] = {2, 3}, s3[1] = {3}, s2[1] = {2}, s221[3] = {2, 2, 1}, s0[2] = {4, 0};
    dt_st_item items[] = {
        {"f32 [2, 3]", DT_ST_F32, 2, s23, f32},         {"bf16", DT_ST_BF16, 1, s3, bf16},
        {"f16", DT_ST_F16, 1, s2, f16},                 {"f64", DT_ST_F64, 1, s2, f64},
        {"i64 scalar", DT_ST_I64, 0, NULL, &i64},       {"i32 \"quoted\\\" \n\t\x01 é", DT_ST_I32, 3, s221, i32},
        {"empty", DT_ST_F32, 2, s0, NULL},
    };
    int n = (int)(sizeof items / sizeof *items);
    dt_st_meta meta[] = {{"format", "pt"}, {"note", "line\nbreak \"q\" \\ é"}};
    void *file;
    size_t size;
    dt_err err;
    EXPECT_EQ_INT(dt_safetensors_encode(items, n, meta, 2, &file, &size, &err), 0);
    const unsigned char *b = file;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b[i];
    EXPECT_EQ_INT(hlen % 8, 0); /* the data starts at a multiple of 8, as HF's writer makes it */
    EXPECT_EQ_INT(b[8 + hlen - 1] == '}' || b[8 + hlen - 1] == ' ', 1);
    dt_safetensors st;
    EXPECT_EQ_INT(dt_safetensors_parse(file, size, "rt.safetensors", &st, &err), 0);
    EXPECT_EQ_INT(st.n, n);
    for (int i = 0; i < n && st.n == n; i++) {
        const dt_st_tensor *t = dt_safetensors_find(&st, items[i].name);
        EXPECT_MSG(t != NULL, "tensor '%s' not found", items[i].name);
        if (!t) continue;
        EXPECT_EQ_INT(t->dtype, items[i].dtype);
        EXPECT_EQ_INT(t->ndim, items[i].ndim);
        size_t bytes = (size_t)dt_numel(items[i].ndim, items[i].shape) * dt_st_dtype_size(items[i].dtype);
        EXPECT_EQ_INT(t->end - t->begin, bytes);
        EXPECT_EQ_INT(t->begin % dt_st_dtype_size(t->dtype), 0); /* aligned: larger elements first */
        EXPECT_MSG(bytes == 0 || !memcmp(t->data, items[i].data, bytes), "tensor '%s' differs", items[i].name);
        for (int d = 0; d < t->ndim; d++) EXPECT_EQ_INT(t->shape[d], items[i].shape[d]);
    }
    EXPECT_MSG(dt_safetensors_meta(&st, "note") && !strcmp(dt_safetensors_meta(&st, "note"), meta[1].value), "metadata");
    EXPECT(dt_safetensors_meta(&st, "format") && !strcmp(dt_safetensors_meta(&st, "format"), "pt"));
    EXPECT(dt_safetensors_find(&st, "nope") == NULL);
    /* the conversions to fp32 */
    float v[6];
    dt_st_tensor_to_f32(dt_safetensors_find(&st, "bf16"), v);
    EXPECT(v[0] == 1.0f && v[1] == -5.0f && isinf(v[2]));
    dt_st_tensor_to_f32(dt_safetensors_find(&st, "f16"), v);
    EXPECT(v[0] == 1.0f && v[1] == -5.9604644775390625e-8f);
    dt_st_tensor_to_f32(dt_safetensors_find(&st, "f64"), v);
    EXPECT(v[0] == 0.0f && v[1] == -7.5f);
    dt_st_tensor_to_f32(dt_safetensors_find(&st, "i64 scalar"), v);
    EXPECT(v[0] == -9e12f);
    dt_safetensors_free(&st);
    /* what the encoder refuses */
    dt_st_item dup[2] = {{"a", DT_ST_F32, 1, s3, f32}, {"a", DT_ST_F32, 1, s3, f32}};
    EXPECT(dt_safetensors_encode(dup, 2, NULL, 0, &file, &size, &err) != 0 && strstr(err.msg, "twice"));
    dt_st_item reserved = {"__metadata__", DT_ST_F32, 1, s3, f32};
    EXPECT(dt_safetensors_encode(&reserved, 1, NULL, 0, &file, &size, &err) != 0 && strstr(err.msg, "__metadata__"));
}

DT_TEST(safetensors_reads_other_writers_spellings) {
    dt_safetensors st;
    /* nothing at all; whitespace around everything; escapes in names; the fields in any order */
    if (parse_ok("{}", 0, &st) == 0) {
        EXPECT_EQ_INT(st.n, 0);
        dt_safetensors_free(&st);
    }
    if (parse_ok(" \n{ \"__metadata__\" : { } ,\t\"a\\/b\\u00e9\\ud83d\\ude00\" : {\"shape\":[ 2 ], \"data_offsets\":[0,8],"
                 " \"dtype\":\"F32\"}}   ", 8, &st) == 0) {
        EXPECT_EQ_INT(st.n, 1);
        EXPECT(dt_safetensors_find(&st, "a/b\xc3\xa9\xf0\x9f\x98\x80") != NULL);
        dt_safetensors_free(&st);
    }
    /* two tensors in reverse order of their data, a scalar and an empty one sharing an offset */
    if (parse_ok("{\"b\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[4,12]},\"e\":{\"dtype\":\"F32\",\"shape\":[0,5],"
                 "\"data_offsets\":[4,4]},\"a\":{\"dtype\":\"BF16\",\"shape\":[1,2],\"data_offsets\":[0,4]}}",
                 12, &st) == 0) {
        EXPECT_EQ_INT(st.n, 3);
        EXPECT_EQ_INT(dt_safetensors_find(&st, "b")->numel, 1);
        EXPECT_EQ_INT(dt_safetensors_find(&st, "e")->numel, 0);
        dt_safetensors_free(&st);
    }
}

#define T1(fields) "{\"t\":{" fields "}}"
/* the fields of an F32 tensor of that shape and those data_offsets (JSON text without brackets) */
#define F32S(shape, offsets) "\"dtype\":\"F32\",\"shape\":[" shape "],\"data_offsets\":[" offsets "]"
#define OK_FIELDS F32S("2", "0,8")

/* A crafted header, the data bytes after it, and what the message must say. */
static const struct {
    const char *json;
    size_t data;
    const char *needle;
} BAD[] = {
    /* JSON */
    {"{\"t\":{\"dtype\":\"F32\"", 0, "expected ',' or '}' in the entry, found the end of the header"},
    {"{\"t\":{\"dty", 0, "no closing quote"},
    {"[1, 2]", 0, "expected '{' (the header is a JSON object), found '['"},
    {"\"t\"", 0, "the header is a JSON object"},
    {"{\"t\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}", 0,
     "expected '{' (the tensor's entry"},
    {"{\"t\":{" OK_FIELDS "},\"t\":{" OK_FIELDS "}}", 8, "tensor 't' appears twice"},
    {T1(OK_FIELDS ",\"dtype\":\"F32\""), 8, "field 'dtype' appears twice"},
    {T1(OK_FIELDS ",\"device\":\"cpu\""), 8, "unknown field 'device'"},
    {T1("\"dtype\":\"F32\",\"shape\":[2]"), 8, "the entry has no 'data_offsets'"},
    {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, "'__metadata__' appears twice"},
    {"{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"}}", 0, "metadata key 'a' appears twice"},
    {"{\"__metadata__\":{\"a\":1}}", 0, "expected a metadata value (a string), found '1'"},
    {"{\"__metadata__\":[]}", 0, "__metadata__ is an object of strings"},
    {"{} x", 0, "'x' after the header's object"},
    {"{},", 0, "',' after the header's object"},
    {"{\"t\":{" OK_FIELDS "},}", 8, "expected a tensor name (a string), found '}'"},
    {"{\"a\\q\":{}}", 0, "unknown escape '\\q'"},
    {"{\"a\\u12\":{}}", 0, "not 4 hex digits"},
    {"{\"a\\ud800x\":{}}", 0, "surrogate pair"},
    {"{\"a\\udc00\":{}}", 0, "surrogate pair"},
    {"{\"a\\u0000\":{}}", 0, "\\u0000 (a NUL)"},
    {"{\"a\tb\":{}}", 0, "control byte 0x09"},
    {"{\"a\xff\":{}}", 0, "not UTF-8"},
    {"{\"a\xc0\xaf\":{}}", 0, "not UTF-8"},        /* an overlong '/' */
    {"{\"a\xed\xa0\x80\":{}}", 0, "not UTF-8"},   /* a surrogate in UTF-8 */
    /* numbers */
    {T1(F32S("-3", "0,8")), 8, "dimension of the shape is -3"},
    {T1(F32S("2.0", "0,8")), 8, "is 2.0: expected a non-negative integer"},
    {T1(F32S("1e1", "0,8")), 8, "is 1e1"},
    {T1(F32S("02", "0,8")), 8, "is 02"},
    {T1(F32S("\"2\"", "0,8")), 8, "found '\"'"},
    {T1(F32S("9223372036854775808", "0,8")), 8, "more than 2^63 - 1"},
    {T1(F32S("4294967296,4294967296", "0,8")), 8,
     "tensor 't': its shape [4294967296, 4294967296] of F32 has more than 2^63 bytes"},
    {T1(F32S("2305843009213693952", "0,8")), 8, "more than 2^63 bytes"},
    {T1(F32S("1,1,1,1,1,1,1,1,1", "0,4")), 4, "more than 8 dimensions"},
    {T1(F32S("2", "0,8,8")), 8, "']' after END"},
    {T1(F32S("2", "0")), 8, "',' after BEGIN"},
    /* dtypes and names */
    {T1("\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]"), 2, "dtype 'U8' is not one deftc reads"},
    {T1("\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,8]"), 8, "expected the dtype (a string)"},
    /* offsets against the data */
    {T1(F32S("2", "8,0")), 8, "data_offsets [8, 0] begin after they end"},
    {T1(F32S("2", "0,16")), 8, "run past the 8 bytes of data"},
    {T1(F32S("2", "0,8")), 4, "run past the 4 bytes of data"},
    {T1(F32S("3", "0,8")), 8, "data_offsets [0, 8] hold 8 bytes, but its shape [3] of F32 needs 12"},
    {"{\"a\":{" F32S("2", "0,8") "},\"b\":{" F32S("2", "4,12") "}}", 12,
     "tensors 'a' (bytes [0, 8)) and 'b' ([4, 12)) overlap"},
    {"{\"a\":{" F32S("2", "0,8") "},\"b\":{" F32S("2", "0,8") "}}", 8, "overlap"},
    {"{\"a\":{" F32S("1", "0,4") "},\"b\":{" F32S("1", "8,12") "}}", 12,
     "bytes [4, 8) of the data belong to no tensor"},
    {T1(F32S("1", "4,8")), 8, "bytes [0, 4) of the data belong to no tensor"},
    {T1(OK_FIELDS), 12, "4 bytes of data after the last tensor"},
};

DT_TEST(safetensors_crafted_headers_are_clear_errors) {
    /* the length prefix */
    size_t size;
    dt_safetensors st;
    dt_err err;
    unsigned char seven[7] = {1, 0, 0, 0, 0, 0, 0};
    void *f = malloc(7);
    memcpy(f, seven, 7);
    EXPECT(dt_safetensors_parse(f, 7, "x.safetensors", &st, &err) != 0 && strstr(err.msg, "is 7 bytes"));
    f = craft("", 0, &size);
    EXPECT(dt_safetensors_parse(f, size, "x.safetensors", &st, &err) != 0 && strstr(err.msg, "header length is 0"));
    f = craft("{}", 0, &size);
    ((unsigned char *)f)[0] = 200; /* 200 bytes announced, 2 there */
    EXPECT(dt_safetensors_parse(f, size, "x.safetensors", &st, &err) != 0 && strstr(err.msg, "runs past the end"));
    f = craft("{}", 0, &size);
    ((unsigned char *)f)[7] = 0x80; /* 2^63 + 2 */
    EXPECT(dt_safetensors_parse(f, size, "x.safetensors", &st, &err) != 0 && strstr(err.msg, "runs past the end"));
    /* over the cap: a file of 100 MiB + 9 bytes whose header claims all of it (calloc'ed: its
     * pages are never touched, the length is refused first) */
    size_t big = DT_SAFETENSORS_MAX_HEADER + 1;
    unsigned char *g = calloc(8 + big, 1);
    for (int i = 0; i < 8; i++) g[i] = (unsigned char)((uint64_t)big >> (8 * i));
    EXPECT(dt_safetensors_parse(g, 8 + big, "x.safetensors", &st, &err) != 0 && strstr(err.msg, "more than the 104857600"));
    f = craft("{}  ", 0, &size);
    ((unsigned char *)f)[8 + 3] = 0; /* a NUL where HF's writer pads with spaces */
    EXPECT(dt_safetensors_parse(f, size, "x.safetensors", &st, &err) != 0 && strstr(err.msg, "byte 0x00 after the header"));
    for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++) expect_bad(BAD[i].json, BAD[i].data, BAD[i].needle);
    char longname[400];
    snprintf(longname, sizeof longname, "{\"%0300d\":{" OK_FIELDS "}}", 0);
    expect_bad(longname, 8, "is 300 bytes long (at most 255)");
}

DT_TEST(safetensors_files_that_are_not_files) {
    dt_safetensors st;
    dt_err err;
    EXPECT(dt_safetensors_read(dt_test_tmpdir(), &st, &err) != 0 && strstr(err.msg, "is a folder, not a file"));
    EXPECT(dt_safetensors_read("/dev/zero", &st, &err) != 0 && strstr(err.msg, "not a regular file"));
    char p[700];
    snprintf(p, sizeof p, "%s/missing.safetensors", dt_test_tmpdir());
    EXPECT(dt_safetensors_read(p, &st, &err) != 0 && strstr(err.msg, "No such file"));
    snprintf(p, sizeof p, "%s/seven.safetensors", dt_test_tmpdir());
    FILE *f = fopen(p, "wb");
    fwrite("\x01\0\0\0\0\0\0", 1, 7, f);
    fclose(f);
    EXPECT(dt_safetensors_read(p, &st, &err) != 0 && strstr(err.msg, "seven.safetensors is 7 bytes"));
}
