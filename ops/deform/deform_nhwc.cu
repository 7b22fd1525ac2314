/* CUDA versions of deform_nhwc.h (contracts there; algorithm and measurements in
 * docs/deft.md).
 *
 * Thread mapping: a group of L lanes (dt_lanes.cuh) per row - a sample for sample/scatter, a
 * (pixel, group) for the gather - its lanes over the row's channel vectors (float4 when the
 * group's channel count is a multiple of 4). Rows are visited by a grid-stride loop over
 * groups, so that all SMs work on one narrow band of the image at a time and its corners are
 * read from L2 once (a contiguous range of rows a block was measured 9-45 % slower: the
 * kernel lab). 32-bit row ids (the plan keeps them below 2^31), 64-bit memory offsets.
 * Each lane recomputes its row's bilinear weights: a few dozen instructions against 16 bytes
 * moved per vector, cheaper than sharing them through shared memory.
 *
 * Every kernel is templated on the plan's tensor type T (float, or bf16 for bf16 plans): x,
 * the columns and their gradient are read as stored (the gather takes 8 bf16 channels a vector
 * where Cg % 8 == 0: one 16-byte load; else 4, one 8-byte load)
 * and widened; all arithmetic is fp32; a bf16 result is rounded once, on its store.
 * The sampling and gather row kernels (k_sample, k_gather) are in deform_nhwc.cuh, which the
 * kernel lab includes too. */
#include <cub/device/device_radix_sort.cuh>

#include "ops/deform/deform_chunk.h"
#include "ops/deform/deform_nhwc.cuh"
#include "ops/deform/deform_nhwc.h"
#include "core/dt_kernel_util.cuh"
#include "core/dt_lanes.cuh"
#include "ops/deform/offset_conv.cuh"
#include "ops/deform/offset_conv.h"

