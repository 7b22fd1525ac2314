/* DefT-fused deformable kernels (see deft.h for the contract).
 *
 * Block = a tile of th x tw output positions (TP = th*tw) of one image, 256 threads.
 * Footprint = the input rows/cols the tile's taps can touch with |offset| <= halo:
 *   rows [fy0, fy0 + FH), fy0 = oy0*sh - ph - halo, FH = (th-1)*sh + (kh-1)*dh + 2*halo + 2
 * (the +2: a bilinear sample reads row floor(y) and floor(y)+1), likewise columns.
 * Shared memory holds a chunk of CC channels of the footprint (zero outside the image).
 *
 * Forward, phase 1 (fused offset conv): thread = (position, channel slice); it accumulates
 * up to 27 offset channels over its slice of the channels in registers (weights broadcast
 * from shared memory as float4); the slices are summed in a fixed order, the bias added,
 * the mask channels put through the sigmoid. Phase 2 (sampling): thread = up to 4 samples
 * (tap, position); their corner weights are computed once and reused for every channel; a
 * sample whose 2x2 corners lie in the footprint reads shared memory, any other reads global.
 * Backward: the same tiling (8x8 tiles by default, channels split across blocks when tiles
 * are few); per channel it reads dcol once, accumulates the offset / mask gradients of its
 * samples in registers, and adds the input gradient to dx with global atomics (a shared-memory
 * accumulator flushed per footprint cell was measured slower: docs/deft.md). */
#include "deft.h"
#include "deform_bilinear.h"
#include "dt_fixed_point.cuh"
#include "dt_kernel_util.cuh"

#define DEFT_THREADS 256
#define DEFT_SPT 4   /* samples per thread at most: K * TP <= 1024 */
#define OCB 28       /* offset channels per pass (27) padded to float4 */
#define OCP 27
#define WCH 16       /* channels of offset weights staged at a time */

