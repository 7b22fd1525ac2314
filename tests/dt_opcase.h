/* dt_opcase.h: one definition of an op case, run in every mode (after ggml's
 * test-backend-ops).
 *
 * A case names the op, the inputs' logical shapes and kinds, the (dtype, layout) combinations
 * it runs in, and a build function that applies the op. The framework makes the inputs from
 * fresh random values (the test RNG), converts them to each combination, and runs:
 *
 *   gradcheck  CPU, each f32 combination: finite differences of L = sum(out * R) against the
 *              tape's gradients (dt_check.h's dt_gradcheck).
 *   bf16       CPU twin in bf16 NHWC against the same case in f32 NCHW on the same logical
 *              values: the relative L2 error of the output and of every gradient must be at
 *              most the case's bound (bf16_bound; default 2^-6), no element may be off by more than
 *              4x that bound of its tensor's largest magnitude - and the output must differ
 *              from fp32 somewhere, so that a path that silently stayed in fp32 fails (the
 *              format bound is only a test if bf16 ran).
 *   parity     GPU against the CPU twin, each combination, same inputs: output and every
 *              gradient within tol (f32 1e-5 by default, bf16 1e-2: a bf16 result can flip
 *              one rounding where the two sum in another order), no NaN (the GPU runner
 *              poisons device memory with NaN, so an element a kernel forgot to write fails).
 *   perf       `build/test --gpu --perf [FILTER]`: forward + backward of each case on the GPU,
 *              median of 20 after 3 warm-ups, one line per (case, combination).
 *
 * Register a table with DT_OPCASES(name, cases) (DT_OPCASES_FN for one made at run time): it
 * adds the CPU tests `cases_<name>_gradcheck` and `cases_<name>_bf16` and the GPU test
 * `gpu_cases_<name>_parity` (which `--perf` times). */
#ifndef DT_OPCASE_H
#define DT_OPCASE_H

#include <stdint.h>

#include "core/dt_device.h"
#include "core/dt_dtype.h"
#include "core/dt_tensor.h"

/* The (dtype, layout) combinations of a case, as bits. A case runs the combinations its op
 * tables have (`ops`: a combination runs on a device when one of the tables has a kernel for it
 * there; a case whose activations are not 4-D has no f32 nhwc combination, its f32 and bf16 are
 * row-major), within `types` when that is not 0. A combination the case asks for (types) that
 * the tables lack is skipped with its name. */
#define DT_F32_NCHW 1u
#define DT_F32_NHWC 2u
#define DT_BF16_NHWC 4u
#define DT_OPCASE_MAX_OPS 3

typedef enum {
    DT_IN_ACT = 0,   /* an activation: in the combination's dtype and layout */
    DT_IN_WEIGHT,    /* a weight of a product: an f32 parameter in the combination's layout, the op
                        gets its bf16 working copy in bf16 combinations (its gradient is the f32
                        master's) */
    DT_IN_F32,       /* stays f32 row-major in every combination (biases, offsets, masks) */
    DT_IN_LABELS,    /* int32 class indices in [0, classes) (never differentiated) */
    DT_IN_U8         /* uint8 values uniform in [0, 255], row-major in every combination (an image
                        batch [N, H, W, 3]; never differentiated) */
} dt_opcase_kind;

typedef struct {
    int ndim;
    int64_t shape[4];
    dt_opcase_kind kind;
    float std;    /* values N(0, std) (default 1); labels: the number of classes */
    int grad;     /* the op is differentiated with respect to it */
} dt_opcase_input;

typedef struct dt_opcase dt_opcase;

/* Applies the op to inputs in[0 .. n_in) (already in the combination's types); state: what
 * state_new made for this device (NULL when the case has none). */
typedef dt_tensor *(*dt_opcase_build)(const dt_opcase *c, dt_tensor **in, void *state);
/* The same for an op whose output types are the caller's choice rather than its inputs' (the
 * image normalization from u8): it gets the combination's dtype and layout. */
