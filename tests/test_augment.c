/* The augmentation op (data/dt_augment.h): its CPU twin against the loader's transform on the
 * sample dataset's decoded JPEGs (full and reduced decodes, train and val plans), and the CUDA
 * kernel against the twin on those and on noise images of many sizes (large downscales,
 * upscales, crops of 1 pixel). */
#include <stdlib.h>
#include <string.h>

#include "tests/data_testutil.h"
#include "data/dt_augment.h"
#include "data/dt_dataset.h"
#include "core/dt_file.h"
#include "tests/dt_test.h"

enum { MAX_SAMPLES = 32 };

/* Decoded images packed one after another (one spare byte between them: odd offsets), with
 * their samples; img[i] is sample i's image as decoded. */
typedef struct {
    uint8_t *packed;
    int64_t bytes;
    dt_augment_sample s[MAX_SAMPLES];
    dt_image img[MAX_SAMPLES];
    int n;
} batch;

static void add(batch *b, dt_image img, const dt_transform_plan *plan) {
    int64_t bytes = (int64_t)img.w * img.h * 3;
    b->packed = realloc(b->packed, (size_t)(b->bytes + bytes + 1));
    memcpy(b->packed + b->bytes, img.pix, (size_t)bytes);
    b->s[b->n] = (dt_augment_sample){b->bytes, img.w, img.h, *plan};
    b->img[b->n++] = img;
    b->bytes += bytes + 1;
}

static void batch_free(batch *b) {
    for (int i = 0; i < b->n; i++) dt_image_free(&b->img[i]);
    free(b->packed);
}

/* The sample dataset's train JPEGs, decoded as the loader decodes them (at the plan's
 * min_scale: with libjpeg-turbo the val plans of 40-pixel images at S = 16 decode at half
 * size); every third a
 * val plan, the others train plans from their own streams. */
static void real_batch(batch *b, int S) {
    memset(b, 0, sizeof *b);
    dt_dataset ds;
    dt_err err;
    EXPECT_EQ_INT(dt_dataset_open(&ds, dt_test_shapes("shapes", 3, 6, 2, 40), "train", NULL, &err), 0);
    dt_scratch file = {0};
    for (int64_t i = 0; i < ds.count && b->n < 18; i++) {
        size_t n;
        int w, h;
        EXPECT_EQ_INT(dt_file_read(ds.paths[i], "image", DT_IMAGE_MAX_FILE_BYTES, &file, &n, &err), 0);
        EXPECT_EQ_INT(dt_image_probe(file.p, n, ds.paths[i], DT_IMAGE_MAX_PIXELS, &w, &h, &err), 0);
        dt_transform_plan plan;
        dt_rng r;
        dt_rng_derive(&r, 5, 0, (uint64_t)i);
        if (i % 3 == 2) dt_transform_plan_val(w, h, S, &plan);
        else dt_transform_plan_train(w, h, S, 0.08, &r, &plan);
        dt_image img;
        EXPECT_EQ_INT(dt_image_decode(file.p, n, ds.paths[i], DT_IMAGE_MAX_PIXELS, plan.min_scale, &img, &err), 0);
        add(b, img, &plan);
    }
    dt_scratch_free(&file);
    dt_dataset_close(&ds);
}

/* Noise images from 1 x 1 to 300 x 200 pixels, train plans (crops of 8 % to all of the image:
 * shrinking and enlarging) and val plans alternately, some flipped. */
static void noise_batch(batch *b, int S) {
    memset(b, 0, sizeof *b);
    static const int sizes[][2] = {{1, 1}, {300, 200}, {7, 93}, {64, 64}, {33, 17}, {250, 31}, {2, 3}, {120, 180}};
    for (int i = 0; i < 16; i++) {
        int w = sizes[i % 8][0], h = sizes[i % 8][1];
        dt_image img = {w, h, malloc((size_t)w * h * 3)};
        for (int k = 0; k < w * h * 3; k++) img.pix[k] = (uint8_t)dt_rng_below(dt_test_rng(), 256);
        dt_transform_plan plan;
        if (i % 2) dt_transform_plan_val(w, h, S, &plan);
        else dt_transform_plan_train(w, h, S, 0.08, dt_test_rng(), &plan);
        add(b, img, &plan);
    }
}

