/* A model's weights to and from safetensors under torchvision's names (dt_weights.h). */
#include "train/dt_weights.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/atomic_file.h"
#include "train/dt_checkpoint.h"
#include "core/dt_file.h"
#include "train/model_tensors.h"
#include "train/path_check.h"
#include "train/run_lock.h"
#include "train/train_run.h" /* train_model_cfg */

static int ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && !strcmp(s + n - m, tail);
}

static int is_offset_conv(const char *name) { return ends_with(name, ".offset.weight") || ends_with(name, ".offset.bias"); }
/* the classifier: fc (the ResNets) or classifier.1 (mobilenet_v2) */
static int is_fc(const char *name) {
    return !strcmp(name, "fc.weight") || !strcmp(name, "fc.bias") || !strcmp(name, "classifier.1.weight") ||
           !strcmp(name, "classifier.1.bias");
}

/* the classifier of a name is_fc takes: its prefix (fc, classifier.1) into rep->fc */
static void fc_of(const char *name, dt_weights_report *rep) {
    snprintf(rep->fc, sizeof rep->fc, "%.*s", (int)(strrchr(name, '.') - name), name);
}

static void shape_text(int nd, const int64_t *s, char *b, size_t len) {
    size_t o = (size_t)snprintf(b, len, "[");
    for (int i = 0; i < nd && o < len; i++) o += (size_t)snprintf(b + o, len - o, i ? ", %lld" : "%lld", (long long)s[i]);
    if (o < len) snprintf(b + o, len - o, "]");
}

/* A list of names for a message: "a, b, c and 4 more". */
typedef struct {
    char text[400];
    int n;
} name_list;

static void list_add(name_list *l, const char *name) {
    size_t o = strlen(l->text);
    if (l->n++ < 4) snprintf(l->text + o, sizeof l->text - o, "%s'%.80s'", o ? ", " : "", name);
}

static const char *list_end(name_list *l) {
    size_t o = strlen(l->text);
    if (l->n > 4) snprintf(l->text + o, sizeof l->text - o, " and %d more", l->n - 4);
    return l->text;
}

/* The model's tensors in one list: the parameters' masters, then the buffers. */
static dt_tensor *model_tensor(dt_params *ps, dt_tensor *const *buffers, int i) {
    return i < ps->n ? ps->items[i]->t : buffers[i - ps->n];
}

/* Whether `name` is the num_batches_tracked of a batch norm of the model (one whose
 * running_mean it has). */
static int is_bn_counter(const char *name, dt_tensor *const *buffers, int n_buffers) {
    static const char tail[] = ".num_batches_tracked";
    if (!ends_with(name, tail)) return 0;
    size_t stem = strlen(name) - (sizeof tail - 1);
    for (int i = 0; i < n_buffers; i++)
        if (!strncmp(buffers[i]->name, name, stem) && !strcmp(buffers[i]->name + stem, ".running_mean")) return 1;
    return 0;
}

/* The file's values of tensor f for the model's tensor t: converted, finite, a variance not
 * negative. NULL with err set otherwise. */
static float *values_of(const dt_st_tensor *f, const dt_tensor *t, const char *path, dt_err *err) {
    float *v = dt_xmalloc((size_t)(f->numel ? f->numel : 1) * sizeof *v);
    dt_st_tensor_to_f32(f, v);
    int var = ends_with(t->name, ".running_var");
    for (int64_t k = 0; k < f->numel; k++)
        if (!isfinite(v[k]) || (var && v[k] < 0)) {
            dt_errf(err, "%s: tensor '%s' holds %s at element %lld%s", path, t->name,
                    isnan(v[k]) ? "a NaN" : isinf(v[k]) ? "an infinity" : "a negative variance", (long long)k,
                    f->dtype == DT_ST_F64 && isinf(v[k]) ? " (an F64 infinity, or a value beyond the float range)" : "");
            free(v);
            return NULL;
        }
    return v;
}

