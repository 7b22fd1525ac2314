/* The deformable plan: names, defaults, validation, chunking (see deform_plan.h). */
#include "ops/deform/deform_plan.h"

#include <stdio.h>
#include <string.h>


int dt_deform_mode_parse(const char *s) {
    if (!strcmp(s, "unfused")) return DT_DEFORM_UNFUSED;
    if (!strcmp(s, "deft")) return DT_DEFORM_DEFT;
    return -1;
}

const char *dt_deform_dx_name(int dx) { return dx == DT_DX_ATOMIC ? "atomic" : "gather"; }

int dt_deform_dx_parse(const char *s) {
    if (!strcmp(s, "gather")) return DT_DX_GATHER;
    if (!strcmp(s, "atomic")) return DT_DX_ATOMIC;
    return -1;
}

/* The measured-fastest settings (docs/deft.md, docs/PERF.md). */
dt_deform_knobs dt_deform_knobs_default(void) {
    dt_deform_knobs k = {.dx = DT_DX_GATHER, .fuse_offset = 0, .stage = 0, .swizzle = 1, .tile_h = 0, .tile_w = 0,
                         .halo = -1, .halo_refresh = 200, .deterministic = 0, .keep_cols = 1};
    return k;
}

int dt_deform_knobs_validate(const dt_deform_knobs *k, char *err, int errlen) {
    if (k->dx != DT_DX_GATHER && k->dx != DT_DX_ATOMIC)
        return snprintf(err, errlen, "dx %d: must be gather (%d) or atomic (%d)", k->dx, DT_DX_GATHER, DT_DX_ATOMIC), -1;
    if (!(k->tile_h == 0 && k->tile_w == 0)) {
        int tp = k->tile_h * k->tile_w;
        if (k->tile_h < 1 || k->tile_w < 1 || tp > 256 || 256 % tp)
            return snprintf(err, errlen, "tile %dx%d: tile_h*tile_w must divide 256 (e.g. 8x8, 4x8, 4x16), or 0x0 for automatic",
                            k->tile_h, k->tile_w), -1;
    }
    if (k->halo < -1 || k->halo > 32) return snprintf(err, errlen, "halo %d: must be -1 (automatic) or 0..32", k->halo), -1;
    if (k->halo_refresh < 0) return snprintf(err, errlen, "halo_refresh %d: must be >= 0", k->halo_refresh), -1;
    if (k->keep_cols != 0 && k->keep_cols != 1)
        return snprintf(err, errlen, "keep_cols %d: must be 0 (sample again in the backward) or 1 (keep)", k->keep_cols), -1;
    return 0;
}

/* Images per chunk: the column buffer (P x K*C elements an image) within the budget, and every
 * per-chunk index of the kernels (positions x taps x groups, padded pixel keys) below 2^31. */
static const char *chunk(dt_deform_plan *p, size_t col_budget_bytes) {
    static __thread char msg[160];
    /* sizes a caller can state but no int64 product holds (the C API's fuzzer found them) */
    const double big = (double)p->P * (double)p->KC * 8.0 + (double)(p->prob.H + 1) * (double)(p->prob.W + 1) * (double)p->G +
                       (double)p->P * (double)p->K * (double)p->G;
    if (big > 0x1p62)
        return snprintf(msg, sizeof msg, "one image's columns (%lld positions x %lld) are beyond what is supported",
                        (long long)p->P, (long long)p->KC), msg;
    int64_t per_image = p->P * p->KC * (int64_t)dt_dtype_size(p->dtype);
    int64_t nb = (int64_t)col_budget_bytes / (per_image > 0 ? per_image : 1);
    int64_t rows = p->P * p->K * p->G, keys = (p->prob.H + 1) * (p->prob.W + 1) * p->G, pix = p->prob.H * p->prob.W * p->G;
    int64_t biggest = rows > keys ? rows : keys;
    if (pix > biggest) biggest = pix;
    int64_t lim = (int64_t)(INT32_MAX - 1) / biggest;
    if (lim < 1)
        return snprintf(msg, sizeof msg, "one image has %lld samples (positions x taps x groups); at most 2^31 are supported",
                        (long long)biggest), msg;
    if (nb > lim) nb = lim;
    if (nb < 1) nb = 1;
    p->nb = nb < p->prob.N ? nb : p->prob.N;
    return NULL;
}

