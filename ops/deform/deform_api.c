/* The C API over dt_deform_forward_raw / dt_deform_backward_raw and the f64 kernels (see
 * dt_deform_api.h).
 *
 * A call reads the caller's descriptor at its version, checks it (check_desc, which is also
 * dt_deform_api_check; done once per problem and kept per thread, with the plan: call_of),
 * checks the buffers (NULLs, the device, alignment), then runs one of:
 *   n == 0      nothing to compute: the weight and bias gradients asked for are zeroed;
 *   f64         ops/deform/deform_f64 on the buffers as they are (groups computed directly);
 *   f32, bf16   the plan's orchestration. x, y and their gradients define the plan's dtype and
 *               layout and are handed to the kernels as they are. The weight, the offsets and the
 *               mask - and their gradients - are handed over as they are when they already are
 *               in the format the kernels read (the weight in x's dtype and layout; offsets and
 *               mask: any of their formats in deft mode, which packs them into its om and
 *               unpacks their gradients in one pass each (om_pack.h), f32 NCHW in unfused
 *               mode); otherwise each goes through a scratch buffer in that format, converted
 *               with one dt_convert kernel on the way in (inputs) or out (gradients).
 *               Weight groups: the grouped weight (in the kernels' format) and its gradient
 *               as they are, the column skeleton's GEMMs one per group (dt_deform_args.groups;
 *               dt_colconv.h) - no dense block-diagonal weight.
 * With the caller's allocator (dt_deform_api_set_cuda) the call's scratch is one block of it,
 * sized by the problem's earlier calls (dt_gpu_scratch_arena_begin).
 * On the CPU (.device DT_DEFORM_API_CPU) the same runs on the kernels' CPU twins, with no CUDA
 * call at all. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ops/pointwise/convert.h"
#include "ops/deform/deform_f64.h"
#include "ops/deform/deform_run.h"
#include "core/dt_alloc.h"
#include "core/dt_common.h"
#include "ops/deform/dt_deform.h"
#include "ops/deform/dt_deform_api.h"
#include "core/dt_device.h"
#include "ops/pointwise/dt_shared_kernels.h"
#include "core/dt_kernel.h"
#include "ops/dt_layers.h"

_Static_assert(offsetof(dt_deform_desc, weight_groups) == DT_DEFORM_DESC_SIZE_V1,
               "the 100-byte descriptor ends where weight_groups begins");
_Static_assert(offsetof(dt_deform_desc, offset_pitch) == DT_DEFORM_DESC_SIZE_V2,
               "the 108-byte descriptor ends where offset_pitch begins");

/* The calling thread's last failure (dt_common.h): an argument check's message, or what a raise
 * inside the call said. */
const char *dt_deform_api_error(void) { return dt_last_error(); }

static int fail(const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    dt_set_error(DT_ERR_ARG, "%s", msg);
    return -1;
}

