/* Offset statistics of a deformable layer (DefT sizes its halo from them): mean |offset|,
 * percentiles from an exact integer histogram (offset_stats.h), the share outside a halo. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/dt_alloc.h"
#include "core/dt_common.h"
#include "ops/deform/dt_deform.h"
#include "core/dt_kernel.h"
#include "ops/deform/offset_stats.h"

static float percentile(const uint64_t *hist, uint64_t total, double q, float maxv) {
    if (!total) return 0.0f;
    double target = q * (double)total, cum = 0;
    for (int b = 0; b < DT_OFFHIST_BINS; b++) {
        if (cum + hist[b] >= target && hist[b]) {
            if (b == DT_OFFHIST_BINS - 1) return maxv; /* beyond the histogram: the maximum */
            double frac = (target - cum) / hist[b];
            return (float)((b + frac) / DT_OFFHIST_PER_PX);
        }
        cum += hist[b];
    }
    return maxv;
}

typedef void offset_hist_fn(int64_t N, int64_t GK, int64_t P, const float *off, int64_t s_img, int64_t s_pos,
                            int64_t s_ch, float halo, uint64_t *hist);
DT_OP_TABLE(offset_hist_k, "offset statistics", offset_hist_fn,
            DT_KERNEL(offset_hist_k, DT_CPU, DT_F32, DT_ANY_LAYOUT, dt_offset_hist_cpu),
            DT_KERNEL_CUDA(offset_hist_k, DT_GPU, DT_F32, DT_ANY_LAYOUT, dt_offset_hist_cuda))

void dt_offset_stats_compute(const dt_tensor *offset, float halo, dt_offset_stats *st) {
    dt_require_live("offset_stats", offset);
    if (offset->ndim != 4 || offset->shape[1] % 2) {
        char a[128];
        dt_fatal("offset_stats: offsets %s must be [N, 2*G*K, Ho, Wo]", dt_shape_str(offset, a, sizeof a));
    }
    int64_t N = offset->shape[0], GK = offset->shape[1] / 2, P = offset->shape[2] * offset->shape[3];
    dt_require_dtype("offset_stats", "offsets", offset, DT_F32);
    dt_require_layout("offset_stats", "offsets", offset, DT_NCHW);
    dt_offset_stats_compute_view(offset->dev, offset->data, N, GK, P, 2 * GK * P, 1, P, halo, st);
}

void dt_offset_stats_compute_view(dt_dev dev, const float *off, int64_t N, int64_t GK, int64_t P, int64_t s_img,
                                  int64_t s_pos, int64_t s_ch, float halo, dt_offset_stats *st) {
    uint64_t h[DT_OFFHIST_LEN];
    uint64_t *d = dt_dev_alloc(dev, sizeof h);
    DT_PICK(offset_hist_k, dev, DT_F32, DT_NCHW)(N, GK, P, off, s_img, s_pos, s_ch, halo, d);
    if (dev == DT_GPU) dt_copy_d2h(h, d, sizeof h); else memcpy(h, d, sizeof h);
    dt_dev_free(dev, d);
    memset(st, 0, sizeof *st);
    st->samples = N * GK * P;
    uint32_t mb = (uint32_t)h[DT_OFFHIST_MAX];
    memcpy(&st->max_abs, &mb, 4);
    uint64_t valid = 0;
    for (int b = 0; b < DT_OFFHIST_BINS; b++) valid += h[DT_OFFHIST_DY + b];
    if (valid) {
        st->mean_abs_dy = h[DT_OFFHIST_SUM] / 65536.0 / valid;
        st->mean_abs_dx = h[DT_OFFHIST_SUM + 1] / 65536.0 / valid;
    }
    static const double qs[4] = {0.5, 0.9, 0.99, 0.999};
    for (int i = 0; i < 4; i++) { /* interpolated within a bin, never past the largest value */
        st->p_dy[i] = fminf(percentile(h + DT_OFFHIST_DY, valid, qs[i], st->max_abs), st->max_abs);
        st->p_dx[i] = fminf(percentile(h + DT_OFFHIST_DX, valid, qs[i], st->max_abs), st->max_abs);
    }
    st->halo = halo;
    st->frac_outside = st->samples ? (double)h[DT_OFFHIST_OUT] / st->samples : 0.0;
}

int dt_offset_stats_halo(const dt_offset_stats *st, int q) {
    float v = fmaxf(st->p_dy[q], st->p_dx[q]);
    if (!(v >= 0)) return 0;
    if (v > 64) v = 64;
    return (int)ceilf(v);
}

void dt_offset_stats_format(const dt_offset_stats *st, char *buf, int len) {
    snprintf(buf, len,
             "mean|dy| %.3f mean|dx| %.3f  |dy| p50/90/99/99.9 %.2f/%.2f/%.2f/%.2f  |dx| %.2f/%.2f/%.2f/%.2f  "
             "max %.2f  outside halo %.0f: %.4f%%",
             st->mean_abs_dy, st->mean_abs_dx, st->p_dy[0], st->p_dy[1], st->p_dy[2], st->p_dy[3], st->p_dx[0],
             st->p_dx[1], st->p_dx[2], st->p_dx[3], st->max_abs, st->halo, 100.0 * st->frac_outside);
}

