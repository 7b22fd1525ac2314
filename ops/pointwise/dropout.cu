/* CUDA versions of dropout.h: one element per thread of a grid-stride loop, the twin's hash
 * (dt_dropout_keep, shared through the header) and expressions; the threshold and the scale are
 * computed on the host by the same functions as the twin's, so the masks and the outputs are the
 * twin's bit for bit. The step counter is read on the device (snap[0]) and advanced by a
 * one-thread kernel, so a captured CUDA graph draws a fresh mask on every replay. */
#include "core/dt_dtype.cuh"
#include "core/dt_kernel_util.cuh"
#include "ops/pointwise/dropout.h"

namespace {

template <typename T>
__global__ void k_dropout_fwd(int64_t n, uint32_t thr, float scale, uint64_t seed, const int64_t *snap, const T *x,
                              T *y) {
    const uint64_t key = dt_dropout_key(seed, *snap);
    DT_GRID_STRIDE(i, n) dt_st(y + i, dt_dropout_keep(key, i, thr) ? dt_ld(x + i) * scale : 0.0f);
}

template <typename T>
__global__ void k_dropout_bwd(int64_t n, uint32_t thr, float scale, uint64_t seed, const int64_t *snap, const T *dy,
                              float beta, T *dx) {
    const uint64_t key = dt_dropout_key(seed, *snap);
    DT_GRID_STRIDE(i, n) dt_st_beta(dx + i, dt_dropout_keep(key, i, thr) ? dt_ld(dy + i) * scale : 0.0f, beta);
}

__global__ void k_dropout_tick(int64_t *counter, int64_t *snap) { snap[0] = ++counter[0]; }

template <typename T>
void fwd(int64_t n, float p, uint64_t seed, const int64_t *snap, const void *x, void *y) {
    if (n <= 0) return;
    k_dropout_fwd<T><<<dt_grid_for(n, 256), 256, 0, dt_stream()>>>(n, dt_dropout_threshold(p), dt_dropout_scale(p), seed,
                                                                   snap, (const T *)x, (T *)y);
    DT_CHECK_LAUNCH();
}

template <typename T>
void bwd(int64_t n, float p, uint64_t seed, const int64_t *snap, const void *dy, float beta, void *dx) {
    if (n <= 0) return;
    k_dropout_bwd<T><<<dt_grid_for(n, 256), 256, 0, dt_stream()>>>(n, dt_dropout_threshold(p), dt_dropout_scale(p), seed,
                                                                   snap, (const T *)dy, beta, (T *)dx);
    DT_CHECK_LAUNCH();
}

}  // namespace

extern "C" void dt_dropout_fwd_f32_cuda(int64_t n, float p, uint64_t seed, const int64_t *snap, const void *x, void *y) {
    fwd<float>(n, p, seed, snap, x, y);
}
extern "C" void dt_dropout_fwd_bf16_cuda(int64_t n, float p, uint64_t seed, const int64_t *snap, const void *x, void *y) {
    fwd<__nv_bfloat16>(n, p, seed, snap, x, y);
}
extern "C" void dt_dropout_bwd_f32_cuda(int64_t n, float p, uint64_t seed, const int64_t *snap, const void *dy, float beta,
                                        void *dx) {
    bwd<float>(n, p, seed, snap, dy, beta, dx);
}
extern "C" void dt_dropout_bwd_bf16_cuda(int64_t n, float p, uint64_t seed, const int64_t *snap, const void *dy,
                                         float beta, void *dx) {
    bwd<__nv_bfloat16>(n, p, seed, snap, dy, beta, dx);
}
extern "C" void dt_dropout_tick_cuda(int64_t *counter, int64_t *snap) {
    k_dropout_tick<<<1, 1, 0, dt_stream()>>>(counter, snap);
    DT_CHECK_LAUNCH();
}
