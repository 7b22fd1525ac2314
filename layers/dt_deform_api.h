/* dt_deform_api.h: the deformable convolution as plain C entry points of libdeftc.so, on
 * caller-owned device buffers - so that another program (Python through ctypes on PyTorch
 * tensors' data pointers, a C++ framework, ...) can run deftc's kernels.
 *
 * Semantics are torchvision.ops.deform_conv2d's. All pointers are CUDA device pointers to
 * contiguous float32 NCHW data:
 *   x       [n, c, h, w]                weight  [cout, c, kh, kw]      bias [cout] (or NULL)
 *   offset  [n, 2*G*kh*kw, ho, wo]      mask    [n, G*kh*kw, ho, wo] (or NULL: DCNv1)
 *   y, grad_y [n, cout, ho, wo]         ho/wo from dt_deform_api_out_size
 * deftc runs on the CUDA device the buffers live on (all on one device, else an error) and queues
 * the work on `stream` (a cudaStream_t of that device; NULL for deftc's own stream, which does
 * not synchronize with the legacy default stream: pass cudaStreamLegacy to run there); the
 * calls return without waiting for it. Workspace comes from deftc's caching allocator (a pool per device).
 * Return value: 0 on success; -1 with a message in dt_deform_api_error() for a descriptor or
 * argument that does not fit (checked before any work is queued). A CUDA failure inside is
 * fatal (message and exit), as everywhere in deftc.
 *
 * Example (Python): see docs/deform_api.md. */
#ifndef DT_DEFORM_API_H
#define DT_DEFORM_API_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int n, c, h, w;           /* input */
    int cout;                 /* output channels */
    int kh, kw;               /* kernel */
    int stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
    int offset_groups;        /* G >= 1, c % G == 0 */
    int has_mask, has_bias;
} dt_deform_desc;

enum {
    DT_DEFORM_API_UNFUSED = 0,       /* the unfused kernels */
    DT_DEFORM_API_DEFT = 1,          /* the deft kernels (channels last inside, default knobs) */
    DT_DEFORM_API_DETERMINISTIC = 16, /* flag: bitwise-reproducible backward */
    /* flags, at most one: the main convolution's GEMMs on TF32 tensor cores, or on bf16 operands
     * with fp32 accumulation (the columns in bf16; inputs, outputs and gradients stay fp32
     * buffers). Without either: strict fp32. docs/training.md, "Precision". */
    DT_DEFORM_API_TF32 = 32,
    DT_DEFORM_API_BF16 = 64
};

int dt_deform_api_out_size(const dt_deform_desc *d, int *ho, int *wo);
int dt_deform_api_forward(const dt_deform_desc *d, int mode, const float *x, const float *offset, const float *mask,
                          const float *weight, const float *bias, float *y, void *stream);
/* Any gradient pointer may be NULL (not wanted); the others are overwritten. */
int dt_deform_api_backward(const dt_deform_desc *d, int mode, const float *x, const float *offset, const float *mask,
                           const float *weight, const float *grad_y, float *grad_x, float *grad_offset,
                           float *grad_mask, float *grad_weight, float *grad_bias, void *stream);
const char *dt_deform_api_error(void);

#ifdef __cplusplus
}
#endif
#endif
