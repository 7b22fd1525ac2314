/* dt_npy.h: tensors to and from NumPy's .npy format (version 1.0/2.0/3.0, little-endian
 * float32 '<f4', C order), so results can be checked against numpy or PyTorch.
 * Loading checks everything a bad file can get wrong and says which: magic, version, header,
 * dtype, Fortran order, shape (and its element count overflowing), a file shorter or longer
 * than its header promises. */
#ifndef DT_NPY_H
#define DT_NPY_H

#include "core/dt_api.h"

#include "core/dt_common.h"
#include "core/dt_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

/* Writes t (any device) to path, atomically (temp file + rename). 0 on success. */
int dt_npy_save(const char *path, const dt_tensor *t, dt_err *err);
int dt_npy_save_raw(const char *path, int ndim, const int64_t *shape, const float *host, dt_err *err);
/* Loads a float32 array onto `dev`; NULL and a message in err on failure. The file is read
 * whole (dt_file_read), then parsed by dt_npy_parse. */
dt_tensor *dt_npy_load(const char *path, dt_dev dev, dt_err *err);
/* The parser on a file's bytes (`name` for messages). Every header value is checked against
 * `size` and against overflow before use: nothing is allocated beyond what the file holds,
 * and a bad file is an error returned (NULL), never an exit. */
dt_tensor *dt_npy_parse(const void *data, size_t size, const char *name, dt_dev dev, dt_err *err);

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
