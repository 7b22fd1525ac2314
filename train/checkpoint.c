#include "dt_checkpoint.h"

#include "dt_file.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdarg.h>
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

/* The temporary file a save writes before its rename: PATH.tmp.PID. */
static void tmp_name(const char *path, long pid, char *out, size_t cap) { snprintf(out, cap, "%s.tmp.%ld", path, pid); }

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
    char tmp[4200];
    tmp_name(path, (long)getpid(), tmp, sizeof tmp);
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

/* "NAME: corrupt checkpoint (DETAIL)"; returns -1. */
static int corrupt(dt_err *err, const char *name, const char *fmt, ...) DT_PRINTF(3, 4);
static int corrupt(dt_err *err, const char *name, const char *fmt, ...) {
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return dt_errf(err, "%s: corrupt checkpoint (%s)", name, detail);
}

/* The contents after the header: config text, position, tensors. Every count and length is
 * checked against the bytes that remain before it is used, so nothing is allocated beyond
 * what the file holds and no pointer leaves it. */
static int parse_contents(const unsigned char *p, const unsigned char *end, const char *name, dt_checkpoint *ck,
                          dt_err *err) {
    uint32_t cl = 0, n;
    if (take(&p, end, &cl, 4) || (size_t)(end - p) < cl)
        return corrupt(err, name, "config text of %u bytes runs past the end", cl);
    if (memchr(p, 0, cl)) return corrupt(err, name, "a NUL byte in the config text");
    ck->config_text = dt_xmalloc((size_t)cl + 1);
    memcpy(ck->config_text, p, cl);
    ck->config_text[cl] = 0;
    p += cl;
    if (take(&p, end, &ck->pos.epoch, 8) || take(&p, end, &ck->pos.batch, 8) || take(&p, end, &ck->pos.step, 8) ||
        take(&p, end, &n, 4))
        return corrupt(err, name, "the position runs past the end");
    if (ck->pos.epoch < 0 || ck->pos.batch < 0 || ck->pos.step < 0)
        return corrupt(err, name, "negative position: epoch %lld, batch %lld, step %lld", (long long)ck->pos.epoch,
                       (long long)ck->pos.batch, (long long)ck->pos.step);
    /* A tensor takes at least 8 bytes (name length and dimension count). */
    if (n > (size_t)(end - p) / 8 || n > INT32_MAX)
        return corrupt(err, name, "%u tensors cannot fit in the %zu bytes left", n, (size_t)(end - p));
    ck->n = (int)n;
    size_t count = n ? n : 1;
    ck->names = dt_xcalloc(count, sizeof *ck->names);
    ck->ndim = dt_xcalloc(count, sizeof *ck->ndim);
    ck->shape = dt_xcalloc(count, sizeof *ck->shape);
    ck->data = dt_xcalloc(count, sizeof *ck->data);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t nl, nd = 0;
        if (take(&p, end, &nl, 4) || (size_t)(end - p) < nl)
            return corrupt(err, name, "tensor %u: its name runs past the end", i);
        ck->names[i] = dt_xmalloc((size_t)nl + 1);
        memcpy(ck->names[i], p, nl);
        ck->names[i][nl] = 0;
        p += nl;
        if (take(&p, end, &nd, 4) || nd > DT_MAX_DIMS)
            return corrupt(err, name, "tensor %u ('%.64s'): %u dimensions (at most %d)", i, ck->names[i], nd, DT_MAX_DIMS);
        ck->ndim[i] = (int)nd;
        for (uint32_t d = 0; d < nd; d++)
            if (take(&p, end, &ck->shape[i][d], 8))
                return corrupt(err, name, "tensor %u ('%.64s'): its shape runs past the end", i, ck->names[i]);
        int64_t numel = dt_numel((int)nd, ck->shape[i]);
        if (numel < 0)
            return corrupt(err, name, "tensor %u ('%.64s'): a negative dimension or more than 2^63 elements", i,
                           ck->names[i]);
        if ((uint64_t)numel > (size_t)(end - p) / sizeof(float))
            return corrupt(err, name, "tensor %u ('%.64s'): %lld floats run past the end", i, ck->names[i],
                           (long long)numel);
        ck->data[i] = (const float *)p; /* floats may be unaligned: copied with memcpy on use */
        p += (size_t)numel * sizeof(float);
    }
    if (p != end) return corrupt(err, name, "%zu bytes after the last tensor", (size_t)(end - p));
    return 0;
}

