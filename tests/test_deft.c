/* The deft mode on the CPU: its channels-last twins (deform_nhwc.h, offset_conv.h) driven
 * through the same orchestration as on the GPU, against the NCHW reference (the unfused
 * mode), op and layer, every knob; the inverse index's invariants; the pieces it is built
 * from (fast division, relayouts, the plan). (Finite differences through the op and the
 * layer's node: the op-case tables of tests/cases_deform.c.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/deform/deform_chunk.h"
#include "ops/deform/deform_nhwc.h"
#include "tests/deform_testutil.h"
#include "tests/dt_check.h"
#include "ops/deform/dt_deform.h"
#include "core/dt_fastdiv.h"
#include "ops/dt_layers.h"
#include "tests/dt_test.h"
#include "ops/pointwise/layout.h"
#include "ops/pointwise/convert.h"
#include "ops/deform/om_pack.h"

/* Forward and every gradient of the op in `mode`, copied out. */
typedef struct {
    float *y, *g[5];
    int64_t ny, n[5];
} op_out;

static op_out run_op(const dt_deform_case *c, dt_tensor **in, dt_deform_mode mode, const dt_deform_knobs *k, uint64_t rseed) {
    op_out o;
    memset(&o, 0, sizeof o);
    dt_scope_begin();
    for (int i = 0; i < 5; i++)
        if (in[i]) in[i]->grad_valid = 0;
    dt_tensor *y = dt_deform_conv2d_mode(in[0], in[1], in[2], in[3], in[4], c->g, c->groups, mode, k, DT_MATH_FP32);
    dt_tensor *R = dt_tensor_like(y);
    dt_rng r;
    dt_rng_seed(&r, rseed);
    dt_tensor_fill_normal(R, &r, 0, 1);
    o.ny = y->numel;
    o.y = dt_tensor_host_copy(y);
    dt_backward_with(y, R);
    for (int i = 0; i < 5; i++)
        if (in[i]) {
            o.n[i] = in[i]->numel;
            o.g[i] = dt_tensor_host_copy(in[i]->grad);
        }
    dt_scope_end();
    return o;
}

static void free_out(op_out *o) {
    free(o->y);
    for (int i = 0; i < 5; i++) free(o->g[i]);
}

static int same_outputs(const char *what, const op_out *a, const op_out *ref, double tol) {
    static const char *names[5] = {"input", "offset", "mask", "weight", "bias"};
    char buf[256];
    snprintf(buf, sizeof buf, "%s: forward", what);
    int ok = dt_expect_close(buf, a->y, ref->y, ref->ny, tol);
    for (int i = 0; i < 5; i++) {
        if (!ref->g[i]) continue;
        snprintf(buf, sizeof buf, "%s: gradient of %s", what, names[i]);
        ok &= dt_expect_close(buf, a->g[i], ref->g[i], ref->n[i], tol);
    }
    return ok;
}

/* The deft op (every dx method and sampling kernel, one-image and whole-batch chunks) computes
 * what the NCHW reference computes: output and all five gradients. */
DT_TEST(deft_op_matches_reference_every_knob) {
    size_t old = dt_conv_col_budget();
    const dt_deform_case *c; /* the problems of the one table (tests/cases_deform.c) this file runs */
    for (int ci = 0; (c = dt_deform_case_at(DT_DC_CPU_DEFT, ci)); ci++) {
        dt_tensor *in[5];
        dt_test_deform_inputs(c, 0, in);
        op_out ref = run_op(c, in, DT_DEFORM_UNFUSED, NULL, 7);
        for (int variant = 0; variant < 6; variant++) {
            dt_deform_knobs k = dt_deform_knobs_default();
            k.dx = variant & 1 ? DT_DX_ATOMIC : DT_DX_GATHER;
            k.stage = variant >= 2 && variant < 4;
            k.halo = 1;
            dt_conv_set_col_budget(variant >= 4 ? 1 : old); /* variants 4, 5: one image a chunk */
            op_out o = run_op(c, in, DT_DEFORM_DEFT, &k, 7);
            char what[160];
            snprintf(what, sizeof what, "deft op %s [dx %s stage %d%s]", c->name, dt_deform_dx_name(k.dx), k.stage,
                     variant >= 4 ? ", 1-image chunks" : "");
            EXPECT(same_outputs(what, &o, &ref, 1e-5));
            free_out(&o);
        }
        dt_conv_set_col_budget(old);
        free_out(&ref);
    }
}

