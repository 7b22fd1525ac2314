/* The C API on the GPU against the same calls on the CPU (.device DT_DEFORM_API_CPU, which
 * test_deform_api_numeric.c checks against the definition): weight groups through every path,
 * f64 (and that its kernels reproduce their bits), the empty batch. Every output buffer starts
 * as NaN bytes, so an element the GPU does not write fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/deform_api_testutil.h"
#include "core/dt_alloc.h"
#include "tests/dt_test.h"

/* The path on the GPU against itself on the CPU, within the path's tolerance: f32's rounding,
 * bf16's (the sums' order differs), f64's. */
static void parity(const dt_api_case *c, const dt_api_path *cpu) {
    dt_api_problem pr;
    dt_api_problem_make(&pr, c);
    dt_api_path gpu = *cpu;
    gpu.device = DT_DEFORM_API_CUDA;
    dt_api_result want, got;
    char what[200];
    snprintf(what, sizeof what, "%s, %s: GPU against CPU", c->name, cpu->name);
    if (!dt_api_run(&pr, cpu, &want) && !dt_api_run(&pr, &gpu, &got)) {
        dt_api_expect_close(what, &pr, &got, &want, cpu->tol);
        dt_api_result_free(&got);
    }
    dt_api_result_free(&want);
    dt_api_problem_free(&pr);
}

DT_GPU_TEST(gpu_deform_api_weight_groups_match_cpu) {
    for (int ci = 0; ci < dt_api_n_group_cases; ci++)
        for (int pi = 0; pi < dt_api_n_paths; pi++)
            parity(&dt_api_group_cases[ci], &dt_api_paths[pi]);
}

static int same_bits(const dt_api_problem *pr, const dt_api_result *a, const dt_api_result *b) {
    int ok = !memcmp(a->y, b->y, (size_t)pr->ny * sizeof(double));
    for (int i = 0; i < DT_API_NIN; i++)
        if (pr->in[i]) ok &= !memcmp(a->g[i], b->g[i], (size_t)pr->len[i] * sizeof(double));
    return ok;
}

DT_GPU_TEST(gpu_deform_api_f64_matches_cpu_bit_for_bit_run_to_run) {
    for (int ci = 0; ci < dt_api_n_f64_cases; ci++) {
        /* the same arithmetic on both (deform_f64.h), but for contractions into fused multiply-adds */
        parity(&dt_api_f64_cases[ci], &dt_api_f64_path);
        dt_api_problem pr;
        dt_api_problem_make(&pr, &dt_api_f64_cases[ci]);
        dt_api_path gpu = dt_api_f64_path;
        gpu.device = DT_DEFORM_API_CUDA;
        dt_api_result r1, r2;
        if (!dt_api_run(&pr, &gpu, &r1) && !dt_api_run(&pr, &gpu, &r2)) {
            EXPECT_MSG(same_bits(&pr, &r1, &r2), "%s: two f64 GPU runs differ", dt_api_f64_cases[ci].name);
            dt_api_result_free(&r2);
        }
        dt_api_result_free(&r1);
        dt_api_problem_free(&pr);
    }
}

/* An empty batch on the GPU: nothing but the parameter gradients, zeroed in NaN-filled memory. */
DT_GPU_TEST(gpu_deform_api_empty_batch) {
    for (int f64 = 0; f64 < 2; f64++) {
        int dt = f64 ? DT_DEFORM_API_F64 : DT_F32;
        size_t es = f64 ? sizeof(double) : sizeof(float), nw = 4 * 3 * 9;
        dt_deform_desc d = {.n = 0, .c = 6, .h = 9, .w = 9, .cout = 4, .kh = 3, .kw = 3, .stride_h = 1, .stride_w = 1,
                            .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1, .offset_groups = 1, .has_mask = 1,
                            .has_bias = 1, .size = (int)sizeof d, .dtype = dt, .weight_dtype = dt,
                            .offset_dtype = dt, .mask_dtype = dt, .weight_groups = 2};
        void *w = dt_gpu_malloc(nw * es), *b = dt_gpu_malloc(4 * es), *gw = dt_gpu_malloc(nw * es);
        void *gb = dt_gpu_malloc(4 * es);
        dt_memset_gpu(gw, 0xFF, nw * es);
        dt_memset_gpu(gb, 0xFF, 4 * es);
        EXPECT_EQ_INT(dt_deform_api_forward(&d, 1, NULL, NULL, NULL, w, b, NULL, NULL), 0);
        EXPECT_EQ_INT(dt_deform_api_backward(&d, 1, NULL, NULL, NULL, w, NULL, NULL, NULL, NULL, gw, gb, NULL), 0);
        unsigned char hw[4 * 3 * 9 * 8], hb[4 * 8], zeros[sizeof hw] = {0};
        dt_copy_d2h(hw, gw, nw * es);
        dt_copy_d2h(hb, gb, 4 * es);
        EXPECT_MSG(!memcmp(hw, zeros, nw * es) && !memcmp(hb, zeros, 4 * es), "%s: gradients not zeroed",
                   f64 ? "f64" : "f32");
        dt_gpu_free(w);
        dt_gpu_free(b);
        dt_gpu_free(gw);
        dt_gpu_free(gb);
    }
}