const char *dt_deform_plan_init(dt_deform_plan *p, int64_t N, int64_t C, int64_t H, int64_t W, int64_t Cout,
                                dt_conv_geom g, int G, int has_mask, dt_deform_mode mode, const dt_deform_knobs *k,
                                size_t col_budget_bytes) {
    static __thread char msg[256];
    memset(p, 0, sizeof *p);
    if (N < 1 || C < 1 || H < 1 || W < 1 || Cout < 1)
        return snprintf(msg, sizeof msg, "sizes must be positive (N %lld, C %lld, H %lld, W %lld, Cout %lld)", (long long)N,
                        (long long)C, (long long)H, (long long)W, (long long)Cout), msg;
    if (g.kh < 1 || g.kw < 1 || g.sh < 1 || g.sw < 1 || g.dh < 1 || g.dw < 1 || g.ph < 0 || g.pw < 0)
        return snprintf(msg, sizeof msg, "invalid geometry: kernel %dx%d stride %dx%d pad %dx%d dilation %dx%d", g.kh, g.kw,
                        g.sh, g.sw, g.ph, g.pw, g.dh, g.dw), msg;
    if (G < 1 || C % G)
        return snprintf(msg, sizeof msg, "%lld channels cannot be split into %d offset groups", (long long)C, G), msg;
    if (mode != DT_DEFORM_UNFUSED && mode != DT_DEFORM_DEFT) return snprintf(msg, sizeof msg, "unknown mode %d", (int)mode), msg;
    p->prob = dt_conv_problem_of(N, C, H, W, Cout, g, 1);
    p->G = G;
    p->has_mask = has_mask != 0;
    if (p->prob.Ho < 1 || p->prob.Wo < 1)
        return snprintf(msg, sizeof msg, "input %lldx%lld is too small for kernel %dx%d (dilation %dx%d, padding %dx%d): output would be %lldx%lld",
                        (long long)H, (long long)W, g.kh, g.kw, g.dh, g.dw, g.ph, g.pw, (long long)p->prob.Ho, (long long)p->prob.Wo), msg;
    p->K = (int64_t)g.kh * g.kw;
    p->P = p->prob.Ho * p->prob.Wo;
    p->Cg = C / G;
    p->GK = G * p->K;
    p->KC = p->K * C;
    p->OC = (has_mask ? 3 : 2) * p->GK;
    p->OCS = (p->OC + 3) / 4 * 4;
    p->mode = mode;
    p->knobs = k ? *k : dt_deform_knobs_default();
    char kerr[200];
    if (dt_deform_knobs_validate(&p->knobs, kerr, sizeof kerr)) return snprintf(msg, sizeof msg, "%s", kerr), msg;
    p->halo = p->knobs.halo < 0 ? 1 : p->knobs.halo;
    p->dx = p->knobs.deterministic ? DT_DX_GATHER : p->knobs.dx;
    p->dtype = DT_F32;
    p->layout = DT_NCHW;
    p->math = DT_MATH_FP32;
    return chunk(p, col_budget_bytes);
}

const char *dt_deform_plan_types(dt_deform_plan *p, dt_dtype dtype, dt_layout layout, dt_math math,
                                 size_t col_budget_bytes) {
    static __thread char msg[160];
    if (dtype != DT_F32 && dtype != DT_BF16)
        return snprintf(msg, sizeof msg, "no deformable kernels for %s tensors (f32 or bf16)", dt_dtype_name(dtype)), msg;
    if (p->mode == DT_DEFORM_UNFUSED && (dtype != DT_F32 || layout != DT_NCHW))
        return snprintf(msg, sizeof msg, "the unfused baseline is f32 NCHW (as PyTorch runs it), not %s %s; deft takes "
                        "channels-last and bf16 tensors", dt_dtype_name(dtype), dt_layout_name(layout)), msg;
    if (dtype == DT_BF16 && layout != DT_NHWC)
        return snprintf(msg, sizeof msg, "bf16 tensors must be channels last (nhwc)"), msg;
    p->dtype = dtype;
    p->layout = layout;
    p->math = math;
    return chunk(p, col_budget_bytes);
}

