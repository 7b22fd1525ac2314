/* The pointwise ops, reductions and reshapes of dt_ops.h as op cases (dt_opcase.h): add, mul,
 * relu, relu6, sigmoid, add_relu, sum, mean, reshape, flatten, slice_channels, dropout (its counter
 * reset at every build: one mask, a linear op for the finite differences, the CPU twin's mask
 * on the GPU) - odd sizes (the CUDA
 * kernels' scalar tail), sizes of whole 16-byte packs, 2-D tensors, and ResNet-sized ones for
 * parity, in f32 NCHW, f32 NHWC and bf16 NHWC where the op has them.
 *
 * Some cases add a constant offset first, so that finite differences and bf16 roundings never
 * cross a kink or meet a near-zero sum: relu and add_relu see x + (+-1, by element parity)
 * with x of std 0.1, relu6 x + (-1, 3, 7 by element index mod 3: below, inside and above
 * [0, 6]), sum and mean see x + 1 (a sum far from 0, whose bf16 error is relative). */
#include <stdlib.h>

#include "core/dt_alloc.h"
#include "core/dt_common.h"
#include "tests/dt_opcase.h"
#include "ops/dt_ops.h"
#include "tests/dt_test.h"

typedef enum { ADD, MUL, RELU, RELU6, SIGMOID, ADD_RELU, SUM, MEAN, RESHAPE, FLATTEN, SLICE, DROPOUT } ew_op;
typedef enum { NO_OFFSET, PLUS_MINUS_ONE, PLUS_ONE, RELU6_SIDES } ew_offset;

typedef struct {
    ew_op op;
    ew_offset offset;
    float p; /* DROPOUT: the probability */
} ew_arg;

typedef struct {
    dt_tensor *offset; /* made at the first build, like input 0 */
    dt_tensor *counter; /* DROPOUT: its step counter, back to 0 at every build (one mask for the
                           finite differences, the same on the CPU and the GPU) */
} ew_state;

static void *state_new(const dt_opcase *c, dt_dev dev, dt_layout layout) {
    (void)c, (void)dev, (void)layout;
    return dt_xcalloc(1, sizeof(ew_state));
}

static void state_free(void *state) {
    ew_state *s = state;
    if (s->offset) dt_tensor_free(s->offset);
    if (s->counter) dt_tensor_free(s->counter);
    free(s);
}

static dt_tensor *offset_like(const dt_tensor *x, ew_offset kind) {
    float *v = dt_xmalloc((size_t)x->numel * sizeof(float));
    for (int64_t i = 0; i < x->numel; i++)
        v[i] = kind == PLUS_ONE ? 1.0f : kind == RELU6_SIDES ? -1.0f + 4.0f * (float)(i % 3) : i % 2 ? -1.0f : 1.0f;
    dt_tensor *t = dt_tensor_from_values(x->ndim, x->shape, x->dev, x->dtype, x->layout, v);
    dt_tensor_keep(t);
    free(v);
    return t;
}

static dt_tensor *build(const dt_opcase *c, dt_tensor **in, void *state) {
    const ew_arg *a = c->arg;
    ew_state *s = state;
    dt_tensor *x = in[0];
    if (a->offset != NO_OFFSET) {
        if (!s->offset) s->offset = offset_like(x, a->offset);
        x = dt_add(x, s->offset);
    }
    switch (a->op) {
    case ADD: return dt_add(x, in[1]);
    case MUL: return dt_mul(x, in[1]);
    case RELU: return dt_relu(x);
    case RELU6: return dt_relu6(x);
    case SIGMOID: return dt_sigmoid(x);
    case ADD_RELU: return dt_add_relu(x, in[1]);
    case SUM: return dt_sum(x);
    case MEAN: return dt_mean(x);
    case RESHAPE: {
        int64_t s2[2] = {x->numel / 5, 5};
        return dt_reshape(x, 2, s2);
    }
    case FLATTEN: return dt_flatten2(x);
    case SLICE: return dt_slice_channels(x, 2, 5);
    case DROPOUT:
        if (!s->counter) s->counter = dt_dropout_counter_new(x->dev);
        else dt_tensor_fill(s->counter, 0.0f);
        return dt_dropout(x, a->p, 1234, s->counter, 1);
    }
    return NULL;
}

/* grad: 0 (every mode) or -1 (parity and perf only: a big shape, or an op whose bf16 bound
 * random values cannot meet) */
