/* The C API over dt_deform_forward_raw / dt_deform_backward_raw (see dt_deform_api.h).
 *
 * x, y and their gradients define the plan's dtype and layout and are handed to the kernels as
 * they are. The weight, the offsets and the mask - and their gradients - are handed over as
 * they are when they already are in the format the kernels read (the weight in x's dtype and
 * layout, offsets and mask f32 NCHW); otherwise each goes through a scratch buffer in that
 * format, converted with one dt_convert kernel on the way in (inputs) or out (gradients). */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "convert.h"
#include "deform_run.h"
#include "dt_alloc.h"
#include "dt_deform.h"
#include "dt_deform_api.h"
#include "dt_device.h"
#include "dt_shared_kernels.h"
#include "dt_layers.h"
#ifdef DT_CUDA
#include "dt_cuda.h"
#endif

static char g_err[512];

const char *dt_deform_api_error(void) { return g_err; }

static int fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    return -1;
}

int dt_deform_api_out_size(const dt_deform_desc *d, int *ho, int *wo) {
    if (!d) return fail("descriptor is NULL");
    if (d->n < 1 || d->c < 1 || d->h < 1 || d->w < 1 || d->cout < 1)
        return fail("sizes must be positive (n %d c %d h %d w %d cout %d)", d->n, d->c, d->h, d->w, d->cout);
    if (d->kh < 1 || d->kw < 1 || d->stride_h < 1 || d->stride_w < 1 || d->dil_h < 1 || d->dil_w < 1 || d->pad_h < 0 ||
        d->pad_w < 0)
        return fail("invalid geometry: kernel %dx%d stride %dx%d pad %dx%d dilation %dx%d", d->kh, d->kw, d->stride_h,
                    d->stride_w, d->pad_h, d->pad_w, d->dil_h, d->dil_w);
    if (d->offset_groups < 1 || d->c % d->offset_groups)
        return fail("%d channels cannot be split into %d offset groups", d->c, d->offset_groups);
    int64_t h = dt_conv_out_size(d->h, d->kh, d->stride_h, d->pad_h, d->dil_h);
    int64_t w = dt_conv_out_size(d->w, d->kw, d->stride_w, d->pad_w, d->dil_w);
    if (h < 1 || w < 1) return fail("input %dx%d is too small for the kernel: output would be %lldx%lld", d->h, d->w, (long long)h, (long long)w);
    if (ho) *ho = (int)h;
    if (wo) *wo = (int)w;
    return 0;
}

/* The weight, offsets and mask may be f32 or bf16 in either layout (converted when needed). */
static int check_format(const char *field, const char *what, int dtype, int layout) {
    if (dtype != DT_F32 && dtype != DT_BF16)
        return fail("desc.%s_dtype (%s) is %d (%s): f32 (%d) or bf16 (%d)", field, what, dtype,
                    (unsigned)dtype < DT_NUM_DTYPES ? dt_dtype_name((dt_dtype)dtype) : "not a dt_dtype", DT_F32, DT_BF16);
    if (layout != DT_NCHW && layout != DT_NHWC)
        return fail("desc.%s_layout (%s) is %d: nchw (%d) or nhwc (%d)", field, what, layout, DT_NCHW, DT_NHWC);
    return 0;
}

static int check_mode(int mode) {
    int impl = mode & ~(DT_DEFORM_API_DETERMINISTIC | DT_DEFORM_API_TF32);
    if (impl != DT_DEFORM_API_UNFUSED && impl != DT_DEFORM_API_DEFT)
        return fail("unknown mode %d (DT_DEFORM_API_UNFUSED or DT_DEFORM_API_DEFT, optionally | DT_DEFORM_API_DETERMINISTIC "
                    "and | DT_DEFORM_API_TF32; bf16 is the descriptor's dtype, not a flag)", mode);
    return 0;
}

