#include "train/dt_checkpoint.h"

#include "train/atomic_file.h"
#include "core/dt_alloc.h"
#include "core/dt_device.h"
#include "core/dt_file.h"
#include "ops/pointwise/dt_shared_kernels.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
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

/* A body being filled: its size is known before the first byte (one allocation, no regrowth). */
typedef struct {
    unsigned char *p;
    size_t n;
} buf;

static void put(buf *b, const void *src, size_t n) {
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void put_u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void put_i64(buf *b, int64_t v) { put(b, &v, 8); }

/* t's values as fp32 in logical order at dst (t->numel floats; dst may be unaligned: the file's
 * floats are packed). pinned: dst is page-locked and a GPU tensor's bytes are queued on the
 * stream (a tensor of another dtype or layout converted on the GPU first, into a scratch block
 * given back at once - the stream orders its reuse); the caller waits once for all of them. */
static void snapshot_tensor(const dt_tensor *t, unsigned char *dst, int pinned) {
    const size_t bytes = (size_t)t->numel * sizeof(float);
    if (!bytes) return;
    const int direct = t->dtype == DT_F32 && t->layout == DT_NCHW;
    if (t->dev == DT_GPU && pinned) {
        if (direct) {
            dt_copy_d2h_async(dst, t->data, bytes);
            return;
        }
        const int64_t N = t->ndim == 4 ? t->shape[0] : 1, C = t->ndim == 4 ? t->shape[1] : 1,
                      P = t->ndim == 4 ? t->shape[2] * t->shape[3] : t->numel;
        void *tmp = dt_gpu_malloc(bytes); /* [N, C, P] fp32 */
        DT_PICK(dt_convert_k, DT_GPU, t->dtype, DT_NCHW)(N, C, P, t->data, t->dtype, t->layout, 0.0f, tmp, DT_F32, DT_NCHW);
        dt_copy_d2h_async(dst, tmp, bytes);
        dt_gpu_free(tmp);
        return;
    }
    if (direct) {
        dt_tensor_download(t, dst);
        return;
    }
    float *h = dt_tensor_host_copy(t);
    memcpy(dst, h, bytes);
    free(h);
}

void dt_checkpoint_serialize(const char *config_text, const dt_ckpt_pos *pos, const dt_ckpt_item *items, int n,
                            dt_ckpt_image *img) {
    uint32_t cl = (uint32_t)strlen(config_text);
    size_t len = 4 + cl + 3 * 8 + 4;
    int pinned = 0; /* a GPU's tensors: copied into page-locked memory at the link's speed */
    for (int i = 0; i < n; i++) {
        len += 4 + strlen(items[i].name) + 4 + (size_t)items[i].t->ndim * 8 + (size_t)items[i].t->numel * sizeof(float);
        if (items[i].t->dev == DT_GPU) pinned = 1;
    }
    if (img->body && (img->cap < len || img->pinned != pinned)) dt_ckpt_image_free(img); /* not reusable */
    if (!img->body) {
        img->body = dt_host_alloc(len, pinned);
        img->cap = len;
        img->pinned = pinned;
    }
    buf b = {img->body, 0};
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
        snapshot_tensor(t, b.p + b.n, pinned);
        b.n += (size_t)t->numel * sizeof(float);
    }
    if (pinned) dt_gpu_sync(); /* the queued copies have landed: the snapshot is whole */
    img->len = b.n;
}

/* The header is made where the image is written: the checksum of ~100 MB (ResNet-18 with its
 * momentum) is the writer thread's work, not the training thread's. */
int dt_ckpt_image_write(const char *path, dt_ckpt_image *img, dt_err *err) {
    memcpy(img->head, MAGIC, 8);
    uint32_t ver = VERSION;
    uint64_t len = img->len, sum = fnv1a(img->body, img->len);
    memcpy(img->head + 8, &ver, 4);
    memcpy(img->head + 12, &len, 8);
    memcpy(img->head + 20, &sum, 8);
    return dt_atomic_write(path, "checkpoint", img->head, sizeof img->head, img->body, img->len, err);
}

void dt_ckpt_image_free(dt_ckpt_image *img) {
    dt_host_free(img->body, img->pinned);
    memset(img, 0, sizeof *img);
}