/* the op table of each op (none: a view) */
#define TABLE_ADD "add"
#define TABLE_MUL "mul"
#define TABLE_RELU "relu"
#define TABLE_RELU6 "relu6"
#define TABLE_SIGMOID "sigmoid"
#define TABLE_ADD_RELU "add_relu"
#define TABLE_SUM "sum"
#define TABLE_MEAN "sum"
#define TABLE_RESHAPE NULL
#define TABLE_FLATTEN NULL
#define TABLE_SLICE "slice_channels (zero fill)"
#define TABLE_DROPOUT "dropout"
#define EW1(label, types_, nd, s0, s1, s2, s3, std, grad, op_, offset_)                                                      \
    {.name = label, .ops = {TABLE_##op_}, .types = types_, .n_in = 1, .grad_tol = grad, .bf16_bound = grad,                              \
     .in = {{nd, {s0, s1, s2, s3}, DT_IN_ACT, std, 1}}, .build = build, .arg = &(const ew_arg){op_, offset_, 0},        \
     .state_new = state_new, .state_free = state_free}
#define EW2(label, types_, nd, s0, s1, s2, s3, std, grad, op_, offset_)                                                      \
    {.name = label, .ops = {TABLE_##op_}, .types = types_, .n_in = 2, .grad_tol = grad, .bf16_bound = grad,                              \
     .in = {{nd, {s0, s1, s2, s3}, DT_IN_ACT, std, 1}, {nd, {s0, s1, s2, s3}, DT_IN_ACT, std, 1}},                  \
     .build = build, .arg = &(const ew_arg){op_, offset_, 0}, .state_new = state_new, .state_free = state_free}
/* bf16: -1 for a 4-D case (the mask goes by the element's place in memory, as PyTorch's does: bf16 NHWC
 * and the f32 NCHW reference drop different logical elements) */
#define DROP(label, types_, nd, s0, s1, s2, s3, p_, grad, bf16)                                                      \
    {.name = label, .ops = {"dropout"}, .types = types_, .n_in = 1, .grad_tol = grad, .bf16_bound = bf16,      \
      .in = {{nd, {s0, s1, s2, s3}, DT_IN_ACT, 1.0f, 1}}, \
     .build = build, .arg = &(const ew_arg){DROPOUT, NO_OFFSET, p_}, .state_new = state_new, .state_free = state_free}
/* a 2-D tensor is row-major in every combination: f32 and bf16 (the views' combinations are
 * written; the others come from the op tables) */
#define TYPES_2D (DT_F32_NCHW | DT_BF16_NHWC)
#define ALL_4D (DT_F32_NCHW | DT_F32_NHWC | DT_BF16_NHWC)

static const dt_opcase ew_cases[] = {
    EW2("add, odd 3x5x7x11 (scalar tail)", 0, 4, 3, 5, 7, 11, 1.0f, 0, ADD, NO_OFFSET),
    EW2("add, 4x8x4x4 (whole packs)", 0, 4, 4, 8, 4, 4, 1.0f, 0, ADD, NO_OFFSET),
    EW2("mul, odd 3x5x7x11", 0, 4, 3, 5, 7, 11, 1.0f, 0, MUL, NO_OFFSET),
    EW1("relu, odd 3x5x7x11", 0, 4, 3, 5, 7, 11, 0.1f, 0, RELU, PLUS_MINUS_ONE),
    EW1("relu, 2-D 7x13", 0, 2, 7, 13, 0, 0, 0.1f, 0, RELU, PLUS_MINUS_ONE),
    EW1("relu6, odd 3x5x7x11", 0, 4, 3, 5, 7, 11, 0.1f, 0, RELU6, RELU6_SIDES),
    EW1("relu6, 4x8x4x4 (whole packs)", 0, 4, 4, 8, 4, 4, 0.1f, 0, RELU6, RELU6_SIDES),
    EW1("relu6, 2-D 7x13", 0, 2, 7, 13, 0, 0, 0.1f, 0, RELU6, RELU6_SIDES),
    EW1("sigmoid, odd 3x5x7x11", 0, 4, 3, 5, 7, 11, 1.0f, 0, SIGMOID, NO_OFFSET),
    EW2("add_relu, odd 3x5x7x11", 0, 4, 3, 5, 7, 11, 0.1f, 0, ADD_RELU, PLUS_MINUS_ONE),
    EW1("sum, odd 3x5x7x11", 0, 4, 3, 5, 7, 11, 1.0f, 0, SUM, PLUS_ONE),
    EW1("sum, 2-D 7x13", 0, 2, 7, 13, 0, 0, 1.0f, 0, SUM, PLUS_ONE),
    EW1("mean, 4x8x4x4", 0, 4, 4, 8, 4, 4, 1.0f, 0, MEAN, PLUS_ONE),
    EW1("reshape 2-D 6x10 -> 12x5", TYPES_2D, 2, 6, 10, 0, 0, 1.0f, 0, RESHAPE, NO_OFFSET),
    EW1("flatten 5x7x1x1 (channels last is row-major here)", ALL_4D, 4, 5, 7, 1, 1, 1.0f, 0, FLATTEN, NO_OFFSET),
    EW1("flatten 2x3x4x5", DT_F32_NCHW, 4, 2, 3, 4, 5, 1.0f, 0, FLATTEN, NO_OFFSET),
    DROP("dropout p 0.2, odd 3x5x7x11", 0, 4, 3, 5, 7, 11, 0.2f, 0, -1),
    DROP("dropout p 0.5, 2-D 4x1280 (mobilenet_v2's classifier)", 0, 2, 4, 1280, 0, 0, 0.5f, 0, 0),
    EW1("slice_channels [2, 5) of 2x7x2x3", DT_F32_NCHW, 4, 2, 7, 2, 3, 1.0f, 0, SLICE, NO_OFFSET),
    EW2("add_relu 64x64x56x56", 0, 4, 64, 64, 56, 56, 1.0f, -1, ADD_RELU, NO_OFFSET),
    EW2("mul 64x64x56x56", 0, 4, 64, 64, 56, 56, 1.0f, -1, MUL, NO_OFFSET),
    EW1("sum of 10M", 0, 4, 10, 1000, 1, 1000, 1.0f, -1, SUM, PLUS_ONE),
    DROP("dropout p 0.2, 64x64x56x56", 0, 4, 64, 64, 56, 56, 0.2f, -1, -1),
};
DT_OPCASES(elementwise, ew_cases)

/* ---- what the ops refuse ---- */

static void add_mixed(void *p) {
    (void)p;
    dt_tensor *a = dt_tensor_new4_as(DT_CPU, DT_F32, DT_NHWC, 1, 2, 3, 3), *b = dt_tensor_new4_as(DT_CPU, DT_BF16, DT_NHWC, 1, 2, 3, 3);
    dt_tensor_fill(a, 1.0f);
    dt_tensor_fill(b, 1.0f);
    dt_add(a, b);
}
static void add_layouts(void *p) {
    (void)p;
    dt_tensor *a = dt_tensor_new4_as(DT_CPU, DT_F32, DT_NCHW, 1, 2, 3, 3), *b = dt_tensor_new4_as(DT_CPU, DT_F32, DT_NHWC, 1, 2, 3, 3);
    dt_tensor_fill(a, 1.0f);
    dt_tensor_fill(b, 1.0f);
    dt_add(a, b);
}
static void relu_i32(void *p) {
    (void)p;
    dt_tensor *a = dt_tensor_new4_as(DT_CPU, DT_I32, DT_NCHW, 1, 2, 3, 3);
    dt_tensor_fill(a, 1.0f);
    dt_relu(a);
}
static void slice_nhwc(void *p) {
    (void)p;
    dt_tensor *a = dt_tensor_new4_as(DT_CPU, DT_F32, DT_NHWC, 1, 4, 3, 3);
    dt_tensor_fill(a, 1.0f);
    dt_slice_channels(a, 1, 2);
}

DT_TEST(elementwise_refuses_mixed_and_missing_types) {
    EXPECT_DEATH(add_mixed, NULL, "add");
    EXPECT_DEATH(add_layouts, NULL, "add");
    EXPECT_DEATH(relu_i32, NULL, "relu: no kernel for i32");
    EXPECT_DEATH(slice_nhwc, NULL, "slice_channels");
}

/* relu6 at and around its kinks, as torch.nn.functional.relu6 (hardtanh(0, 6)) has it:
 * y = min(max(x, 0), 6), and the gradient 1 strictly inside (0, 6), 0 at x = 0 and x = 6 and
 * outside, in f32 and bf16. */
DT_TEST(relu6_values_and_kinks) {
    const float xs[8] = {-2.0f, -0.0f, 0.0f, 0.5f, 3.0f, 5.75f, 6.0f, 7.5f};
    const float ys[8] = {0.0f, 0.0f, 0.0f, 0.5f, 3.0f, 5.75f, 6.0f, 6.0f}, gs[8] = {0, 0, 0, 1, 1, 1, 0, 0};
    const dt_dtype types[2] = {DT_F32, DT_BF16};
    int64_t s[1] = {8};
    for (int k = 0; k < 2; k++) {
        dt_tensor *x = dt_tensor_from_values(1, s, DT_CPU, types[k], DT_NCHW, xs);
        dt_tensor_keep(x);
        x->requires_grad = 1;
        dt_scope_begin();
        dt_tensor *y = dt_relu6(x), *l = dt_sum(y);
        y->retain = l->retain = 1;
        dt_backward(l);
        float *hy = dt_tensor_host_copy(y), *hg = dt_tensor_host_copy(x->grad);
        for (int i = 0; i < 8; i++)
            EXPECT_MSG(hy[i] == ys[i] && hg[i] == gs[i], "relu6 %s of %g: %g (want %g), gradient %g (want %g)",
                       dt_dtype_name(types[k]), xs[i], hy[i], ys[i], hg[i], gs[i]);
        free(hy);
        free(hg);
        dt_scope_end();
        dt_tensor_free(x);
    }
}