/* The op on b, on dev: a host copy of u8 [n, S, S, 3] (malloc'ed). */
static uint8_t *augment(const batch *b, int S, dt_dev dev) {
    int64_t shape[1] = {b->bytes};
    dt_tensor *src = dt_tensor_new_as(1, shape, dev, DT_U8, DT_NCHW);
    dt_tensor_upload(src, b->packed);
    dt_tensor *out = dt_augment_images(src, b->s, b->n, S);
    EXPECT(out->ndim == 4 && out->shape[0] == b->n && out->shape[1] == S && out->shape[2] == S && out->shape[3] == 3);
    uint8_t *h = malloc((size_t)out->numel);
    dt_tensor_download(out, h);
    return h;
}

DT_TEST(augment_images_cpu_is_the_loaders_transform) {
    const int S = 16;
    batch b;
    real_batch(&b, S);
    EXPECT_EQ_INT(b.n, 18);
#ifdef DT_LIBJPEG
    int reduced = 0;
    for (int i = 0; i < b.n; i++) reduced += b.img[i].w < b.s[i].plan.w;
    EXPECT(reduced > 0); /* the val plans' half-size decodes (stb_image decodes at full size) */
#endif
    uint8_t *got = augment(&b, S, DT_CPU), *want = malloc((size_t)S * S * 3);
    dt_scratch sc = {0};
    for (int i = 0; i < b.n; i++) {
        dt_transform_apply(&b.s[i].plan, &b.img[i], S, want, &sc);
        EXPECT_MSG(!memcmp(got + (size_t)i * S * S * 3, want, (size_t)S * S * 3),
                   "sample %d (%dx%d, %s): the op differs from dt_transform_apply", i, b.img[i].w, b.img[i].h,
                   b.s[i].plan.train ? "train" : "val");
    }
    dt_scratch_free(&sc);
    free(got), free(want);
    batch_free(&b);
}

static void augment_outside(void *p) {
    (void)p;
    int64_t shape[1] = {100};
    dt_tensor *src = dt_tensor_new_as(1, shape, DT_CPU, DT_U8, DT_NCHW);
    dt_augment_sample s = {50, 5, 5, {0}};
    dt_transform_plan_val(5, 5, 4, &s.plan);
    dt_augment_images(src, &s, 1, 4);
}

DT_TEST(augment_images_refuses_a_sample_outside_src) {
    EXPECT_DEATH(augment_outside, NULL, "sample 0 (5x5 at byte 50) is not inside src (100 bytes)");
}

/* GPU against the twin: bytes equal - or within 1 where the host compiler fuses the twin's
 * multiply-adds (__FP_FAST_FMAF), which the kernel never does. */
static void gpu_vs_cpu(const char *what, const batch *b, int S) {
    uint8_t *c = augment(b, S, DT_CPU), *g = augment(b, S, DT_GPU);
    int64_t n = (int64_t)b->n * S * S * 3, diff = 0, far = 0;
    for (int64_t i = 0; i < n; i++) {
        int d = abs((int)c[i] - (int)g[i]);
        diff += d != 0;
        far += d > 1;
    }
#ifdef __FP_FAST_FMAF
    EXPECT_MSG(far == 0, "%s: %lld bytes differ from the CPU twin by more than 1", what, (long long)far);
#else
    EXPECT_MSG(diff == 0, "%s: %lld of %lld bytes differ from the CPU twin (%lld by more than 1)", what, (long long)diff,
               (long long)n, (long long)far);
#endif
    free(c), free(g);
}

DT_GPU_TEST(gpu_augment_images_matches_cpu_twin) {
    batch b;
    real_batch(&b, 16);
    gpu_vs_cpu("sample dataset, S 16", &b, 16);
    batch_free(&b);
    noise_batch(&b, 24);
    gpu_vs_cpu("noise images, S 24", &b, 24);
    batch_free(&b);
    noise_batch(&b, 224);
    gpu_vs_cpu("noise images, S 224", &b, 224);
    batch_free(&b);
}
