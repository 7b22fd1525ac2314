#include "data/dt_transform.h"

#include <math.h>

const float dt_imagenet_mean[3] = {0.485f, 0.456f, 0.406f};
const float dt_imagenet_std[3] = {0.229f, 0.224f, 0.225f};

/* Python's round(): half to even (nearbyint in the default rounding mode). */
static int round_half_even(double x) { return (int)nearbyint(x); }

dt_box dt_rrc_box(int width, int height, double scale_lo, double scale_hi, double ratio_lo, double ratio_hi,
                  dt_rng *r) {
    dt_box b;
    double area = (double)width * height;
    double log_lo = log(ratio_lo), log_hi = log(ratio_hi);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * (scale_lo + (scale_hi - scale_lo) * dt_rng_uniform_f64(r));
        double aspect = exp(log_lo + (log_hi - log_lo) * dt_rng_uniform_f64(r));
        int w = round_half_even(sqrt(target * aspect));
        int h = round_half_even(sqrt(target / aspect));
        if (0 < w && w <= width && 0 < h && h <= height) {
            b.y = (int)dt_rng_below(r, (uint32_t)(height - h + 1));
            b.x = (int)dt_rng_below(r, (uint32_t)(width - w + 1));
            b.w = w;
            b.h = h;
            return b;
        }
    }
    /* Fallback: the largest centered box whose ratio is clamped into [ratio_lo, ratio_hi]. */
    double in_ratio = (double)width / height;
    if (in_ratio < ratio_lo) {
        b.w = width;
        b.h = round_half_even(b.w / ratio_lo);
    } else if (in_ratio > ratio_hi) {
        b.h = height;
        b.w = round_half_even(b.h * ratio_hi);
    } else {
        b.w = width;
        b.h = height;
    }
    if (b.w < 1) b.w = 1; /* 1-pixel-wide images: keep the box non-empty */
    if (b.h < 1) b.h = 1;
    b.y = (height - b.h) / 2;
    b.x = (width - b.w) / 2;
    return b;
}

void dt_resize_shorter_dims(int w, int h, int size, int *ow, int *oh) {
    if (w <= h) {
        *ow = size;
        *oh = (int)((double)((int64_t)size * h) / w);
    } else {
        *oh = size;
        *ow = (int)((double)((int64_t)size * w) / h);
    }
    if (*ow < 1) *ow = 1;
    if (*oh < 1) *oh = 1;
}

int dt_val_resize_size(int S) { return (int)floor(S * 256.0 / 224.0 + 0.5); }

/* Mirrors the columns of u8 [S, S, 3] in place (RandomHorizontalFlip). */
static void flip_columns(uint8_t *u8, int S) {
    for (int y = 0; y < S; y++) {
        uint8_t *row = u8 + (size_t)y * S * 3;
        for (int a = 0, b = S - 1; a < b; a++, b--)
            for (int c = 0; c < 3; c++) {
                uint8_t t = row[a * 3 + c];
                row[a * 3 + c] = row[b * 3 + c];
                row[b * 3 + c] = t;
            }
    }
}

/* The smallest decode scale at which a crop of cw x ch pixels still covers `need` output pixels
 * on each side (1 = no reduction). */
static double min_scale_for(int cw, int ch, int need) {
    int side = cw < ch ? cw : ch;
    double s = (double)need / side;
    return s < 1.0 ? s : 1.0;
}

void dt_transform_plan_train(int w, int h, int S, double scale_min, dt_rng *r, dt_transform_plan *p) {
    p->train = 1;
    p->w = w;
    p->h = h;
    p->box = dt_rrc_box(w, h, scale_min, 1.0, 3.0 / 4.0, 4.0 / 3.0, r);
    p->flip = dt_rng_uniform(r) < 0.5f;
    p->min_scale = min_scale_for(p->box.w, p->box.h, S);
}

void dt_transform_plan_val(int w, int h, int S, dt_transform_plan *p) {
    p->train = 0;
    p->w = w;
    p->h = h;
    p->box = (dt_box){0, 0, w, h};
    p->flip = 0;
    p->min_scale = min_scale_for(w, h, dt_val_resize_size(S));
}

/* The axes of Resize(resize) + CenterCrop(S) of a full_w x full_h image decoded at img_w x img_h. */
static void center_crop_axes(int img_w, int img_h, int full_w, int full_h, int resize, int S, dt_axis_map *mx,
                             dt_axis_map *my) {
    int rw, rh;
    dt_resize_shorter_dims(full_w, full_h, resize, &rw, &rh);
    /* CenterCrop offsets inside the resized image (torchvision: int(round((H - S) / 2))). When
     * the resized image is smaller than S (resize < S), the crop reaches outside and the
     * resampler clamps to the border instead of torchvision's zero padding. */
    int left = round_half_even((rw - S) / 2.0), top = round_half_even((rh - S) / 2.0);
    /* Same origin/scale as dt_image_resize(img, rw, rh): bit-identical to resize-then-crop. */
    *mx = (dt_axis_map){S, 0.0, left, (double)img_w / rw, 0, img_w};
    *my = (dt_axis_map){S, 0.0, top, (double)img_h / rh, 0, img_h};
}

void dt_resize_center_crop(const dt_image *img, int full_w, int full_h, int resize, int S, uint8_t *u8,
                           dt_scratch *scratch) {
    dt_axis_map mx, my;
    center_crop_axes(img->w, img->h, full_w, full_h, resize, S, &mx, &my);
    dt_image_resample(img, &mx, &my, u8, scratch);
}

/* One axis of the train crop: [x, x + len) of a `full`-pixel side, read from a decoded side of
 * `dec` pixels (dec == full: the crop as is, bit for bit the old crop-then-resize). */
static dt_axis_map crop_axis(int x, int len, int full, int dec, int out) {
    double s = (double)dec / full;
    int lo = (int)floor(x * s), hi = (int)ceil((x + len) * s);
    if (hi > dec) hi = dec;
    if (hi <= lo) hi = lo + 1;
    return (dt_axis_map){out, x * s, 0, len * s / out, lo, hi};
}

void dt_transform_axes(const dt_transform_plan *p, int img_w, int img_h, int S, dt_axis_map *mx, dt_axis_map *my) {
    DT_REQUIRE(img_w <= p->w && img_h <= p->h, "transform: a %dx%d image for a plan made for %dx%d", img_w, img_h,
               p->w, p->h);
    if (p->train) {
        *mx = crop_axis(p->box.x, p->box.w, p->w, img_w, S);
        *my = crop_axis(p->box.y, p->box.h, p->h, img_h, S);
    } else {
        center_crop_axes(img_w, img_h, p->w, p->h, dt_val_resize_size(S), S, mx, my);
    }
}

void dt_transform_apply(const dt_transform_plan *p, const dt_image *img, int S, uint8_t *u8, dt_scratch *scratch) {
    dt_axis_map mx, my;
    dt_transform_axes(p, img->w, img->h, S, &mx, &my);
    dt_image_resample(img, &mx, &my, u8, scratch);
    if (p->flip) flip_columns(u8, S);
}
