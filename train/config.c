/* Table-driven config parsing: one row per key with its type, range or choices, default and
 * a line of help. */
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h> /* strncasecmp */

#include "train/dt_config.h"
#include "core/dt_device.h" /* DT_MAX_GPUS */
#include "core/dt_file.h"
#include "models/dt_resnet.h" /* the deform= syntax */

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
    {"decode", T_ENUM, F(decode), "auto", "auto|cpu|gpu", 0, 0, 1,
     "where JPEGs are decoded: gpu (nvJPEG, then the augmentation on the GPU), cpu (the loader's workers), auto (gpu "
     "where nvJPEG and a GPU are there and cache=0; docs/data.md)"},
    {"gpu_decoders", T_INT, F(gpu_decoders), "2", NULL, 1, 8, 0,
     "GPU decode: decode threads, each with its own nvJPEG decoder and stream, on consecutive batches at once "
     "(1 .. 8, at most prefetch - 1; 2 by default: the measured fastest; docs/data.md)"},
    {"prefetch", T_INT, F(prefetch), "4", NULL, 2, 64, 0, "the loader's ring of batch slots (2 .. 64)"},
    {"cache", T_BOOL, F(cache), "0", NULL, 0, 1, 1, "keep decoded, downsized images in memory (small datasets)"},
    {"max_val_batches", T_INT, F(max_val_batches), "0", NULL, 0, 1 << 30, 0, "evaluate on a fixed class-stratified sample of this many val batches (0 = all)"},
    {"device", T_ENUM, F(device), "cuda", "cuda|cpu", 0, 0, 1, "where to train"},
    {"precision", T_ENUM, F(precision), "fp32", "fp32|tf32|bf16", 0, 0, 1,
     "precision policy: fp32, tf32 (fp32 on TF32 tensor cores), bf16 (bf16 activations, fp32 accumulation, masters, "
     "statistics and loss; docs/training.md)"},
    {"layout", T_ENUM, F(layout), "auto", "auto|nchw|nhwc", 0, 0, 0,
     "activation layout: auto (nhwc for bf16, nchw for fp32/tf32), nchw, or nhwc (channels last)"},
    {"gpus", T_STR, F(gpus), "1", NULL, 0, 0, 1,
     "data parallel: N (GPUs 0..N-1) or a list like 0,2; global batch = batch x replicas (docs/training.md)"},
    {"graphs", T_BOOL, F(graphs), "1", NULL, 0, 1, 0,
     "GPU: capture the training step as one CUDA graph after 3 eager steps and replay it (docs/training.md)"},
    {"sync_bn", T_BOOL, F(sync_bn), "0", NULL, 0, 1, 1, "several GPUs: batch-norm statistics over all replicas' batches"},
    {"bucket_mb", T_INT, F(bucket_mb), "25", NULL, 1, 4096, 0, "several GPUs: gradient all-reduce bucket size (MiB)"},
    {"col_budget_mb", T_INT, F(col_budget_mb), "256", NULL, 1, 65536, 0, "column-buffer budget of conv/deform chunks (MiB)"},
    {"conv_algo", T_ENUM, F(conv_algo), "auto", "auto|gemm|igemm128|igemm64|sm90|measure", 0, 0, 0,
     "bf16 convs: gemm (im2col + cuBLAS), auto (per shape the measured winner: the Hopper engine on an H100/H200, the "
     "implicit GEMM where the conv lab measured it faster), igemm128 / igemm64 (the mma.sync implicit GEMM with that "
     "tile wherever it runs), sm90 (the Hopper engine wherever it runs), measure (each pass timed on every engine "
     "once per shape, the fastest kept: not bitwise reproducible run to run; docs/conv.md)"},
    {"epochs", T_INT, F(epochs), "1", NULL, 1, 100000, 1, "epochs to train"},
    {"steps", T_I64, F(steps), "0", NULL, 0, 1e15, 1,
     "the run's length in steps, over epochs (0 = run the epochs; epochs= on the command line clears it)"},
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
    {"model", T_ENUM, F(model), "resnet18", "resnet18|resnet34|resnet50|resnet101|resnext50_32x4d|mobilenet_v2", 0, 0, 1,
     "the network, torchvision's: resnet18, resnet34 (BasicBlock), resnet50, resnet101 (Bottleneck), resnext50_32x4d "
     "(Bottleneck, grouped 3x3), mobilenet_v2 (inverted residuals; its classifier's dropout: dropout=)"},
    {"width", T_FLOAT, F(width), "1", NULL, 0.0625, 4, 1, "channel-width multiplier (1 = torchvision's; 0.25 for quick CPU runs)"},
    {"dropout", T_STR, F(dropout), "auto", NULL, 0, 0, 1,
     "dropout probability of mobilenet_v2's classifier, in [0, 1), train mode only: auto (torchvision's: 0.2 for "
     "mobilenet_v2, 0 for the ResNets, which have none) or a number"},
    {"deform", T_STR, F(deform), "none", NULL, 0, 0, 1,
     "deformable 3x3 convs (both of a BasicBlock, conv2 of a Bottleneck) in the stages: none, all, a list like 2,3,4 "
     "(layer2..layer4), or c3-c5 (the DCNv2 paper's conv3_x..conv5_x = layer2..layer4; also c2-c5, c4-c5, c5)"},
    {"deform_version", T_INT, F(deform_version), "1", NULL, 1, 2, 1, "1 = DCNv1, 2 = DCNv2 (with mask)"},
    {"deform_mode", T_ENUM, F(deform_mode), "deft", "unfused|deft", 0, 0, 1, "implementation of the deformable convs"},
    {"offset_groups", T_INT, F(offset_groups), "1", NULL, 1, 64, 1, "offset groups of the deformable convs"},
    {"offset_init_std", T_FLOAT, F(offset_init_std), "0", NULL, 0, 10, 0, "std of the offset convs' initial weights (0 = zeros)"},
    {"offset_lr_mult", T_FLOAT, F(offset_lr_mult), "0.1", NULL, 0, 100, 1, "learning-rate multiplier of the offset convs"},
    {"init_from", T_STR, F(init_from), "", NULL, 0, 0, 0,
     "start from these weights: a torchvision state_dict as .safetensors (offset convs it lacks start at zero; "
     "docs/weights.md)"},
    {"init_from_partial", T_BOOL, F(init_from_partial), "0", NULL, 0, 1, 0,
     "1: init_from may hold an fc of another class count (or none): fc then stays at its init (fine-tuning)"},
    {"tile", T_STR, F(tile), "auto", NULL, 0, 0, 0, "deft: output tile per block, auto or HxW (8x8, 4x8, 4x4, ...)"},
    {"halo", T_INT, F(halo), "-1", NULL, -1, 32, 0, "deft: staged halo in px (-1 = from the offset statistics)"},
    {"halo_refresh", T_INT, F(halo_refresh), "200", NULL, 0, 1 << 30, 0, "deft: steps between automatic halo updates"},
    {"swizzle", T_BOOL, F(swizzle), "1", NULL, 0, 1, 0, "deft: block-ID swizzle for L2 reuse (with fuse_offset or stage)"},
    {"fuse_offset", T_BOOL, F(fuse_offset), "0", NULL, 0, 1, 0, "deft: offset conv and sampling in one kernel per tile (DefT)"},
    {"stage", T_BOOL, F(stage), "0", NULL, 0, 1, 0, "deft: sampling reads the tile's input + halo from shared memory (DefT)"},
    {"dx", T_ENUM, F(dx), "gather", "gather|atomic", 0, 0, 0, "deft: input gradient by inverse index + gather, or float4 atomics"},
    {"deterministic", T_BOOL, F(deterministic), "0", NULL, 0, 1, 0, "bitwise-reproducible deformable backward (deft: dx=gather)"},
    {"keep_cols", T_BOOL, F(keep_cols), "1", NULL, 0, 1, 0,
     "deft: keep the forward's sampled columns for the backward (N*P*K*C elements a layer) instead of sampling again"},
    {"seed", T_U64, F(seed), "0", NULL, 0, 1.8e19, 1, "seed of initialization, shuffling and augmentation"},
    {"checkpoint", T_STR, F(checkpoint), "", NULL, 0, 0, 0, "write a checkpoint here after every epoch and at the end (stop_at, checkpoint_every and an interrupt write one "
     "anyway: here, or to PREFIX.ckpt of log=)"},
    {"resume", T_STR, F(resume), "", NULL, 0, 0, 0, "resume from this checkpoint"},
    {"checkpoint_every", T_I64, F(checkpoint_every), "0", NULL, 0, 1e15, 0,
     "also write the checkpoint every this many steps, mid-epoch too (0 = off; docs/training.md)"},
    {"checkpoint_minutes", T_FLOAT, F(checkpoint_minutes), "0", NULL, 0, 1e6, 0,
     "also write the checkpoint when this many minutes passed since the last one (0 = off)"},
    {"log", T_STR, F(log), "", NULL, 0, 0, 0,
     "log prefix: writes PREFIX.log, PREFIX_steps.csv, PREFIX_epochs.csv, PREFIX_summary.txt, and checkpoints to "
     "PREFIX.ckpt unless checkpoint= names another path"},
    {"overwrite", T_BOOL, F(overwrite), "0", NULL, 0, 1, 0,
     "1: a new run may replace the results of an earlier one (its log files, checkpoint, export); without it such a "
     "run is refused (resume= continues the earlier run)"},
    {"log_every", T_INT, F(log_every), "10", NULL, 1, 1 << 30, 0, "steps between log lines"},
    {"eval_every", T_INT, F(eval_every), "1", NULL, 0, 100000, 0, "epochs between evaluations (0 = only at the end)"},
    {"timing_warmup", T_INT, F(timing_warmup), "10", NULL, 0, 1 << 30, 0, "steps left out of the time statistics"},
    {"quiet", T_BOOL, F(quiet), "0", NULL, 0, 1, 0, "print nothing but errors (the log files still get everything)"},
    {"progress", T_BOOL, F(progress), "1", NULL, 0, 1, 0, "live progress line when stdout is a terminal"},
    {"max_image_pixels", T_I64, F(max_image_pixels), "89478485", NULL, 1, 1e10, 1, "images with more pixels are skipped with a warning, before decoding (PIL's limit)"},
    {"stop_at", T_I64, F(stop_at), "0", NULL, 0, 1e15, 0, "stop after this global step, writing the checkpoint (resume later)"},
    {"export", T_STR, F(export_path), "", NULL, 0, 0, 0,
     "write the weights here at the end of the run, as .safetensors under torchvision's names (docs/weights.md)"},
};
#define NKEYS ((int)(sizeof KEYS / sizeof *KEYS))
/* The longest value as text: a string field of up to 512 bytes, quoted (quote_value: at most 4
 * bytes per byte, plus the quotes); dt_config_defaults checks every string key against it. */