/* ---- the inverse index ---- */

static const dt_deform_plan *index_plan(const dt_deform_case *c, dt_deform_plan *p) {
    dt_deform_knobs k = dt_deform_knobs_default();
    const char *bad = dt_deform_plan_init(p, c->n, c->c, c->h, c->w, c->cout, c->g, c->groups, c->mask, DT_DEFORM_DEFT, &k,
                                          (size_t)1 << 40);
    EXPECT_MSG(!bad, "%s", bad ? bad : "");
    return p;
}

/* om [N*P, OCS] from NCHW offsets/mask, as the deft op builds it. */
static float *om_of(const dt_deform_plan *p, const dt_tensor *off, const dt_tensor *mask) {
    float *om = calloc((size_t)(p->prob.N * p->P * p->OCS), sizeof(float));
    dt_nchw_to_nhwc_cpu(p->prob.N, 2 * p->GK, p->P, off->data, p->OCS, om);
    if (mask) dt_nchw_to_nhwc_cpu(p->prob.N, p->GK, p->P, mask->data, p->OCS, om + 2 * p->GK);
    return om;
}

/* Segments sorted by key, ids ascending inside; every sample that reads a pixel is in the
 * segment of its top-left corner; the gather writes D for exactly the corners inside the image. */
DT_TEST(deft_index_invariants) {
    const dt_deform_case *c; /* the problems of the one table (tests/cases_deform.c) this file runs */
    for (int ci = 0; (c = dt_deform_case_at(DT_DC_CPU_DEFT, ci)); ci++) {
        dt_deform_plan p;
        index_plan(c, &p);
        dt_tensor *in[5];
        dt_test_deform_inputs(c, 0, in);
        float *om = om_of(&p, in[1], in[2]);
        void *ws = malloc(dt_deform_index_ws_bytes_cpu(&p, p.prob.N));
        dt_deform_index idx;
        dt_deform_index_build_cpu(&p, p.prob.N, om, ws, &idx);
        dt_deform_chunk ch = dt_deform_chunk_make(&p, p.prob.N);
        EXPECT_EQ_INT(idx.samples, ch.S);
        EXPECT_EQ_INT(idx.start[0], 0);
        int64_t valid = 0, bad_order = 0, bad_key = 0;
        for (int64_t s = 0; s < ch.S; s++) {
            int q, k, g, i;
            float m;
            dt_sample_decode(&ch, (uint32_t)s, &q, &k, &g);
            dt_bilin b = dt_sample_bilin(&ch, om, q, k, g, &i, &m);
            valid += dt_sample_key(&ch, &b, i, g, (uint32_t)idx.keys) != (uint32_t)idx.keys;
        }
        EXPECT_EQ_INT(idx.start[idx.keys], valid);
        for (int64_t key = 0; key < idx.keys; key++) {
            if (idx.start[key] > idx.start[key + 1]) bad_order++;
            for (uint32_t e = idx.start[key]; e < idx.start[key + 1]; e++) {
                if (e > idx.start[key] && idx.order[e] <= idx.order[e - 1]) bad_order++;
                int q, k, g, i;
                float m;
                dt_sample_decode(&ch, idx.order[e], &q, &k, &g);
                dt_bilin b = dt_sample_bilin(&ch, om, q, k, g, &i, &m);
                bad_key += dt_sample_key(&ch, &b, i, g, (uint32_t)idx.keys) != (uint32_t)key;
            }
        }
        EXPECT_EQ_INT(bad_order, 0);
        EXPECT_EQ_INT(bad_key, 0);
        /* D coverage */
        int64_t nx = p.prob.N * p.prob.H * p.prob.W * p.prob.C;
        float *xT = malloc(nx * 4), *dxT = malloc(nx * 4), *dcol = malloc(ch.Q * p.KC * 4), *D = malloc(ch.S * 16);
        for (int64_t e = 0; e < nx; e++) xT[e] = dt_rng_normal(dt_test_rng());
        for (int64_t e = 0; e < (int64_t)ch.Q * p.KC; e++) dcol[e] = dt_rng_normal(dt_test_rng());
        for (int64_t e = 0; e < (int64_t)ch.S * 4; e++) D[e] = NAN;
        dt_deform_gather_dx_cpu(&p, p.prob.N, &idx, xT, dcol, 0.0f, dxT, DT_F32, D);
        int64_t wrong = 0;
        for (int64_t s = 0; s < ch.S; s++) {
            int q, k, g, i;
            float m;
            dt_sample_decode(&ch, (uint32_t)s, &q, &k, &g);
            dt_bilin b = dt_sample_bilin(&ch, om, q, k, g, &i, &m);
            for (int t = 0; t < 4; t++) wrong += (b.inside && b.ok[t]) != !isnan(D[4 * s + t]);
        }
        EXPECT_MSG(wrong == 0, "%s: %lld corners with D written where it should not be, or missing", c->name, (long long)wrong);
        free(xT);
        free(dxT);
        free(dcol);
        free(D);
        free(ws);
        free(om);
    }
}

