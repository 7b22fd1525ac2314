/* deform_testutil.h: shared helpers of the deformable tests (CPU and GPU). */
#ifndef DT_DEFORM_TESTUTIL_H
#define DT_DEFORM_TESTUTIL_H

#include "ops/conv/conv_geom.h"
#include "core/dt_tensor.h"
#include "ops/deform/dt_deform.h"

/* A deformable problem: x [n, c, h, w], cout output channels, the geometry, `groups` offset
 * groups, a mask (DCNv2) and a bias or not, the offsets' distribution. */
typedef struct {
    const char *name;
    int64_t n, c, h, w, cout;
    dt_conv_geom g;
    int groups, mask, bias;
    float off_mean, off_std; /* offsets ~ off_mean + N(0, off_std) */
} dt_deform_case;

/* ---- the deformable tests' one case table (tests/cases_deform.c): every problem any of them
 * runs is a row, and says which suites run it (its `runs` bits, each suite reading its rows in
 * table order):
 *   DT_DC_OP        the op cases of the op, dt_deform_conv2d_mode in `mode` (cases_deform_*:
 *                   CPU finite differences, the bf16 bound, GPU parity of each combination, perf)
 *   DT_DC_LAYER     the op cases of the deft layer's node (cases_deform_deft_*)
 *   DT_DC_KERNELS   tests/test_deform_gpu.c: every channels-last kernel against its CPU twin,
 *                   the layer's tiles, bitwise determinism (every third row), a second device
 *                   (the first)
 *   DT_DC_CPU_DEFT  tests/test_deft.c: deft against the NCHW reference on the CPU at every knob,
 *                   and the inverse index's invariants
 *   DT_DC_REFERENCE tests/test_deform.c: the NCHW reference against the sum written out
 *   DT_DC_TF32      tests/test_precision.c: both modes with TF32 products on the GPU, within the
 *                   format's bound of the fp32 CPU reference
 *   DT_DC_GPU_LAYER tests/test_deform_gpu.c: the GPU's deft layer (dt_deform_conv) at every tile,
 *                   swizzle and halo against the CPU's unfused layer; bitwise determinism (the
 *                   first row)
 *   DT_DC_GPU_RESNET tests/test_deform_gpu.c: the deft layer against the unfused layer on the GPU,
 *                   ResNet's shapes
 *   DT_DC_CPU_LAYER tests/test_deft.c: the deft layer against the unfused layer on the CPU at
 *                   every knob
 * The op cases' fields (knobs, chunk, residual, offw, grad, bf16, types) are theirs; the other
 * suites read the problem (s) with its offsets' distribution (the layer suites: mask is DCNv2,
 * and the suite makes the offsets from its layer's offset conv, see the rows). */
enum {
    DT_DC_OP = 1u,
    DT_DC_LAYER = 2u,
    DT_DC_KERNELS = 4u,
    DT_DC_CPU_DEFT = 8u,
    DT_DC_REFERENCE = 16u,
    DT_DC_TF32 = 32u,
    DT_DC_GPU_LAYER = 64u,
    DT_DC_GPU_RESNET = 128u,
    DT_DC_CPU_LAYER = 256u,
    DT_DC_ALL = 511u
};

/* The knobs an op case sets (deform_plan.h); halo: the staged margin (stage only). */
typedef struct {
    int dx, fuse, stage, det, halo;
} dt_deform_knob_set;

typedef struct {
    dt_deform_case s;
    unsigned runs;                  /* DT_DC_* */
    dt_deform_mode mode;            /* DT_DC_OP: the op's mode (the layer's node is always deft) */
    const dt_deform_knob_set *knobs; /* the op cases' knobs */
    int chunk;    /* images per chunk (0: the default column budget, one chunk here) */
    int residual; /* y + x (Cout = C, same size): x's gradient accumulates (beta 1) */
    float offw;   /* DT_DC_LAYER: the offset weights' std (offsets that vary with x by ~offw*sqrt(C*K) px) */
    float grad, bf16; /* the op case's grad_tol and bf16_bound (0: run, default; -1: skipped, see the row) */
    unsigned types;   /* the op case's combinations (0: every one its op tables have) */
} dt_deform_row;

/* The problem of the i-th row (from 0, in table order) that runs in `suite` (a DT_DC_* bit), or
 * NULL past its last:  for (int i = 0; (c = dt_deform_case_at(DT_DC_KERNELS, i)); i++) ... */
const dt_deform_case *dt_deform_case_at(unsigned suite, int i);

/* Offsets for a case, with every sample coordinate's fractional part kept in [0.15, 0.85]
 * (away from the kinks of bilinear sampling at integers) when avoid_kinks is set. */
dt_tensor *dt_test_offsets(const dt_deform_case *c, int64_t Ho, int64_t Wo, int avoid_kinks);
/* The op's five inputs for a case, each wanting a gradient: x ~ N(0, 1), offsets as
 * dt_test_offsets, mask ~ U(0.1, 1) (or NULL), weight ~ N(0, 1/(C*K)), bias ~ N(0, 1) (or NULL). */
void dt_test_deform_inputs(const dt_deform_case *c, int avoid_kinks, dt_tensor **in);
/* The dt_deform_conv layer as a function of its input and parameters, for dt_gradcheck: in[1..4]
 * (weight, off_weight, off_bias, bias) are put into the layer `layer` (a dt_deform_conv *),
 * whose forward then runs on in[0] (x). */
dt_tensor *dt_test_deform_layer_forward(dt_tensor **in, void *layer);
/* The deformable convolution written out from the definition, in double (the oracle). */
void dt_test_deform_direct(const dt_deform_case *c, const float *x, const float *off, const float *mask, const float *w,
                           const float *bias, int64_t Ho, int64_t Wo, float *y);

/* ---- the om pack (ops/deform/om_pack.h): its problems and fields ---- */
/* nb images of P positions, GK = groups x taps, with or without a mask; om's row stride is the
 * plan's, OCS = 4 * ceil(OC / 4). The table crosses the CUDA tiles' edges (64 positions, 32
 * columns) and has padding columns and none. */
typedef struct {
    int64_t nb, P, GK;
    int mask;
} dt_om_pack_case;
extern const dt_om_pack_case dt_om_pack_cases[];
extern const int dt_om_pack_n_cases;
static inline int64_t dt_om_pack_ocs(const dt_om_pack_case *c) {
    const int64_t oc = (c->mask ? 3 : 2) * c->GK;
    return (oc + 3) / 4 * 4;
}
/* The i-th (0..3) field format: f32 / bf16 x NCHW / NHWC. */
dt_deform_field_fmt dt_test_field_fmt(int i);
/* A field [nb, Cf, P] ~ N(0, 2) stored in format f, in host memory (dt_dtype_size(f.dtype) per element). */
void *dt_test_field(int64_t nb, int64_t Cf, int64_t P, dt_deform_field_fmt f);
/* A field [nb, Cf, P] in f's dtype and layout as a channel slice of a wider one, [nb, Cf + 5, P]
 * from channel 3 (its pitch in fmt), and a dense copy of it in f's dtype and layout - host
 * memory, wide and dense to free. */
typedef struct {
    void *wide;           /* [nb, Cf + 5, P], bytes of it */
    size_t bytes;
    const void *slice;    /* into wide, read with fmt */
    dt_deform_field_fmt fmt;
    void *dense;          /* [nb, Cf, P] dense */
} dt_test_field_slice;
dt_test_field_slice dt_test_field_sliced(int64_t nb, int64_t Cf, int64_t P, dt_deform_field_fmt f);

#endif
