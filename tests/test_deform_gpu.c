/* Deformable convolution on the GPU, on fresh random inputs (device memory poisoned with NaN
 * by the runner, so an element a kernel forgot to write fails):
 *  - every channels-last kernel against its CPU twin (the index bit for bit), over odd shapes,
 *    strides, dilation, groups of odd sizes, masks, batch 1 and a prime batch, offsets far
 *    outside the image and of 20 px;
 *  - the layer's staged / fused tiles, swizzle and halos against the CPU's unfused layer;
 *  - the op's offsets packed into om and its gradients unpacked, bit for bit the twins';
 *  - bitwise determinism, zero offsets = conv2d, deft = unfused on ResNet shapes, a chunk
 *    whose column buffer has more than 2^31 elements, a second device.
 * (The op and the layer's node in every mode and knob against their CPU twins, chunked
 * evenly and unevenly: the op cases of tests/cases_deform.c.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/deform/deform_chunk.h"
#include "ops/deform/deform_nhwc.h"
#include "tests/deform_testutil.h"
#include "core/dt_alloc.h"
#include "tests/dt_check.h"
#include "ops/deform/dt_deform.h"
#include "ops/init/dt_init.h"
#include "ops/dt_layers.h"
#include "tests/dt_test.h"
#include "ops/pointwise/layout.h"
#include "ops/deform/offset_conv.h"
#include "ops/deform/om_pack.h"

/* The problems: the DT_DC_KERNELS, DT_DC_GPU_LAYER and DT_DC_GPU_RESNET rows of the deformable
 * tests' one table (tests/cases_deform.c). */

/* ---- every kernel against its CPU twin (calls the CUDA entry points: CUDA builds only) ---- */
#ifdef DT_CUDA

static float *host_randn(int64_t n, float std) {
    float *h = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    dt_rng_fill_normal(dt_test_rng(), h, n, 0.0f, std);
    return h;
}
static float *to_gpu(const float *h, int64_t n) {
    float *d = dt_gpu_malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    dt_copy_h2d(d, h, sizeof(float) * (size_t)n);
    return d;
}
static float *from_gpu(const float *d, int64_t n) {
    float *h = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    dt_copy_d2h(h, d, sizeof(float) * (size_t)n);
    return h;
}
static int close_gpu(const char *what, const float *d, const float *ref, int64_t n, double tol) {
    float *h = from_gpu(d, n);
    int ok = dt_expect_close(what, h, ref, n, tol);
    free(h);
    return ok;
}