/* ---- the layer ---- */

/* Layer inputs with offsets near +-0.5 px (away from kinks) that vary a little with x. */
static void layer_inputs(dt_deform_conv *l, int64_t n, int64_t h, int64_t w, dt_tensor **in) {
    int64_t oc = dt_deform_offset_channels(l), n_off = 2 * l->groups * l->g.kh * l->g.kw;
    int64_t so[4] = {oc, l->cin, l->g.kh, l->g.kw}, sob[1] = {oc}, sb[1] = {l->cout};
    in[0] = dt_test_randn4(n, l->cin, h, w, 1.0f);
    in[1] = dt_test_randn4(l->cout, l->cin, l->g.kh, l->g.kw, 0.5f);
    in[2] = dt_test_randn(4, so, 0.01f);
    in[3] = dt_tensor_new(1, sob, DT_CPU);
    for (int64_t i = 0; i < oc; i++) dt_data_f32(in[3])[i] = i < n_off ? (i % 2 ? 0.5f : -0.5f) : 0.3f * (float)(i % 3) - 0.3f;
    in[4] = dt_test_randn(1, sb, 1.0f);
    for (int i = 0; i < 5; i++) dt_requires_grad(in[i]);
}

/* Output and all gradients of a layer in `mode` with `k`, for given inputs. */
static op_out run_layer(dt_deform_conv *l, dt_tensor **in, dt_deform_mode mode, const dt_deform_knobs *k) {
    op_out o;
    memset(&o, 0, sizeof o);
    l->mode = mode;
    l->knobs = *k;
    l->calls = 0;
    dt_scope_begin();
    for (int i = 0; i < 5; i++) in[i]->grad_valid = 0;
    dt_tensor *y = dt_test_deform_layer_forward(in, l);
    dt_tensor *R = dt_tensor_like(y);
    dt_rng r;
    dt_rng_seed(&r, 11);
    dt_tensor_fill_normal(R, &r, 0, 1);
    o.ny = y->numel;
    o.y = dt_tensor_host_copy(y);
    dt_backward_with(y, R);
    for (int i = 0; i < 5; i++) {
        o.n[i] = in[i]->numel;
        o.g[i] = dt_tensor_host_copy(in[i]->grad);
    }
    dt_scope_end();
    return o;
}

/* The deft layer (offset conv as implicit GEMM, sigmoid inside, fused/staged tiles, both dx
 * methods) against the unfused layer (conv2d + sigmoid + op). */
DT_TEST(deft_layer_matches_unfused_every_knob) {
    const dt_deform_case *c; /* the layers' problems of the one table (tests/cases_deform.c): mask is DCNv2 */
    for (int li = 0; (c = dt_deform_case_at(DT_DC_CPU_LAYER, li)); li++) {
        dt_deform_conv l;
        const int version = c->mask ? 2 : 1;
        dt_deform_conv_init(&l, NULL, "dcn", c->c, c->cout, c->g, c->groups, version, c->bias, 0.0f, DT_CPU, DT_NCHW);
        dt_tensor *own[4] = {l.weight, l.off_weight, l.off_bias, l.bias};
        dt_tensor *in[5];
        layer_inputs(&l, c->n, c->h, c->w, in);
        dt_deform_knobs k0 = dt_deform_knobs_default();
        op_out ref = run_layer(&l, in, DT_DEFORM_UNFUSED, &k0);
        for (int m = 0; m < 8; m++) {
            dt_deform_knobs k = dt_deform_knobs_default();
            k.dx = m & 1 ? DT_DX_ATOMIC : DT_DX_GATHER;
            k.fuse_offset = !!(m & 2);
            k.stage = !!(m & 4);
            op_out o = run_layer(&l, in, DT_DEFORM_DEFT, &k);
            char what[160];
            snprintf(what, sizeof what, "deft layer v%d G%d s%d d%d [dx %s fuse %d stage %d]", version, c->groups,
                     c->g.sh, c->g.dh, dt_deform_dx_name(k.dx), k.fuse_offset, k.stage);
            static const char *names[5] = {"input", "weight", "offset weight", "offset bias", "bias"};
            char buf[256];
            snprintf(buf, sizeof buf, "%s: forward", what);
            EXPECT(dt_expect_close(buf, o.y, ref.y, ref.ny, 1e-5));
            for (int i = 0; i < 5; i++) {
                snprintf(buf, sizeof buf, "%s: gradient of %s", what, names[i]);
                EXPECT(dt_expect_close(buf, o.g[i], ref.g[i], ref.n[i], 1e-4));
            }
            free_out(&o);
        }
        free_out(&ref);
        for (int i = 0; i < 4; i++) dt_tensor_free(own[i]);
    }
}

