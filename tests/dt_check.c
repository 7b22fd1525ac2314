#include "tests/dt_check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dt_autograd.h"
#include "core/dt_common.h"
#include "tests/dt_test.h"

double dt_rel_err(const float *got, const float *want, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(got[i]) || isnan(want[i]) || isinf(got[i])) return INFINITY;
        double d = (double)got[i] - want[i];
        num += d * d;
        den += (double)want[i] * want[i];
    }
    return sqrt(num) / fmax(sqrt(den), 1e-30);
}

int dt_expect_close(const char *what, const float *got, const float *want, int64_t n, double tol) {
    double e = dt_rel_err(got, want, n);
    if (e <= tol) {
        if (dt_test_verbose()) printf("    %s: rel err %.3g (tol %.1g)\n", what, e, tol);
        return 1;
    }
    int64_t worst = 0, nans = 0;
    double wd = -1;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(got[i]) || isinf(got[i])) { if (!nans++) worst = i; wd = INFINITY; continue; }
        double d = fabs((double)got[i] - want[i]);
        if (d > wd) { wd = d; worst = i; }
    }
    dt_test_fail(__FILE__, __LINE__, "%s: rel err %.3g > tol %.1g over %lld elements; %lld NaN/inf; worst at %lld: got %.7g want %.7g",
                 what, e, tol, (long long)n, (long long)nans, (long long)worst, got[worst], want[worst]);
    return 0;
}

dt_tensor *dt_test_randn(int ndim, const int64_t *shape, float std) {
    dt_tensor *t = dt_tensor_new(ndim, shape, DT_CPU);
    dt_tensor_fill_normal(t, dt_test_rng(), 0.0f, std);
    return t;
}

dt_tensor *dt_test_randn4(int64_t n, int64_t c, int64_t h, int64_t w, float std) {
    int64_t s[4] = {n, c, h, w};
    return dt_test_randn(4, s, std);
}

/* L = sum(out * R) in double, with gradients off; frees what the build made. */
static double loss_at(dt_build_fn f, void *arg, dt_tensor **in, const float *R) {
    dt_scope_begin();
    int g = dt_grad_enabled();
    dt_set_grad_enabled(0);
    dt_tensor *out = f(in, arg);
    dt_set_grad_enabled(g);
    double L = 0;
    const float *od = dt_data_f32(out);
    for (int64_t i = 0; i < out->numel; i++) L += (double)od[i] * R[i];
    dt_scope_end();
    return L;
}

int dt_gradcheck(const char *name, dt_build_fn f, void *arg, int n_in, dt_tensor **in,
                 const dt_gradcheck_opts *opts) {
    float h = opts && opts->h > 0 ? opts->h : 1e-2f;
    float tol = opts && opts->tol > 0 ? opts->tol : 1e-2f;
    int max_checks = opts && opts->max_checks > 0 ? opts->max_checks : 48;
    int ok = 1;

    /* Analytic gradients. */
    for (int i = 0; i < n_in; i++)
        if (in[i] && in[i]->grad) { dt_tensor_free(in[i]->grad); in[i]->grad = NULL; }
    dt_scope_begin();
    dt_tensor *out = f(in, arg);
    if (!out->requires_grad) {
        dt_test_fail(__FILE__, __LINE__, "%s: output does not require grad (no node recorded)", name);
        dt_scope_end();
        return 0;
    }
    int64_t n_out = out->numel;
    float *R = dt_xmalloc(n_out * sizeof(float));
    dt_rng_fill_normal(dt_test_rng(), R, n_out, 0.0f, 1.0f);
    /* The forward runs in float32: each output carries a rounding error of about
     * FLT_EPSILON * |out|, so L(x +- h) carries ~FLT_EPSILON * ||out * R|| and the central
     * difference ~that / 2h. Four times this estimate is allowed on top of the relative
     * tolerance, so that small gradients are not failed for float32 noise. */
    double l2 = 0;
    const float *od = dt_data_f32(out);
    for (int64_t i = 0; i < n_out; i++) l2 += (double)od[i] * R[i] * od[i] * R[i];
    double noise = 4.0 * 1.1920929e-7 * sqrt(l2) / (2.0 * h);
    /* R is in out's storage order (its layout), like the sum in loss_at. */
    dt_tensor *Rt = dt_tensor_like(out);
    dt_tensor_upload(Rt, R);
    dt_backward_with(out, Rt);
    dt_scope_end();

    for (int i = 0; i < n_in; i++) {
        dt_tensor *x = in[i];
        if (!x || !x->requires_grad) continue;
        if (!x->grad) {
            dt_test_fail(__FILE__, __LINE__, "%s: input %d received no gradient", name, i);
            ok = 0;
            continue;
        }
        float *ana = dt_data_f32(x->grad), *xd = dt_data_f32(x);
        double amax = 0;
        for (int64_t k = 0; k < x->numel; k++) amax = fmax(amax, fabs(ana[k]));
        int checks = x->numel < max_checks ? (int)x->numel : max_checks;
        double worst = 0;
        for (int c = 0; c < checks; c++) {
            int64_t k = x->numel <= max_checks ? c : (int64_t)dt_rng_below(dt_test_rng(), (uint32_t)x->numel);
            float orig = xd[k];
            float xp = orig + h, xm = orig - h;
            xd[k] = xp;
            double Lp = loss_at(f, arg, in, R);
            xd[k] = xm;
            double Lm = loss_at(f, arg, in, R);
            xd[k] = orig;
            double num = (Lp - Lm) / ((double)xp - (double)xm);
            double scale = fmax(fmax(fabs(num), fabs(ana[k])), 0.01 * amax);
            double err = scale > 0 ? fabs(num - ana[k]) / scale : 0;
            if (err > worst) worst = err;
            if (fabs(num - ana[k]) > tol * scale + noise) {
                if (ok) /* report the first bad element of this op in full */
                    dt_test_fail(__FILE__, __LINE__, "%s: d/d(input %d)[%lld]: analytic %.7g, numeric %.7g (rel err %.3g > %.1g)",
                                 name, i, (long long)k, ana[k], num, err, tol);
                ok = 0;
            }
        }
        if (dt_test_verbose()) printf("    %s input %d: %d elements, worst rel err %.3g (noise allowance %.2g)\n", name, i, checks, worst, noise);
    }
    free(R);
    return ok;
}