DT_GPU_TEST(gpu_deft_kernels_match_cpu_twins) {
    const dt_deform_case *c;
    for (int ci = 0; (c = dt_deform_case_at(DT_DC_KERNELS, ci)); ci++) {
        dt_deform_plan p;
        dt_deform_knobs k = dt_deform_knobs_default();
        const char *bad = dt_deform_plan_init(&p, c->n, c->c, c->h, c->w, c->cout, c->g, c->groups, c->mask, DT_DEFORM_DEFT,
                                              &k, (size_t)1 << 40);
        EXPECT_MSG(!bad, "%s", bad ? bad : "");
        if (bad) continue;
        const int64_t nb = p.prob.N, Q = nb * p.P, S = Q * p.K * p.G, nx = nb * p.prob.H * p.prob.W * p.prob.C;
        char what[200];
#define NAME(...) (snprintf(what, sizeof what, __VA_ARGS__), what)
        /* inputs: x channels last, offsets (+ sigmoid-range mask) in om, dcol, dom, weights */
        dt_tensor *in[5];
        dt_test_deform_inputs(c, 0, in);
        float *xT = malloc(nx * 4), *om = calloc(Q * p.OCS, 4);
        dt_nchw_to_nhwc_cpu(nb, p.prob.C, p.prob.H * p.prob.W, in[0]->data, p.prob.C, xT);
        dt_nchw_to_nhwc_cpu(nb, 2 * p.GK, p.P, in[1]->data, p.OCS, om);
        if (in[2]) dt_nchw_to_nhwc_cpu(nb, p.GK, p.P, in[2]->data, p.OCS, om + 2 * p.GK);
        float *dcol = host_randn(Q * p.KC, 1.0f), *dom = host_randn(Q * p.OCS, 1.0f);
        for (int64_t q = 0; q < Q; q++)
            for (int64_t o = p.OC; o < p.OCS; o++) dom[q * p.OCS + o] = 0.0f; /* as the kernels leave it */
        float *woff = host_randn(p.OC * p.KC, 1.0f / sqrtf((float)p.KC)), *boff = host_randn(p.OC, 0.5f);
        float *gx = to_gpu(xT, nx), *gom = to_gpu(om, Q * p.OCS), *gdcol = to_gpu(dcol, Q * p.KC);
        float *gdom = to_gpu(dom, Q * p.OCS), *gwoff = to_gpu(woff, p.OC * p.KC), *gboff = to_gpu(boff, p.OC);
        size_t wsc = dt_offconv_ws_bytes_cuda(&p, nb), wsi = dt_deform_index_ws_bytes_cuda(&p, nb);
        void *gws = dt_gpu_malloc(wsc > wsi ? wsc : wsi), *cws = malloc(dt_deform_index_ws_bytes_cpu(&p, nb) + 64);

        /* sampling, plain and tiled (offsets given) */
        float *col = malloc(Q * p.KC * 4), *gcol = dt_gpu_malloc(Q * p.KC * 4);
        dt_deform_sample_nhwc_cpu(&p, nb, xT, om, col);
        dt_deform_sample_nhwc_cuda(&p, nb, gx, gom, gcol);
        EXPECT(close_gpu(NAME("%s: sample", c->name), gcol, col, Q * p.KC, 1e-6));
        int tiles[3][2] = {{0, 0}, {4, 16}, {2, 2}};
        for (int v = 0; v < 6; v++) {
            dt_deform_plan q = p;
            q.knobs.stage = v & 1;
            q.knobs.swizzle = (v >> 1) & 1;
            q.knobs.tile_h = tiles[v / 2][0];
            q.knobs.tile_w = tiles[v / 2][1];
            q.halo = v % 3;
            dt_memset_gpu(gcol, 0xff, Q * p.KC * 4);
            dt_deform_tile_forward_cuda(&q, nb, gx, NULL, NULL, gom, gcol, gws);
            EXPECT(close_gpu(NAME("%s: tiled sampling [stage %d swizzle %d tile %dx%d halo %d]", c->name, q.knobs.stage,
                                  q.knobs.swizzle, q.knobs.tile_h, q.knobs.tile_w, q.halo),
                             gcol, col, Q * p.KC, 1e-6));
        }

        /* offset conv forward (both kernel generations), alone and fused into the tiles */
        float *om2 = malloc(Q * p.OCS * 4), *gom2 = dt_gpu_malloc(Q * p.OCS * 4);
        dt_offconv_fwd_cpu(&p, nb, xT, woff, boff, om2, NULL);
        for (int tiles = 0; tiles < 2; tiles++) {
            dt_offconv_use_tiles(tiles);
            dt_memset_gpu(gom2, 0xff, Q * p.OCS * 4);
            dt_offconv_fwd_cuda(&p, nb, gx, gwoff, gboff, gom2, gws);
            EXPECT(close_gpu(NAME("%s: offset conv forward [tiles %d]", c->name, tiles), gom2, om2, Q * p.OCS, 1e-5));
        }
        float *col2 = malloc(Q * p.KC * 4);
        dt_deform_sample_nhwc_cpu(&p, nb, xT, om2, col2);
        for (int stage = 0; stage < 2; stage++) {
            dt_deform_plan q = p;
            q.knobs.stage = stage;
            q.knobs.fuse_offset = 1;
            q.halo = 1;
            dt_memset_gpu(gom2, 0xff, Q * p.OCS * 4);
            dt_deform_tile_forward_cuda(&q, nb, gx, gwoff, gboff, gom2, gcol, gws);
            EXPECT(close_gpu(NAME("%s: fused tile [stage %d]: offsets", c->name, stage), gom2, om2, Q * p.OCS, 1e-5));
            /* the columns at offsets that differ by rounding: compare loosely (kinks) */
            EXPECT(close_gpu(NAME("%s: fused tile [stage %d]: columns", c->name, stage), gcol, col2, Q * p.KC, 1e-3));
        }

        /* inverse index: identical to the CPU's */
        dt_deform_index ic, ig;
        dt_deform_index_build_cpu(&p, nb, om, cws, &ic);
        dt_deform_index_build_cuda(&p, nb, gom, gws, &ig);
        uint32_t *order = malloc(S * 4), *start = malloc((ic.keys + 1) * 4);
        float *wm = malloc(S * 16);
        dt_copy_d2h(order, ig.order, S * 4);
        dt_copy_d2h(start, ig.start, (ic.keys + 1) * 4);
        dt_copy_d2h(wm, ig.wm, S * 16);
        EXPECT_MSG(!memcmp(start, ic.start, (ic.keys + 1) * 4), "%s: index segment starts differ from the CPU's", c->name);
        EXPECT_MSG(!memcmp(order, ic.order, ic.start[ic.keys] * 4), "%s: index order differs from the CPU's", c->name);
        EXPECT(dt_expect_close(NAME("%s: index weights", c->name), wm, ic.wm, S * 4, 1e-6));

        /* gather: dx, and D where written (NaN elsewhere on both sides) */
        float *dxT = malloc(nx * 4), *D = malloc(S * 16), *gdxT = dt_gpu_malloc(nx * 4), *gD = dt_gpu_malloc(S * 16);
        for (int64_t e = 0; e < S * 4; e++) D[e] = NAN;
        dt_memset_gpu(gD, 0xff, S * 16);
        dt_deform_gather_dx_cpu(&p, nb, &ic, xT, dcol, 0.0f, dxT, DT_F32, D);
        dt_deform_gather_dx_cuda(&p, nb, &ig, gx, gdcol, 0.0f, gdxT, DT_F32, gD);
        EXPECT(close_gpu(NAME("%s: gather dx", c->name), gdxT, dxT, nx, 1e-5));
        float *Dg = from_gpu(gD, S * 4);
        int64_t nan_mismatch = 0;
        for (int64_t e = 0; e < S * 4; e++) {
            nan_mismatch += isnan(D[e]) != isnan(Dg[e]);
            if (isnan(D[e])) D[e] = Dg[e] = 0.0f;
        }
        EXPECT_MSG(nan_mismatch == 0, "%s: gather wrote %lld corner dots the CPU did not, or missed them", c->name,
                   (long long)nan_mismatch);
        EXPECT(dt_expect_close(NAME("%s: gather corner dots", c->name), Dg, D, S * 4, 1e-5));
        free(Dg);
        dt_deform_gather_dx_cpu(&p, nb, &ic, xT, dcol, 0.0f, dxT, DT_F32, D); /* D again with its unwritten entries poisoned */

        /* offset gradients from D, both mask conventions */
        float *domc = malloc(Q * p.OCS * 4), *gdomc = dt_gpu_malloc(Q * p.OCS * 4);
        for (int logits = 0; logits < 2; logits++) {
            dt_deform_offset_grads_cpu(&p, nb, om, D, logits, domc);
            dt_memset_gpu(gdomc, 0xff, Q * p.OCS * 4);
            dt_deform_offset_grads_cuda(&p, nb, gom, gD, logits, gdomc);
            EXPECT(close_gpu(NAME("%s: offset grads [logits %d]", c->name, logits), gdomc, domc, Q * p.OCS, 1e-5));
        }

        /* atomics: dx and the offset gradients in one pass */
        float *dxa = calloc(nx, 4);
        dt_deform_scatter_dx_cpu(&p, nb, xT, om, dcol, 1, dxa, domc);
        dt_memset_gpu(gdxT, 0, nx * 4);
        dt_memset_gpu(gdomc, 0xff, Q * p.OCS * 4);
        dt_deform_scatter_dx_cuda(&p, nb, gx, gom, gdcol, 1, gdxT, gdomc);
        EXPECT(close_gpu(NAME("%s: atomic dx", c->name), gdxT, dxa, nx, 1e-5));
        EXPECT(close_gpu(NAME("%s: atomic offset grads", c->name), gdomc, domc, Q * p.OCS, 1e-5));
        EXPECT(dt_expect_close(NAME("%s: atomic dx = gather dx (CPU)", c->name), dxa, dxT, nx, 1e-5));

        /* offset conv backward: weight + bias (beta 0 and 1), input (beta 1 onto dx) */
        float *dw = host_randn(p.OC * p.KC, 1.0f), *db = host_randn(p.OC, 1.0f), *dw0 = malloc(p.OC * p.KC * 4);
        float *db0 = malloc(p.OC * 4), *dx0 = malloc(nx * 4), *gdw = dt_gpu_malloc(p.OC * p.KC * 4), *gdb = dt_gpu_malloc(p.OC * 4);
        memcpy(dw0, dw, p.OC * p.KC * 4);
        memcpy(db0, db, p.OC * 4);
        memcpy(dx0, dxT, nx * 4);
        for (int beta = 0; beta < 2; beta++) {
            float *rw = malloc(p.OC * p.KC * 4), *rb = malloc(p.OC * 4), *rx = malloc(nx * 4);
            memcpy(rw, dw0, p.OC * p.KC * 4);
            memcpy(rb, db0, p.OC * 4);
            memcpy(rx, dx0, nx * 4);
            dt_offconv_bwd_cpu(&p, nb, xT, dom, woff, (float)beta, rw, (float)beta, rb, NULL, (float)beta, rx, NULL);
            for (int tiles = 0; tiles < 2; tiles++) {
                dt_offconv_use_tiles(tiles);
                dt_copy_h2d(gdw, dw0, p.OC * p.KC * 4);
                dt_copy_h2d(gdb, db0, p.OC * 4);
                dt_copy_h2d(gdxT, dx0, nx * 4);
                dt_offconv_bwd_cuda(&p, nb, gx, gdom, gwoff, (float)beta, gdw, (float)beta, gdb, NULL, (float)beta, gdxT, gws);
                EXPECT(close_gpu(NAME("%s: offset conv dW [beta %d tiles %d]", c->name, beta, tiles), gdw, rw, p.OC * p.KC, 1e-5));
                EXPECT(close_gpu(NAME("%s: offset conv db [beta %d tiles %d]", c->name, beta, tiles), gdb, rb, p.OC, 1e-5));
                EXPECT(close_gpu(NAME("%s: offset conv dx [beta %d tiles %d]", c->name, beta, tiles), gdxT, rx, nx, 1e-5));
            }
            dt_offconv_use_tiles(1);
            free(rw);
            free(rb);
            free(rx);
        }
        free(dw0);
        free(db0);
        free(dx0);
#undef NAME
        float *hfree[] = {xT, om, dcol, dom, woff, boff, col, om2, col2, (float *)order, (float *)start, wm, dxT, D, domc, dxa,
                          dw, db};
        for (size_t e = 0; e < sizeof hfree / sizeof *hfree; e++) free(hfree[e]);
        float *gfree[] = {gx, gom, gdcol, gdom, gwoff, gboff, gcol, gom2, gdxT, gD, gdomc, gdw, gdb};
        for (size_t e = 0; e < sizeof gfree / sizeof *gfree; e++) dt_gpu_free(gfree[e]);
        dt_gpu_free(gws);
        free(cws);
    }
}

