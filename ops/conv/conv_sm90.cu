/* The convolution's passes on the Hopper engine (conv_sm90.h): the tensor maps, the tile each
 * shape runs (the lab's winners: bench/lab/sm90_gemm_lab.cu, docs/conv.md "The Hopper
 * engine"), dgrad's flipped weight, wgrad's split of the reduction. Built for sm_90a (the
 * Makefile compiles this file with -gencode arch=compute_90a,code=sm_90a when CUDA_ARCH is
 * sm_90); on another target the kernels are empty and the plan never chooses them
 * (dt_gpu_has_sm90a). */
#include "ops/conv/conv_sm90.h"
#include "ops/conv/sm90_gemm.cuh"

#include "core/dt_alloc.h"
#include "core/dt_common.h"
#include "core/dt_device.h"
#include "ops/dt_layers.h" /* dt_conv_chunk: the column budget */
#include "core/dt_kernel_util.cuh"

using namespace dt_sm90;

/* ---- tensor maps */

namespace {

typedef CUresult (*encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                    const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                    CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
typedef CUresult (*encode_im2col_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                     const cuuint64_t *, const int *, const int *, cuuint32_t, cuuint32_t,
                                     const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                     CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* a driver entry point by name (CUDA 12.0's ABI of it); fatal when the driver lacks it */
void *driver_fn(const char *name) {
    cudaDriverEntryPointQueryResult q;
    void *f = NULL;
    DT_CHECK(cudaGetDriverEntryPointByVersion(name, &f, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || !f) dt_fatal("the CUDA driver has no %s (needed by the sm90 conv engine)", name);
    return f;
}

/* corners of the bounding box of window origins, one spatial axis: from -p (the first origin,
 * against the top-left) to (o - 1) s - p - (i - 1) (the last, against the bottom-right pixel
 * i - 1); dt_conv_sm90_read has checked that they fit the map's 8 bits */
int lower_corner(int64_t p) { return (int)-p; }
int upper_corner(int64_t i, int64_t o, int64_t s, int64_t p) { return (int)((o - 1) * s - p - (i - 1)); }

} // namespace

CUtensorMap dt_sm90_map_rows(const void *a, int64_t rows, int64_t cols, int box_rows) {
    static const encode_tiled_fn encode = (encode_tiled_fn)driver_fn("cuTensorMapEncodeTiled");
    CUtensorMap m;
    const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)cols * 2};
    const cuuint32_t box[2] = {64, (cuuint32_t)box_rows}, elem[2] = {1, 1};
    const CUresult r = encode(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)a, dims, strides, box, elem,
                              CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        dt_fatal("cuTensorMapEncodeTiled of a [%lld, %lld] bf16 matrix (boxes of %d rows) failed: error %d",
                 (long long)rows, (long long)cols, box_rows, (int)r);
    return m;
}

CUtensorMap dt_sm90_map_im2col(const void *x, int64_t N, int64_t H, int64_t W, int64_t C, dt_conv_geom g, int64_t Ho,
                               int64_t Wo, int pixels) {
    static const encode_im2col_fn encode = (encode_im2col_fn)driver_fn("cuTensorMapEncodeIm2col");
    CUtensorMap m;
    /* dims and corners innermost first: (C,) W, H, N */
    const cuuint64_t dims[4] = {(cuuint64_t)C, (cuuint64_t)W, (cuuint64_t)H, (cuuint64_t)N};
    const cuuint64_t strides[3] = {(cuuint64_t)C * 2, (cuuint64_t)(W * C * 2), (cuuint64_t)(H * W * C * 2)};
    const int lower[2] = {lower_corner(g.pw), lower_corner(g.ph)};
    const int upper[2] = {upper_corner(W, Wo, g.sw, g.pw), upper_corner(H, Ho, g.sh, g.ph)};
    const cuuint32_t elem[4] = {1, (cuuint32_t)g.sw, (cuuint32_t)g.sh, 1};
    const CUresult r = encode(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, (void *)x, dims, strides, lower, upper, 64,
                              (cuuint32_t)pixels, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        dt_fatal("cuTensorMapEncodeIm2col of x [%lld, %lld, %lld, %lld] (kernel %dx%d, stride %d, pad %d) failed: error %d",
                 (long long)N, (long long)C, (long long)H, (long long)W, g.kh, g.kw, g.sh, g.ph, (int)r);
    return m;
}

/* ---- the passes */

namespace {

bool pointwise(const dt_conv_geom &g) { return g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0; }

/* The A operand of a conv as the engine's GEMM: the input x [N, H, W, C] read through the
 * windows of g (Ho x Wo of them an image) - by TMA's im2col mode, or as the dense [N*H*W, C]
 * matrix it is for a pointwise conv. */
struct a_source {
    const void *x;
    int64_t N, H, W, C, Ho, Wo;
    dt_conv_geom g;
};

CUtensorMap map_a(const a_source &s, int box_rows) {
    if (pointwise(s.g)) return dt_sm90_map_rows(s.x, s.N * s.H * s.W, s.C, box_rows);
    return dt_sm90_map_im2col(s.x, s.N, s.H, s.W, s.C, s.g, s.Ho, s.Wo, box_rows);
}

/* One GEMM on the engine: y [M, N] = A . b^T (+ beta y, + bias), b [N, K], y [M, N] bf16 (EPI_F32:
 * a.yf [M, a.ldy] fp32, y unused). */
template <class CFG> void run_gemm(gemm_args a, const a_source &src, const void *b, void *y) {
    const CUtensorMap mb = dt_sm90_map_rows(b, a.N, a.K, CFG::BN);
    const CUtensorMap ma = CFG::AP == A_IM2COL ? mb : map_a(src, CFG::BM); /* A_IM2COL: cp.async, no map */
    const CUtensorMap my = CFG::EPI == EPI_TMA ? dt_sm90_map_rows(y, a.M, a.N, CFG::WM) : mb; /* mb: not read */
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

/* A conv as the engine's GEMM: y [N*Ho*Wo, Cout] = A . w^T (+ beta y, + bias), w [Cout, kh, kw, C]
 * - fprop itself, and stride-1 dgrad on dy. The tile per shape (the lab, H200, batch 64; the
 * TMA-store epilogue everywhere). im2col: 128x64 for 64 output channels (l1: 0.0505 ms against
 * 0.078-0.087 for the others), 128x128 for 128 (l2: 0.034), 256x128 for 256 (l3: 0.037),
 * 128x128 above (l4: 0.035: 128-row tiles fill the SMs with its 3136 rows). Dense A: 256x64 for
 * 64 channels, 128x256 for >= 512 channels over a short K (<= 512), 128x128 otherwise. */
void conv_gemm(const a_source &src, const void *w, int64_t Cout, const float *bias, float beta, void *y,
               double *stats = NULL) {
    const dt_conv_geom &g = src.g;
    gemm_args a = {};
    a.M = (int)(src.N * src.Ho * src.Wo), a.N = (int)Cout, a.K = g.kh * g.kw * (int)src.C, a.bias = bias, a.beta = beta;
    a.stats = stats;
    if (pointwise(g)) {
        if (a.N <= 64) run_gemm<tile_cfg<256, 64, 4, A_TMA>>(a, src, w, y);
        else if (a.N >= 512 && a.K <= 512) run_gemm<tile_cfg<128, 256, 3, A_TMA>>(a, src, w, y);
        else run_gemm<tile_cfg<128, 128, 5, A_TMA>>(a, src, w, y);
        return;
    }
    a.x = (const bf16 *)src.x, a.H = (int)src.H, a.W = (int)src.W, a.C = (int)src.C, a.Ho = (int)src.Ho;
    a.Wo = (int)src.Wo, a.KW = g.kw, a.SH = g.sh, a.SW = g.sw, a.PH = g.ph, a.PW = g.pw, a.DH = g.dh, a.DW = g.dw;
    a.cblocks = (int)(src.C / 64);
    if (a.N <= 64) run_gemm<tile_cfg<128, 64, 8, A_TMA_IM2COL>>(a, src, w, y);
    else if (a.N <= 128 || a.N > 256) run_gemm<tile_cfg<128, 128, 5, A_TMA_IM2COL>>(a, src, w, y);
    else run_gemm<tile_cfg<256, 128, 3, A_TMA_IM2COL>>(a, src, w, y);
}

/* wf [C, kh, kw, Cout] = w [Cout, kh, kw, C] with the taps mirrored and the channel axes swapped:
 * the weight of dgrad as a conv of dy (wf[c][r][t][co] = w[co][kh-1-r][kw-1-t][c]). Per tap a
 * transpose of [Cout, C] in 32 x 32 tiles through shared memory (blockIdx.z the tap, 32 x 8
 * threads), so that both the reads along c and the writes along co are coalesced. */
__global__ void k_flip_weight(const bf16 *__restrict__ w, int Cout, int KH, int KW, int C, bf16 *__restrict__ wf) {
    __shared__ bf16 tile[32][33]; /* [co][c], padded against bank conflicts */
    const int taps = KH * KW, tap = blockIdx.z, flipped = taps - 1 - tap; /* (kh-1-r, kw-1-t) is tap taps-1-(r*kw+t) */
    const int c0 = blockIdx.x * 32, co0 = blockIdx.y * 32;
    for (int i = threadIdx.y; i < 32; i += 8) {
        const int co = co0 + i, c = c0 + threadIdx.x;
        if (co < Cout && c < C) tile[i][threadIdx.x] = w[((int64_t)co * taps + flipped) * C + c];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += 8) {
        const int c = c0 + i, co = co0 + threadIdx.x;
        if (c < C && co < Cout) wf[((int64_t)c * taps + tap) * Cout + co] = tile[threadIdx.x][i];
    }
}

/* ---- the columns path (dt_sm90_read COLUMNS: the stem's C = 3) */

/* cols [nc*Ho*Wo, Kp] bf16 = the im2col of images n0 .. n0+nc-1 of x [N, H, W, C] for the conv g,
 * column k = (r*kw + t)*C + c (the weight's order) for k < K, zero for K <= k < Kp. One thread a
 * 16-byte chunk of a row, gathering its 8 elements from x: the form for a row whose input patch
 * does not fit in shared memory (k_columns_rows below). */
__global__ void k_columns(const bf16 *__restrict__ x, int64_t n0, int H, int W, int C, int Ho, int Wo, dt_conv_geom g,
                          int K, int Kp, int64_t rows, bf16 *__restrict__ cols) {
    const int chunks = Kp / 8;
    DT_GRID_STRIDE(i, rows * chunks) {
        const int64_t m = i / chunks;
        const int j = (int)(i - m * chunks), HoWo = Ho * Wo;
        const int64_t n = n0 + m / HoWo;
        const int rem = (int)(m % HoWo), ho = rem / Wo, wo = rem - ho * Wo;
        __align__(16) bf16 v[8];
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const int k = 8 * j + e, tap = k / C, c = k - tap * C, r = tap / g.kw, t = tap - r * g.kw;
            const int h = ho * g.sh - g.ph + r * g.dh, w = wo * g.sw - g.pw + t * g.dw;
            const bool in = k < K && h >= 0 && h < H && w >= 0 && w < W;
            v[e] = in ? x[((n * H + h) * W + w) * C + c] : __float2bfloat16_rn(0.0f);
        }
        *reinterpret_cast<int4 *>(cols + m * Kp + 8 * j) = *reinterpret_cast<const int4 *>(v);
    }
}

/* The same for one output row (n, ho) a block, from the input patch it reads staged in shared
 * memory: patch [PR][PC][C] bf16 = x[n][ho*sh - ph + pr][pc - pw][c] (0 outside the image), PR =
 * (kh-1) dh + 1 rows and PC = (Wo-1) sw + (kw-1) dw + 1 columns, and koff [Kp] = the patch offset
 * of column k at wo = 0 (-1 for k >= K). The block's Wo rows of cols are contiguous, written in
 * 16-byte chunks; x is read once a block, coalesced, instead of 8 scattered loads a chunk (the
 * stem at batch 64: 0.35 ms a launch with the gather above). */
__global__ void k_columns_rows(const bf16 *__restrict__ x, int64_t n0, int H, int W, int C, int Ho, int Wo,
                               dt_conv_geom g, int K, int Kp, int PR, int PC, bf16 *__restrict__ cols) {
    extern __shared__ __align__(16) uint8_t smem_cols[];
    int *koff = (int *)smem_cols;                /* [Kp] */
    bf16 *patch = (bf16 *)(koff + (Kp + 3) / 4 * 4); /* [PR][PC][C] */
    const int64_t nl = blockIdx.x / Ho;
    const int ho = (int)(blockIdx.x % Ho), h0 = ho * g.sh - g.ph;
    for (int k = threadIdx.x; k < Kp; k += blockDim.x) {
        const int tap = k / C, c = k - tap * C, r = tap / g.kw, t = tap - r * g.kw;
        koff[k] = k < K ? (r * g.dh * PC + t * g.dw) * C + c : -1;
    }
    const bf16 *xn = x + (n0 + nl) * H * W * C;
    for (int i = threadIdx.x; i < PR * PC * C; i += blockDim.x) {
        const int pr = i / (PC * C), rem = i - pr * PC * C, w = rem / C - g.pw, h = h0 + pr;
        patch[i] = h >= 0 && h < H && w >= 0 && w < W ? xn[((int64_t)h * W + w) * C + rem % C] : __float2bfloat16_rn(0.0f);
    }
    __syncthreads();
    const int chunks = Kp / 8;
    bf16 *out = cols + (int64_t)blockIdx.x * Wo * Kp;
    for (int i = threadIdx.x; i < Wo * chunks; i += blockDim.x) {
        const int wo = i / chunks, j = i - wo * chunks, base = wo * g.sw * C;
        __align__(16) bf16 v[8];
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const int o = koff[8 * j + e];
            v[e] = o >= 0 ? patch[base + o] : __float2bfloat16_rn(0.0f);
        }
        *reinterpret_cast<int4 *>(out + (int64_t)wo * Kp + 8 * j) = *reinterpret_cast<const int4 *>(v);
    }
}

/* wp [Cout, Kp] = w [Cout, K] with zero columns K .. Kp-1 (TMA's rows: a multiple of 16 bytes) */
__global__ void k_pad_weight(const bf16 *__restrict__ w, int Cout, int K, int Kp, bf16 *__restrict__ wp) {
    DT_GRID_STRIDE(i, (int64_t)Cout * Kp) {
        const int k = (int)(i % Kp);
        wp[i] = k < K ? w[i / Kp * K + k] : __float2bfloat16_rn(0.0f);
    }
}

/* The images a chunk of the column matrix holds, and the buffer for them */
struct columns {
    int K, Kp;
    int64_t per_chunk; /* images */
    bf16 *buf;         /* [per_chunk * Ho * Wo, Kp] */
    explicit columns(const dt_conv_problem *p) {
        K = p->g.kh * p->g.kw * (int)p->C, Kp = (K + 7) / 8 * 8;
        per_chunk = dt_conv_chunk(p->N, p->Ho * p->Wo * Kp, sizeof(bf16));
        buf = (bf16 *)dt_gpu_malloc(sizeof(bf16) * (size_t)(per_chunk * p->Ho * p->Wo * Kp));
    }
    ~columns() { dt_gpu_free(buf); } /* stream-ordered, as every buffer here */
    /* fills buf with images n0 .. n0+nc-1; returns its rows */
    int64_t fill(const dt_conv_problem *p, const void *x, int64_t n0, int64_t nc) {
        const int64_t rows = nc * p->Ho * p->Wo;
        const dt_conv_geom &g = p->g;
        const int PR = (g.kh - 1) * g.dh + 1, PC = (int)(p->Wo - 1) * g.sw + (g.kw - 1) * g.dw + 1;
        const size_t smem = sizeof(int) * (size_t)((Kp + 3) / 4 * 4) + sizeof(bf16) * (size_t)PR * PC * p->C;
        if (smem <= 48 * 1024) /* a row's patch fits (the stem: 10 KB): staged */
            k_columns_rows<<<(unsigned)(nc * p->Ho), 256, smem, dt_stream()>>>(
                (const bf16 *)x, n0, (int)p->H, (int)p->W, (int)p->C, (int)p->Ho, (int)p->Wo, g, K, Kp, PR, PC, buf);
        else
            k_columns<<<dt_grid_for(rows * (Kp / 8), 256), 256, 0, dt_stream()>>>(
                (const bf16 *)x, n0, (int)p->H, (int)p->W, (int)p->C, (int)p->Ho, (int)p->Wo, g, K, Kp, rows, buf);
        DT_CHECK_LAUNCH();
        return rows;
    }
};

/* fprop through the columns: per chunk, y rows = cols . wp^T (+ bias), a dense GEMM; stats (or
 * NULL): the chunks' 64-row groups one after the other (stat_groups) */
void fprop_columns(const dt_conv_problem *p, const void *x, const void *w, const float *bias, void *y, double *stats) {
    columns cols(p);
    bf16 *wp = (bf16 *)dt_gpu_malloc(sizeof(bf16) * (size_t)(p->Cout * cols.Kp));
    k_pad_weight<<<dt_grid_for(p->Cout * cols.Kp, 256), 256, 0, dt_stream()>>>((const bf16 *)w, (int)p->Cout, cols.K,
                                                                               cols.Kp, wp);
    DT_CHECK_LAUNCH();
    const dt_conv_geom dense = {1, 1, 1, 1, 0, 0, 1, 1};
    for (int64_t n0 = 0; n0 < p->N; n0 += cols.per_chunk) {
        const int64_t nc = p->N - n0 < cols.per_chunk ? p->N - n0 : cols.per_chunk, rows = cols.fill(p, x, n0, nc);
        const a_source src = {cols.buf, rows, 1, 1, cols.Kp, 1, 1, dense};
        conv_gemm(src, wp, p->Cout, bias, 0.0f, (bf16 *)y + n0 * p->Ho * p->Wo * p->Cout, stats);
        if (stats) stats += (rows + 63) / 64 * p->Cout * 2;
    }
    dt_gpu_free(wp);
}

/* The 64-row groups of the engine's statistics epilogue for fprop of p: those of M, or of each
 * chunk of the column path (a group never straddles two GEMMs) */
int64_t stat_groups(const dt_conv_problem *p) {
    const int64_t HoWo = p->Ho * p->Wo;
    if (dt_conv_sm90_read(p, DT_CONV_FPROP) != DT_SM90_COLUMNS) return (p->N * HoWo + 63) / 64;
    const int64_t K = p->g.kh * p->g.kw * p->C, Kp = (K + 7) / 8 * 8;
    const int64_t per = dt_conv_chunk(p->N, HoWo * Kp, sizeof(bf16)), full = p->N / per, rest = p->N - full * per;
    return full * ((per * HoWo + 63) / 64) + (rest * HoWo + 63) / 64;
}

} // namespace

extern "C" void dt_conv_sm90_fprop(const dt_conv_problem *p, const void *x, const void *w, const float *bias, void *y,
                                   dt_conv_stats *stats) {
    if (stats) *stats = (dt_conv_stats){NULL, 0};
    if (p->N * p->Ho * p->Wo == 0) return;
    double *sums = NULL; /* [groups][Cout][2] */
    if (stats) {
        stats->groups = stat_groups(p);
        stats->sums = sums = (double *)dt_gpu_malloc(sizeof(double) * 2 * (size_t)(stats->groups * p->Cout));
    }
    if (dt_conv_sm90_read(p, DT_CONV_FPROP) == DT_SM90_COLUMNS) return fprop_columns(p, x, w, bias, y, sums);
    const a_source src = {x, p->N, p->H, p->W, p->C, p->Ho, p->Wo, p->g};
    conv_gemm(src, w, p->Cout, bias, 0.0f, y, sums);
}

/* The deformable layer's offset conv (ops/deform/offset_conv.h): fp32 rows, one 64-column tile
 * for its 18 or 27 outputs (the A tile is what costs: the same 128-row im2col tiles as a plain
 * conv's fprop, 8 stages). */
extern "C" void dt_conv_sm90_fprop_f32(const dt_conv_problem *p, const void *x, const void *w, const float *bias,
                                       float *y, int64_t ldy, int64_t sigmoid_from) {
    if (p->N * p->Ho * p->Wo == 0) return;
    const dt_conv_geom &g = p->g;
    gemm_args a = {};
    a.M = (int)(p->N * p->Ho * p->Wo), a.N = (int)p->Cout, a.K = g.kh * g.kw * (int)p->C, a.bias = bias;
    a.yf = y, a.ldy = (int)ldy, a.sigmoid_from = (int)sigmoid_from;
    a.x = (const bf16 *)x, a.H = (int)p->H, a.W = (int)p->W, a.C = (int)p->C, a.Ho = (int)p->Ho, a.Wo = (int)p->Wo;
    a.KW = g.kw, a.SH = g.sh, a.SW = g.sw, a.PH = g.ph, a.PW = g.pw, a.DH = g.dh, a.DW = g.dw;
    a.cblocks = (int)(p->C / 64);
    const a_source src = {x, p->N, p->H, p->W, p->C, p->Ho, p->Wo, g};
    run_gemm<tile_cfg<128, 64, 8, A_TMA_IM2COL, EPI_F32>>(a, src, w, NULL);
}

/* The offset conv's dgrad: dy's few channels (Cout % 8 == 0, not a multiple of 64) gathered by
 * the producer warpgroup's cp.async, not TMA's 64-channel im2col boxes; add (fp32, or NULL) summed
 * before the one rounding. wf is the flipped weight [C, kh, kw, Cout] (k_flip_weight's). */
extern "C" void dt_conv_sm90_dgrad_narrow(const dt_conv_problem *p, const void *dy, const void *wf, const float *add,
                                          float beta, void *dx) {
    if (p->N * p->H * p->W == 0) return;
    const dt_conv_geom g = dt_conv_dgrad_geom(p->g);
    gemm_args a = {};
    a.M = (int)(p->N * p->H * p->W), a.N = (int)p->C, a.K = g.kh * g.kw * (int)p->Cout, a.beta = beta, a.add = add;
    a.x = (const bf16 *)dy, a.H = (int)p->Ho, a.W = (int)p->Wo, a.C = (int)p->Cout, a.Ho = (int)p->H, a.Wo = (int)p->W;
    a.KW = g.kw, a.SH = g.sh, a.SW = g.sw, a.PH = g.ph, a.PW = g.pw, a.DH = g.dh, a.DW = g.dw;
    const a_source src = {dy, p->N, p->Ho, p->Wo, p->Cout, p->H, p->W, g};
    if (a.N <= 64) run_gemm<tile_cfg<128, 64, 6, A_IM2COL>>(a, src, wf, dx);
    else run_gemm<tile_cfg<128, 128, 5, A_IM2COL>>(a, src, wf, dx);
}

extern "C" void dt_conv_sm90_dgrad(const dt_conv_problem *p, const void *dy, const void *w, float beta, void *dx) {
    if (p->N * p->H * p->W == 0) return;
    const dt_conv_geom g = p->g;
    const int64_t nw = p->Cout * g.kh * g.kw * p->C;
    bf16 *wf = (bf16 *)dt_gpu_malloc(sizeof(bf16) * (size_t)nw); /* [C, kh, kw, Cout] */
    const dim3 grid((unsigned)((p->C + 31) / 32), (unsigned)((p->Cout + 31) / 32), (unsigned)(g.kh * g.kw));
    k_flip_weight<<<grid, dim3(32, 8), 0, dt_stream()>>>((const bf16 *)w, (int)p->Cout, g.kh, g.kw, (int)p->C, wf);
    DT_CHECK_LAUNCH();
    const a_source src = {dy, p->N, p->Ho, p->Wo, p->Cout, p->H, p->W, dt_conv_dgrad_geom(g)};
    conv_gemm(src, wf, p->C, NULL, beta, dx);
    dt_gpu_free(wf); /* stream-ordered: reused only by later work on this stream */
}

namespace {

/* dw [Cout, K] = beta dw + dy^T . B on the engine: a carries the shape (and, for the im2col B,
 * the geometry); map_dy reads dy [M, Cout], map_b the columns of x */
template <class CFG> void run_wgrad(wgrad_args a, const CUtensorMap &map_dy, const CUtensorMap &map_b) {
    a.tiles_co = (a.Cout + CFG::CO - 1) / CFG::CO, a.tiles_k = (a.K + CFG::BN - 1) / CFG::BN;
    const int64_t n = (int64_t)a.Cout * a.K;
    const int tiles = a.tiles_co * a.tiles_k, steps = (a.M + 63) / 64;
    const int splits = sm90_wgrad_splits(tiles, steps, n, dt_gpu_sm_count(), CFG::STEP_US);
    a.steps_per_split = (steps + splits - 1) / splits;
    a.splits = (steps + a.steps_per_split - 1) / a.steps_per_split;
    float *part = a.splits > 1 ? (float *)dt_gpu_malloc(sizeof(float) * (size_t)a.splits * (size_t)n) : NULL;
    a.part = part;
    static const bool attr = [] {
        DT_CHECK(cudaFuncSetAttribute(k_sm90_wgrad<CFG>, cudaFuncAttributeMaxDynamicSharedMemorySize, CFG::SMEM));
        return true;
    }();
    (void)attr;
    k_sm90_wgrad<CFG><<<dim3(tiles, a.splits), 384, CFG::SMEM, dt_stream()>>>(map_dy, map_b, a);
    DT_CHECK_LAUNCH();
    if (part) {
        k_sm90_wgrad_reduce<<<dt_grid_for(n, 256), 256, 0, dt_stream()>>>(a.dw, part, n, a.splits, a.beta);
        DT_CHECK_LAUNCH();
        dt_gpu_free(part);
    }
}

template <int CO, int BNC, int STAGES>
void wgrad_im2col(const dt_conv_problem *p, const void *x, const void *dy, float beta, float *dw) {
    wgrad_args a = {};
    a.M = (int)(p->N * p->Ho * p->Wo), a.Cout = (int)p->Cout, a.K = p->g.kh * p->g.kw * (int)p->C, a.dw = dw, a.beta = beta;
    a.C = (int)p->C, a.Ho = (int)p->Ho, a.Wo = (int)p->Wo, a.KW = p->g.kw, a.SH = p->g.sh, a.SW = p->g.sw;
    a.PH = p->g.ph, a.PW = p->g.pw, a.DH = p->g.dh, a.DW = p->g.dw;
    run_wgrad<wgrad_cfg<CO, BNC, STAGES>>(a, dt_sm90_map_rows(dy, a.M, p->Cout, 64),
                                          dt_sm90_map_im2col(x, p->N, p->H, p->W, p->C, p->g, p->Ho, p->Wo, 64));
}

/* through the columns, chunk by chunk: the first chunk with the caller's beta, the others onto it */
template <int CO, int BNC, int STAGES>
void wgrad_columns(const dt_conv_problem *p, const void *x, const void *dy, float beta, float *dw) {
    columns cols(p);
    for (int64_t n0 = 0; n0 < p->N; n0 += cols.per_chunk) {
        const int64_t nc = p->N - n0 < cols.per_chunk ? p->N - n0 : cols.per_chunk, rows = cols.fill(p, x, n0, nc);
        wgrad_args a = {};
        a.M = (int)rows, a.Cout = (int)p->Cout, a.K = cols.K, a.dw = dw, a.beta = n0 ? 1.0f : beta;
        const bf16 *dyc = (const bf16 *)dy + n0 * p->Ho * p->Wo * p->Cout;
        run_wgrad<wgrad_cfg<CO, BNC, STAGES, true>>(a, dt_sm90_map_rows(dyc, rows, p->Cout, 64),
                                                    dt_sm90_map_rows(cols.buf, rows, cols.Kp, 64));
    }
}

} // namespace

/* wgrad tiles (the lab, batch 64): 64 channels x 256 columns of K for 64 output channels (l1:
 * 0.081 ms), 128 x 256 above (l2: 0.047, l3: 0.054, l4: 0.058). */
extern "C" void dt_conv_sm90_wgrad(const dt_conv_problem *p, const void *x, const void *dy, float beta, float *dw) {
    /* dw = beta dw over no positions: beta is 0 or 1 (the gradient convention, dt_grad_dst) */
    const int64_t K = (int64_t)p->g.kh * p->g.kw * p->C;
    if (p->N * p->Ho * p->Wo == 0) { /* no positions: dw = beta * dw */
        if (beta == 0.0f) dt_memset_gpu(dw, 0, sizeof(float) * (size_t)(p->Cout * K));
        return;
    }
    const bool by_columns = dt_conv_sm90_read(p, DT_CONV_WGRAD) == DT_SM90_COLUMNS;
    if (p->Cout <= 64) (by_columns ? wgrad_columns<64, 128, 5> : wgrad_im2col<64, 128, 5>)(p, x, dy, beta, dw);
    else (by_columns ? wgrad_columns<128, 256, 4> : wgrad_im2col<128, 256, 4>)(p, x, dy, beta, dw);
}