int dt_parity(const char *name, dt_build_fn f, void *arg_cpu, void *arg_gpu, int n_in,
              dt_tensor **in_cpu, float tol) {
    int ok = 1;
    dt_tensor *in_gpu[16];
    if (n_in > 16) dt_fatal("dt_parity: too many inputs");
    for (int i = 0; i < n_in; i++) {
        in_gpu[i] = NULL;
        if (!in_cpu[i]) continue;
        if (in_cpu[i]->grad) { dt_tensor_free(in_cpu[i]->grad); in_cpu[i]->grad = NULL; }
        in_gpu[i] = dt_tensor_to(in_cpu[i], DT_GPU);
        in_gpu[i]->requires_grad = in_cpu[i]->requires_grad;
    }
    dt_tensor *yc = f(in_cpu, arg_cpu);
    dt_tensor *yg = f(in_gpu, arg_gpu ? arg_gpu : arg_cpu);
    if (!dt_same_shape(yc, yg)) {
        dt_test_fail(__FILE__, __LINE__, "%s: output shapes differ between CPU and GPU", name);
        return 0;
    }
    char what[160];
    float *hg = dt_tensor_host_copy(yg), *hc = dt_tensor_host_copy(yc);
    snprintf(what, sizeof what, "%s: forward", name);
    ok &= dt_expect_close(what, hg, hc, yc->numel, tol);
    free(hg);
    free(hc);
    if (yc->requires_grad) {
        dt_tensor *R = dt_tensor_like(yc);
        dt_tensor_fill_normal(R, dt_test_rng(), 0.0f, 1.0f);
        dt_tensor *Rg = dt_tensor_to(R, DT_GPU);
        dt_backward_with(yc, R);
        dt_backward_with(yg, Rg);
        for (int i = 0; i < n_in; i++) {
            if (!in_cpu[i] || !in_cpu[i]->requires_grad) continue;
            if (!in_cpu[i]->grad || !in_gpu[i]->grad) {
                dt_test_fail(__FILE__, __LINE__, "%s: input %d got no gradient on the %s", name, i, in_cpu[i]->grad ? "GPU" : "CPU");
                ok = 0;
                continue;
            }
            float *g = dt_tensor_host_copy(in_gpu[i]->grad), *gc = dt_tensor_host_copy(in_cpu[i]->grad);
            snprintf(what, sizeof what, "%s: gradient of input %d", name, i);
            ok &= dt_expect_close(what, g, gc, in_cpu[i]->numel, tol);
            free(g);
            free(gc);
        }
    }
    return ok;
}
