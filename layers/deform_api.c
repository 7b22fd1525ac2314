/* The C API over dt_deform_forward_raw / dt_deform_backward_raw (see dt_deform_api.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "deform_run.h"
#include "dt_deform.h"
#include "dt_deform_api.h"
#include "dt_device.h"
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

/* Validates and fills a plan and the call's precision; 0 on success. */
static int plan_of(const dt_deform_desc *d, int mode, dt_deform_plan *p, dt_precision *prec) {
    if (dt_deform_api_out_size(d, NULL, NULL)) return -1;
    int impl = mode & ~(DT_DEFORM_API_DETERMINISTIC | DT_DEFORM_API_TF32 | DT_DEFORM_API_BF16);
    if (impl != DT_DEFORM_API_UNFUSED && impl != DT_DEFORM_API_DEFT)
        return fail("unknown mode %d (DT_DEFORM_API_UNFUSED, DT_DEFORM_API_DEFT, optionally | DT_DEFORM_API_DETERMINISTIC, "
                    "| DT_DEFORM_API_TF32 or | DT_DEFORM_API_BF16)", mode);
    if ((mode & DT_DEFORM_API_TF32) && (mode & DT_DEFORM_API_BF16))
        return fail("mode %d asks for both DT_DEFORM_API_TF32 and DT_DEFORM_API_BF16: pick one", mode);
    if (!dt_built_with_cuda()) return fail("libdeftc was built without CUDA");
    if (dt_gpu_count() == 0) return fail("no CUDA device is visible");
    dt_conv_geom g = {d->kh, d->kw, d->stride_h, d->stride_w, d->pad_h, d->pad_w, d->dil_h, d->dil_w};
    dt_deform_knobs k = dt_deform_knobs_default();
    k.deterministic = (mode & DT_DEFORM_API_DETERMINISTIC) != 0;
    *prec = (mode & DT_DEFORM_API_BF16) ? DT_BF16 : (mode & DT_DEFORM_API_TF32) ? DT_TF32 : DT_FP32;
    dt_deform_mode dm = impl == DT_DEFORM_API_DEFT ? DT_DEFORM_DEFT : DT_DEFORM_UNFUSED;
    const char *bad = dt_deform_plan_init(p, d->n, d->c, d->h, d->w, d->cout, g, d->offset_groups, d->has_mask,
                                          dm, &k, dt_deform_col_budget(dm, &k, *prec));
    if (bad) return fail("%s", bad);
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

int dt_deform_api_forward(const dt_deform_desc *d, int mode, const float *x, const float *offset, const float *mask,
                          const float *weight, const float *bias, float *y, void *stream) {
    dt_deform_plan p;
    dt_precision prec = DT_FP32;
    if (plan_of(d, mode, &p, &prec)) return -1;
    if (!x || !offset || !weight || !y) return fail("x, offset, weight and y must not be NULL");
    if (d->has_mask != (mask != NULL)) return fail("has_mask is %d but mask is %s", d->has_mask, mask ? "given" : "NULL");
    if (d->has_bias != (bias != NULL)) return fail("has_bias is %d but bias is %s", d->has_bias, bias ? "given" : "NULL");
    const void *ptrs[6] = {x, offset, mask, weight, bias, y};
    static const char *const names[6] = {"x", "offset", "mask", "weight", "bias", "y"};
    if (device_of(ptrs, names, 6)) return -1;
    dt_set_stream(stream);
    dt_deform_args a = {.x = x, .offset = offset, .mask = mask, .w = weight, .bias = bias};
    dt_precision was = dt_get_precision();
    dt_set_precision(prec);
    dt_deform_forward_raw(&p, DT_GPU, &a, y);
    dt_set_precision(was);
    return 0;
}

int dt_deform_api_backward(const dt_deform_desc *d, int mode, const float *x, const float *offset, const float *mask,
                           const float *weight, const float *grad_y, float *grad_x, float *grad_offset,
                           float *grad_mask, float *grad_weight, float *grad_bias, void *stream) {
    dt_deform_plan p;
    dt_precision prec = DT_FP32;
    if (plan_of(d, mode, &p, &prec)) return -1;
    if (!x || !offset || !weight || !grad_y) return fail("x, offset, weight and grad_y must not be NULL");
    if (d->has_mask != (mask != NULL)) return fail("has_mask is %d but mask is %s", d->has_mask, mask ? "given" : "NULL");
    if (grad_mask && !mask) return fail("grad_mask requested but there is no mask");
    if (grad_bias && !d->has_bias) return fail("grad_bias requested but has_bias is 0");
    const void *ptrs[11] = {x, offset, mask, weight, grad_y, grad_x, grad_offset, grad_mask, grad_weight, grad_bias, NULL};
    static const char *const names[11] = {"x", "offset", "mask", "weight", "grad_y", "grad_x", "grad_offset",
                                          "grad_mask", "grad_weight", "grad_bias", ""};
    if (device_of(ptrs, names, 10)) return -1;
    dt_set_stream(stream);
    dt_deform_grads gr = {.dx = grad_x, .doff = grad_offset, .dmask = grad_mask, .dw = grad_weight, .db = grad_bias};
    dt_deform_args a = {.x = x, .offset = offset, .mask = mask, .w = weight};
    dt_precision was = dt_get_precision();
    dt_set_precision(prec);
    dt_deform_backward_raw(&p, DT_GPU, &a, grad_y, &gr);
    dt_set_precision(was);
    return 0;
}
