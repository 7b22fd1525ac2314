/* CUDA versions of om_pack.h.
 * A block moves a tile of 64 positions x 32 columns of om (grid: position tiles in x, column
 * tiles in y, images grid-strided in z) through shared memory [64][33] (the padding column
 * keeps both access orders free of bank conflicts). om's side is read or written a row segment
 * of 32 columns per warp; a field's side in its own order: along positions for NCHW (the
 * tile's columns of that field visited column by column), along channels for NHWC (row by
 * row), so that every global access is a full line whatever the mix of formats. */
#include "core/dt_dtype.cuh"
#include "core/dt_kernel_util.cuh"
#include "ops/deform/om_pack.h"

namespace {

const int TP = 64, TC = 32, THREADS = 256;

/* The field a column of om belongs to: 0 offsets [0, 2GK), 1 mask [2GK, 3GK) (with one), -1
 * neither (padding, or mask columns when there is none / it is not wanted). */
__device__ __forceinline__ int field_of(int col, int GK, bool has_mask) {
    return col < 2 * GK ? 0 : (has_mask && col < 3 * GK) ? 1 : -1;
}

/* Element (i, j, p) of a field: ld is its pitch (om_pack.h), made explicit by the host (ld_of). */
__device__ __forceinline__ int64_t at(int nhwc, int64_t ld, int P, int64_t i, int j, int64_t p) {
    return nhwc ? (i * P + p) * ld + j : i * ld + (int64_t)j * P + p;
}

/* Calls f(r, c) for every entry of the tile (np <= TP positions, nc <= TC columns), in the order
 * a layout reads best: nchw - c major, consecutive lanes along r (positions); else r major,
 * consecutive lanes along c (channels). f skips the entries that are not its pass's. */
template <typename F>
__device__ __forceinline__ void visit(bool nchw, int np, int nc, F f) {
    for (int e = threadIdx.x; e < TP * TC; e += THREADS) {
        int r = nchw ? e % TP : e / TC, c = nchw ? e / TP : e % TC;
        if (r < np && c < nc) f(r, c);
    }
}

template <typename To, typename Tm>
__global__ void __launch_bounds__(THREADS) k_om_pack(int64_t nb, int P, int GK, int OCS, const To *__restrict__ off,
                                                     int off_nhwc, int64_t off_ld, const Tm *__restrict__ mask,
                                                     int mask_nhwc, int64_t mask_ld, float *__restrict__ om) {
    __shared__ float t[TP][TC + 1];
    const int p0 = blockIdx.x * TP, c0 = blockIdx.y * TC;
    const int np = min(TP, P - p0), nc = min(TC, OCS - c0);
    for (int64_t i = blockIdx.z; i < nb; i += gridDim.z) {
        /* the field's side: each field in its own order (two passes: NCHW columns, the rest) */
        for (int pass = 0; pass < 2; pass++) {
            const bool nchw = pass == 0;
            visit(nchw, np, nc, [&](int r, int c) {
                int col = c0 + c, fld = field_of(col, GK, mask != nullptr);
                bool field_nchw = fld == 0 ? !off_nhwc : fld == 1 ? !mask_nhwc : false; /* padding: pass 1 */
                if (field_nchw != nchw) return;
                const int64_t p = p0 + r;
                float v = 0.0f;
                if (fld == 0) v = dt_ld(&off[at(off_nhwc, off_ld, P, i, col, p)]);
                else if (fld == 1) v = dt_ld(&mask[at(mask_nhwc, mask_ld, P, i, col - 2 * GK, p)]);
                t[r][c] = v;
            });
        }
        __syncthreads();
        float *dst = om + (i * P + p0) * OCS + c0; /* om's side: row segments */
        visit(false, np, nc, [&](int r, int c) { dst[(int64_t)r * OCS + c] = t[r][c]; });
        __syncthreads();
    }
}

template <typename To, typename Tm>
__global__ void __launch_bounds__(THREADS) k_om_unpack(int64_t nb, int P, int GK, int OCS, const float *__restrict__ dom,
                                                       To *__restrict__ doff, int off_nhwc, int64_t off_ld, float boff,
                                                       Tm *__restrict__ dmask, int mask_nhwc, int64_t mask_ld,
                                                       float bmask) {
    __shared__ float t[TP][TC + 1];
    const int p0 = blockIdx.x * TP, c0 = blockIdx.y * TC;
    const int np = min(TP, P - p0), nc = min(TC, OCS - c0);
    for (int64_t i = blockIdx.z; i < nb; i += gridDim.z) {
        const float *src = dom + (i * P + p0) * OCS + c0;
        visit(false, np, nc, [&](int r, int c) { t[r][c] = __ldg(src + (int64_t)r * OCS + c); });
        __syncthreads();
        for (int pass = 0; pass < 2; pass++) {
            const bool nchw = pass == 0;
            visit(nchw, np, nc, [&](int r, int c) {
                int col = c0 + c, fld = field_of(col, GK, dmask != nullptr);
                if (fld < 0 || (fld == 0 && !doff)) return;
                if ((fld == 0 ? !off_nhwc : !mask_nhwc) != nchw) return;
                const int64_t p = p0 + r;
                if (fld == 0) dt_st_beta(&doff[at(off_nhwc, off_ld, P, i, col, p)], t[r][c], boff);
                else dt_st_beta(&dmask[at(mask_nhwc, mask_ld, P, i, col - 2 * GK, p)], t[r][c], bmask);
            });
        }
        __syncthreads();
    }
}

/* f with a null pointer of a field dtype's CUDA type (f32 or bf16 only: four instantiations a
 * kernel rather than dt_dispatch_dtype's twenty-five). */
template <typename F>
void dispatch_field(dt_deform_field_fmt f, int64_t Cf, int64_t P, F fn) {
    const char *bad = dt_deform_field_fmt_refusal(f, Cf, P);
    if (bad) dt_fatal("deform om pack: %s (dtype %d, layout %d, pitch %lld)", bad, (int)f.dtype, (int)f.layout,
                      (long long)f.pitch);
    if (f.dtype == DT_F32) fn((float *)0);
    else fn((__nv_bfloat16 *)0);
}

/* A field's pitch, explicit: a dense one's is Cf (NHWC) or Cf*P (NCHW). */
int64_t ld_of(dt_deform_field_fmt f, int64_t Cf, int64_t P) { return f.pitch ? f.pitch : f.layout == DT_NHWC ? Cf : Cf * P; }

dim3 grid_of(int64_t nb, int64_t P, int64_t GK, int64_t OCS) {
    if (P > INT32_MAX || OCS > INT32_MAX || 3 * GK > INT32_MAX)
        dt_fatal("deform om pack: %lld positions x %lld columns exceed 2^31", (long long)P, (long long)OCS);
    int64_t gy = dt_ceil_div(OCS, TC);
    dt_check_grid_yz("deform om pack", gy, 1);
    return dim3((unsigned)dt_ceil_div(P, TP), (unsigned)gy, (unsigned)(nb < 65535 ? nb : 65535));
}

}  // namespace