namespace {

struct dims {
    int nb, C, H, W, Ho, Wo, P, NP, K, G, Cg, GK, OC, mask;
    int kh, kw, sh, sw, ph, pw, dh, dw;
    int th, tw, tp, tiles_x, tiles_y, tiles, halo, FH, FW, FHW, CC, swizzle;
    int splits_per_group, cs; /* backward: channel splits per group, channels per split */
};

/* Block -> (image, tile row, tile col). With swizzle, tiles of one image are visited in
 * column-major order inside bands of 4 tile rows, so consecutive blocks are 2-D
 * neighbours (their footprints overlap in both directions). */
__device__ __forceinline__ void tile_of(const dims &d, int b, int *i, int *ty, int *tx) {
    *i = b / d.tiles;
    int t = b - *i * d.tiles;
    if (!d.swizzle) {
        *ty = t / d.tiles_x;
        *tx = t - *ty * d.tiles_x;
        return;
    }
    const int band = 4;
    int per_band = band * d.tiles_x, bi = t / per_band, r = t - bi * per_band;
    int rows = min(band, d.tiles_y - bi * band);
    *tx = r / rows;
    *ty = bi * band + (r - *tx * rows);
}

/* Stages channels [c0, c0+cn) of the footprint of image plane base xi into xs. */
__device__ __forceinline__ void stage(const dims &d, float *xs, const float *__restrict__ xi, int c0, int cn, int fy0,
                                      int fx0) {
    const int HW = d.H * d.W;
    for (int idx = threadIdx.x; idx < cn * d.FHW; idx += DEFT_THREADS) {
        int cc = idx / d.FHW, r = idx - cc * d.FHW, fy = r / d.FW, fx = r - fy * d.FW;
        int iy = fy0 + fy, ix = fx0 + fx;
        xs[idx] = (iy >= 0 && iy < d.H && ix >= 0 && ix < d.W) ? __ldg(xi + (int64_t)(c0 + cc) * HW + iy * d.W + ix) : 0.0f;
    }
}

/* Per-sample state kept in registers across the channel loop. */
struct sample {
    int valid, insm, inside;
    int ok;         /* bit q: corner q inside the image */
    int base;       /* footprint index (insm) or plane index (global) of the top-left corner */
    float ly, lx, m;
    int64_t col;    /* column offset: k*NP + q */
    int k, p;       /* tap, tile position */
};

__device__ __forceinline__ sample make_sample(const dims &d, int s, int i, int oy0, int ox0, int fy0, int fx0, float dy,
                                              float dx, float m, bool staged) {
    sample r;
    r.k = s / d.tp;
    r.p = s - r.k * d.tp;
    int oy = oy0 + r.p / d.tw, ox = ox0 + r.p % d.tw;
    r.valid = oy < d.Ho && ox < d.Wo;
    int ky = r.k / d.kw, kx = r.k - ky * d.kw;
    float y = (float)(oy * d.sh - d.ph + ky * d.dh) + dy, x = (float)(ox * d.sw - d.pw + kx * d.dw) + dx;
    dt_bilin b = dt_bilin_make(y, x, d.H, d.W);
    r.inside = b.inside;
    r.ly = b.ly;
    r.lx = b.lx;
    r.m = m;
    r.ok = b.ok[0] | (b.ok[1] << 1) | (b.ok[2] << 2) | (b.ok[3] << 3);
    int ly = b.yl - fy0, lx = b.xl - fx0;
    r.insm = staged && b.inside && ly >= 0 && ly + 1 < d.FH && lx >= 0 && lx + 1 < d.FW;
    r.base = r.insm ? ly * d.FW + lx : b.yl * d.W + b.xl;
    r.col = (int64_t)r.k * d.NP + (int64_t)i * d.P + oy * d.Wo + ox;
    return r;
}

__device__ __forceinline__ void corners(const dims &d, const sample &s, const float *xs_plane, const float *__restrict__ plane,
                                        float v[4]) {
    if (s.insm) {
        v[0] = xs_plane[s.base];
        v[1] = xs_plane[s.base + 1];
        v[2] = xs_plane[s.base + d.FW];
        v[3] = xs_plane[s.base + d.FW + 1];
    } else {
        v[0] = (s.ok & 1) ? __ldg(plane + s.base) : 0.0f;
        v[1] = (s.ok & 2) ? __ldg(plane + s.base + 1) : 0.0f;
        v[2] = (s.ok & 4) ? __ldg(plane + s.base + d.W) : 0.0f;
        v[3] = (s.ok & 8) ? __ldg(plane + s.base + d.W + 1) : 0.0f;
    }
}

/* ------------------------------------------------------------------ forward */

template <bool FUSE, bool STAGE>
__global__ void __launch_bounds__(DEFT_THREADS) k_fwd(dims d, const float *__restrict__ x, const float *__restrict__ woff,
                                                      const float *__restrict__ boff, float *__restrict__ offset,
                                                      float *__restrict__ mask, float *__restrict__ col) {
    extern __shared__ __align__(16) float smem[];
    float *xs = smem;                                          /* [CC][FHW] */
    float *offs = xs + (STAGE ? (d.CC * d.FHW + 3) & ~3 : 0);  /* [OC][TP], 16-byte aligned */
    float *scratch = offs + ((d.OC * d.tp + 3) & ~3);          /* FUSE: weights / reduction */
    const int tid = threadIdx.x;
    int i, ty, tx;
    tile_of(d, blockIdx.x, &i, &ty, &tx);
    const int oy0 = ty * d.th, ox0 = tx * d.tw;
    const int fy0 = oy0 * d.sh - d.ph - d.halo, fx0 = ox0 * d.sw - d.pw - d.halo;
    const int HW = d.H * d.W;
    const float *xi = x + (int64_t)i * d.C * HW;
    int staged_c0 = -1;

    if (FUSE) {
        const int CS = DEFT_THREADS / d.tp, pos = tid % d.tp, slice = tid / d.tp;
        const int py = pos / d.tw, px = pos - py * d.tw;
        for (int o0 = 0; o0 < d.OC; o0 += OCP) {
            const int on = min(OCP, d.OC - o0);
            float acc[OCB];
#pragma unroll
            for (int j = 0; j < OCB; j++) acc[j] = 0.0f;
            for (int c0 = 0; c0 < d.C; c0 += d.CC) {
                const int cn = min(d.CC, d.C - c0);
                if (STAGE && staged_c0 != c0) {
                    __syncthreads();
                    stage(d, xs, xi, c0, cn, fy0, fx0);
                    staged_c0 = c0;
                }
                for (int w0 = 0; w0 < cn; w0 += WCH) {
                    const int wn = min(WCH, cn - w0);
                    __syncthreads();
                    for (int idx = tid; idx < wn * d.K * OCB; idx += DEFT_THREADS) {
                        int r = idx / OCB, o = idx - r * OCB, cc = r / d.K, k = r - cc * d.K;
                        scratch[idx] = o < on ? __ldg(woff + ((int64_t)(o0 + o) * d.C + c0 + w0 + cc) * d.K + k) : 0.0f;
                    }
                    __syncthreads();
                    for (int cc = slice; cc < wn; cc += CS) {
                        const float *plane = STAGE ? xs + (w0 + cc) * d.FHW : xi + (int64_t)(c0 + w0 + cc) * HW;
                        for (int k = 0; k < d.K; k++) {
                            int ky = k / d.kw, kx = k - ky * d.kw;
                            float xv;
                            if (STAGE) {
                                xv = plane[(py * d.sh + ky * d.dh + d.halo) * d.FW + px * d.sw + kx * d.dw + d.halo];
                            } else {
                                int iy = fy0 + py * d.sh + ky * d.dh + d.halo, ix = fx0 + px * d.sw + kx * d.dw + d.halo;
                                xv = (iy >= 0 && iy < d.H && ix >= 0 && ix < d.W) ? __ldg(plane + iy * d.W + ix) : 0.0f;
                            }
                            const float4 *w4 = reinterpret_cast<const float4 *>(scratch + (cc * d.K + k) * OCB);
#pragma unroll
                            for (int j = 0; j < OCB / 4; j++) {
                                float4 w = w4[j];
                                acc[4 * j] += xv * w.x;
                                acc[4 * j + 1] += xv * w.y;
                                acc[4 * j + 2] += xv * w.z;
                                acc[4 * j + 3] += xv * w.w;
                            }
                        }
                    }
                }
            }
            /* Sum the channel slices in a fixed order, 7 offset channels per round so that the
             * exchange buffer stays small (CS * 7 * TP floats). */
#pragma unroll
            for (int r = 0; r < OCB / 7; r++) {
                __syncthreads();
#pragma unroll
                for (int j = 0; j < 7; j++) scratch[(slice * 7 + j) * d.tp + pos] = acc[7 * r + j];
                __syncthreads();
                for (int idx = tid; idx < 7 * d.tp; idx += DEFT_THREADS) {
                    int o = 7 * r + idx / d.tp, p = idx % d.tp, oc = o0 + o;
                    if (o >= on) continue;
                    float sum = __ldg(boff + oc);
                    for (int sl = 0; sl < CS; sl++) sum += scratch[(sl * 7 + idx / d.tp) * d.tp + p];
                    if (oc >= 2 * d.GK) sum = 1.0f / (1.0f + __expf(-sum));
                    offs[oc * d.tp + p] = sum;
                    int oy = oy0 + p / d.tw, ox = ox0 + p % d.tw;
                    if (oy < d.Ho && ox < d.Wo) {
                        int64_t pi = (int64_t)oy * d.Wo + ox;
                        if (oc < 2 * d.GK) offset[((int64_t)i * 2 * d.GK + oc) * d.P + pi] = sum;
                        else mask[((int64_t)i * d.GK + oc - 2 * d.GK) * d.P + pi] = sum;
                    }
                }
            }
            __syncthreads();
        }
    } else {
        for (int idx = tid; idx < d.OC * d.tp; idx += DEFT_THREADS) {
            int oc = idx / d.tp, p = idx - oc * d.tp;
            int oy = oy0 + p / d.tw, ox = ox0 + p % d.tw;
            float v = 0.0f;
            if (oy < d.Ho && ox < d.Wo) {
                int64_t pi = (int64_t)oy * d.Wo + ox;
                v = oc < 2 * d.GK ? __ldg(offset + ((int64_t)i * 2 * d.GK + oc) * d.P + pi)
                                  : __ldg(mask + ((int64_t)i * d.GK + oc - 2 * d.GK) * d.P + pi);
            }
            offs[idx] = v;
        }
        __syncthreads();
    }

    /* Phase 2: sampling, one offset group at a time. */
    const int nsamp = d.K * d.tp;
    for (int g = 0; g < d.G; g++) {
        sample sm[DEFT_SPT];
        float w[DEFT_SPT][4];
#pragma unroll
        for (int j = 0; j < DEFT_SPT; j++) {
            int s = tid + j * DEFT_THREADS;
            sm[j].valid = 0;
            if (s >= nsamp) continue;
            int k = s / d.tp, p = s - k * d.tp;
            float dy = offs[((g * d.K + k) * 2) * d.tp + p], dx = offs[((g * d.K + k) * 2 + 1) * d.tp + p];
            float m = d.mask ? offs[(2 * d.GK + g * d.K + k) * d.tp + p] : 1.0f;
            sm[j] = make_sample(d, s, i, oy0, ox0, fy0, fx0, dy, dx, m, STAGE);
            float hy = 1.0f - sm[j].ly, hx = 1.0f - sm[j].lx, mm = sm[j].inside ? m : 0.0f;
            w[j][0] = hy * hx * mm;
            w[j][1] = hy * sm[j].lx * mm;
            w[j][2] = sm[j].ly * hx * mm;
            w[j][3] = sm[j].ly * sm[j].lx * mm;
        }
        for (int c0 = g * d.Cg; c0 < (g + 1) * d.Cg; c0 += d.CC) {
            const int cn = min(d.CC, (g + 1) * d.Cg - c0);
            if (STAGE && staged_c0 != c0) {
                __syncthreads();
                stage(d, xs, xi, c0, cn, fy0, fx0);
                staged_c0 = c0;
                __syncthreads();
            }
            for (int cc = 0; cc < cn; cc++) {
                const int c = c0 + cc;
                const float *xsp = xs + cc * d.FHW, *plane = xi + (int64_t)c * HW;
                float *colc = col + (int64_t)c * d.K * d.NP;
#pragma unroll
                for (int j = 0; j < DEFT_SPT; j++) {
                    if (!sm[j].valid) continue;
                    float v[4];
                    corners(d, sm[j], xsp, plane, v);
                    colc[sm[j].col] = w[j][0] * v[0] + w[j][1] * v[1] + w[j][2] * v[2] + w[j][3] * v[3];
                }
            }
        }
    }
}

/* ------------------------------------------------------------------ backward */

template <bool STAGE, bool DET>
__global__ void __launch_bounds__(DEFT_THREADS) k_bwd(dims d, const float *__restrict__ dcol, const float *__restrict__ x,
                                                      const float *__restrict__ offset, const float *__restrict__ mask,
                                                      float *__restrict__ dx, unsigned long long *__restrict__ acc,
                                                      const double *__restrict__ scale, float *__restrict__ part) {
    extern __shared__ __align__(16) float smem[];
    float *xs = smem; /* [CC][FHW]: the input footprint, for the corner values */
    const int tid = threadIdx.x;
    int i, ty, tx;
    tile_of(d, blockIdx.x, &i, &ty, &tx);
    const int split = blockIdx.y, g = split / d.splits_per_group, sg = split - g * d.splits_per_group;
    const int cbeg = g * d.Cg + sg * d.cs, cend = cbeg + d.cs;
    const int oy0 = ty * d.th, ox0 = tx * d.tw;
    const int fy0 = oy0 * d.sh - d.ph - d.halo, fx0 = ox0 * d.sw - d.pw - d.halo;
    const int HW = d.H * d.W;
    const float *xi = x + (int64_t)i * d.C * HW;
    unsigned long long *acci = DET && dx ? acc + (int64_t)i * d.C * HW : nullptr;
    const double S = DET ? *scale : 0.0;

    const int nsamp = d.K * d.tp;
    sample sm[DEFT_SPT];
    float gy[DEFT_SPT], gx[DEFT_SPT], gm[DEFT_SPT];
    int gbase[DEFT_SPT]; /* plane index of the top-left corner, for the scatter */
#pragma unroll
    for (int j = 0; j < DEFT_SPT; j++) {
        gy[j] = gx[j] = gm[j] = 0.0f;
        int s = tid + j * DEFT_THREADS;
        sm[j].valid = 0;
        gbase[j] = 0;
        if (s >= nsamp) continue;
        int k = s / d.tp, p = s - k * d.tp;
        int oy = oy0 + p / d.tw, ox = ox0 + p % d.tw;
        float dy = 0.0f, dxo = 0.0f, m = 1.0f;
        if (oy < d.Ho && ox < d.Wo) {
            int64_t pi = (int64_t)oy * d.Wo + ox, ob = ((int64_t)i * 2 * d.GK + (g * d.K + k) * 2) * d.P + pi;
            dy = __ldg(offset + ob);
            dxo = __ldg(offset + ob + d.P);
            if (d.mask) m = __ldg(mask + ((int64_t)i * d.GK + g * d.K + k) * d.P + pi);
        }
        sm[j] = make_sample(d, s, i, oy0, ox0, fy0, fx0, dy, dxo, m, STAGE);
        int ky = k / d.kw, kx = k - ky * d.kw;
        float yy = (float)(oy * d.sh - d.ph + ky * d.dh) + dy, xx = (float)(ox * d.sw - d.pw + kx * d.dw) + dxo;
        dt_bilin b = dt_bilin_make(yy, xx, d.H, d.W);
        gbase[j] = b.yl * d.W + b.xl;
    }

    /* The input gradient goes straight to global memory with atomics (red.global): measured
     * faster on H200 than accumulating the footprint in shared memory and flushing it, which
     * costs shared-memory capacity (occupancy), bank-conflicted atomics and a second pass. */
    for (int c0 = cbeg; c0 < cend; c0 += d.CC) {
        const int cn = min(d.CC, cend - c0);
        if (STAGE) {
            __syncthreads();
            stage(d, xs, xi, c0, cn, fy0, fx0);
            __syncthreads();
        }
        for (int cc = 0; cc < cn; cc++) {
            const int c = c0 + cc;
            const float *xsp = xs + cc * d.FHW, *plane = xi + (int64_t)c * HW;
            const float *dc = dcol + (int64_t)c * d.K * d.NP;
#pragma unroll
            for (int j = 0; j < DEFT_SPT; j++) {
                const sample &s = sm[j];
                if (!s.valid || !s.inside) continue;
                float g0 = __ldg(dc + s.col);
                float v[4];
                corners(d, s, xsp, plane, v);
                float hy = 1.0f - s.ly, hx = 1.0f - s.lx;
                gy[j] += g0 * (hx * (v[2] - v[0]) + s.lx * (v[3] - v[1]));
                gx[j] += g0 * (hy * (v[1] - v[0]) + s.ly * (v[3] - v[2]));
                gm[j] += g0 * (hy * hx * v[0] + hy * s.lx * v[1] + s.ly * hx * v[2] + s.ly * s.lx * v[3]);
                if (!dx) continue;
                float gd = g0 * s.m, cw[4] = {hy * hx * gd, hy * s.lx * gd, s.ly * hx * gd, s.ly * s.lx * gd};
                int o4[4] = {gbase[j], gbase[j] + 1, gbase[j] + d.W, gbase[j] + d.W + 1};
                float *dxc = dx + ((int64_t)i * d.C + c) * HW;
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    if (!((s.ok >> q) & 1) || cw[q] == 0.0f) continue; /* weight-0 corners: nothing to add */
                    if (DET) atomicAdd(acci + (int64_t)c * HW + o4[q], fp_encode(cw[q], S));
                    else atomicAdd(dxc + o4[q], cw[q]);
                }
            }
        }
    }

