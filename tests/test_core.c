/* Foundation tests: tensors, scopes, autograd bookkeeping, .npy I/O, RNG, thread pool. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dt_autograd.h"
#include "tests/dt_check.h"
#include "core/dt_npy.h"
#include "ops/dt_layers.h"
#include "ops/dt_ops.h"
#include "core/dt_parallel.h"
#include "core/dt_param.h"
#include "tests/dt_test.h"
#include "ops/linear/gemm.h"

DT_TEST(tensor_create_view_copy) {
    dt_tensor *t = dt_tensor_new4(DT_CPU, 2, 3, 4, 5);
    EXPECT_EQ_INT(t->numel, 120);
    EXPECT_EQ_INT(t->ndim, 4);
    for (int i = 0; i < 120; i++) dt_data_f32(t)[i] = (float)i;
    int64_t s[2] = {6, 20};
    dt_tensor *v = dt_tensor_view(t, 2, s);
    EXPECT(v->data == t->data);
    EXPECT_EQ_INT(v->shape[1], 20);
    dt_tensor *c = dt_tensor_to(t, DT_CPU);
    EXPECT(c->data != t->data);
    EXPECT_NEAR(dt_data_f32(c)[119], 119.0, 0);
    char buf[64];
    EXPECT(!strcmp(dt_shape_str(t, buf, sizeof buf), "[2, 3, 4, 5]"));
}

DT_TEST(tensor_scope_frees_and_keep_detaches) {
    dt_scope_begin();
    dt_tensor *a = dt_tensor_new1(DT_CPU, 10);
    dt_tensor *b = dt_tensor_new1(DT_CPU, 10);
    dt_tensor_keep(b);
    EXPECT(a->scoped);
    EXPECT(!b->scoped);
    dt_scope_end();
    dt_data_f32(b)[9] = 1.0f; /* still alive: caller-owned */
    dt_tensor_free(b);
}

static void bad_add(void *arg) {
    (void)arg;
    dt_tensor *a = dt_tensor_new4(DT_CPU, 2, 3, 4, 5), *b = dt_tensor_new4(DT_CPU, 2, 3, 5, 4);
    dt_add(a, b);
}
static void bad_view(void *arg) {
    (void)arg;
    int64_t s[1] = {7};
    dt_tensor_view(dt_tensor_new1(DT_CPU, 6), 1, s);
}
static void bad_matmul(void *arg) {
    (void)arg;
    dt_matmul(dt_tensor_new2(DT_CPU, 3, 4), dt_tensor_new2(DT_CPU, 5, 6), DT_MATH_FP32);
}

DT_TEST(shape_mismatch_is_a_clear_error) {
    EXPECT_DEATH(bad_add, NULL, "add: shape mismatch: [2, 3, 4, 5] vs [2, 3, 5, 4]");
    EXPECT_DEATH(bad_view, NULL, "cannot view [6] (6 elements) as [7]");
    EXPECT_DEATH(bad_matmul, NULL, "matmul: inner dimensions differ: [3, 4] x [5, 6]");
}

static void released_use(void *arg) {
    (void)arg;
    dt_tensor *x = dt_tensor_new1(DT_CPU, 4);
    dt_tensor_fill(x, 1.0f);
    dt_requires_grad(x);
    dt_tensor *y = dt_relu(x);
    dt_tensor_set_name(y, "relu_out");
    dt_backward(dt_sum(y));
    dt_relu(y); /* y's data was released after backward */
}

DT_TEST(autograd_releases_activations_after_backward) {
    EXPECT_DEATH(released_use, NULL, "relu_out was already released");
}

DT_TEST(autograd_accumulates_reused_tensor) {
    /* y = x*x + x: dy/dx = 2x + 1, x used three times. */
    dt_tensor *x = dt_test_randn4(1, 1, 2, 3, 1.0f);
    dt_requires_grad(x);
    dt_tensor *y = dt_add(dt_mul(x, x), x);
    dt_backward(dt_sum(y));
    for (int i = 0; i < 6; i++) EXPECT_NEAR(dt_data_f32(x->grad)[i], 2 * dt_data_f32(x)[i] + 1, 1e-6);
    EXPECT_EQ_INT(dt_tape_size(), 0);
}

DT_TEST(autograd_no_grad_records_nothing) {
    dt_tensor *x = dt_test_randn4(1, 1, 2, 3, 1.0f);
    dt_requires_grad(x);
    dt_set_grad_enabled(0);
    dt_tensor *y = dt_relu(x);
    dt_set_grad_enabled(1);
    EXPECT(!y->requires_grad);
    EXPECT_EQ_INT(dt_tape_size(), 0);
}

