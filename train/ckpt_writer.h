/* ckpt_writer.h: checkpoints written in the background. The training thread serializes the
 * state (dt_checkpoint_serialize_state: the tensors copied to the host - the snapshot, after
 * which training may change them); a writer thread does the file system's part (the checksum, a
 * temporary file, fsync, rename: train/atomic_file.h) while the next steps run. Training never
 * waits for the disk: one write at a time, and an image submitted while another is being
 * written waits in one slot, where a newer one replaces it (it is "superseded": on a disk
 * slower than the epochs, the file on disk is the newest the disk could take, never a queue of
 * stale ones). A failed write is reported by the next call after it (submit or wait). A run
 * waits before it ends (and for the checkpoint of an interrupt or stop_at), so no run returns
 * or exits with a checkpoint half-written or one it submitted unwritten, a failed write fails
 * the run, and the previous checkpoint stays whole until a new one has replaced it (the rename). */
#ifndef DT_CKPT_WRITER_H
#define DT_CKPT_WRITER_H

#include "core/dt_common.h"
#include "train/dt_checkpoint.h"

typedef struct dt_ckpt_writer dt_ckpt_writer;

dt_ckpt_writer *dt_ckpt_writer_new(void);
/* Does not wait: if an earlier write failed (and no call has said so), returns -1 with its
 * error and frees img unwritten; else hands img to the writer (which takes it: img is emptied),
 * replacing an image still waiting for its write, and returns 0. */
int dt_ckpt_writer_submit(dt_ckpt_writer *w, const char *path, dt_ckpt_image *img, dt_err *err);
/* Waits until every submitted image is written or superseded: 0, or -1 with the error of a
 * failed write not yet reported. *write_ms (or NULL): how long the last write took in the
 * writer thread, 0 when nothing was in progress. */
int dt_ckpt_writer_wait(dt_ckpt_writer *w, double *write_ms, dt_err *err);
/* An empty img receives the body of an image already written or superseded (if the writer
 * holds one), for dt_checkpoint_serialize to fill again: a GPU run's page-locked bodies are
 * allocated once, not per checkpoint. */
void dt_ckpt_writer_spare(dt_ckpt_writer *w, dt_ckpt_image *img);
/* What the writer did with the images submitted so far. */
typedef struct {
    int64_t submitted, written, superseded, failed; /* submitted = the other three + those waiting */
} dt_ckpt_writer_counts;
dt_ckpt_writer_counts dt_ckpt_writer_counts_of(dt_ckpt_writer *w);
/* Waits (a failure is dropped: call dt_ckpt_writer_wait first to see it) and frees. */
void dt_ckpt_writer_free(dt_ckpt_writer *w);

#endif
