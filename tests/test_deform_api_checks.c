/* The C API's descriptor and argument checks, its two descriptor versions and the empty batch
 * (CPU). Its numerics on the CPU: test_deform_api_numeric.c; on the GPU:
 * test_deform_api_gpu.c and tests/api/test_deform_api.py (against torchvision). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/deform/dt_deform_api.h"
#include "core/dt_device.h"
#include "tests/dt_test.h"

/* f32 NCHW everywhere (every dtype / layout field 0), no groups, CUDA. */
static dt_deform_desc base(void) {
    dt_deform_desc d = {.n = 2, .c = 6, .h = 9, .w = 9, .cout = 4, .kh = 3, .kw = 3, .stride_h = 1, .stride_w = 1,
                        .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1, .offset_groups = 1, .size = (int)sizeof d};
    return d;
}

/* Every dtype field DT_DEFORM_API_F64. */
static dt_deform_desc f64(dt_deform_desc d) {
    d.dtype = d.weight_dtype = d.offset_dtype = d.mask_dtype = DT_DEFORM_API_F64;
    return d;
}

static int has(const char *needle) { return strstr(dt_deform_api_error(), needle) != NULL; }

DT_TEST(deform_api_rejects_bad_descriptors) {
    dt_deform_desc d = base();
    int ho, wo;
    EXPECT_EQ_INT(dt_deform_api_out_size(&d, &ho, &wo), 0);
    EXPECT_EQ_INT(ho, 9);
    EXPECT_EQ_INT(wo, 9);
    d.offset_groups = 4;
    EXPECT_EQ_INT(dt_deform_api_out_size(&d, &ho, &wo), -1);
    EXPECT_MSG(has("6 channels cannot be split into 4 offset groups"), "%s", dt_deform_api_error());
    d.offset_groups = 1;
    d.h = 1;
    d.pad_h = 0;
    EXPECT_EQ_INT(dt_deform_api_out_size(&d, &ho, &wo), -1);
    EXPECT_MSG(has("too small"), "%s", dt_deform_api_error());
    d.h = 9;
    d.pad_h = 1;
    d.n = -1;
    EXPECT_EQ_INT(dt_deform_api_out_size(&d, &ho, &wo), -1);
    EXPECT_MSG(has("n >= 0"), "%s", dt_deform_api_error());
    d.n = 2;
    EXPECT_EQ_INT(dt_deform_api_forward(&d, 7, NULL, NULL, NULL, NULL, NULL, NULL, NULL), -1);
    EXPECT_MSG(has("unknown mode 7"), "%s", dt_deform_api_error());
    /* Without a GPU a CUDA call says so instead of crashing. */
    if (dt_gpu_count() == 0) {
        EXPECT_EQ_INT(dt_deform_api_forward(&d, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL), -1);
        EXPECT_MSG(has("CUDA"), "%s", dt_deform_api_error());
    }
    /* ... while a CPU call needs none: it gets as far as its buffers */
    d.device = DT_DEFORM_API_CPU;
    float w[4 * 6 * 9];
    EXPECT_EQ_INT(dt_deform_api_forward(&d, 1, NULL, NULL, NULL, w, NULL, NULL, NULL), -1);
    EXPECT_MSG(has("x, offset, weight and y must not be NULL"), "%s", dt_deform_api_error());
}

DT_TEST(deform_api_knows_every_descriptor_version) {
    dt_deform_desc d = base();
    EXPECT_EQ_INT(sizeof d, 116);
    EXPECT_EQ_INT(dt_deform_api_check(&d, 1), 0);
    /* The 100- and 108-byte versions, each in a block of exactly its size (the sanitizers catch a
     * read past it): no weight groups and CUDA / dense offsets and mask. */
    const int sizes[2] = {DT_DEFORM_DESC_SIZE_V1, DT_DEFORM_DESC_SIZE_V2};
    for (int i = 0; i < 2; i++) {
        d.size = sizes[i];
        dt_deform_desc *old = malloc((size_t)sizes[i]);
        memcpy(old, &d, (size_t)sizes[i]);
        EXPECT_EQ_INT(dt_deform_api_check(old, 1), 0);
        free(old);
    }
    d.size = 64;
    EXPECT_EQ_INT(dt_deform_api_check(&d, 1), -1);
    EXPECT_MSG(has("desc.size is 64") && has("116") && has("108") && has("100"), "%s", dt_deform_api_error());
    d = base();
    d.weight_groups = 2; /* 6 and 4 channels split in two */
    EXPECT_EQ_INT(dt_deform_api_check(&d, 1), 0);
}

