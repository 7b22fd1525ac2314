#include "core/dt_npy.h"

#include "core/dt_file.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int dt_npy_save_raw(const char *path, int ndim, const int64_t *shape, const float *host, dt_err *err) {
    char hdr[512];
    int o = snprintf(hdr, sizeof hdr, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    for (int i = 0; i < ndim; i++) o += snprintf(hdr + o, sizeof hdr - o, "%lld,%s", (long long)shape[i], i + 1 < ndim ? " " : "");
    o += snprintf(hdr + o, sizeof hdr - o, "), }");
    /* Pad with spaces so that magic(6)+version(2)+len(2)+header is a multiple of 64, ending in '\n'. */
    int total = 10 + o + 1;
    int pad = (64 - total % 64) % 64;
    memset(hdr + o, ' ', pad);
    o += pad;
    hdr[o++] = '\n';
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return dt_errf(err, "cannot write %s: %s", tmp, strerror(errno));
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(o & 0xff), (unsigned char)(o >> 8)};
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(hdr, 1, o, f) == (size_t)o &&
             fwrite(host, sizeof(float), n, f) == (size_t)n;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return dt_errf(err, "cannot write %s: %s", path, strerror(errno));
    }
    return 0;
}

int dt_npy_save(const char *path, const dt_tensor *t, dt_err *err) {
    float *h = dt_tensor_host_copy(t);
    int r = dt_npy_save_raw(path, t->ndim, t->shape, h, err);
    free(h);
    return r;
}

/* Finds 'key': in the header dict and returns a pointer just after the colon. */
static const char *dict_value(const char *hdr, const char *key) {
    const char *p = strstr(hdr, key);
    if (!p) return NULL;
    p = strchr(p + strlen(key), ':');
    if (!p) return NULL;
    p++;
    while (*p == ' ') p++;
    return p;
}

dt_tensor *dt_npy_parse(const void *data, size_t size, const char *name, dt_dev dev, dt_err *err) {
    const unsigned char *b = data;
    if (size < 8 || memcmp(b, "\x93NUMPY", 6) != 0) {
        dt_errf(err, "%s: not a .npy file (bad magic)", name);
        return NULL;
    }
    /* Every length below is checked against `size` before it is used. */
    size_t hlen, off;
    if (b[6] == 1) {
        off = 10;
        if (size < off) { dt_errf(err, "%s: truncated header", name); return NULL; }
        hlen = b[8] | ((size_t)b[9] << 8);
    } else if (b[6] == 2 || b[6] == 3) {
        off = 12;
        if (size < off) { dt_errf(err, "%s: truncated header", name); return NULL; }
        hlen = b[8] | ((size_t)b[9] << 8) | ((size_t)b[10] << 16) | ((size_t)b[11] << 24);
    } else {
        dt_errf(err, "%s: unsupported .npy version %d.%d", name, b[6], b[7]);
        return NULL;
    }
    if (hlen > size - off) {
        dt_errf(err, "%s: truncated header (%zu bytes announced, %zu in the file)", name, hlen, size - off);
        return NULL;
    }
    char *hdr = dt_xmalloc(hlen + 1);
    memcpy(hdr, b + off, hlen);
    hdr[hlen] = 0;
    dt_tensor *t = NULL;
    const char *d = dict_value(hdr, "'descr'");
    if (!d) { dt_errf(err, "%s: header has no 'descr'", name); goto done; }
    if (strncmp(d, "'<f4'", 5) != 0) {
        char got[16] = {0};
        sscanf(d, "'%15[^']'", got);
        dt_errf(err, "%s: dtype is '%s', deftc reads only float32 ('<f4'); convert with "
                "arr.astype(np.float32)", name, got);
        goto done;
    }
    const char *fo = dict_value(hdr, "'fortran_order'");
    if (!fo || strncmp(fo, "False", 5) != 0) {
        dt_errf(err, "%s: Fortran-ordered arrays are not supported; save np.ascontiguousarray(arr)", name);
        goto done;
    }
    const char *sh = dict_value(hdr, "'shape'");
    if (!sh || *sh != '(') { dt_errf(err, "%s: header has no shape", name); goto done; }
    int64_t shape[DT_MAX_DIMS];
    int ndim = 0;
    const char *p = sh + 1;
    for (;;) {
        while (*p == ' ' || *p == ',') p++;
        if (*p == ')') break;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || errno) { dt_errf(err, "%s: malformed shape in header", name); goto done; }
        if (ndim == DT_MAX_DIMS) { dt_errf(err, "%s: more than %d dimensions", name, DT_MAX_DIMS); goto done; }
        shape[ndim++] = v;
        p = end;
    }
    int64_t n = dt_numel(ndim, shape);
    if (n < 0) { dt_errf(err, "%s: the shape in the header has more than 2^63 elements", name); goto done; }
    /* The data must be exactly what the header promises: the tensor is allocated only then,
     * so its size is bounded by the file's. */
    size_t avail = size - off - hlen;
    if ((uint64_t)n > avail / sizeof(float)) {
        dt_errf(err, "%s: truncated data: header promises %lld floats, file holds %zu", name, (long long)n,
                avail / sizeof(float));
        goto done;
    }
    if (avail != (size_t)n * sizeof(float)) {
        dt_errf(err, "%s: %zu bytes after the %lld floats the header promises", name, avail - (size_t)n * sizeof(float),
                (long long)n);
        goto done;
    }
    t = dt_tensor_from_host(ndim, shape, dev, (const float *)(b + off + hlen)); /* copied with memcpy */
done:
    free(hdr);
    return t;
}

dt_tensor *dt_npy_load(const char *path, dt_dev dev, dt_err *err) {
    dt_scratch buf = {0};
    size_t size;
    dt_tensor *t = NULL;
    if (dt_file_read(path, "", SIZE_MAX - 1, &buf, &size, err) == 0) t = dt_npy_parse(buf.p, size, path, dev, err);
    dt_scratch_free(&buf);
    return t;
}