int dt_checkpoint_parse(void *file, size_t size, const char *name, dt_checkpoint *ck, dt_err *err) {
    memset(ck, 0, sizeof *ck);
    ck->blob = file; /* owned from here on, also on failure */
    const unsigned char *b = file;
    enum { HEAD = 8 + 4 + 8 + 8 }; /* magic, version, contents length, checksum */
    int rc = 0;
    uint32_t ver = 0;
    uint64_t len = 0, sum = 0;
    if (size < HEAD || memcmp(b, MAGIC, 8) != 0) {
        rc = dt_errf(err, "%s is not a deftc checkpoint (bad header)", name);
    } else {
        memcpy(&ver, b + 8, 4);
        memcpy(&len, b + 12, 8);
        memcpy(&sum, b + 20, 8);
        if (ver != VERSION)
            rc = dt_errf(err, "%s: checkpoint version %u, this deftc reads version %u", name, ver, VERSION);
        else if (len > size - HEAD)
            rc = corrupt(err, name, "truncated: the header announces %llu bytes of contents, the file holds %zu",
                         (unsigned long long)len, size - HEAD);
        else if (len < size - HEAD)
            rc = corrupt(err, name, "%llu bytes past the end the header announces", (unsigned long long)(size - HEAD - len));
        else if (fnv1a(b + HEAD, len) != sum)
            rc = corrupt(err, name, "checksum mismatch");
        else
            rc = parse_contents(b + HEAD, b + size, name, ck, err);
    }
    if (rc) dt_checkpoint_free(ck);
    return rc;
}

int dt_checkpoint_read(const char *path, dt_checkpoint *ck, dt_err *err) {
    memset(ck, 0, sizeof *ck);
    dt_scratch buf = {0};
    size_t size;
    if (dt_file_read(path, "checkpoint", SIZE_MAX - 1, &buf, &size, err)) {
        dt_scratch_free(&buf);
        return -1;
    }
    return dt_checkpoint_parse(buf.p, size, path, ck, err);
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
    dt_tensor_set_values(t, h); /* checkpoints hold logical (NCHW) order: any layout resumes any */
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

/* Removes PATH.tmp.PID files whose process is gone (kill(pid, 0) fails with ESRCH). */
static void clean_stale(const char *path) {
    char *dir = dt_xstrdup(path);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : path;
    if (slash) *slash = 0;
    DIR *d = opendir(slash ? (dir[0] ? dir : "/") : ".");
    size_t bl = strlen(base);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        const char *tail = e->d_name + bl;
        if (strncmp(e->d_name, base, bl) != 0 || strncmp(tail, ".tmp.", 5) != 0) continue;
        char *end;
        errno = 0;
        long pid = strtol(tail + 5, &end, 10);
        if (end == tail + 5 || *end || errno || pid <= 0 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* running (or not ours to judge) */
        char stale[4200];
        snprintf(stale, sizeof stale, "%s%s%s", slash ? dir : "", slash ? "/" : "", e->d_name);
        if (unlink(stale) == 0) dt_warn("removed %s, left by a run (PID %ld) that was killed while saving", stale, pid);
    }
    if (d) closedir(d);
    free(dir);
}

int dt_checkpoint_prepare(const char *path, dt_err *err) {
    dt_err e;
    if (dt_make_parent_dirs(path, &e)) return dt_errf(err, "cannot write checkpoint %s: %s", path, e.msg);
    clean_stale(path);
    char tmp[4200];
    tmp_name(path, (long)getpid(), tmp, sizeof tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return dt_errf(err, "cannot write checkpoint %s: %s", path, strerror(errno));
    close(fd);
    unlink(tmp);
    return 0;
}

dt_ckpt_pos dt_ckpt_pos_rescale(dt_ckpt_pos pos, int64_t was, int64_t now, int64_t steps_per_epoch, int *exact) {
    *exact = 1;
    if (was == now || was <= 0 || now <= 0) return pos;
    int64_t images = pos.batch * was;
    dt_ckpt_pos r = {pos.epoch, images / now, 0};
    *exact = r.batch * now == images;
    r.step = pos.epoch * steps_per_epoch + r.batch;
    return r;
}