/* The descriptor's version and formats, and the plan they make with the mode; 0 on success. */
static int check_desc(const dt_deform_desc *d, int mode, dt_deform_plan *p) {
    if (d->size != (int)sizeof *d)
        return fail("desc.size is %d, not sizeof(dt_deform_desc) = %d: set it (this library knows that version of the "
                    "struct only; a caller's struct with other fields is from another version of dt_deform_api.h)",
                    d->size, (int)sizeof *d);
    if ((unsigned)d->dtype >= DT_NUM_DTYPES || (d->layout != DT_NCHW && d->layout != DT_NHWC))
        return fail("desc.dtype %d / desc.layout %d (x, y and their gradients) are not a dt_dtype / dt_layout", d->dtype,
                    d->layout);
    if (check_format("weight", "weight and grad_weight", d->weight_dtype, d->weight_layout) ||
        check_format("offset", "offset and grad_offset", d->offset_dtype, d->offset_layout) ||
        check_format("mask", "mask and grad_mask", d->mask_dtype, d->mask_layout))
        return -1;
    if ((mode & DT_DEFORM_API_TF32) && d->dtype != DT_F32)
        return fail("DT_DEFORM_API_TF32 is for f32 x; %s x always multiplies %s operands with fp32 sums",
                    dt_dtype_name((dt_dtype)d->dtype), dt_dtype_name((dt_dtype)d->dtype));
    dt_conv_geom g = {d->kh, d->kw, d->stride_h, d->stride_w, d->pad_h, d->pad_w, d->dil_h, d->dil_w};
    dt_deform_knobs k = dt_deform_knobs_default();
    k.deterministic = (mode & DT_DEFORM_API_DETERMINISTIC) != 0;
    dt_math math = (mode & DT_DEFORM_API_TF32) ? DT_MATH_TF32 : DT_MATH_FP32;
    dt_deform_mode dm = (mode & DT_DEFORM_API_DEFT) ? DT_DEFORM_DEFT : DT_DEFORM_UNFUSED;
    const char *bad = dt_deform_plan_init(p, d->n, d->c, d->h, d->w, d->cout, g, d->offset_groups, d->has_mask,
                                          dm, &k, dt_deform_col_budget());
    if (bad) return fail("%s", bad);
    bad = dt_deform_plan_types(p, (dt_dtype)d->dtype, (dt_layout)d->layout, math, dt_deform_col_budget());
    if (bad) return fail("x, y and their gradients (desc.dtype %s, desc.layout %s): %s", dt_dtype_name((dt_dtype)d->dtype),
                         dt_layout_name((dt_layout)d->layout), bad);
    return 0;
}

int dt_deform_api_check(const dt_deform_desc *d, int mode) {
    dt_deform_plan p;
    if (dt_deform_api_out_size(d, NULL, NULL) || check_mode(mode)) return -1;
    return check_desc(d, mode, &p);
}

/* What forward and backward check before touching the buffers: whether the call can run here
 * at all (without a GPU that is the answer, whatever the descriptor), then the descriptor;
 * fills the plan. */
static int plan_of(const dt_deform_desc *d, int mode, dt_deform_plan *p) {
    if (dt_deform_api_out_size(d, NULL, NULL) || check_mode(mode)) return -1;
    if (!dt_built_with_cuda()) return fail("libdeftc was built without CUDA");
    if (dt_gpu_count() == 0) return fail("no CUDA device is visible");
    return check_desc(d, mode, p);
}

/* The buffers the kernels read with vector loads (x, y, weight and their gradients). */
static int aligned(const void *const *ptrs, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if ((uintptr_t)ptrs[i] % 16)
            return fail("%s (%p) is not 16-byte aligned: deftc reads it with vector loads (a PyTorch view with a storage "
                        "offset can be; copy it)", names[i], ptrs[i]);
    return 0;
}