/* The om pack's CUDA versions against their twins, bit for bit (copies and conversions): om in
 * NaN, each gradient over NaN (beta 0) and over values (beta 1), both wanted and one. */
static void *to_gpu_bytes(const void *h, size_t bytes) {
    void *d = dt_gpu_malloc(bytes ? bytes : 1);
    dt_copy_h2d(d, h, bytes);
    return d;
}
static int gpu_same_bytes(const void *d, const void *h, size_t bytes) {
    void *back = malloc(bytes ? bytes : 1);
    dt_copy_d2h(back, d, bytes);
    int same = !memcmp(back, h, bytes);
    free(back);
    return same;
}

DT_GPU_TEST(gpu_deft_om_pack_bitwise_the_cpu_twin) {
    int64_t bad = 0, runs = 0;
    for (int ci = 0; ci < dt_om_pack_n_cases; ci++) {
        const dt_om_pack_case *c = &dt_om_pack_cases[ci];
        const int64_t nb = c->nb, P = c->P, GK = c->GK, OCS = dt_om_pack_ocs(c), Q = nb * P;
        for (int fo = 0; fo < 4; fo++)
            for (int fm = 0; fm < (c->mask ? 4 : 1); fm++) {
                const dt_deform_field_fmt of = dt_test_field_fmt(fo), mf = dt_test_field_fmt(fm);
                const size_t bytes[2] = {nb * 2 * GK * P * dt_dtype_size(of.dtype), nb * GK * P * dt_dtype_size(mf.dtype)};
                void *off = dt_test_field(nb, 2 * GK, P, of), *mask = c->mask ? dt_test_field(nb, GK, P, mf) : NULL;
                void *goff = to_gpu_bytes(off, bytes[0]), *gmask = mask ? to_gpu_bytes(mask, bytes[1]) : NULL;
                float *om = malloc(Q * OCS * 4), *gom = dt_gpu_malloc(Q * OCS * 4);
                dt_deform_om_pack_cpu(nb, P, GK, OCS, off, of, mask, mf, om);
                dt_memset_gpu(gom, 0xFF, Q * OCS * 4);
                dt_deform_om_pack_cuda(nb, P, GK, OCS, goff, of, gmask, mf, gom);
                if (!gpu_same_bytes(gom, om, Q * OCS * 4)) {
                    bad++;
                    fprintf(stderr, "pack: case %d, formats %d / %d differ\n", ci, fo, fm);
                }
                float *dom = host_randn(Q * OCS, 1.0f), *gdom = to_gpu(dom, Q * OCS);
                for (int beta = 0; beta < 2; beta++)
                    for (int want = 1; want < (mask ? 4 : 2); want++) {
                        void *h[2], *d[2];
                        for (int k = 0; k < 2; k++) {
                            h[k] = k == 0 ? dt_test_field(nb, 2 * GK, P, of) : dt_test_field(nb, GK, P, mf);
                            if (!beta) memset(h[k], 0xFF, bytes[k]);
                            d[k] = to_gpu_bytes(h[k], bytes[k]);
                        }
                        dt_deform_om_unpack_cpu(nb, P, GK, OCS, dom, (want & 1) ? h[0] : NULL, of, (float)beta,
                                                (want & 2) ? h[1] : NULL, mf, (float)beta);
                        dt_deform_om_unpack_cuda(nb, P, GK, OCS, gdom, (want & 1) ? d[0] : NULL, of, (float)beta,
                                                 (want & 2) ? d[1] : NULL, mf, (float)beta);
                        for (int k = 0; k < 2; k++) {
                            if (!gpu_same_bytes(d[k], h[k], bytes[k])) {
                                bad++;
                                fprintf(stderr, "unpack: case %d, formats %d / %d, beta %d, wanted %d: gradient %d differs\n",
                                        ci, fo, fm, beta, want, k);
                            }
                            free(h[k]);
                            dt_gpu_free(d[k]);
                        }
                        runs++;
                    }
                free(off), free(mask), free(om), free(dom);
                dt_gpu_free(goff), dt_gpu_free(gom), dt_gpu_free(gdom);
                if (gmask) dt_gpu_free(gmask);
            }
    }
    EXPECT_EQ_INT(bad, 0);
    EXPECT(runs > 100);
    /* pitched fields: channel slices of wider tensors, read where they lie */
    for (int ci = 0; ci < dt_om_pack_n_cases; ci++) {
        const dt_om_pack_case *c = &dt_om_pack_cases[ci];
        const int64_t nb = c->nb, P = c->P, GK = c->GK, OCS = dt_om_pack_ocs(c), Q = nb * P;
        for (int fo = 0; fo < 4; fo++)
            for (int fm = 0; fm < (c->mask ? 4 : 1); fm++) {
                dt_test_field_slice o = dt_test_field_sliced(nb, 2 * GK, P, dt_test_field_fmt(fo));
                dt_test_field_slice m = dt_test_field_sliced(nb, GK, P, dt_test_field_fmt(fm));
                char *go = to_gpu_bytes(o.wide, o.bytes), *gm = to_gpu_bytes(m.wide, m.bytes);
                const char *gos = go + ((const char *)o.slice - (const char *)o.wide);
                const char *gms = gm + ((const char *)m.slice - (const char *)m.wide);
                float *om = malloc(Q * OCS * 4), *gom = dt_gpu_malloc(Q * OCS * 4);
                dt_deform_om_pack_cpu(nb, P, GK, OCS, o.slice, o.fmt, c->mask ? m.slice : NULL, m.fmt, om);
                dt_memset_gpu(gom, 0xFF, Q * OCS * 4);
                dt_deform_om_pack_cuda(nb, P, GK, OCS, gos, o.fmt, c->mask ? gms : NULL, m.fmt, gom);
                if (!gpu_same_bytes(gom, om, Q * OCS * 4)) {
                    bad++;
                    fprintf(stderr, "pack of slices: case %d, formats %d / %d differ\n", ci, fo, fm);
                }
                free(om), free(o.wide), free(o.dense), free(m.wide), free(m.dense);
                dt_gpu_free(go), dt_gpu_free(gm), dt_gpu_free(gom);
            }
    }
    EXPECT_EQ_INT(bad, 0);
}

