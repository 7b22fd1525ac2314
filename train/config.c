/* Table-driven config parsing: one row per key with its type, range or choices, default and
 * a line of help. */
#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "dt_config.h"
#include "dt_device.h" /* DT_MAX_GPUS */
#include "dt_file.h"

typedef enum { T_INT, T_I64, T_U64, T_FLOAT, T_STR, T_ENUM, T_BOOL } key_type;

typedef struct {
    const char *key;
    key_type type;
    size_t off, size;
    const char *def;
    const char *choices; /* T_ENUM: "a|b|c" */
    double lo, hi;       /* numeric range */
    int run;             /* 1: changes what is trained (a resume that changes it is warned) */
    const char *help;
} key_spec;

#define F(field) offsetof(dt_train_cfg, field), sizeof(((dt_train_cfg *)0)->field)

static const key_spec KEYS[] = {
    {"data", T_STR, F(data), "", NULL, 0, 0, 1, "dataset root holding train/<class>/ and val/<class>/"},
    {"synthetic", T_BOOL, F(synthetic), "0", NULL, 0, 1, 1, "1: random device tensors instead of images (times pure compute)"},
    {"classes", T_INT, F(classes), "1000", NULL, 2, 100000, 1, "number of classes when synthetic=1"},
    {"image_size", T_INT, F(image_size), "224", NULL, 32, 1024, 1, "input resolution (square)"},
    {"batch", T_INT, F(batch), "64", NULL, 1, 65536, 1, "images per step"},
    {"workers", T_INT, F(workers), "0", NULL, 0, 1024, 0, "loader threads (0 = number of cores)"},
    {"crop_scale_min", T_FLOAT, F(crop_scale_min), "0.08", NULL, 0.01, 1, 1, "RandomResizedCrop's smallest area fraction"},
    {"cache", T_BOOL, F(cache), "0", NULL, 0, 1, 1, "keep decoded, downsized images in memory (small datasets)"},
    {"max_val_batches", T_INT, F(max_val_batches), "0", NULL, 0, 1 << 30, 0, "evaluate on at most this many val batches (0 = all)"},
    {"device", T_ENUM, F(device), "cuda", "cuda|cpu", 0, 0, 1, "where to train"},
    {"precision", T_ENUM, F(precision), "fp32", "fp32|tf32|bf16", 0, 0, 1,
     "precision policy: fp32, tf32 (fp32 on TF32 tensor cores), bf16 (bf16 activations, fp32 accumulation, masters, "
     "statistics and loss; docs/training.md)"},
    {"layout", T_ENUM, F(layout), "auto", "auto|nchw|nhwc", 0, 0, 0,
     "activation layout: auto (nhwc for bf16, nchw for fp32/tf32), nchw, or nhwc (channels last)"},
    {"gpus", T_STR, F(gpus), "1", NULL, 0, 0, 1,
     "data parallel: N (GPUs 0..N-1) or a list like 0,2; global batch = batch x replicas (docs/training.md)"},
    {"sync_bn", T_BOOL, F(sync_bn), "0", NULL, 0, 1, 1, "several GPUs: batch-norm statistics over all replicas' batches"},
    {"bucket_mb", T_INT, F(bucket_mb), "25", NULL, 1, 4096, 0, "several GPUs: gradient all-reduce bucket size (MiB)"},
    {"col_budget_mb", T_INT, F(col_budget_mb), "256", NULL, 1, 65536, 0, "column-buffer budget of conv/deform chunks (MiB)"},
    {"epochs", T_INT, F(epochs), "1", NULL, 1, 100000, 1, "epochs to train"},
    {"steps", T_I64, F(steps), "0", NULL, 0, 1e15, 1, "stop after this many steps (0 = run the epochs)"},
    {"lr", T_FLOAT, F(lr), "0.1", NULL, 0, 1e6, 1, "base learning rate"},
    {"momentum", T_FLOAT, F(momentum), "0.9", NULL, 0, 1, 1, "SGD momentum"},
    {"nesterov", T_BOOL, F(nesterov), "0", NULL, 0, 1, 1, "Nesterov momentum"},
    {"weight_decay", T_FLOAT, F(weight_decay), "1e-4", NULL, 0, 1, 1, "L2 weight decay"},
    {"decay_bn_bias", T_BOOL, F(decay_bn_bias), "1", NULL, 0, 1, 1, "0: exempt BN and bias parameters from weight decay"},
    {"schedule", T_ENUM, F(schedule), "cosine", "const|step|cosine", 0, 0, 1, "learning-rate schedule"},
    {"lr_step_epochs", T_INT, F(lr_step_epochs), "30", NULL, 1, 100000, 1, "schedule=step: epochs between decays"},
    {"lr_gamma", T_FLOAT, F(lr_gamma), "0.1", NULL, 0, 1, 1, "schedule=step: decay factor"},
    {"min_lr", T_FLOAT, F(min_lr), "0", NULL, 0, 1e6, 1, "schedule=cosine: final learning rate"},
    {"warmup", T_I64, F(warmup), "0", NULL, 0, 1e12, 1, "linear warmup steps"},
    {"warmup_start", T_FLOAT, F(warmup_start), "0.1", NULL, 0, 1, 1, "warmup starts at lr * warmup_start"},
    {"label_smoothing", T_FLOAT, F(label_smoothing), "0", NULL, 0, 0.999, 1, "label smoothing of the cross-entropy"},
    {"width", T_FLOAT, F(width), "1", NULL, 0.0625, 4, 1, "channel-width multiplier (1 = ResNet-18; 0.25 for quick CPU runs)"},
    {"deform", T_STR, F(deform), "none", NULL, 0, 0, 1, "deformable 3x3 convs: none, all, or stages like 3,4"},
    {"deform_version", T_INT, F(deform_version), "1", NULL, 1, 2, 1, "1 = DCNv1, 2 = DCNv2 (with mask)"},
    {"deform_mode", T_ENUM, F(deform_mode), "deft", "unfused|deft", 0, 0, 1, "implementation of the deformable convs"},
    {"offset_groups", T_INT, F(offset_groups), "1", NULL, 1, 64, 1, "offset groups of the deformable convs"},
    {"offset_init_std", T_FLOAT, F(offset_init_std), "0", NULL, 0, 10, 0, "std of the offset convs' initial weights (0 = zeros)"},
    {"offset_lr_mult", T_FLOAT, F(offset_lr_mult), "0.1", NULL, 0, 100, 1, "learning-rate multiplier of the offset convs"},
    {"tile", T_STR, F(tile), "auto", NULL, 0, 0, 0, "deft: output tile per block, auto or HxW (8x8, 4x8, 4x4, ...)"},
    {"halo", T_INT, F(halo), "-1", NULL, -1, 32, 0, "deft: staged halo in px (-1 = from the offset statistics)"},
    {"halo_refresh", T_INT, F(halo_refresh), "200", NULL, 0, 1 << 30, 0, "deft: steps between automatic halo updates"},
    {"swizzle", T_BOOL, F(swizzle), "1", NULL, 0, 1, 0, "deft: block-ID swizzle for L2 reuse (with fuse_offset or stage)"},
    {"fuse_offset", T_BOOL, F(fuse_offset), "0", NULL, 0, 1, 0, "deft: offset conv and sampling in one kernel per tile (DefT)"},
    {"stage", T_BOOL, F(stage), "0", NULL, 0, 1, 0, "deft: sampling reads the tile's input + halo from shared memory (DefT)"},
    {"dx", T_ENUM, F(dx), "gather", "gather|atomic", 0, 0, 0, "deft: input gradient by inverse index + gather, or float4 atomics"},
    {"deterministic", T_BOOL, F(deterministic), "0", NULL, 0, 1, 0, "bitwise-reproducible deformable backward (deft: dx=gather)"},
    {"seed", T_U64, F(seed), "0", NULL, 0, 1.8e19, 1, "seed of initialization, shuffling and augmentation"},
    {"checkpoint", T_STR, F(checkpoint), "", NULL, 0, 0, 0, "write a checkpoint here after every epoch (and at the end)"},
    {"resume", T_STR, F(resume), "", NULL, 0, 0, 0, "resume from this checkpoint"},
    {"log", T_STR, F(log), "", NULL, 0, 0, 0, "log prefix: writes PREFIX.log, PREFIX_steps.csv, PREFIX_epochs.csv"},
    {"log_every", T_INT, F(log_every), "10", NULL, 1, 1 << 30, 0, "steps between log lines"},
    {"eval_every", T_INT, F(eval_every), "1", NULL, 0, 100000, 0, "epochs between evaluations (0 = only at the end)"},
    {"timing_warmup", T_INT, F(timing_warmup), "10", NULL, 0, 1 << 30, 0, "steps left out of the time statistics"},
    {"quiet", T_BOOL, F(quiet), "0", NULL, 0, 1, 0, "print nothing but errors (the log files still get everything)"},
    {"progress", T_BOOL, F(progress), "1", NULL, 0, 1, 0, "live progress line when stdout is a terminal"},
    {"max_image_pixels", T_I64, F(max_image_pixels), "89478485", NULL, 1, 1e10, 1, "images with more pixels are skipped with a warning, before decoding (PIL's limit)"},
    {"stop_at", T_I64, F(stop_at), "0", NULL, 0, 1e15, 0, "stop after this global step, writing the checkpoint (resume later)"},
};
#define NKEYS ((int)(sizeof KEYS / sizeof *KEYS))