/* keep_cols (the forward's columns kept for the backward's weight gradient) against sampling
 * them again, bit for bit, on every CPU layer case and both dx methods: with the whole batch in
 * one chunk and with one image a chunk (a column budget of one byte), where chunk n0's columns
 * live at row n0*P of the kept buffer. */
DT_TEST(deft_layer_keep_cols_changes_no_bit) {
    const dt_deform_case *c;
    const size_t budget = dt_conv_col_budget();
    for (int li = 0; (c = dt_deform_case_at(DT_DC_CPU_LAYER, li)); li++) {
        dt_deform_conv l;
        dt_deform_conv_init(&l, NULL, "dcn", c->c, c->cout, c->g, c->groups, c->mask ? 2 : 1, c->bias, 0.0f, DT_CPU,
                            DT_NCHW);
        dt_tensor *own[4] = {l.weight, l.off_weight, l.off_bias, l.bias};
        dt_tensor *in[5];
        layer_inputs(&l, c->n, c->h, c->w, in);
        for (int m = 0; m < 4; m++) {
            dt_conv_set_col_budget(m & 2 ? 1 : budget);
            op_out o[2];
            for (int keep = 0; keep < 2; keep++) {
                dt_deform_knobs k = dt_deform_knobs_default();
                k.dx = m & 1 ? DT_DX_ATOMIC : DT_DX_GATHER;
                k.keep_cols = keep;
                o[keep] = run_layer(&l, in, DT_DEFORM_DEFT, &k);
            }
            const char *what = m & 2 ? "one image a chunk" : "one chunk";
            EXPECT_MSG(!memcmp(o[0].y, o[1].y, sizeof(float) * (size_t)o[0].ny), "%s, dx %s, %s: forward differs",
                       c->name, dt_deform_dx_name(m & 1), what);
            for (int i = 0; i < 5; i++)
                EXPECT_MSG(!memcmp(o[0].g[i], o[1].g[i], sizeof(float) * (size_t)o[0].n[i]),
                           "%s, dx %s, %s: gradient of input %d differs", c->name, dt_deform_dx_name(m & 1), what, i);
            free_out(&o[0]);
            free_out(&o[1]);
        }
        dt_conv_set_col_budget(budget);
        for (int i = 0; i < 4; i++) dt_tensor_free(own[i]);
    }
}

/* ---- the pieces ---- */

DT_TEST(fastdiv_matches_division) {
    int64_t bad = 0;
    for (uint32_t d = 1; d < 3000; d += (d < 300 ? 1 : 37)) {
        dt_fastdiv f = dt_fastdiv_make(d);
        for (int t = 0; t < 300; t++) {
            uint32_t n = t < 100 ? (uint32_t)t : (uint32_t)(dt_rng_u64(dt_test_rng()) & 0x7fffffffu);
            uint32_t q, r = dt_fastdiv_divmod(n, f, &q);
            bad += q != n / d || r != n % d;
        }
        bad += dt_fastdiv_div(0x7fffffffu, f) != 0x7fffffffu / d;
    }
    uint32_t big[3] = {65537u, 1u << 30, 0x80000000u};
    for (int b = 0; b < 3; b++) {
        dt_fastdiv f = dt_fastdiv_make(big[b]);
        for (int t = 0; t < 1000; t++) {
            uint32_t n = (uint32_t)(dt_rng_u64(dt_test_rng()) & 0x7fffffffu);
            bad += dt_fastdiv_div(n, f) != n / big[b];
        }
    }
    EXPECT_EQ_INT(bad, 0);
}

