/* dx=tile on the CPU (deform_nhwc.h tile_dx, deform_dxtile.h): its twin against the inverse
 * index gather's twin on random problems (tests/dxtile_testutil.h), bitwise run to run and
 * chunk by chunk, D alone = D with dx, and the fallback taking the samples outside their
 * footprints (it must see some with +-20 px offsets).
 *
 * The bound against the gather: the gather's twin sums in double and rounds once, the tile's
 * in fp32 in a fixed order; the error of n fp32 additions is at most (n - 1) u sum |terms|
 * (u = 2^-24), so each element is checked against (n + 1) u A, where A is the same sum over
 * |terms| (the gather's twin on |x|, |dcol| and |mask|) and n the element's term count: Cg for
 * D; for dx the samples reading the pixel (from the gather's index) + the footprints covering it
 * (at most (FH / (th*sh) + 1) x (FW / (tw*sw) + 1), counted as 16 - every geometry here has fewer).
 * A bf16 dx adds one rounding of each (half an ulp, 2^-9 |v|). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/deform/deform_chunk.h"
#include "ops/deform/deform_dxtile.h"
#include "ops/deform/deform_nhwc.h"
#include "tests/dt_test.h"
#include "tests/dxtile_testutil.h"

static float ld(const void *a, dt_dtype t, int64_t e) { return dt_elem_ld(a, t, e); }

/* The gather's twin on the problem: D [S, 4] (0 where it writes none) and the fp32 adjoint. */
static void gather_ref(const dt_deform_plan *pg, const dxt_problem *pr, dt_deform_index *idx, void *iws, float *D, float *dx) {
    int64_t S = pg->N * pg->P * pg->K * pg->G;
    memset(D, 0, (size_t)S * 16);
    dt_deform_index_build_cpu(pg, pg->N, pr->om, iws, idx);
    dt_deform_gather_dx_cpu(pg, pg->N, idx, pr->x, pr->dcol, 0.0f, dx, DT_F32, D);
}

/* Terms reading pixel pix of group g: the four keys' segments of the gather's index. */
static int64_t hits(const dt_deform_plan *p, const dt_deform_index *idx, int64_t pix, int g) {
    int64_t ix = pix % p->W, iy = pix / p->W % p->H, i = pix / (p->W * p->H);
    int64_t base = ((i * p->G + g) * (p->H + 1) + iy + 1) * (p->W + 1) + ix + 1, n = 0;
    for (int t = 0; t < 4; t++) {
        int64_t k = base - (t & 1) - (t >> 1) * (p->W + 1);
        n += idx->start[k + 1] - idx->start[k];
    }
    return n;
}

typedef struct {
    float *D, *Dabs, *sum, *sabs;
    dt_deform_index idx;
    void *iws, *iws_abs;
} ref_t;

