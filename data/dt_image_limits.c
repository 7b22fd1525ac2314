/* The pixel cap and the decode budget (dt_image_limits.h). */
#include "data/dt_image_limits.h"

int dt_image_check_size(const char *name, int64_t w, int64_t h, int64_t max_pixels, dt_err *err) {
    if (w <= 0 || h <= 0) return dt_errf(err, "cannot decode %s: image size %lld x %lld", name, (long long)w, (long long)h);
    if (w * h > max_pixels) /* both at most 2^31: no overflow */
        return dt_errf(err, "%s: %lld x %lld = %.1f Mpx is more than max_image_pixels = %lld (a decompression bomb or a "
                       "huge scan; raise max_image_pixels to read it)",
                       name, (long long)w, (long long)h, (double)(w * h) / 1e6, (long long)max_pixels);
    return 0;
}

size_t dt_image_decode_budget(int64_t max_pixels) {
    if (max_pixels > (int64_t)((SIZE_MAX - DT_IMAGE_DECODER_STATE) / DT_IMAGE_BYTES_PER_PIXEL)) return SIZE_MAX;
    return (size_t)max_pixels * DT_IMAGE_BYTES_PER_PIXEL + DT_IMAGE_DECODER_STATE;
}

int dt_image_check_memory(const char *name, int64_t w, int64_t h, const char *what, size_t need, int64_t max_pixels,
                          dt_err *err) {
    size_t budget = dt_image_decode_budget(max_pixels);
    if (need <= budget) return 0;
    return dt_errf(err, "%s: decoding this %lld x %lld %s takes %.1f MB, more than the %.1f MB that max_image_pixels = "
                   "%lld allows (%d bytes a pixel; a decompression bomb or a huge scan; raise max_image_pixels to read it)",
                   name, (long long)w, (long long)h, what, need / 1e6, budget / 1e6, (long long)max_pixels,
                   DT_IMAGE_BYTES_PER_PIXEL);
}
