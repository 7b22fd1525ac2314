/* The GPU's GEMM wrappers against the CPU's (every transpose, strided batched), and the
 * runner's poisoning of device memory. (Each op against its CPU twin: its op-case table,
 * tests/cases_*.c.) */
#include <stdlib.h>

#include "core/dt_alloc.h"
#include "tests/dt_check.h"
#include "ops/dt_ops.h"
#include "tests/dt_test.h"
#include "ops/linear/gemm.h"

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
        dt_gemm_cpu(0, 0, M, N, K, 1.0f, dt_data_f32(A) + i * M * K, K, dt_data_f32(B) + i * K * N, N, 0.0f, dt_data_f32(C) + i * M * N, N);
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
