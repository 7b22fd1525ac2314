/* The CUDA launchers of the implicit-GEMM convolution (conv_igemm.h): each pass builds the GEMM
 * its kernel runs (conv_igemm.cuh's gemm_view / conv_params) and launches the tile of the
 * engine the plan chose (igemm128 or igemm64, conv_engine.h). These are the lab's kernels
 * (bench/lab/conv_lab.cu validates and times them beside the other tile configurations,
 * loaders and epilogues); only the measured winners are instantiated here. */
#include "ops/conv/conv_igemm.cuh"
#include "ops/conv/conv_igemm.h"

#include "core/dt_kernel_util.cuh"

using namespace dt_igemm;

namespace {

/* the shipped tiles (docs/conv.md), each instantiated once: fprop 128x128 with BK = 64 and 3
 * stages (the lab's igemm_128x128_k64: half the barriers per k of BK = 32, faster on every
 * ResNet-18 shape) and 64x64; dgrad 128x128 and 64x64 with BK = 32 and 4 stages (8 warps of
 * 64x32, 4 of 32x32), zero-filled (a_dgrad) or, for a strided conv, split by output parity
 * (a_dgrad_split); wgrad 128x128 and 64x128, 4 stages. All with the bf16 epilogue (epi_bf16). */
void launch_fprop(const gemm_view &v, dt_igemm_tile tile) {
    if (tile == DT_IGEMM_TILE_64) launch_igemm<64, 64, 32, 32, 4, a_im2col>(v);
    else launch_igemm<128, 128, 64, 32, 3, a_im2col, epi_bf16, 64>(v);
}
template <template <class> class A> void launch_dgrad(const gemm_view &v, dt_igemm_tile tile) {
    if (tile == DT_IGEMM_TILE_64) launch_igemm<64, 64, 32, 32, 4, A>(v);
    else launch_igemm<128, 128, 64, 32, 4, A>(v);
}

gemm_view base_view(const dt_conv_problem *p) {
    gemm_view v = {};
    v.N = (int)p->N, v.KH = p->g.kh, v.KW = p->g.kw, v.SH = p->g.sh, v.SW = p->g.sw, v.PH = p->g.ph, v.PW = p->g.pw;
    v.DH = p->g.dh, v.DW = p->g.dw;
    return v;
}

/* wT [C, kh, kw, Cout] = w [Cout, kh, kw, C] with the channel axes swapped: dgrad's B^T. One
 * thread an element, reading w in order (the weight is small: at most a few MB). */
__global__ void k_swap_channels(const bf16 *__restrict__ w, int Cout, int taps, int C, bf16 *__restrict__ wT) {
    const int64_t n = (int64_t)Cout * taps * C;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int c = (int)(i % C), tap = (int)(i / C % taps), co = (int)(i / ((int64_t)C * taps));
        wT[((int64_t)c * taps + tap) * Cout + co] = w[i];
    }
}

/* dst [rows, C8] = src [rows, C] with zero channels C .. C8-1: a C that is not a multiple of 8
 * (the stem's 3) made loadable in 16-byte chunks; zeros add nothing to the sums. */
__global__ void k_pad_channels(const bf16 *__restrict__ src, int64_t rows, int C, int C8, bf16 *__restrict__ dst) {
    const int64_t n = rows * C8;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int c = (int)(i % C8);
        dst[i] = c < C ? src[i / C8 * C + c] : __float2bfloat16_rn(0.0f);
    }
}

bf16 *padded(const void *src, int64_t rows, int C, int C8) {
    bf16 *dst = (bf16 *)dt_gpu_malloc(sizeof(bf16) * (size_t)(rows * C8));
    k_pad_channels<<<dt_grid_for(rows * C8, 256), 256, 0, dt_stream()>>>((const bf16 *)src, rows, C, C8, dst);
    DT_CHECK_LAUNCH();
    return dst;
}

} // namespace