int dt_weights_load_state(const dt_safetensors *st, dt_params *ps, dt_tensor *const *buffers, int n_buffers, int partial,
                          const char *path, dt_weights_report *rep, dt_err *err) {
    memset(rep, 0, sizeof *rep);
    int nt = ps->n + n_buffers;
    /* the file's tensor for each of the model's (NULL: absent or, partially, kept), and which
     * of the file's were taken */
    const dt_st_tensor **src = dt_xcalloc((size_t)(nt ? nt : 1), sizeof *src);
    char *used = dt_xcalloc((size_t)(st->n ? st->n : 1), 1);
    float **vals = dt_xcalloc((size_t)(nt ? nt : 1), sizeof *vals);
    name_list missing = {{0}, 0}, extra = {{0}, 0};
    int rc = 0;
    for (int i = 0; i < nt && !rc; i++) {
        dt_tensor *t = model_tensor(ps, buffers, i);
        const dt_st_tensor *f = dt_safetensors_find(st, t->name);
        if (f) used[f - st->t] = 1;
        int same = f && f->ndim == t->ndim && !memcmp(f->shape, t->shape, (size_t)t->ndim * sizeof *t->shape);
        if (!f) {
            if (is_offset_conv(t->name)) rep->offset_zero += ends_with(t->name, ".weight");
            else if (partial && is_fc(t->name)) rep->fc_kept++, fc_of(t->name, rep);
            else list_add(&missing, t->name);
        } else if (!same && partial && is_fc(t->name)) {
            rep->fc_kept++;
            fc_of(t->name, rep);
        } else if (!same) {
            char a[200], b[200];
            shape_text(f->ndim, f->shape, a, sizeof a);
            shape_text(t->ndim, t->shape, b, sizeof b);
            rc = dt_errf(err, "%s: tensor '%s' is %s in the file but %s in the model%s", path, t->name, a, b,
                         is_fc(t->name) ? " (another class count? init_from_partial=1 leaves fc at its init)" : "");
        } else if (!dt_st_dtype_is_float(f->dtype)) {
            rc = dt_errf(err, "%s: tensor '%s' is %s: the model's weights need a float dtype (F32, BF16, F16 or F64)", path,
                         t->name, dt_st_dtype_name(f->dtype));
        } else {
            src[i] = f;
        }
    }
    for (int i = 0; i < st->n && !rc; i++) {
        if (used[i]) continue;
        if (is_bn_counter(st->t[i].name, buffers, n_buffers)) rep->ignored++;
        else list_add(&extra, st->t[i].name);
    }
    if (!rc && missing.n)
        rc = dt_errf(err, "%s lacks %d tensor%s of the model: %s (a state_dict of another model, depth or deform "
                     "setting?)", path, missing.n, missing.n == 1 ? "" : "s", list_end(&missing));
    if (!rc && extra.n)
        rc = dt_errf(err, "%s has %d tensor%s the model does not: %s (a state_dict of another model, depth or deform "
                     "setting?)", path, extra.n, extra.n == 1 ? "" : "s", list_end(&extra));
    /* every value converted and checked before the first copy: a failure leaves the model as
     * it was */
    for (int i = 0; i < nt && !rc; i++)
        if (src[i] && !(vals[i] = values_of(src[i], model_tensor(ps, buffers, i), path, err))) rc = -1;
    for (int i = 0; i < nt && !rc; i++) {
        dt_tensor *t = model_tensor(ps, buffers, i);
        if (vals[i]) {
            dt_tensor_set_values(t, vals[i]); /* logical order in, the model's layout out */
            rep->loaded++;
        } else if (is_offset_conv(t->name)) {
            dt_tensor_fill(t, 0.0f);
        }
    }
    for (int i = 0; i < nt; i++) free(vals[i]);
    free(vals);
    free(used);
    free(src);
    return rc;
}

