/* dt_tensor.h: the tensor type: a logical shape (up to DT_MAX_DIMS dimensions; images are
 * [N, C, H, W]), an element type, a memory layout (4-D tensors: NCHW or NHWC, dt_dtype.h), a
 * device, and a dense storage of numel elements. `data` is untyped: ops pick their kernel by
 * (device, dtype, layout) from their tables (dt_kernel.h); code that reads elements itself goes
 * through the checked accessors dt_data_f32 / dt_data_i32 / dt_data_u8.
 *
 * Ownership (arena style, no reference counting in user code):
 *  - a tensor made while a scope is open (dt_scope_begin .. dt_scope_end) belongs to the
 *    innermost scope and is freed when that scope ends: a training step opens one scope, so
 *    every activation and gradient of the step is released at its end, back into the caching
 *    allocator, ready for the next step;
 *  - a tensor made with no scope open, or detached with dt_tensor_keep(), belongs to the
 *    caller (dt_tensor_free). Parameters are made that way.
 * Views (dt_tensor_view) share the storage; the storage is freed with its last user.
 */
#ifndef DT_TENSOR_H
#define DT_TENSOR_H

#include "core/dt_api.h"

#include <stdint.h>

#include "core/dt_device.h"
#include "core/dt_dtype.h"
#include "core/dt_rng.h"

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

#define DT_MAX_DIMS 8

typedef struct dt_storage {
    void *ptr;
    size_t bytes;
    int refs;
    dt_dev dev;
} dt_storage;

struct dt_node;
struct dt_param;

typedef struct dt_tensor {
    int ndim;
    int64_t shape[DT_MAX_DIMS]; /* logical: [N, C, H, W] for images whatever the layout */
    int64_t numel;
    dt_dev dev;
    dt_dtype dtype;
    dt_layout layout;     /* DT_NHWC only for 4-D tensors */
    void *data;           /* NULL once released (see dt_tensor_release) */
    dt_storage *storage;

    /* autograd */
    int requires_grad;    /* a leaf that wants a gradient, or computed from one */
    struct dt_tensor *grad; /* same shape, dtype, layout and device; owned by this tensor */
    int grad_valid;       /* parameters: 0 after zero_grad, the first contribution overwrites */
    struct dt_node *node; /* the op that produced it, while that node is on the tape (else NULL) */
    int tape_uses;        /* how many nodes on the tape read it as an input */
    int tape_saved;       /* how many nodes on the tape keep it as a saved buffer */
    /* the parameter record (dt_param.h) of a parameter's fp32 master and of its bf16 working
     * copy - whose gradient is the master's - NULL for every other tensor */
    struct dt_param *param;
    int retain;           /* keep data after backward (the engine frees activations early) */

    /* bookkeeping */
    int scoped;           /* freed by dt_scope_end */
    char name[64];
} dt_tensor;

/* Creation. Data is uninitialized except for the _zeros variants. The plain forms make f32
 * NCHW tensors; the _as forms any dtype and layout (DT_NHWC needs 4 dims). */
dt_tensor *dt_tensor_new(int ndim, const int64_t *shape, dt_dev dev);
dt_tensor *dt_tensor_new_as(int ndim, const int64_t *shape, dt_dev dev, dt_dtype dtype, dt_layout layout);
dt_tensor *dt_tensor_zeros(int ndim, const int64_t *shape, dt_dev dev);
/* Like dt_tensor_new_as but never in a scope: the caller (or the owning tensor) frees it. */
dt_tensor *dt_tensor_new_unscoped(int ndim, const int64_t *shape, dt_dev dev, dt_dtype dtype, dt_layout layout);
dt_tensor *dt_tensor_new1(dt_dev dev, int64_t a);
dt_tensor *dt_tensor_new2(dt_dev dev, int64_t a, int64_t b);
dt_tensor *dt_tensor_new4(dt_dev dev, int64_t n, int64_t c, int64_t h, int64_t w);
dt_tensor *dt_tensor_new4_as(dt_dev dev, dt_dtype dtype, dt_layout layout, int64_t n, int64_t c, int64_t h, int64_t w);
dt_tensor *dt_tensor_like(const dt_tensor *t);             /* same shape, dtype, layout, device */
/* f32 NCHW from host floats. */
dt_tensor *dt_tensor_from_host(int ndim, const int64_t *shape, dt_dev dev, const float *src);
/* Any dtype and layout from host floats in logical (row-major [N, C, H, W]) order: rounded to
 * the dtype (bf16: nearest even; i32: truncated) and laid out as asked. */
dt_tensor *dt_tensor_from_values(int ndim, const int64_t *shape, dt_dev dev, dt_dtype dtype, dt_layout layout,
                                 const float *values);
dt_tensor *dt_tensor_to(const dt_tensor *t, dt_dev dev);   /* a copy on `dev` */
/* A view with another shape of the same numel (no copy, no autograd: see dt_reshape). Row-major
 * tensors only - or an NHWC one with H = W = 1, whose memory is row-major too. */
dt_tensor *dt_tensor_view(dt_tensor *t, int ndim, const int64_t *shape);