typedef dt_tensor *(*dt_opcase_build_as)(const dt_opcase *c, dt_tensor **in, dt_dtype dtype, dt_layout layout);

#define DT_OPCASE_MAX_IN 8

struct dt_opcase {
    const char *name;          /* "conv2d 3x3 s2 odd" */
    /* the op tables of the kernels the case runs (dt_op_table_find names: "maxpool2d"); none
     * only for an op without kernels (a view), which then runs `types` as written */
    const char *ops[DT_OPCASE_MAX_OPS];
    unsigned types;            /* 0: every combination of the tables; else only these */
    int n_in;
    dt_opcase_input in[DT_OPCASE_MAX_IN];
    dt_opcase_build build;
    dt_opcase_build_as build_as; /* used instead of build when set */
    const void *arg;           /* the op's parameters, read by build */
    /* module state per device and combination (batch norm's running statistics); may be NULL */
    void *(*state_new)(const dt_opcase *c, dt_dev dev, dt_layout layout);
    void (*state_free)(void *state);
    float h, grad_tol;         /* gradcheck step and tolerance (0: 1e-2 each); grad_tol < 0 skips it */
    float bf16_bound;          /* bf16 mode's relative bound (0: 2^-6); < 0 skips the mode */
    float f32_tol, bf16_tol;   /* parity tolerances (0: 1e-5 and 1e-2) */
};

/* The modes, on one table; each returns the number of failing cases. */
int dt_opcase_run_gradcheck(const char *table, const dt_opcase *cases, int n);
int dt_opcase_run_bf16(const char *table, const dt_opcase *cases, int n);
int dt_opcase_run_parity(const char *table, const dt_opcase *cases, int n);

/* The tests of a table (see the header comment). */
#define DT_OPCASES(name, cases)                                                                         \
    DT_TEST(cases_##name##_gradcheck) {                                                                 \
        dt_opcase_run_gradcheck(#name, cases, (int)(sizeof cases / sizeof cases[0]));                   \
    }                                                                                                   \
    DT_TEST(cases_##name##_bf16) { dt_opcase_run_bf16(#name, cases, (int)(sizeof cases / sizeof cases[0])); } \
    DT_GPU_TEST(gpu_cases_##name##_parity) {                                                            \
        dt_opcase_run_parity(#name, cases, (int)(sizeof cases / sizeof cases[0]));                      \
    }

/* The same for a table made at run time: cases_fn(&n) returns it and sets n to its count (the
 * deformable tables, made from tests/cases_deform.c's one case table). */
#define DT_OPCASES_RUN_(name, run, cases_fn)                                                            \
    do {                                                                                                \
        int n_;                                                                                         \
        const dt_opcase *c_ = cases_fn(&n_);                                                            \
        run(#name, c_, n_);                                                                             \
    } while (0)
#define DT_OPCASES_FN(name, cases_fn)                                                                   \
    DT_TEST(cases_##name##_gradcheck) { DT_OPCASES_RUN_(name, dt_opcase_run_gradcheck, cases_fn); }      \
    DT_TEST(cases_##name##_bf16) { DT_OPCASES_RUN_(name, dt_opcase_run_bf16, cases_fn); }                 \
    DT_GPU_TEST(gpu_cases_##name##_parity) { DT_OPCASES_RUN_(name, dt_opcase_run_parity, cases_fn); }

/* The same without the gradcheck test, for a table whose f32 combinations only serve as the bf16
 * mode's reference (their finite differences belong to another table). */
#define DT_OPCASES_NO_GRADCHECK(name, cases)                                                            \
    DT_TEST(cases_##name##_bf16) { dt_opcase_run_bf16(#name, cases, (int)(sizeof cases / sizeof cases[0])); } \
    DT_GPU_TEST(gpu_cases_##name##_parity) {                                                            \
        dt_opcase_run_parity(#name, cases, (int)(sizeof cases / sizeof cases[0]));                      \
    }

#endif