static void list_keys(char *buf, size_t len) {
    size_t o = 0;
    for (int i = 0; i < NKEYS && o < len; i++) o += snprintf(buf + o, len - o, "%s%s", i ? ", " : "", KEYS[i].key);
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

static int set_value(dt_train_cfg *c, const key_spec *k, const char *v, dt_err *err) {
    void *dst = (char *)c + k->off;
    char *end;
    errno = 0;
    switch (k->type) {
    case T_STR:
        if (strlen(v) >= k->size) return dt_errf(err, "value for '%s' is too long (at most %zu characters)", k->key, k->size - 1);
        strcpy(dst, v);
        return 0;
    case T_ENUM: {
        size_t n = strlen(v);
        for (const char *p = k->choices; *p;) {
            const char *q = strchr(p, '|');
            size_t len = q ? (size_t)(q - p) : strlen(p);
            if (len == n && !strncmp(p, v, n)) {
                strcpy(dst, v);
                return 0;
            }
            p += len + (q ? 1 : 0);
        }
        return dt_errf(err, "bad value '%s' for '%s': expected one of %s", v, k->key, k->choices);
    }
    case T_BOOL:
        if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on")) *(int *)dst = 1;
        else if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "off")) *(int *)dst = 0;
        else return dt_errf(err, "bad value '%s' for '%s': expected 0 or 1", v, k->key);
        return 0;
    case T_FLOAT: {
        double d = strtod(v, &end);
        if (end == v || *end || errno) return dt_errf(err, "bad value '%s' for '%s': expected a number", v, k->key);
        /* Written so that NaN fails it too (every comparison with NaN is false). */
        if (!(d >= k->lo && d <= k->hi))
            return dt_errf(err, "value %s for '%s' is out of range [%g, %g]", v, k->key, k->lo, k->hi);
        *(float *)dst = (float)d;
        return 0;
    }
    case T_U64: {
        /* strtoull would take "-1" as 2^64 - 1 */
        unsigned long long x = strtoull(v, &end, 10);
        if (end == v || *end || errno || strchr(v, '-'))
            return dt_errf(err, "bad value '%s' for '%s': expected a non-negative integer", v, k->key);
        *(uint64_t *)dst = x;
        return 0;
    }
    default: {
        long long x = strtoll(v, &end, 10);
        if (end == v || *end || errno) return dt_errf(err, "bad value '%s' for '%s': expected an integer", v, k->key);
        if ((double)x < k->lo || (double)x > k->hi)
            return dt_errf(err, "value %s for '%s' is out of range [%.0f, %.0f]", v, k->key, k->lo, k->hi);
        if (k->type == T_INT) *(int *)dst = (int)x;
        else *(int64_t *)dst = x;
        return 0;
    }
    }
}