extern "C" {

void dt_deform_om_pack_cuda(int64_t nb, int64_t P, int64_t GK, int64_t OCS, const void *offset, dt_deform_field_fmt of,
                            const void *mask, dt_deform_field_fmt mf, float *om) {
    if (nb * P * OCS <= 0) return;
    dim3 grid = grid_of(nb, P, GK, OCS);
    if (!mask) mf = (dt_deform_field_fmt){of.dtype, DT_NCHW, 0}; /* no mask: one instantiation per offset dtype */
    dispatch_field(of, 2 * GK, P, [&](auto *ot) {
        using To = typename std::remove_pointer<decltype(ot)>::type;
        dispatch_field(mf, GK, P, [&](auto *mt) {
            using Tm = typename std::remove_pointer<decltype(mt)>::type;
            k_om_pack<To, Tm><<<grid, THREADS, 0, dt_stream()>>>(nb, (int)P, (int)GK, (int)OCS, (const To *)offset,
                                                                 of.layout == DT_NHWC, ld_of(of, 2 * GK, P),
                                                                 (const Tm *)mask, mf.layout == DT_NHWC,
                                                                 ld_of(mf, GK, P), om);
            DT_CHECK_LAUNCH();
        });
    });
}

void dt_deform_om_unpack_cuda(int64_t nb, int64_t P, int64_t GK, int64_t OCS, const float *dom, void *doffset,
                              dt_deform_field_fmt of, float boff, void *dmask, dt_deform_field_fmt mf, float bmask) {
    if (nb * P * OCS <= 0 || (!doffset && !dmask)) return;
    dim3 grid = grid_of(nb, P, GK, OCS);
    /* a field not wanted takes the other's dtype (fewer instantiations), dense */
    if (!doffset) of = (dt_deform_field_fmt){mf.dtype, DT_NCHW, 0};
    if (!dmask) mf = (dt_deform_field_fmt){of.dtype, DT_NCHW, 0};
    dispatch_field(of, 2 * GK, P, [&](auto *ot) {
        using To = typename std::remove_pointer<decltype(ot)>::type;
        dispatch_field(mf, GK, P, [&](auto *mt) {
            using Tm = typename std::remove_pointer<decltype(mt)>::type;
            k_om_unpack<To, Tm><<<grid, THREADS, 0, dt_stream()>>>(nb, (int)P, (int)GK, (int)OCS, dom, (To *)doffset,
                                                                   of.layout == DT_NHWC, ld_of(of, 2 * GK, P), boff,
                                                                   (Tm *)dmask, mf.layout == DT_NHWC, ld_of(mf, GK, P),
                                                                   bmask);
            DT_CHECK_LAUNCH();
        });
    });
}
}
