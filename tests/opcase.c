/* The op-case modes (dt_opcase.h). */
#include "tests/dt_opcase.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dt_alloc.h"
#include "core/dt_autograd.h"
#include "tests/dt_check.h"
#include "core/dt_common.h"
#include "core/dt_kernel.h"
#include "core/dt_param.h"
#include "tests/dt_test.h"
#include "core/dt_timer.h"

static const unsigned COMBOS[3] = {DT_F32_NCHW, DT_F32_NHWC, DT_BF16_NHWC};

static dt_dtype combo_dtype(unsigned combo) { return combo == DT_BF16_NHWC ? DT_BF16 : DT_F32; }
static dt_layout combo_layout(unsigned combo) { return combo == DT_F32_NCHW ? DT_NCHW : DT_NHWC; }
static const char *combo_name(unsigned combo) {
    return combo == DT_F32_NCHW ? "f32 nchw" : combo == DT_F32_NHWC ? "f32 nhwc" : "bf16 nhwc";
}

/* The layout the case's kernels are picked by in combination combo: the combination's for
 * 4-D activations (and for an op that makes its output's from other inputs), row-major else. */
static dt_layout pick_layout(const dt_opcase *c, unsigned combo) {
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i].kind == DT_IN_ACT) return c->in[i].ndim == 4 ? combo_layout(combo) : DT_NCHW;
    return combo_layout(combo);
}

/* Whether case c runs combination combo on dev (see dt_opcase.h); a combination its types ask
 * for that its tables lack is skipped, saying so. */
static int runs(const char *table, const dt_opcase *c, unsigned combo, dt_dev dev) {
    if (c->types && !(c->types & combo)) return 0;
    if (!c->ops[0]) return c->types != 0; /* an op without kernels: the combinations written */
    if (combo == DT_F32_NHWC && pick_layout(c, combo) == DT_NCHW) return 0; /* not 4-D: the same as f32 nchw */
    dt_layout layout = pick_layout(c, combo);
    for (int i = 0; i < DT_OPCASE_MAX_OPS && c->ops[i]; i++) {
        const dt_op_table *t = dt_op_table_find(c->ops[i]);
        if (!t) {
            dt_test_fail(__FILE__, __LINE__, "%s / %s: there is no op table \"%s\"", table, c->name, c->ops[i]);
            return 0;
        }
        if (dt_kernel_has(t, dev, combo_dtype(combo), layout)) return 1;
    }
    if (c->types & combo)
        printf("skip  %s / %s (%s): no %s kernel in its op table%s (%s%s%s)\n", table, c->name, combo_name(combo),
               dt_dev_name(dev), c->ops[1] ? "s" : "", c->ops[0], c->ops[1] ? ", " : "", c->ops[1] ? c->ops[1] : "");
    return 0;
}

/* A case's logical input values, drawn once and shared by every combination and device. */
typedef struct {
    float *v[DT_OPCASE_MAX_IN];
} values;

static int64_t in_numel(const dt_opcase_input *in) { return dt_numel(in->ndim, in->shape); }

static values draw(const dt_opcase *c) {
    values vs = {{0}};
    for (int i = 0; i < c->n_in; i++) {
        const dt_opcase_input *in = &c->in[i];
        int64_t n = in_numel(in);
        vs.v[i] = dt_xmalloc((size_t)(n ? n : 1) * sizeof(float));
        float std = in->std > 0 ? in->std : 1.0f;
        if (in->kind == DT_IN_LABELS)
            for (int64_t k = 0; k < n; k++) vs.v[i][k] = (float)dt_rng_below(dt_test_rng(), (uint32_t)std);
        else if (in->kind == DT_IN_U8)
            for (int64_t k = 0; k < n; k++) vs.v[i][k] = (float)dt_rng_below(dt_test_rng(), 256);
        else
            dt_rng_fill_normal(dt_test_rng(), vs.v[i], n, 0.0f, std);
    }
    return vs;
}

static void values_free(const dt_opcase *c, values *vs) {
    for (int i = 0; i < c->n_in; i++) free(vs->v[i]);
}

/* One instance of a case: its inputs on a device in a combination, and what it produced. */
typedef struct {
    const dt_opcase *c;
    dt_dev dev;
    unsigned combo;
    dt_params ps;                      /* the DT_IN_WEIGHT masters */
    dt_tensor *in[DT_OPCASE_MAX_IN];   /* what the op takes */
    dt_tensor *grad_of[DT_OPCASE_MAX_IN]; /* whose gradient is the input's (the master for weights) */
    void *state;
    dt_tensor *out;
} instance;

