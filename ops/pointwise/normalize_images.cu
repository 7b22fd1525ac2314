/* CUDA version of normalize_images.h: one thread per output element (consecutive threads write
 * consecutive elements; NHWC reads consecutive bytes too, NCHW reads every third). */
#include "core/dt_dtype.cuh"
#include "core/dt_kernel_util.cuh"
#include "ops/pointwise/normalize_images.h"

namespace {

/* mean and std by value: three floats each, no device copy. */
struct norm3 {
    float mean[3], std[3];
};

template <typename T, bool NHWC>
__global__ void k_normalize_images(int64_t N, int64_t P, const uint8_t *__restrict__ x, norm3 q, T *__restrict__ y) {
    DT_GRID_STRIDE(o, N * 3 * P) {
        int64_t src, c;
        if (NHWC) {
            src = o;
            c = o % 3;
        } else { /* o = (n*3 + c)*P + p */
            int64_t p = o % P, t = o / P;
            c = t % 3;
            src = ((t / 3) * P + p) * 3 + c;
        }
        dt_st(&y[o], ((float)x[src] / 255.0f - q.mean[c]) / q.std[c]);
    }
}

}  // namespace

extern "C" {
void dt_normalize_images_cuda(int64_t N, int64_t P, const uint8_t *x, const float mean[3], const float std[3], void *y,
                              dt_dtype ty, dt_layout ly) {
    int64_t n = N * 3 * P;
    if (n <= 0) return;
    norm3 q = {{mean[0], mean[1], mean[2]}, {std[0], std[1], std[2]}};
    dt_dispatch_dtype(ty, [&](auto *yt) {
        using T = typename std::remove_pointer<decltype(yt)>::type;
        if (ly == DT_NHWC)
            k_normalize_images<T, true><<<dt_grid_for(n, 256), 256, 0, dt_stream()>>>(N, P, x, q, (T *)y);
        else
            k_normalize_images<T, false><<<dt_grid_for(n, 256), 256, 0, dt_stream()>>>(N, P, x, q, (T *)y);
        DT_CHECK_LAUNCH();
    });
}
}
