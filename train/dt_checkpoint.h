/* dt_checkpoint.h: training checkpoints. One binary file: a magic and version, the payload
 * length and its FNV-1a checksum, then the effective config text, the position (epoch, batch
 * within the epoch, global step) and named float32 tensors (parameters, BN running
 * statistics, momentum buffers "momentum/<param>"). Written to a temporary file, flushed to
 * disk and renamed over the target, so a crash never leaves a half-written checkpoint in
 * place. Reading verifies everything and says what is wrong; resuming checks every value read
 * against the run before it is used (dt_checkpoint_plan_resume, dt_checkpoint_load_state). */
#ifndef DT_CHECKPOINT_H
#define DT_CHECKPOINT_H

#include "core/dt_api.h"

#include <stdint.h>

#include "core/dt_common.h"
#include "train/dt_config.h"
#include "core/dt_param.h"
#include "core/dt_tensor.h"

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

/* The largest checkpoint read: twice the state of the largest model the configuration keys
 * allow (resnet101 at width 4, 100,000 classes, every stage deformable (v2) with 64 offset
 * groups: 2.0 G parameters, about 16.0 GB of weights and momentum), so that a huge or sparse
 * file is an error, not an allocation. */
#define DT_CHECKPOINT_MAX_BYTES ((size_t)32 << 30)

/* A run's shape as far as positions go: images per step (batch x replicas), steps per epoch
 * and steps in all. */
typedef struct {
    int64_t global_batch, steps_per_epoch, total_steps;
} dt_ckpt_run;

/* The run configuration c describes with `world` replicas on a training set of train_images
 * (ignored for synthetic data, whose epoch is `steps`, or 100, steps). 0, or -1 with err set
 * when not one global batch fits the training set or the step count overflows. */
int dt_ckpt_run_of(const dt_train_cfg *c, int world, int64_t train_images, dt_ckpt_run *r, dt_err *err);

/* A position written by a run with global batch `was` (batch x replicas), continued by a run
 * with global batch `now` (a checkpoint of N GPUs resumed on M): the images done in the epoch,
 * pos.batch x was, become whole batches of `now`, rounded down (*exact = 0 when that repeats
 * some images); a batch that reaches the end of the new epoch becomes the start of the next
 * one; the step becomes epoch x steps_per_epoch + batch in the new run's units, so the schedule
 * continues at the same point of the epoch. Unchanged when was == now. Every product is
 * overflow-checked: *exact = -1 (and pos returned as it was) when the result does not fit
 * 64 bits, which only a position no run wrote can do (dt_checkpoint_plan_resume refuses it). */
dt_ckpt_pos dt_ckpt_pos_rescale(dt_ckpt_pos pos, int64_t was, int64_t now, int64_t steps_per_epoch, int *exact);

/* A checkpoint file's bytes in memory: the 28-byte header (magic, version, body length, FNV-1a
 * checksum of the body) and the body (the config text, the position, the tensors). Serializing
 * copies every tensor to the host (the snapshot: the tensors may change right after); writing
 * - the header's checksum, then the file system's part - is what train/ckpt_writer.h moves off
 * the training thread. */
typedef struct {
    unsigned char head[28];
    unsigned char *body; /* [len] of [cap] bytes, page-locked when pinned (a GPU run's: dt_host_alloc) */
    size_t len, cap;
    int pinned;
} dt_ckpt_image;

/* The image of a checkpoint of items[n] at pos with the run's config text. img is empty ({0})
 * or holds a body to fill again (a writer's spare, dt_ckpt_writer_spare: no allocation, no page
 * locking per checkpoint) - used when large enough and of the kind wanted, else replaced. The
 * tensors of a GPU are copied on its stream into a pinned body (converted to fp32 in logical
 * order on the GPU), then waited for once. */
void dt_checkpoint_serialize(const char *config_text, const dt_ckpt_pos *pos, const dt_ckpt_item *items, int n,
                            dt_ckpt_image *img);
/* Fills img's header and writes img as the whole new file `path` (atomic_file.h: a temporary
 * file, fsync, rename; the previous file is untouched on failure). 0, or -1 with err set. */