static void make(instance *t, const dt_opcase *c, const values *vs, dt_dev dev, unsigned combo) {
    memset(t, 0, sizeof *t);
    t->c = c;
    t->dev = dev;
    t->combo = combo;
    dt_dtype dtype = combo_dtype(combo);
    dt_layout layout = combo_layout(combo);
    for (int i = 0; i < c->n_in; i++) {
        const dt_opcase_input *in = &c->in[i];
        dt_layout l = in->ndim == 4 ? layout : DT_NCHW;
        dt_tensor *x = NULL;
        switch (in->kind) {
        case DT_IN_ACT: x = dt_tensor_from_values(in->ndim, in->shape, dev, dtype, l, vs->v[i]); break;
        case DT_IN_F32: x = dt_tensor_from_values(in->ndim, in->shape, dev, DT_F32, DT_NCHW, vs->v[i]); break;
        case DT_IN_LABELS: x = dt_tensor_from_values(in->ndim, in->shape, dev, DT_I32, DT_NCHW, vs->v[i]); break;
        case DT_IN_U8: x = dt_tensor_from_values(in->ndim, in->shape, dev, DT_U8, DT_NCHW, vs->v[i]); break;
        case DT_IN_WEIGHT: {
            char name[32];
            snprintf(name, sizeof name, "input%d", i);
            dt_tensor *m = dt_param_new(&t->ps, name, in->ndim, in->shape, dev, l, 1);
            dt_tensor_set_values(m, vs->v[i]);
            t->grad_of[i] = m;
            if (dtype == DT_BF16) {
                x = dt_param_make_work(&t->ps, m);
                dt_params_refresh_work(&t->ps);
            } else {
                x = m;
            }
            if (!in->grad) m->requires_grad = x->requires_grad = 0;
            break;
        }
        }
        if (in->kind != DT_IN_WEIGHT) {
            t->grad_of[i] = x;
            if (in->grad) dt_requires_grad(x);
        }
        t->in[i] = x;
    }
    if (c->state_new) t->state = c->state_new(c, dev, layout);
}

static void unmake(instance *t) {
    if (t->state && t->c->state_free) t->c->state_free(t->state);
    dt_params_free(&t->ps);
}

/* The case's op on inputs in (of combination combo). */
static dt_tensor *apply(const dt_opcase *c, dt_tensor **in, void *state, unsigned combo) {
    if (c->build_as) return c->build_as(c, in, combo_dtype(combo), combo_layout(combo));
    return c->build(c, in, state);
}

/* Forward, then backward from R (logical values, drawn by the caller) when anything needs a
 * gradient. */
static void run(instance *t, const float *R) {
    t->out = apply(t->c, t->in, t->state, t->combo);
    t->out->retain = 1; /* compared after the backward, which would free it */
    if (R && t->out->requires_grad) {
        dt_tensor *r = dt_tensor_from_values(t->out->ndim, t->out->shape, t->dev, t->out->dtype, t->out->layout, R);
        dt_backward_with(t->out, r);
    }
}

static float *grad_values(const instance *t, int i) {
    const dt_tensor *g = t->grad_of[i] ? t->grad_of[i]->grad : NULL;
    return g ? dt_tensor_host_copy(g) : NULL;
}

static float *draw_R(const dt_tensor *out) {
    float *R = dt_xmalloc((size_t)(out->numel ? out->numel : 1) * sizeof(float));
    dt_rng_fill_normal(dt_test_rng(), R, out->numel, 0.0f, 1.0f);
    return R;
}

/* The output's size for R (and *numel, when asked): one forward without recording (its state
 * changes are undone by making the instance again). */
static float *probe_R(const instance *t, int64_t *numel) {
    dt_set_grad_enabled(0);
    dt_tensor *out = apply(t->c, (dt_tensor **)t->in, t->state, t->combo);
    dt_set_grad_enabled(1);
    if (numel) *numel = out->numel;
    return draw_R(out);
}

static int any_grad(const dt_opcase *c) {
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i].grad) return 1;
    return 0;
}

/* Every element within elem_tol of the tensor's largest magnitude (0: not checked): the relative
 * L2 error alone would let one badly wrong element of a large tensor pass. */
