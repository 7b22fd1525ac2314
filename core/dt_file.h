/* dt_file.h: reading a whole input file into memory, with the checks every reader of
 * untrusted files needs before it looks at a byte: the path is a regular file (not a folder,
 * a device such as /dev/zero, or a FIFO that could block forever), its size is known before
 * anything is allocated and is at most what the caller accepts, and a short read (a file that
 * shrank meanwhile) is an error. Parsers then check every length they read against the size. */
#ifndef DT_FILE_H
#define DT_FILE_H

#include <stddef.h>

#include "core/dt_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads `path` into buf (grown as needed, reused between calls) and sets *size to its length
 * in bytes; a NUL byte is stored after the data, so text can be parsed in place. `what` names
 * the kind of file in messages ("config", "checkpoint", or "" for none): "cannot open config
 * x.cfg: No such file or directory", "config x.cfg is a folder, not a file", "cannot read
 * config /dev/zero: not a regular file", "config x.cfg is 5000000 bytes, more than the 1048576
 * accepted". Returns 0, or -1 with err set. */
int dt_file_read(const char *path, const char *what, size_t max_bytes, dt_scratch *buf, size_t *size, dt_err *err);

/* Creates the folders leading to the file `path` that do not exist yet (mkdir -p of its
 * folder, mode 0777 less the umask): "runs/x" makes runs/. 0, or -1 naming the folder. */
int dt_make_parent_dirs(const char *path, dt_err *err);

#ifdef __cplusplus
}
#endif
#endif
