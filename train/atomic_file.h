/* atomic_file.h: writing a file whole or not at all (the trainer's internal header).
 *
 * What a run must never leave half-written - a checkpoint, the run summary, a log table cut
 * back on resume - goes to a temporary file next to its target, TARGET.tmp.PID, is fsync'ed
 * and renamed over the target: a crash or a full disk leaves the previous file in place.
 *
 * A rename replaces whatever has the name, so the name is resolved first:
 *   - missing, or a regular file: written in place;
 *   - a symlink to a regular file: written through to that file (the link stays a link, the
 *     file it points to is replaced atomically in its own folder);
 *   - anything else - a folder, a device such as /dev/full, a FIFO, a socket, a dangling
 *     link or a link to any of those - is refused with an error naming it, so that a rename
 *     never turns a device node into a regular file or cuts a link. */
#ifndef DT_ATOMIC_FILE_H
#define DT_ATOMIC_FILE_H

#include <stddef.h>

#include "core/dt_common.h"

/* The file that writing `path` replaces (see above) into target[cap]; `what` names the kind
 * of file in messages ("checkpoint"). 0, or -1 with err set. */
int dt_atomic_target(const char *path, const char *what, char *target, size_t cap, dt_err *err);

/* The temporary name a write to `target` uses: TARGET.tmp.PID. */
void dt_atomic_tmp_name(const char *target, long pid, char *out, size_t cap);

/* Writes a then b (either may be empty) as the whole new contents of `path`, resolved by
 * dt_atomic_target. 0, or -1 with err set ("cannot write WHAT PATH: reason (the previous
 * file, if any, is untouched)"); the temporary file is removed on failure. */
int dt_atomic_write(const char *path, const char *what, const void *a, size_t na, const void *b, size_t nb, dt_err *err);

#endif