DT_TEST(layout_nchw_nhwc_round_trip) {
    int64_t nb = 3, C = 5, P = 7, ld = 8;
    dt_tensor *x = dt_test_randn4(nb, C, 1, P, 1.0f);
    float *y = calloc(nb * P * ld, 4), *back = malloc(nb * C * P * 4), bias[5] = {1, 2, 3, 4, 5};
    dt_nchw_to_nhwc_cpu(nb, C, P, x->data, ld, y);
    int64_t bad = 0;
    for (int64_t i = 0; i < nb; i++)
        for (int64_t p = 0; p < P; p++)
            for (int64_t c = 0; c < ld; c++)
                bad += y[(i * P + p) * ld + c] != (c < C ? dt_data_f32(x)[(i * C + c) * P + p] : 0.0f);
    EXPECT_EQ_INT(bad, 0);
    dt_nhwc_to_nchw_cpu(nb, C, P, y, ld, NULL, 0.0f, back);
    EXPECT(!memcmp(back, x->data, nb * C * P * 4));
    dt_nhwc_to_nchw_cpu(nb, C, P, y, ld, bias, 1.0f, back); /* beta 1: 2x + bias */
    for (int64_t i = 0; i < nb * C * P; i++) bad += fabsf(back[i] - (2 * dt_data_f32(x)[i] + bias[(i / P) % C])) > 1e-6f;
    EXPECT_EQ_INT(bad, 0);
    free(y);
    free(back);
}

/* The om pack (om_pack.h) against the passes it replaced: each field converted to f32 NCHW and
 * relaid out into a zeroed om; dom relaid out to f32 NCHW and converted into each gradient with
 * its beta. Bit for bit, for every problem of the table and every pair of field formats; a
 * gradient not asked for is left as it was. */
static void *copy_of(const void *p, size_t bytes) { return memcpy(malloc(bytes), p, bytes); }