/* An unscoped view of numel(shape) elements of t's storage from element `offset` on, in
 * `layout` (shares the storage; freeing it leaves t alone): a parameter's gradient inside one
 * flat buffer. */
dt_tensor *dt_tensor_view_at(dt_tensor *t, int64_t offset, int ndim, const int64_t *shape, dt_layout layout);
/* An unscoped view with the same shape, dtype and layout (shares storage). */
dt_tensor *dt_tensor_alias(const dt_tensor *t);

void dt_tensor_free(dt_tensor *t);     /* frees a caller-owned tensor (and its grad) */
void dt_tensor_keep(dt_tensor *t);     /* detaches from the current scope: caller owns it */
void dt_tensor_release(dt_tensor *t);  /* drops the data (and grad) early; struct stays */
void dt_tensor_set_name(dt_tensor *t, const char *name);

/* Scopes: every tensor made inside is freed at the matching end (innermost first). */
void dt_scope_begin(void);
void dt_scope_end(void);
/* Frees the calling thread's (empty) scope lists: a replica's thread calls it before it ends. */
void dt_scope_release_thread(void);

/* Data movement and filling (any device). */
/* Same numel, dtype and layout; any devices. (Between dtypes or layouts: dt_convert, dt_ops.h.) */
void dt_tensor_copy(dt_tensor *dst, const dt_tensor *src);
void dt_tensor_upload(dt_tensor *t, const void *host);      /* host bytes, as stored -> t */
void dt_tensor_download(const dt_tensor *t, void *host);    /* t -> host bytes (synchronous) */
void dt_tensor_fill(dt_tensor *t, float v); /* v rounded to the dtype; queued on the GPU for f32 (and 0) */
/* Random fills (f32, or bf16 rounded from the same f32 draws). */
void dt_tensor_fill_normal(dt_tensor *t, dt_rng *rng, float mean, float std);
void dt_tensor_fill_uniform(dt_tensor *t, dt_rng *rng, float lo, float hi);
/* A malloc'd copy of the values as fp32, in logical (row-major [N, C, H, W]) order, whatever the
 * dtype and layout (i32 values are exact up to 2^24). */
float *dt_tensor_host_copy(const dt_tensor *t);
/* The inverse: t's elements from fp32 values in logical order, rounded to its dtype. */
void dt_tensor_set_values(dt_tensor *t, const float *values);

/* Typed access to the data: fatal, naming the tensor and both dtypes, when t holds another
 * dtype (or was released). */
float *dt_data_f32(const dt_tensor *t);
int32_t *dt_data_i32(const dt_tensor *t);
uint8_t *dt_data_u8(const dt_tensor *t);

/* Shapes. */
/* Elements of a shape; -1 when a dimension is negative or the product overflows int64. */
int64_t dt_numel(int ndim, const int64_t *shape);
int dt_same_shape(const dt_tensor *a, const dt_tensor *b);
char *dt_shape_str(const dt_tensor *t, char *buf, int len); /* "[64, 3, 224, 224]" */
/* "[64, 3, 224, 224] bf16 nhwc cuda" */
char *dt_tensor_desc(const dt_tensor *t, char *buf, int len);
/* Fatal, naming the op and both shapes, when the shapes differ. */
void dt_require_same_shape(const char *op, const dt_tensor *a, const dt_tensor *b);
void dt_require_same_device(const char *op, const dt_tensor *a, const dt_tensor *b);
void dt_require_ndim(const char *op, const char *arg, const dt_tensor *t, int ndim);
void dt_require_live(const char *op, const dt_tensor *t);
/* Fatal, naming the op, the argument and what it holds, unless t has this dtype / layout. */
void dt_require_dtype(const char *op, const char *arg, const dt_tensor *t, dt_dtype dtype);
void dt_require_layout(const char *op, const char *arg, const dt_tensor *t, dt_layout layout);
/* Fatal unless a and b have the same dtype and layout. */
void dt_require_same_type(const char *op, const dt_tensor *a, const dt_tensor *b);
/* Bytes of t's data. */
static inline size_t dt_tensor_bytes(const dt_tensor *t) { return (size_t)t->numel * dt_dtype_size(t->dtype); }


#define DT_N(t) ((t)->shape[0])
#define DT_C(t) ((t)->shape[1])
#define DT_H(t) ((t)->shape[2])
#define DT_W(t) ((t)->shape[3])

DT_PUBLIC_END

/* The tape's hooks into tensor lifetimes: the tensor sits below the autograd engine and calls
 * none of it by name; core/dt_autograd.c sets them at load time. scope_root_end runs when the
 * outermost scope ends (before its tensors are freed: nodes point at them), forget when a
 * tensor the tape knows (t->node, t->tape_uses or t->tape_saved) is freed. */
typedef struct {
    void (*scope_root_end)(void);
    void (*forget)(dt_tensor *t);
} dt_tensor_tape_hooks;
void dt_tensor_set_tape_hooks(dt_tensor_tape_hooks hooks);
#ifdef __cplusplus
}
#endif
#endif