DT_TEST(autograd_param_grads_overwrite_after_zero_grad) {
    dt_params ps = {0};
    int64_t s[1] = {4};
    dt_tensor *w = dt_param_new(&ps, "w", 1, s, DT_CPU, DT_NCHW, 1);
    dt_tensor_fill(w, 2.0f);
    for (int step = 0; step < 3; step++) {
        dt_params_zero_grad(&ps);
        dt_scope_begin();
        dt_backward(dt_sum(dt_mul(w, w)));
        dt_scope_end();
        EXPECT_NEAR(dt_data_f32(w->grad)[0], 4.0, 1e-6); /* not 8 or 12: zero_grad means overwrite */
    }
    /* Without zero_grad the gradients accumulate. */
    dt_scope_begin();
    dt_backward(dt_sum(w));
    dt_scope_end();
    EXPECT_NEAR(dt_data_f32(w->grad)[3], 5.0, 1e-6);
    dt_params_free(&ps);
}

/* A version 1.0 .npy file with the header dict `dict` (padded as numpy pads it) and `n` bytes
 * of data; returns its path. */
static const char *write_npy(const char *name, const char *dict, const void *data, size_t n) {
    static char path[600];
    snprintf(path, sizeof path, "%s/%s", dt_test_tmpdir(), name);
    char hdr[256];
    size_t hl = (size_t)snprintf(hdr, sizeof hdr, "%s", dict);
    while ((10 + hl + 1) % 64) hdr[hl++] = ' ';
    hdr[hl++] = '\n';
    FILE *f = fopen(path, "wb");
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    unsigned char len[2] = {(unsigned char)hl, (unsigned char)(hl >> 8)};
    fwrite(len, 1, 2, f);
    fwrite(hdr, 1, hl, f);
    if (n) fwrite(data, 1, n, f);
    fclose(f);
    return path;
}

DT_TEST(npy_roundtrip_and_bad_files) {
    char path[600], err_path[600];
    snprintf(path, sizeof path, "%s/a.npy", dt_test_tmpdir());
    dt_tensor *t = dt_test_randn4(2, 3, 4, 5, 1.0f);
    dt_err err;
    EXPECT_EQ_INT(dt_npy_save(path, t, &err), 0);
    dt_tensor *u = dt_npy_load(path, DT_CPU, &err);
    EXPECT(u && dt_same_shape(t, u));
    if (u) EXPECT(!memcmp(t->data, u->data, t->numel * sizeof(float)));
    /* Truncated data. */
    FILE *f = fopen(path, "rb");
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    snprintf(err_path, sizeof err_path, "%s/trunc.npy", dt_test_tmpdir());
    f = fopen(err_path, "wb");
    fwrite(buf, 1, n - 8, f);
    fclose(f);
    EXPECT(dt_npy_load(err_path, DT_CPU, &err) == NULL);
    EXPECT_MSG(strstr(err.msg, "truncated data"), "message: %s", err.msg);
    /* Wrong dtype. */
    double d[2] = {1, 2};
    EXPECT(dt_npy_load(write_npy("f8.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", d, sizeof d),
                       DT_CPU, &err) == NULL);
    EXPECT_MSG(strstr(err.msg, "dtype is '<f8'"), "message: %s", err.msg);
    /* Not a npy file at all; missing file. */
    snprintf(err_path, sizeof err_path, "%s/text.npy", dt_test_tmpdir());
    f = fopen(err_path, "w");
    fputs("hello world, not numpy\n", f);
    fclose(f);
    EXPECT(dt_npy_load(err_path, DT_CPU, &err) == NULL);
    EXPECT_MSG(strstr(err.msg, "bad magic"), "message: %s", err.msg);
    EXPECT(dt_npy_load("/nonexistent/x.npy", DT_CPU, &err) == NULL);
    EXPECT_MSG(strstr(err.msg, "cannot open /nonexistent/x.npy"), "message: %s", err.msg);
}

