/* dt_augment.h: the loader's augmentation (dt_transform.h: crop, antialiased resize rounded to
 * uint8 like PIL, flip) as an op on a batch of decoded images, on the CPU or the GPU - the op
 * the loader's GPU decode (dt_gpu_decode.h) runs on the images nvJPEG decoded in device memory.
 *
 *   src      u8 [bytes] packed decoded images: sample i's [h_i, w_i, 3] HWC pixels at offset_i
 *   samples  per sample: offset, decoded size, and the plan the loader draws (dt_transform_plan:
 *            the RandomResizedCrop box or the val geometry, and the flip)
 *   out      u8 [N, S, S, 3] HWC, row i = dt_transform_apply(plan_i, image_i)
 *
 * The CPU twin is dt_transform_apply itself, sample by sample, so it is the loader's transform
 * by construction. The CUDA kernel builds the same filter tables on the host (dt_axis_weights,
 * from dt_transform_axes) and computes each output byte with the same fp32 operations in the
 * same order as dt_image_resample: per tap row k the horizontal sum over taps j (0 + w_j * p_j,
 * j = 0, 1, ...), then w_0 * t_0 + w_1 * t_1 + ... over k, clamped and rounded half up - each
 * product and sum rounded on its own (no fma), so the bytes are the twin's exactly when the host
 * compiler does not contract them either (x86-64 without -mfma: the default build); where it
 * does, a sum may round differently and a byte move by at most 1. */
#ifndef DT_AUGMENT_H
#define DT_AUGMENT_H

#include "core/dt_api.h"

#include <stdint.h>

#include "core/dt_tensor.h"
#include "data/dt_transform.h"

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

typedef struct {
    int64_t offset;         /* bytes into src where the image's [h, w, 3] pixels start */
    int w, h;               /* the decoded size: plan.w x plan.h or a reduced decode of it */
    dt_transform_plan plan; /* dt_transform_plan_train / _val, made for the full size */
} dt_augment_sample;

/* src: a 1-D u8 tensor on the device that computes; samples: n host records (each image inside
 * src, no larger than its plan's size: fatal otherwise). -> u8 [n, S, S, 3] on src's device. */
dt_tensor *dt_augment_images(const dt_tensor *src, const dt_augment_sample *samples, int n, int S);

DT_PUBLIC_END

/* The twins (samples: host memory; src, out: the device's). */
void dt_augment_images_cpu(int n, int S, const uint8_t *src, const dt_augment_sample *samples, uint8_t *out);
void dt_augment_images_cuda(int n, int S, const uint8_t *src, const dt_augment_sample *samples, uint8_t *out);

/* For the loader's GPU decode thread (dt_gpu_decode.c), which works on a stream of its own and
 * outside deftc's caching allocator (that one orders reuse by the context's stream): the same
 * kernel on `stream` (a cudaStream_t), sample i written to output row rows[i] (NULL: row i),
 * its tables staged through `scratch` (pinned host + device, grown as needed: the caller makes
 * sure the stream's earlier use of the scratch is done, dt_gpu_decode keeps one per buffer).
 * 0, or -1 when a CUDA call fails. CUDA builds only. */
typedef struct {
    void *host, *dev;
    size_t bytes;
} dt_augment_scratch;
int dt_augment_images_on_stream(int n, int S, const uint8_t *src, const dt_augment_sample *samples, const int *rows,
                                uint8_t *out, dt_augment_scratch *scratch, void *stream);
void dt_augment_scratch_free(dt_augment_scratch *scratch);

#ifdef __cplusplus
}
#endif
#endif
