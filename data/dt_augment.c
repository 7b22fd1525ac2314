/* The augmentation op (dt_augment.h) and its CPU twin. */
#include "data/dt_augment.h"

#include "core/dt_kernel.h"

void dt_augment_images_cpu(int n, int S, const uint8_t *src, const dt_augment_sample *samples, uint8_t *out) {
    dt_scratch scratch = {0};
    for (int i = 0; i < n; i++) {
        const dt_augment_sample *s = &samples[i];
        dt_image img = {s->w, s->h, (uint8_t *)src + s->offset}; /* read only */
        dt_transform_apply(&s->plan, &img, S, out + (size_t)i * S * S * 3, &scratch);
    }
    dt_scratch_free(&scratch);
}

typedef __typeof__(dt_augment_images_cpu) augment_fn;
DT_OP_TABLE(augment_k, "augment_images", augment_fn, DT_TWINS(augment_k, dt_augment_images, DT_U8, DT_NCHW))

dt_tensor *dt_augment_images(const dt_tensor *src, const dt_augment_sample *samples, int n, int S) {
    dt_require_live("augment_images", src);
    dt_require_ndim("augment_images", "src", src, 1);
    dt_require_dtype("augment_images", "src", src, DT_U8);
    if (n < 0 || S < 1) dt_fatal("augment_images: %d samples of size %d", n, S);
    for (int i = 0; i < n; i++) {
        const dt_augment_sample *s = &samples[i];
        int64_t bytes = (int64_t)s->w * s->h * 3;
        if (s->w < 1 || s->h < 1 || s->offset < 0 || s->offset > src->numel - bytes)
            dt_fatal("augment_images: sample %d (%dx%d at byte %lld) is not inside src (%lld bytes)", i, s->w, s->h,
                     (long long)s->offset, (long long)src->numel);
        if (s->w > s->plan.w || s->h > s->plan.h)
            dt_fatal("augment_images: sample %d is %dx%d, larger than its plan's %dx%d", i, s->w, s->h, s->plan.w,
                     s->plan.h);
    }
    int64_t shape[4] = {n, S, S, 3};
    dt_tensor *out = dt_tensor_new_as(4, shape, src->dev, DT_U8, DT_NCHW);
    DT_PICK(augment_k, src->dev, DT_U8, DT_NCHW)(n, S, src->data, samples, out->data);
    return out;
}
