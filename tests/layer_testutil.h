/* layer_testutil.h: the conv2d and pooling fixtures shared by the CPU (finite differences)
 * and GPU (parity) layer tests. */
#ifndef DT_LAYER_TESTUTIL_H
#define DT_LAYER_TESTUTIL_H

#include "dt_layers.h"

typedef struct {
    dt_conv_geom g;
} conv_arg;

/* The op under test, as a dt_build_fn: in = {x, w, bias}. */
static inline dt_tensor *dt_test_build_conv(dt_tensor **in, void *a) {
    return dt_conv2d(in[0], in[1], in[2], ((conv_arg *)a)->g);
}

typedef struct {
    const char *name;
    int64_t n, cin, h, w, cout;
    dt_conv_geom g;
    int bias;
} conv_case;

typedef struct {
    int k, s, p;
} pool_arg;

static inline dt_tensor *dt_test_build_maxpool(dt_tensor **in, void *a) {
    pool_arg *p = a;
    return dt_maxpool2d(in[0], p->k, p->s, p->p);
}

static inline dt_tensor *dt_test_build_avgpool(dt_tensor **in, void *a) {
    (void)a;
    return dt_global_avgpool(in[0]);
}

#endif