namespace {

using namespace dt_deft;

/* ------------------------------------------------------------------ tiled forward (DefT knobs) */

struct tiling {
    int th, tw, tiles_x, tiles_y, tiles, swizzle, halo, FH, FW, CC;
};

/* Block -> (image, tile row, tile col); with swizzle, tiles of an image are visited column by
 * column inside bands of 4 tile rows, so consecutive blocks are 2-D neighbours. */
__device__ __forceinline__ void tile_of(const tiling &t, int b, int *i, int *ty, int *tx) {
    *i = b / t.tiles;
    int r = b - *i * t.tiles;
    if (!t.swizzle) {
        *ty = r / t.tiles_x;
        *tx = r - *ty * t.tiles_x;
        return;
    }
    const int band = 4;
    int per_band = band * t.tiles_x, bi = r / per_band, rr = r - bi * per_band;
    int rows = min(band, t.tiles_y - bi * band);
    *tx = rr / rows;
    *ty = bi * band + (rr - *tx * rows);
}

const int TILE_TMP = 2; /* positions per group in the fused offset conv: 32 groups x 2 = an 8x8 tile */

/* One block per output tile. Phase 1: the tile's om rows (FUSE: computed by the offset conv
 * and written to om for the backward; else read). Phase 2: its colT rows, reading corners from
 * the staged footprint (STAGE: rows [fy0, fy0+FH) x cols [fx0, fx0+FW), CC channels at a time,
 * widened to fp32, zero outside the image) when all four lie in it, else from global memory. */
template <bool FUSE, bool STAGE, int VEC, int OCT, typename T>
__global__ void __launch_bounds__(THREADS) k_tile(dt_deform_chunk c, tiling tl, const float4 *__restrict__ wpack,
                                                 const float *__restrict__ boff, const T *__restrict__ xT,
                                                 float *__restrict__ om, T *__restrict__ colT) {
    typedef typename dt_vec<VEC>::T V;
    extern __shared__ __align__(16) float smem[];
    const int TP = tl.th * tl.tw;
    float *offs = smem;                            /* [TP][OCS] */
    V *xs = reinterpret_cast<V *>(smem + TP * c.OCS); /* [FH][FW][CC/VEC] */
    int i, ty, tx;
    tile_of(tl, blockIdx.x, &i, &ty, &tx);
    const int oy0 = ty * tl.th, ox0 = tx * tl.tw;
    auto qof = [&](int p) -> int {
        int oy = oy0 + p / tl.tw, ox = ox0 + p % tl.tw;
        return oy < c.Ho && ox < c.Wo ? (i * c.Ho + oy) * c.Wo + ox : -1;
    };
    if (FUSE) {
        const int lane = threadIdx.x % OFF_S, grp = threadIdx.x / OFF_S, groups = THREADS / OFF_S;
        const int nt = (c.OC + OCT - 1) / OCT;
        for (int p0 = grp * TILE_TMP; p0 < TP; p0 += groups * TILE_TMP) {
            int qs[TILE_TMP];
#pragma unroll
            for (int t = 0; t < TILE_TMP; t++) qs[t] = p0 + t < TP ? qof(p0 + t) : -1;
            for (int ot = 0; ot < nt; ot++) {
                float acc[TILE_TMP][OCT];
#pragma unroll
                for (int t = 0; t < TILE_TMP; t++)
#pragma unroll
                    for (int o = 0; o < OCT; o++) acc[t][o] = 0.0f;
                offconv_accumulate<VEC, TILE_TMP, OCT, T>(c, wpack, ot, 0, c.K, xT, qs, lane, acc);
#pragma unroll
                for (int t = 0; t < TILE_TMP; t++)
#pragma unroll
                    for (int o = 0; o < OCT; o++) {
                        int oc = ot * OCT + o;
                        if ((t * OCT + o) % OFF_S != lane || p0 + t >= TP || oc >= c.OCS) continue;
                        float v = offconv_finish(c, oc, acc[t][o], boff);
                        offs[(p0 + t) * c.OCS + oc] = v;
                        if (qs[t] >= 0) om[(int64_t)qs[t] * c.OCS + oc] = v;
                    }
            }
        }
    } else {
        for (int e = threadIdx.x; e < TP * c.OCS; e += THREADS) {
            int q = qof(e / c.OCS);
            offs[e] = q >= 0 ? __ldg(om + (int64_t)q * c.OCS + e % c.OCS) : 0.0f;
        }
    }
    __syncthreads();

    const int fy0 = oy0 * c.sh - c.ph - tl.halo, fx0 = ox0 * c.sw - c.pw - tl.halo;
    const int CCV = (STAGE ? tl.CC : c.C) / VEC, L = 32; /* lanes a row: the chunk's vectors */
    const int lane = threadIdx.x % L, rows_per_pass = THREADS / L, NV = c.C / VEC;
    const T *xi = xT + (int64_t)i * c.H * c.W * c.C; /* the image */
    for (int v0 = 0; v0 < NV; v0 += CCV) {
        const int vn = min(CCV, NV - v0);
        if (STAGE) {
            __syncthreads();
            for (int e = threadIdx.x; e < tl.FH * tl.FW * vn; e += THREADS) {
                int cell = e / vn, v = e - cell * vn, fy = cell / tl.FW, fx = cell - fy * tl.FW;
                int iy = fy0 + fy, ix = fx0 + fx;
                V val;
                if (iy >= 0 && iy < c.H && ix >= 0 && ix < c.W) cload(xi + ((int64_t)iy * c.W + ix) * c.C, v0 + v, val);
                else vzero(val);
                xs[cell * CCV + v] = val;
            }
            __syncthreads();
        }
        for (int r = threadIdx.x / L; r < TP * c.K; r += rows_per_pass) {
            const int p = r / c.K, k = r - p * c.K, q = qof(p);
            if (q < 0) continue;
            uint32_t kyu;
            const int kx = (int)dt_fastdiv_divmod((uint32_t)k, c.fkw, &kyu), ky = (int)kyu;
            const int oy = oy0 + p / tl.tw, ox = ox0 + p % tl.tw;
            for (int v = lane; v < vn; v += L) {
                const int ch = (v0 + v) * VEC, g = ch / c.Cg, j = g * c.K + k;
                const float *o = offs + p * c.OCS;
                const float m = c.has_mask ? o[2 * c.GK + j] : 1.0f;
                dt_bilin b = dt_bilin_make((float)(oy * c.sh - c.ph + ky * c.dh) + o[2 * j],
                                           (float)(ox * c.sw - c.pw + kx * c.dw) + o[2 * j + 1], c.H, c.W);
                const int ly = b.yl - fy0, lx = b.xl - fx0;
                const bool in_smem = STAGE && b.inside && ly >= 0 && ly + 1 < tl.FH && lx >= 0 && lx + 1 < tl.FW;
                V val[4];
#pragma unroll
                for (int t = 0; t < 4; t++) {
                    if (in_smem) val[t] = xs[((ly + (t >> 1)) * tl.FW + lx + (t & 1)) * CCV + v];
                    else if (b.ok[t]) cload(xi + dt_bilin_index(&b, t, c.W) * c.C, v0 + v, val[t]);
                    else vzero(val[t]);
                }
                cstore(colT + (int64_t)q * c.KC + (int64_t)k * c.C, v0 + v, bilin_blend(b, m, val));
            }
        }
    }
}

/* ------------------------------------------------------------------ inverse index */

__global__ void k_index_keys(dt_deform_chunk c, const float *__restrict__ om, uint32_t nkeys, uint32_t *__restrict__ keys,
                             uint32_t *__restrict__ ids, float4 *__restrict__ wm) {
    DT_GRID_STRIDE(e, c.S) {
        int q, k, g, i;
        float m;
        dt_sample_decode(&c, (uint32_t)e, &q, &k, &g);
        dt_bilin b = dt_sample_bilin(&c, om, q, k, g, &i, &m);
        keys[e] = dt_sample_key(&c, &b, i, g, nkeys);
        ids[e] = (uint32_t)e;
        wm[e] = make_float4(b.ok[0] ? b.w[0] * m : 0.0f, b.ok[1] ? b.w[1] * m : 0.0f, b.ok[2] ? b.w[2] * m : 0.0f,
                            b.ok[3] ? b.w[3] * m : 0.0f);
    }
}

/* start[k] = first position of key >= k in the sorted keys (binary search): no atomics. */
__global__ void k_index_starts(int64_t n, const uint32_t *__restrict__ sorted, int64_t nkeys, uint32_t *__restrict__ start) {
    DT_GRID_STRIDE(k, nkeys + 1) {
        int64_t lo = 0, hi = n;
        while (lo < hi) {
            int64_t mid = (lo + hi) >> 1;
            if (sorted[mid] < (uint32_t)k) lo = mid + 1;
            else hi = mid;
        }
        start[k] = (uint32_t)lo;
    }
}

struct index_ws {
    uint32_t *keys_in, *keys_out, *ids_in, *order, *start;
    float4 *wm;
    void *sort_tmp;
    size_t sort_bytes;
};

int key_bits(int64_t nkeys) {
    int b = 1;
    while (b < 32 && ((int64_t)1 << b) <= nkeys) b++;
    return b;
}

/* CUB's temporary bytes for a sort of S pairs with key_bits(nkeys)-bit keys. The query runs
 * CUB's dispatch on the host (the device's PTX version and SM count, kernel occupancies: CUDA
 * calls), and a backward asks twice (its workspace's size, then the sort): the answer depends on
 * the device and the two sizes alone, so the last few are kept, per thread. */
size_t sort_tmp_bytes(int64_t S, int64_t nkeys) {
    struct kept {
        int dev, bits;
        int64_t S;
        size_t bytes;
    };
    static thread_local kept last[4];
    static thread_local int filled, next;
    const int dev = dt_gpu_current(), bits = key_bits(nkeys);
    for (int i = 0; i < filled; i++)
        if (last[i].dev == dev && last[i].bits == bits && last[i].S == S) return last[i].bytes;
    size_t bytes = 0;
    DT_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, (const uint32_t *)nullptr, (uint32_t *)nullptr,
                                             (const uint32_t *)nullptr, (uint32_t *)nullptr, (int)S, 0, bits,
                                             dt_stream()));
    last[next] = kept{dev, bits, S, bytes};
    next = (next + 1) % 4;
    if (filled < 4) filled++;
    return bytes;
}

