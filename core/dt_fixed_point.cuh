/* dt_fixed_point.cuh: the pieces of a deterministic float scatter, shared by the unfused and
 * the fused deformable backward (see deform_nchw.h for the argument):
 *   k_fp_absmax      max |v| over an array, as float bits (order-independent atomicMax)
 *   k_fp_scale       S = 2^e with count * max|dcol| * max|mask| * S <= 2^62 (0: non-finite)
 *   fp_encode        round(v * S) as a two's-complement int64 in an unsigned slot
 *   k_fp_to_float    dx = beta*dx + acc / S
 * Included by .cu files only; everything lives in an anonymous namespace per file. */
#ifndef DT_FIXED_POINT_CUH
#define DT_FIXED_POINT_CUH

#include "core/dt_kernel_util.cuh"

namespace {

__global__ void k_fp_absmax(int64_t n, const float *__restrict__ v, unsigned *__restrict__ out) {
    unsigned m = 0;
    DT_GRID_STRIDE(t, n) m = max(m, __float_as_uint(fabsf(v[t])));
    for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0) atomicMax(out, m);
}

__global__ void k_fp_scale(const unsigned *__restrict__ maxbits, int has_mask, double count, double *__restrict__ scale) {
    float md = __uint_as_float(maxbits[0]), mm = has_mask ? __uint_as_float(maxbits[1]) : 1.0f;
    double bound = (double)md * (double)mm * count;
    if (!isfinite(bound)) { *scale = 0.0; return; }
    if (bound == 0.0) { *scale = 1.0; return; }
    int e = (int)floor(62.0 - log2(bound));
    if (e > 900) e = 900;
    *scale = ldexp(1.0, e);
}

__device__ __forceinline__ unsigned long long fp_encode(float v, double S) {
    return (unsigned long long)__double2ll_rn((double)v * S);
}

__global__ void k_fp_to_float(int64_t n, const unsigned long long *__restrict__ acc, const double *__restrict__ scale,
                              float beta, float *__restrict__ dx) {
    double S = *scale;
    DT_GRID_STRIDE(t, n) {
        float v = S == 0.0 ? __int_as_float(0x7fc00000) : (float)((double)(long long)acc[t] / S);
        dt_store_beta(&dx[t], v, beta);
    }
}

/* Scratch layout: [0,64) max bits, [64,128) scale, then the int64 accumulators. */
struct fp_ws {
    unsigned *maxbits;
    double *scale;
    unsigned long long *acc;
};
__host__ inline fp_ws fp_ws_at(void *ws) {
    fp_ws w;
    w.maxbits = (unsigned *)ws;
    w.scale = (double *)((char *)ws + 64);
    w.acc = (unsigned long long *)((char *)ws + 128);
    return w;
}
__host__ inline size_t fp_ws_bytes(int64_t n_acc) { return 128 + (size_t)n_acc * sizeof(unsigned long long); }

/* Zeroes the scratch, finds max|dcol| and max|mask|, sets the scale. */
__host__ inline void fp_prepare(void *ws, int64_t n_acc, const float *dcol, int64_t n_dcol, const float *mask,
                                int64_t n_mask, double count) {
    fp_ws w = fp_ws_at(ws);
    DT_CHECK(cudaMemsetAsync(ws, 0, fp_ws_bytes(n_acc), dt_stream()));
    if (n_dcol > 0) {
        k_fp_absmax<<<dt_grid_for(n_dcol, 256), 256, 0, dt_stream()>>>(n_dcol, dcol, w.maxbits);
        DT_CHECK_LAUNCH();
    }
    if (mask && n_mask > 0) {
        k_fp_absmax<<<dt_grid_for(n_mask, 256), 256, 0, dt_stream()>>>(n_mask, mask, w.maxbits + 1);
        DT_CHECK_LAUNCH();
    }
    k_fp_scale<<<1, 1, 0, dt_stream()>>>(w.maxbits, mask != NULL, count, w.scale);
    DT_CHECK_LAUNCH();
}

}  // namespace

#endif