void dt_weights_describe(const dt_weights_report *rep, const char *path, int deform_version, char *buf, size_t cap) {
    size_t o = (size_t)snprintf(buf, cap, "%d tensors from %s", rep->loaded, path);
    int one = rep->offset_zero == 1;
    if (rep->offset_zero && o < cap)
        o += (size_t)snprintf(buf + o, cap - o, "; %d offset conv%s start%s at zero offsets%s", rep->offset_zero,
                              one ? "" : "s", one ? "s" : "",
                              deform_version == 2 ? " and zero mask logits: a mask of 0.5, so each deformable layer starts "
                                                    "out as its plain conv times 0.5 (before its batch norm)" : "");
    if (rep->fc_kept && o < cap)
        o += (size_t)snprintf(buf + o, cap - o, "; %s%s.weight and %s.bias %s of another shape in the file or absent: left "
                              "at %s initialization (init_from_partial=1)", rep->fc_kept == 1 ? "one of " : "",
                              rep->fc, rep->fc, rep->fc_kept == 1 ? "is" : "are", rep->fc_kept == 1 ? "its" : "their");
    if (rep->ignored && o < cap) snprintf(buf + o, cap - o, "; %d num_batches_tracked ignored", rep->ignored);
}

int dt_weights_save_tensors(const char *path, const dt_st_item *items, int n, const dt_st_meta *meta, int n_meta,
                            dt_err *err) {
    void *file;
    size_t size;
    if (dt_safetensors_encode(items, n, meta, n_meta, &file, &size, err)) return -1;
    int rc = dt_atomic_write(path, "safetensors file", file, size, NULL, 0, err);
    free(file);
    return rc;
}

/* The deform= text of a stage mask: none, all, or the stages like 2,3,4. */
static void stages_text(unsigned mask, char *b, size_t cap) {
    if (!mask || mask == 15) {
        snprintf(b, cap, "%s", mask ? "all" : "none");
        return;
    }
    size_t o = 0;
    b[0] = 0;
    for (int s = 0; s < 4; s++)
        if (mask >> s & 1) o += (size_t)snprintf(b + o, cap - o, "%s%d", o ? "," : "", s + 1);
}

int dt_weights_export(const dt_resnet *m, int64_t steps, const char *path, dt_err *err) {
    const dt_params *ps = &m->params;
    int n = ps->n + m->n_buffers + m->n_bns;
    dt_st_item *items = dt_xcalloc((size_t)n, sizeof *items);
    float **host = dt_xcalloc((size_t)n, sizeof *host);
    char(*names)[96] = dt_xcalloc((size_t)(m->n_bns ? m->n_bns : 1), sizeof *names);
    int k = 0;
    for (int i = 0; i < ps->n + m->n_buffers; i++) {
        const dt_tensor *t = i < ps->n ? ps->items[i]->t : m->buffers[i - ps->n];
        host[k] = dt_tensor_host_copy(t); /* logical (NCHW) order whatever the layout */
        items[k] = (dt_st_item){t->name, DT_ST_F32, t->ndim, t->shape, host[k]};
        k++;
    }
    /* PyTorch's per-BN step counter, next to each batch norm's running statistics */
    for (int i = 0; i < m->n_bns; i++) {
        const char *mean = m->bns[i]->running_mean->name;
        snprintf(names[i], sizeof names[i], "%.*s.num_batches_tracked", (int)(strlen(mean) - strlen(".running_mean")), mean);
        items[k++] = (dt_st_item){names[i], DT_ST_I64, 0, NULL, &steps};
    }
    char deform[16], width[32], version[16], groups[16], classes[32], nsteps[32];
    stages_text(m->cfg.deform_stages, deform, sizeof deform);
    snprintf(width, sizeof width, "%g", m->cfg.width);
    snprintf(version, sizeof version, "%d", m->cfg.deform_version);
    snprintf(groups, sizeof groups, "%d", m->cfg.offset_groups);
    snprintf(classes, sizeof classes, "%d", m->cfg.num_classes);
    snprintf(nsteps, sizeof nsteps, "%lld", (long long)steps);
    dt_st_meta meta[] = {{"format", "pt"},           {"deftc_model", (char *)dt_resnet_model_name(m->cfg.model)},
                         {"width", width},           {"deform", deform},
                         {"deform_version", version}, {"offset_groups", groups},
                         {"classes", classes},       {"steps", nsteps}};
    int rc = dt_weights_save_tensors(path, items, k, meta, (int)(sizeof meta / sizeof *meta), err);
    for (int i = 0; i < n; i++) free(host[i]);
    free(host);
    free(names);
    free(items);
    return rc;
}