static int run_case(const dxt_case *c, dt_dtype dt, uint64_t seed) {
    int fails = 0;
    dt_deform_plan p, pg;
    const char *bad = dxt_plan(c, dt, DT_DX_TILE, &p);
    if (!bad) bad = dxt_plan(c, dt, DT_DX_GATHER, &pg);
    EXPECT_MSG(!bad, "%s: %s", c->name, bad ? bad : "");
    if (bad) return 1;
    dxt_problem pr = dxt_make(&p, c, seed);
    const int64_t S = p.N * p.P * p.K * p.G, nx = pr.nx;
    const size_t es = dt_dtype_size(dt);
    /* the reference and its bound's sums (|x|, |dcol|, |mask|) */
    ref_t ref;
    ref.D = malloc((size_t)S * 16);
    ref.Dabs = malloc((size_t)S * 16);
    ref.sum = malloc((size_t)nx * 4);
    ref.sabs = malloc((size_t)nx * 4);
    ref.iws = malloc(dt_deform_index_ws_bytes_cpu(&pg, pg.N));
    ref.iws_abs = malloc(dt_deform_index_ws_bytes_cpu(&pg, pg.N));
    gather_ref(&pg, &pr, &ref.idx, ref.iws, ref.D, ref.sum);
    dxt_problem ab = dxt_make(&p, c, seed); /* the same values, made non-negative */
    for (int64_t e = 0; e < nx; e++) dt_elem_st(ab.x, dt, e, fabsf(ld(ab.x, dt, e)));
    for (int64_t e = 0; e < pr.ncol; e++) dt_elem_st(ab.dcol, dt, e, fabsf(ld(ab.dcol, dt, e)));
    for (int64_t e = 0; e < pr.nom; e++)
        if (e % p.OCS >= 2 * p.GK) ab.om[e] = fabsf(ab.om[e]);
    dt_deform_index idx_abs;
    gather_ref(&pg, &ab, &idx_abs, ref.iws_abs, ref.Dabs, ref.sabs);

    /* dx=tile: the fallback index, then dx of every kind and D */
    void *iws = malloc(dt_deform_index_ws_bytes_cpu(&p, p.N)), *tws = malloc(dt_deform_tile_dx_ws_bytes_cpu(&p, p.N));
    dt_deform_index idx;
    dt_deform_index_build_cpu(&p, p.N, pr.om, iws, &idx);
    const dt_dxtile tl = dt_dxtile_make(&p);
    const int64_t misfits = idx.start[idx.keys];
    if (c->off == DXT_WIDE) EXPECT_MSG(misfits > 0, "%s: +-20 px offsets but no sample for the fallback", c->name);
    float *D = malloc((size_t)S * 16), *D2 = malloc((size_t)S * 16), *dxf = malloc((size_t)nx * 4);
    void *dxT = malloc((size_t)nx * es), *dxT2 = malloc((size_t)nx * es), *old = malloc((size_t)nx * es);
    dt_deform_tile_dx_cpu(&p, p.N, &idx, pr.om, pr.x, pr.dcol, 0.0f, dxf, DT_F32, D, tws);
    const double u = ldexp(1.0, -24);
    int bad_d = 0, bad_x = 0;
    for (int64_t e = 0; e < S * 4 && bad_d < 5; e++) {
        double tol = (p.Cg + 1) * u * ref.Dabs[e];
        if (!(fabs((double)D[e] - ref.D[e]) <= tol)) {
            bad_d++;
            EXPECT_MSG(0, "%s %s: D[%lld] %.9g vs gather %.9g (bound %.3g)", c->name, dt_dtype_name(dt), (long long)e, D[e],
                       ref.D[e], tol);
        }
    }
    for (int64_t e = 0; e < nx && bad_x < 5; e++) {
        double tol = (hits(&pg, &ref.idx, e / p.C, (int)(e % p.C / p.Cg)) + 17) * u * ref.sabs[e];
        if (!(fabs((double)dxf[e] - ref.sum[e]) <= tol)) {
            bad_x++;
            EXPECT_MSG(0, "%s %s: dx[%lld] %.9g vs gather %.9g (bound %.3g)", c->name, dt_dtype_name(dt), (long long)e,
                       dxf[e], ref.sum[e], tol);
        }
    }
    fails += bad_d + bad_x;
    /* dx of the plan's dtype with beta 0.5 onto an old dx: fma(beta, old, sum), rounded once */
    dt_rng r;
    dt_rng_seed(&r, seed ^ 0x5bd1e995u);
    dxt_fill(&r, dt, nx, old, 1.0f);
    memcpy(dxT, old, (size_t)nx * es);
    dt_deform_tile_dx_cpu(&p, p.N, &idx, pr.om, pr.x, pr.dcol, 0.5f, dxT, dt, D2, tws);
    EXPECT_MSG(!memcmp(D, D2, (size_t)S * 16), "%s %s: D differs between two runs", c->name, dt_dtype_name(dt));
    for (int64_t e = 0, nb = 0; e < nx && nb < 5; e++) {
        float want = fmaf(0.5f, ld(old, dt, e), dxf[e]);
        if (dt == DT_BF16) want = dt_bf16_round(want);
        if (ld(dxT, dt, e) != want) {
            nb++, fails++;
            EXPECT_MSG(0, "%s %s: beta 0.5 dx[%lld] %.9g, want %.9g", c->name, dt_dtype_name(dt), (long long)e,
                       ld(dxT, dt, e), want);
        }
    }
    /* run to run, bitwise; D alone (no dx, no index) = D */
    memcpy(dxT2, old, (size_t)nx * es);
    dt_deform_tile_dx_cpu(&p, p.N, &idx, pr.om, pr.x, pr.dcol, 0.5f, dxT2, dt, D2, tws);
    EXPECT_MSG(!memcmp(dxT, dxT2, (size_t)nx * es), "%s %s: dx differs between two runs", c->name, dt_dtype_name(dt));
    memset(D2, 0xff, (size_t)S * 16);
    dt_deform_tile_dx_cpu(&p, p.N, NULL, pr.om, pr.x, pr.dcol, 0.0f, NULL, dt, D2, tws);
    EXPECT_MSG(!memcmp(D, D2, (size_t)S * 16), "%s %s: D alone differs from D with dx", c->name, dt_dtype_name(dt));
    /* a chunk of the batch (images 1..N-1, its own index) = those images of the whole batch */
    if (p.N > 1) {
        const int64_t n0 = 1, nb = p.N - 1, qo = n0 * p.P, xo = n0 * p.H * p.W * p.C;
        dt_deform_index_build_cpu(&p, nb, pr.om + qo * p.OCS, iws, &idx);
        float *dxc = malloc((size_t)(nb * p.H * p.W * p.C) * 4);
        dt_deform_tile_dx_cpu(&p, nb, &idx, pr.om + qo * p.OCS, (char *)pr.x + xo * es, (char *)pr.dcol + qo * p.KC * es,
                              0.0f, dxc, DT_F32, D2, tws);
        EXPECT_MSG(!memcmp(dxc, dxf + xo, (size_t)(nb * p.H * p.W * p.C) * 4) &&
                       !memcmp(D2, D + qo * p.K * p.G * 4, (size_t)(nb * p.P * p.K * p.G) * 16),
                   "%s %s: a chunk of %lld images differs from the whole batch", c->name, dt_dtype_name(dt), (long long)nb);
        free(dxc);
    }
    if (dt_test_verbose())
        printf("  %s %s: tile %dx%d halo %d footprint %dx%d, %lld of %lld samples to the fallback\n", c->name,
               dt_dtype_name(dt), tl.th, tl.tw, tl.halo, tl.FH, tl.FW, (long long)misfits, (long long)S);
    free(D), free(D2), free(dxf), free(dxT), free(dxT2), free(old), free(iws), free(tws);
    free(ref.D), free(ref.Dabs), free(ref.sum), free(ref.sabs), free(ref.iws), free(ref.iws_abs);
    dxt_free(&pr);
    dxt_free(&ab);
    return fails;
}

