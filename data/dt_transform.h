/* dt_transform.h: the ImageNet train and val transforms, as torchvision's
 *
 *   train: RandomResizedCrop(S, scale=(scale_min, 1), ratio=(3/4, 4/3)) (scale_min 0.08 as torchvision
 *          unless configured), RandomHorizontalFlip(0.5),
 *          ToTensor, Normalize(mean, std)
 *   val:   Resize(round(S * 256 / 224)), CenterCrop(S), ToTensor, Normalize(mean, std)
 *
 * Output of both: out [3, S, S] float32, CHW, (v / 255 - mean[c]) / std[c] with v the uint8
 * value after resampling (dt_image.h: antialiased bilinear, rounded to uint8 like PIL).
 * Randomness comes only from the dt_rng passed in; the loader derives it from
 * (seed, epoch, dataset index), so a sample's augmentation never depends on threads or order.
 */
#ifndef DT_TRANSFORM_H
#define DT_TRANSFORM_H

#include <stdint.h>

#include "dt_image.h"
#include "dt_rng.h"

#ifdef __cplusplus
extern "C" {
#endif

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

/* u8: [S, S, 3] HWC uint8 -> out: [3, S, S] float normalized; flip mirrors columns. */
void dt_normalize_u8(const uint8_t *u8, int S, int flip, float *out);

/* The transforms. `u8` is scratch of S*S*3 bytes, `scratch` the resampler's. */
/* scale_min: the smallest crop area as a fraction of the image (torchvision: 0.08). */
void dt_transform_train(const dt_image *img, int S, double scale_min, dt_rng *r, float *out, uint8_t *u8,
                        dt_scratch *scratch);
void dt_transform_val(const dt_image *img, int S, float *out, uint8_t *u8, dt_scratch *scratch);
/* The val geometry alone (also for tests): Resize(resize) then CenterCrop(S) as one resample
 * into u8 [S, S, 3]. */
void dt_resize_center_crop(const dt_image *img, int resize, int S, uint8_t *u8, dt_scratch *scratch);

#ifdef __cplusplus
}
#endif
#endif