static int set_kv(dt_train_cfg *c, const char *key, const char *value, dt_err *err) {
    for (int i = 0; i < NKEYS; i++)
        if (!strcmp(KEYS[i].key, key)) return set_value(c, &KEYS[i], value, err);
    char keys[2048];
    list_keys(keys, sizeof keys);
    return dt_errf(err, "unknown key '%s' (valid keys: %s)", key, keys);
}

void dt_config_defaults(dt_train_cfg *c) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < NKEYS; i++)
        if (set_value(c, &KEYS[i], KEYS[i].def, NULL)) dt_fatal("config default of %s is invalid", KEYS[i].key);
}

int dt_config_set(dt_train_cfg *c, const char *assignment, dt_err *err) {
    char *buf = dt_xstrdup(assignment);
    char *eq = strchr(buf, '=');
    int rc;
    if (!eq) {
        rc = dt_errf(err, "override '%.200s' is not of the form key=value", assignment);
    } else {
        *eq = 0;
        rc = set_kv(c, trim(buf), trim(eq + 1), err);
    }
    free(buf);
    return rc;
}

/* Lines of any length; a byte that no text file holds (NUL, other control characters but tab
 * and CR) is an error naming the line rather than something silently cut or skipped. */
int dt_config_parse(dt_train_cfg *c, const char *text, size_t len, const char *name, dt_err *err) {
    const char *p = text, *end = text + len;
    for (int ln = 1; p < end; ln++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        for (const char *q = p; q < le; q++) {
            unsigned char ch = (unsigned char)*q;
            if (ch == 0 || (ch < 32 && ch != '\t' && ch != '\r') || ch == 127)
                return dt_errf(err, "%s:%d: byte 0x%02x at column %d: not a text file (a config holds `key = value` lines)",
                               name, ln, ch, (int)(q - p) + 1);
        }
        char *line = dt_xmalloc((size_t)(le - p) + 1);
        memcpy(line, p, (size_t)(le - p));
        line[le - p] = 0;
        p = nl ? nl + 1 : end;
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *s = trim(line);
        char *eq = strchr(s, '=');
        int rc = 0;
        dt_err e;
        if (*s && !eq) {
            rc = dt_errf(err, "%s:%d: expected 'key = value', got '%.200s'", name, ln, s);
        } else if (*s) {
            *eq = 0;
            if (set_kv(c, trim(s), trim(eq + 1), &e)) rc = dt_errf(err, "%s:%d: %s", name, ln, e.msg);
        }
        free(line);
        if (rc) return rc;
    }
    return 0;
}

