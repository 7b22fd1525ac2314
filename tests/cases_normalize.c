/* The image normalization's op cases (dt_opcase.h) - dt_normalize_images from u8 [N, H, W, 3]
 * batches (fresh uniform bytes) into f32 NCHW, f32 NHWC and bf16 NHWC: odd sizes, batch 1, a
 * batch of the trainer's shape - and the u8 dtype itself: its stores (saturated, rounded to
 * nearest even) and dt_convert to and from it, on the CPU and against the GPU.
 *
 * The kernel and its twin do the same fp32 operations in the same order (normalize_images.h), so
 * the parity tolerances are set far below one rounding: any difference fails. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/dt_opcase.h"
#include "ops/dt_ops.h"
#include "tests/dt_test.h"
#include "data/dt_transform.h"

/* The loader's ImageNet constants, as the trainer passes them. */
static dt_tensor *normalize(const dt_opcase *c, dt_tensor **in, dt_dtype dtype, dt_layout layout) {
    (void)c;
    return dt_normalize_images(in[0], dt_imagenet_mean, dt_imagenet_std, dtype, layout);
}

#define NORM(nm, n, h, w)                                                                                   \
    {.name = nm, .ops = {"normalize_images"}, .n_in = 1, .in = {{4, {n, h, w, 3}, DT_IN_U8, 0, 0}}, .build_as = normalize, \
     .f32_tol = 1e-12f, .bf16_tol = 1e-12f}

static const dt_opcase norm_cases[] = {
    NORM("normalize_images, odd 3x7x11", 3, 7, 11),
    NORM("normalize_images, batch 1, 32x32", 1, 32, 32),
    NORM("normalize_images, 8x64x64", 8, 64, 64),
};

DT_OPCASES(normalize, norm_cases)

/* Its other (mean, std) are used as given: channel c of a constant image is (v/255 - m[c]) / s[c]. */
static void own_constants(dt_dev dev) {
    const float mean[3] = {0.25f, 0.5f, 0.75f}, std[3] = {0.5f, 2.0f, 4.0f};
    dt_scope_begin();
    int64_t s[4] = {2, 3, 5, 3};
    float v[2 * 3 * 5 * 3];
    for (int i = 0; i < 90; i++) v[i] = (float)(i % 3 == 0 ? 51 : i % 3 == 1 ? 255 : 0);
    dt_tensor *x = dt_tensor_from_values(4, s, dev, DT_U8, DT_NCHW, v);
    float *y = dt_tensor_host_copy(dt_normalize_images(x, mean, std, DT_F32, DT_NHWC));
    const float want[3] = {(51 / 255.0f - 0.25f) / 0.5f, (1.0f - 0.5f) / 2.0f, (0.0f - 0.75f) / 4.0f};
    int bad = 0;
    for (int n = 0; n < 2; n++)
        for (int c = 0; c < 3; c++)
            for (int p = 0; p < 15; p++) bad += y[(n * 3 + c) * 15 + p] != want[c];
    EXPECT_MSG(bad == 0, "%s: %d values are not (v/255 - mean[c]) / std[c]", dt_dev_name(dev), bad);
    free(y);
    dt_scope_end();
}

DT_TEST(normalize_images_uses_its_constants) { own_constants(DT_CPU); }
DT_GPU_TEST(gpu_normalize_images_uses_its_constants) { own_constants(DT_GPU); }

static void normalize_f32_input(void *p) {
    (void)p;
    dt_normalize_images(dt_tensor_new4_as(DT_CPU, DT_F32, DT_NCHW, 1, 4, 4, 3), dt_imagenet_mean, dt_imagenet_std,
                        DT_F32, DT_NCHW);
}

static void normalize_four_channels(void *p) {
    (void)p;
    dt_normalize_images(dt_tensor_new4_as(DT_CPU, DT_U8, DT_NCHW, 1, 4, 4, 4), dt_imagenet_mean, dt_imagenet_std,
                        DT_F32, DT_NCHW);
}

static void normalize_to_bf16_nchw(void *p) {
    (void)p;
    dt_normalize_images(dt_tensor_new4_as(DT_CPU, DT_U8, DT_NCHW, 1, 4, 4, 3), dt_imagenet_mean, dt_imagenet_std,
                        DT_BF16, DT_NCHW);
}

DT_TEST(normalize_images_refuses_what_it_cannot_read) {
    EXPECT_DEATH(normalize_f32_input, NULL, "must be u8");
    EXPECT_DEATH(normalize_four_channels, NULL, "must be [N, H, W, 3]");
    EXPECT_DEATH(normalize_to_bf16_nchw, NULL, "normalize_images: no kernel for bf16 nchw");
}

/* ---- the u8 dtype ---- */

DT_TEST(u8_stores_saturate_and_round_to_nearest_even) {
    EXPECT_EQ_INT(dt_dtype_size(DT_U8), 1);
    EXPECT(!strcmp(dt_dtype_name(DT_U8), "u8"));
    dt_dtype d;
    EXPECT(dt_dtype_parse("u8", &d) == 0 && d == DT_U8);
    EXPECT(dt_dtype_is_int(DT_U8) && dt_dtype_is_int(DT_I32) && !dt_dtype_is_int(DT_BF16));
    const float in[] = {-3.0f, -0.0f, 0.49f, 0.5f, 1.5f, 2.5f, 127.5f, 254.5f, 254.6f, 255.0f, 300.0f, INFINITY, NAN};
    const int want[] = {0, 0, 0, 0, 2, 2, 128, 254, 255, 255, 255, 255, 0};
    for (int i = 0; i < (int)(sizeof in / sizeof in[0]); i++)
        EXPECT_MSG(dt_u8_from_float(in[i]) == want[i], "u8(%g) = %d, want %d", in[i], dt_u8_from_float(in[i]), want[i]);
    uint8_t b[2];
    dt_elem_st(b, DT_U8, 1, 200.4f);
    EXPECT(b[1] == 200 && dt_elem_ld(b, DT_U8, 1) == 200.0f);
}

/* dt_convert to u8 (through the values above, in a 4-D NHWC target) and back to f32 NCHW and
 * bf16 NHWC: the stores as dt_u8_from_float, the loads exact. */
static void convert_u8(dt_dev dev) {
    dt_scope_begin();
    enum { N = 2, C = 3, H = 4, W = 5, NUM = N * C * H * W };
    float v[NUM];
    for (int i = 0; i < NUM; i++) v[i] = (float)((i * 37) % 300) - 20.0f + (i % 4) * 0.25f;
    int64_t s[4] = {N, C, H, W};
    dt_tensor *x = dt_tensor_from_values(4, s, dev, DT_F32, DT_NCHW, v);
    dt_tensor *u = dt_convert(x, DT_U8, DT_NHWC);
    float *back = dt_tensor_host_copy(dt_convert(u, DT_F32, DT_NCHW));
    float *bf = dt_tensor_host_copy(dt_convert(u, DT_BF16, DT_NHWC));
    int bad = 0;
    for (int i = 0; i < NUM; i++) bad += back[i] != (float)dt_u8_from_float(v[i]) || bf[i] != back[i];
    EXPECT_MSG(bad == 0, "%s: %d values changed through u8 otherwise than dt_u8_from_float says", dt_dev_name(dev), bad);
    free(back);
    free(bf);
    dt_scope_end();
}

DT_TEST(convert_to_and_from_u8) { convert_u8(DT_CPU); }
DT_GPU_TEST(gpu_convert_to_and_from_u8) { convert_u8(DT_GPU); }