DT_TEST(npy_crafted_headers_are_errors_not_exits) {
    /* Each of these made the old reader allocate from the header (and exit when that failed) or
     * load a wrapped element count as an empty tensor; all must come back as errors. */
    float four[4] = {1, 2, 3, 4};
    dt_err err;
    struct {
        const char *dict, *needle;
    } cases[] = {
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }", "more than 2^63 elements"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }",
         "header promises 1000000000000 floats, file holds 4"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", "malformed shape"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (-4,), }", "malformed shape"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", "4 bytes after the 3 floats"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 4), }", "more than 8 dimensions"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4", "malformed shape"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        dt_tensor *t = dt_npy_load(write_npy("c.npy", cases[i].dict, four, sizeof four), DT_CPU, &err);
        EXPECT_MSG(t == NULL, "case %zu was accepted", i);
        if (!t) EXPECT_MSG(strstr(err.msg, cases[i].needle), "case %zu: %s", i, err.msg);
    }
    /* header lengths past the end of the file (versions 1 and 2) */
    unsigned char v1[] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0xff, 0xff, '{'};
    unsigned char v2[] = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0xff, 0xff, 0xff, 0xff, '{'};
    EXPECT(dt_npy_parse(v1, sizeof v1, "v1", DT_CPU, &err) == NULL);
    EXPECT_MSG(strstr(err.msg, "truncated header (65535 bytes announced, 1 in the file)"), "%s", err.msg);
    EXPECT(dt_npy_parse(v2, sizeof v2, "v2", DT_CPU, &err) == NULL);
    EXPECT_MSG(strstr(err.msg, "truncated header (4294967295 bytes announced"), "%s", err.msg);
    EXPECT(dt_npy_parse(v2, 9, "short", DT_CPU, &err) == NULL);
    EXPECT_MSG(strstr(err.msg, "truncated header"), "%s", err.msg);
    /* a folder is not a file */
    EXPECT(dt_npy_load(dt_test_tmpdir(), DT_CPU, &err) == NULL);
    EXPECT_MSG(strstr(err.msg, "is a folder"), "%s", err.msg);
    /* and the numel helper itself */
    int64_t s[2] = {(int64_t)1 << 62, 4};
    EXPECT_EQ_INT(dt_numel(2, s), -1);
    s[1] = 0;
    EXPECT_EQ_INT(dt_numel(2, s), 0);
}

DT_TEST(rng_streams_are_reproducible) {
    dt_rng a, b;
    dt_rng_derive(&a, 7, 3, 11);
    dt_rng_derive(&b, 7, 3, 11);
    for (int i = 0; i < 100; i++) EXPECT(dt_rng_u64(&a) == dt_rng_u64(&b));
    dt_rng_derive(&b, 7, 3, 12);
    EXPECT(dt_rng_u64(&a) != dt_rng_u64(&b));
    /* Moments of the normal generator. */
    double s = 0, s2 = 0;
    for (int i = 0; i < 100000; i++) {
        double v = dt_rng_normal(&a);
        s += v;
        s2 += v * v;
    }
    EXPECT_NEAR(s / 1e5, 0.0, 0.02);
    EXPECT_NEAR(s2 / 1e5, 1.0, 0.02);
    uint32_t counts[5] = {0};
    for (int i = 0; i < 50000; i++) counts[dt_rng_below(&a, 5)]++;
    for (int i = 0; i < 5; i++) EXPECT_NEAR(counts[i], 10000, 400);
}

static void square_range(void *ctx, int64_t b, int64_t e) {
    int64_t *v = ctx;
    for (int64_t i = b; i < e; i++) v[i] = i * i;
}

DT_TEST(parallel_for_covers_every_index) {
    int64_t v[10007];
    memset(v, -1, sizeof v);
    dt_parallel_for(10007, 100, square_range, v);
    int bad = 0;
    for (int64_t i = 0; i < 10007; i++) bad += v[i] != i * i;
    EXPECT_EQ_INT(bad, 0);
}

/* op(A) op(B) of every transpose against a double-precision loop, with every kernel this CPU
 * has (gemm_cpu.c: base, avx2, avx512): M, N and K cut tiles, panels and K panels at their
 * edges, and a lopsided weight-gradient shape (16 rows, K >> N) spreads over the threads. */
static void check_gemm_shape(const char *isa, int64_t M, int64_t N, int64_t K, float alpha, float beta) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            float *A = malloc(M * K * 4), *B = malloc(K * N * 4), *C = malloc(M * N * 4), *R = malloc(M * N * 4);
            dt_rng_fill_normal(dt_test_rng(), A, M * K, 0, 1);
            dt_rng_fill_normal(dt_test_rng(), B, K * N, 0, 1);
            dt_rng_fill_normal(dt_test_rng(), C, M * N, 0, 1);
            if (beta == 0.0f)
                for (int64_t i = 0; i < M * N; i++) C[i] = NAN; /* beta == 0 overwrites */
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    double s = 0;
                    for (int64_t k = 0; k < K; k++)
                        s += (double)(ta ? A[k * M + i] : A[i * K + k]) * (tb ? B[j * K + k] : B[k * N + j]);
                    R[i * N + j] = (float)(alpha * s + (beta == 0.0f ? 0.0 : beta * (double)C[i * N + j]));
                }
            dt_gemm_cpu(ta, tb, M, N, K, alpha, A, ta ? M : K, B, tb ? K : N, beta, C, N);
            char what[96];
            snprintf(what, sizeof what, "gemm %s %lldx%lldx%lld ta=%d tb=%d", isa, (long long)M, (long long)N,
                     (long long)K, ta, tb);
            dt_expect_close(what, C, R, M * N, 1e-5);
            free(A); free(B); free(C); free(R);
        }
}