/* The CUDA device all of a call's buffers live on; deftc then runs on it (dt_gpu_use). */
static int device_of(const void *const *ptrs, const char *const *names, int n) {
#ifdef DT_CUDA
    int dev = -1;
    for (int i = 0; i < n; i++) {
        if (!ptrs[i]) continue;
        struct cudaPointerAttributes a;
        if (cudaPointerGetAttributes(&a, ptrs[i]) != cudaSuccess) {
            cudaGetLastError();
            return fail("%s is not a CUDA pointer", names[i]);
        }
        if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
            return fail("%s is host memory: deftc's API takes CUDA device pointers", names[i]);
        if (dev < 0) dev = a.device;
        else if (a.device != dev) return fail("%s is on CUDA device %d, the input on device %d", names[i], a.device, dev);
    }
    if (dev < 0) return fail("no device buffer given");
    dt_gpu_use(dev);
    return 0;
#else
    (void)ptrs;
    (void)names;
    (void)n;
    return fail("libdeftc was built without CUDA");
#endif
}

/* ---- buffers in the kernels' format ---- */

/* The scratch buffers of one call: released (in stream order) once its work is queued. */
typedef struct {
    void *p[6];
    int n;
} scratch;

static void *scratch_alloc(scratch *s, size_t bytes) { return s->p[s->n++] = dt_dev_alloc(DT_GPU, bytes); }

static void scratch_free(scratch *s) {
    for (int i = 0; i < s->n; i++) dt_dev_free(DT_GPU, s->p[i]);
}

/* A tensor's element count as dt_convert sees it: N x C x P (an image batch, or a weight with
 * N = cout, P = kh*kw), and its format. */
typedef struct {
    int64_t N, C, P;
    dt_dtype dtype;
    dt_layout layout;
} fmt;

static int same(fmt a, fmt b) { return a.dtype == b.dtype && a.layout == b.layout; }

/* An input the kernels read in format k: the caller's buffer when it is in k already, else a
 * scratch copy converted to k (NULL stays NULL). */
static const void *input_as(scratch *s, const void *src, fmt f, fmt k) {
    if (!src || same(f, k)) return src;
    void *dst = scratch_alloc(s, (size_t)(f.N * f.C * f.P) * dt_dtype_size(k.dtype));
    DT_PICK(dt_convert_k, DT_GPU, f.dtype, DT_NCHW)(f.N, f.C, f.P, src, f.dtype, f.layout, 0.0f, dst, k.dtype, k.layout);
    return dst;
}

/* Where the kernels write a gradient they make in format k: the caller's buffer (format f) when
 * the two agree, else scratch that grad_out converts into it afterwards (NULL stays NULL). */
static void *grad_as(scratch *s, void *dst, fmt f, fmt k) {
    if (!dst || same(f, k)) return dst;
    return scratch_alloc(s, (size_t)(f.N * f.C * f.P) * dt_dtype_size(k.dtype));
}

static void grad_out(const void *made, fmt k, void *dst, fmt f) {
    if (made != dst) DT_PICK(dt_convert_k, DT_GPU, k.dtype, DT_NCHW)(f.N, f.C, f.P, made, k.dtype, k.layout, 0.0f, dst, f.dtype, f.layout);
}

/* The caller's formats of the weight, offsets and mask, and what the kernels take. */
typedef struct {
    fmt w, off, mask;       /* the caller's */
    fmt kw, koff, kmask;    /* the kernels': weight in x's format, offsets and mask f32 NCHW */
    fmt kdw;                /* the weight gradient as the kernels make it: f32 in x's layout */
} formats;

static formats formats_of(const dt_deform_desc *d, const dt_deform_plan *p) {
    formats f;
    f.w = (fmt){p->Cout, p->C, p->K, (dt_dtype)d->weight_dtype, (dt_layout)d->weight_layout};
    f.off = (fmt){p->N, 2 * p->GK, p->P, (dt_dtype)d->offset_dtype, (dt_layout)d->offset_layout};
    f.mask = (fmt){p->N, p->GK, p->P, (dt_dtype)d->mask_dtype, (dt_layout)d->mask_layout};
    f.kw = (fmt){p->Cout, p->C, p->K, p->dtype, p->layout};
    f.koff = (fmt){p->N, 2 * p->GK, p->P, DT_F32, DT_NCHW};
    f.kmask = (fmt){p->N, p->GK, p->P, DT_F32, DT_NCHW};
    f.kdw = (fmt){p->Cout, p->C, p->K, DT_F32, p->layout};
    return f;
}