#define VALUE_TEXT (4 * 512)

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
        /* Checked as the float that is stored: 0.01 is stored as 0.00999999978, which a config
         * written back must read again although it is below 0.01 as a double. Written so that
         * NaN fails it too (every comparison with NaN is false); beyond the float range the
         * cast itself would be undefined, so such a value becomes NaN first. */
        float x = d >= -FLT_MAX && d <= FLT_MAX ? (float)d : NAN;
        if (!(x >= (float)k->lo && x <= (float)k->hi))
            return dt_errf(err, "value %s for '%s' is out of range [%g, %g]", v, k->key, k->lo, k->hi);
        *(float *)dst = x;
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

/* ---- an unknown key: the keys it may have meant ---- */

#define SUGGEST_MAX 64 /* a longer unknown key gets no suggestion */

/* Edit distance of a and b (each insertion, deletion, substitution, or swap of two neighbours
 * counts 1), both lower case and at most SUGGEST_MAX bytes. */
static int edit_distance(const char *a, const char *b) {
    int n = (int)strlen(a), m = (int)strlen(b);
    int d[SUGGEST_MAX + 1][SUGGEST_MAX + 1];
    for (int i = 0; i <= n; i++) d[i][0] = i;
    for (int j = 0; j <= m; j++) d[0][j] = j;
    for (int i = 1; i <= n; i++)
        for (int j = 1; j <= m; j++) {
            int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[n][m];
}

/* Whether `text` holds the word w (n bytes) between non-alphanumeric characters, any case. */
static int has_word(const char *text, const char *w, size_t n) {
    for (const char *p = text; *p; p++)
        if ((p == text || !isalnum((unsigned char)p[-1])) && !strncasecmp(p, w, n) && !isalnum((unsigned char)p[n]))
            return 1;
    return 0;
}

/* Whether every word of 3 or more letters and digits in `typed` (at least one) is a word of
 * `help`: learning_rate finds lr, whose help says "base learning rate". */
static int words_in_help(const char *typed, const char *help) {
    int words = 0;
    for (const char *p = typed; *p;) {
        size_t n = 0;
        while (isalnum((unsigned char)p[n])) n++;
        if (n >= 3) {
            if (!has_word(help, p, n)) return 0;
            words++;
        }
        p += n ? n : 1;
    }
    return words > 0;
}

/* How close an unknown key (lower case) is to a known one, lower is closer, INT_MAX when it is
 * not worth suggesting: a typo first (an edit distance of at most a third of its length, or 1:
 * bach, epoch), then one key inside the other (lr_warmup, image), then the unknown key's words
 * in the known key's help (learning_rate). */
static int closeness(const char *typed, const key_spec *k) {
    size_t n = strlen(typed), m = strlen(k->key);
    int d = edit_distance(typed, k->key), most = n / 3 > 1 ? (int)(n / 3) : 1;
    if (d <= most) return d;
    if ((n >= 3 && strstr(k->key, typed)) || (m >= 3 && strstr(typed, k->key))) return SUGGEST_MAX + 1;
    if (words_in_help(typed, k->help)) return SUGGEST_MAX + 2;
    return INT_MAX;
}

/* "did you mean a, b or c? " with the (at most 3) closest keys, or that none is close. */
static void suggest_keys(const char *key, char *buf, size_t cap) {
    char typed[SUGGEST_MAX + 1];
    size_t n = strlen(key);
    int best[3], score[3], found = 0;
    if (n <= SUGGEST_MAX) {
        for (size_t i = 0; i <= n; i++) typed[i] = (char)tolower((unsigned char)key[i]);
        for (int i = 0; i < NKEYS; i++) {
            int s = closeness(typed, &KEYS[i]), at = found < 3 ? found : 3;
            while (at > 0 && score[at - 1] > s) at--; /* strictly closer only: ties keep table order */
            if (s == INT_MAX || at == 3) continue;
            for (int j = (found < 3 ? found : 2); j > at; j--) best[j] = best[j - 1], score[j] = score[j - 1];
            best[at] = i, score[at] = s;
            if (found < 3) found++;
        }
    }
    if (!found) {
        snprintf(buf, cap, "no key is close to it; ");
        return;
    }
    /* a typo explains the key best: the looser matches would only distract from it */
    while (score[0] <= SUGGEST_MAX && score[found - 1] > SUGGEST_MAX) found--;
    size_t o = snprintf(buf, cap, "did you mean ");
    for (int j = 0; j < found && o < cap; j++)
        o += snprintf(buf + o, cap - o, "%s%s", j == 0 ? "" : j == found - 1 ? " or " : ", ", KEYS[best[j]].key);
    if (o < cap) snprintf(buf + o, cap - o, "? ");
}

static const key_spec *find_key(const char *key) {
    for (int i = 0; i < NKEYS; i++)
        if (!strcmp(KEYS[i].key, key)) return &KEYS[i];
    return NULL;
}

static int set_kv(dt_train_cfg *c, const char *key, const char *value, dt_err *err) {
    const key_spec *k = find_key(key);
    if (k) return set_value(c, k, value, err);
    char hint[200];
    suggest_keys(key, hint, sizeof hint);
    return dt_errf(err, "unknown key '%.200s' (%sbuild/train --keys lists all %d keys)", key, hint, NKEYS);
}

void dt_config_defaults(dt_train_cfg *c) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < NKEYS; i++) {
        if (set_value(c, &KEYS[i], KEYS[i].def, NULL)) dt_fatal("config default of %s is invalid", KEYS[i].key);
        if (KEYS[i].type == T_STR && 4 * KEYS[i].size > VALUE_TEXT)
            dt_fatal("config key %s holds %zu bytes: raise VALUE_TEXT", KEYS[i].key, KEYS[i].size);
    }
}

