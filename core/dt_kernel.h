/* dt_kernel.h: the op tables - which kernel computes an op for a (device, dtype, layout).
 *
 * Every op that launches kernels declares, next to its code, one table of the combinations it
 * implements (after ggml's (backend, type) tables):
 *
 *   typedef void relu_fn(int64_t n, const void *x, void *y);
 *   DT_OP_TABLE(relu_k, "relu", relu_fn,
 *       DT_KERNEL(relu_k, DT_CPU, DT_F32, DT_ANY_LAYOUT, dt_relu_fwd_f32_cpu),
 *       DT_KERNEL_CUDA(relu_k, DT_GPU, DT_F32, DT_ANY_LAYOUT, dt_relu_fwd_f32_cuda), ...)
 *   DT_PICK(relu_k, x->dev, x->dtype, x->layout)(n, x->data, y->data);
 *
 * A new dtype or backend is then one entry, not a set of #ifdefs. A combination the table lacks
 * is refused with one message naming the op, what was asked and what exists:
 *   "deftc: error at ...: relu: no kernel for bf16 nchw on the cpu (has: f32 any cpu, ...)"
 * Each entry's function is type-checked against the table's signature at compile time. In a
 * CUDA=0 build DT_KERNEL_CUDA entries exist with no function and are refused with that reason.
 * Every table registers itself at load time, so `build/test --ops` prints the whole op x
 * dtype x layout x device matrix (docs/DESIGN.md carries it). */
#ifndef DT_KERNEL_H
#define DT_KERNEL_H

#include "core/dt_api.h"

#include <stdio.h>

#include "core/dt_device.h"
#include "core/dt_dtype.h"

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

/* The layout field of an entry for ops that do not depend on the layout (elementwise). */
#define DT_ANY_LAYOUT (-1)
/* The dtype field of an entry for kernels whose element type is not a dt_dtype (the C API's
 * float64 reference, ops/deform/deform_f64.h): the entry matches by device (and layout) alone,
 * and a caller picks it with DT_ANY_DTYPE. */
#define DT_ANY_DTYPE (-1)

typedef void (*dt_kernel_fn)(void);

typedef struct {
    dt_dev dev;
    int dtype;       /* dt_dtype, or DT_ANY_DTYPE */
    int layout;      /* dt_layout, or DT_ANY_LAYOUT */
    dt_kernel_fn fn; /* NULL: a CUDA entry in a CUDA=0 build */
} dt_kernel_entry;

typedef struct dt_op_table {
    const char *op;
    const dt_kernel_entry *entries;
    int n;
    struct dt_op_table *next; /* the registry's list */
} dt_op_table;

/* The entry's function, or fatal naming the op, the combination asked for and those there are. */
dt_kernel_fn dt_kernel_lookup(const dt_op_table *t, dt_dev dev, dt_dtype dtype, dt_layout layout);
/* 1 when the table has a usable entry for the combination. */
int dt_kernel_has(const dt_op_table *t, dt_dev dev, dt_dtype dtype, dt_layout layout);
/* The registered table of op `op` (its name, as build/test --ops prints it), or NULL. */
const dt_op_table *dt_op_table_find(const char *op);
void dt_op_table_register(dt_op_table *t);
/* Prints one line per op: the combinations it has (the matrix in docs/DESIGN.md). */
void dt_op_tables_print(FILE *f);

/* Defines `static dt_op_table name` for op `opname` (a string) whose kernels have the function
 * type fn_type, from DT_KERNEL / DT_KERNEL_CUDA entries naming the same table, and registers it
 * at load time. */
#define DT_OP_TABLE(name, opname, fn_type, ...)                                                 \
    typedef fn_type *name##_fn_t;                                                               \
    static const dt_kernel_entry name##_entries[] = {__VA_ARGS__};                              \
    static dt_op_table name = {opname, name##_entries,                                          \
                               (int)(sizeof name##_entries / sizeof name##_entries[0]), 0};     \
    __attribute__((constructor)) static void name##_register(void) { dt_op_table_register(&name); }

/* A table several files use: defined once (DT_OP_TABLE_SHARED, in one .c file) and declared in
 * a header (DT_OP_TABLE_DECL) with the same function type. */
#define DT_OP_TABLE_DECL(name, fn_type) \
    typedef fn_type *name##_fn_t;       \
    extern dt_op_table name;
#define DT_OP_TABLE_SHARED(name, opname, ...)                                                    \
    static const dt_kernel_entry name##_entries[] = {__VA_ARGS__};                              \
    dt_op_table name = {opname, name##_entries, (int)(sizeof name##_entries / sizeof name##_entries[0]), 0}; \
    __attribute__((constructor)) static void name##_register(void) { dt_op_table_register(&name); }

/* An entry of table t; f must have exactly the table's type (the conditional makes the
 * compiler check it). */
#define DT_KERNEL(t, dev, dtype, layout, f) {(dev), (dtype), (layout), (dt_kernel_fn)(1 ? (f) : (t##_fn_t)0)}
#ifdef DT_CUDA
#define DT_KERNEL_CUDA(t, dev, dtype, layout, f) DT_KERNEL(t, dev, dtype, layout, f)
#else
#define DT_KERNEL_CUDA(t, dev, dtype, layout, f) {(dev), (dtype), (layout), (dt_kernel_fn)0}
#endif

/* The common pair of entries: the CPU twin fn##_cpu and the CUDA kernel fn##_cuda, for dtype d
 * and layout l (a table of such pairs can take __typeof__(fn##_cpu) as its function type). */
#define DT_TWINS(t, fn, d, l) DT_KERNEL(t, DT_CPU, d, l, fn##_cpu), DT_KERNEL_CUDA(t, DT_GPU, d, l, fn##_cuda)

/* The three activation formats of a step (f32 NCHW, f32 NHWC, bf16 NHWC), twins each, for kernels
 * named fn##_f32_nchw_cpu ... fn##_bf16_nhwc_cuda (batch norm, pooling). */
#define DT_ACT_FORMATS(t, fn)                                                                        \
    DT_TWINS(t, fn##_f32_nchw, DT_F32, DT_NCHW), DT_TWINS(t, fn##_f32_nhwc, DT_F32, DT_NHWC),         \
        DT_TWINS(t, fn##_bf16_nhwc, DT_BF16, DT_NHWC)

/* The kernel of table t for (dev, dtype, layout), as a pointer of the table's type. */
#define DT_PICK(t, dev, dtype, layout) ((t##_fn_t)dt_kernel_lookup(&(t), (dev), (dtype), (layout)))

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