size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

index_ws index_layout(int64_t S, int64_t nkeys, void *ws) {
    index_ws w;
    char *p = (char *)ws;
    w.wm = (float4 *)p;
    p += align256((size_t)S * 16);
    w.order = (uint32_t *)p;
    p += align256((size_t)S * 4);
    w.start = (uint32_t *)p;
    p += align256((size_t)(nkeys + 1) * 4);
    w.keys_in = (uint32_t *)p;
    p += align256((size_t)S * 4);
    w.keys_out = (uint32_t *)p;
    p += align256((size_t)S * 4);
    w.ids_in = (uint32_t *)p;
    p += align256((size_t)S * 4);
    w.sort_tmp = p;
    w.sort_bytes = 0;
    return w;
}

/* ------------------------------------------------------------------ offset gradients */

__global__ void k_offset_grads(dt_deform_chunk c, const float *__restrict__ om, const float *__restrict__ D, int logits,
                               float *__restrict__ dom) {
    DT_GRID_STRIDE(e, c.S) {
        int q, k, g, i;
        float m, d[4], gy, gx, gm;
        dt_sample_decode(&c, (uint32_t)e, &q, &k, &g);
        dt_bilin b = dt_sample_bilin(&c, om, q, k, g, &i, &m);
        float4 d4 = b.inside && (b.ok[0] | b.ok[1] | b.ok[2] | b.ok[3]) ? reinterpret_cast<const float4 *>(D)[e]
                                                                          : make_float4(0.f, 0.f, 0.f, 0.f);
        d[0] = b.ok[0] ? d4.x : 0.0f;
        d[1] = b.ok[1] ? d4.y : 0.0f;
        d[2] = b.ok[2] ? d4.z : 0.0f;
        d[3] = b.ok[3] ? d4.w : 0.0f;
        dt_sample_grads(&b, m, d, &gy, &gx, &gm);
        dt_sample_store_grads(&c, dom, q, k, g, m, gy, gx, gm, logits);
    }
}