#endif /* DT_CUDA */

/* ---- the op against the CPU reference ---- */

typedef struct {
    const dt_deform_case *c;
    dt_deform_mode mode;
    dt_deform_knobs k;
} op_arg;

static dt_tensor *b_op(dt_tensor **in, void *a) {
    op_arg *o = a;
    return dt_deform_conv2d_mode(in[0], in[1], in[2], in[3], in[4], o->c->g, o->c->groups, o->mode, &o->k, DT_MATH_FP32);
}

/* Runs build twice on the GPU with the same inputs; every gradient must match bit for bit. */
static int same_bits_twice(dt_tensor *(*build)(dt_tensor **, void *), void *arg, dt_tensor **in_cpu, int n_in, const char *what) {
    float *first[8] = {0};
    int ok = 1;
    for (int run = 0; run < 2; run++) {
        dt_scope_begin();
        dt_tensor *in[8];
        for (int i = 0; i < n_in; i++) {
            in[i] = in_cpu[i] ? dt_tensor_to(in_cpu[i], DT_GPU) : NULL;
            if (in[i]) in[i]->requires_grad = 1;
        }
        dt_tensor *y = build(in, arg);
        dt_tensor *R = dt_tensor_like(y);
        dt_init_reseed();
        dt_init_normal(R, 0, 1);
        dt_backward_with(y, R);
        for (int i = 0; i < n_in; i++) {
            if (!in[i]) continue;
            float *h = dt_tensor_host_copy(in[i]->grad);
            if (!run) first[i] = h;
            else {
                if (memcmp(h, first[i], in[i]->numel * sizeof(float))) {
                    dt_test_fail(__FILE__, __LINE__, "%s: gradient of input %d differs between two runs", what, i);
                    ok = 0;
                }
                free(h);
                free(first[i]);
            }
        }
        dt_scope_end();
    }
    return ok;
}