    /* Partial offset / mask gradients of this channel split: part [splits_per_group][nb][OC][P]. */
#pragma unroll
    for (int j = 0; j < DEFT_SPT; j++) {
        const sample &s = sm[j];
        if (!s.valid) continue;
        int oy = oy0 + s.p / d.tw, ox = ox0 + s.p % d.tw;
        int64_t pi = (int64_t)oy * d.Wo + ox;
        float *pb = part + ((int64_t)sg * d.nb + i) * d.OC * d.P + pi;
        int oc = (g * d.K + s.k) * 2;
        pb[(int64_t)oc * d.P] = s.m * gy[j];
        pb[(int64_t)(oc + 1) * d.P] = s.m * gx[j];
        if (d.mask) pb[(int64_t)(2 * d.GK + g * d.K + s.k) * d.P] = gm[j];
    }
}

/* Sums the splits' partials in a fixed order and writes offset / mask gradients where the
 * caller wants them (dt_deft_grad_out). */
__global__ void k_dom_reduce(dims d, const float *__restrict__ part, const float *__restrict__ mask, dt_deft_grad_out out) {
    const int64_t n = (int64_t)d.nb * d.OC * d.P;
    DT_GRID_STRIDE(t, n) {
        int64_t p = t % d.P, oc = (t / d.P) % d.OC, i = t / ((int64_t)d.OC * d.P);
        float s = 0.0f;
        for (int sg = 0; sg < d.splits_per_group; sg++) s += part[sg * n + t];
        if (oc < 2 * d.GK) {
            if (out.doff) dt_store_beta(&out.doff[i * out.off_stride + oc * d.P + p], s, out.beta_off);
        } else if (out.dmask) {
            int64_t mo = (i * d.GK + oc - 2 * d.GK) * d.P + p;
            if (out.mask_logits) {
                float m = mask[mo];
                s *= m * (1.0f - m);
            }
            dt_store_beta(&out.dmask[i * out.mask_stride + (oc - 2 * d.GK) * d.P + p], s, out.beta_mask);
        }
    }
}