/* ------------------------------------------------------------------ atomic scatter */

/* x and dcol of T; dxT fp32 (the atomics' sums; NULL: dom only). */
template <int VEC, int L, typename T>
__global__ void __launch_bounds__(THREADS) k_scatter(dt_deform_chunk c, const T *__restrict__ xT,
                                                    const float *__restrict__ om, const T *__restrict__ dcolT,
                                                    int logits, float *__restrict__ dxT, float *__restrict__ dom) {
    typedef typename dt_vec<VEC>::T V;
    const int lane = threadIdx.x % L, NV = c.Cg / VEC;
    const unsigned mask = group_mask<L>();
    DT_DEFT_FOR_ROWS(s, c.S, L) {
        int q, k, g, i;
        float m;
        dt_sample_decode(&c, (uint32_t)s, &q, &k, &g);
        dt_bilin b = dt_sample_bilin(&c, om, q, k, g, &i, &m);
        const int64_t plane = (int64_t)i * c.H * c.W * c.C + (int64_t)g * c.Cg;
        int64_t at[4];
        float wm[4], part[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int t = 0; t < 4; t++) {
            at[t] = b.ok[t] ? plane + dt_bilin_index(&b, t, c.W) * c.C : -1;
            wm[t] = b.w[t] * m;
        }
        const T *row = dcolT + (int64_t)q * c.KC + (int64_t)k * c.C + (int64_t)g * c.Cg;
        for (int v = lane; v < NV; v += L) {
            V d, xv;
            cload(row, v, d);
#pragma unroll
            for (int t = 0; t < 4; t++) {
                if (at[t] < 0) continue;
                cload(xT + at[t], v, xv);
                part[t] += vdot(d, xv);
                if (dxT && wm[t] != 0.0f) vatomic_add(reinterpret_cast<V *>(dxT + at[t]) + v, vscale(wm[t], d));
            }
        }
#pragma unroll
        for (int t = 0; t < 4; t++) part[t] = group_sum<L>(part[t], mask);
        if (lane == 0) {
            float gy, gx, gm;
            dt_sample_grads(&b, m, part, &gy, &gx, &gm);
            dt_sample_store_grads(&c, dom, q, k, g, m, gy, gx, gm, logits);
        }
    }
}

/* ------------------------------------------------------------------ launch helpers */

bool vec4(const dt_deform_plan *p) { return p->Cg % 4 == 0; }

/* Lanes a sample in the sampling kernel: about 4 vectors a lane (4 lanes for 64 channels), so
 * that the per-sample work - decoding, bilinear weights - is shared by few lanes: a lane a
 * vector was instruction-bound (ncu: 77 % of the SM's issue rate) and 1.36x slower on l1. The
 * gather and the scatter keep a lane a vector (measured faster: the kernel lab). */
int row_lanes(const dt_deform_plan *p) {
    int64_t nv = vec4(p) ? p->Cg / 4 : p->Cg;
    return dt_lanes_for((nv + 3) / 4, 4);
}