DT_TEST(deft_tile_dx_matches_gather) {
    for (int e = 0; e < DXT_NCASES; e++) {
        run_case(&dxt_cases[e], DT_F32, 1000 + e);
        run_case(&dxt_cases[e], DT_BF16, 2000 + e);
    }
}

/* The geometry: footprints within the budget, the halo shrinking before the tile does not fit. */
DT_TEST(deft_tile_dx_geometry) {
    dt_deform_plan p;
    dxt_case c = {"l1", 1, 64, 56, 56, {3, 3, 1, 1, 1, 1, 1, 1}, 1, 0, 1, DXT_SMALL};
    EXPECT(!dxt_plan(&c, DT_BF16, DT_DX_TILE, &p));
    dt_dxtile t = dt_dxtile_make(&p);
    EXPECT(t.th == 8 && t.tw == 8 && t.halo == 1 && t.FH == 13 && t.FW == 13 && t.tiles == 49 && t.chunks == 2);
    c.halo = 2;
    EXPECT(!dxt_plan(&c, DT_BF16, DT_DX_TILE, &p));
    t = dt_dxtile_make(&p);
    EXPECT(t.th == 4 && t.tw == 8 && t.halo == 2 && t.FH * t.FW <= DT_DXTILE_MAX_CELLS);
    c.halo = 32;
    EXPECT(!dxt_plan(&c, DT_BF16, DT_DX_TILE, &p));
    t = dt_dxtile_make(&p);
    EXPECT(t.FH * t.FW <= DT_DXTILE_MAX_CELLS && t.halo < 32);
}