__global__ void k_split_om(dims d, const float *__restrict__ om, float *__restrict__ offset, float *__restrict__ mask) {
    const int64_t n = (int64_t)d.nb * d.OC * d.P;
    DT_GRID_STRIDE(t, n) {
        int64_t p = t % d.P, oc = (t / d.P) % d.OC, i = t / ((int64_t)d.OC * d.P);
        float v = om[t];
        if (oc < 2 * d.GK) offset[(i * 2 * d.GK + oc) * d.P + p] = v;
        else mask[(i * d.GK + oc - 2 * d.GK) * d.P + p] = 1.0f / (1.0f + expf(-v));
    }
}

/* ------------------------------------------------------------------ host side */

/* Shared memory per block, chosen for occupancy: at most ~48 KB lets 4 blocks (32 warps)
 * share an SM, enough warps in flight to hide the gathers' latency (measured: ~100 KB
 * blocks, 2 per SM, ran the fused kernels slower than the unfused ones). */
const int SMEM_BUDGET = 48 * 1024;

/* tile 0x0 = automatic: the largest of 8x8, 4x8, 4x4 that still gives >= 2 blocks per SM
 * (small feature maps, like ResNet's 7x7, otherwise leave most of the GPU idle). */
void pick_tile(const dt_deft_cfg *c, int *th, int *tw) {
    *th = c->tile_h;
    *tw = c->tile_w;
    if (*th > 0 && *tw > 0) return;
    static const int cand[3][2] = {{8, 8}, {4, 8}, {4, 4}};
    int want = 2 * dt_gpu_sm_count();
    for (int t = 0; t < 3; t++) {
        *th = cand[t][0];
        *tw = cand[t][1];
        long blocks = (long)c->nb * ((c->Ho + *th - 1) / *th) * ((c->Wo + *tw - 1) / *tw);
        if (blocks >= want) return;
    }
}

