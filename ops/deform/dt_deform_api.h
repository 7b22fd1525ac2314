/* dt_deform_api.h: the deformable convolution as plain C entry points of libdeftc.so, on
 * caller-owned buffers - so that another program (Python through ctypes on PyTorch tensors' data
 * pointers, a C++ framework, ...) can run deftc's kernels on the tensors it has.
 *
 * Semantics are torchvision.ops.deform_conv2d's. All pointers are of the device .device names
 * (CUDA device pointers, or host memory for DT_DEFORM_API_CPU) to dense tensors whose logical
 * shapes are (K = kh*kw, G offset groups, WG = .weight_groups):
 *   x, grad_x            [n, c, h, w]            weight, grad_weight [cout, c/WG, kh, kw]
 *   offset, grad_offset  [n, 2*G*K, ho, wo]      mask, grad_mask     [n, G*K, ho, wo] (or NULL: DCNv1)
 *   y, grad_y            [n, cout, ho, wo]       bias, grad_bias     [cout] (or NULL)
 * ho/wo from dt_deform_api_out_size. Each buffer's element type and memory layout is stated in
 * the descriptor (dt_dtype / dt_layout values of core/dt_dtype.h, or DT_DEFORM_API_F64; NHWC is
 * PyTorch's channels_last, and an NHWC weight is stored [cout, kh, kw, c/WG], PyTorch's
 * channels_last weight):
 *   x, y, grad_y, grad_x   .dtype, .layout: f32 NCHW, f32 NHWC or bf16 NHWC (the kernels' own
 *                          formats: bf16 and NHWC with DT_DEFORM_API_DEFT only). Read and
 *                          written in place, never copied.
 *   weight, grad_weight    .weight_dtype (f32 or bf16), .weight_layout. In x's dtype and layout
 *                          the weight is read in place; otherwise it is converted into a scratch
 *                          buffer of cout*c/WG*kh*kw elements (e.g. an f32 master weight with bf16
 *                          x: the rounding PyTorch's autocast does). grad_weight has the weight's
 *                          dtype and layout; deftc computes it in fp32 - written in place for an
 *                          f32 weight in x's layout without groups, else in scratch and then
 *                          converted (a bf16 grad_weight is rounded once, to nearest even).
 *   offset, grad_offset    .offset_dtype (f32 or bf16), .offset_layout (+ .offset_pitch)
 *   mask, grad_mask        .mask_dtype (f32 or bf16), .mask_layout (+ .mask_pitch)
 *                          DT_DEFORM_API_DEFT reads offsets and mask in any of these formats and
 *                          writes their gradients in place, one pass each way (packing them
 *                          into its own layout); offset and mask - not their gradients - may
 *                          also be channel slices of a larger tensor (the pitch fields). The
 *                          unfused kernels read dense f32 NCHW: another format goes through a
 *                          scratch f32 NCHW copy, one conversion kernel each way
 *                          (docs/deform_api.md: what it costs).
 *   bias, grad_bias        f32 (f64 in an f64 call)
 *   f64                    DT_DEFORM_API_F64 in every dtype field (x, weight, offset, mask; the
 *                          bias is then double too), every layout NCHW: a plain double-precision
 *                          computation (ops/deform/deform_f64.h) for gradient checks - slow on the GPU.
 *                          An f64 field beside an f32 or bf16 one is refused.
 * Weight groups (WG > 1, c % WG == 0, cout % WG == 0): the main convolution runs one GEMM per
 * group on the grouped weight as it is (no dense block-diagonal weight); f64 computes the groups
 * directly.
 * A batch of n = 0 is valid: nothing is computed, grad_weight and grad_bias are zeros, and the
 * pointers of the empty tensors (x, offset, mask, y and their gradients) may be NULL.
 * x, y, the weight and their gradients must be 16-byte aligned (the kernels' vector loads);
 * PyTorch's allocations are.
 *
 * CUDA (.device = DT_DEFORM_API_CUDA): deftc runs on the CUDA device the buffers live on (all on
 * one device, else an error) and queues the work on `stream` (a cudaStream_t of that device; NULL
 * for deftc's own stream, which does not synchronize with the legacy default stream: pass
 * cudaStreamLegacy to run there); the calls return without waiting for it, and make no host
 * synchronization and no read-back (a stream other than the last call's waits for that one's
 * work through an event; the host waits only for the first call captured into a CUDA graph after
 * work on another stream). Scratch comes from deftc's caching allocator (a pool per device, no
 * cudaMalloc once warm), released in stream order, or from the caller's (dt_deform_api_set_cuda,
 * which can also state the device instead of deftc querying each buffer).
 * CPU (.device = DT_DEFORM_API_CPU): host buffers, the kernels' CPU twins (the same algorithms,
 * on deftc's thread pool; TF32 is fp32 there), done when the call returns; `stream` is ignored and
 * no CUDA call is made. The buffers are not checked to be host memory: device pointers crash.
 * Return value: 0 on success; otherwise a dt_status (core/dt_common.h) with the message in
 * dt_deform_api_error() (the calling thread's): -1 (DT_ERR_ARG) for a descriptor or argument
 * that does not fit (checked before any work is queued) or a check inside an op, -2
 * (DT_ERR_OOM) when host or device memory ran out (a smaller call may succeed), -3
 * (DT_ERR_DEVICE) when a CUDA, cuBLAS or cuRAND call failed (a graph-capture violation too).
 * A failed call has released its scratch memory, and the library is usable for the next call;
 * nothing in these entries ends the process.
 *
 * Example (Python): see docs/deform_api.md. */