int dt_config_load(dt_train_cfg *c, const char *path, dt_err *err) {
    dt_scratch buf = {0};
    size_t size;
    int rc = dt_file_read(path, "config", DT_CONFIG_MAX_BYTES, &buf, &size, err);
    if (!rc) rc = dt_config_parse(c, buf.p, size, path, err);
    dt_scratch_free(&buf);
    return rc;
}

int dt_config_check(const dt_train_cfg *c, dt_err *err) {
    if (!c->synthetic && !c->data[0])
        return dt_errf(err, "no dataset: set data=PATH (a folder with train/ and val/) or synthetic=1");
    int h, w;
    if (strcmp(c->tile, "auto") && (sscanf(c->tile, "%dx%d", &h, &w) != 2 || h < 1 || w < 1))
        return dt_errf(err, "bad value '%s' for 'tile': expected auto or HxW like 8x8", c->tile);
    const char *d = c->deform;
    if (strcmp(d, "none") && strcmp(d, "all")) {
        int ok = 1, any = 0;
        for (const char *p = d; *p; p++) {
            if (*p >= '1' && *p <= '4') any = 1;
            else if (*p != ',') ok = 0;
        }
        if (!ok || !any) return dt_errf(err, "bad value '%s' for 'deform': expected none, all, or stages like 3,4", d);
    }
    dt_err e;
    if (dt_config_gpus(c, NULL, &e) < 0) return dt_errf(err, "%s", e.msg);
    if (c->resume[0] && c->checkpoint[0] && !strcmp(c->resume, c->checkpoint)) {
        /* allowed: resume and keep writing the same file */
    }
    return 0;
}