dims make_dims(const dt_deft_cfg *c, int bwd) {
    dims d;
    d.nb = c->nb; d.C = c->C; d.H = c->H; d.W = c->W; d.Ho = c->Ho; d.Wo = c->Wo;
    d.P = c->Ho * c->Wo; d.NP = c->nb * d.P; d.K = c->g.kh * c->g.kw; d.G = c->G; d.Cg = c->C / c->G;
    d.GK = c->G * d.K; d.mask = c->has_mask; d.OC = (c->has_mask ? 3 : 2) * d.GK;
    d.kh = c->g.kh; d.kw = c->g.kw; d.sh = c->g.sh; d.sw = c->g.sw; d.ph = c->g.ph; d.pw = c->g.pw;
    d.dh = c->g.dh; d.dw = c->g.dw;
    pick_tile(c, &d.th, &d.tw);
    /* The backward splits channels across blocks when tiles are few, so its automatic tile
     * stays 8x8: 576 samples keep 256 threads busy, where a 4x4 tile (144) idles 44 % of them
     * (measured 2-3x slower than the unfused kernels on ResNet's 7x7 and 14x14 layers). */
    if (bwd && c->tile_h == 0 && c->tile_w == 0 && c->g.kh * c->g.kw * 64 <= DEFT_SPT * DEFT_THREADS) d.th = d.tw = 8;
    d.tp = d.th * d.tw;
    d.tiles_y = (c->Ho + d.th - 1) / d.th; d.tiles_x = (c->Wo + d.tw - 1) / d.tw; d.tiles = d.tiles_x * d.tiles_y;
    d.halo = c->halo; d.swizzle = c->swizzle;
    d.FH = (d.th - 1) * d.sh + (d.kh - 1) * d.dh + 2 * d.halo + 2;
    d.FW = (d.tw - 1) * d.sw + (d.kw - 1) * d.dw + 2 * d.halo + 2;
    d.FHW = d.FH * d.FW;
    /* channel chunk: what fits the shared-memory budget next to the other buffers */
    size_t per_c = (size_t)d.FHW * sizeof(float);
    size_t wsz = (size_t)WCH * d.K * OCB > 1792 ? (size_t)WCH * d.K * OCB : 1792; /* weights / exchange */
    size_t other = (bwd ? 16 : (size_t)(((d.OC * d.tp + 3) & ~3) + wsz + 4) * sizeof(float));
    int cc = c->stage ? (int)((SMEM_BUDGET - other) / per_c) : d.C; /* unstaged: nothing to fit */
    if (c->stage && (size_t)SMEM_BUDGET <= other + per_c) cc = 1;
    d.CC = cc < 1 ? 1 : cc;
    d.splits_per_group = 1;
    d.cs = d.Cg;
    return d;
}

