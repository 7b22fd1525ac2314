/* dt_check.h: the two checks every op goes through (after ggml's test-backend-ops).
 *
 * dt_gradcheck: finite differences on the CPU twin. L = sum(out * R) for a fixed random R;
 *   the analytic gradient of each input comes from the tape (dt_backward_with(out, R)); the
 *   numeric one is (L(x+h) - L(x-h)) / 2h per checked element, with L accumulated and the
 *   difference taken in float64 (the op itself runs in float32, its CPU twin accumulating in
 *   double where it sums). An element passes when
 *        |num - ana| <= tol * max(|num|, |ana|, 0.01 * max_j |ana_j|) + noise
 *   i.e. a relative error, floored at 1 % of the input's largest gradient so that entries
 *   near zero are judged on the scale of the tensor, plus the float32 rounding noise of the
 *   difference itself (noise = 4 * FLT_EPSILON * ||out * R|| / 2h, printed with -v). The tests state their tol (1e-2 unless
 *   an op's nonlinearity needs more) and h.
 *
 * dt_parity: the same op on the GPU and on the CPU with identical inputs; outputs and every
 *   input gradient must agree to ||gpu - cpu|| / ||cpu|| <= tol with no NaN (device memory is
 *   poisoned with NaN in the GPU runner, so an element a kernel forgot to write fails).
 */
#ifndef DT_CHECK_H
#define DT_CHECK_H

#include "core/dt_tensor.h"

/* Builds the op under test from its inputs; arg carries the op's parameters. */
typedef dt_tensor *(*dt_build_fn)(dt_tensor **in, void *arg);

typedef struct {
    float h;          /* finite-difference step (default 1e-2) */
    float tol;        /* see above (default 1e-2) */
    int max_checks;   /* elements checked per input (default 48; all if fewer) */
} dt_gradcheck_opts;

/* Inputs are CPU tensors; those with requires_grad set are checked. Returns 1 on pass. */
int dt_gradcheck(const char *name, dt_build_fn f, void *arg, int n_in, dt_tensor **in,
                 const dt_gradcheck_opts *opts);

/* arg_gpu is passed when building on the GPU (ops with state, like batchnorm, keep a copy
 * per device); NULL means the same arg. Returns 1 on pass. */
int dt_parity(const char *name, dt_build_fn f, void *arg_cpu, void *arg_gpu, int n_in,
              dt_tensor **in_cpu, float tol);

/* ||got - want|| / ||want|| in double (||want|| floored at 1e-30); NaN anywhere gives +inf. */
double dt_rel_err(const float *got, const float *want, int64_t n);
/* EXPECTs rel_err <= tol, printing the worst element when it fails. */
int dt_expect_close(const char *what, const float *got, const float *want, int64_t n, double tol);
/* A CPU tensor with N(0, std) entries from the test RNG. */
dt_tensor *dt_test_randn(int ndim, const int64_t *shape, float std);
dt_tensor *dt_test_randn4(int64_t n, int64_t c, int64_t h, int64_t w, float std);

#endif
