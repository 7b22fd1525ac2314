/* The deformable forward's sampling as the Hopper engine's A producer (deform_sampler_sm90.h): the
 * engine of ops/conv/sm90_gemm.cuh with an A producer of its own (A_EXT, the class sampling_producer
 * below; it was the engine's A_DEFORM while the library held it, behind the deft layer's
 * engine_sampler knob). Bit for bit k_sample's columns through the engine's GEMM, and slower than
 * k_sample + the GEMM on every ResNet-18 shape (docs/deft.md, "The sampling inside the Hopper
 * engine: a lab record"). Built for sm_90a like the library's conv_sm90.cu (the Makefile); on
 * another target the kernels are empty and the lab does not call them (dt_gpu_has_sm90a). */
#include "bench/lab/deform_sampler_sm90.h"

#include "core/dt_common.h"
#include "core/dt_device.h"
#include "core/dt_kernel_util.cuh"
#include "ops/conv/conv_sm90.h" /* dt_sm90_map_rows */
#include "ops/conv/sm90_gemm.cuh"
#include "ops/deform/deform_nhwc.cuh" /* the sampling's blend (bilin_blend) */

using namespace dt_sm90;

/* a named namespace: on a target without sm_90a the kernels are empty, and nvcc warns about the
 * unused device helpers of an unnamed one (an error with WERROR=1) */
namespace deform_sampler {

/* two values rounded to bf16 (nearest even) as one word, the first in the low half: k_sample's store */
__device__ __forceinline__ uint32_t bf16x2_bits(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
}

/* The launch's arguments: the engine's, plus the chunk (dc: its sizes, geometry and divisors; x
 * is its [nb, H, W, C] input) and om [Q, OCS] its offsets and mask; M = Q, K = K*C. */
struct deform_args : gemm_args {
    const float *om;
    dt_deform_chunk dc;
};

/* The producer, all 128 threads of warpgroup 0 (the engine's A_EXT contract, sm90_gemm.cuh's
 * a_needs). Per (tap k, offset group g) - the run of k-slices of one group of one tap, C / Cg = G
 * runs a tap - the threads first compute the bilinear samples of the tile's rows tid, tid + 128,
 * ... (dt_sample_bilin: k_sample's weights, once a row instead of once a chunk) into the row
 * table: the four corner pixels (-1 outside the image), the weights, the mask (rows past M: no
 * corners, weights and mask 0). Then per k-slice thread tid makes the 16-byte chunk j = tid % 8
 * (channels 8j..8j+7 of the slice) of rows tid/8 + 16 i: the 4 corners' chunks of x loaded for U
 * rows at a time (16 loads in flight), blended by bilin_blend in fp32 - m * (w0 v0 + w1 v1 + w2 v2
 * + w3 v3), a corner outside the image 0 - rounded to nearest even as k_sample's bf16 store
 * rounds, and stored into the swizzled A tile at chunk j ^ (row % 8) (row % 8 = (tid / 8) % 8 for
 * all of them). The same operations on the same values as k_sample: the tile is colT's rows bit
 * for bit. The stores are generic-proxy writes: each thread fences them towards the async proxy
 * (wgmma) and arrives on full[s]; tid 0 also brings the B tile by TMA.
 *
 * Registers: the 16 loads in flight are 64 registers of data, so the producer keeps 120 and each
 * consumer 192 (64-row consumers only: a 128-row one's accumulators need more). The CTA is
 * launched with 384 x 168 = 64512 registers, and 128 x (120 + 2 x 192) fits; the first split,
 * 128 + 2 x 192 = 65536, left the consumers' setmaxnreg.inc waiting forever for registers nobody
 * gave back - the first launch on the H200 hung (docs/PERF.md section 23). The engine's tile_cfg
 * asserts the sum for every tile. */
struct sampling_producer {
    static constexpr int PRODUCER_REGS = 120, CONSUMER_REGS = 192;
    static constexpr int ROW_BYTES = 36; /* a row's corner pixels int4, weights float4, mask float */
    typedef deform_args args;

