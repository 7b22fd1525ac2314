#include "dt_checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAGIC "DEFTCKPT"
#define VERSION 1u

static uint64_t fnv1a(const unsigned char *p, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

typedef struct {
    unsigned char *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        while (b->n + n > b->cap) b->cap = b->cap ? b->cap * 2 : 1 << 20;
        b->p = dt_xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void put_u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void put_i64(buf *b, int64_t v) { put(b, &v, 8); }

int dt_checkpoint_save(const char *path, const char *config_text, const dt_ckpt_pos *pos, const dt_ckpt_item *items,
                       int n, dt_err *err) {
    buf b = {0};
    uint32_t cl = (uint32_t)strlen(config_text);
    put_u32(&b, cl);
    put(&b, config_text, cl);
    put_i64(&b, pos->epoch);
    put_i64(&b, pos->batch);
    put_i64(&b, pos->step);
    put_u32(&b, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        const dt_tensor *t = items[i].t;
        uint32_t nl = (uint32_t)strlen(items[i].name);
        put_u32(&b, nl);
        put(&b, items[i].name, nl);
        put_u32(&b, (uint32_t)t->ndim);
        for (int d = 0; d < t->ndim; d++) put_i64(&b, t->shape[d]);
        float *h = dt_tensor_host_copy(t);
        put(&b, h, (size_t)t->numel * sizeof(float));
        free(h);
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        free(b.p);
        return dt_errf(err, "cannot write checkpoint %s: %s", tmp, strerror(errno));
    }
    unsigned char head[8 + 4 + 8 + 8];
    memcpy(head, MAGIC, 8);
    uint32_t ver = VERSION;
    uint64_t len = b.n, sum = fnv1a(b.p, b.n);
    memcpy(head + 8, &ver, 4);
    memcpy(head + 12, &len, 8);
    memcpy(head + 20, &sum, 8);
    int ok = 1;
    for (size_t off = 0, total = sizeof head; ok && off < total;) {
        ssize_t w = write(fd, head + off, total - off);
        if (w <= 0) ok = 0; else off += (size_t)w;
    }
    for (size_t off = 0; ok && off < b.n;) {
        ssize_t w = write(fd, b.p + off, b.n - off);
        if (w <= 0) ok = 0; else off += (size_t)w;
    }
    int saved_errno = errno;
    if (ok && fsync(fd) != 0) ok = 0, saved_errno = errno;
    if (close(fd) != 0 && ok) ok = 0, saved_errno = errno;
    free(b.p);
    if (!ok || rename(tmp, path) != 0) {
        if (ok) saved_errno = errno;
        unlink(tmp);
        return dt_errf(err, "cannot write checkpoint %s: %s (the previous checkpoint, if any, is untouched)", path,
                       strerror(saved_errno));
    }
    return 0;
}

static int take(const unsigned char **p, const unsigned char *end, void *dst, size_t n) {
    if ((size_t)(end - *p) < n) return -1;
    memcpy(dst, *p, n);
    *p += n;
    return 0;
}

int dt_checkpoint_read(const char *path, dt_checkpoint *ck, dt_err *err) {
    memset(ck, 0, sizeof *ck);
    FILE *f = fopen(path, "rb");
    if (!f) return dt_errf(err, "cannot open checkpoint %s: %s", path, strerror(errno));
    unsigned char head[28];
    if (fread(head, 1, sizeof head, f) != sizeof head || memcmp(head, MAGIC, 8) != 0) {
        fclose(f);
        return dt_errf(err, "%s is not a deftc checkpoint (bad header)", path);
    }
    uint32_t ver;
    uint64_t len, sum;
    memcpy(&ver, head + 8, 4);
    memcpy(&len, head + 12, 8);
    memcpy(&sum, head + 20, 8);
    if (ver != VERSION) {
        fclose(f);
        return dt_errf(err, "%s: checkpoint version %u, this deftc reads version %u", path, ver, VERSION);
    }
    if (len > ((uint64_t)1 << 40)) {
        fclose(f);
        return dt_errf(err, "%s: corrupt checkpoint (implausible length)", path);
    }
    unsigned char *blob = dt_xmalloc(len ? len : 1);
    size_t got = fread(blob, 1, len, f);
    fclose(f);
    if (got != len) {
        free(blob);
        return dt_errf(err, "%s: truncated checkpoint (%zu of %llu bytes)", path, got, (unsigned long long)len);
    }
    if (fnv1a(blob, len) != sum) {
        free(blob);
        return dt_errf(err, "%s: corrupt checkpoint (checksum mismatch)", path);
    }
    const unsigned char *p = blob, *end = blob + len;
    uint32_t cl, n;
    int bad = take(&p, end, &cl, 4) || (size_t)(end - p) < cl;
    if (!bad) {
        ck->config_text = dt_xmalloc(cl + 1);
        memcpy(ck->config_text, p, cl);
        ck->config_text[cl] = 0;
        p += cl;
    }
    bad = bad || take(&p, end, &ck->pos.epoch, 8) || take(&p, end, &ck->pos.batch, 8) || take(&p, end, &ck->pos.step, 8) ||
          take(&p, end, &n, 4);
    if (!bad) {
        ck->n = (int)n;
        ck->names = dt_xcalloc(n + 1, sizeof *ck->names);
        ck->ndim = dt_xcalloc(n + 1, sizeof *ck->ndim);
        ck->shape = dt_xcalloc(n + 1, sizeof *ck->shape);
        ck->data = dt_xcalloc(n + 1, sizeof *ck->data);
        for (uint32_t i = 0; i < n && !bad; i++) {
            uint32_t nl, nd;
            if (take(&p, end, &nl, 4) || (size_t)(end - p) < nl) { bad = 1; break; }
            ck->names[i] = dt_xmalloc(nl + 1);
            memcpy(ck->names[i], p, nl);
            ck->names[i][nl] = 0;
            p += nl;
            if (take(&p, end, &nd, 4) || nd > DT_MAX_DIMS) { bad = 1; break; }
            ck->ndim[i] = (int)nd;
            int64_t numel = 1;
            for (uint32_t d = 0; d < nd; d++) {
                if (take(&p, end, &ck->shape[i][d], 8) || ck->shape[i][d] < 0) { bad = 1; break; }
                numel *= ck->shape[i][d];
            }
            if (bad || (size_t)(end - p) < (size_t)numel * sizeof(float)) { bad = 1; break; }
            ck->data[i] = (float *)p; /* floats may be unaligned: copied with memcpy on use */
            p += (size_t)numel * sizeof(float);
        }
    }
    ck->blob = blob;
    if (bad || p != end) {
        dt_checkpoint_free(ck);
        return dt_errf(err, "%s: corrupt checkpoint (malformed contents)", path);
    }
    return 0;
}

int dt_checkpoint_find(const dt_checkpoint *ck, const char *name) {
    for (int i = 0; i < ck->n; i++)
        if (!strcmp(ck->names[i], name)) return i;
    return -1;
}

static void shape_str(int nd, const int64_t *s, char *b, int len) {
    int o = snprintf(b, len, "[");
    for (int i = 0; i < nd && o < len; i++) o += snprintf(b + o, len - o, i ? ", %lld" : "%lld", (long long)s[i]);
    if (o < len) snprintf(b + o, len - o, "]");
}

int dt_checkpoint_copy_to(const dt_checkpoint *ck, const char *name, dt_tensor *t, const char *path, dt_err *err) {
    int i = dt_checkpoint_find(ck, name);
    if (i < 0) return dt_errf(err, "checkpoint %s does not match the model: it has no tensor '%s'", path, name);
    if (ck->ndim[i] != t->ndim || memcmp(ck->shape[i], t->shape, t->ndim * sizeof(int64_t))) {
        char a[128], b[128];
        shape_str(ck->ndim[i], ck->shape[i], a, sizeof a);
        dt_shape_str(t, b, sizeof b);
        return dt_errf(err, "checkpoint %s does not match the model: '%s' is %s in the checkpoint but %s in the model", path,
                       name, a, b);
    }
    float *h = dt_xmalloc((size_t)(t->numel ? t->numel : 1) * sizeof(float));
    memcpy(h, ck->data[i], (size_t)t->numel * sizeof(float));
    dt_tensor_upload(t, h);
    free(h);
    return 0;
}

void dt_checkpoint_free(dt_checkpoint *ck) {
    if (ck->names)
        for (int i = 0; i < ck->n; i++) free(ck->names[i]);
    free(ck->names);
    free(ck->ndim);
    free(ck->shape);
    free(ck->data);
    free(ck->config_text);
    free(ck->blob);
    memset(ck, 0, sizeof *ck);
}