DT_GPU_TEST(gpu_deform_op_deterministic_is_bitwise) {
    const dt_deform_case *c;
    for (int i = 0; (c = dt_deform_case_at(DT_DC_KERNELS, i)); i += 3) {
        dt_tensor *in[5];
        dt_test_deform_inputs(c, 0, in);
        op_arg u = {c, DT_DEFORM_UNFUSED, dt_deform_knobs_default()};
        u.k.deterministic = 1;
        EXPECT(same_bits_twice(b_op, &u, in, 5, "unfused deterministic"));
        op_arg d = {c, DT_DEFORM_DEFT, dt_deform_knobs_default()}; /* the gather: deterministic by construction */
        EXPECT(same_bits_twice(b_op, &d, in, 5, "deft (gather)"));
    }
}

/* ---- the layer ---- */

/* The layers' problems: the DT_DC_GPU_LAYER and DT_DC_GPU_RESNET rows of the one table
 * (tests/cases_deform.c): mask is DCNv2 (version 2), off_mean and off_std the offset biases'
 * integer part (init_layer_pair). */

/* std (px) of the input-dependent part of the layers' offsets */
#define OFF_W_STD 0.05f

/* The GPU computes the offsets with its implicit-GEMM offset conv, the CPU with conv2d: they
 * agree to float rounding, not bit for bit. A sample that lands within that rounding of an
 * integer coordinate sits on a kink of bilinear sampling, where its offset gradient jumps, so
 * the offsets are kept away from integers: biases of integer + 0.5 +- 0.15 and an
 * input-dependent part of std OFF_W_STD <= 0.05 px keep every fractional part in ~[0.2, 0.8].
 * (The op-level tests give both sides the same offsets and need no such care.) */
