/* libFuzzer target: the deformable convolution's C API (ops/deform/dt_deform_api.h) - what a
 * foreign caller hands it - on any bytes.
 *
 * The input's encoding: the first sizeof(dt_deform_desc) bytes are the descriptor as they are
 * (missing bytes are 0; .size included, so every version and every wrong size is reached), the
 * next 4 the mode and flags, the rest the values of the tensors (cycled; bytes 0xFF make NaNs).
 * Every descriptor goes to dt_deform_api_out_size and dt_deform_api_check. One the library
 * accepts and that is small (the limits below: a fuzz run must stay fast) runs on the CPU
 * (.device forced to DT_DEFORM_API_CPU; a CPU-only build refuses CUDA descriptors itself):
 * forward, then backward with every gradient, each tensor in a buffer of exactly the bytes the
 * descriptor implies - the pitches' extent for the offsets and mask - so that ASan sees any
 * read or write past what the caller described. Then the same call again: a failure inside
 * must leave the library usable (the C API's promise). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops/deform/dt_deform_api.h"

/* The bytes of one element of a dtype field (DT_DEFORM_API_F64, f32 / bf16 - the check refused
 * anything else). */
static size_t elem(int dtype) { return dtype == DT_DEFORM_API_F64 ? 8 : dtype == DT_BF16 ? 2 : 4; }

/* A tensor of `bytes` bytes filled from the input's tail (cycled), or NULL for an empty one. */
static void *filled(size_t bytes, const uint8_t *src, size_t n) {
    if (!bytes) return NULL;
    uint8_t *p = malloc(bytes);
    for (size_t i = 0; i < bytes; i++) p[i] = n ? src[i % n] : (uint8_t)(i * 37);
    return p;
}

/* The elements an offset-shaped field of Cf channels spans in its layout with its pitch. */
static size_t field_elems(const dt_deform_desc *d, int64_t Cf, int64_t P, int layout, int pitch) {
    if (d->n == 0) return 0;
    if (!pitch) return (size_t)(d->n * Cf * P);
    if (layout == DT_NHWC) return (size_t)((d->n * P - 1) * pitch + Cf);
    return (size_t)((d->n - 1) * pitch + Cf * P);
}

static void run(const dt_deform_desc *d, int mode, const uint8_t *v, size_t nv) {
    int ho, wo;
    if (dt_deform_api_out_size(d, &ho, &wo)) return;
    const int f64 = d->dtype == DT_DEFORM_API_F64, wg = d->weight_groups ? d->weight_groups : 1;
    const int64_t K = (int64_t)d->kh * d->kw, P = (int64_t)ho * wo, GK = (int64_t)d->offset_groups * K;
    const size_t bx = (size_t)d->n * d->c * d->h * d->w * elem(d->dtype), by = (size_t)d->n * d->cout * P * elem(d->dtype);
    const size_t bw = (size_t)d->cout * (d->c / wg) * K * elem(d->weight_dtype), bb = (size_t)d->cout * (f64 ? 8 : 4);
    const size_t bo = field_elems(d, 2 * GK, P, d->offset_layout, d->offset_pitch) * elem(d->offset_dtype);
    const size_t bm = d->has_mask ? field_elems(d, GK, P, d->mask_layout, d->mask_pitch) * elem(d->mask_dtype) : 0;
    /* the gradients of the offsets and mask are dense */
    const size_t bgo = (size_t)d->n * 2 * GK * P * elem(d->offset_dtype), bgm = d->has_mask ? (size_t)d->n * GK * P * elem(d->mask_dtype) : 0;
    void *x = filled(bx, v, nv), *off = filled(bo, v, nv), *mask = filled(bm, v, nv), *w = filled(bw, v, nv);
    void *b = d->has_bias ? filled(bb, v, nv) : NULL, *y = filled(by, v, nv), *gy = filled(by, v, nv);
    void *gx = filled(bx, v, nv), *goff = filled(bgo, v, nv), *gm = filled(bgm, v, nv), *gw = filled(bw, v, nv);
    void *gb = d->has_bias ? filled(bb, v, nv) : NULL;
    for (int again = 0; again < 2; again++) {
        dt_deform_api_forward(d, mode, x, off, mask, w, b, y, NULL);
        dt_deform_api_backward(d, mode, x, off, mask, w, gy, gx, goff, gm, gw, gb, NULL);
    }
    void *all[] = {x, off, mask, w, b, y, gy, gx, goff, gm, gw, gb};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dt_deform_desc d;
    memset(&d, 0, sizeof d);
    memcpy(&d, data, size < sizeof d ? size : sizeof d);
    /* the fields an older struct lacks are 0 to the library: so here too (the buffers' sizes) */
    if (d.size == DT_DEFORM_DESC_SIZE_V1 || d.size == DT_DEFORM_DESC_SIZE_V2)
        memset((char *)&d + d.size, 0, sizeof d - (size_t)d.size);
    int mode = 0;
    if (size >= sizeof d + 4) memcpy(&mode, data + sizeof d, 4);
    const uint8_t *v = size > sizeof d + 4 ? data + sizeof d + 4 : NULL;
    const size_t nv = v ? size - sizeof d - 4 : 0;
    int ho, wo;
    dt_deform_api_out_size(&d, &ho, &wo);
    if (dt_deform_api_check(&d, mode)) return 0;
    /* small problems only: every tensor a few thousand elements */
    const int64_t P = (int64_t)ho * wo, K = (int64_t)d.kh * d.kw;
    if (d.n > 4 || (int64_t)d.c * d.h * d.w > 2048 || d.cout > 32 || P > 512 || K > 25 || d.offset_groups > 8 ||
        (int64_t)d.c * K > 4096 || d.offset_pitch > 4096 || d.mask_pitch > 4096)
        return 0;
    d.size = (int)sizeof d; /* this version's struct, so that .device can say CPU */
    d.device = DT_DEFORM_API_CPU;
    if (dt_deform_api_check(&d, mode)) return 0;
    run(&d, mode, v, nv);
    return 0;
}