static int close_everywhere(const char *what, const float *got, const float *want, int64_t n, double elem_tol) {
    if (elem_tol <= 0) return 1;
    double amax = 0, worst = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) amax = fmax(amax, fabs(want[i]));
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (d > worst || isnan(d)) worst = isnan(d) ? INFINITY : d, at = i;
    }
    if (worst <= elem_tol * amax) return 1;
    dt_test_fail(__FILE__, __LINE__, "%s: element %lld is off by %.3g, more than %.2g of the largest |value| %.3g (got %.7g, want %.7g)",
                 what, (long long)at, worst, elem_tol, amax, got[at], want[at]);
    return 0;
}

/* Output and gradients of two instances of one case: rel err <= tol each, and every element
 * within elem_tol of its tensor's largest magnitude. */
static int compare(const char *what, const instance *got, const instance *want, double tol, double elem_tol) {
    int ok = 1;
    char label[256];
    float *g = dt_tensor_host_copy(got->out), *w = dt_tensor_host_copy(want->out);
    snprintf(label, sizeof label, "%s: forward", what);
    ok &= dt_expect_close(label, g, w, want->out->numel, tol);
    ok &= close_everywhere(label, g, w, want->out->numel, elem_tol);
    free(g);
    free(w);
    for (int i = 0; i < want->c->n_in; i++) {
        if (!want->c->in[i].grad) continue;
        float *gg = grad_values(got, i), *wg = grad_values(want, i);
        snprintf(label, sizeof label, "%s: gradient of input %d", what, i);
        if (!gg || !wg) {
            dt_test_fail(__FILE__, __LINE__, "%s: no gradient (%s)", label, gg ? "reference" : "under test");
            ok = 0;
        } else {
            ok &= dt_expect_close(label, gg, wg, in_numel(&want->c->in[i]), tol);
            ok &= close_everywhere(label, gg, wg, in_numel(&want->c->in[i]), elem_tol);
        }
        free(gg);
        free(wg);
    }
    return ok;
}

/* ---- gradcheck ---- */

typedef struct {
    const dt_opcase *c;
    void *state;
    unsigned combo;
} build_arg;

static dt_tensor *build_for_gradcheck(dt_tensor **in, void *a) {
    build_arg *b = a;
    return apply(b->c, in, b->state, b->combo);
}

int dt_opcase_run_gradcheck(const char *table, const dt_opcase *cases, int n) {
    int failed = 0;
    for (int k = 0; k < n; k++) {
        const dt_opcase *c = &cases[k];
        if (c->grad_tol < 0 || !any_grad(c)) continue;
        for (int j = 0; j < 2; j++) { /* the f32 combinations */
            if (!runs(table, c, COMBOS[j], DT_CPU)) continue;
            dt_scope_begin();
            values vs = draw(c);
            instance t;
            make(&t, c, &vs, DT_CPU, COMBOS[j]);
            /* the gradcheck perturbs the tensors it is given: the masters of weights */
            dt_tensor *in[DT_OPCASE_MAX_IN];
            for (int i = 0; i < c->n_in; i++) in[i] = c->in[i].kind == DT_IN_WEIGHT ? t.grad_of[i] : t.in[i];
            build_arg a = {c, t.state, COMBOS[j]};
            dt_gradcheck_opts o = {.h = c->h, .tol = c->grad_tol};
            char name[256];
            snprintf(name, sizeof name, "%s / %s (%s)", table, c->name, combo_name(COMBOS[j]));
            if (!dt_gradcheck(name, build_for_gradcheck, &a, c->n_in, in, &o)) failed++;
            unmake(&t);
            values_free(c, &vs);
            dt_scope_end();
        }
    }
    return failed;
}

/* ---- bf16 against f32 ---- */

