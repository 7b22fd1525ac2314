/* ckpt_writer.h: checkpoints written in the background. The training thread serializes the
 * state (dt_checkpoint_serialize_state: the tensors copied to the host - the snapshot, after
 * which training may change them); a writer thread does the file system's part (a temporary
 * file, fsync, rename: train/atomic_file.h) while the next steps run. One write at a time: a
 * new one starts only when the previous has finished, and that one's failure is reported then;
 * dt_ckpt_writer_wait reports the last one's. A run waits before it ends (and before the
 * checkpoint of an interrupt or stop_at, which it then writes in its own thread), so no run
 * returns or exits with a checkpoint half-written, a failed write fails the run, and the
 * previous checkpoint stays whole until a new one has replaced it (the rename). */
#ifndef DT_CKPT_WRITER_H
#define DT_CKPT_WRITER_H

#include "core/dt_common.h"
#include "train/dt_checkpoint.h"

typedef struct dt_ckpt_writer dt_ckpt_writer;

dt_ckpt_writer *dt_ckpt_writer_new(void);
/* Waits for the write in progress; if it failed, returns -1 with its error and frees img
 * unwritten; else starts writing img to path in the background (the writer takes img) and
 * returns 0. */
int dt_ckpt_writer_submit(dt_ckpt_writer *w, const char *path, dt_ckpt_image *img, dt_err *err);
/* Waits for the write in progress (if any): 0, or -1 with its error. *write_ms (or NULL): how
 * long the write took in the writer thread, 0 when none was in progress. */
int dt_ckpt_writer_wait(dt_ckpt_writer *w, double *write_ms, dt_err *err);
/* Waits (a failure is dropped: call dt_ckpt_writer_wait first to see it) and frees. */
void dt_ckpt_writer_free(dt_ckpt_writer *w);

#endif
