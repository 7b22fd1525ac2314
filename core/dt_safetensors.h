/* dt_safetensors.h: the safetensors format (Hugging Face's; what PyTorch's and torchvision's
 * weights are shared in), read and written - the exchange format of model weights with
 * PyTorch (train/dt_weights.h maps a model onto it by name).
 *
 * A file is
 *   8 bytes     N, the header's length, little-endian unsigned
 *   N bytes     a JSON object, UTF-8:
 *                 {"__metadata__": {"format": "pt", ...},            (optional, strings only)
 *                  "conv1.weight": {"dtype": "F32", "shape": [64, 3, 7, 7],
 *                                   "data_offsets": [BEGIN, END]}, ...}
 *               padded with spaces (the HF writer pads it so that the data starts at a
 *               multiple of 8)
 *   the data    every tensor's elements, row-major, little-endian; BEGIN and END are byte
 *               offsets from the start of the data (the end of the header). The tensors tile
 *               the data exactly: no overlap, no gap, nothing after the last one.
 *
 * A file is untrusted input. Reading checks, before anything of it is used: the file size
 * (at most DT_SAFETENSORS_MAX_BYTES), the header length (not 0, inside the file, at most
 * DT_SAFETENSORS_MAX_HEADER), the header's UTF-8 and its JSON - parsed here, strictly: strings
 * with their escapes (\" \\ \/ \b \f \n \r \t \uXXXX and surrogate pairs; no control byte, no
 * \u0000), integers where the format has integers (no sign, fraction, exponent or leading zero;
 * at most 2^63 - 1), each key once (a duplicate tensor, field or metadata key is an error), no
 * field the format does not define, nothing after the object but spaces; the nesting is the
 * format's (an object of objects, an array of integers: anything else where a value of the
 * format stands is an error naming what was expected). Per tensor: the name (at most
 * DT_SAFETENSORS_MAX_NAME bytes), a dtype deftc reads, at most DT_MAX_DIMS dimensions, the
 * element count and byte size without int64 overflow, BEGIN <= END inside the data, END -
 * BEGIN = elements x the dtype's size. Then the tiling. Every failure is a dt_err naming the
 * file, and the tensor when there is one. Tensors are not copied: they point into the file's
 * bytes, which the reader holds (read once, whole). The host is little-endian (checked when
 * this compiles). */
#ifndef DT_SAFETENSORS_H
#define DT_SAFETENSORS_H

#include "core/dt_api.h"

#include <stddef.h>
#include <stdint.h>

#include "core/dt_common.h"
#include "core/dt_tensor.h" /* DT_MAX_DIMS */

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

/* The element types deftc reads and writes (safetensors' names: "F32", "BF16", ...). */
typedef enum { DT_ST_F32, DT_ST_BF16, DT_ST_F16, DT_ST_F64, DT_ST_I64, DT_ST_I32, DT_ST_NUM_DTYPES } dt_st_dtype;

const char *dt_st_dtype_name(dt_st_dtype t); /* "F32" */
size_t dt_st_dtype_size(dt_st_dtype t);      /* bytes per element */
int dt_st_dtype_is_float(dt_st_dtype t);     /* F32, BF16, F16, F64 */

/* Limits: the file (twice the F32 weights of the largest model the training keys allow:
 * resnet101 at width 4, 100,000 classes, every stage deformable with 64 offset groups, 2.0 G
 * parameters, 8 GB), the JSON header (HF's own reader takes up to 100 MB; deftc's ResNets
 * need about 30 KB), a name. */
#define DT_SAFETENSORS_MAX_BYTES ((size_t)16 << 30)
#define DT_SAFETENSORS_MAX_HEADER ((size_t)100 << 20)
#define DT_SAFETENSORS_MAX_NAME 255

typedef struct {
    char *name;
    dt_st_dtype dtype;
    int ndim;                   /* 0: a scalar (one element) */
    int64_t shape[DT_MAX_DIMS];
    int64_t numel;
    size_t begin, end;          /* data_offsets: bytes from the start of the data */
    const void *data;           /* into the file's bytes; not aligned (read with memcpy) */
} dt_st_tensor;

typedef struct {
    char *key, *value;
} dt_st_meta;

/* A file read into memory. */
typedef struct {
    dt_st_tensor *t;            /* [n], in the header's order */
    int n;
    dt_st_meta *meta;           /* [n_meta]: __metadata__, sorted by key */
    int n_meta;
    int *by_name;               /* [n]: indices of t sorted by name (dt_safetensors_find) */
    void *blob;                 /* the file's bytes */
} dt_safetensors;

/* Reads and checks the file at `path` (see the top): 0, or -1 with err set and st empty. */
int dt_safetensors_read(const char *path, dt_safetensors *st, dt_err *err);
/* The same on a file's bytes (malloc'ed; st owns them from the call on, also on failure);
 * `name` names the file in messages. */
int dt_safetensors_parse(void *file, size_t size, const char *name, dt_safetensors *st, dt_err *err);
/* The tensor of that name, or NULL. */
const dt_st_tensor *dt_safetensors_find(const dt_safetensors *st, const char *name);
/* The metadata value of that key, or NULL. */
const char *dt_safetensors_meta(const dt_safetensors *st, const char *key);
void dt_safetensors_free(dt_safetensors *st);

/* The tensor's elements as fp32 into out[numel]: exact for F32, BF16 and F16, rounded to
 * nearest for F64 (beyond the float range: an infinity) and for integers past 2^24. */
void dt_st_tensor_to_f32(const dt_st_tensor *t, float *out);

/* One tensor to write: numel(shape) elements of dtype at data, row-major, little-endian. */
typedef struct {
    const char *name;
    dt_st_dtype dtype;
    int ndim;
    const int64_t *shape;
    const void *data;
} dt_st_item;

/* The bytes of a safetensors file holding items[n] and the metadata meta[n_meta] (may be 0):
 * the JSON header (metadata first, then the tensors) padded with spaces to a multiple of 8,
 * then the data. The tensors are placed by decreasing element size, in the given order within
 * a size (so that each starts at a multiple of its element size, as HF's writer places them),
 * without gaps. Names must be unique, of at most DT_SAFETENSORS_MAX_NAME bytes and not
 * "__metadata__" (what the reader accepts); shapes of at most DT_MAX_DIMS non-negative dimensions. 0 with *file (malloc'ed)
 * and *size set, or -1 with err naming the item. Writing a file by rename:
 * dt_weights_save_tensors (train/dt_weights.h). */
int dt_safetensors_encode(const dt_st_item *items, int n, const dt_st_meta *meta, int n_meta, void **file, size_t *size,
                          dt_err *err);

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