int dt_opcase_run_bf16(const char *table, const dt_opcase *cases, int n) {
    int failed = 0;
    for (int k = 0; k < n; k++) {
        const dt_opcase *c = &cases[k];
        if (c->bf16_bound < 0 || !runs(table, c, DT_BF16_NHWC, DT_CPU)) continue;
        unsigned ref_combo = runs(table, c, DT_F32_NCHW, DT_CPU) ? DT_F32_NCHW : DT_F32_NHWC;
        if (ref_combo == DT_F32_NHWC && !runs(table, c, ref_combo, DT_CPU)) continue;
        dt_scope_begin();
        values vs = draw(c);
        instance ref, bf;
        make(&ref, c, &vs, DT_CPU, ref_combo);
        make(&bf, c, &vs, DT_CPU, DT_BF16_NHWC);
        int64_t nR = 0;
        float *R = probe_R(&ref, &nR);
        /* Both backwards start from the same upstream gradient, bf16 values (the bf16 instance
         * could take no other): the comparison measures the op's rounding, not that of R. With
         * R in f32 on the reference side, a gradient that is a plain sum of R (a bias over a
         * few positions, whose terms cancel) can be off by more than any bound for a seed, and
         * nothing of the op's is wrong (CI, seed 2411661178: conv 2x3 s2x1's bias, rel 0.06). */
        for (int64_t i = 0; i < nR; i++) R[i] = dt_bf16_to_float(dt_bf16_from_float(R[i]));
        unmake(&ref);
        make(&ref, c, &vs, DT_CPU, ref_combo);
        run(&ref, R);
        run(&bf, R);
        char what[256];
        snprintf(what, sizeof what, "%s / %s (bf16 vs %s)", table, c->name, combo_name(ref_combo));
        double bound = c->bf16_bound > 0 ? c->bf16_bound : 1.0 / 64;
        int ok = compare(what, &bf, &ref, bound, 4 * bound); /* an element may be 4x the bound off */
        if (bf.out->dtype != DT_BF16 && bf.out->dtype != DT_F32) {
            dt_test_fail(__FILE__, __LINE__, "%s: output dtype %s", what, dt_dtype_name(bf.out->dtype));
            ok = 0;
        }
        float *a = dt_tensor_host_copy(bf.out), *b = dt_tensor_host_copy(ref.out);
        int differs = 0;
        for (int64_t i = 0; i < ref.out->numel && !differs; i++) differs = a[i] != b[i];
        if (!differs) {
            dt_test_fail(__FILE__, __LINE__, "%s: the bf16 output equals the f32 one bit for bit: bf16 never ran", what);
            ok = 0;
        }
        free(a);
        free(b);
        failed += !ok;
        free(R);
        unmake(&ref);
        unmake(&bf);
        values_free(c, &vs);
        dt_scope_end();
    }
    return failed;
}

/* ---- GPU parity (and perf) ---- */

static void perf(const char *table, const dt_opcase *c, const values *vs, unsigned combo, const float *R) {
    double ms[20];
    for (int rep = -3; rep < 20; rep++) {
        dt_scope_begin();
        instance t;
        make(&t, c, vs, DT_GPU, combo);
        dt_gpu_sync();
        double t0 = dt_now_ms();
        run(&t, any_grad(c) ? R : NULL);
        dt_gpu_sync();
        if (rep >= 0) ms[rep] = dt_now_ms() - t0;
        unmake(&t);
        dt_scope_end();
    }
    for (int i = 1; i < 20; i++) /* insertion sort: the median */
        for (int j = i; j > 0 && ms[j] < ms[j - 1]; j--) {
            double x = ms[j];
            ms[j] = ms[j - 1];
            ms[j - 1] = x;
        }
    printf("perf  %-14s %-44s %-9s %9.4f ms (fwd+bwd, median of 20)\n", table, c->name, combo_name(combo), ms[10]);
}

int dt_opcase_run_parity(const char *table, const dt_opcase *cases, int n) {
    int failed = 0;
    for (int k = 0; k < n; k++) {
        const dt_opcase *c = &cases[k];
        for (int j = 0; j < 3; j++) {
            unsigned combo = COMBOS[j];
            if (!runs(table, c, combo, DT_CPU) || !runs(table, c, combo, DT_GPU)) continue;
            dt_scope_begin();
            values vs = draw(c);
            instance cpu, gpu;
            make(&cpu, c, &vs, DT_CPU, combo);
            make(&gpu, c, &vs, DT_GPU, combo);
            float *R = any_grad(c) ? probe_R(&cpu, NULL) : NULL;
            unmake(&cpu);
            make(&cpu, c, &vs, DT_CPU, combo);
            run(&cpu, R);
            run(&gpu, R);
            char what[256];
            snprintf(what, sizeof what, "%s / %s (%s)", table, c->name, combo_name(combo));
            double tol = combo == DT_BF16_NHWC ? (c->bf16_tol > 0 ? c->bf16_tol : 1e-2) : (c->f32_tol > 0 ? c->f32_tol : 1e-5);
            failed += !compare(what, &gpu, &cpu, tol, 0.0);
            unmake(&cpu);
            unmake(&gpu);
            if (dt_test_perf()) perf(table, c, &vs, combo, R);
            free(R);
            values_free(c, &vs);
            dt_scope_end();
        }
    }
    return failed;
}
