#include "dt_npy.h"

#include <errno.h>
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

dt_tensor *dt_npy_load(const char *path, dt_dev dev, dt_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) { dt_errf(err, "cannot open %s: %s", path, strerror(errno)); return NULL; }
    unsigned char pre[12];
    dt_tensor *t = NULL;
    char *hdr = NULL;
    if (fread(pre, 1, 8, f) != 8 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        dt_errf(err, "%s: not a .npy file (bad magic)", path);
        goto done;
    }
    size_t hlen;
    if (pre[6] == 1) {
        if (fread(pre + 8, 1, 2, f) != 2) { dt_errf(err, "%s: truncated header", path); goto done; }
        hlen = pre[8] | (pre[9] << 8);
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (fread(pre + 8, 1, 4, f) != 4) { dt_errf(err, "%s: truncated header", path); goto done; }
        hlen = pre[8] | (pre[9] << 8) | ((size_t)pre[10] << 16) | ((size_t)pre[11] << 24);
        if (hlen > (1u << 20)) { dt_errf(err, "%s: header of %zu bytes is implausible", path, hlen); goto done; }
    } else {
        dt_errf(err, "%s: unsupported .npy version %d.%d", path, pre[6], pre[7]);
        goto done;
    }
    hdr = dt_xmalloc(hlen + 1);
    if (fread(hdr, 1, hlen, f) != hlen) { dt_errf(err, "%s: truncated header", path); goto done; }
    hdr[hlen] = 0;
    const char *d = dict_value(hdr, "'descr'");
    if (!d) { dt_errf(err, "%s: header has no 'descr'", path); goto done; }
    if (strncmp(d, "'<f4'", 5) != 0) {
        char got[16] = {0};
        sscanf(d, "'%15[^']'", got);
        dt_errf(err, "%s: dtype is '%s', deftc reads only float32 ('<f4'); convert with "
                "arr.astype(np.float32)", path, got);
        goto done;
    }
    const char *fo = dict_value(hdr, "'fortran_order'");
    if (!fo || strncmp(fo, "False", 5) != 0) {
        dt_errf(err, "%s: Fortran-ordered arrays are not supported; save np.ascontiguousarray(arr)", path);
        goto done;
    }
    const char *sh = dict_value(hdr, "'shape'");
    if (!sh || *sh != '(') { dt_errf(err, "%s: header has no shape", path); goto done; }
    int64_t shape[DT_MAX_DIMS];
    int ndim = 0;
    const char *p = sh + 1;
    for (;;) {
        while (*p == ' ' || *p == ',') p++;
        if (*p == ')') break;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0) { dt_errf(err, "%s: malformed shape in header", path); goto done; }
        if (ndim == DT_MAX_DIMS) { dt_errf(err, "%s: more than %d dimensions", path, DT_MAX_DIMS); goto done; }
        shape[ndim++] = v;
        p = end;
    }
    int64_t n = dt_numel(ndim, shape);
    float *buf = dt_xmalloc((size_t)(n ? n : 1) * sizeof(float));
    size_t got = fread(buf, sizeof(float), n, f);
    if (got != (size_t)n) {
        dt_errf(err, "%s: truncated data: header promises %lld floats, file holds %zu", path, (long long)n, got);
        free(buf);
        goto done;
    }
    t = dt_tensor_from_host(ndim, shape, dev, buf);
    free(buf);
done:
    free(hdr);
    fclose(f);
    return t;
}