DT_TEST(deform_api_refuses_groups_f64_mixes_devices_and_pitches) {
    struct {
        const char *what;
        dt_deform_desc d;
        int mode;
        const char *needle;
    } cases[] = {
        {"4 weight groups of 6 channels", base(), 1, "cannot be split into 4 weight groups"},
        {"3 weight groups of 4 outputs", base(), 1, "cannot be split into 3 weight groups"},
        {"-1 weight groups", base(), 1, "cannot be split into -1 weight groups"},
        {"f64 x, f32 weight", f64(base()), 1, "desc.weight_dtype is f32"},
        {"f64 x, bf16 mask", f64(base()), 1, "desc.mask_dtype is bf16"},
        {"f32 x, f64 offsets", base(), 1, "desc.offset_dtype (offset and grad_offset) is f64 but desc.dtype (x) is not"},
        {"f64 channels last", f64(base()), 1, "NCHW in every tensor"},
        {"f64 with TF32", f64(base()), 1 | DT_DEFORM_API_TF32, "DT_DEFORM_API_TF32 is for f32 x"},
        {"device 2", base(), 1, "desc.device is 2"},
        {"pitched offsets, unfused", base(), 0, "pitched offsets and mask are read by DT_DEFORM_API_DEFT"},
        {"an NCHW offset pitch below the dense one", base(), 1, "desc.offset_pitch is 100: 0 (dense) or at least 1458"},
        {"an NHWC mask pitch below its 9 channels", base(), 1, "desc.mask_pitch is 8: 0 (dense) or at least 9"},
        {"f64 with a pitch", f64(base()), 1, "an f64 call reads dense offsets and mask"},
    };
    cases[9].d.offset_pitch = 27 * 81;
    cases[10].d.offset_pitch = 100;
    cases[11].d.has_mask = 1, cases[11].d.mask_layout = DT_NHWC, cases[11].d.mask_pitch = 8;
    cases[12].d.offset_pitch = 27 * 81;
    cases[0].d.weight_groups = 4;
    cases[1].d.weight_groups = 3;
    cases[2].d.weight_groups = -1;
    cases[3].d.weight_dtype = DT_F32;
    cases[4].d.mask_dtype = DT_BF16;
    cases[5].d.offset_dtype = DT_DEFORM_API_F64;
    cases[6].d.layout = DT_NHWC;
    cases[8].d.device = 2;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        EXPECT_MSG(dt_deform_api_check(&cases[i].d, cases[i].mode) == -1, "%s accepted", cases[i].what);
        EXPECT_MSG(has(cases[i].needle), "%s: '%s' lacks '%s'", cases[i].what, dt_deform_api_error(), cases[i].needle);
    }
    /* what is accepted: f64 in every field (either mode, deterministic too), groups dividing both */
    dt_deform_desc d = f64(base());
    d.weight_groups = 2;
    EXPECT_EQ_INT(dt_deform_api_check(&d, 0), 0);
    EXPECT_EQ_INT(dt_deform_api_check(&d, 1 | DT_DEFORM_API_DETERMINISTIC), 0);
    /* and offsets and mask as channel slices of one [2, 27, 9, 9] tensor, in deft mode */
    d = base();
    d.has_mask = 1, d.offset_pitch = d.mask_pitch = 27 * 81;
    EXPECT_EQ_INT(dt_deform_api_check(&d, 1), 0);
    d.offset_layout = d.mask_layout = DT_NHWC, d.offset_pitch = d.mask_pitch = 27;
    EXPECT_EQ_INT(dt_deform_api_check(&d, 1), 0);
}

static int all_zero(const void *p, size_t bytes) {
    for (size_t i = 0; i < bytes; i++)
        if (((const unsigned char *)p)[i]) return 0;
    return 1;
}

/* n = 0: valid; nothing computed; the parameter gradients asked for are zeros; the empty
 * tensors' pointers may be NULL (PyTorch's are). */