    template <class CFG>
    static __device__ __forceinline__ void produce(const deform_args &p, uint8_t *sA, uint8_t *sB, uint64_t *full,
                                                   uint64_t *empty, int4 *table, const CUtensorMap *map_b, int ntiles,
                                                   int nk, int tid) {
        constexpr int BM = CFG::BM, BN = CFG::BN, STAGES = CFG::STAGES, BK = CFG::BK, ROWS = BM / 16, U = 4;
        static_assert(ROWS % U == 0, "rows a thread: a multiple of the loads' unroll");
        static_assert(CFG::MI == 1, "64-row consumers (192 registers beside this producer)");
        const dt_deform_chunk &c = p.dc;
        int4 *corners = table;                                    /* [BM] pixel of corner t, or -1 */
        float4 *weights = reinterpret_cast<float4 *>(table + BM); /* [BM] w0..w3 */
        float *masks = reinterpret_cast<float *>(weights + BM);   /* [BM] */
        const int j = tid & 7, r0 = tid >> 3, sw = ((r0 & 7) ^ j) << 4;
        int it = 0;
        for (int t = blockIdx.x; t < ntiles; t += gridDim.x) {
            int tm, tn;
            tile_coords(t, p.tiles_m, p.tiles_n, CFG::GROUP_M, tm, tn);
            for (int kt = 0; kt < nk; kt++, it++) {
                const int k0 = kt * BK, tap = k0 / c.C, c0 = k0 - tap * c.C;
                if (c0 % c.Cg == 0) { /* the first slice of (tap, group): the table of its samples */
                    const int g = c0 / c.Cg;
                    bar_sync(1, 128); /* the previous run's table is no longer read */
                    for (int r = tid; r < BM; r += 128) {
                        const int q = tm * BM + r;
                        int4 e = make_int4(-1, -1, -1, -1);
                        float4 w = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                        float m = 0.0f;
                        if (q < p.M) {
                            int img;
                            const dt_bilin b = dt_sample_bilin(&c, p.om, q, tap, g, &img, &m);
                            const int base = img * c.H * c.W;
                            e = make_int4(b.ok[0] ? base + (int)dt_bilin_index(&b, 0, c.W) : -1,
                                          b.ok[1] ? base + (int)dt_bilin_index(&b, 1, c.W) : -1,
                                          b.ok[2] ? base + (int)dt_bilin_index(&b, 2, c.W) : -1,
                                          b.ok[3] ? base + (int)dt_bilin_index(&b, 3, c.W) : -1);
                            w = make_float4(b.w[0], b.w[1], b.w[2], b.w[3]);
                        }
                        corners[r] = e, weights[r] = w, masks[r] = m;
                    }
                    bar_sync(1, 128);
                }
                const int s = it % STAGES;
                mbar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
                if (tid == 0) {
                    mbar_arrive_expect_tx(&full[s], CFG::B_BYTES);
                    tma_load_2d(sB + s * CFG::B_BYTES, map_b, &full[s], k0, tn * BN);
                }
                const bf16 *xc = p.x + c0 + 8 * j; /* this thread's 8 channels of pixel 0 */
                uint8_t *dst = sA + s * CFG::A_BYTES + r0 * 128 + sw;
#pragma unroll
                for (int i0 = 0; i0 < ROWS; i0 += U) {
                    uint4 v[U][4];
#pragma unroll
                    for (int u = 0; u < U; u++) {
                        const int4 e = corners[r0 + 16 * (i0 + u)];
                        const int pix[4] = {e.x, e.y, e.z, e.w};
#pragma unroll
                        for (int q = 0; q < 4; q++)
                            v[u][q] = pix[q] >= 0 ? __ldg(reinterpret_cast<const uint4 *>(xc + (int64_t)pix[q] * c.C))
                                                  : make_uint4(0u, 0u, 0u, 0u);
                    }
#pragma unroll
                    for (int u = 0; u < U; u++) {
                        const int r = r0 + 16 * (i0 + u);
                        const float4 w = weights[r];
                        dt_bilin b;
                        b.w[0] = w.x, b.w[1] = w.y, b.w[2] = w.z, b.w[3] = w.w;
                        float4 lo[4], hi[4]; /* channels 0-3 and 4-7 of the chunk, widened */
#pragma unroll
                        for (int q = 0; q < 4; q++) {
                            lo[q] = bf16x4_to_float4(make_uint2(v[u][q].x, v[u][q].y));
                            hi[q] = bf16x4_to_float4(make_uint2(v[u][q].z, v[u][q].w));
                        }
                        const float m = masks[r];
                        const float4 a = dt_deft::bilin_blend(b, m, lo), z = dt_deft::bilin_blend(b, m, hi);
                        *reinterpret_cast<uint4 *>(dst + (i0 + u) * 16 * 128) = make_uint4(
                            bf16x2_bits(a.x, a.y), bf16x2_bits(a.z, a.w), bf16x2_bits(z.x, z.y), bf16x2_bits(z.z, z.w));
                    }
                }
                fence_proxy_async(); /* the stores before wgmma (async proxy) reads them */
                mbar_arrive(&full[s]);
            }
        }
    }
};

/* One launch of the engine: y [M, N] = A . w^T + bias, w [N, K], y bf16 through the TMA-store
 * epilogue; A = colT [M, K] by TMA (A_TMA) or made by the producer (A_EXT, colT NULL) - the
 * library's run_gemm (ops/conv/conv_sm90.cu) for these two producers. */
template <class CFG> void run_gemm(typename CFG::args a, const void *colT, const void *w, void *y) {
    const CUtensorMap mb = dt_sm90_map_rows(w, a.N, a.K, CFG::BN);
    const CUtensorMap ma = CFG::AP == A_TMA ? dt_sm90_map_rows(colT, a.M, a.K, CFG::BM) : mb; /* A_EXT: no map */
    const CUtensorMap my = dt_sm90_map_rows(y, a.M, a.N, CFG::WM);
    a.y = (bf16 *)y;
    a.tiles_m = (a.M + CFG::BM - 1) / CFG::BM;
    a.tiles_n = (a.N + CFG::BN - 1) / CFG::BN;
    static const bool attr = [] {
        DT_CHECK(cudaFuncSetAttribute(k_sm90_gemm<CFG>, cudaFuncAttributeMaxDynamicSharedMemorySize, CFG::SMEM));
        return true;
    }();
    (void)attr;
    const int tiles = a.tiles_m * a.tiles_n, sms = dt_gpu_sm_count();
    k_sm90_gemm<CFG><<<tiles < sms ? tiles : sms, 384, CFG::SMEM, dt_stream()>>>(ma, mb, my, a);
    DT_CHECK_LAUNCH();
}

/* The tile of both, the sampling producer's and its reference's over the columns: 128 x 64 for 64
 * output channels, 128 x 128 above - the plain fprop's 128-row tiles (for 256 channels the plain
 * fprop takes 256 x 128, whose 128-row consumers need more than the 192 registers a consumer
 * keeps beside the sampling producer). */
template <int AP, class EXT>
void deform_gemm(const typename a_needs<AP, EXT>::args &a, const void *colT, const void *w, void *y) {
    if (a.N <= 64) run_gemm<tile_cfg<128, 64, 8, AP, EPI_TMA, EXT>>(a, colT, w, y);
    else run_gemm<tile_cfg<128, 128, 5, AP, EPI_TMA, EXT>>(a, colT, w, y);
}

/* Whether the engine takes chunk c with Cout output channels (deform_sampler_sm90.h) */
bool supports(const dt_deform_chunk *c, int64_t Cout, const void *x, const void *w, const void *y) {
    const int64_t lim = (int64_t)1 << 31;
    const uintptr_t ptrs = (uintptr_t)x | (uintptr_t)w | (uintptr_t)y;
    return c->C > 0 && c->C % 64 == 0 && c->Cg > 0 && c->Cg % 64 == 0 && Cout > 0 && Cout % 8 == 0 && Cout < lim &&
           (int64_t)c->K * c->C < lim && c->Q > 0 && ptrs % 16 == 0;
}

void require(const dt_deform_chunk *c, int64_t Cout, const void *x, const void *w, const void *y) {
    if (!supports(c, Cout, x, w, y))
        dt_fatal("the Hopper engine's sampled deformable forward does not take C %d (offset groups of %d), %lld output "
                 "channels, %d positions", c->C, c->Cg, (long long)Cout, c->Q);
}

/* y [Q, Cout] = A . w^T + bias of the chunk c, K = K*C */
template <class ARGS> ARGS args_of(const dt_deform_chunk *c, int64_t Cout, const float *bias) {
    ARGS a = {};
    a.M = c->Q, a.N = (int)Cout, a.K = c->KC, a.bias = bias;
    return a;
}

} // namespace deform_sampler

using namespace deform_sampler;

void dt_conv_sm90_fprop_deform(const dt_deform_chunk *c, int64_t Cout, const void *x, const float *om, const void *w,
                               const float *bias, void *y) {
    require(c, Cout, x, w, y);
    deform_args a = args_of<deform_args>(c, Cout, bias);
    a.x = (const bf16 *)x, a.om = om, a.dc = *c;
    deform_gemm<A_EXT, sampling_producer>(a, NULL, w, y); /* the producer reads x through a.x */
}

void dt_conv_sm90_fprop_deform_cols(const dt_deform_chunk *c, int64_t Cout, const void *colT, const void *w,
                                    const float *bias, void *y) {
    require(c, Cout, colT, w, y);
    deform_gemm<A_TMA, void>(args_of<gemm_args>(c, Cout, bias), colT, w, y); /* colT [Q, K*C]: a dense A by TMA */
}