/* An override: the text before the first '=' is the key, the rest the value, both trimmed and
 * taken as they are (no quotes: the shell has already removed its own). */
static int split_override(char *buf, char **key, char **value, const char *assignment, dt_err *err) {
    char *eq = strchr(buf, '=');
    if (!eq) return dt_errf(err, "override '%.200s' is not of the form key=value", assignment);
    *eq = 0;
    *key = trim(buf);
    *value = trim(eq + 1);
    return 0;
}

int dt_config_set(dt_train_cfg *c, const char *assignment, dt_err *err) {
    char *buf = dt_xstrdup(assignment), *key = NULL, *value = NULL;
    int rc = split_override(buf, &key, &value, assignment, err);
    if (!rc) rc = set_kv(c, key, value, err);
    free(buf);
    return rc;
}

int dt_config_override(dt_train_cfg *c, int n, char *const *args, char *note, size_t cap, dt_err *err) {
    int64_t file_steps = c->steps;
    int epochs_at = -1, steps_at = -1;
    note[0] = 0;
    for (int i = 0; i < n; i++) {
        char *buf = dt_xstrdup(args[i]), *key = NULL, *value = NULL;
        int rc = split_override(buf, &key, &value, args[i], err);
        if (!rc) rc = set_kv(c, key, value, err);
        if (!rc && !strcmp(key, "epochs")) epochs_at = i;
        if (!rc && !strcmp(key, "steps")) steps_at = i;
        free(buf);
        if (rc) return rc;
    }
    if (epochs_at >= 0 && steps_at < 0 && file_steps > 0) {
        c->steps = 0;
        snprintf(note, cap, "%s on the command line replaces the config's steps=%lld: the run is %d epoch%s",
                 args[epochs_at], (long long)file_steps, c->epochs, c->epochs == 1 ? "" : "s");
    } else if (epochs_at >= 0 && steps_at >= 0 && c->steps > 0) {
        snprintf(note, cap, "%s and %s on the command line: steps governs (%lld steps; epochs counts only when steps=0)",
                 args[steps_at], args[epochs_at], (long long)c->steps);
    }
    return 0;
}