DT_TEST(gemm_cpu_matches_naive_all_transposes) {
    const char *was = dt_gemm_cpu_isa();
    static const char *const isas[] = {"base", "avx2", "avx512"};
    for (int k = 0; k < 3; k++) {
        if (!dt_gemm_cpu_use(isas[k])) continue;
        check_gemm_shape(isas[k], 37, 53, 301, 0.5f, 2.0f);
        check_gemm_shape(isas[k], 16, 147, 1100, 1.0f, 0.0f);
        check_gemm_shape(isas[k], 3, 5, 2, 1.0f, 1.0f);
    }
    EXPECT(dt_gemm_cpu_use(was));
}

DT_TEST(autograd_backward_leaves_other_graphs_alone) {
    /* Two independent graphs on one tape: backward through the first must not touch the
     * second, which then backpropagates on its own. */
    dt_tensor *a = dt_test_randn4(1, 1, 1, 5, 1.0f), *b = dt_test_randn4(1, 1, 1, 5, 1.0f);
    dt_requires_grad(a);
    dt_requires_grad(b);
    dt_tensor *la = dt_sum(dt_mul(a, a));
    dt_tensor *lb = dt_sum(dt_mul(b, b));
    EXPECT_EQ_INT(dt_tape_size(), 4);
    dt_backward(la);
    EXPECT_EQ_INT(dt_tape_size(), 2);
    EXPECT(b->grad == NULL);
    dt_backward(lb);
    EXPECT_EQ_INT(dt_tape_size(), 0);
    for (int i = 0; i < 5; i++) {
        EXPECT_NEAR(dt_data_f32(a->grad)[i], 2 * dt_data_f32(a)[i], 1e-6);
        EXPECT_NEAR(dt_data_f32(b->grad)[i], 2 * dt_data_f32(b)[i], 1e-6);
    }
}

/* A node whose output is freed before any backward reaches it leaves the tape (a later backward
 * of another graph does not touch freed memory: ASan in CI would say so); a node whose input is
 * freed stops the backward that reaches it, naming the op. */
DT_TEST(freed_tensors_leave_the_tape) {
    dt_scope_begin();
    dt_tensor *x = dt_tensor_new1(DT_CPU, 4);
    dt_tensor_fill(x, 2.0f);
    dt_requires_grad(x);
    int before = dt_tape_size();
    dt_tensor *unused = dt_relu(x); /* recorded, never reached */
    dt_tensor_free(unused);
    dt_tensor *y = dt_sum(dt_relu(x));
    dt_backward(y);
    EXPECT_EQ_INT(dt_tape_size(), before);
    EXPECT_NEAR(dt_data_f32(x->grad)[3], 1.0f, 0.0f);
    dt_scope_end();
}

/* An inner scope that ends before any backward frees a node's saved buffer (maxpool's argmax
 * indices, made after its output) before the node's output: the node forgets the buffer when it
 * goes, and freeing the output then does not read it (ASan in CI would say so). */
DT_TEST(an_inner_scope_ending_before_the_backward_frees_its_saved_buffers_cleanly) {
    dt_scope_begin();
    dt_tensor *x = dt_tensor_new4(DT_CPU, 1, 2, 4, 4);
    for (int64_t i = 0; i < x->numel; i++) dt_data_f32(x)[i] = (float)((i * 7) % 11);
    dt_requires_grad(x);
    const int before = dt_tape_size();
    dt_scope_begin();
    dt_tensor *y = dt_maxpool2d(x, 2, 2, 0);
    EXPECT_EQ_INT(dt_tape_size(), before + 1);
    EXPECT(y->node != NULL);
    dt_scope_end();
    /* the tape still works for another graph of x */
    dt_tensor *z = dt_sum(dt_relu(x));
    dt_backward(z);
    EXPECT_NEAR(dt_data_f32(x->grad)[5], 1.0f, 0.0f);
    dt_scope_end();
}

static void backward_through_freed_input(void *arg) {
    (void)arg;
    dt_tensor *x = dt_tensor_new1(DT_CPU, 4);
    dt_tensor_fill(x, 2.0f);
    dt_requires_grad(x);
    dt_tensor *h = dt_relu(x);
    dt_tensor *y = dt_sum(h); /* reads h */
    dt_tensor_keep(h);
    dt_tensor_free(h);
    dt_backward(y);
}

DT_TEST(backward_through_a_freed_input_is_a_clear_error) {
    EXPECT_DEATH(backward_through_freed_input, NULL, "backward: sum reads an input that was freed before the backward");
}
