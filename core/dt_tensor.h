/* dt_tensor.h: the tensor type. float32, contiguous, row-major (NCHW for images), up to
 * DT_MAX_DIMS dimensions, on the CPU or the GPU.
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

#include <stdint.h>

#include "dt_device.h"
#include "dt_rng.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DT_MAX_DIMS 8

typedef struct dt_storage {
    float *ptr;
    int64_t numel;
    int refs;
    dt_dev dev;
} dt_storage;

struct dt_node;

typedef struct dt_tensor {
    int ndim;
    int64_t shape[DT_MAX_DIMS];
    int64_t numel;
    dt_dev dev;
    float *data;          /* NULL once released (see dt_tensor_release) */
    dt_storage *storage;

    /* autograd */
    int requires_grad;    /* a leaf that wants a gradient, or computed from one */
    struct dt_tensor *grad; /* same shape and device; owned by this tensor */
    int grad_valid;       /* parameters: 0 after zero_grad, the first contribution overwrites */
    struct dt_node *node; /* the op that produced it (NULL for leaves) */
    int is_param;         /* persistent gradient, updated by the optimizer */
    int no_decay;         /* parameters exempt from weight decay (BN, biases) */
    float lr_mult;        /* parameters: learning-rate multiplier (1 unless set) */
    int retain;           /* keep data after backward (the engine frees activations early) */
    int pending_uses;     /* parameters, during a backward with a grad-ready hook: nodes left */

    /* bookkeeping */
    int scoped;           /* freed by dt_scope_end */
    char name[64];
} dt_tensor;

/* Creation. Data is uninitialized except for the _zeros variants. */
dt_tensor *dt_tensor_new(int ndim, const int64_t *shape, dt_dev dev);
dt_tensor *dt_tensor_zeros(int ndim, const int64_t *shape, dt_dev dev);
/* Like dt_tensor_new but never in a scope: the caller (or the owning tensor) frees it. */
dt_tensor *dt_tensor_new_unscoped(int ndim, const int64_t *shape, dt_dev dev);
dt_tensor *dt_tensor_new1(dt_dev dev, int64_t a);
dt_tensor *dt_tensor_new2(dt_dev dev, int64_t a, int64_t b);
dt_tensor *dt_tensor_new4(dt_dev dev, int64_t n, int64_t c, int64_t h, int64_t w);
dt_tensor *dt_tensor_like(const dt_tensor *t);             /* same shape and device */
dt_tensor *dt_tensor_from_host(int ndim, const int64_t *shape, dt_dev dev, const float *src);
dt_tensor *dt_tensor_to(const dt_tensor *t, dt_dev dev);   /* a copy on `dev` */
/* A view with another shape of the same numel (no copy, no autograd: see dt_reshape). */
dt_tensor *dt_tensor_view(dt_tensor *t, int ndim, const int64_t *shape);

/* An unscoped view of numel(shape) elements of t's storage from element `offset` on (shares
 * the storage; freeing it leaves t alone): a parameter's gradient inside one flat buffer. */
dt_tensor *dt_tensor_view_at(dt_tensor *t, int64_t offset, int ndim, const int64_t *shape);
/* An unscoped view with the same shape (shares storage; freeing it leaves t alone). */
dt_tensor *dt_tensor_alias(const dt_tensor *t);

void dt_tensor_free(dt_tensor *t);     /* frees a caller-owned tensor (and its grad) */
void dt_tensor_keep(dt_tensor *t);     /* detaches from the current scope: caller owns it */
void dt_tensor_release(dt_tensor *t);  /* drops the data (and grad) early; struct stays */
void dt_tensor_set_name(dt_tensor *t, const char *name);

/* Scopes: every tensor made inside is freed at the matching end (innermost first). */
void dt_scope_begin(void);
void dt_scope_end(void);
int dt_scope_depth(void);
/* Frees the calling thread's (empty) scope lists: a replica's thread calls it before it ends. */
void dt_scope_release_thread(void);

/* Data movement and filling (any device). */
void dt_tensor_copy(dt_tensor *dst, const dt_tensor *src); /* same numel, any devices */
void dt_tensor_upload(dt_tensor *t, const float *host);     /* host -> t */
void dt_tensor_download(const dt_tensor *t, float *host);   /* t -> host (synchronous) */
void dt_tensor_fill(dt_tensor *t, float v);
void dt_tensor_fill_normal(dt_tensor *t, dt_rng *rng, float mean, float std);
void dt_tensor_fill_uniform(dt_tensor *t, dt_rng *rng, float lo, float hi);
float *dt_tensor_host_copy(const dt_tensor *t);             /* malloc'd copy of the data */

/* Shapes. */
/* Elements of a shape; -1 when a dimension is negative or the product overflows int64. */
int64_t dt_numel(int ndim, const int64_t *shape);
int dt_same_shape(const dt_tensor *a, const dt_tensor *b);
char *dt_shape_str(const dt_tensor *t, char *buf, int len); /* "[64, 3, 224, 224]" */
/* Fatal, naming the op and both shapes, when the shapes differ. */
void dt_require_same_shape(const char *op, const dt_tensor *a, const dt_tensor *b);
void dt_require_same_device(const char *op, const dt_tensor *a, const dt_tensor *b);
void dt_require_ndim(const char *op, const char *arg, const dt_tensor *t, int ndim);
void dt_require_live(const char *op, const dt_tensor *t);

#define DT_N(t) ((t)->shape[0])
#define DT_C(t) ((t)->shape[1])
#define DT_H(t) ((t)->shape[2])
#define DT_W(t) ((t)->shape[3])

#ifdef __cplusplus
}
#endif
#endif
