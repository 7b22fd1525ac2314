/* deform_testutil.h: shared helpers of the deformable tests (CPU and GPU). */
#ifndef DT_DEFORM_TESTUTIL_H
#define DT_DEFORM_TESTUTIL_H

#include "ops/conv/conv_geom.h"
#include "core/dt_tensor.h"

typedef struct {
    const char *name;
    int64_t n, c, h, w, cout;
    dt_conv_geom g;
    int groups, mask, bias;
    float off_mean, off_std; /* offsets ~ off_mean + N(0, off_std) */
} dt_deform_case;

/* Offsets for a case, with every sample coordinate's fractional part kept in [0.15, 0.85]
 * (away from the kinks of bilinear sampling at integers) when avoid_kinks is set. */
dt_tensor *dt_test_offsets(const dt_deform_case *c, int64_t Ho, int64_t Wo, int avoid_kinks);
/* The op's five inputs for a case, each wanting a gradient: x ~ N(0, 1), offsets as
 * dt_test_offsets, mask ~ U(0.1, 1) (or NULL), weight ~ N(0, 1/(C*K)), bias ~ N(0, 1) (or NULL). */
void dt_test_deform_inputs(const dt_deform_case *c, int avoid_kinks, dt_tensor **in);
/* The dt_deform_conv layer as a function of its input and parameters, for dt_gradcheck: in[1..4]
 * (weight, off_weight, off_bias, bias) are put into the layer `layer` (a dt_deform_conv *),
 * whose forward then runs on in[0] (x). */
dt_tensor *dt_test_deform_layer_forward(dt_tensor **in, void *layer);
/* The deformable convolution written out from the definition, in double (the oracle). */
void dt_test_deform_direct(const dt_deform_case *c, const float *x, const float *off, const float *mask, const float *w,
                           const float *bias, int64_t Ho, int64_t Wo, float *y);

#endif