int dt_weights_export_prepare(const char *path, dt_err *err) {
    char target[PATH_MAX + 1];
    dt_err e;
    if (dt_make_parent_dirs(path, &e)) return dt_errf(err, "cannot write export %s: %s", path, e.msg);
    return dt_atomic_target(path, "export", target, sizeof target, err);
}

/* The checkpoint's tensors against the model's: every one of the model's present with its
 * shape (momentum/... besides them: the optimizer's, not exported). */
typedef struct {
    const dt_checkpoint *ck;
    const char *path;
    dt_err *err;
    int found;
} table_check;

static int check_table_entry(const char *name, int ndim, const int64_t *shape, void *ctx) {
    table_check *t = ctx;
    int i = dt_checkpoint_find(t->ck, name);
    if (i < 0)
        return dt_errf(t->err, "cannot export %s: it lacks '%s', a tensor of the model its stored config names (a "
                       "crafted or damaged checkpoint?)", t->path, name);
    if (t->ck->ndim[i] != ndim || memcmp(t->ck->shape[i], shape, (size_t)ndim * sizeof *shape)) {
        char a[200], b[200];
        shape_text(t->ck->ndim[i], t->ck->shape[i], a, sizeof a);
        shape_text(ndim, shape, b, sizeof b);
        return dt_errf(t->err, "cannot export %s: tensor '%s' is %s in it but %s in the model its stored config names",
                       t->path, name, a, b);
    }
    t->found++;
    return 0;
}

/* The position through the check a resume makes (dt_checkpoint_plan_resume), on a training
 * set of the size the position implies (export has no dataset): epoch E, batch B, step S of a
 * run of E > 0 epochs done had (S - B) / E steps per epoch. */
static int check_position(const dt_checkpoint *ck, const dt_train_cfg *c, const char *path, dt_err *err) {
    long long E = ck->pos.epoch, B = ck->pos.batch, S = ck->pos.step;
    if (E < 0 || B < 0 || S < 0 || S < B || (E > 0 && (S - B) % E != 0) || (E == 0 && S != B))
        return dt_errf(err, "cannot export %s: inconsistent position (epoch %lld, batch %lld, step %lld): no run writes it",
                       path, E, B, S);
    dt_err e;
    int gpus = dt_config_gpus(c, NULL, &e);
    if (gpus < 1) return dt_errf(err, "cannot export %s: the config it stores: %s", path, e.msg);
    int64_t spe = E > 0 ? (S - B) / E : B + 1, images;
    if (spe < 1) spe = 1;
    if (__builtin_mul_overflow(spe, (int64_t)c->batch * gpus, &images))
        return dt_errf(err, "cannot export %s: step %lld of epoch %lld does not fit a 64-bit image count", path, S, E);
    dt_ckpt_run was;
    dt_ckpt_resume rs;
    if (dt_ckpt_run_of(c, gpus, images, &was, &e)) return dt_errf(err, "cannot export %s: %s", path, e.msg);
    if (dt_checkpoint_plan_resume(ck, &was, 1, images, path, &rs, &e)) return dt_errf(err, "cannot export: %s", e.msg);
    return 0;
}

/* A model larger than this is not built for an export: twice the largest the keys allow
 * (docs/weights.md). The export holds the model, its host copies and the encoded file. */
#define EXPORT_MAX_MODEL_BYTES ((int64_t)16 << 30)