size_t fwd_smem(const dims &d, bool fuse, bool stage) {
    size_t f = (stage ? ((size_t)d.CC * d.FHW + 3) & ~(size_t)3 : 0) + ((d.OC * d.tp + 3) & ~3);
    if (fuse) {
        size_t w = (size_t)WCH * d.K * OCB, r = 1792; /* exchange: CS * 7 * TP = 256 * 7 */
        f += w > r ? w : r;
    }
    return f * sizeof(float);
}

size_t bwd_smem(const dims &d, bool stage) {
    return stage ? (size_t)d.CC * d.FHW * sizeof(float) : 0;
}

/* Channel splits for the backward: enough blocks to fill the GPU when tiles are few, each
 * split a whole number of channels inside one offset group. */
void choose_splits(dims *d) {
    int blocks = d->nb * d->tiles * d->G, want = 4 * dt_gpu_sm_count();
    int sg = 1;
    for (int s = 1; s <= d->Cg && blocks * sg < want; s++)
        if (d->Cg % s == 0) sg = s;
    /* the loop above keeps the largest divisor reached while still short of `want` */
    d->splits_per_group = sg;
    d->cs = d->Cg / sg;
    if (d->CC > d->cs) d->CC = d->cs;
}

template <typename T>
void set_smem(T kernel, size_t bytes) {
    DT_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

}  // namespace

