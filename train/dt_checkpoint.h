/* dt_checkpoint.h: training checkpoints. One binary file: a magic and version, the payload
 * length and its FNV-1a checksum, then the effective config text, the position (epoch, batch
 * within the epoch, global step) and named float32 tensors (parameters, BN running
 * statistics, momentum buffers "momentum/<param>"). Written to a temporary file, flushed to
 * disk and renamed over the target, so a crash never leaves a half-written checkpoint in
 * place. Reading verifies everything and says what is wrong. */
#ifndef DT_CHECKPOINT_H
#define DT_CHECKPOINT_H

#include "dt_api.h"

#include <stdint.h>

#include "dt_common.h"
#include "dt_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

typedef struct {
    int64_t epoch;  /* epoch to continue in */
    int64_t batch;  /* batches of that epoch already done */
    int64_t step;   /* global optimizer steps done */
} dt_ckpt_pos;

typedef struct {
    const char *name;
    const dt_tensor *t;
} dt_ckpt_item;

/* A position written by a run with global batch `was` (batch x replicas), continued by a run
 * with global batch `now` (a checkpoint of N GPUs resumed on M): the images done in the epoch,
 * pos.batch x was, become whole batches of `now`, rounded down (*exact = 0 when that repeats
 * some images); the step becomes epoch x steps_per_epoch + batch in the new run's units, so the
 * schedule continues at the same point of the epoch. Unchanged when was == now. */
dt_ckpt_pos dt_ckpt_pos_rescale(dt_ckpt_pos pos, int64_t was, int64_t now, int64_t steps_per_epoch, int *exact);

int dt_checkpoint_save(const char *path, const char *config_text, const dt_ckpt_pos *pos, const dt_ckpt_item *items,
                       int n, dt_err *err);

/* A checkpoint read into memory. */
typedef struct {
    char *config_text;
    dt_ckpt_pos pos;
    int n;
    char **names;
    int *ndim;
    int64_t (*shape)[DT_MAX_DIMS];
    const float **data; /* point into blob */
    void *blob;
} dt_checkpoint;

/* Reads and verifies a checkpoint: magic, version, the contents length against the file size,
 * the checksum, then every count, length and shape against the bytes that remain (a crafted
 * or damaged file gives "PATH: corrupt checkpoint (what is wrong)", never an allocation larger
 * than the file or a read outside it). 0, or -1 with err set and ck empty. */
int dt_checkpoint_read(const char *path, dt_checkpoint *ck, dt_err *err);
/* The same on a file's bytes (malloc'ed; ck owns them from the call on, also on failure). */
int dt_checkpoint_parse(void *file, size_t size, const char *name, dt_checkpoint *ck, dt_err *err);
/* Index of a tensor by name, or -1. */
int dt_checkpoint_find(const dt_checkpoint *ck, const char *name);
/* Copies the named tensor into t (any device); -1 with a message when absent or the shape
 * differs (naming both shapes). */
int dt_checkpoint_copy_to(const dt_checkpoint *ck, const char *name, dt_tensor *t, const char *path, dt_err *err);
void dt_checkpoint_free(dt_checkpoint *ck);

/* Start-up checks before a run that will write checkpoints to `path`, so that a bad path is
 * reported before any training: creates the missing folders leading to it, removes the
 * temporary files `path`.tmp.PID that killed runs left (only those of this name whose PID is
 * not a running process; each one named in a warning) and proves the folder writable by
 * creating and removing the temporary file a save will use. 0, or -1 with err set. */
int dt_checkpoint_prepare(const char *path, dt_err *err);

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