DT_TEST(deft_om_pack_is_the_conversions_it_replaces) {
    int64_t bad = 0, runs = 0;
    for (int ci = 0; ci < dt_om_pack_n_cases; ci++) {
        const dt_om_pack_case *c = &dt_om_pack_cases[ci];
        const int64_t nb = c->nb, P = c->P, GK = c->GK, OCS = dt_om_pack_ocs(c), Q = nb * P;
        const int64_t n_off = nb * 2 * GK * P, n_mask = nb * GK * P;
        for (int fo = 0; fo < 4; fo++)
            for (int fm = 0; fm < (c->mask ? 4 : 1); fm++) {
                const dt_deform_field_fmt of = dt_test_field_fmt(fo), mf = dt_test_field_fmt(fm);
                const size_t b_off = n_off * dt_dtype_size(of.dtype), b_mask = n_mask * dt_dtype_size(mf.dtype);
                void *off = dt_test_field(nb, 2 * GK, P, of), *mask = c->mask ? dt_test_field(nb, GK, P, mf) : NULL;
                /* pack */
                float *ref = calloc(Q * OCS, 4), *om = malloc(Q * OCS * 4), *f32 = malloc((n_off + 1) * 4);
                dt_convert_cpu(nb, 2 * GK, P, off, of.dtype, of.layout, 0.0f, f32, DT_F32, DT_NCHW);
                dt_nchw_to_nhwc_cpu(nb, 2 * GK, P, f32, OCS, ref);
                if (mask) {
                    dt_convert_cpu(nb, GK, P, mask, mf.dtype, mf.layout, 0.0f, f32, DT_F32, DT_NCHW);
                    dt_nchw_to_nhwc_cpu(nb, GK, P, f32, OCS, ref + 2 * GK);
                }
                memset(om, 0xFF, Q * OCS * 4);
                dt_deform_om_pack_cpu(nb, P, GK, OCS, off, of, mask, mf, om);
                if (memcmp(om, ref, Q * OCS * 4)) {
                    bad++;
                    fprintf(stderr, "pack: case %d, formats %d / %d differ\n", ci, fo, fm);
                }
                /* unpack: beta 0 over NaN and 1 over values; both gradients, or one */
                float *dom = malloc(Q * OCS * 4);
                dt_rng_fill_normal(dt_test_rng(), dom, Q * OCS, 0.0f, 1.0f);
                for (int beta = 0; beta < 2; beta++)
                    for (int want = 1; want < (mask ? 4 : 2); want++) {
                        void *g[2], *g_ref[2], *g0[2];
                        const size_t bytes[2] = {b_off, b_mask};
                        for (int k = 0; k < 2; k++) {
                            g[k] = k == 0 ? dt_test_field(nb, 2 * GK, P, of) : dt_test_field(nb, GK, P, mf);
                            if (!beta) memset(g[k], 0xFF, bytes[k]);
                            g_ref[k] = copy_of(g[k], bytes[k]);
                            g0[k] = copy_of(g[k], bytes[k]);
                        }
                        float *t = malloc((n_off + 1) * 4);
                        if (want & 1) {
                            dt_nhwc_to_nchw_cpu(nb, 2 * GK, P, dom, OCS, NULL, 0.0f, t);
                            dt_convert_cpu(nb, 2 * GK, P, t, DT_F32, DT_NCHW, (float)beta, g_ref[0], of.dtype, of.layout);
                        }
                        if (want & 2) {
                            dt_nhwc_to_nchw_cpu(nb, GK, P, dom + 2 * GK, OCS, NULL, 0.0f, t);
                            dt_convert_cpu(nb, GK, P, t, DT_F32, DT_NCHW, (float)beta, g_ref[1], mf.dtype, mf.layout);
                        }
                        dt_deform_om_unpack_cpu(nb, P, GK, OCS, dom, (want & 1) ? g[0] : NULL, of, (float)beta,
                                                (want & 2) ? g[1] : NULL, mf, (float)beta);
                        for (int k = 0; k < 2; k++) {
                            const void *expect = (want >> k) & 1 ? g_ref[k] : g0[k];
                            if (memcmp(g[k], expect, bytes[k])) {
                                bad++;
                                fprintf(stderr, "unpack: case %d, formats %d / %d, beta %d, wanted %d: gradient %d differs\n",
                                        ci, fo, fm, beta, want, k);
                            }
                            free(g[k]), free(g_ref[k]), free(g0[k]);
                        }
                        free(t);
                        runs++;
                    }
                free(off), free(mask), free(ref), free(om), free(f32), free(dom);
            }
    }
    EXPECT_EQ_INT(bad, 0);
    EXPECT(runs > 100); /* every case ran: 5 problems, 52 format pairs, 2 betas */
}

/* A pitched field (a channel slice of a wider tensor, om_pack.h) packs as its dense copy does. */
DT_TEST(deft_om_pack_reads_channel_slices_where_they_lie) {
    int64_t bad = 0;
    for (int ci = 0; ci < dt_om_pack_n_cases; ci++) {
        const dt_om_pack_case *c = &dt_om_pack_cases[ci];
        const int64_t nb = c->nb, P = c->P, GK = c->GK, OCS = dt_om_pack_ocs(c), Q = nb * P;
        for (int fo = 0; fo < 4; fo++)
            for (int fm = 0; fm < (c->mask ? 4 : 1); fm++) {
                dt_test_field_slice o = dt_test_field_sliced(nb, 2 * GK, P, dt_test_field_fmt(fo));
                dt_test_field_slice m = dt_test_field_sliced(nb, GK, P, dt_test_field_fmt(fm));
                EXPECT(!dt_deform_field_fmt_refusal(o.fmt, 2 * GK, P) && !dt_deform_field_fmt_refusal(m.fmt, GK, P));
                float *got = malloc(Q * OCS * 4), *want = malloc(Q * OCS * 4);
                memset(got, 0xFF, Q * OCS * 4);
                dt_deform_om_pack_cpu(nb, P, GK, OCS, o.slice, o.fmt, c->mask ? m.slice : NULL, m.fmt, got);
                dt_deform_om_pack_cpu(nb, P, GK, OCS, o.dense, dt_test_field_fmt(fo), c->mask ? m.dense : NULL,
                                      dt_test_field_fmt(fm), want);
                if (memcmp(got, want, Q * OCS * 4)) {
                    bad++;
                    fprintf(stderr, "case %d, formats %d / %d: the slices pack otherwise than their copies\n", ci, fo, fm);
                }
                free(got), free(want), free(o.wide), free(o.dense), free(m.wide), free(m.dense);
            }
    }
    EXPECT_EQ_INT(bad, 0);
    /* a pitch below the dense one is refused, naming the pitch */
    const dt_deform_field_fmt nhwc = {DT_F32, DT_NHWC, 17}, nchw = {DT_BF16, DT_NCHW, 18 * 7 - 1};
    EXPECT(dt_deform_field_fmt_refusal(nhwc, 18, 7) && strstr(dt_deform_field_fmt_refusal(nhwc, 18, 7), "pitch"));
    EXPECT(dt_deform_field_fmt_refusal(nchw, 18, 7) != NULL);
    EXPECT(!dt_deform_field_fmt_refusal((dt_deform_field_fmt){DT_F32, DT_NHWC, 18}, 18, 7));
}