static void init_layer_pair(const dt_deform_case *lc, dt_deform_conv *lc_cpu, dt_deform_conv *lc_gpu) {
    const int version = lc->mask ? 2 : 1;
    dt_deform_conv_init(lc_cpu, NULL, "cpu", lc->c, lc->cout, lc->g, lc->groups, version, lc->bias, 0.0f, DT_CPU, DT_NCHW);
    dt_deform_conv_init(lc_gpu, NULL, "gpu", lc->c, lc->cout, lc->g, lc->groups, version, lc->bias, 0.0f, DT_GPU, DT_NCHW);
    dt_tensor_fill_normal(lc_cpu->weight, dt_test_rng(), 0, 1.0f / sqrtf((float)(lc->c * 9)));
    dt_tensor_fill_normal(lc_cpu->off_weight, dt_test_rng(), 0, OFF_W_STD / sqrtf((float)(lc->c * 9)));
    int64_t n_off = 2 * lc->groups * 9;
    for (int64_t i = 0; i < lc_cpu->off_bias->numel; i++) {
        float v = lc->off_mean + lc->off_std * dt_rng_normal(dt_test_rng());
        dt_data_f32(lc_cpu->off_bias)[i] = i < n_off ? floorf(v) + 0.5f + 0.3f * (dt_rng_uniform(dt_test_rng()) - 0.5f)
                                              : v; /* mask logits: smooth, no kinks */
    }
    if (lc->bias) dt_tensor_fill_normal(lc_cpu->bias, dt_test_rng(), 0, 1);
    dt_tensor_copy(lc_gpu->weight, lc_cpu->weight);
    dt_tensor_copy(lc_gpu->off_weight, lc_cpu->off_weight);
    dt_tensor_copy(lc_gpu->off_bias, lc_cpu->off_bias);
    if (lc->bias) dt_tensor_copy(lc_gpu->bias, lc_cpu->bias);
}

static void free_layer(dt_deform_conv *l) {
    dt_tensor_free(l->weight);
    dt_tensor_free(l->off_weight);
    dt_tensor_free(l->off_bias);
    dt_tensor_free(l->bias);
}

static void zero_grads(dt_deform_conv *l) {
    l->weight->grad_valid = l->off_weight->grad_valid = l->off_bias->grad_valid = 0;
    if (l->bias) l->bias->grad_valid = 0;
}

/* Forward + backward of the CPU reference layer and the GPU layer; output and every gradient. */
static int layer_parity(const dt_deform_case *lc, dt_deform_conv *lcpu, dt_deform_conv *lgpu, const char *what, float tol) {
    int ok = 1;
    char name[256];
    dt_scope_begin();
    zero_grads(lcpu);
    zero_grads(lgpu);
    dt_tensor *x = dt_test_randn4(lc->n, lc->c, lc->h, lc->w, 1.0f), *xg = dt_tensor_to(x, DT_GPU);
    dt_requires_grad(x);
    dt_requires_grad(xg);
    dt_tensor *yc = dt_deform_conv_forward(lcpu, x), *yg = dt_deform_conv_forward(lgpu, xg);
    float *h = dt_tensor_host_copy(yg);
    snprintf(name, sizeof name, "%s: forward", what);
    ok &= dt_expect_close(name, h, yc->data, yc->numel, tol);
    free(h);
    dt_tensor *R = dt_tensor_like(yc);
    dt_tensor_fill_normal(R, dt_test_rng(), 0, 1);
    dt_backward_with(yc, R);
    dt_backward_with(yg, dt_tensor_to(R, DT_GPU));
    dt_tensor *pc[5] = {x, lcpu->weight, lcpu->off_weight, lcpu->off_bias, lcpu->bias};
    dt_tensor *pg[5] = {xg, lgpu->weight, lgpu->off_weight, lgpu->off_bias, lgpu->bias};
    const char *pn[5] = {"input", "weight", "offset weight", "offset bias", "bias"};
    for (int i = 0; i < 5; i++) {
        if (!pc[i]) continue;
        h = dt_tensor_host_copy(pg[i]->grad);
        snprintf(name, sizeof name, "%s: gradient of %s", what, pn[i]);
        ok &= dt_expect_close(name, h, pc[i]->grad->data, pc[i]->numel, tol);
        free(h);
    }
    dt_scope_end();
    return ok;
}

/* The staged / fused kernel's tiles, block swizzle and halos (the automatic halo included) on
 * each layer, against the CPU's unfused layer. (The knobs themselves - dx, fuse_offset, stage,
 * deterministic and their combinations: the deform_deft op cases, tests/cases_deform.c.) */
DT_GPU_TEST(gpu_parity_deft_layer_tiles_and_halos) {
    const dt_deform_case *lc;
    for (int li = 0; (lc = dt_deform_case_at(DT_DC_GPU_LAYER, li)); li++) {
        dt_deform_conv lcpu, lgpu;
        init_layer_pair(lc, &lcpu, &lgpu);
        lgpu.mode = DT_DEFORM_DEFT;
        /* {tile_h, tile_w, swizzle}: tile 0x0 is the automatic one */
        int tiles[5][3] = {{4, 8, 1}, {4, 4, 1}, {16, 4, 1}, {2, 16, 1}, {0, 0, 0}}, halos[3] = {0, 3, -1};
        for (int t = 0; t < 5; t++) {
            lgpu.knobs = dt_deform_knobs_default();
            lgpu.knobs.stage = lgpu.knobs.fuse_offset = 1;
            lgpu.knobs.tile_h = tiles[t][0];
            lgpu.knobs.tile_w = tiles[t][1];
            lgpu.knobs.swizzle = tiles[t][2];
            char what[256];
            snprintf(what, sizeof what, "deft %s [stage+fuse, tile %dx%d, swizzle %d]", lc->name, tiles[t][0],
                     tiles[t][1], tiles[t][2]);
            EXPECT(layer_parity(lc, &lcpu, &lgpu, what, 1e-4f));
        }
        for (int hh = 0; hh < 3; hh++) {
            lgpu.knobs = dt_deform_knobs_default();
            lgpu.knobs.stage = 1;
            lgpu.knobs.halo = halos[hh];
            lgpu.calls = 0;
            char what[256];
            snprintf(what, sizeof what, "deft %s [stage, halo %d]", lc->name, halos[hh]);
            EXPECT(layer_parity(lc, &lcpu, &lgpu, what, 1e-4f));
            if (halos[hh] < 0 && dt_test_verbose()) printf("    auto halo chose %d\n", lgpu.cur_halo);
        }
        free_layer(&lcpu);
        free_layer(&lgpu);
    }
}

