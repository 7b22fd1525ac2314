/* deform_api_testutil.h: the deformable C API's tests' shared parts (CPU and GPU): a problem in
 * double, the definition it is checked against (with weight groups), finite differences, and
 * one run of forward + backward through the C API in any format on either device. */
#ifndef DT_DEFORM_API_TESTUTIL_H
#define DT_DEFORM_API_TESTUTIL_H

#include <stdint.h>

#include "ops/conv/conv_geom.h"
#include "ops/deform/dt_deform_api.h"

typedef struct {
    const char *name;
    int n, c, h, w, cout;
    dt_conv_geom g;
    int G, WG, mask, bias; /* offset groups, weight groups, DCNv2, bias */
} dt_api_case;

/* The inputs, in the order of their gradients. */
enum { DT_API_X, DT_API_OFF, DT_API_MASK, DT_API_W, DT_API_B, DT_API_NIN };

/* A problem's values, logical NCHW, in double (each is a bf16 value, so every format holds it
 * exactly): x ~ N(0, 1), offsets ~ N(0, 1.5) with every fractional part in [0.15, 0.85] (away
 * from bilinear sampling's kinks at integers), mask ~ U(-0.5, 1) (negative too, as
 * torchvision's tests draw it), weight [cout, c/WG, kh, kw] ~ N(0, 1/(c/WG*K)), bias ~ N(0, 1),
 * grad_y ~ N(0, 1). Absent mask / bias: NULL. */
typedef struct {
    dt_api_case c;
    int ho, wo;
    int64_t len[DT_API_NIN], ny;
    double *in[DT_API_NIN], *gy;
} dt_api_problem;

void dt_api_problem_make(dt_api_problem *pr, const dt_api_case *c);
void dt_api_problem_free(dt_api_problem *pr);

/* How a run hands the tensors to the API: mode (| flags), device, x's dtype / layout
 * (DT_DEFORM_API_F64: every tensor double NCHW), the weight's, the offsets' and mask's; tol: its
 * relative error against an exact result (f32's rounding, or bf16's where a result is bf16);
 * sliced: offsets and mask as channels [0, 2GK) and [2GK, 3GK) of one tensor of 3GK + 1 channels
 * (2GK + 1 without a mask), the offset conv's output a DCNv2 layer slices, passed with their
 * pitches (their gradients dense). */
typedef struct {
    const char *name;
    int mode, device;
    int dtype, layout, wdtype, wlayout, odtype, olayout;
    double tol;
    int sliced;
} dt_api_path;

/* The tests' problems: weight groups of several sizes (also torchvision's test geometry) with
 * offset groups, masks, biases or not; the f64 gradient checks' problems. */
extern const dt_api_case dt_api_group_cases[];
extern const int dt_api_n_group_cases;
extern const dt_api_case dt_api_f64_cases[];
extern const int dt_api_n_f64_cases;
/* The CPU paths: f32 in both modes and layouts (weights and offsets in either layout,
 * deterministic too), then bf16 ones; and the f64 path. */
extern const dt_api_path dt_api_paths[];
extern const int dt_api_n_paths;
extern const dt_api_path dt_api_f64_path;

/* y and every gradient, logical NCHW in double (NULL where the input is absent). */
typedef struct {
    double *y, *g[DT_API_NIN];
} dt_api_result;

/* Forward, then backward with the problem's grad_y, through the C API on the path's device and
 * formats; every output buffer starts as NaN bytes (an element the call does not write shows).
 * 0, or -1 after a failed EXPECT with the API's message. Empty tensors are passed as NULL. */
int dt_api_run(const dt_api_problem *pr, const dt_api_path *path, dt_api_result *r);
void dt_api_result_free(dt_api_result *r);

/* The definition, written out in double from torchvision's: y [n, cout, ho, wo]. */
void dt_api_direct(const dt_api_problem *pr, void *ctx, double *y);

/* Gradients of L = sum(grad_y * y) by central differences with step h of fwd (which reads the
 * problem's inputs, perturbed here one element at a time): exact up to rounding for every input,
 * since y is linear in x, mask, weight and bias and, between kinks, bilinear - linear along each
 * coordinate - in the offsets. */
typedef void dt_api_fwd(const dt_api_problem *pr, void *ctx, double *y);
void dt_api_fd(dt_api_problem *pr, dt_api_fwd *fwd, void *ctx, double h, double *g[DT_API_NIN]);

/* ||got - want|| / ||want|| (||want|| floored at 1e-30); NaN anywhere gives +inf. */
double dt_api_rel(const double *got, const double *want, int64_t n);
/* EXPECTs y and every gradient of got within tol of want (rel); 1 when all are. */
int dt_api_expect_close(const char *what, const dt_api_problem *pr, const dt_api_result *got,
                        const dt_api_result *want, double tol);

#endif