int blocks_for_rows(int64_t rows, int L) { return dt_grid_for(rows * L, THREADS); }

#define DISPATCH_L(L, ...)                  \
    switch (L) {                            \
    case 4: { const int L_ = 4; __VA_ARGS__; } break;   \
    case 8: { const int L_ = 8; __VA_ARGS__; } break;   \
    case 16: { const int L_ = 16; __VA_ARGS__; } break; \
    default: { const int L_ = 32; __VA_ARGS__; } break; \
    }

/* Tile geometry: the knob's tile, or 8x8 / 4x8 / 4x4, the largest giving >= 2 blocks an SM;
 * footprint and channel chunk for staging within SMEM_BUDGET next to the tile's om rows. */
const int SMEM_BUDGET = 48 * 1024;

const char *make_tiling(const dt_deform_plan *p, int64_t nb, bool stage, tiling *t) {
    static char msg[200];
    t->th = p->knobs.tile_h;
    t->tw = p->knobs.tile_w;
    if (t->th <= 0 || t->tw <= 0) {
        static const int cand[3][2] = {{8, 8}, {4, 8}, {4, 4}};
        for (int e = 0; e < 3; e++) {
            t->th = cand[e][0];
            t->tw = cand[e][1];
            int64_t blocks = nb * ((p->prob.Ho + t->th - 1) / t->th) * ((p->prob.Wo + t->tw - 1) / t->tw);
            if (blocks >= 2 * dt_gpu_sm_count()) break;
        }
    }
    t->tiles_y = (int)((p->prob.Ho + t->th - 1) / t->th);
    t->tiles_x = (int)((p->prob.Wo + t->tw - 1) / t->tw);
    t->tiles = t->tiles_y * t->tiles_x;
    t->swizzle = p->knobs.swizzle;
    t->halo = stage ? p->halo : 0;
    t->FH = (t->th - 1) * p->prob.g.sh + (p->prob.g.kh - 1) * p->prob.g.dh + 2 * t->halo + 2;
    t->FW = (t->tw - 1) * p->prob.g.sw + (p->prob.g.kw - 1) * p->prob.g.dw + 2 * t->halo + 2;
    int vec = vec4(p) ? 4 : 1;
    size_t offs = (size_t)t->th * t->tw * p->OCS * sizeof(float);
    t->CC = (int)p->prob.C;
    if (stage) {
        size_t per_ch = (size_t)t->FH * t->FW * sizeof(float);
        int64_t cc = offs + per_ch * vec <= (size_t)SMEM_BUDGET ? (int64_t)((SMEM_BUDGET - offs) / per_ch) : 0;
        cc = cc / vec * vec;
        if (cc > 32 * vec) cc = 32 * vec; /* one vector a lane of the 32-lane rows */
        if (cc > p->prob.C) cc = p->prob.C;
        if (cc < vec)
            return snprintf(msg, sizeof msg, "deft stage: tile %dx%d with halo %d gives a %dx%d footprint that does not fit "
                            "%d KB of shared memory (use a smaller tile or halo)", t->th, t->tw, t->halo, t->FH, t->FW,
                            SMEM_BUDGET / 1024), msg;
        t->CC = (int)cc;
    }
    return NULL;
}

size_t tile_smem(const dt_deform_plan *p, const tiling &t, bool stage) {
    size_t f = (size_t)t.th * t.tw * p->OCS;
    if (stage) f += (size_t)t.FH * t.FW * t.CC;
    return f * sizeof(float);
}

}  // namespace

extern "C" {

void dt_deform_sample_nhwc_cuda(const dt_deform_plan *p, int64_t nb, const void *xT, const float *om, void *colT) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    if (c.S <= 0) return;
    bool v4 = vec4(p);
    int L = row_lanes(p);
    dt_dispatch_plan_dtype(p->dtype, [&](auto *tag) {
        typedef DT_TAG_TYPE(tag) T;
#define SAMPLE(V) \
    k_sample<V, L_, T><<<blocks_for_rows(c.S, L_), THREADS, 0, dt_stream()>>>(c, (const T *)xT, om, (T *)colT)
        if (v4) { DISPATCH_L(L, SAMPLE(4)); }
        else { DISPATCH_L(L, SAMPLE(1)); }
#undef SAMPLE
    });
    DT_CHECK_LAUNCH();
}