extern "C" {

const char *dt_deft_check(const dt_deft_cfg *c) {
    static char msg[256];
    int th, tw;
    pick_tile(c, &th, &tw);
    int tp = th * tw, K = c->g.kh * c->g.kw;
    if (th < 1 || tw < 1 || DEFT_THREADS % tp)
        return snprintf(msg, sizeof msg, "deft tile %dx%d: tile_h*tile_w must divide %d (e.g. 8x8, 4x8, 4x4, 16x16)",
                        th, tw, DEFT_THREADS), msg;
    if (K * tp > DEFT_SPT * DEFT_THREADS)
        return snprintf(msg, sizeof msg, "deft tile %dx%d: with a %dx%d kernel at most %d positions per tile",
                        th, tw, c->g.kh, c->g.kw, DEFT_SPT * DEFT_THREADS / K), msg;
    if (c->halo < 0 || c->halo > 32) return snprintf(msg, sizeof msg, "deft halo %d: must be 0..32", c->halo), msg;
    dims d = make_dims(c, 1);
    if ((size_t)d.FHW * sizeof(float) * 2 > (size_t)SMEM_BUDGET && c->stage)
        return snprintf(msg, sizeof msg, "deft tile %dx%d with halo %d: the staged footprint (%dx%d) does not fit shared memory",
                        th, tw, c->halo, d.FH, d.FW), msg;
    if ((int64_t)c->C * K * c->nb * c->Ho * c->Wo >= INT32_MAX / 2 || (int64_t)c->nb * c->C * c->H * c->W >= INT32_MAX)
        return "deft: chunk too large for 32-bit indexing (the caller must use smaller chunks)";
    return NULL;
}

void dt_deft_fwd_cuda(const dt_deft_cfg *c, const float *x, const float *woff, const float *boff, float *offset,
                      float *mask, float *col) {
    const char *bad = dt_deft_check(c);
    if (bad) dt_fatal("%s", bad);
    dims d = make_dims(c, 0);
    bool fuse = woff != NULL, stage = c->stage != 0;
    size_t smem = fwd_smem(d, fuse, stage);
    unsigned blocks = (unsigned)(d.nb * d.tiles);
    if (!blocks) return;
#define LAUNCH_FWD(F, S)                                                                                 \
    do {                                                                                                 \
        set_smem(k_fwd<F, S>, smem);                                                                     \
        k_fwd<F, S><<<blocks, DEFT_THREADS, smem, dt_stream()>>>(d, x, woff, boff, offset, mask, col);   \
    } while (0)
    if (fuse && stage) LAUNCH_FWD(true, true);
    else if (fuse) LAUNCH_FWD(true, false);
    else if (stage) LAUNCH_FWD(false, true);
    else LAUNCH_FWD(false, false);
#undef LAUNCH_FWD
    DT_CHECK_LAUNCH();
}

size_t dt_deft_bwd_ws_bytes(const dt_deft_cfg *c) {
    dims d = make_dims(c, 1);
    choose_splits(&d);
    size_t part = (size_t)d.splits_per_group * d.nb * d.OC * d.P * sizeof(float);
    size_t det = c->det ? fp_ws_bytes((int64_t)d.nb * d.C * d.H * d.W) : 0;
    return ((part + 255) & ~(size_t)255) + det;
}

void dt_deft_bwd_cuda(const dt_deft_cfg *c, const float *dcol, const float *x, const float *offset, const float *mask,
                      float *dx, float beta_x, const dt_deft_grad_out *out, void *ws) {
    const char *bad = dt_deft_check(c);
    if (bad) dt_fatal("%s", bad);
    dims d = make_dims(c, 1);
    choose_splits(&d);
    bool stage = c->stage != 0, det = c->det != 0;
    float *part = (float *)ws;
    size_t part_bytes = ((size_t)d.splits_per_group * d.nb * d.OC * d.P * sizeof(float) + 255) & ~(size_t)255;
    void *fws = (char *)ws + part_bytes;
    int64_t nx = (int64_t)d.nb * d.C * d.H * d.W;
    if (dx && det) {
        fp_prepare(fws, nx, dcol, (int64_t)d.C * d.K * d.NP, d.mask ? mask : NULL, (int64_t)d.nb * d.GK * d.P,
                   (double)d.K * d.P);
    } else if (dx && beta_x == 0.0f) {
        DT_CHECK(cudaMemsetAsync(dx, 0, nx * sizeof(float), dt_stream()));
    }
    fp_ws f = fp_ws_at(fws);
    size_t smem = bwd_smem(d, stage);
    dim3 grid((unsigned)(d.nb * d.tiles), (unsigned)(d.G * d.splits_per_group));
    if (grid.x && grid.y) {
#define LAUNCH_BWD(S, D)                                                                                           \
    do {                                                                                                           \
        set_smem(k_bwd<S, D>, smem);                                                                               \
        k_bwd<S, D><<<grid, DEFT_THREADS, smem, dt_stream()>>>(d, dcol, x, offset, mask, dx, det ? f.acc : nullptr, \
                                                               det ? f.scale : nullptr, part);                     \
    } while (0)
        if (stage && det) LAUNCH_BWD(true, true);
        else if (stage) LAUNCH_BWD(true, false);
        else if (det) LAUNCH_BWD(false, true);
        else LAUNCH_BWD(false, false);
#undef LAUNCH_BWD
        DT_CHECK_LAUNCH();
    }
    int64_t n = (int64_t)d.nb * d.OC * d.P;
    k_dom_reduce<<<dt_grid_for(n, 256), 256, 0, dt_stream()>>>(d, part, mask, *out);
    DT_CHECK_LAUNCH();
    if (dx && det) {
        k_fp_to_float<<<dt_grid_for(nx, 256), 256, 0, dt_stream()>>>(nx, f.acc, f.scale, beta_x, dx);
        DT_CHECK_LAUNCH();
    }
}

void dt_deft_split_om_cuda(const dt_deft_cfg *c, const float *om, float *offset, float *mask) {
    dims d = make_dims(c, 0);
    int64_t n = (int64_t)d.nb * d.OC * d.P;
    if (n <= 0) return;
    k_split_om<<<dt_grid_for(n, 256), 256, 0, dt_stream()>>>(d, om, offset, mask);
    DT_CHECK_LAUNCH();
}
}
