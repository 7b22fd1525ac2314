/* libFuzzer target: image decoding as the loader does it: header probe against a pixel cap,
 * a train or val transform planned from the header's size, decoding at the plan's scale
 * (DCT-domain downscaling for JPEG with libjpeg-turbo), the transform itself. Before that, on
 * every input, deftc's own walk of a JPEG's markers and the nvJPEG rule on what it found
 * (dt_jpeg_read_layout, dt_jpeg_gpu_decodable), with the promises of a successful walk. */
#include <stdint.h>
#include <stdlib.h>

#include "data/dt_image.h"
#include "data/dt_image_header.h"
#include "data/dt_transform.h"

/* 256 Kpx: every decoder path (DCT scaling included) on images small enough for fast
 * executions; larger declared sizes exercise the cap. */
#define FUZZ_MAX_PIXELS (1 << 18)
#define S 32

/* The walk on any bytes: -1 with a reason, or a layout within the ranges it promises. */
static void walk_layout(const uint8_t *data, size_t size) {
    dt_jpeg_layout l;
    const char *why = NULL;
    if (dt_jpeg_read_layout(data, size, &l, &why)) {
        if (!why || !*why) abort();
        return;
    }
    if (why || l.w < 1 || l.h < 1 || l.components < 1 || l.components > 4 || l.scans < 1) abort();
    for (int c = 0; c < 4; c++)
        if (c < l.components ? l.hs[c] < 1 || l.hs[c] > 4 || l.vs[c] < 1 || l.vs[c] > 4 : l.hs[c] || l.vs[c]) abort();
    int gpu = dt_jpeg_gpu_decodable(&l, &why);
    if (gpu ? why != NULL || l.scans != 1 || !l.has_eoi || l.precision != 8 : !why || !*why) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    walk_layout(data, size);
    dt_err err;
    int w, h;
    if (dt_image_probe(data, size, "fuzz", FUZZ_MAX_PIXELS, &w, &h, &err)) return 0;
    dt_transform_plan plan;
    dt_rng r;
    dt_rng_derive(&r, size, data[size / 2], 1);
    if (data[0] & 1) dt_transform_plan_train(w, h, S, 0.08, &r, &plan);
    else dt_transform_plan_val(w, h, S, &plan);
    dt_image img;
    if (dt_image_decode(data, size, "fuzz", FUZZ_MAX_PIXELS, plan.min_scale, &img, &err)) return 0;
    if (img.w > w || img.h > h) abort(); /* the decoder agrees with the probe */
    static uint8_t u8[S * S * 3];
    static dt_scratch scratch;
    dt_transform_apply(&plan, &img, S, u8, &scratch);
    dt_image_free(&img);
    return 0;
}
