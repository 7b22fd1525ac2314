/* dt_deform_api.h: the deformable convolution as plain C entry points of libdeftc.so, on
 * caller-owned device buffers - so that another program (Python through ctypes on PyTorch
 * tensors' data pointers, a C++ framework, ...) can run deftc's kernels on the tensors it has.
 *
 * Semantics are torchvision.ops.deform_conv2d's. All pointers are CUDA device pointers to dense
 * tensors whose logical shapes are (K = kh*kw, G offset groups):
 *   x, grad_x            [n, c, h, w]            weight, grad_weight [cout, c, kh, kw]
 *   offset, grad_offset  [n, 2*G*K, ho, wo]      mask, grad_mask     [n, G*K, ho, wo] (or NULL: DCNv1)
 *   y, grad_y            [n, cout, ho, wo]       bias, grad_bias     [cout] f32 (or NULL)
 * ho/wo from dt_deform_api_out_size. Each buffer's element type and memory layout is stated in
 * the descriptor (dt_dtype / dt_layout values of core/dt_dtype.h; NHWC is PyTorch's
 * channels_last, and an NHWC weight is stored [cout, kh, kw, c], PyTorch's channels_last weight):
 *   x, y, grad_y, grad_x   .dtype, .layout: f32 NCHW, f32 NHWC or bf16 NHWC (the kernels' own
 *                          formats: bf16 and NHWC with DT_DEFORM_API_DEFT only). Read and
 *                          written in place, never copied.
 *   weight, grad_weight    .weight_dtype (f32 or bf16), .weight_layout. In x's dtype and layout
 *                          the weight is read in place; otherwise it is converted into a scratch
 *                          buffer of cout*c*kh*kw elements (e.g. an f32 master weight with bf16
 *                          x: the rounding PyTorch's autocast does). grad_weight has the weight's
 *                          dtype and layout; deftc computes it in fp32 - written in place for an
 *                          f32 weight in x's layout, else in scratch and then converted (a bf16
 *                          grad_weight is rounded once, to nearest even).
 *   offset, grad_offset    .offset_dtype (f32 or bf16), .offset_layout
 *   mask, grad_mask        .mask_dtype (f32 or bf16), .mask_layout
 *                          The kernels read f32 NCHW offsets and mask; in another format they (and
 *                          their gradients) go through a scratch f32 NCHW copy, one conversion
 *                          kernel each way (docs/deform_api.md: what it costs).
 * x, y, the weight and their gradients must be 16-byte aligned (the kernels' vector loads);
 * PyTorch's allocations are.
 *
 * deftc runs on the CUDA device the buffers live on (all on one device, else an error) and queues
 * the work on `stream` (a cudaStream_t of that device; NULL for deftc's own stream, which does
 * not synchronize with the legacy default stream: pass cudaStreamLegacy to run there); the
 * calls return without waiting for it. Workspace and scratch come from deftc's caching allocator
 * (a pool per device), released in stream order.
 * Return value: 0 on success; -1 with a message in dt_deform_api_error() for a descriptor or
 * argument that does not fit (checked before any work is queued). A CUDA failure inside is
 * fatal (message and exit), as everywhere in deftc.
 *
 * Example (Python): see docs/deform_api.md. */
#ifndef DT_DEFORM_API_H
#define DT_DEFORM_API_H

#include "dt_api.h"
#include "dt_dtype.h"

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

/* ABI: fields are only ever appended. The first 16 (the geometry) are those of the first
 * version, which had no .size; .size tells the library which version the caller's struct is, and
 * a call whose .size is not a version this library knows fails with a message (today one:
 * sizeof(dt_deform_desc) = 100 bytes). dt_deform_api_out_size reads only the geometry. Every
 * dtype / layout field's 0 is f32 / NCHW. */
typedef struct {
    int n, c, h, w;           /* input */
    int cout;                 /* output channels */
    int kh, kw;               /* kernel */
    int stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
    int offset_groups;        /* G >= 1, c % G == 0 */
    int has_mask, has_bias;
    int size;                 /* sizeof(dt_deform_desc): set by the caller */
    int dtype, layout;        /* x, y, grad_y, grad_x */
    int weight_dtype, weight_layout; /* weight, grad_weight */
    int offset_dtype, offset_layout; /* offset, grad_offset */
    int mask_dtype, mask_layout;     /* mask, grad_mask */
} dt_deform_desc;

enum {
    DT_DEFORM_API_UNFUSED = 0,       /* the unfused kernels (f32 NCHW x only) */
    DT_DEFORM_API_DEFT = 1,          /* the deft kernels (channels last inside, default knobs) */
    DT_DEFORM_API_DETERMINISTIC = 16, /* flag: bitwise-reproducible backward */
    /* flag, f32 x only: the main convolution's GEMMs on TF32 tensor cores (without it strict
     * fp32; bf16 x always multiplies bf16 operands with fp32 sums). docs/training.md, "Precision". */
    DT_DEFORM_API_TF32 = 32
};

int dt_deform_api_out_size(const dt_deform_desc *d, int *ho, int *wo);
/* Every check forward and backward make of a descriptor and mode (sizes, .size, dtypes and
 * layouts, the combination the mode runs), without a GPU or buffers: 0, or -1 with the message. */
int dt_deform_api_check(const dt_deform_desc *d, int mode);
int dt_deform_api_forward(const dt_deform_desc *d, int mode, const void *x, const void *offset, const void *mask,
                          const void *weight, const float *bias, void *y, void *stream);
/* Any gradient pointer may be NULL (not wanted); the others are overwritten. */
int dt_deform_api_backward(const dt_deform_desc *d, int mode, const void *x, const void *offset, const void *mask,
                           const void *weight, const void *grad_y, void *grad_x, void *grad_offset, void *grad_mask,
                           void *grad_weight, float *grad_bias, void *stream);
const char *dt_deform_api_error(void);

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