size_t dt_deform_tile_ws_bytes_cuda(const dt_deform_plan *p, int64_t nb) { return dt_offconv_ws_bytes_cuda(p, nb); }

void dt_deform_tile_forward_cuda(const dt_deform_plan *p, int64_t nb, const void *xT, const float *woff,
                                 const float *boff, float *om, void *colT, void *ws) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    if (c.Q <= 0) return;
    const bool fuse = woff != NULL, stage = p->knobs.stage != 0;
    tiling t;
    const char *bad = make_tiling(p, nb, stage, &t);
    if (bad) dt_fatal("%s", bad);
    const int oct = offconv_oct(p->OC), nt = (int)((p->OC + oct - 1) / oct);
    float4 *wpack = (float4 *)ws;
    if (fuse) {
        /* the weights rounded where the offset conv's CPU twin rounds them (offset_conv.h) */
        const int round = p->dtype == DT_BF16 && dt_offconv_rounds(p);
        int64_t npack = (int64_t)nt * oct * p->K * p->prob.C / 4;
        if (vec4(p) && p->prob.C % 4 == 0)
            k_offconv_pack<4><<<dt_grid_for(npack, 256), 256, 0, dt_stream()>>>(c, oct, nt, woff, round, wpack);
        else k_offconv_pack<1><<<dt_grid_for(npack, 256), 256, 0, dt_stream()>>>(c, oct, nt, woff, round, wpack);
        DT_CHECK_LAUNCH();
    }
    size_t smem = tile_smem(p, t, stage);
    unsigned blocks = (unsigned)(nb * t.tiles);
    dt_dispatch_plan_dtype(p->dtype, [&](auto *tag) {
        typedef DT_TAG_TYPE(tag) T;
#define TILE(F, S, V, O)                                                                                              \
    do {                                                                                                             \
        dt_gpu_func_smem((const void *)k_tile<F, S, V, O, T>, smem);                                                 \
        k_tile<F, S, V, O, T><<<blocks, THREADS, smem, dt_stream()>>>(c, t, wpack, boff, (const T *)xT, om, (T *)colT); \
    } while (0)
#define TILE_V(F, S, O)                                  \
    do {                                                 \
        if (vec4(p) && p->prob.C % 4 == 0) TILE(F, S, 4, O);  \
        else TILE(F, S, 1, O);                           \
    } while (0)
#define TILE_O(F, S)                    \
    do {                                \
        if (oct == 20) TILE_V(F, S, 20); \
        else TILE_V(F, S, 28);           \
    } while (0)
        if (fuse && stage) TILE_O(true, true);
        else if (fuse) TILE_O(true, false);
        else if (stage) TILE_V(false, true, 20);
        else TILE_V(false, false, 20);
#undef TILE_O
#undef TILE_V
#undef TILE
    });
    DT_CHECK_LAUNCH();
}

size_t dt_deform_index_ws_bytes_cuda(const dt_deform_plan *p, int64_t nb) {
    int64_t S = nb * p->P * p->K * p->G, nkeys = dt_deform_index_keys(p, nb);
    return align256((size_t)S * 16) + 4 * align256((size_t)S * 4) + align256((size_t)(nkeys + 1) * 4) +
           sort_tmp_bytes(S, nkeys) + 256;
}

void dt_deform_index_build_cuda(const dt_deform_plan *p, int64_t nb, const float *om, void *ws, dt_deform_index *idx) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    int64_t S = c.S, nkeys = dt_deform_index_keys(p, nb);
    index_ws w = index_layout(S, nkeys, ws);
    idx->samples = S;
    idx->keys = nkeys;
    idx->order = w.order;
    idx->start = w.start;
    idx->wm = (float *)w.wm;
    if (S > 0) {
        k_index_keys<<<dt_grid_for(S, 256), 256, 0, dt_stream()>>>(c, om, (uint32_t)nkeys, w.keys_in, w.ids_in, w.wm);
        DT_CHECK_LAUNCH();
        size_t bytes = sort_tmp_bytes(S, nkeys);
        DT_CHECK(cub::DeviceRadixSort::SortPairs(w.sort_tmp, bytes, w.keys_in, w.keys_out, w.ids_in, w.order, (int)S, 0,
                                                 key_bits(nkeys), dt_stream()));
    }
    k_index_starts<<<dt_grid_for(nkeys + 1, 256), 256, 0, dt_stream()>>>(S, w.keys_out, nkeys, w.start);
    DT_CHECK_LAUNCH();
}

}  // extern "C"

