/* deform_testutil.h: shared helpers of the deformable tests (CPU and GPU). */
#ifndef DT_DEFORM_TESTUTIL_H
#define DT_DEFORM_TESTUTIL_H

#include "conv_geom.h"
#include "dt_tensor.h"

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
/* The deformable convolution written out from the definition, in double (the oracle). */
void dt_test_deform_direct(const dt_deform_case *c, const float *x, const float *off, const float *mask, const float *w,
                           const float *bias, int64_t Ho, int64_t Wo, float *y);

#endif
