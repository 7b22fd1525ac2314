/* The unfused CUDA baseline of the deformable convolution: three column kernels around the
 * cuBLAS GEMMs, as PyTorch/torchvision run it, but written to be at least as fast:
 *  - im2col: a thread per output column (i, p) of one channel (blockIdx.y), all taps;
 *    offsets/mask are read coalesced and shared through the cache by the group's channels;
 *  - col2im: a thread per column entry group, float atomics into dx (like torchvision) or
 *    fixed-point int64 atomics in deterministic mode (see deform_nchw.h);
 *  - col2im_coord: a thread per (i, g, k, p) computes the offset AND mask gradients in one
 *    pass over the group's channels (torchvision runs one thread per offset coordinate and a
 *    separate pass for the mask).
 * 32-bit indices where the buffers allow, 64-bit otherwise. */
#include "ops/deform/deform_nchw.h"
#include "core/dt_alloc.h"
#include "ops/deform/deform_bilinear.h"
#include "core/dt_fixed_point.cuh"
#include "core/dt_kernel_util.cuh"

namespace {

struct geom_dev {
    int kh, kw, sh, sw, ph, pw, dh, dw;
};

template <typename I>
struct shape_dev {
    I nb, C, H, W, Ho, Wo, P, NP, K, Cg;
    int G;
    geom_dev g;
};

/* The plan's chunk of nb images in index type I (32-bit where the buffers allow). */
template <typename I>
shape_dev<I> make_shape(const dt_deform_plan *p, int64_t nb) {
    shape_dev<I> d;
    d.nb = (I)nb; d.C = (I)p->prob.C; d.H = (I)p->prob.H; d.W = (I)p->prob.W; d.Ho = (I)p->prob.Ho; d.Wo = (I)p->prob.Wo;
    d.P = (I)p->P; d.NP = (I)(nb * p->P); d.K = (I)p->K;
    d.G = p->G; d.Cg = (I)p->Cg;
    d.g = {p->prob.g.kh, p->prob.g.kw, p->prob.g.sh, p->prob.g.sw, p->prob.g.ph, p->prob.g.pw, p->prob.g.dh, p->prob.g.dw};
    return d;
}

/* Sample coordinates of tap k at output position p, and the offset/mask addresses. */
template <typename I>
__device__ __forceinline__ dt_bilin tap(const shape_dev<I> &s, const float *__restrict__ offset,
                                        const float *__restrict__ mask, I i, int g, int k, I p, float *m) {
    I oy = p / s.Wo, ox = p - oy * s.Wo;
    int ky = k / s.g.kw, kx = k - ky * s.g.kw;
    int64_t ob = (((int64_t)i * s.G + g) * s.K + k) * 2 * s.P + p;
    float dy = __ldg(offset + ob), dx = __ldg(offset + ob + s.P);
    *m = mask ? __ldg(mask + (((int64_t)i * s.G + g) * s.K + k) * s.P + p) : 1.0f;
    float y = (float)(oy * s.g.sh - s.g.ph + ky * s.g.dh) + dy;
    float x = (float)(ox * s.g.sw - s.g.pw + kx * s.g.dw) + dx;
    return dt_bilin_make(y, x, (int)s.H, (int)s.W);
}

template <typename I>
__global__ void k_im2col(shape_dev<I> s, const float *__restrict__ x, const float *__restrict__ offset,
                         const float *__restrict__ mask, float *__restrict__ col) {
    const I c = blockIdx.y;
    const int g = (int)(c / s.Cg);
    for (I q = (I)blockIdx.x * blockDim.x + threadIdx.x; q < s.NP; q += (I)gridDim.x * blockDim.x) {
        I i = q / s.P, p = q - i * s.P;
        const float *plane = x + ((int64_t)i * s.C + c) * s.H * s.W;
        float *out = col + (int64_t)c * s.K * s.NP + q;
        for (int k = 0; k < s.K; k++) {
            float m, v[4];
            dt_bilin b = tap(s, offset, mask, i, g, k, p, &m);
            for (int t = 0; t < 4; t++) v[t] = b.ok[t] ? __ldg(plane + dt_bilin_index(&b, t, (int)s.W)) : 0.0f;
            out[(int64_t)k * s.NP] = m * dt_bilin_value(&b, v);
        }
    }
}

template <typename I>
__global__ void k_col2im(shape_dev<I> s, const float *__restrict__ dcol, const float *__restrict__ offset,
                         const float *__restrict__ mask, float *__restrict__ dx) {
    const I c = blockIdx.y;
    const int g = (int)(c / s.Cg);
    for (I q = (I)blockIdx.x * blockDim.x + threadIdx.x; q < s.NP; q += (I)gridDim.x * blockDim.x) {
        I i = q / s.P, p = q - i * s.P;
        int64_t plane = ((int64_t)i * s.C + c) * s.H * s.W;
        for (int k = 0; k < s.K; k++) {
            float m;
            dt_bilin b = tap(s, offset, mask, i, g, k, p, &m);
            float gv = m * dcol[((int64_t)c * s.K + k) * s.NP + q];
            /* Scalar atomics: vector (v4) atomics were measured slower at the model level, where
             * near-integer offsets make neighbouring lanes hit the same 16-byte group.
             * Corners of weight 0 (integer coordinates) are skipped. */
            for (int t = 0; t < 4; t++) {
                float v = b.w[t] * gv;
                if (b.ok[t] && v != 0.0f) atomicAdd(dx + plane + dt_bilin_index(&b, t, (int)s.W), v);
            }
        }
    }
}

/* Deterministic scatter: contributions in fixed point, summed with integer atomics. */
template <typename I>
__global__ void k_col2im_det(shape_dev<I> s, const float *__restrict__ dcol, const float *__restrict__ offset,
                             const float *__restrict__ mask, const double *__restrict__ scale,
                             unsigned long long *__restrict__ acc) {
    const I c = blockIdx.y;
    const int g = (int)(c / s.Cg);
    const double S = *scale;
    for (I q = (I)blockIdx.x * blockDim.x + threadIdx.x; q < s.NP; q += (I)gridDim.x * blockDim.x) {
        I i = q / s.P, p = q - i * s.P;
        unsigned long long *plane = acc + ((int64_t)i * s.C + c) * s.H * s.W;
        for (int k = 0; k < s.K; k++) {
            float m;
            dt_bilin b = tap(s, offset, mask, i, g, k, p, &m);
            float gv = m * dcol[((int64_t)c * s.K + k) * s.NP + q];
            for (int t = 0; t < 4; t++)
                if (b.ok[t]) {
                    atomicAdd(plane + dt_bilin_index(&b, t, (int)s.W), fp_encode(b.w[t] * gv, S));
                }
        }
    }
}

template <typename I>
__global__ void k_coord(shape_dev<I> s, const float *__restrict__ dcol, const float *__restrict__ x,
                        const float *__restrict__ offset, const float *__restrict__ mask, float *__restrict__ doffset,
                        float beta_off, float *__restrict__ dmask, float beta_mask) {
    const int g = blockIdx.y / s.K, k = blockIdx.y - g * s.K;
    for (I q = (I)blockIdx.x * blockDim.x + threadIdx.x; q < s.NP; q += (I)gridDim.x * blockDim.x) {
        I i = q / s.P, p = q - i * s.P;
        float m;
        dt_bilin b = tap(s, offset, mask, i, g, k, p, &m);
        float gy = 0.0f, gx = 0.0f, gm = 0.0f;
        for (I c = g * s.Cg; c < (g + 1) * s.Cg; c++) {
            const float *plane = x + ((int64_t)i * s.C + c) * s.H * s.W;
            float v[4];
            for (int t = 0; t < 4; t++) v[t] = b.ok[t] ? __ldg(plane + dt_bilin_index(&b, t, (int)s.W)) : 0.0f;
            float d = dcol[((int64_t)c * s.K + k) * s.NP + q];
            gy += d * dt_bilin_dy(&b, v);
            gx += d * dt_bilin_dx(&b, v);
            gm += d * dt_bilin_value(&b, v);
        }
        int64_t ob = (((int64_t)i * s.G + g) * s.K + k) * 2 * s.P + p;
        dt_store_beta(&doffset[ob], m * gy, beta_off);
        dt_store_beta(&doffset[ob + s.P], m * gx, beta_off);
        if (dmask) dt_store_beta(&dmask[(((int64_t)i * s.G + g) * s.K + k) * s.P + p], gm, beta_mask);
    }
}

bool fits32(const dt_deform_plan *p, int64_t nb) {
    return p->KC * nb * p->P < INT32_MAX && nb * p->prob.C * p->prob.H * p->prob.W < INT32_MAX && nb * p->GK * 3 * p->P < INT32_MAX;
}

}  // namespace

