/* CUDA versions of elementwise.h. One kernel template, k_map, serves every op: thread i handles
 * elements [i*V, i*V + V) of the n (grid-stride), V = 16 / sizeof(T) when every pointer is
 * 16-byte aligned (one 128-bit load per input, one store), else 1; the n % V elements past the
 * last whole pack go to the first threads of the grid, one each. Memory-bound: each element of
 * each operand crosses DRAM once (a binary op: 3 elements per output, plus one read of dx when
 * a gradient is added, beta 1). */
#include "core/dt_dtype.cuh"
#include "core/dt_kernel_util.cuh"
#include "core/dt_pack.cuh"
#include "ops/pointwise/elementwise.h"

namespace {

/* The ops, on fp32 values (a: the first operand, b: the second). */
struct op_add {
    __device__ float operator()(float a, float b) const { return a + b; }
};
struct op_mul {
    __device__ float operator()(float a, float b) const { return a * b; }
};
struct op_add_relu {
    __device__ float operator()(float a, float b) const { return fmaxf(a + b, 0.0f); }
};
struct op_relu {
    __device__ float operator()(float x, float) const { return fmaxf(x, 0.0f); }
};
struct op_relu6 { /* fminf(fmaxf(x, 0), 6): the twin's comparisons give the same value (NaN aside) */
    __device__ float operator()(float x, float) const { return x > 0.0f ? (x < 6.0f ? x : 6.0f) : 0.0f; }
};
struct op_sigmoid {
    __device__ float operator()(float x, float) const { return 1.0f / (1.0f + expf(-x)); }
};
struct op_mul_bwd { /* (the other factor, dy) */
    __device__ float operator()(float u, float dy) const { return dy * u; }
};
struct op_relu_bwd { /* (y, dy) */
    __device__ float operator()(float y, float dy) const { return y > 0.0f ? dy : 0.0f; }
};
struct op_relu6_bwd { /* (y, dy): 0 where y sits at either bound */
    __device__ float operator()(float y, float dy) const { return y > 0.0f && y < 6.0f ? dy : 0.0f; }
};
struct op_sigmoid_bwd { /* (y, dy) */
    __device__ float operator()(float y, float dy) const { return dy * y * (1.0f - y); }
};
struct op_copy {
    __device__ float operator()(float g, float) const { return g; }
};
struct op_broadcast { /* alpha * s[0] */
    const float *s;
    float alpha;
    __device__ float operator()(float, float) const { return alpha * *s; }
};

/* y[i] = op(a[i], b[i]) for i < n; NIN operands are read (0, 1 or 2); accumulate: the gradient
 * convention with beta. No __restrict__: an op may run in place (y == a). */
template <typename T, int V, int NIN, typename Op>
__global__ void k_map(int64_t n, Op op, const T *a, const T *b, int accumulate, float beta, T *y) {
    const int64_t packs = n / V;
    DT_GRID_STRIDE(i, packs) {
        float va[V], vb[V], r[V];
        if (NIN > 0) dt_ldv<V>(a + i * V, va);
        if (NIN > 1) dt_ldv<V>(b + i * V, vb);
#pragma unroll
        for (int k = 0; k < V; k++) r[k] = op(NIN > 0 ? va[k] : 0.0f, NIN > 1 ? vb[k] : 0.0f);
        if (accumulate) dt_stv_beta<V>(y + i * V, r, beta);
        else dt_stv<V>(y + i * V, r);
    }
    if (V > 1) { /* the tail */
        int64_t t = packs * V + (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
        if (t < n) {
            float r = op(NIN > 0 ? dt_ld(a + t) : 0.0f, NIN > 1 ? dt_ld(b + t) : 0.0f);
            if (accumulate) dt_st_beta(y + t, r, beta);
            else dt_st(y + t, r);
        }
    }
}

template <typename T, int NIN, typename Op>
void map(int64_t n, Op op, const void *a, const void *b, int accumulate, float beta, void *y) {
    if (n <= 0) return;
    dt_with_pack<T>(dt_pack_ok<T>(0, {a, b, y}), [&](auto v) {
        constexpr int V = decltype(v)::value;
        int64_t packs = n / V;
        k_map<T, V, NIN><<<dt_grid_for(packs > 0 ? packs : 1, 256), 256, 0, dt_stream()>>>(
            n, op, (const T *)a, (const T *)b, accumulate, beta, (T *)y);
    });
    DT_CHECK_LAUNCH();
}

__global__ void k_fill(int64_t n, float v, float *x) { DT_GRID_STRIDE(i, n) x[i] = v; }

}  // namespace

#define DT_EW_ENTRIES(name, T)                                                                                      \
    extern "C" void dt_add_##name##_cuda(int64_t n, const void *a, const void *b, void *y) {                        \
        map<T, 2>(n, op_add(), a, b, 0, 0.0f, y);                                                                   \
    }                                                                                                               \
    extern "C" void dt_mul_##name##_cuda(int64_t n, const void *a, const void *b, void *y) {                        \
        map<T, 2>(n, op_mul(), a, b, 0, 0.0f, y);                                                                   \
    }                                                                                                               \
    extern "C" void dt_add_relu_fwd_##name##_cuda(int64_t n, const void *a, const void *b, void *y) {               \
        map<T, 2>(n, op_add_relu(), a, b, 0, 0.0f, y);                                                              \
    }                                                                                                               \
    extern "C" void dt_relu_fwd_##name##_cuda(int64_t n, const void *x, void *y) {                                  \
        map<T, 1>(n, op_relu(), x, NULL, 0, 0.0f, y);                                                               \
    }                                                                                                               \
    extern "C" void dt_relu6_fwd_##name##_cuda(int64_t n, const void *x, void *y) {                                 \
        map<T, 1>(n, op_relu6(), x, NULL, 0, 0.0f, y);                                                              \
    }                                                                                                               \
    extern "C" void dt_sigmoid_fwd_##name##_cuda(int64_t n, const void *x, void *y) {                               \
        map<T, 1>(n, op_sigmoid(), x, NULL, 0, 0.0f, y);                                                            \
    }                                                                                                               \
    extern "C" void dt_mul_bwd_##name##_cuda(int64_t n, const void *u, const void *dy, float beta, void *dx) {      \
        map<T, 2>(n, op_mul_bwd(), u, dy, 1, beta, dx);                                                             \
    }                                                                                                               \
    extern "C" void dt_relu_bwd_##name##_cuda(int64_t n, const void *y, const void *dy, float beta, void *dx) {     \
        map<T, 2>(n, op_relu_bwd(), y, dy, 1, beta, dx);                                                            \
    }                                                                                                               \
    extern "C" void dt_relu6_bwd_##name##_cuda(int64_t n, const void *y, const void *dy, float beta, void *dx) {    \
        map<T, 2>(n, op_relu6_bwd(), y, dy, 1, beta, dx);                                                           \
    }                                                                                                               \
    extern "C" void dt_sigmoid_bwd_##name##_cuda(int64_t n, const void *y, const void *dy, float beta, void *dx) {  \
        map<T, 2>(n, op_sigmoid_bwd(), y, dy, 1, beta, dx);                                                         \
    }                                                                                                               \
    extern "C" void dt_accumulate_##name##_cuda(int64_t n, const void *g, float beta, void *dx) {                   \
        map<T, 1>(n, op_copy(), g, NULL, 1, beta, dx);                                                              \
    }                                                                                                               \
    extern "C" void dt_broadcast_scalar_##name##_cuda(int64_t n, const float *s, float alpha, float beta,           \
                                                      void *dx) {                                                   \
        map<T, 0>(n, op_broadcast{s, alpha}, NULL, NULL, 1, beta, dx);                                              \
    }

DT_EW_ENTRIES(f32, float)
DT_EW_ENTRIES(bf16, __nv_bfloat16)

#define LAUNCH(kernel, n, ...)                                                    \
    do {                                                                          \
        if ((n) <= 0) return;                                                     \
        kernel<<<dt_grid_for((n), 256), 256, 0, dt_stream()>>>((n), __VA_ARGS__); \
        DT_CHECK_LAUNCH();                                                        \
    } while (0)

extern "C" {
void dt_fill_cuda(int64_t n, float v, float *x) { LAUNCH(k_fill, n, v, x); }
}