int dt_config_gpus(const dt_train_cfg *c, int *devices, dt_err *err) {
    const char *s = c->gpus;
    int ids[DT_MAX_GPUS], n = 0;
    if (!strchr(s, ',')) { /* a count */
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || *end || errno || v < 1 || v > DT_MAX_GPUS)
            return dt_errf(err, "bad value '%s' for 'gpus': expected a count 1..%d or a list of GPU ids like 0,2", s,
                           DT_MAX_GPUS);
        for (n = 0; n < v; n++) ids[n] = n;
    } else {
        for (const char *p = s;;) {
            char *end;
            errno = 0;
            long v = strtol(p, &end, 10);
            if (end == p || errno || v < 0 || v >= DT_MAX_GPUS || (*end && *end != ',') || n == DT_MAX_GPUS)
                return dt_errf(err, "bad value '%s' for 'gpus': expected a list of GPU ids 0..%d like 0,2", s,
                               DT_MAX_GPUS - 1);
            for (int i = 0; i < n; i++)
                if (ids[i] == v) return dt_errf(err, "bad value '%s' for 'gpus': GPU %ld is listed twice", s, v);
            ids[n++] = (int)v;
            if (!*end) break;
            p = end + 1;
        }
    }
    if (devices) memcpy(devices, ids, (size_t)n * sizeof *ids);
    return n;
}

/* A key's value as text; floats with `digits` significant digits (9 round-trip a float, 7 read
 * as typed: 0.9 rather than 0.899999976). */
static void format_value(const key_spec *k, const dt_train_cfg *c, int digits, char *buf, size_t cap) {
    const void *v = (const char *)c + k->off;
    switch (k->type) {
    case T_STR:
    case T_ENUM: snprintf(buf, cap, "%s", (const char *)v); break;
    case T_BOOL:
    case T_INT: snprintf(buf, cap, "%d", *(const int *)v); break;
    case T_I64: snprintf(buf, cap, "%lld", (long long)*(const int64_t *)v); break;
    case T_U64: snprintf(buf, cap, "%llu", (unsigned long long)*(const uint64_t *)v); break;
    case T_FLOAT: snprintf(buf, cap, "%.*g", digits, *(const float *)v); break;
    }
}

void dt_config_write(const dt_train_cfg *c, FILE *f) {
    char v[600];
    for (int i = 0; i < NKEYS; i++) {
        format_value(&KEYS[i], c, 9, v, sizeof v);
        fprintf(f, "%s = %s\n", KEYS[i].key, v);
    }
}

int dt_config_diff(const dt_train_cfg *was, const dt_train_cfg *now, dt_config_diff_fn fn, void *ctx) {
    int n = 0;
    char a[600], b[600];
    for (int i = 0; i < NKEYS; i++) {
        if (!KEYS[i].run) continue;
        format_value(&KEYS[i], was, 7, a, sizeof a);
        format_value(&KEYS[i], now, 7, b, sizeof b);
        if (strcmp(a, b)) fn(KEYS[i].key, a, b, ctx), n++;
    }
    return n;
}

void dt_config_help(FILE *f) {
    fprintf(f, "keys (file lines `key = value`, or command-line overrides key=value):\n");
    for (int i = 0; i < NKEYS; i++) {
        const key_spec *k = &KEYS[i];
        char dom[64] = "";
        if (k->type == T_ENUM) snprintf(dom, sizeof dom, "%s", k->choices);
        else if (k->type == T_BOOL) snprintf(dom, sizeof dom, "0|1");
        else if (k->type == T_STR) snprintf(dom, sizeof dom, "text");
        else snprintf(dom, sizeof dom, "%g..%g", k->lo, k->hi);
        fprintf(f, "  %-16s %-18s default %-8s %s\n", k->key, dom, k->def[0] ? k->def : "\"\"", k->help);
    }
}
