/* dt_config.h: the training program's configuration: a .cfg file of `key = value` lines
 * (# starts a comment) plus `key=value` overrides from the command line, checked against a
 * table of known keys. An unknown key is an error that names the closest keys, a bad value one
 * that says what is valid. dt_config_help() prints the table.
 *
 * A value in a file is the text after the = up to a # or the end of the line, spaces at both
 * ends trimmed, or a double-quoted string, which holds any byte but NUL through the escapes \\ \"
 * \n \r \t \xHH (data = "/mnt/run #3/images"). dt_config_write quotes exactly the values that
 * need it (a #, an =, a quote, a control byte, a space at either end), so that the config a
 * checkpoint stores reads back to the same values. An override on the command line is taken as
 * it is, unquoted (the shell has removed its quotes). */
#ifndef DT_CONFIG_H
#define DT_CONFIG_H

#include "core/dt_api.h"

#include <stdint.h>
#include <stdio.h>

#include "core/dt_common.h"

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

typedef struct {
    /* data */
    char data[512];        /* ImageFolder root (train/ and val/) */
    int synthetic;         /* 1: random device tensors instead of images */
    int classes;           /* synthetic only: number of classes */
    int image_size, batch, workers, cache;
    float crop_scale_min;
    int max_val_batches;   /* 0 = whole val set */
    /* device */
    char device[8];        /* cuda | cpu */
    char precision[8];     /* fp32 | tf32 | bf16 (dt_precision) */
    char layout[8];        /* auto | nchw | nhwc */
    char gpus[160];        /* data parallel: a count N (GPUs 0..N-1) or a list like 0,2 */
    int sync_bn;           /* batch-norm statistics over all replicas */
    int bucket_mb;         /* gradient all-reduce bucket size (MiB) */
    int col_budget_mb;
    char decode[8];        /* auto | cpu | gpu: where the loader decodes JPEGs (dt_decode) */
    int prefetch;          /* the loader's ring of batch slots (dt_loader_opts.prefetch) */
    int gpu_decoders;      /* GPU decode threads, each its own nvJPEG decoder (at most prefetch - 1) */
    char conv_algo[16];    /* auto | gemm | igemm128 | igemm64 | sm90 | measure: the engine of bf16 NHWC convs (dt_conv_algo) */
    int graphs;            /* GPU: the step captured once as a CUDA graph and replayed */
    /* schedule */
    int epochs;
    int64_t steps;         /* > 0: stop after this many steps (governs over epochs) */
    float lr, momentum, weight_decay, label_smoothing, min_lr, lr_gamma, warmup_start;
    int nesterov, decay_bn_bias, lr_step_epochs;
    char schedule[16];     /* const | step | cosine */
    int64_t warmup;        /* linear warmup steps */
    /* model */
    char model[16];        /* resnet18 | resnet34 | resnet50 | resnet101 | resnext50_32x4d | mobilenet_v2 (dt_resnet_model) */
    char deform[32];       /* none | all | stages like 2,3,4 | c3-c5 (dt_resnet_parse_stages) */
    int deform_version, offset_groups;
    float width;
    char dropout[16];      /* auto (the model's: 0.2 for mobilenet_v2, 0 for the ResNets) | a probability in [0, 1) */
    float offset_init_std, offset_lr_mult;
    char init_from[512];   /* a torchvision state_dict (.safetensors) loaded before training (dt_weights.h) */
    int init_from_partial; /* 1: an fc of another shape (or none) in it stays at its init */
    char deform_mode[16];  /* unfused | deft */
    char tile[16];         /* auto | HxW */
    int halo, halo_refresh, swizzle, fuse_offset, stage, deterministic, keep_cols;
    char dx[16];           /* gather | atomic */
    /* run */
    uint64_t seed;
    char checkpoint[512], resume[512], log[512];
    int log_every, eval_every, timing_warmup, progress, quiet;
    int overwrite;         /* 1: a new run may replace an earlier run's logs, checkpoint and export */
    int64_t stop_at;       /* > 0: stop (after a checkpoint) once this many steps are done */
    int64_t checkpoint_every; /* > 0: a checkpoint every this many steps (mid-epoch too) */
    float checkpoint_minutes; /* > 0: a checkpoint once this many minutes passed since the last */
    int64_t max_image_pixels; /* larger images are skipped before decoding */
    char export_path[512];    /* key `export`: the weights as .safetensors at the end of the run */
    char config_path[512];    /* not a key: the file dt_config_load read last ("" if none), which no
                               * output of the run may replace */
} dt_train_cfg;

void dt_config_defaults(dt_train_cfg *c);
/* A config file is at most this large (configs are a few KB; the bound makes /dev/zero-like
 * inputs an error instead of a hang). */
#define DT_CONFIG_MAX_BYTES (1 << 20)

/* Reads a .cfg file into c (on top of what is there). 0, or -1 with the file:line and key. The
 * file must be a regular file (a folder, /dev/zero, a FIFO are errors) of at most
 * DT_CONFIG_MAX_BYTES, read whole, then parsed by dt_config_parse. */
int dt_config_load(dt_train_cfg *c, const char *path, dt_err *err);
/* The parser on text (`name` for messages): lines of any length; a NUL or another control
 * byte (but tab, CR) is an error naming the line; so are unknown keys and bad values (a NaN
 * or an infinity fails every numeric range). */
int dt_config_parse(dt_train_cfg *c, const char *text, size_t len, const char *name, dt_err *err);
/* One "key=value" override. */
int dt_config_set(dt_train_cfg *c, const char *assignment, dt_err *err);
/* build/train's overrides (n "key=value" texts) on top of a config file already read, in order.
 * A key on the command line wins over the file, and so it does for the run length, which steps
 * (> 0) governs over epochs: an epochs= override clears the file's steps= unless steps= is
 * overridden too. `note` (cap bytes) gets one sentence when the overrides replaced or overruled
 * the run length (epochs=1 on the command line replaces the config's steps=240 ...), else "". */
int dt_config_override(dt_train_cfg *c, int n, char *const *args, char *note, size_t cap, dt_err *err);
/* Cross-key checks (after all sets): e.g. a dataset or synthetic=1. */
int dt_config_check(const dt_train_cfg *c, dt_err *err);
/* The dropout probability dropout= gives c's model (auto: dt_resnet_default_dropout); -1 with err
 * naming the key when it is no number in [0, 1) or the model has no dropout layer. */
int dt_config_dropout(const dt_train_cfg *c, float *p, dt_err *err);
/* The replicas `gpus` asks for: their device ids (devices may be NULL) and their number, or -1
 * with err naming the problem (not a count or a list of distinct ids in [0, DT_MAX_GPUS)). On
 * the CPU (device=cpu) the count is the number of CPU replicas (threads). */
int dt_config_gpus(const dt_train_cfg *c, int *devices, dt_err *err);
/* Writes every key = value (the effective configuration) to f; dt_config_parse reads it back
 * to the same values (strings quoted when they must be, floats with 9 digits). */
void dt_config_write(const dt_train_cfg *c, FILE *f);
void dt_config_help(FILE *f);
/* Calls fn for every key that changes what is trained (batch, image size, momentum, the
 * schedule, seed, ...; not logs, workers, performance knobs) whose value differs between
 * `was` and `now`, with both values as a config file writes them; returns how many. */
typedef void (*dt_config_diff_fn)(const char *key, const char *was, const char *now, void *ctx);
int dt_config_diff(const dt_train_cfg *was, const dt_train_cfg *now, dt_config_diff_fn fn, void *ctx);

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