extern "C" void dt_conv_igemm_fprop_bf16_cuda(const dt_conv_problem *p, dt_igemm_tile tile, const void *x,
                                              const void *w, const float *bias, void *y, dt_conv_stats *stats) {
    if (stats) *stats = (dt_conv_stats){NULL, 0}; /* no statistics epilogue on the mma.sync tiles */
    if (p->N * p->Ho * p->Wo == 0) return;
    const int taps = p->g.kh * p->g.kw, C = (int)p->C, C8 = (C + 7) / 8 * 8;
    bf16 *xp = NULL, *wp = NULL; /* C % 8 != 0: x and w with zero channels up to C8 */
    if (C8 != C) {
        xp = padded(x, p->N * p->H * p->W, C, C8);
        wp = padded(w, p->Cout * taps, C, C8);
    }
    gemm_view v = base_view(p);
    v.a = xp ? xp : (const bf16 *)x, v.b = wp ? wp : (const bf16 *)w, v.y = y, v.bias = bias, v.beta = 0.0f;
    v.AH = (int)p->H, v.AW = (int)p->W, v.AC = C8, v.OH = (int)p->Ho, v.OW = (int)p->Wo, v.NO = (int)p->Cout;
    v.M = (int)(p->N * p->Ho * p->Wo), v.K = taps * C8;
    launch_fprop(v, tile);
    dt_gpu_free(xp), dt_gpu_free(wp); /* stream-ordered, as wT below */
}

extern "C" void dt_conv_igemm_dgrad_bf16_cuda(const dt_conv_problem *p, dt_igemm_tile tile, const void *dy,
                                              const void *w, float beta, void *dx) {
    if (p->N * p->H * p->W == 0) return;
    const int taps = p->g.kh * p->g.kw;
    const int64_t nw = p->Cout * taps * p->C;
    bf16 *wT = (bf16 *)dt_gpu_malloc(sizeof(bf16) * (size_t)nw); /* [C, kh, kw, Cout] */
    k_swap_channels<<<dt_grid_for(nw, 256), 256, 0, dt_stream()>>>((const bf16 *)w, (int)p->Cout, taps, (int)p->C, wT);
    DT_CHECK_LAUNCH();
    gemm_view v = base_view(p);
    v.a = (const bf16 *)dy, v.b = wT, v.y = dx, v.bias = NULL, v.beta = beta;
    v.AH = (int)p->Ho, v.AW = (int)p->Wo, v.AC = (int)p->Cout, v.OH = (int)p->H, v.OW = (int)p->W, v.NO = (int)p->C;
    v.M = (int)(p->N * p->H * p->W), v.K = taps * (int)p->Cout;
    /* a strided conv's dgrad as one sub-GEMM per output parity class over the taps that reach it
     * (a quarter of the work for stride 2); the zero-filled form for stride 1 */
    const int strided = (p->g.sh > 1 || p->g.sw > 1) && p->g.kh <= 8 && p->g.kw <= 8;
    if (strided) launch_dgrad<a_dgrad_split>(v, tile);
    else launch_dgrad<a_dgrad>(v, tile);
    dt_gpu_free(wT); /* stream-ordered: the block is reused only by later work on this stream */
}

extern "C" void dt_conv_igemm_wgrad_bf16_cuda(const dt_conv_problem *p, dt_igemm_tile tile, const void *x,
                                              const void *dy, float beta, float *dw) {
    const int64_t K = (int64_t)p->g.kh * p->g.kw * p->C;
    if (p->N * p->Ho * p->Wo == 0) { /* no positions: dw = beta * dw */
        if (beta == 0.0f) dt_memset_gpu(dw, 0, sizeof(float) * (size_t)(p->Cout * K));
        return;
    }
    conv_params c = {};
    c.x = (const bf16 *)x, c.w = NULL, c.y = NULL;
    c.N = (int)p->N, c.H = (int)p->H, c.W = (int)p->W, c.C = (int)p->C, c.Cout = (int)p->Cout;
    c.KH = p->g.kh, c.KW = p->g.kw, c.SH = p->g.sh, c.SW = p->g.sw, c.PH = p->g.ph, c.PW = p->g.pw, c.DH = p->g.dh;
    c.DW = p->g.dw, c.Ho = (int)p->Ho, c.Wo = (int)p->Wo, c.M = (int)(p->N * p->Ho * p->Wo), c.K = (int)K;
    if (tile == DT_IGEMM_TILE_64) launch_wgrad<64, 128, 32, 32, 4>(c, (const bf16 *)dy, beta, dw);
    else launch_wgrad<128, 128, 64, 32, 4>(c, (const bf16 *)dy, beta, dw);
}