int dt_ckpt_image_write(const char *path, dt_ckpt_image *img, dt_err *err);
void dt_ckpt_image_free(dt_ckpt_image *img);
/* Serialize + write, in the calling thread. */
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

/* Reads and verifies a checkpoint: at most DT_CHECKPOINT_MAX_BYTES, then magic, version, the
 * contents length against the file size, the checksum, then every count, length and shape
 * against the bytes that remain (a crafted or damaged file gives "PATH: corrupt checkpoint
 * (what is wrong)", never an allocation larger than the file or a read outside it). 0, or -1
 * with err set and ck empty. */
int dt_checkpoint_read(const char *path, dt_checkpoint *ck, dt_err *err);
/* The same on a file's bytes (malloc'ed; ck owns them from the call on, also on failure). */
int dt_checkpoint_parse(void *file, size_t size, const char *name, dt_checkpoint *ck, dt_err *err);
/* Index of a tensor by name, or -1. */
int dt_checkpoint_find(const dt_checkpoint *ck, const char *name);
/* Copies the named tensor into t (any device); -1 with a message when absent, when the shape
 * differs (naming both shapes) or when it holds a NaN or an infinity (naming the tensor and
 * the element): t is then untouched. */
int dt_checkpoint_copy_to(const dt_checkpoint *ck, const char *name, dt_tensor *t, const char *path, dt_err *err);
void dt_checkpoint_free(dt_checkpoint *ck);

/* Where a resumed run starts, and what the run that wrote the checkpoint was. */
typedef struct {
    dt_ckpt_pos pos;      /* in the resuming run's units */
    int exact;            /* 0: the global batch changed and the images done were rounded to a batch */
    dt_ckpt_run was;      /* the writing run, from its stored config (the resuming run's when that does not parse) */
    int have_config;      /* 1: `config` is the stored config; 0: config_error says why it did not parse */
    dt_train_cfg config;
    char config_error[1024];
} dt_ckpt_resume;

/* Checks the checkpoint's position against the run that wrote it, as its stored config
 * describes it on this training set (with its gpus= times `processes`: a run of several
 * processes stores one process's gpus=): not negative, the batch inside an epoch, the step
 * equal to epoch x steps per epoch + batch and not past that run's end; then maps it onto the
 * resuming run `now` (dt_ckpt_pos_rescale) and checks it is not past now's end (a position
 * exactly at the end is valid: a finished run). Every product is overflow-checked. 0, or -1
 * with err naming the checkpoint and the values. */
int dt_checkpoint_plan_resume(const dt_checkpoint *ck, const dt_ckpt_run *now, int processes, int64_t train_images,
                              const char *path, dt_ckpt_resume *out, dt_err *err);

/* A model's training state as checkpoint tensors, serialized into img: every parameter by its
 * name, every buffer (batch-norm statistics) by its name, and each parameter's SGD momentum
 * momentum[i] (NULL before its first step: not stored) as "momentum/<name>". */
void dt_checkpoint_serialize_state(const char *config_text, const dt_ckpt_pos *pos, const dt_params *ps,
                                   dt_tensor *const *momentum, dt_tensor *const *buffers, int n_buffers, dt_ckpt_image *img);
/* The inverse: copies every parameter and buffer from the checkpoint, and each momentum the
 * checkpoint holds (making momentum[i] on the parameter's device when it is NULL); every
 * tensor of the checkpoint must be one of them. 0, or -1 naming the tensor that is missing,
 * of another shape, or not finite, or the count that differs. */
int dt_checkpoint_load_state(const dt_checkpoint *ck, dt_params *ps, dt_tensor **momentum, dt_tensor **buffers,
                             int n_buffers, const char *path, dt_err *err);

/* Start-up checks before a run that will write checkpoints to `path`, so that a bad path is
 * reported before any training: creates the missing folders leading to it, refuses a path
 * that a rename must not replace (a folder, a device, a FIFO, a socket, a dangling symlink; a
 * symlink to a regular file is written through: atomic_file.h), removes the temporary files
 * TARGET.tmp.PID that killed runs left (only those of this name whose PID is not a running
 * process; each one named in a warning) and proves the folder writable by creating and
 * removing the temporary file a save will use. 0, or -1 with err set. */
int dt_checkpoint_prepare(const char *path, dt_err *err);

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