static int out_size(const dt_deform_desc *d, int *ho, int *wo) {
    if (!d) return fail("descriptor is NULL");
    if (d->n < 0 || d->c < 1 || d->h < 1 || d->w < 1 || d->cout < 1)
        return fail("sizes must be positive, the batch n >= 0 (n %d c %d h %d w %d cout %d)", d->n, d->c, d->h, d->w,
                    d->cout);
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

/* ---- the descriptor ---- */

/* One call: the caller's descriptor at this version, the plan (f32 / bf16: the dense problem,
 * made for one image when the batch is empty), where it runs. */
typedef struct {
    dt_deform_desc d;
    dt_deform_plan p;
    dt_dev dev;
    int f64;
} call;

/* The descriptor sizes this version reads (dt_deform_api.h's ABI note). */
static int known_size(int size) {
    return size == DT_DEFORM_DESC_SIZE_V1 || size == DT_DEFORM_DESC_SIZE_V2 || size == (int)sizeof(dt_deform_desc);
}

/* The caller's descriptor as this version reads it: an older struct's missing fields are 0. */
static int desc_read(const dt_deform_desc *d, dt_deform_desc *out) {
    if (!known_size(d->size))
        return fail("desc.size is %d, not sizeof(dt_deform_desc) = %d (or %d / %d, the versions before the pitches / "
                    "before weight_groups and device): set it (a caller's struct with other fields is from another "
                    "version of dt_deform_api.h)",
                    d->size, (int)sizeof *d, DT_DEFORM_DESC_SIZE_V2, DT_DEFORM_DESC_SIZE_V1);
    memset(out, 0, sizeof *out);
    memcpy(out, d, (size_t)d->size);
    if (out->weight_groups == 0) out->weight_groups = 1;
    return 0;
}

static const char *dtype_name(int dtype) {
    if (dtype == DT_DEFORM_API_F64) return "f64";
    return (unsigned)dtype < DT_NUM_DTYPES ? dt_dtype_name((dt_dtype)dtype) : "not a dtype";
}

/* The weight, offsets and mask of an f32 / bf16 call may be f32 or bf16 in either layout
 * (converted when needed). */
static int check_format(const char *field, const char *what, int dtype, int layout) {
    if (dtype == DT_DEFORM_API_F64)
        return fail("desc.%s_dtype (%s) is f64 but desc.dtype (x) is not: an f64 call has every tensor in f64", field,
                    what);
    if (dtype != DT_F32 && dtype != DT_BF16)
        return fail("desc.%s_dtype (%s) is %d (%s): f32 (%d) or bf16 (%d)", field, what, dtype, dtype_name(dtype),
                    DT_F32, DT_BF16);
    if (layout != DT_NCHW && layout != DT_NHWC)
        return fail("desc.%s_layout (%s) is %d: nchw (%d) or nhwc (%d)", field, what, layout, DT_NCHW, DT_NHWC);
    return 0;
}

/* An f64 call: double in every field, every tensor NCHW (what ops/deform/deform_f64 reads). */
static int check_f64(const dt_deform_desc *d, int mode) {
    const int dtypes[3] = {d->weight_dtype, d->offset_dtype, d->mask_dtype};
    static const char *const fields[3] = {"weight", "offset", "mask"};
    for (int i = 0; i < 3; i++)
        if (dtypes[i] != DT_DEFORM_API_F64)
            return fail("desc.dtype (x) is f64 but desc.%s_dtype is %s: an f64 call has every tensor in f64 (x, offset, "
                        "mask, weight, bias)", fields[i], dtype_name(dtypes[i]));
    if (d->layout != DT_NCHW || d->weight_layout != DT_NCHW || d->offset_layout != DT_NCHW || d->mask_layout != DT_NCHW)
        return fail("an f64 call is NCHW in every tensor (layouts x %d, weight %d, offset %d, mask %d)", d->layout,
                    d->weight_layout, d->offset_layout, d->mask_layout);
    if (mode & DT_DEFORM_API_TF32) return fail("DT_DEFORM_API_TF32 is for f32 x; an f64 call computes in double");
    if (d->offset_pitch || d->mask_pitch)
        return fail("an f64 call reads dense offsets and mask (desc.offset_pitch %d, desc.mask_pitch %d)", d->offset_pitch,
                    d->mask_pitch);
    return 0;
}

static int check_mode(int mode) {
    int impl = mode & ~(DT_DEFORM_API_DETERMINISTIC | DT_DEFORM_API_TF32);
    if (impl != DT_DEFORM_API_UNFUSED && impl != DT_DEFORM_API_DEFT)
        return fail("unknown mode %d (DT_DEFORM_API_UNFUSED or DT_DEFORM_API_DEFT, optionally | DT_DEFORM_API_DETERMINISTIC "
                    "and | DT_DEFORM_API_TF32; bf16 is the descriptor's dtype, not a flag)", mode);
    return 0;
}

/* The offsets' and mask's pitches: deft mode only, 0 or at least the dense one. */
static int check_pitches(const dt_deform_desc *d, int mode, const dt_deform_plan *p) {
    const int pitch[2] = {d->offset_pitch, d->mask_pitch};
    const dt_dtype dtype[2] = {(dt_dtype)d->offset_dtype, (dt_dtype)d->mask_dtype};
    const dt_layout layout[2] = {(dt_layout)d->offset_layout, (dt_layout)d->mask_layout};
    const int64_t channels[2] = {2 * p->GK, p->GK};
    static const char *const field[2] = {"offset", "mask"};
    for (int i = 0; i < 2; i++) {
        if (!pitch[i]) continue;
        if (!(mode & DT_DEFORM_API_DEFT))
            return fail("desc.%s_pitch is %d: pitched offsets and mask are read by DT_DEFORM_API_DEFT (the unfused "
                        "baseline reads dense f32 NCHW)", field[i], pitch[i]);
        if (dt_deform_field_fmt_refusal((dt_deform_field_fmt){dtype[i], layout[i], pitch[i]}, channels[i], p->P))
            return fail("desc.%s_pitch is %d: 0 (dense) or at least %lld, the %s's %s (%lld channels of %lld "
                        "positions)", field[i], pitch[i],
                        (long long)(layout[i] == DT_NHWC ? channels[i] : channels[i] * p->P), field[i],
                        layout[i] == DT_NHWC ? "channels (NHWC: a position's)" : "channels x positions (NCHW: an image's)",
                        (long long)channels[i], (long long)p->P);
    }
    return 0;
}

/* Everything a call checks of its descriptor and mode, without buffers or a GPU; fills *c. */
static int check_desc(const dt_deform_desc *raw, int mode, call *c) {
    if (out_size(raw, NULL, NULL) || check_mode(mode) || desc_read(raw, &c->d)) return -1;
    const dt_deform_desc *d = &c->d;
    if (d->device != DT_DEFORM_API_CUDA && d->device != DT_DEFORM_API_CPU)
        return fail("desc.device is %d: DT_DEFORM_API_CUDA (%d) or DT_DEFORM_API_CPU (%d)", d->device, DT_DEFORM_API_CUDA,
                    DT_DEFORM_API_CPU);
    c->dev = d->device == DT_DEFORM_API_CPU ? DT_CPU : DT_GPU;
    if (d->weight_groups < 1 || d->c % d->weight_groups || d->cout % d->weight_groups)
        return fail("%d input and %d output channels cannot be split into %d weight groups (desc.weight_groups must "
                    "divide both)", d->c, d->cout, d->weight_groups);
    c->f64 = d->dtype == DT_DEFORM_API_F64;
    if (c->f64) return check_f64(d, mode);
    if ((unsigned)d->dtype >= DT_NUM_DTYPES || (d->layout != DT_NCHW && d->layout != DT_NHWC))
        return fail("desc.dtype %d / desc.layout %d (x, y and their gradients) are not a dt_dtype / dt_layout (or "
                    "DT_DEFORM_API_F64)", d->dtype, d->layout);
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
    /* an empty batch is checked as one image: every limit of the plan is per image */
    const char *bad = dt_deform_plan_init(&c->p, d->n > 0 ? d->n : 1, d->c, d->h, d->w, d->cout, g, d->offset_groups,
                                          d->has_mask, dm, &k, dt_deform_col_budget());
    if (bad) return fail("%s", bad);
    bad = dt_deform_plan_types(&c->p, (dt_dtype)d->dtype, (dt_layout)d->layout, math, dt_deform_col_budget());
    if (bad) return fail("x, y and their gradients (desc.dtype %s, desc.layout %s): %s", dt_dtype_name((dt_dtype)d->dtype),
                         dt_layout_name((dt_layout)d->layout), bad);
    return check_pitches(d, mode, &c->p);
}

static int check(const dt_deform_desc *d, int mode) {
    call c;
    return check_desc(d, mode, &c);
}

/* What forward and backward check before touching the buffers: the descriptor, then whether a
 * CUDA call can run here at all. */
static int check_call(const dt_deform_desc *d, int mode, call *c) {
    if (check_desc(d, mode, c)) return -1;
    if (c->dev == DT_GPU && !dt_built_with_cuda())
        return fail("libdeftc was built without CUDA (desc.device DT_DEFORM_API_CPU runs on the CPU)");
    if (c->dev == DT_GPU && dt_gpu_count() == 0)
        return fail("no CUDA device is visible (desc.device DT_DEFORM_API_CPU runs on the CPU)");
    return 0;
}

/* ---- the calls a thread made last ----
 * A framework makes the same few calls over and over (a net's layers, step after step), and each
 * would check its descriptor and make its plan again: they are made once per problem and kept,
 * with the scratch bytes the problem's calls took (the size of the next call's one scratch block,
 * dt_gpu_scratch_arena_begin). The key is all a call's checks and plan depend on: the caller's
 * descriptor bytes (.size of them), the mode and flags, and the column budget the plan's chunks
 * were sized under (dt_conv_set_col_budget can change it). Kept per thread (the forward and the
 * backward may run on different ones: no lock); a failed check is not kept. */
enum { KEPT_CALLS = 8 };
typedef struct {
    int valid;
    dt_deform_desc raw; /* the caller's first .size bytes, the rest 0 */
    int mode;
    size_t budget;
    call c;
    size_t scratch[2]; /* forward, backward: the most bytes one call's scratch took */
    uint64_t used;     /* the thread's call count at its last use (the least recent is replaced) */
} kept_call;
static __thread kept_call t_kept[KEPT_CALLS];
static __thread uint64_t t_calls;

/* The kept call for (d, mode) - made and checked now if it is not kept yet - copied into *c, or
 * NULL with the message. */
static kept_call *call_of(const dt_deform_desc *d, int mode, call *c) {
    dt_deform_desc raw;
    if (!d || !known_size(d->size)) {
        check_call(d, mode, c); /* refuses it (out_size, desc_read), saying why */
        return NULL;
    }
    memset(&raw, 0, sizeof raw);
    memcpy(&raw, d, (size_t)d->size);
    const size_t budget = dt_deform_col_budget();
    kept_call *k = &t_kept[0];
    for (int i = 0; i < KEPT_CALLS; i++) {
        kept_call *e = &t_kept[i];
        if (e->valid && e->mode == mode && e->budget == budget && !memcmp(&e->raw, &raw, sizeof raw)) {
            e->used = ++t_calls;
            *c = e->c;
            return e;
        }
        if (!e->valid || e->used < k->used) k = e; /* an empty slot, or the least recent */
    }
    if (check_call(d, mode, c)) return NULL;
    *k = (kept_call){.valid = 1, .raw = raw, .mode = mode, .budget = budget, .c = *c, .used = ++t_calls};
    return k;
}

/* The scratch the call's arena measured (dt_gpu_scratch_arena_end), kept as the problem's
 * largest: calls of one problem that want other gradients take other scratch. */
static void keep_scratch(size_t *kept) {
    const size_t took = dt_gpu_scratch_arena_end();
    if (took > *kept) *kept = took;
}

/* ---- the buffers ---- */

/* The buffers the kernels read with vector loads (x, y, weight and their gradients). */
static int aligned(const void *const *ptrs, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if ((uintptr_t)ptrs[i] % 16)
            return fail("%s (%p) is not 16-byte aligned: deftc reads it with vector loads (a PyTorch view with a storage "
                        "offset can be; copy it)", names[i], ptrs[i]);
    return 0;
}

/* This thread's dt_deform_api_set_cuda: the device its CUDA calls' buffers are on (-1: found
 * from the buffers) and the scratch allocator (alloc NULL: deftc's pool). */
static __thread dt_deform_cuda t_cuda = {.device = -1};
static __thread dt_gpu_allocator t_alloc;

static int set_cuda(const dt_deform_cuda *cu) {
    if (!cu) {
        t_cuda = (dt_deform_cuda){.device = -1};
        t_alloc = (dt_gpu_allocator){0};
        return 0;
    }
    if ((cu->alloc == NULL) != (cu->free == NULL)) return fail("dt_deform_cuda: alloc and free are given together");
    if (cu->device < -1) return fail("dt_deform_cuda.device is %d: a CUDA device, or -1 (found from the buffers)", cu->device);
    t_cuda = *cu;
    t_alloc = (dt_gpu_allocator){cu->alloc, cu->free, cu->ctx};
    return 0;
}

/* The CUDA device all the buffers live on (a cudaPointerGetAttributes each), or -1 with the
 * message. */
static int find_device(const void *const *ptrs, const char *const *names, int n) {
    int dev = -1;
    for (int i = 0; i < n; i++) {
        if (!ptrs[i]) continue;
        const int d = dt_gpu_pointer_device(ptrs[i]);
        if (d == DT_PTR_UNKNOWN) return fail("%s is not a CUDA pointer", names[i]);
        if (d == DT_PTR_HOST)
            return fail("%s is host memory: desc.device is DT_DEFORM_API_CUDA (DT_DEFORM_API_CPU takes host buffers)",
                        names[i]);
        if (dev < 0) dev = d;
        else if (d != dev) return fail("%s is on CUDA device %d, the input on device %d", names[i], d, dev);
    }
    return dev < 0 ? fail("no device buffer given") : dev;
}

/* A CUDA call: the device its buffers live on - the one dt_deform_api_set_cuda states, else
 * found from the buffers - becomes the calling thread's deftc device (dt_gpu_use), `stream` its
 * stream, and the caller's allocator (if any) its scratch allocator until the entry returns
 * (the entry puts deftc's pool back). A CPU call has nothing to find. */
static int use_device(const call *c, const void *const *ptrs, const char *const *names, int n, void *stream) {
    if (c->dev == DT_CPU) return 0;
    if (!dt_built_with_cuda()) return fail("libdeftc was built without CUDA");
    int dev = t_cuda.device;
    if (dev >= dt_gpu_count()) return fail("dt_deform_cuda.device is %d: there are %d CUDA devices", dev, dt_gpu_count());
    if (dev < 0 && (dev = find_device(ptrs, names, n)) < 0) return -1;
    dt_gpu_use(dev);
    dt_set_stream(stream);
    if (t_alloc.alloc) dt_gpu_scratch_use(&t_alloc);
    return 0;
}

/* The scratch buffers of one call: released (in stream order) once its work is queued. At most
 * 8: three inputs converted, the dense weight, three gradients, the dense weight gradient. */
typedef struct {
    dt_dev dev;
    void *p[8];
    int n;
} scratch;

static void *scratch_alloc(scratch *s, size_t bytes) {
    if (s->n == (int)(sizeof s->p / sizeof *s->p)) dt_fatal("deform API: more scratch buffers than a call has");
    return s->p[s->n++] = dt_dev_alloc(s->dev, bytes);
}

static void scratch_free(scratch *s) {
    for (int i = 0; i < s->n; i++) dt_dev_free(s->dev, s->p[i]);
}

static void zero(dt_dev dev, void *p, size_t bytes) {
    if (dev == DT_GPU) dt_memset_gpu(p, 0, bytes);
    else memset(p, 0, bytes);
}

/* ---- buffers in the kernels' format ---- */

/* A tensor's element count as dt_convert sees it: N x C x P (an image batch, or a weight with
 * N = cout, C = its input channels, P = kh*kw), and its format. */
typedef struct {
    int64_t N, C, P;
    dt_dtype dtype;
    dt_layout layout;
} fmt;

static int same(fmt a, fmt b) { return a.dtype == b.dtype && a.layout == b.layout; }

static size_t bytes_of(fmt f) { return (size_t)(f.N * f.C * f.P) * dt_dtype_size(f.dtype); }

/* An input the kernels read in format k: the caller's buffer when it is in k already, else a
 * scratch copy converted to k (NULL stays NULL). */
static const void *input_as(scratch *s, const void *src, fmt f, fmt k) {
    if (!src || same(f, k)) return src;
    void *dst = scratch_alloc(s, bytes_of(k));
    DT_PICK(dt_convert_k, s->dev, f.dtype, DT_NCHW)(f.N, f.C, f.P, src, f.dtype, f.layout, 0.0f, dst, k.dtype, k.layout);
    return dst;
}

/* Where the kernels write a gradient they make in format k: the caller's buffer (format f) when
 * the two agree, else scratch that grad_out converts into it afterwards (NULL stays NULL). */
static void *grad_as(scratch *s, void *dst, fmt f, fmt k) {
    if (!dst || same(f, k)) return dst;
    return scratch_alloc(s, bytes_of(k));
}

static void grad_out(dt_dev dev, const void *made, fmt k, void *dst, fmt f) {
    if (made != dst) DT_PICK(dt_convert_k, dev, k.dtype, DT_NCHW)(f.N, f.C, f.P, made, k.dtype, k.layout, 0.0f, dst, f.dtype, f.layout);
}

/* The caller's formats of the weight, offsets and mask, and what the kernels take (the weight's
 * with the grouped sizes: N = cout, C = c/groups). */
typedef struct {
    fmt w, off, mask;       /* the caller's */
    fmt kw, koff, kmask;    /* the kernels': weight in x's format; offsets and mask the caller's (deft) or
                               f32 NCHW (unfused) */
    fmt kdw;                /* the weight gradient as the kernels make it: f32 in x's layout */
} formats;

static formats formats_of(const call *c) {
    const dt_deform_desc *d = &c->d;
    const dt_deform_plan *p = &c->p;
    int64_t N = d->n, cw = p->prob.C / d->weight_groups; /* N: the plan has one image for an empty batch */
    formats f;
    f.w = (fmt){p->prob.Cout, cw, p->K, (dt_dtype)d->weight_dtype, (dt_layout)d->weight_layout};
    f.off = (fmt){N, 2 * p->GK, p->P, (dt_dtype)d->offset_dtype, (dt_layout)d->offset_layout};
    f.mask = (fmt){N, p->GK, p->P, (dt_dtype)d->mask_dtype, (dt_layout)d->mask_layout};
    f.kw = (fmt){p->prob.Cout, cw, p->K, p->dtype, p->layout};
    const int own = p->mode == DT_DEFORM_DEFT; /* deft reads the fields as they are (om_pack.h) */
    f.koff = own ? f.off : (fmt){N, 2 * p->GK, p->P, DT_F32, DT_NCHW};
    f.kmask = own ? f.mask : (fmt){N, p->GK, p->P, DT_F32, DT_NCHW};
    f.kdw = (fmt){p->prob.Cout, cw, p->K, DT_F32, p->layout};
    return f;
}

/* A field's format as dt_deform_args carries it (the pitch: the caller's, a deft call's alone). */
static dt_deform_field_fmt field_fmt(fmt f, int pitch) { return (dt_deform_field_fmt){f.dtype, f.layout, pitch}; }

static dt_deform_f64_shape f64_shape(const dt_deform_desc *d) {
    int ho, wo;
    out_size(d, &ho, &wo); /* validated before */
    dt_deform_f64_shape s = {{d->n, d->c, d->h, d->w, d->cout, ho, wo,
                              {d->kh, d->kw, d->stride_h, d->stride_w, d->pad_h, d->pad_w, d->dil_h, d->dil_w},
                              d->weight_groups},
                             d->offset_groups};
    return s;
}

/* The f64 twins: f64 is not a dt_dtype, so their entries match any (DT_ANY_DTYPE); NCHW only. */
DT_OP_TABLE(f64_forward_k, "deform_conv2d f64 (C API)", __typeof__(dt_deform_f64_forward_cpu),
            DT_TWINS(f64_forward_k, dt_deform_f64_forward, DT_ANY_DTYPE, DT_NCHW))
DT_OP_TABLE(f64_backward_k, "deform_conv2d f64 backward (C API)", __typeof__(dt_deform_f64_backward_cpu),
            DT_TWINS(f64_backward_k, dt_deform_f64_backward, DT_ANY_DTYPE, DT_NCHW))

/* ---- the calls ---- */

/* The pointer rules of both calls: weight and the output (y or grad_y) given, x and offset too
 * unless the batch is empty (an empty tensor's pointer may be NULL), mask as the descriptor says. */
static int pointers_fit(const call *c, const void *x, const void *offset, const void *mask, const void *weight,
                        const void *y, const char *y_name) {
    const dt_deform_desc *d = &c->d;
    if (!weight) return fail("weight must not be NULL");
    if (d->n == 0) return 0;
    if (!x || !offset || !y) return fail("x, offset, weight and %s must not be NULL", y_name);
    if (d->has_mask != (mask != NULL)) return fail("has_mask is %d but mask is %s", d->has_mask, mask ? "given" : "NULL");
    return 0;
}

static int forward(const dt_deform_desc *d, int mode, const void *x, const void *offset, const void *mask,
                          const void *weight, const void *bias, void *y, void *stream) {
    call c;
    kept_call *k = call_of(d, mode, &c);
    if (!k || pointers_fit(&c, x, offset, mask, weight, y, "y")) return -1;
    if (c.d.has_bias != (bias != NULL)) return fail("has_bias is %d but bias is %s", c.d.has_bias, bias ? "given" : "NULL");
    const void *vec[3] = {x, weight, y};
    static const char *const vec_names[3] = {"x", "weight", "y"};
    if (aligned(vec, vec_names, 3)) return -1;
    if (c.d.n == 0) return 0; /* an empty y: nothing to queue */
    const void *ptrs[6] = {x, offset, mask, weight, bias, y};
    static const char *const names[6] = {"x", "offset", "mask", "weight", "bias", "y"};
    if (use_device(&c, ptrs, names, 6, stream)) return -1;
    dt_gpu_scratch_arena_begin(k->scratch[0]);
    if (c.f64) {
        dt_deform_f64_shape s = f64_shape(&c.d);
        DT_PICK(f64_forward_k, c.dev, DT_ANY_DTYPE, DT_NCHW)(&s, x, offset, mask, weight, bias, y);
        keep_scratch(&k->scratch[0]);
        return 0;
    }
    formats f = formats_of(&c);
    scratch s = {.dev = c.dev};
    dt_deform_args a = {.x = x,
                        .offset = input_as(&s, offset, f.off, f.koff),
                        .mask = input_as(&s, mask, f.mask, f.kmask),
                        .offset_fmt = field_fmt(f.koff, c.d.offset_pitch),
                        .mask_fmt = field_fmt(f.kmask, c.d.mask_pitch),
                        .w = input_as(&s, weight, f.w, f.kw),
                        .bias = bias,
                        .groups = c.d.weight_groups};
    dt_deform_forward_raw(&c.p, c.dev, &a, y);
    scratch_free(&s);
    keep_scratch(&k->scratch[0]);
    return 0;
}

/* An empty batch's backward: the weight and bias gradients asked for are zeros. */
static void zero_param_grads(const call *c, void *grad_weight, void *grad_bias) {
    const dt_deform_desc *d = &c->d;
    size_t wsize = c->f64 ? sizeof(double) : dt_dtype_size((dt_dtype)d->weight_dtype);
    size_t bsize = c->f64 ? sizeof(double) : sizeof(float);
    if (grad_weight) zero(c->dev, grad_weight, (size_t)d->cout * (d->c / d->weight_groups) * d->kh * d->kw * wsize);
    if (grad_bias) zero(c->dev, grad_bias, (size_t)d->cout * bsize);
}

static int backward(const dt_deform_desc *d, int mode, const void *x, const void *offset, const void *mask,
                           const void *weight, const void *grad_y, void *grad_x, void *grad_offset, void *grad_mask,
                           void *grad_weight, void *grad_bias, void *stream) {
    call c;
    kept_call *k = call_of(d, mode, &c);
    if (!k || pointers_fit(&c, x, offset, mask, weight, grad_y, "grad_y")) return -1;
    if (c.d.n > 0 && grad_mask && !mask) return fail("grad_mask requested but there is no mask");
    if (grad_bias && !c.d.has_bias) return fail("grad_bias requested but has_bias is 0");
    const void *vec[5] = {x, weight, grad_y, grad_x, grad_weight};
    static const char *const vec_names[5] = {"x", "weight", "grad_y", "grad_x", "grad_weight"};
    if (aligned(vec, vec_names, 5)) return -1;
    const void *ptrs[10] = {x, offset, mask, weight, grad_y, grad_x, grad_offset, grad_mask, grad_weight, grad_bias};
    static const char *const names[10] = {"x", "offset", "mask", "weight", "grad_y", "grad_x", "grad_offset",
                                          "grad_mask", "grad_weight", "grad_bias"};
    if (c.d.n == 0 && !grad_weight && !grad_bias) return 0; /* nothing asked for but empty tensors */
    if (use_device(&c, ptrs, names, 10, stream)) return -1;
    if (c.d.n == 0) {
        zero_param_grads(&c, grad_weight, grad_bias);
        return 0;
    }
    dt_gpu_scratch_arena_begin(k->scratch[1]);
    if (c.f64) {
        dt_deform_f64_shape s = f64_shape(&c.d);
        DT_PICK(f64_backward_k, c.dev, DT_ANY_DTYPE, DT_NCHW)(&s, x, offset, mask, weight, grad_y, grad_x, grad_offset,
                                                              grad_mask, grad_weight, grad_bias);
        keep_scratch(&k->scratch[1]);
        return 0;
    }
    formats f = formats_of(&c);
    scratch s = {.dev = c.dev};
    dt_deform_args a = {.x = x,
                        .offset = input_as(&s, offset, f.off, f.koff),
                        .mask = input_as(&s, mask, f.mask, f.kmask),
                        .offset_fmt = field_fmt(f.koff, c.d.offset_pitch),
                        .mask_fmt = field_fmt(f.kmask, c.d.mask_pitch),
                        .w = input_as(&s, weight, f.w, f.kw),
                        .groups = c.d.weight_groups};
    void *dw = grad_as(&s, grad_weight, f.w, f.kdw); /* the grouped gradient in the kernels' format */
    dt_deform_grads gr = {.dx = grad_x,
                          .doff = grad_as(&s, grad_offset, f.off, f.koff),
                          .dmask = grad_as(&s, grad_mask, f.mask, f.kmask),
                          .dw = dw,
                          .db = grad_bias};
    dt_deform_backward_raw(&c.p, c.dev, &a, grad_y, &gr);
    grad_out(c.dev, gr.doff, f.koff, grad_offset, f.off);
    grad_out(c.dev, gr.dmask, f.kmask, grad_mask, f.mask);
    grad_out(c.dev, dw, f.kdw, grad_weight, f.w);
    scratch_free(&s);
    keep_scratch(&k->scratch[1]);
    return 0;
}

/* ---- the entries: each under a guard ----
 * A raise inside (out of memory, a CUDA or cuBLAS failure, a check deep in an op) unwinds to the
 * entry's guard, which frees the call's scratch (the scratch log, core/dt_alloc.c) and returns
 * the status (DT_ERR_OOM, DT_ERR_DEVICE, DT_ERR_ARG) with the message in dt_deform_api_error();
 * argument checks return -1 (DT_ERR_ARG) as before. The library stays usable for the next call. */

int dt_deform_api_out_size(const dt_deform_desc *d, int *ho, int *wo) {
    dt_guard g;
    DT_GUARD(g) return dt_guard_unwind(&g);
    int rc = out_size(d, ho, wo);
    dt_guard_leave(&g);
    return rc;
}

int dt_deform_api_check(const dt_deform_desc *d, int mode) {
    dt_guard g;
    DT_GUARD(g) return dt_guard_unwind(&g);
    int rc = check(d, mode);
    dt_guard_leave(&g);
    return rc;
}

/* The caller's allocator (use_device) serves one entry: put back after the guard, whose unwind
 * frees the call's scratch through it - the arena's block last (a raise left it open). */
static int own_pool(int rc) {
    dt_gpu_scratch_arena_end();
    dt_gpu_scratch_use(NULL);
    return rc;
}

int dt_deform_api_forward(const dt_deform_desc *d, int mode, const void *x, const void *offset, const void *mask,
                          const void *weight, const void *bias, void *y, void *stream) {
    dt_guard g;
    DT_GUARD(g) return own_pool(dt_guard_unwind(&g));
    int rc = forward(d, mode, x, offset, mask, weight, bias, y, stream);
    dt_guard_leave(&g);
    return own_pool(rc);
}

int dt_deform_api_backward(const dt_deform_desc *d, int mode, const void *x, const void *offset, const void *mask,
                           const void *weight, const void *grad_y, void *grad_x, void *grad_offset, void *grad_mask,
                           void *grad_weight, void *grad_bias, void *stream) {
    dt_guard g;
    DT_GUARD(g) return own_pool(dt_guard_unwind(&g));
    int rc = backward(d, mode, x, offset, mask, weight, grad_y, grad_x, grad_offset, grad_mask, grad_weight, grad_bias,
                      stream);
    dt_guard_leave(&g);
    return own_pool(rc);
}

int dt_deform_api_set_cuda(const dt_deform_cuda *cu) {
    dt_guard g;
    DT_GUARD(g) return dt_guard_unwind(&g);
    int rc = set_cuda(cu);
    dt_guard_leave(&g);
    return rc;
}