/* ---- the text of a config: lines `key = value`, a value quoted when it must be ---- */

/* Whether a value would not read back as itself unquoted: a # (a comment), a quote (a quoted
 * value), spaces at either end (trimmed), a control byte (a newline ends the line, the others
 * are not text), or an = (it would read back, but a quoted one is plainly a value). */
static int needs_quotes(const char *v) {
    size_t n = strlen(v);
    if (n && (isspace((unsigned char)v[0]) || isspace((unsigned char)v[n - 1]))) return 1;
    for (const unsigned char *p = (const unsigned char *)v; *p; p++)
        if (*p == '#' || *p == '"' || *p == '=' || *p < 32 || *p == 127) return 1;
    return 0;
}

/* The escape a quoted value writes for ch, or NULL (control bytes other than these: \xHH). */
static const char *escape_of(unsigned char ch) {
    switch (ch) {
    case '\\': return "\\\\";
    case '"': return "\\\"";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: return NULL;
    }
}

/* v as a config value: as it is, or in double quotes with \\, \", \n, \r, \t and \xHH for the
 * other control bytes (at most 4 bytes out per byte in, plus the quotes). */
static void quote_value(const char *v, char *out, size_t cap) {
    if (4 * strlen(v) + 3 > cap) dt_fatal("config value of %zu bytes does not fit %zu", strlen(v), cap);
    if (!needs_quotes(v)) {
        strcpy(out, v);
        return;
    }
    char *w = out;
    *w++ = '"';
    for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
        const char *esc = escape_of(*p);
        if (esc) w = stpcpy(w, esc);
        else if (*p < 32 || *p == 127) w += sprintf(w, "\\x%02x", *p);
        else *w++ = (char)*p;
    }
    *w++ = '"';
    *w = 0;
}