DT_TEST(deform_api_empty_batch) {
    dt_deform_desc d = base();
    d.n = 0;
    d.has_bias = d.has_mask = 1;
    d.weight_groups = 2;
    d.device = DT_DEFORM_API_CPU;
    int ho, wo;
    EXPECT_EQ_INT(dt_deform_api_out_size(&d, &ho, &wo), 0);
    EXPECT_EQ_INT(ho * wo, 81);
    for (int pass = 0; pass < 3; pass++) { /* f32, a bf16 weight with bf16 NHWC x, f64 */
        dt_deform_desc e = pass == 2 ? f64(d) : d;
        if (pass == 1) {
            e.dtype = e.weight_dtype = DT_BF16;
            e.layout = DT_NHWC;
        }
        size_t es = pass == 2 ? 8 : pass == 1 ? 2 : 4, bs = pass == 2 ? 8 : 4;
        size_t wbytes = (size_t)4 * 3 * 9 * es; /* [4, 6/2, 3, 3] */
        unsigned char w[4 * 3 * 9 * 8], b[4 * 8], gw[sizeof w + 1], gb[sizeof b + 1]; /* + a byte past the end */
        memset(w, 0, sizeof w);
        memset(b, 0, sizeof b);
        memset(gw, 0xFF, sizeof gw);
        memset(gb, 0xFF, sizeof gb);
        EXPECT_EQ_INT(dt_deform_api_forward(&e, 1, NULL, NULL, NULL, w, b, NULL, NULL), 0);
        EXPECT_EQ_INT(dt_deform_api_backward(&e, 1, NULL, NULL, NULL, w, NULL, NULL, NULL, NULL, gw, gb, NULL), 0);
        EXPECT_MSG(all_zero(gw, wbytes) && gw[wbytes] == 0xFF, "pass %d: grad_weight not exactly zeroed", pass);
        EXPECT_MSG(all_zero(gb, 4 * bs) && gb[4 * bs] == 0xFF, "pass %d: grad_bias not exactly zeroed", pass);
        EXPECT_EQ_INT(dt_deform_api_backward(&e, 1, NULL, NULL, NULL, w, NULL, NULL, NULL, NULL, NULL, NULL, NULL), 0);
        EXPECT_EQ_INT(dt_deform_api_forward(&e, 1, NULL, NULL, NULL, NULL, b, NULL, NULL), -1);
        EXPECT_MSG(has("weight must not be NULL"), "%s", dt_deform_api_error());
    }
    /* the bias rules stay: a bias gradient without a bias */
    d.has_bias = 0;
    float w[4 * 3 * 9], gb[4];
    EXPECT_EQ_INT(dt_deform_api_backward(&d, 1, NULL, NULL, NULL, w, NULL, NULL, NULL, NULL, NULL, gb, NULL), -1);
    EXPECT_MSG(has("grad_bias requested but has_bias is 0"), "%s", dt_deform_api_error());
}

/* A caller's allocator that counts its calls and has no memory. */
static void *counting_alloc(void *ctx, size_t bytes, void *stream) {
    (void)bytes, (void)stream;
    ++*(int *)ctx;
    return NULL;
}
static void counting_free(void *ctx, void *ptr, void *stream) {
    (void)ptr, (void)stream;
    ++*(int *)ctx;
}

/* dt_deform_api_set_cuda's checks; a CPU call does not touch the thread's CUDA setting (its
 * scratch is host memory, never the caller's device allocator). */
DT_TEST(deform_api_set_cuda) {
    int calls = 0;
    dt_deform_cuda cu = {.device = 0, .alloc = counting_alloc, .free = NULL, .ctx = &calls};
    EXPECT_EQ_INT(dt_deform_api_set_cuda(&cu), -1);
    EXPECT_MSG(has("alloc and free are given together"), "%s", dt_deform_api_error());
    cu.free = counting_free;
    cu.device = -2;
    EXPECT_EQ_INT(dt_deform_api_set_cuda(&cu), -1);
    EXPECT_MSG(has("dt_deform_cuda.device is -2"), "%s", dt_deform_api_error());
    cu.device = 0;
    EXPECT_EQ_INT(dt_deform_api_set_cuda(&cu), 0);
    dt_deform_desc d = base();
    d.device = DT_DEFORM_API_CPU;
    /* [2, 6, 9, 9] x, [2, 18, 9, 9] offsets, [4, 6, 3, 3] weight, [2, 4, 9, 9] y */
    static _Alignas(16) float x[2 * 6 * 81], off[2 * 18 * 81], w[4 * 6 * 9], y[2 * 4 * 81];
    EXPECT_EQ_INT(dt_deform_api_forward(&d, DT_DEFORM_API_DEFT, x, off, NULL, w, NULL, y, NULL), 0);
    EXPECT_EQ_INT(calls, 0);
    if (dt_gpu_count() == 0) { /* a CUDA call here fails before any allocation */
        d.device = DT_DEFORM_API_CUDA;
        EXPECT_EQ_INT(dt_deform_api_forward(&d, DT_DEFORM_API_DEFT, x, off, NULL, w, NULL, y, NULL), -1);
        EXPECT_EQ_INT(calls, 0);
    }
    EXPECT_EQ_INT(dt_deform_api_set_cuda(NULL), 0);
}
