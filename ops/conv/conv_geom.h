/* conv_geom.h: what a 2-D convolution is asked - its geometry (kernel, stride, padding,
 * dilation), shared by plain and deformable convolutions, their kernels and their layers, and
 * the engine a bf16 channels-last conv's passes run on (dt_conv_algo, docs/conv.md "The plan"). */
#ifndef DT_CONV_GEOM_H
#define DT_CONV_GEOM_H

#include "core/dt_api.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
DT_PUBLIC_BEGIN

typedef struct {
    int kh, kw; /* kernel size */
    int sh, sw; /* stride */
    int ph, pw; /* zero padding */
    int dh, dw; /* dilation */
} dt_conv_geom;

/* A square k x k kernel with the same stride/padding/dilation in both directions. */
static inline dt_conv_geom dt_geom(int k, int stride, int pad, int dil) {
    dt_conv_geom g = {k, k, stride, stride, pad, pad, dil, dil};
    return g;
}

/* Output size along one axis; <= 0 means the input is too small for the kernel. */
static inline int64_t dt_conv_out_size(int64_t in, int k, int s, int p, int d) {
    return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

/* The dgrad of a stride-1 conv g is itself a stride-1 conv of dy with the taps mirrored: same
 * kernel and dilation, padding (k - 1) d - p on each axis (negative when p exceeds the window:
 * such a dgrad is not a plain conv). */
static inline dt_conv_geom dt_conv_dgrad_geom(dt_conv_geom g) {
    dt_conv_geom d = g;
    d.ph = (g.kh - 1) * g.dh - g.ph, d.pw = (g.kw - 1) * g.dw - g.pw;
    return d;
}

/* auto: the measured winner per shape (dt_conv_plan_bf16, conv_igemm.h); gemm: im2col + cuBLAS
 * everywhere (the reference path); igemm128 / igemm64: every supported pass on the mma.sync
 * implicit GEMM with that tile; sm90: every pass the Hopper engine supports on it, the others as
 * auto (tests, ablation; refused on a GPU without it). */
typedef enum {
    DT_CONV_ALGO_AUTO = 0,
    DT_CONV_ALGO_GEMM,
    DT_CONV_ALGO_IGEMM128,
    DT_CONV_ALGO_IGEMM64,
    DT_CONV_ALGO_SM90
} dt_conv_algo;
/* The default is the plan: inside the bf16 ResNet-18 step (graphs, batch 64, H200) it takes
 * 4.86 ms where im2col + cuBLAS everywhere takes 7.29 (docs/PERF.md section 18). */
#define DT_CONV_ALGO_DEFAULT DT_CONV_ALGO_AUTO

const char *dt_conv_algo_name(dt_conv_algo a);
int dt_conv_algo_parse(const char *s); /* -1 when s names none */

DT_PUBLIC_END
#ifdef __cplusplus
}
#endif
#endif