#define DISPATCH_I(p, nb, ...)                    \
    if (fits32(p, nb)) {                          \
        typedef int32_t I;                        \
        __VA_ARGS__;                              \
    } else {                                      \
        typedef int64_t I;                        \
        __VA_ARGS__;                              \
    }

extern "C" {

void dt_deform_im2col_cuda(const dt_deform_plan *p, int64_t nb, const float *x, const float *offset, const float *mask,
                           float *col) {
    int64_t NP = nb * p->P;
    if (NP * p->prob.C <= 0) return;
    dt_check_grid_yz("deform_im2col", p->prob.C, 1);
    dim3 grid(dt_blocks_per_plane(NP, p->prob.C), (unsigned)p->prob.C);
    DISPATCH_I(p, nb, k_im2col<I><<<grid, 256, 0, dt_stream()>>>(make_shape<I>(p, nb), x, offset, mask, col));
    DT_CHECK_LAUNCH();
}

void dt_deform_col2im_cuda(const dt_deform_plan *p, int64_t nb, const float *dcol, const float *offset, const float *mask,
                           float *dx) {
    int64_t NP = nb * p->P;
    if (NP * p->prob.C <= 0) return;
    dt_check_grid_yz("deform_col2im", p->prob.C, 1);
    dim3 grid(dt_blocks_per_plane(NP, p->prob.C), (unsigned)p->prob.C);
    DISPATCH_I(p, nb, k_col2im<I><<<grid, 256, 0, dt_stream()>>>(make_shape<I>(p, nb), dcol, offset, mask, dx));
    DT_CHECK_LAUNCH();
}

void dt_deform_col2im_coord_cuda(const dt_deform_plan *p, int64_t nb, const float *dcol, const float *x,
                                 const float *offset, const float *mask, float *doffset, float beta_off, float *dmask,
                                 float beta_mask) {
    int64_t NP = nb * p->P, rows = p->GK;
    if (NP <= 0) return;
    dt_check_grid_yz("deform_col2im_coord", rows, 1);
    dim3 grid(dt_blocks_per_plane(NP, rows), (unsigned)rows);
    DISPATCH_I(p, nb, k_coord<I><<<grid, 256, 0, dt_stream()>>>(make_shape<I>(p, nb), dcol, x, offset, mask, doffset,
                                                               beta_off, dmask, beta_mask));
    DT_CHECK_LAUNCH();
}

void dt_deform_col2im_det_cuda(const dt_deform_plan *p, int64_t nb, const float *dcol, const float *offset,
                               const float *mask, float beta, float *dx) {
    int64_t K = p->K, P = p->P, NP = nb * P, nx = nb * p->prob.C * p->prob.H * p->prob.W;
    if (nx <= 0) return;
    void *ws = dt_gpu_malloc(fp_ws_bytes(nx));
    fp_prepare(ws, nx, dcol, p->prob.C * K * NP, mask, nb * p->GK * P, (double)K * P);
    fp_ws w = fp_ws_at(ws);
    if (NP > 0) {
        dt_check_grid_yz("deform_col2im_det", p->prob.C, 1);
        dim3 grid(dt_blocks_per_plane(NP, p->prob.C), (unsigned)p->prob.C);
        DISPATCH_I(p, nb, k_col2im_det<I><<<grid, 256, 0, dt_stream()>>>(make_shape<I>(p, nb), dcol, offset, mask, w.scale,
                                                                          w.acc));
        DT_CHECK_LAUNCH();
    }
    k_fp_to_float<<<dt_grid_for(nx, 256), 256, 0, dt_stream()>>>(nx, w.acc, w.scale, beta, dx);
    DT_CHECK_LAUNCH();
    dt_gpu_free(ws);
}
}