int dt_deform_api_forward(const dt_deform_desc *d, int mode, const void *x, const void *offset, const void *mask,
                          const void *weight, const float *bias, void *y, void *stream) {
    dt_deform_plan p;
    if (plan_of(d, mode, &p)) return -1;
    if (!x || !offset || !weight || !y) return fail("x, offset, weight and y must not be NULL");
    if (d->has_mask != (mask != NULL)) return fail("has_mask is %d but mask is %s", d->has_mask, mask ? "given" : "NULL");
    if (d->has_bias != (bias != NULL)) return fail("has_bias is %d but bias is %s", d->has_bias, bias ? "given" : "NULL");
    const void *ptrs[6] = {x, offset, mask, weight, bias, y};
    static const char *const names[6] = {"x", "offset", "mask", "weight", "bias", "y"};
    if (device_of(ptrs, names, 6)) return -1;
    const void *vec[3] = {x, weight, y};
    static const char *const vec_names[3] = {"x", "weight", "y"};
    if (aligned(vec, vec_names, 3)) return -1;
    dt_set_stream(stream);
    formats f = formats_of(d, &p);
    scratch s = {0};
    dt_deform_args a = {.x = x,
                        .offset = input_as(&s, offset, f.off, f.koff),
                        .mask = input_as(&s, mask, f.mask, f.kmask),
                        .w = input_as(&s, weight, f.w, f.kw),
                        .bias = bias};
    dt_deform_forward_raw(&p, DT_GPU, &a, y);
    scratch_free(&s);
    return 0;
}

int dt_deform_api_backward(const dt_deform_desc *d, int mode, const void *x, const void *offset, const void *mask,
                           const void *weight, const void *grad_y, void *grad_x, void *grad_offset, void *grad_mask,
                           void *grad_weight, float *grad_bias, void *stream) {
    dt_deform_plan p;
    if (plan_of(d, mode, &p)) return -1;
    if (!x || !offset || !weight || !grad_y) return fail("x, offset, weight and grad_y must not be NULL");
    if (d->has_mask != (mask != NULL)) return fail("has_mask is %d but mask is %s", d->has_mask, mask ? "given" : "NULL");
    if (grad_mask && !mask) return fail("grad_mask requested but there is no mask");
    if (grad_bias && !d->has_bias) return fail("grad_bias requested but has_bias is 0");
    const void *ptrs[10] = {x, offset, mask, weight, grad_y, grad_x, grad_offset, grad_mask, grad_weight, grad_bias};
    static const char *const names[10] = {"x", "offset", "mask", "weight", "grad_y", "grad_x", "grad_offset",
                                          "grad_mask", "grad_weight", "grad_bias"};
    if (device_of(ptrs, names, 10)) return -1;
    const void *vec[5] = {x, weight, grad_y, grad_x, grad_weight};
    static const char *const vec_names[5] = {"x", "weight", "grad_y", "grad_x", "grad_weight"};
    if (aligned(vec, vec_names, 5)) return -1;
    dt_set_stream(stream);
    formats f = formats_of(d, &p);
    scratch s = {0};
    dt_deform_args a = {.x = x,
                        .offset = input_as(&s, offset, f.off, f.koff),
                        .mask = input_as(&s, mask, f.mask, f.kmask),
                        .w = input_as(&s, weight, f.w, f.kw)};
    dt_deform_grads gr = {.dx = grad_x,
                          .doff = grad_as(&s, grad_offset, f.off, f.koff),
                          .dmask = grad_as(&s, grad_mask, f.mask, f.kmask),
                          .dw = grad_as(&s, grad_weight, f.w, f.kdw),
                          .db = grad_bias};
    dt_deform_backward_raw(&p, DT_GPU, &a, grad_y, &gr);
    grad_out(gr.doff, f.koff, grad_offset, f.off);
    grad_out(gr.dmask, f.kmask, grad_mask, f.mask);
    grad_out(gr.dw, f.kdw, grad_weight, f.w);
    scratch_free(&s);
    return 0;
}