#ifndef DT_DEFORM_API_H
#define DT_DEFORM_API_H

#include <stddef.h>

#include "core/dt_api.h"
#include "core/dt_dtype.h"

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

/* ABI: fields are only ever appended. The first 16 (the geometry) are those of the first
 * version, which had no .size; .size tells the library which version the caller's struct is, and
 * a call whose .size is not a version this library knows fails with a message. It knows three:
 * 100 bytes (up to mask_layout: the formats), 108 (+ weight_groups, device) and
 * sizeof(dt_deform_desc) = 116 (+ offset_pitch, mask_pitch); the fields an older struct lacks
 * read as 0. dt_deform_api_out_size reads only the geometry. Every field's 0 is the default: f32
 * / NCHW, no weight groups, CUDA, dense offsets and mask. */
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
    int weight_groups;        /* WG: weight [cout, c/WG, kh, kw]; c % WG == 0, cout % WG == 0; 0 reads as 1 */
    int device;               /* DT_DEFORM_API_CUDA or DT_DEFORM_API_CPU: where every buffer lives */
    /* offset, mask (not their gradients, which are dense): the elements from one position to the
     * next (NHWC: >= the field's channels, 2*G*K or G*K) or from one image to the next (NCHW: >=
     * channels x ho*wo); 0: dense. So offsets and mask given as channels [0, 2GK) and [2GK, 3GK)
     * of one offset-conv output [n, 3GK, ho, wo] are read where they lie: pitch 3GK (NHWC) or
     * 3GK*ho*wo (NCHW), the mask's pointer 2GK channels in. DT_DEFORM_API_DEFT only. */
    int offset_pitch, mask_pitch;
} dt_deform_desc;

/* The sizes of the descriptor's earlier versioned layouts, still accepted: up to mask_layout,
 * and up to device. */
#define DT_DEFORM_DESC_SIZE_V1 100
#define DT_DEFORM_DESC_SIZE_V2 108

/* desc.device */
enum { DT_DEFORM_API_CUDA = 0, DT_DEFORM_API_CPU = 1 };

/* A dtype-field value of the API alone (not a dt_dtype: no deftc tensor or op holds doubles):
 * every tensor of the call is double. Outside dt_dtype's range, so that a dtype core gains
 * later cannot take its meaning. */
enum { DT_DEFORM_API_F64 = 8 };

/* Modes and flags (an f64 call runs ops/deform/deform_f64 in either mode, deterministic by
 * construction). */
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
 * layouts, weight groups, the device field, the combination the mode runs), without a GPU or
 * buffers: 0, or -1 with the message. */
int dt_deform_api_check(const dt_deform_desc *d, int mode);
/* bias and grad_bias are f32 (double in an f64 call): void pointers since the 108-byte version,
 * the same ABI as the float pointers they were. */
int dt_deform_api_forward(const dt_deform_desc *d, int mode, const void *x, const void *offset, const void *mask,
                          const void *weight, const void *bias, void *y, void *stream);
/* Any gradient pointer may be NULL (not wanted); the others are overwritten. */
int dt_deform_api_backward(const dt_deform_desc *d, int mode, const void *x, const void *offset, const void *mask,
                           const void *weight, const void *grad_y, void *grad_x, void *grad_offset, void *grad_mask,
                           void *grad_weight, void *grad_bias, void *stream);
const char *dt_deform_api_error(void);

/* What a framework states once for the CUDA calls the calling thread makes next (a thread's
 * own setting; forward and backward running on different threads each set theirs):
 *   device  the CUDA device every buffer is on: the buffers are then not queried (the caller's
 *           word, as for host buffers on the CPU; a wrong device is undefined behaviour); -1 (the
 *           default): found from the buffers, one cudaPointerGetAttributes each, checked to be
 *           device memory of one device.
 *   alloc, free  the call's scratch (the converted inputs, the kernels' buffers: each lives within
 *           the call) from the caller's allocator instead of deftc's pool: alloc(ctx, bytes,
 *           stream) returns device memory of `device` (NULL: out of memory, the call fails with
 *           DT_ERR_OOM) for use on `stream` (the call's); free(ctx, ptr, stream) takes it back
 *           before the call returns while work queued on `stream` may still use it - a
 *           stream-ordered allocator, e.g. PyTorch's caching allocator, for which scratch made
 *           while a CUDA graph is captured comes from the graph's private pool. Both NULL: deftc's
 *           pool (which does not know about a caller's graph capture). Neither may raise a C++
 *           exception or longjmp.
 * NULL restores the defaults. 0, or -1 with the message (alloc without free). */
typedef struct {
    int device;
    void *(*alloc)(void *ctx, size_t bytes, void *stream);
    void (*free)(void *ctx, void *ptr, void *stream);
    void *ctx;
} dt_deform_cuda;
int dt_deform_api_set_cuda(const dt_deform_cuda *cuda);

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
