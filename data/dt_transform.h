/* dt_transform.h: the ImageNet train and val transforms, as torchvision's
 *
 *   train: RandomResizedCrop(S, scale=(scale_min, 1), ratio=(3/4, 4/3)) (scale_min 0.08 as torchvision
 *          unless configured), RandomHorizontalFlip(0.5)
 *   val:   Resize(round(S * 256 / 224)), CenterCrop(S)
 *
 * Output of both: u8 [S, S, 3] HWC uint8, the values after resampling (dt_image.h:
 * antialiased bilinear, rounded to uint8 like PIL), flipped. ToTensor + Normalize(mean, std)
 * run on the device that trains, on the whole batch (dt_normalize_images, ops/dt_ops.h,
 * with dt_imagenet_mean / dt_imagenet_std): (v / 255 - mean[c]) / std[c].
 * Randomness comes only from the dt_rng passed in; the loader derives it from
 * (seed, epoch, dataset index), so a sample's augmentation never depends on threads or order.
 */
#ifndef DT_TRANSFORM_H
#define DT_TRANSFORM_H

#include <stdint.h>

#include "data/dt_image.h"
#include "core/dt_rng.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Normalize's constants for the loader's batches (what dt_normalize_images is given). */
extern const float dt_imagenet_mean[3]; /* 0.485, 0.456, 0.406 */
extern const float dt_imagenet_std[3];  /* 0.229, 0.224, 0.225 */

/* A crop box in source pixels: columns [x, x + w), rows [y, y + h). */
typedef struct {
    int x, y, w, h;
} dt_box;

/* torchvision RandomResizedCrop.get_params: up to 10 draws of an area fraction in
 * [scale_lo, scale_hi] and a log-uniform aspect ratio in [ratio_lo, ratio_hi]; the first box
 * that fits is placed uniformly; if none fits, the whole image center-cropped to the ratio
 * range. Sizes are rounded half to even as Python's round(). */
dt_box dt_rrc_box(int width, int height, double scale_lo, double scale_hi, double ratio_lo, double ratio_hi,
                  dt_rng *r);

/* torchvision Resize(size) with an int: shorter side -> size, longer side -> int(size * long
 * / short) (truncated). */
void dt_resize_shorter_dims(int w, int h, int size, int *ow, int *oh);
/* round(S * 256 / 224): the val resize for crop size S (256 for 224). */
int dt_val_resize_size(int S);

/* A transform decided from the image's full size (its header) before the pixels are decoded,
 * so that the decoder may shrink the image as far as the transform allows. */
typedef struct {
    int train;        /* 1: RandomResizedCrop `box` to S x S, flipped if `flip`; 0: the val transform */
    int w, h;         /* the full image size the geometry refers to */
    dt_box box;       /* train: the crop, in full-size pixels */
    int flip;
    double min_scale; /* the smallest decode scale (of each side) at which every output pixel is
                         still a downscale of the crop: S / the crop's shorter side for train,
                         round(S * 256 / 224) / the image's shorter side for val; at most 1 */
} dt_transform_plan;

/* train: draws the box (dt_rrc_box) then the flip from r, in that order. scale_min: the
 * smallest crop area as a fraction of the image (torchvision: 0.08). */
void dt_transform_plan_train(int w, int h, int S, double scale_min, dt_rng *r, dt_transform_plan *p);
void dt_transform_plan_val(int w, int h, int S, dt_transform_plan *p);
/* Runs the plan on img: the image it was made for, or a reduced decode of it (img->w / p->w of
 * each side, from dt_image_decode with min_scale = p->min_scale); the geometry is scaled to
 * it. u8: the output, [S, S, 3] HWC (flipped when p->flip); `scratch` is the resampler's. On the
 * full image the result is bit-identical to crop-then-resize (train) and resize-then-crop (val). */
void dt_transform_apply(const dt_transform_plan *p, const dt_image *img, int S, uint8_t *u8, dt_scratch *scratch);
/* The resampling axes dt_transform_apply uses for an img_w x img_h decode (the device
 * augmentation, data/dt_augment.h, builds its filter tables from them); the flip is p->flip. */
void dt_transform_axes(const dt_transform_plan *p, int img_w, int img_h, int S, dt_axis_map *mx, dt_axis_map *my);
/* The val geometry alone (also for tests): Resize(resize) then CenterCrop(S) of an image of
 * full size full_w x full_h, of which img is a decode at that or a reduced size, as one
 * resample into u8 [S, S, 3]. */
void dt_resize_center_crop(const dt_image *img, int full_w, int full_h, int resize, int S, uint8_t *u8,
                           dt_scratch *scratch);

#ifdef __cplusplus
}
#endif
#endif