static int export_checkpoint(const char *ckpt_path, const char *out_path, dt_err *err) {
    if (dt_paths_same(ckpt_path, out_path))
        return dt_errf(err, "cannot export %s to %s: they are the same file (the same path, a symlink or a hard link): the "
                       "export would replace the checkpoint; give the export another path", ckpt_path, out_path);
    dt_checkpoint ck;
    if (dt_weights_export_prepare(out_path, err) || dt_checkpoint_read(ckpt_path, &ck, err)) return -1;
    dt_train_cfg c;
    dt_config_defaults(&c);
    dt_err e;
    int rc = 0, fc = dt_checkpoint_find(&ck, "fc.bias");
    if (fc < 0) fc = dt_checkpoint_find(&ck, "classifier.1.bias"); /* mobilenet_v2 */
    if (dt_config_parse(&c, ck.config_text, strlen(ck.config_text), ckpt_path, &e))
        rc = dt_errf(err, "cannot export %s: the config it stores does not parse (%s)", ckpt_path, e.msg);
    else if (fc < 0 || ck.ndim[fc] != 1 || ck.shape[fc][0] < 2 || ck.shape[fc][0] > 100000)
        rc = dt_errf(err, "cannot export %s: it has no fc.bias (classifier.1.bias) of 2..100000 classes (not a deftc "
                     "model's checkpoint)",
                     ckpt_path);
    dt_resnet_cfg mc;
    if (!rc) {
        train_model_cfg(&c, (int)ck.shape[fc][0], &mc);
        mc.precision = DT_PREC_FP32;
        mc.layout = DT_NCHW;
    }
    /* everything checked before the model is built: its size, the checkpoint's tensors
     * against its own, the position */
    int64_t elements = 0;
    table_check tc = {&ck, ckpt_path, err, 0};
    if (!rc && train_model_tensors(&mc, NULL, NULL, &elements, &e))
        rc = dt_errf(err, "cannot export %s: the model its stored config names cannot be built: %s", ckpt_path, e.msg);
    if (!rc && elements > EXPORT_MAX_MODEL_BYTES / 4)
        rc = dt_errf(err, "cannot export %s: its stored config names a model of %lld parameters (%.1f GB), more than the "
                     "%.0f GB an export builds (a crafted or damaged checkpoint?)", ckpt_path, (long long)elements,
                     elements * 4e-9, EXPORT_MAX_MODEL_BYTES * 1e-9);
    if (!rc && train_model_tensors(&mc, check_table_entry, &tc, NULL, &e)) rc = -1;
    if (!rc) {
        int own = 0;
        for (int i = 0; i < ck.n; i++) own += strncmp(ck.names[i], "momentum/", 9) != 0;
        if (own != tc.found)
            rc = dt_errf(err, "cannot export %s: it holds %d tensors besides the momentum, the model its stored config "
                         "names %d", ckpt_path, own, tc.found);
    }
    if (!rc) rc = check_position(&ck, &c, ckpt_path, err);
    if (rc) {
        dt_checkpoint_free(&ck);
        return rc;
    }
    /* the masters are fp32 in every precision and the checkpoint is in logical order: the CPU
     * fp32 NCHW twin of the model holds the same state */
    dt_resnet m;
    dt_resnet_init(&m, &mc, DT_CPU);
    dt_tensor **momentum = dt_xcalloc((size_t)m.params.n, sizeof *momentum);
    rc = dt_checkpoint_load_state(&ck, &m.params, momentum, m.buffers, m.n_buffers, ckpt_path, err);
    if (!rc) rc = dt_weights_export(&m, ck.pos.step, out_path, err);
    for (int i = 0; i < m.params.n; i++) dt_tensor_free(momentum[i]);
    free(momentum);
    dt_resnet_free(&m);
    dt_checkpoint_free(&ck);
    return rc;
}

int train_export_checkpoint(const char *ckpt_path, const char *out_path, dt_err *err) {
    return export_checkpoint(ckpt_path, out_path, err);
}

int dt_weights_export_checkpoint(const char *ckpt_path, const char *out_path, dt_err *err) {
    /* the export's name is locked against a run writing it (run_lock.h), as a run's outputs are */
    char target[PATH_MAX + 1], what[700];
    if (dt_paths_same(ckpt_path, out_path))
        return dt_errf(err, "cannot export %s to %s: they are the same file (the same path, a symlink or a hard link): the "
                       "export would replace the checkpoint; give the export another path", ckpt_path, out_path);
    if (dt_weights_export_prepare(out_path, err) || dt_atomic_target(out_path, "export", target, sizeof target, err))
        return -1;
    snprintf(what, sizeof what, "export %.600s", out_path);
    train_lock lk = {0};
    long stale = 0;
    if (train_lock_take(&lk, target, what, &stale, err)) return -1;
    int rc = export_checkpoint(ckpt_path, out_path, err);
    train_lock_release(&lk);
    return rc;
}