/* The layer as a function of (x, weight, off_weight, off_bias); its bias stays its own. */
static dt_tensor *b_layer_own_bias(dt_tensor **in, void *layer) {
    dt_deform_conv *l = layer;
    l->weight = in[1];
    l->off_weight = in[2];
    l->off_bias = in[3];
    return dt_deform_conv_forward(l, in[0]);
}

DT_GPU_TEST(gpu_deft_layer_deterministic_is_bitwise) {
    const dt_deform_case *lc = dt_deform_case_at(DT_DC_GPU_LAYER, 0);
    dt_deform_conv lcpu, lgpu;
    init_layer_pair(lc, &lcpu, &lgpu);
    lgpu.mode = DT_DEFORM_DEFT;
    lgpu.knobs.deterministic = 1;
    dt_tensor *x = dt_test_randn4(lc->n, lc->c, lc->h, lc->w, 1.0f);
    dt_tensor *own[4] = {lgpu.weight, lgpu.off_weight, lgpu.off_bias, lgpu.bias};
    dt_tensor *in[4] = {x, dt_tensor_to(lgpu.weight, DT_CPU), dt_tensor_to(lgpu.off_weight, DT_CPU),
                        dt_tensor_to(lgpu.off_bias, DT_CPU)};
    EXPECT(same_bits_twice(b_layer_own_bias, &lgpu, in, 4, "deft layer deterministic"));
    lgpu.knobs.fuse_offset = lgpu.knobs.stage = 1;
    EXPECT(same_bits_twice(b_layer_own_bias, &lgpu, in, 4, "deft layer deterministic, fuse + stage"));
    lgpu.weight = own[0];
    lgpu.off_weight = own[1];
    lgpu.off_bias = own[2];
    lgpu.bias = own[3];
    free_layer(&lcpu);
    free_layer(&lgpu);
}

DT_GPU_TEST(gpu_deft_zero_offsets_equal_conv2d) {
    dt_deform_conv l;
    dt_conv_geom g = dt_geom(3, 2, 1, 1);
    dt_deform_conv_init(&l, NULL, "z", 16, 8, g, 1, 2, 0, 0.0f, DT_GPU, DT_NCHW);
    l.mode = DT_DEFORM_DEFT;
    dt_tensor_fill(l.off_bias, 0.0f);
    /* mask logits 0 -> sigmoid 0.5: compare with 0.5 * conv2d */
    dt_tensor *x = dt_tensor_to(dt_test_randn4(3, 16, 15, 13, 1.0f), DT_GPU);
    dt_tensor *y = dt_deform_conv_forward(&l, x), *yc = dt_conv2d(x, l.weight, NULL, g, DT_MATH_FP32);
    float *a = dt_tensor_host_copy(y), *b = dt_tensor_host_copy(yc);
    for (int64_t i = 0; i < yc->numel; i++) b[i] *= 0.5f;
    EXPECT(dt_expect_close("deft zero offsets vs 0.5 * conv2d", a, b, yc->numel, 1e-5));
    free(a);
    free(b);
    free_layer(&l);
}