DT_TEST(deform_plan_chunks_and_errors) {
    dt_deform_plan p;
    dt_deform_knobs k = dt_deform_knobs_default();
    const char *bad = dt_deform_plan_init(&p, 64, 64, 56, 56, 64, dt_geom(3, 1, 1, 1), 1, 0, DT_DEFORM_DEFT, &k, 256u << 20);
    EXPECT(!bad);
    EXPECT_EQ_INT(p.OC, 18);
    EXPECT_EQ_INT(p.OCS, 20);
    EXPECT_EQ_INT(p.nb, (256 << 20) / 4 / (3136 * 576)); /* the column budget decides */
    EXPECT(dt_deform_plan_init(&p, 2, 6, 9, 9, 4, dt_geom(3, 1, 1, 1), 4, 0, DT_DEFORM_DEFT, &k, 1 << 20) != NULL);
    bad = dt_deform_plan_init(&p, 2, 6, 9, 9, 4, dt_geom(3, 1, 1, 1), 4, 0, DT_DEFORM_DEFT, &k, 1 << 20);
    EXPECT_MSG(bad && strstr(bad, "6 channels cannot be split into 4 offset groups"), "%s", bad ? bad : "(none)");
    bad = dt_deform_plan_init(&p, 2, 6, 1, 9, 4, dt_geom(3, 1, 0, 1), 1, 0, DT_DEFORM_DEFT, &k, 1 << 20);
    EXPECT_MSG(bad && strstr(bad, "too small"), "%s", bad ? bad : "(none)");
    k.dx = 7;
    bad = dt_deform_plan_init(&p, 2, 6, 9, 9, 4, dt_geom(3, 1, 1, 1), 1, 0, DT_DEFORM_DEFT, &k, 1 << 20);
    EXPECT_MSG(bad && strstr(bad, "dx 7"), "%s", bad ? bad : "(none)");
    /* the input gradient by output tile (dx 2) is gone (a lab record, docs/deft.md): neither its
     * name nor its number is a dx */
    EXPECT_EQ_INT(dt_deform_dx_parse("gather"), DT_DX_GATHER);
    EXPECT_EQ_INT(dt_deform_dx_parse("atomic"), DT_DX_ATOMIC);
    EXPECT_EQ_INT(dt_deform_dx_parse("tile"), -1);
    k.dx = 2;
    bad = dt_deform_plan_init(&p, 2, 6, 9, 9, 4, dt_geom(3, 1, 1, 1), 1, 0, DT_DEFORM_DEFT, &k, 1 << 20);
    EXPECT_MSG(bad && strstr(bad, "dx 2: must be gather (0) or atomic (1)"), "%s", bad ? bad : "(none)");
    /* a huge budget still keeps every per-chunk index below 2^31 */
    k = dt_deform_knobs_default();
    EXPECT(!dt_deform_plan_init(&p, 100000, 4, 64, 64, 4, dt_geom(3, 1, 1, 1), 1, 0, DT_DEFORM_DEFT, &k, (size_t)1 << 50));
    EXPECT(p.nb * p.P * p.K * p.G < INT32_MAX && p.nb * (p.prob.H + 1) * (p.prob.W + 1) < INT32_MAX);
    /* deterministic forces the gather */
    k.dx = DT_DX_ATOMIC;
    k.deterministic = 1;
    EXPECT(!dt_deform_plan_init(&p, 1, 4, 8, 8, 4, dt_geom(3, 1, 1, 1), 1, 0, DT_DEFORM_DEFT, &k, 1 << 20));
    EXPECT_EQ_INT(p.dx, DT_DX_GATHER);
}
