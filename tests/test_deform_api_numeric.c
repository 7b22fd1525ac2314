/* The C API's numerics on the CPU (.device DT_DEFORM_API_CPU): weight groups through every
 * format and mode against the definition (tests/deform_api_testutil.c, with gradients by
 * finite differences of it), and the f64 path against finite differences of itself and against
 * the f32 and bf16 paths (the cases and paths: deform_api_testutil.c). The same on the GPU
 * against these: test_deform_api_gpu.c. */
#include <stdio.h>
#include <stdlib.h>

#include "tests/deform_api_testutil.h"
#include "tests/dt_test.h"

/* The definition's y and its gradients by central differences. */
static void reference(dt_api_problem *pr, dt_api_result *ref) {
    ref->y = calloc((size_t)pr->ny + 1, sizeof(double));
    dt_api_direct(pr, NULL, ref->y);
    for (int i = 0; i < DT_API_NIN; i++) ref->g[i] = pr->in[i] ? calloc((size_t)pr->len[i] + 1, sizeof(double)) : NULL;
    dt_api_fd(pr, dt_api_direct, NULL, 1e-3, ref->g);
}

DT_TEST(deform_api_cpu_weight_groups_match_the_definition) {
    for (int ci = 0; ci < dt_api_n_group_cases; ci++) {
        dt_api_problem pr;
        dt_api_problem_make(&pr, &dt_api_group_cases[ci]);
        dt_api_result ref;
        reference(&pr, &ref);
        char what[200];
        for (int pi = 0; pi < dt_api_n_paths; pi++) {
            const dt_api_path *path = &dt_api_paths[pi];
            dt_api_result got;
            snprintf(what, sizeof what, "%s, %s", dt_api_group_cases[ci].name, path->name);
            if (!dt_api_run(&pr, path, &got)) dt_api_expect_close(what, &pr, &got, &ref, path->tol);
            dt_api_result_free(&got);
        }
        dt_api_result_free(&ref);
        dt_api_problem_free(&pr);
    }
}

/* The f64 path as a forward for the finite differences. */
static void f64_forward(const dt_api_problem *pr, void *ctx, double *y) {
    dt_api_result r;
    if (!dt_api_run(pr, ctx, &r))
        for (int64_t i = 0; i < pr->ny; i++) y[i] = r.y[i];
    dt_api_result_free(&r);
}

/* gradcheck in double, as torch.autograd.gradcheck does it with float64 tensors: the f64 path's
 * gradients against central differences of its own forward, and its forward against the
 * definition; then the f32 path against it, within f32's rounding. */
DT_TEST(deform_api_cpu_f64_gradcheck_and_f32_agreement) {
    for (int ci = 0; ci < dt_api_n_f64_cases; ci++) {
        const dt_api_case *cs = &dt_api_f64_cases[ci];
        dt_api_problem pr;
        dt_api_problem_make(&pr, cs);
        dt_api_result got, def, fd = {0};
        char what[200];
        snprintf(what, sizeof what, "f64 %s", cs->name);
        if (dt_api_run(&pr, &dt_api_f64_path, &got)) {
            dt_api_problem_free(&pr);
            continue;
        }
        def.y = calloc((size_t)pr.ny + 1, sizeof(double));
        dt_api_direct(&pr, NULL, def.y);
        double e = dt_api_rel(got.y, def.y, pr.ny);
        EXPECT_MSG(e <= 1e-13, "%s: y against the definition: rel err %.3g", what, e);
        fd.y = got.y; /* the finite differences check the gradients alone */
        for (int i = 0; i < DT_API_NIN; i++) fd.g[i] = pr.in[i] ? calloc((size_t)pr.len[i] + 1, sizeof(double)) : NULL;
        dt_api_fd(&pr, f64_forward, (void *)&dt_api_f64_path, 1e-3, fd.g);
        dt_api_expect_close(what, &pr, &got, &fd, 1e-7);
        for (int pi = 0; pi < dt_api_n_paths; pi++) {
            const dt_api_path *path = &dt_api_paths[pi];
            dt_api_result lower;
            snprintf(what, sizeof what, "%s: %s against f64", cs->name, path->name);
            if (!dt_api_run(&pr, path, &lower)) dt_api_expect_close(what, &pr, &lower, &got, path->tol);
            dt_api_result_free(&lower);
        }
        fd.y = NULL;
        dt_api_result_free(&fd);
        free(def.y);
        dt_api_result_free(&got);
        dt_api_problem_free(&pr);
    }
}