/* deft against unfused on the GPU, forward and backward, on ResNet's l1 and l2a shapes. */
DT_GPU_TEST(gpu_deft_matches_unfused_on_resnet_shapes) {
    const dt_deform_case *lc;
    for (int ci = 0; (lc = dt_deform_case_at(DT_DC_GPU_RESNET, ci)); ci++) {
        dt_deform_conv la, lb;
        init_layer_pair(lc, &lb, &la); /* lb is a CPU layer only for its initial values */
        dt_deform_conv lu;
        dt_deform_conv_init(&lu, NULL, "u", lc->c, lc->cout, lc->g, 1, lc->mask ? 2 : 1, 0, 0.0f, DT_GPU, DT_NCHW);
        dt_tensor_copy(lu.weight, la.weight);
        dt_tensor_copy(lu.off_weight, la.off_weight);
        dt_tensor_copy(lu.off_bias, la.off_bias);
        la.mode = DT_DEFORM_DEFT;
        lu.mode = DT_DEFORM_UNFUSED;
        dt_tensor *x = dt_test_randn4(lc->n, lc->c, lc->h, lc->w, 1.0f);
        dt_tensor *gy = NULL;
        float *res[2][5];
        dt_deform_conv *ls[2] = {&la, &lu};
        for (int m = 0; m < 2; m++) {
            dt_scope_begin();
            zero_grads(ls[m]);
            dt_tensor *xg = dt_tensor_to(x, DT_GPU);
            dt_requires_grad(xg);
            dt_tensor *y = dt_deform_conv_forward(ls[m], xg);
            if (!gy) {
                gy = dt_test_randn4(y->shape[0], y->shape[1], y->shape[2], y->shape[3], 1.0f);
                dt_tensor_keep(gy);
            }
            res[m][0] = dt_tensor_host_copy(y);
            dt_backward_with(y, dt_tensor_to(gy, DT_GPU));
            res[m][1] = dt_tensor_host_copy(xg->grad);
            res[m][2] = dt_tensor_host_copy(ls[m]->weight->grad);
            res[m][3] = dt_tensor_host_copy(ls[m]->off_weight->grad);
            res[m][4] = dt_tensor_host_copy(ls[m]->off_bias->grad);
            dt_scope_end();
        }
        int64_t n[5] = {gy->numel, x->numel, la.weight->numel, la.off_weight->numel, la.off_bias->numel};
        const char *names[5] = {"forward", "dx", "dW", "dW offset", "db offset"};
        for (int i = 0; i < 5; i++) {
            char what[128];
            snprintf(what, sizeof what, "deft vs unfused, %s: %s", lc->name, names[i]);
            EXPECT(dt_expect_close(what, res[0][i], res[1][i], n[i], 1e-4));
            free(res[0][i]);
            free(res[1][i]);
        }
        dt_tensor_free(gy);
        free_layer(&la);
        free_layer(&lb);
        free_layer(&lu);
    }
}

/* A chunk whose column buffer holds more than 2^31 floats (8.6 GB): the deft op with one huge
 * chunk against the same op in the default chunks (64-bit offsets everywhere). */
DT_GPU_TEST(gpu_deft_more_than_2e31_column_elements) {
    const dt_deform_case c = {"huge", 10, 512, 216, 216, 8, {3, 3, 1, 1, 1, 1, 1, 1}, 1, 0, 0, 0.0f, 1.0f};
    int64_t cols = (int64_t)c.n * 216 * 216 * 512 * 9;
    EXPECT(cols > ((int64_t)1 << 31));
    dt_tensor *in[5];
    dt_test_deform_inputs(&c, 0, in);
    for (int i = 0; i < 5; i++)
        if (in[i]) in[i]->requires_grad = 0;
    dt_requires_grad(in[0]);
    dt_requires_grad(in[1]);
    float *res[2][3];
    size_t old = dt_conv_col_budget();
    for (int big = 0; big < 2; big++) {
        dt_conv_set_col_budget(big ? (size_t)cols * 4 + 4096 : old);
        dt_scope_begin();
        dt_tensor *x = dt_tensor_to(in[0], DT_GPU), *off = dt_tensor_to(in[1], DT_GPU), *w = dt_tensor_to(in[3], DT_GPU);
        dt_requires_grad(x);
        dt_requires_grad(off);
        dt_deform_knobs k = dt_deform_knobs_default();
        dt_tensor *y = dt_deform_conv2d_mode(x, off, NULL, w, NULL, c.g, 1, DT_DEFORM_DEFT, &k, DT_MATH_FP32);
        res[big][0] = dt_tensor_host_copy(y); /* before the backward releases it */
        dt_tensor *R = dt_tensor_like(y);
        dt_init_reseed();
        dt_init_normal(R, 0, 1);
        dt_backward_with(y, R);
        res[big][1] = dt_tensor_host_copy(x->grad);
        res[big][2] = dt_tensor_host_copy(off->grad);
        dt_scope_end();
    }
    dt_conv_set_col_budget(old);
    int64_t n[3] = {(int64_t)c.n * c.cout * 216 * 216, in[0]->numel, in[1]->numel};
    const char *names[3] = {"forward", "dx", "d offset"};
    for (int i = 0; i < 3; i++) {
        char what[96];
        snprintf(what, sizeof what, "one 2^31+ chunk vs default chunks: %s", names[i]);
        EXPECT(dt_expect_close(what, res[1][i], res[0][i], n[i], 1e-5));
        free(res[0][i]);
        free(res[1][i]);
    }
}

/* Every device has its own context and memory pool: the op on device 1 (when there is one)
 * against the CPU, then device 0 again. */
DT_GPU_TEST(gpu_deform_on_second_device) {
    if (dt_gpu_count() < 2) {
        printf("    one GPU visible: the second-device check needs two\n");
        return;
    }
    const dt_deform_case *c = dt_deform_case_at(DT_DC_KERNELS, 0);
    dt_tensor *in[5];
    dt_test_deform_inputs(c, 0, in);
    op_arg ref = {c, DT_DEFORM_UNFUSED, dt_deform_knobs_default()};
    op_arg a = {c, DT_DEFORM_DEFT, dt_deform_knobs_default()};
    for (int dev = 1; dev >= 0; dev--) {
        dt_gpu_use(dev);
        EXPECT_EQ_INT(dt_gpu_current(), dev);
        char name[64];
        snprintf(name, sizeof name, "deft op on device %d", dev);
        EXPECT(dt_parity(name, b_op, &ref, &a, 5, in, 2e-5f));
    }
}