template <typename T, typename TO>
static void gather_dx(const dt_deform_plan *p, int64_t nb, const dt_deform_index *idx, const T *xT, const T *dcolT,
                      float beta, TO *dxT, float *D) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    int64_t rows = (int64_t)c.npix * c.G;
    if (rows <= 0) return;
    bool v4 = vec4(p);
    /* a lane a vector here (the row kernels' 4 a lane was measured 2x slower for the gather) */
    int64_t nv = v4 ? p->Cg / 4 : p->Cg;
    int L = dt_lanes_for(nv, 4);
#define GATHER(V, VPL)                                                                                           \
    DISPATCH_L(L, k_gather<V, L_, VPL, T, TO><<<blocks_for_rows(rows, L_), THREADS, 0, dt_stream()>>>(          \
                      c, idx->order, idx->start, idx->wm, xT, dcolT, beta, dxT, D))
    if constexpr (sizeof(T) == 2) {
        /* bf16 rows with Cg % 8 == 0: a 16-byte vector of 8 channels a lane - half the lanes a
         * hit of 8-byte vectors: fewer instructions and shuffles a hit, more pixels a warp */
        if (p->Cg % 8 == 0) {
            nv = p->Cg / 8, L = dt_lanes_for(nv, 4);
            if (nv <= L) { GATHER(8, 1); }
            else { GATHER(8, 4); }
            DT_CHECK_LAUNCH();
            return;
        }
    }
    if (v4) {
        if (nv <= L) { GATHER(4, 1); }
        else { GATHER(4, 4); }
    } else {
        if (nv <= L) { GATHER(1, 1); }
        else { GATHER(1, 4); }
    }
#undef GATHER
    DT_CHECK_LAUNCH();
}

extern "C" {

void dt_deform_gather_dx_cuda(const dt_deform_plan *p, int64_t nb, const dt_deform_index *idx, const void *xT,
                              const void *dcolT, float beta, void *dx, dt_dtype dx_dtype, float *D) {
    if (dx_dtype != p->dtype && dx_dtype != DT_F32)
        dt_fatal("deform gather: dx in %s for a %s plan (its dtype, or f32)", dt_dtype_name(dx_dtype), dt_dtype_name(p->dtype));
    dt_dispatch_plan_dtype(p->dtype, [&](auto *tag) {
        typedef DT_TAG_TYPE(tag) T;
        if (dx_dtype == DT_F32) gather_dx(p, nb, idx, (const T *)xT, (const T *)dcolT, beta, (float *)dx, D);
        else gather_dx(p, nb, idx, (const T *)xT, (const T *)dcolT, beta, (T *)dx, D);
    });
}

void dt_deform_offset_grads_cuda(const dt_deform_plan *p, int64_t nb, const float *om, const float *D, int mask_logits,
                                 float *dom) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    if (c.S <= 0) return;
    k_offset_grads<<<dt_grid_for(c.S, 256), 256, 0, dt_stream()>>>(c, om, D, mask_logits, dom);
    DT_CHECK_LAUNCH();
}

void dt_deform_scatter_dx_cuda(const dt_deform_plan *p, int64_t nb, const void *xT, const float *om, const void *dcolT,
                               int mask_logits, float *dxT, float *dom) {
    dt_deform_chunk c = dt_deform_chunk_make(p, nb);
    if (c.S <= 0) return;
    bool v4 = vec4(p);
    int L = dt_lanes_for(v4 ? p->Cg / 4 : p->Cg, 4); /* a lane a vector: measured faster here */
    dt_dispatch_plan_dtype(p->dtype, [&](auto *tag) {
        typedef DT_TAG_TYPE(tag) T;
#define SCATTER(V)                                                                                                  \
    k_scatter<V, L_, T><<<blocks_for_rows(c.S, L_), THREADS, 0, dt_stream()>>>(c, (const T *)xT, om, (const T *)dcolT, \
                                                                               mask_logits, dxT, dom)
        if (v4) { DISPATCH_L(L, SCATTER(4)); }
        else { DISPATCH_L(L, SCATTER(1)); }
#undef SCATTER
    });
    DT_CHECK_LAUNCH();
}
}