static int hex_digit(int ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* A quoted value, in place: q points at the opening quote; the value (escapes read) is left at
 * q, and *rest at what follows the closing quote. */
static int unquote(char *q, char **rest, const char *key, dt_err *err) {
    char *w = q;
    for (const char *r = q + 1;;) {
        char ch = *r++;
        if (!ch) return dt_errf(err, "the quoted value of '%s' has no closing quote", key);
        if (ch == '"') {
            *w = 0;
            *rest = (char *)r;
            return 0;
        }
        if (ch != '\\') {
            *w++ = ch;
            continue;
        }
        ch = *r++;
        int hi, lo;
        switch (ch) {
        case 0: return dt_errf(err, "the quoted value of '%s' has no closing quote", key);
        case '\\':
        case '"': *w++ = ch; break;
        case 'n': *w++ = '\n'; break;
        case 'r': *w++ = '\r'; break;
        case 't': *w++ = '\t'; break;
        case 'x':
            hi = hex_digit(r[0]), lo = hi < 0 ? -1 : hex_digit(r[1]);
            if (lo < 0) return dt_errf(err, "the quoted value of '%s' has \\x without two hex digits", key);
            if (!(hi | lo)) return dt_errf(err, "the quoted value of '%s' has \\x00 (a value cannot hold a NUL)", key);
            *w++ = (char)(hi * 16 + lo);
            r += 2;
            break;
        default:
            return dt_errf(err, "the quoted value of '%s' has an unknown escape '\\%c' (known: \\\\ \\\" \\n \\r \\t \\xHH)",
                           key, ch);
        }
    }
}

/* One line of a config, in place: *key NULL for a blank or comment line, else the key and its
 * value - quoted (unquote) or the text up to a # or the end of the line, trimmed. */
static int split_line(char *line, char **key, char **value, dt_err *err) {
    char *s = trim(line);
    *key = NULL;
    if (!*s || *s == '#') return 0;
    char *eq = strpbrk(s, "=#");
    if (!eq || *eq == '#') {
        if (eq) *eq = 0;
        return dt_errf(err, "expected 'key = value', got '%.200s'", trim(s));
    }
    *eq = 0;
    *key = trim(s);
    char *v = eq + 1;
    while (isspace((unsigned char)*v)) v++;
    if (*v != '"') {
        char *hash = strchr(v, '#');
        if (hash) *hash = 0;
        *value = trim(v);
        return 0;
    }
    char *rest = NULL;
    if (unquote(v, &rest, *key, err)) return -1;
    while (isspace((unsigned char)*rest)) rest++;
    if (*rest && *rest != '#')
        return dt_errf(err, "text after the closing quote of '%s': '%.200s' (a comment starts with #)", *key, rest);
    *value = v;
    return 0;
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
        char *line = dt_xmalloc((size_t)(le - p) + 1), *key = NULL, *value = NULL;
        memcpy(line, p, (size_t)(le - p));
        line[le - p] = 0;
        p = nl ? nl + 1 : end;
        dt_err e;
        int rc = split_line(line, &key, &value, &e);
        if (!rc && key) rc = set_kv(c, key, value, &e);
        if (rc) dt_errf(err, "%s:%d: %s", name, ln, e.msg);
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
    if (!rc) snprintf(c->config_path, sizeof c->config_path, "%.511s", path);
    dt_scratch_free(&buf);
    return rc;
}

int dt_config_dropout(const dt_train_cfg *c, float *p, dt_err *err) {
    dt_resnet_model model;
    if (dt_resnet_model_parse(c->model, &model, err)) return -1;
    if (!strcmp(c->dropout, "auto")) {
        *p = dt_resnet_default_dropout(model);
        return 0;
    }
    char *end;
    errno = 0;
    double d = strtod(c->dropout, &end);
    if (end == c->dropout || *end || errno || !(d >= 0.0 && d < 1.0) || !((float)d < 1.0f))
        return dt_errf(err, "bad value '%s' for 'dropout': expected auto or a probability in [0, 1)", c->dropout);
    const char *why = dt_resnet_dropout_refusal(model, (float)d);
    if (why) return dt_errf(err, "dropout=%s: %s", c->dropout, why);
    *p = (float)d;
    return 0;
}

int dt_config_check(const dt_train_cfg *c, dt_err *err) {
    if (!c->synthetic && !c->data[0])
        return dt_errf(err, "no dataset: set data=PATH (a folder with train/ and val/) or synthetic=1");
    int h, w;
    if (strcmp(c->tile, "auto") && (sscanf(c->tile, "%dx%d", &h, &w) != 2 || h < 1 || w < 1))
        return dt_errf(err, "bad value '%s' for 'tile': expected auto or HxW like 8x8", c->tile);
    if (dt_resnet_parse_stages(c->deform) < 0)
        return dt_errf(err, "bad value '%s' for 'deform': expected none, all, stages 1..4 like 2,3,4 (layer2..layer4), "
                       "or c3-c5 (the DCNv2 paper's conv3_x..conv5_x = layer2..layer4; also c2-c5, c4-c5, c5)", c->deform);
    dt_resnet_model model;
    if (dt_resnet_parse_stages(c->deform) > 0 && !dt_resnet_model_parse(c->model, &model, NULL) &&
        dt_resnet_deform_refusal(model))
        return dt_errf(err, "deform=%s: %s", c->deform, dt_resnet_deform_refusal(model));
    float dropout;
    if (dt_config_dropout(c, &dropout, err)) return -1;
    if (!strcmp(c->decode, "gpu") && !strcmp(c->device, "cpu"))
        return dt_errf(err, "decode=gpu decodes on the GPU, and device=cpu trains without one: use decode=cpu or auto");
    if (!strcmp(c->decode, "gpu") && c->cache)
        return dt_errf(err, "decode=gpu with cache=1: the cache keeps images decoded on the CPU; use one of them");
    /* the loader's rule (dt_loader_opts.gpu_decoders): the consumer holds a slot while each
     * decoder fills another */
    if (c->gpu_decoders > c->prefetch - 1)
        return dt_errf(err, "gpu_decoders=%d needs prefetch=%d or more (prefetch=%d lets at most prefetch - 1 = %d "
                       "batches decode while the training step holds one)", c->gpu_decoders, c->gpu_decoders + 1,
                       c->prefetch, c->prefetch - 1);
    dt_err e;
    if (dt_config_gpus(c, NULL, &e) < 0) return dt_errf(err, "%s", e.msg);
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

/* A key's value as a config file holds it (strings quoted when they must be); floats with
 * `digits` significant digits (9 round-trip a float, 7 read as typed: 0.9 rather than
 * 0.899999976). */
static void format_value(const key_spec *k, const dt_train_cfg *c, int digits, char *buf, size_t cap) {
    const void *v = (const char *)c + k->off;
    switch (k->type) {
    case T_STR:
    case T_ENUM: quote_value((const char *)v, buf, cap); break;
    case T_BOOL:
    case T_INT: snprintf(buf, cap, "%d", *(const int *)v); break;
    case T_I64: snprintf(buf, cap, "%lld", (long long)*(const int64_t *)v); break;
    case T_U64: snprintf(buf, cap, "%llu", (unsigned long long)*(const uint64_t *)v); break;
    case T_FLOAT: snprintf(buf, cap, "%.*g", digits, *(const float *)v); break;
    }
}

void dt_config_write(const dt_train_cfg *c, FILE *f) {
    char v[VALUE_TEXT];
    for (int i = 0; i < NKEYS; i++) {
        format_value(&KEYS[i], c, 9, v, sizeof v);
        fprintf(f, "%s = %s\n", KEYS[i].key, v);
    }
}

int dt_config_diff(const dt_train_cfg *was, const dt_train_cfg *now, dt_config_diff_fn fn, void *ctx) {
    int n = 0;
    char a[VALUE_TEXT], b[VALUE_TEXT];
    for (int i = 0; i < NKEYS; i++) {
        if (!KEYS[i].run) continue;
        format_value(&KEYS[i], was, 7, a, sizeof a);
        format_value(&KEYS[i], now, 7, b, sizeof b);
        if (strcmp(a, b)) fn(KEYS[i].key, a, b, ctx), n++;
    }
    return n;
}

/* The domain of key k as --keys prints it. */
static void domain_text(const key_spec *k, char *dom, size_t cap) {
    if (k->type == T_ENUM) snprintf(dom, cap, "%s", k->choices);
    else if (k->type == T_BOOL) snprintf(dom, cap, "0|1");
    else if (k->type == T_STR) snprintf(dom, cap, "text");
    else if (k->type == T_FLOAT) snprintf(dom, cap, "%g..%g", k->lo, k->hi);
    else if (k->type == T_U64) snprintf(dom, cap, "%.0f..%llu", k->lo, (unsigned long long)UINT64_MAX);
    else snprintf(dom, cap, "%.0f..%.0f", k->lo, k->hi); /* integers as integers, not 1.07374e+09 */
}

/* One key a line group: the columns as wide as their widest entry, the help wrapped at spaces
 * to HELP_COLS characters under its own column. */
#define HELP_COLS 112
#define DOMAIN_COLS 24 /* a longer domain (the models' names) gets a line of its own */
void dt_config_help(FILE *f) {
    fprintf(f, "keys (file lines `key = value`, or command-line overrides key=value):\n");
    int wk = 0, wd = 0, wv = 0;
    for (int i = 0; i < NKEYS; i++) {
        char dom[64];
        domain_text(&KEYS[i], dom, sizeof dom);
        int lk = (int)strlen(KEYS[i].key), ld = (int)strlen(dom), lv = KEYS[i].def[0] ? (int)strlen(KEYS[i].def) : 2;
        if (lk > wk) wk = lk;
        if (ld > wd && ld <= DOMAIN_COLS) wd = ld;
        if (lv > wv) wv = lv;
    }
    int indent = 2 + wk + 2 + wd + 2 + 8 + wv + 2, room = HELP_COLS - indent;
    if (room < 40) room = 40;
    for (int i = 0; i < NKEYS; i++) {
        const key_spec *k = &KEYS[i];
        char dom[64];
        domain_text(k, dom, sizeof dom);
        if ((int)strlen(dom) > wd) fprintf(f, "  %-*s  %s\n  %-*s  %-*s", wk, k->key, dom, wk, "", wd, "");
        else fprintf(f, "  %-*s  %-*s", wk, k->key, wd, dom);
        fprintf(f, "  default %-*s  ", wv, k->def[0] ? k->def : "\"\"");
        const char *h = k->help;
        for (int line = 0; *h; line++) {
            int n = (int)strlen(h);
            if (n > room) { /* the last space that fits; a longer word goes whole */
                int cut = room;
                while (cut > 0 && h[cut] != ' ') cut--;
                if (cut == 0) cut = (int)strcspn(h, " ");
                n = cut;
            }
            fprintf(f, "%*s%.*s\n", line ? indent : 0, "", n, h);
            h += n;
            while (*h == ' ') h++;
        }
    }
}