int dt_checkpoint_save(const char *path, const char *config_text, const dt_ckpt_pos *pos, const dt_ckpt_item *items,
                       int n, dt_err *err) {
    dt_ckpt_image img = {0};
    dt_checkpoint_serialize(config_text, pos, items, n, &img);
    int rc = dt_ckpt_image_write(path, &img, err);
    dt_ckpt_image_free(&img);
    return rc;
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
    if (dt_file_read(path, "checkpoint", DT_CHECKPOINT_MAX_BYTES, &buf, &size, err)) {
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
    /* A NaN would train on as NaN and stop at the first step as "diverged", blaming the run. */
    for (int64_t k = 0; k < t->numel; k++)
        if (!isfinite(h[k])) {
            dt_errf(err, "checkpoint %s: tensor '%s' holds %s at element %lld (the state of a diverged or damaged run "
                    "cannot be resumed)", path, name, isnan(h[k]) ? "a NaN" : "an infinity", (long long)k);
            free(h);
            return -1;
        }
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
    char target[PATH_MAX + 1], tmp[PATH_MAX + 32];
    if (dt_atomic_target(path, "checkpoint", target, sizeof target, err)) return -1;
    clean_stale(target);
    dt_atomic_tmp_name(target, (long)getpid(), tmp, sizeof tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return dt_errf(err, "cannot write checkpoint %s: %s", path, strerror(errno));
    close(fd);
    unlink(tmp);
    return 0;
}

/* ---- positions ---- */

dt_ckpt_pos dt_ckpt_pos_rescale(dt_ckpt_pos pos, int64_t was, int64_t now, int64_t steps_per_epoch, int *exact) {
    *exact = 1;
    if (was == now || was <= 0 || now <= 0 || steps_per_epoch <= 0) return pos;
    int64_t images;
    if (__builtin_mul_overflow(pos.batch, was, &images)) return *exact = -1, pos;
    dt_ckpt_pos r = {pos.epoch, images / now, 0};
    *exact = r.batch * now == images; /* r.batch * now <= images: no overflow */
    if (r.batch >= steps_per_epoch) { /* past the last whole batch of the new epoch: the next one */
        if (__builtin_add_overflow(r.epoch, 1, &r.epoch)) return *exact = -1, pos;
        r.batch = 0;
        *exact = 0;
    }
    if (__builtin_mul_overflow(r.epoch, steps_per_epoch, &r.step) || __builtin_add_overflow(r.step, r.batch, &r.step))
        return *exact = -1, pos;
    return r;
}

int dt_ckpt_run_of(const dt_train_cfg *c, int world, int64_t train_images, dt_ckpt_run *r, dt_err *err) {
    r->global_batch = (int64_t)c->batch * world;
    if (c->synthetic) r->steps_per_epoch = c->steps > 0 ? c->steps : 100;
    else r->steps_per_epoch = r->global_batch > 0 ? train_images / r->global_batch : 0;
    if (r->steps_per_epoch < 1)
        return dt_errf(err, "%lld training images are fewer than one global batch of %lld (batch %d x %d replicas)",
                       (long long)train_images, (long long)r->global_batch, c->batch, world);
    r->total_steps = c->steps;
    if (c->steps <= 0 && __builtin_mul_overflow((int64_t)c->epochs, r->steps_per_epoch, &r->total_steps))
        return dt_errf(err, "epochs = %d of %lld steps each do not fit a 64-bit step count", c->epochs,
                       (long long)r->steps_per_epoch);
    return 0;
}

int dt_checkpoint_plan_resume(const dt_checkpoint *ck, const dt_ckpt_run *now, int processes, int64_t train_images,
                              const char *path, dt_ckpt_resume *out, dt_err *err) {
    memset(out, 0, sizeof *out);
    out->was = *now;
    dt_config_defaults(&out->config);
    dt_err e;
    int gpus = -1;
    if (dt_config_parse(&out->config, ck->config_text, strlen(ck->config_text), path, &e) == 0 &&
        (gpus = dt_config_gpus(&out->config, NULL, &e)) > 0) {
        out->have_config = 1;
        if (dt_ckpt_run_of(&out->config, gpus * processes, train_images, &out->was, &e))
            return dt_errf(err, "checkpoint %s was written by a run that does not fit this training set: %s", path, e.msg);
    } else {
        snprintf(out->config_error, sizeof out->config_error, "%s", e.msg);
        dt_config_defaults(&out->config);
    }
    const dt_ckpt_pos *s = &ck->pos;
    const dt_ckpt_run *w = &out->was;
    long long E = s->epoch, B = s->batch, S = s->step;
    if (E < 0 || B < 0 || S < 0)
        return dt_errf(err, "checkpoint %s: negative position (epoch %lld, batch %lld, step %lld)", path, E, B, S);
    if (B >= w->steps_per_epoch)
        return dt_errf(err, "checkpoint %s: batch %lld of epoch %lld is past the end of the epoch: the run that wrote it "
                       "had %lld batches per epoch", path, B, E, (long long)w->steps_per_epoch);
    int64_t at;
    if (__builtin_mul_overflow(s->epoch, w->steps_per_epoch, &at) || __builtin_add_overflow(at, s->batch, &at))
        return dt_errf(err, "checkpoint %s: epoch %lld of %lld steps each is past 2^63 steps", path, E,
                       (long long)w->steps_per_epoch);
    if (at != s->step)
        return dt_errf(err, "checkpoint %s: inconsistent position: epoch %lld, batch %lld is step %lld with %lld steps per "
                       "epoch, but the checkpoint says step %lld (a checkpoint of another training set?)", path, E, B,
                       (long long)at, (long long)w->steps_per_epoch, S);
    if (s->step > w->total_steps)
        return dt_errf(err, "checkpoint %s: step %lld is past the end of the run that wrote it (%lld steps)", path, S,
                       (long long)w->total_steps);
    out->pos = dt_ckpt_pos_rescale(*s, w->global_batch, now->global_batch, now->steps_per_epoch, &out->exact);
    if (out->exact < 0)
        return dt_errf(err, "checkpoint %s: step %lld in batches of %lld images does not fit 64 bits in batches of %lld",
                       path, S, (long long)w->global_batch, (long long)now->global_batch);
    if (out->pos.step > now->total_steps)
        return dt_errf(err, "checkpoint %s is at step %lld, past the end of this run (%lld steps): raise steps= or epochs= "
                       "to continue it", path, (long long)out->pos.step, (long long)now->total_steps);
    return 0;
}

/* ---- a model's state ---- */

void dt_checkpoint_serialize_state(const char *config_text, const dt_ckpt_pos *pos, const dt_params *ps,
                                   dt_tensor *const *momentum, dt_tensor *const *buffers, int n_buffers, dt_ckpt_image *img) {
    int cap = 2 * ps->n + n_buffers, n = 0;
    dt_ckpt_item *items = dt_xcalloc(cap ? cap : 1, sizeof *items);
    char(*names)[80] = dt_xcalloc(ps->n ? ps->n : 1, sizeof *names); /* "momentum/" + a name of < 64 */
    for (int i = 0; i < ps->n; i++) items[n++] = (dt_ckpt_item){ps->items[i]->t->name, ps->items[i]->t};
    for (int i = 0; i < n_buffers; i++) items[n++] = (dt_ckpt_item){buffers[i]->name, buffers[i]};
    for (int i = 0; i < ps->n; i++)
        if (momentum[i]) {
            snprintf(names[i], sizeof names[i], "momentum/%s", ps->items[i]->t->name);
            items[n++] = (dt_ckpt_item){names[i], momentum[i]};
        }
    dt_checkpoint_serialize(config_text, pos, items, n, img);
    free(items);
    free(names);
}

int dt_checkpoint_load_state(const dt_checkpoint *ck, dt_params *ps, dt_tensor **momentum, dt_tensor **buffers,
                             int n_buffers, const char *path, dt_err *err) {
    int used = 0;
    for (int i = 0; i < ps->n; i++, used++) {
        dt_tensor *p = ps->items[i]->t;
        if (dt_checkpoint_copy_to(ck, p->name, p, path, err)) return -1;
        char mname[80];
        snprintf(mname, sizeof mname, "momentum/%s", p->name);
        if (dt_checkpoint_find(ck, mname) < 0) continue;
        if (!momentum[i]) momentum[i] = dt_tensor_new_unscoped(p->ndim, p->shape, p->dev, DT_F32, p->layout);
        if (dt_checkpoint_copy_to(ck, mname, momentum[i], path, err)) return -1;
        used++;
    }
    for (int i = 0; i < n_buffers; i++, used++)
        if (dt_checkpoint_copy_to(ck, buffers[i]->name, buffers[i], path, err)) return -1;
    if (used != ck->n)
        return dt_errf(err, "checkpoint %s does not match the model: it holds %d tensors, the model %d (another model, "
                       "deform setting or class count?)", path, ck->n, used);
    return 0;
}
