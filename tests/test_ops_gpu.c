/* GPU parity of the foundation ops: each CUDA op against its CPU twin on fresh random
 * inputs, forward and every input gradient, with device memory poisoned by the runner. */
#include <stdlib.h>

#include "dt_alloc.h"
#include "dt_check.h"
#include "dt_ops.h"
#include "dt_test.h"
#include "gemm.h"

static dt_tensor *b_add(dt_tensor **in, void *a) { (void)a; return dt_add(in[0], in[1]); }
static dt_tensor *b_mul(dt_tensor **in, void *a) { (void)a; return dt_mul(in[0], in[1]); }
static dt_tensor *b_relu(dt_tensor **in, void *a) { (void)a; return dt_relu(in[0]); }
static dt_tensor *b_sigmoid(dt_tensor **in, void *a) { (void)a; return dt_sigmoid(in[0]); }
static dt_tensor *b_add_relu(dt_tensor **in, void *a) { (void)a; return dt_add_relu(in[0], in[1]); }
static dt_tensor *b_sum(dt_tensor **in, void *a) { (void)a; return dt_sum(in[0]); }
static dt_tensor *b_mean(dt_tensor **in, void *a) { (void)a; return dt_mean(in[0]); }
static dt_tensor *b_matmul(dt_tensor **in, void *a) { (void)a; return dt_matmul(in[0], in[1]); }
static dt_tensor *b_linear(dt_tensor **in, void *a) { (void)a; return dt_linear(in[0], in[1], in[2]); }
static dt_tensor *b_slice(dt_tensor **in, void *a) { (void)a; return dt_slice_channels(in[0], 1, 4); }

DT_GPU_TEST(gpu_parity_pointwise_and_reductions) {
    /* An odd size so that no kernel gets away with assuming multiples of the block. */
    dt_tensor *a = dt_test_randn4(3, 5, 7, 11, 1.0f), *b = dt_test_randn4(3, 5, 7, 11, 1.0f);
    dt_requires_grad(a);
    dt_requires_grad(b);
    dt_tensor *in[2] = {a, b};
    EXPECT(dt_parity("add", b_add, NULL, NULL, 2, in, 1e-6f));
    EXPECT(dt_parity("mul", b_mul, NULL, NULL, 2, in, 1e-6f));
    EXPECT(dt_parity("relu", b_relu, NULL, NULL, 1, in, 1e-6f));
    EXPECT(dt_parity("sigmoid", b_sigmoid, NULL, NULL, 1, in, 1e-6f));
    EXPECT(dt_parity("add_relu", b_add_relu, NULL, NULL, 2, in, 1e-6f));
    EXPECT(dt_parity("sum", b_sum, NULL, NULL, 1, in, 1e-6f));
    EXPECT(dt_parity("mean", b_mean, NULL, NULL, 1, in, 1e-6f));
    EXPECT(dt_parity("slice_channels", b_slice, NULL, NULL, 1, in, 1e-6f));
    /* A large sum: 10M elements through the two-stage reduction. */
    dt_tensor *big = dt_test_randn4(10, 1000, 1, 1000, 1.0f);
    EXPECT(dt_parity("sum (10M)", b_sum, NULL, NULL, 1, &big, 1e-6f));
}

DT_GPU_TEST(gpu_parity_matmul_linear) {
    int64_t sa[2] = {67, 129}, sb[2] = {129, 45}, sw[2] = {33, 129}, sbias[1] = {33};
    dt_tensor *a = dt_test_randn(2, sa, 1.0f), *b = dt_test_randn(2, sb, 1.0f);
    dt_tensor *w = dt_test_randn(2, sw, 1.0f), *bias = dt_test_randn(1, sbias, 1.0f);
    dt_requires_grad(a);
    dt_requires_grad(b);
    dt_requires_grad(w);
    dt_requires_grad(bias);
    dt_tensor *in[2] = {a, b};
    EXPECT(dt_parity("matmul", b_matmul, NULL, NULL, 2, in, 1e-5f));
    dt_tensor *in3[3] = {a, w, bias};
    EXPECT(dt_parity("linear", b_linear, NULL, NULL, 3, in3, 1e-5f));
}

#ifdef DT_CUDA /* calls the CUDA kernels directly */
DT_GPU_TEST(gpu_gemm_all_transposes_and_batched) {
    int64_t M = 70, N = 93, K = 131;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int64_t sa[2] = {M, K}, sb[2] = {K, N}, sc[2] = {M, N};
            dt_tensor *A = dt_test_randn(2, sa, 1), *B = dt_test_randn(2, sb, 1), *C = dt_test_randn(2, sc, 1);
            dt_tensor *Ag = dt_tensor_to(A, DT_GPU), *Bg = dt_tensor_to(B, DT_GPU), *Cg = dt_tensor_to(C, DT_GPU);
            dt_gemm_cpu(ta, tb, M, N, K, 0.7f, A->data, ta ? M : K, B->data, tb ? K : N, 0.3f, C->data, N);
            dt_gemm_cuda(ta, tb, M, N, K, 0.7f, Ag->data, ta ? M : K, Bg->data, tb ? K : N, 0.3f, Cg->data, N);
            float *h = dt_tensor_host_copy(Cg);
            EXPECT(dt_expect_close("gemm", h, C->data, M * N, 1e-5));
            free(h);
        }
    /* Strided batched: 5 products against the CPU one at a time. */
    int64_t cnt = 5, sa[3] = {cnt, M, K}, sb[3] = {cnt, K, N}, sc[3] = {cnt, M, N};
    dt_tensor *A = dt_test_randn(3, sa, 1), *B = dt_test_randn(3, sb, 1), *C = dt_tensor_new(3, sc, DT_CPU);
    dt_tensor *Ag = dt_tensor_to(A, DT_GPU), *Bg = dt_tensor_to(B, DT_GPU), *Cg = dt_tensor_new(3, sc, DT_GPU);
    for (int64_t i = 0; i < cnt; i++)
        dt_gemm_cpu(0, 0, M, N, K, 1.0f, A->data + i * M * K, K, B->data + i * K * N, N, 0.0f, C->data + i * M * N, N);
    dt_gemm_batched_cuda(0, 0, M, N, K, 1.0f, Ag->data, K, M * K, Bg->data, N, K * N, 0.0f, Cg->data, N, M * N, cnt);
    float *h = dt_tensor_host_copy(Cg);
    EXPECT(dt_expect_close("gemm batched", h, C->data, cnt * M * N, 1e-5));
    free(h);
}

#endif

DT_GPU_TEST(gpu_poison_is_on) {
    /* The runner poisons device memory; a fresh block must read as NaN, not zero. */
    dt_tensor *t = dt_tensor_new1(DT_GPU, 1000);
    float *h = dt_tensor_host_copy(t);
    int nans = 0;
    for (int i = 0; i < 1000; i++) nans += isnan(h[i]);
    EXPECT_EQ_INT(nans, 1000);
    free(h);
}
